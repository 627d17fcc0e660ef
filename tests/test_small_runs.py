"""A run's fixed costs (docs/engine.md "Small runs"): rows the driver holds reach Spark without
a Python worker, the driver and the worker daemon import pyspark from the installed package
(cached bytecode) instead of spark-submit's pyspark.zip, a stopped session does not wait for
the accumulator server, and the small-run Spark settings write what code generation writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_apps.local_data import balanced_slices, local_frame
from spark_apps.pyspark_path import redundant_zips


def test_slices_are_balanced_by_size_heaviest_first():
    sizes = [5, 100, 7, 60, 40, 1, 30]
    slices = balanced_slices(sizes, 3)
    assert sorted(i for s in slices for i in s) == list(range(len(sizes)))
    totals = [sum(sizes[i] for i in s) for s in slices]
    assert totals == sorted(totals, reverse=True) and totals[0] - totals[-1] <= max(sizes[i] for i in slices[-1])
    assert all([sizes[i] for i in s] == sorted((sizes[i] for i in s), reverse=True) for s in slices)
    assert balanced_slices([3, 2], 8) == [[0], [1]]  # never an empty slice
    assert balanced_slices([], 4) == []


def test_decode_tasks_grow_with_the_archive_not_past_its_objects(monkeypatch):
    """Two decode tasks per core for a small archive; for a large one about 64 stored MB each
    (CDC_REPLAY_DECODE_TASK_MB), so a task's share stays the same size; never more tasks than
    objects (an object is read whole by one task)."""
    from spark_apps.replay import DECODE_TASK_MB_ENV, decode_tasks

    mb = 1 << 20
    assert decode_tasks([3 * mb] * 40, 2) == 4  # 120 MB: two per core
    assert decode_tasks([4 * mb] * 160, 2) == 10 and decode_tasks([4 * mb] * 640, 2) == 40
    assert decode_tasks([1000 * mb] * 3, 2) == 3 and decode_tasks([10], 8) == 1
    monkeypatch.setenv(DECODE_TASK_MB_ENV, "16")
    assert decode_tasks([4 * mb] * 160, 2) == 40


@pytest.mark.spark
def test_driver_rows_become_a_frame_without_a_python_worker(spark):
    rows = [("s3://b/x", 10, None), ("s3://b/y", 300, "p=1"), ("s3://b/z", 20, None)]
    sliced = local_frame(spark, rows, "uri string, size long, params string", [[1], [2, 0]])
    lineage = sliced._jdf.queryExecution().toRdd().toDebugString()
    assert "PythonRDD" not in lineage, lineage  # what spark.createDataFrame(list) gives
    assert sliced.rdd.glom().map(lambda part: [r.uri for r in part]).collect() == [["s3://b/y"], ["s3://b/z", "s3://b/x"]]
    assert spark.conf.get("spark.sql.execution.arrow.localRelationThreshold") != "0"  # restored
    nested = local_frame(spark, [("db", [1, 2], [(["a", "b"], b"\x00")]), ("db2", None, None)],
                         "database string, after array<bigint>, row_columns array<struct<names: array<string>, "
                         "default: binary>>")
    assert "LocalTableScan" in nested._jdf.queryExecution().executedPlan().toString()  # broadcast without a job
    assert [r.asDict(recursive=True) for r in nested.collect()] == [
        {"database": "db", "after": [1, 2], "row_columns": [{"names": ["a", "b"], "default": bytearray(b"\x00")}]},
        {"database": "db2", "after": None, "row_columns": None}]
    assert local_frame(spark, [], "wm bigint").count() == 0


def _site(tmp_path, py4j_version="0.10.9.9"):
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "py4j").mkdir()
    (site / "py4j" / "version.py").write_text(f"__version__ = '{py4j_version}'\n")
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"")
    return site, lib


def test_the_zips_of_an_installed_pyspark_are_dropped_others_kept(tmp_path):
    site, lib = _site(tmp_path)
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    assert redundant_zips([*zips, str(site)]) == zips
    assert redundant_zips(zips) == []  # the installed package is not importable: keep them
    other, other_lib = _site(tmp_path / "other", py4j_version="0.10.9.7")
    assert redundant_zips([str(other_lib / "py4j-0.10.9.9-src.zip"), str(other)]) == []  # another py4j
    spark_home = tmp_path / "spark" / "python" / "lib"  # a Spark distribution's own zips
    spark_home.mkdir(parents=True)
    (spark_home / "pyspark.zip").write_bytes(b"")
    assert redundant_zips([str(spark_home / "pyspark.zip"), str(site)]) == []


def test_the_driver_and_the_daemon_import_pyspark_from_the_installed_package():
    """As spark-submit and Spark's worker factory start them: the zips first on PYTHONPATH."""
    import pyspark

    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    zips = [os.path.join(lib, n) for n in sorted(os.listdir(lib)) if n.endswith(".zip")]
    probe = ("from spark_apps.pyspark_path import prefer_installed\nprefer_installed()\n"
             "import pyspark, py4j\nprint(pyspark.__file__)\nprint(py4j.__file__)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(zips)}).stdout.split()
    assert out == [pyspark.__file__, __import__("py4j").__file__]
    assert ".zip" not in "".join(out)


@pytest.mark.spark
def test_stop_session_leaves_the_accumulator_server_to_a_thread_that_ends():
    """In a process of its own (one SparkContext per process): the session is stopped, and
    the accumulator server is shut down by a thread of its own, which ends."""
    probe = """
import threading
from spark_apps.replay import build_session, stop_session
spark = build_session("local[1]", "stop-test", [])
total = spark.sparkContext.accumulator(0)
spark.range(3).foreach(lambda row: total.add(1))
assert total.value == 3
stop_session(spark)
stopper = [t for t in threading.enumerate() if t.name == "cdc-replay-accumulator-stop"]
assert spark.sparkContext._jsc is None and len(stopper) == 1
stopper[0].join(10)
print("stopped", stopper[0].is_alive())
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.stdout.split()[-2:] == ["stopped", "False"], out.stderr[-3000:]


def test_an_expression_costs_one_py4j_call_per_function(spark):
    """The driver builds thousands of expressions per run: with the JVM lookups memoized
    (stages/session.py `memoize_jvm_lookups`) each `F.*` function, column name and literal is
    one py4j round trip, not three (class lookup, method lookup, call)."""
    from py4j import clientserver, java_gateway
    from pyspark.sql import functions as F

    def build():
        return F.when(F.col("a") == 1, F.lit("x")).otherwise(F.upper(F.col("b")))

    build()  # any first lookup of this process is done
    sent = []
    originals = {cls: cls.send_command for cls in (clientserver.ClientServerConnection, java_gateway.GatewayConnection)}
    try:
        for cls, original in originals.items():
            cls.send_command = lambda self, command, original=original: sent.append(command) or original(self, command)
        build()
    finally:
        for cls, original in originals.items():
            cls.send_command = original
    # col, ==, lit, when, col, upper, otherwise: one call each (dropped Python objects may add
    # a release of a JVM reference: "m" commands)
    assert len([c for c in sent if not c.startswith("m")]) == 7, sent


@pytest.mark.spark
def test_shuffle_partitions_fit_the_records_read_and_are_only_ever_lowered(spark):
    """A run's own session reads its shuffles into one partition per
    RECORDS_PER_SHUFFLE_PARTITION records, at least one per core (10k records: the cores'
    count, not the session's 8), never more than the session sets (1M records keep it)."""
    from spark_apps.stages.session import RECORDS_PER_SHUFFLE_PARTITION, SHUFFLE_PARTITIONS, fit_shuffle_partitions

    given = spark.conf.get(SHUFFLE_PARTITIONS)
    cores = spark.sparkContext.defaultParallelism
    try:
        spark.conf.set(SHUFFLE_PARTITIONS, "64")
        assert fit_shuffle_partitions(spark, 10_000) == cores == int(spark.conf.get(SHUFFLE_PARTITIONS))
        spark.conf.set(SHUFFLE_PARTITIONS, "64")
        records = (cores + 3) * RECORDS_PER_SHUFFLE_PARTITION
        assert fit_shuffle_partitions(spark, records) == cores + 3
        spark.conf.set(SHUFFLE_PARTITIONS, "8")
        assert fit_shuffle_partitions(spark, 1_000_000) == 8 == int(spark.conf.get(SHUFFLE_PARTITIONS))
    finally:
        spark.conf.set(SHUFFLE_PARTITIONS, given)


def test_a_local_session_writes_arrow_without_its_bounds_checks(spark):
    """build_session turns Arrow Java's bounds checks off in a local JVM (stages/session.py
    `arrow_bounds_checks`) before its first Arrow use; the rows still reach Python whole.
    $CDC_REPLAY_ARROW_CHECKS takes on or off only."""
    from spark_apps.stages.session import arrow_bounds_checks

    assert arrow_bounds_checks(spark, {"CDC_REPLAY_ARROW_CHECKS": "on"}) is False
    assert arrow_bounds_checks(spark, {}) is False
    frame = spark.range(3).selectExpr("id", "array(cast(id as string), null) AS names", "map('k', id) AS extras")
    assert frame.toArrow().to_pylist() == [
        {"id": i, "names": [str(i), None], "extras": [("k", i)]} for i in range(3)]
    with pytest.raises(ValueError, match="CDC_REPLAY_ARROW_CHECKS"):
        arrow_bounds_checks(spark, {"CDC_REPLAY_ARROW_CHECKS": "maybe"})
