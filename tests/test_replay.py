"""End-to-end replays of generated TiCDC canal-json histories (duplicates, out-of-order
partitions, PK changes, insert-delete-insert, DDL, pending transactions, corrupt records),
checked against the generator's own simulation and the reference replayer in tests/."""

from __future__ import annotations

import gzip

import orjson
import pytest

from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive
from spark_apps.manifest import read_manifest
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import ReplayError, run

from .reference import reference_state

pytestmark = pytest.mark.spark
TIDB = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]


def replay(spark, source, output, *extra, emit="snapshot"):
    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", emit, *TIDB, *extra]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    generated = generate(transactions=400, partitions=3, seed=11, bad_values=2, duplicate_rate=0.08)
    path = str(tmp_path_factory.mktemp("archive"))
    write_archive(generated.records, path, records_per_object=150, bad_lines=1)
    return generated, path


@pytest.fixture(scope="module")
def snapshot(spark, history, tmp_path_factory):
    generated, source = history
    output = str(tmp_path_factory.mktemp("snapshot"))
    manifest = replay(spark, source, output, "--max-bad-records", "3")
    return manifest, output


def test_snapshot_equals_the_simulated_state_at_the_last_watermark(history, snapshot):
    generated, _ = history
    manifest, output = snapshot
    assert read_snapshot(output) == {k: v for k, v in generated.expected.items() if v}
    assert manifest["cut"]["commit_ts"] == generated.cut_ts
    assert read_snapshot(output) == reference_state(generated.events, generated.cut_ts)


def test_counts_reconcile_and_name_every_kind_of_event(history, snapshot):
    generated, _ = history
    manifest, _ = snapshot
    counts = manifest["counts"]
    assert counts["reconciled"]
    assert counts["read"] == counts["applied"] + counts["duplicate"] + counts["pending"] + counts["filtered"] + counts["quarantined"]
    assert counts["quarantined"] == 3  # 2 values that are not canal-json, 1 line that is not a record
    assert counts["duplicate"] > 0 and counts["pending"] > 0
    assert counts["records"] == len(generated.records) + 1
    assert manifest["schema_conflicts"] == []  # the events agree with the DDL history
    rows = sum(len(v) for v in generated.expected.values())
    assert manifest["output"]["rows"] == rows == sum(t["rows"] for t in manifest["tables"])


def test_quarantine_names_object_line_offset_protocol_and_reason(snapshot):
    manifest, output = snapshot
    lines = []
    for info in storage.list_objects(storage.join(output, "_quarantine")):
        lines += [orjson.loads(line) for line in gzip.decompress(storage.read_bytes(info.uri)).splitlines()]
    assert len(lines) == 3
    decode = [q for q in lines if q["error_stage"] == "decode"]
    archive = [q for q in lines if q["error_stage"] == "archive"]
    assert len(decode) == 2 and len(archive) == 1
    for q in decode:
        assert q["protocol"] == "canal-json" and q["offset"] is not None and q["object"].endswith(".jsonl.gz")
        assert "value is not JSON" in q["error"] and f"offset {q['offset']}" in q["error"]
        assert q["value"]  # the raw record is kept for fixing and replaying
    assert archive[0]["line"] >= 1 and "not JSON" in archive[0]["error"]


def test_the_output_is_an_archive_with_watermarks_on_every_partition(snapshot):
    manifest, output = snapshot
    objects = [storage.relative(o.uri, output) for o in storage.list_objects(output)]
    data = [o for o in objects if not o.startswith("_")]
    assert data and all(o.startswith("shop/") and o.endswith(".jsonl.gz") for o in data)
    assert "_manifest.json" in objects and not any(o.startswith("_staging") for o in objects)
    watermarks = {}
    for name in data:
        for line in storage.iter_lines(storage.join(output, name)):
            record = orjson.loads(line)
            value = orjson.loads(__import__("base64").b64decode(record["value"]))
            if value["type"] == "TIDB_WATERMARK":
                watermarks[record["partition"]] = value["_tidb"]["watermarkTs"]
    assert watermarks == {p: manifest["cut"]["commit_ts"] for p in range(3)}


def test_rerun_replaces_the_output_and_never_duplicates(spark, history, tmp_path):
    generated, source = history
    output = str(tmp_path / "out")
    first = replay(spark, source, output, "--max-bad-records", "3", "--target-partitions", "5")
    second = replay(spark, source, output, "--max-bad-records", "3")
    objects = sorted(storage.relative(o.uri, output) for o in storage.list_objects(output))
    assert not any(o.startswith("shop/3/") or o.startswith("shop/4/") for o in objects)  # stale partitions gone
    assert first["counts"] == second["counts"]
    assert read_snapshot(output) == {k: v for k, v in generated.expected.items() if v}
    third = replay(spark, source, output, "--max-bad-records", "3")
    assert sorted(storage.relative(o.uri, output) for o in storage.list_objects(output)) == objects
    assert third["output"]["records"] == second["output"]["records"]


def test_as_of_replays_the_state_at_that_commit_ts(spark, history, tmp_path):
    generated, source = history
    row_ts = sorted({e["commit_ts"] for e in generated.events if e["kind"] == "row"})
    as_of = row_ts[len(row_ts) // 2]
    manifest = replay(spark, source, str(tmp_path / "out"), "--as-of", str(as_of), "--max-bad-records", "3")
    assert manifest["cut"]["commit_ts"] == as_of
    assert read_snapshot(str(tmp_path / "out")) == reference_state(generated.events, as_of)


def test_tables_filter_keeps_only_matching_tables(spark, history, tmp_path):
    generated, source = history
    manifest = replay(spark, source, str(tmp_path / "out"), "--tables", "shop.ord*", "--max-bad-records", "3")
    assert set(read_snapshot(str(tmp_path / "out"))) == {("shop", "orders")}
    assert manifest["counts"]["filtered"] > 0 and manifest["counts"]["reconciled"]


def test_topics_output_replays_to_the_same_snapshot(spark, history, tmp_path):
    generated, source = history
    topics = str(tmp_path / "topics")
    manifest = replay(spark, source, topics, "--max-bad-records", "3", emit="topics")
    # every row change up to the cut, once (duplicates dropped, pending left out)
    changes = [e for e in generated.events if e["kind"] == "row" and e["commit_ts"] <= generated.cut_ts]
    assert manifest["output"]["rows"] == len(changes)
    again = str(tmp_path / "again")
    replay(spark, topics, again)
    assert read_snapshot(again) == {k: v for k, v in generated.expected.items() if v}


def test_snapshot_on_s3(spark, bucket):
    generated = generate(transactions=80, partitions=2, seed=3)
    source, output = f"{bucket}/archive", f"{bucket}/snapshot"
    write_archive(generated.records, source)
    manifest = replay(spark, source, output)
    assert read_snapshot(output) == {k: v for k, v in generated.expected.items() if v}
    assert read_manifest(output)["run_id"] == manifest["run_id"]
    assert manifest["counts"]["quarantined"] == 0


def test_errors_before_any_work_name_the_problem(spark, tmp_path):
    with pytest.raises(ReplayError, match="valid protocols: avro, canal-json, canal-protobuf, craft"):
        run(ReplayArgs.from_namespace(parser().parse_args(
            ["--source", str(tmp_path / "empty"), "--protocol", "nope", "--output", str(tmp_path / "o"),
             "--emit", "snapshot"])), spark=spark)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReplayError, match="no archive objects"):
        replay(spark, str(tmp_path / "empty"), str(tmp_path / "o"))
    with pytest.raises(ReplayError, match="unknown option 'enable-tidb'"):
        replay(spark, str(tmp_path / "empty"), str(tmp_path / "o"), "--target-option", "enable-tidb=true")
