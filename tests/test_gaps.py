"""Offset gaps are reported, overlapping objects are read once (issue 12, point 7).

A canal-json archive written as the Kafka Connect S3 sink lays it out (one object per run of
offsets, named by its start offset), then damaged the ways real archives are: an object of
partition 0 is missing (offsets 10..19), partition 1's objects overlap (offsets 5..9 are in two
objects, one of them a record that cannot be decoded), and partition 2 starts mid-stream at
offset 1000 (not a gap). The expected gaps, counts and rows are worked out here by hand from
the layout, not by the replay's code.
"""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import KafkaRecord, encode_records, get_codec
from cdc_codecs.archive import format_record, object_name
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from spark_apps import manifest as manifest_mod
from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import ReplayError, run

pytestmark = pytest.mark.spark
OPTIONS = {"enable-tidb-extension": "true"}
KEY = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
BASE_TS = 449_500_000_000_000_000


def insert(key: int, ts: int) -> dict:
    return new_event(Kind.ROW, op=Op.INSERT, commit_ts=ts, execute_ts_ms=ts >> 18, database="shop", table="t",
                     key_columns=["id"], after=[{"name": "id", "mysql_type": "int", "flags": KEY,
                                                 "value": str(key).encode(), "label": None}])


def records(partition: int, first_offset: int, count: int, first_key: int) -> list[KafkaRecord]:
    codec = get_codec("canal-json", OPTIONS)
    events = [insert(first_key + i, BASE_TS + ((first_key + i) << 18)) for i in range(count)]
    out = []
    for i, r in enumerate(encode_records(codec, events, topic="cdc", partitions=1)):
        out.append(KafkaRecord("cdc", partition, first_offset + i, None, r.key, r.value))
    return out


def write(prefix: str, chunk: list[KafkaRecord]) -> None:
    lines = [format_record(r) for r in chunk]
    uri = storage.join(prefix, object_name(chunk[0].topic, chunk[0].partition, chunk[0].offset))
    storage.write_bytes(uri, gzip.compress(b"\n".join(lines) + b"\n"))


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> str:
    prefix = str(tmp_path_factory.mktemp("gaps") / "archive")
    p0 = records(0, 0, 30, first_key=0)  # keys 0..29 at offsets 0..29
    write(prefix, p0[:10])
    write(prefix, p0[20:])  # the object holding offsets 10..19 is missing
    p1 = records(1, 0, 15, first_key=100)  # keys 100..114 at offsets 0..14
    p1[7] = KafkaRecord("cdc", 1, 7, None, None, b"{not canal-json")  # a bad record, key 107 never arrives
    write(prefix, p1[:10])
    write(prefix, p1[5:])  # overlaps the first object: offsets 5..9 twice
    write(prefix, records(2, 1000, 5, first_key=200))  # keys 200..204, mid-stream at offset 1000
    # the table was created before the archive starts (no DDL in it): its schema is given
    storage.write_bytes(prefix + "-schema.sql", b"CREATE TABLE `shop`.`t` (`id` int NOT NULL, PRIMARY KEY (`id`));")
    return prefix


def replay(spark, source, output, *extra):
    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", "snapshot",
            "--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true",
            "--max-bad-records", "1", "--schema", source + "-schema.sql", *extra]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def test_gaps_are_listed_and_overlaps_counted_once(spark, archive, tmp_path):
    manifest = replay(spark, archive, str(tmp_path / "out"))
    assert manifest["gaps"] == {"count": 1, "missing_offsets": 10,
                                "listed": [{"topic": "cdc", "partition": 0, "from": 10, "to": 19}]}
    by_partition = {p["partition"]: p for p in manifest["partitions"]}
    assert {n: (p["min_offset"], p["max_offset"], p["offsets"]) for n, p in by_partition.items()} == {
        0: (0, 29, 20), 1: (0, 14, 15), 2: (1000, 1004, 5)}
    c = manifest["counts"]
    # 20 + 20 (15 offsets, 5 of them twice) + 5 records; 40 distinct offsets
    assert (c["records"], c["offsets"]) == (45, 40)
    # the 5 overlapping records are duplicates, the bad one (offset 7, read twice) is quarantined once
    assert (c["applied"], c["duplicate"], c["quarantined"]) == (20 + 14 + 5, 5, 1)
    assert c["reconciled"] and manifest["quarantine"]["records"] == 1
    want = {(str(k).encode(),) for k in [*range(10), *range(20, 30), *range(100, 115), *range(200, 205)] if k != 107}
    assert set(read_snapshot(str(tmp_path / "out"), "canal-json", OPTIONS)[("shop", "t")]) == want

    text = manifest_mod.summary(manifest)
    assert "offset gaps      1 holes, 10 offsets missing" in text
    assert "cdc/0  offsets 10 .. 19" in text
    assert "5 of them read twice from overlapping objects" in text
    assert any("holes in the source offsets" in w for w in manifest["warnings"])


def test_require_contiguous_fails_the_run_naming_the_hole(spark, archive, tmp_path):
    with pytest.raises(ReplayError, match=r"--require-contiguous: .*cdc/0 offsets 10\.\.19"):
        replay(spark, archive, str(tmp_path / "out"), "--require-contiguous")
    assert not storage.exists(storage.join(str(tmp_path / "out"), manifest_mod.MANIFEST))


def test_the_distinct_offset_count_is_proven_from_runs_or_left_to_spark():
    """The decode tasks' runs of strictly increasing offsets (spark_apps/lean_decode.py) prove a
    partition's distinct offsets without a shuffle where they can; None sends it to Spark."""
    import pyarrow as pa

    from spark_apps.gaps import proven_offsets
    from spark_apps.lean_decode import MAX_RUNS, _Runs

    def r(lo, hi, n):
        return {"lo": lo, "hi": hi, "n": n}

    assert proven_offsets([]) == 0
    assert proven_offsets([r(20, 29, 10), r(0, 9, 10)]) == 20  # disjoint, one with a hole or not
    assert proven_offsets([r(0, 9, 4), r(10, 19, 10)]) == 14
    assert proven_offsets([r(0, 9, 10), r(5, 14, 10), r(14, 20, 7)]) == 21  # overlapping, no holes: the union
    assert proven_offsets([r(0, 9, 10), r(5, 14, 9)]) is None  # overlapping with a hole: not proven
    assert proven_offsets([r(0, 9, -1)]) is None  # too scattered to keep
    # a run with holes (or too scattered) inside hole-free runs adds nothing: a partition's objects
    # split among decode tasks, parts of it read twice
    assert proven_offsets([r(0, 9, 10), r(10, 19, 10), r(0, 19, 12)]) == 20
    assert proven_offsets([r(0, 9, 10), r(2, 5, 2), r(3, 8, -1)]) == 10
    assert proven_offsets([r(0, 9, 10), r(3, 12, 5)]) is None  # sticks out of the hole-free union
    assert proven_offsets([r(0, 4, 5), r(8, 9, 2), r(0, 9, 8)]) is None  # spans 5..7, which no hole-free run holds

    def batch(rows):  # (topic, partition, offset, event_index, error_stage)
        names = ["topic", "partition", "offset", "event_index", "error_stage"]
        return pa.RecordBatch.from_arrays([pa.array([row[i] for row in rows]) for i in range(5)], names=names)

    runs = _Runs()
    # partitions interleaved, a second event of a record, a line that is not a record, a record read twice
    runs.add(batch([("t", 0, 5, 0, None), ("t", 1, 0, 0, None), ("t", 0, 6, 0, None), ("t", 0, 6, 1, None),
                    ("t", 0, 9, 0, None), (None, None, None, 0, "archive"), ("t", 0, 3, 0, "archive")]))
    runs.add(batch([("t", 0, 10, 0, None), ("t", 0, 7, 0, None), ("t", None, 1, 0, "decode")]))
    got = {(x["topic"], x["partition"], x["lo"], x["hi"], x["n"]) for x in runs.rows()}
    assert got == {("t", 0, 5, 10, 4), ("t", 0, 7, 7, 1), ("t", 1, 0, 0, 1), ("t", None, 1, 1, 1)}
    # 5, 6, 7, 9, 10 are distinct, but the run 5..10 has holes and 7 falls inside it: not proven
    assert proven_offsets([x for x in runs.rows() if x["partition"] == 0]) is None
    assert proven_offsets([x for x in runs.rows() if x["partition"] == 1]) == 1

    apart = _Runs()  # hole-free runs apart stay apart (another task may hold what lies between); adjacent ones join
    apart.add(batch([("t", 0, o, 0, None) for o in range(0, 5)]))
    apart.add(batch([("t", 0, o, 0, None) for o in range(10, 15)]))
    apart.add(batch([("t", 0, o, 0, None) for o in range(15, 20)]))
    apart.add(batch([("t", 0, o, 0, None) for o in (30, 32)]))  # with holes: joins the run before it
    assert [(x["lo"], x["hi"], x["n"]) for x in apart.rows()] == [(0, 4, 5), (10, 32, 12)]

    scattered = _Runs()
    scattered.add(batch([("t", 0, o, 0, None) for o in range(2 * MAX_RUNS, 0, -1)]))  # every offset a run
    assert [(x["lo"], x["hi"], x["n"]) for x in scattered.rows()] == [(1, 2 * MAX_RUNS, -1)]
    assert proven_offsets(scattered.rows()) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12), st.integers(1, 3), st.integers(0, 2)), max_size=8),
       st.randoms(use_true_random=False))
def test_a_proven_count_is_the_distinct_count(objects, rnd):
    """Objects of one partition (a start, a length, every k-th offset kept), split among decode
    tasks in any order, some read twice: what the runs prove is the distinct offset count."""
    import pyarrow as pa

    from spark_apps.gaps import proven_offsets
    from spark_apps.lean_decode import _Runs

    objs = [list(range(start, start + length, step)) for start, length, step, _ in objects]
    objs += [objs[i] for i, (*_, twice) in enumerate(objects) if twice == 2]
    rnd.shuffle(objs)
    tasks = [_Runs() for _ in range(3)]
    for obj in objs:
        tasks[rnd.randrange(3)].add(pa.RecordBatch.from_arrays(
            [pa.array(["t"] * len(obj)), pa.array([0] * len(obj)), pa.array(obj, pa.int64()), pa.array([0] * len(obj)),
             pa.array([None] * len(obj), pa.string())], names=["topic", "partition", "offset", "event_index", "error_stage"]))
    proven = proven_offsets([x for t in tasks for x in t.rows()])
    assert proven is None or proven == len({o for obj in objs for o in obj})


def test_partitions_the_runs_do_not_prove_are_counted_by_spark(spark):
    from spark_apps.gaps import count_offsets

    offsets = [0, 2, 4, 1, 2, 3, 4]  # two objects of partition 0 overlapping, one with holes: 5 distinct
    records = spark.createDataFrame([("t", 0, o, 0) for o in offsets] + [("t", 1, 7, 0), ("t", 1, 7, 1)],
                                    "topic string, partition int, offset long, event_index int")
    stats = [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
    runs = [{"topic": "t", "partition": 0, "lo": 0, "hi": 4, "n": 3}, {"topic": "t", "partition": 0, "lo": 1, "hi": 4, "n": 4},
            {"topic": "t", "partition": 1, "lo": 7, "hi": 7, "n": 1}]
    count_offsets(records, stats, runs)
    assert [s["offsets"] for s in stats] == [5, 1]
