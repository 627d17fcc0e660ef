"""Benchmark (not a test): the replay's first phase, read + decode + statistics (issue 13 points
1 and 4), as it was (full images in the `decoded` cache, ids by Spark's xxhash64, the dictionary
as its own aggregate, `countDistinct(offset)`) and as it is (spark_apps/lean_decode.py: lean
rows and one `aux` row per decode task), alternating in one warm JVM on the same archive.

Per round: wall seconds, executor CPU seconds of the JVM (the stages of the round's jobs, from
the Spark UI's REST API) and CPU seconds of the Python workers (psutil).

    .venv/bin/python bench/bench_decode_pass.py ARCHIVE_DIR [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from profile_replay import _PythonCpu  # noqa: E402


def _jvm_cpu(spark, group: str) -> float:
    sc = spark.sparkContext
    stages = {s for j in sc.statusTracker().getJobIdsForGroup(group) for s in sc.statusTracker().getJobInfo(j).stageIds}
    with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete") as r:
        return sum(s["executorCpuTime"] for s in json.load(r) if s["stageId"] in stages) / 1e9


def before(spark, objects):
    """The phase as of main d7a0b96."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.contract import ProtocolSpec
    from spark_apps.replay import _decode

    decoded = T.with_schema_ids(_decode(spark, objects, ProtocolSpec("canal-json", {"enable-tidb-extension": "true"})))
    decoded = decoded.persist(StorageLevel.DISK_ONLY)
    records = decoded.where(F.col("topic").isNotNull() & ~F.coalesce(F.col("error_stage") == "archive", F.lit(False)))
    offset = F.when((F.col("event_index") == 0) & F.col("offset").isNotNull(), F.col("offset"))
    stats = records.groupBy("topic", "partition").agg(
        F.count(F.when(F.col("event_index") == 0, 1)).alias("records"),
        F.max(F.when(F.col("kind") == "watermark", F.col("watermark_ts"))).alias("watermark"),
        F.min("commit_ts").alias("min_commit_ts"), F.max("commit_ts").alias("max_commit_ts"),
        F.count(F.when((F.col("kind") == "row") & F.col("commit_ts").isNull(), 1)).alias("rows_without_commit_ts"),
        F.count(F.when((F.col("op") == "update") & F.col("before").isNull(), 1)).alias("updates_without_before"),
        F.min(offset).alias("min_offset"), F.max(offset).alias("max_offset"),
        F.countDistinct(offset).alias("offsets"),
        F.collect_set(F.when(F.col("kind") == "ddl", F.struct("database", "table", "ddl_query"))).alias("_ddl"))
    entries = T.schema_entries(decoded)
    both = stats.select(F.struct(*stats.columns).alias("stats"),
                        F.lit(None).cast(entries.schema.simpleString()).alias("entry")).unionByName(
        entries.select(F.lit(None).cast(stats.schema.simpleString()).alias("stats"),
                       F.struct(*entries.columns).alias("entry")))
    collected = both.collect()
    T.schema_dictionary(r["entry"] for r in collected if r["entry"] is not None)
    return decoded, sorted(((r["stats"]["topic"], r["stats"]["partition"], r["stats"]["records"],
                             r["stats"]["offsets"]) for r in collected if r["stats"] is not None))


def after(spark, objects):
    """The phase as spark_apps.replay._run does it now."""
    from pyspark import StorageLevel

    from spark_apps.contract import ProtocolSpec
    from spark_apps.replay import _decode, _first_pass

    decoded = _decode(spark, objects, ProtocolSpec("canal-json", {"enable-tidb-extension": "true"}), lean=True)
    decoded = decoded.persist(StorageLevel.DISK_ONLY)
    _, partition_stats, _ = _first_pass(decoded)
    return decoded, sorted((s["topic"], s["partition"], s["records"], s["offsets"]) for s in partition_stats)


def worker_cost(archive: str, limit: int) -> None:
    """CPU seconds of the decode function alone and with `leaned` around it, in this process
    (what the Python workers pay; their CPU is not in the JVM's figure)."""
    import pyarrow as pa

    from spark_apps import storage
    from spark_apps.archive_io import decode_objects_fn
    from spark_apps.lean_decode import leaned

    objects = sorted(storage.list_objects(storage.normalize(archive)), key=lambda o: o.uri)[:limit]
    batch = pa.RecordBatch.from_pydict({"uri": [o.uri for o in objects], "size": [o.size for o in objects]})
    decode = decode_objects_fn("canal-json", {"enable-tidb-extension": "true"})
    for name, fn in (("decode", decode), ("decode + lean", leaned(decode))) * 2:
        t0 = time.process_time()
        rows = sum(b.num_rows for b in fn(iter([batch])))
        print(f"worker, {len(objects)} objects, {name}: {time.process_time() - t0:.2f} CPU s, {rows} rows", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--worker", type=int, metavar="OBJECTS", help="only the Python worker's cost, in this process")
    args = parser.parse_args()
    if args.worker:
        worker_cost(args.archive, args.worker)
        return 0

    from spark_apps import storage
    from spark_apps.replay import build_session

    spark = build_session(args.master, "bench-decode-pass", [
        "spark.driver.memory=6g", "spark.sql.shuffle.partitions=16", "spark.ui.enabled=true", "spark.ui.port=0"])
    objects = list(storage.list_objects(storage.normalize(args.archive)))
    python = _PythonCpu()
    results: dict[str, list] = {}
    for i in range(args.rounds + 1):  # round 0 warms the JVM and the workers
        for name, fn in (("before", before), ("after", after)):
            group = f"{name}-{i}"
            spark.sparkContext.setJobGroup(group, group)
            py0, t0 = python.sample(), time.time()
            decoded, stats = fn(spark, objects)
            wall, py = time.time() - t0, python.sample() - py0
            decoded.unpersist(blocking=True)
            jvm = _jvm_cpu(spark, group)
            print(f"{group}: {wall:.1f} s wall, JVM CPU {jvm:.1f} s, Python CPU {py:.1f} s, load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            if i:
                results.setdefault(name, []).append((wall, jvm, py, stats))
    assert results["before"][0][3] == results["after"][0][3], "the statistics differ"
    for name, rows in results.items():
        print(f"{name}: median wall {sorted(r[0] for r in rows)[len(rows) // 2]:.1f} s, JVM CPU "
              f"{sorted(r[1] for r in rows)[len(rows) // 2]:.1f} s, Python CPU {sorted(r[2] for r in rows)[len(rows) // 2]:.1f} s")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
