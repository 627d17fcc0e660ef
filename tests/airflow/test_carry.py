"""An interval without archive objects keeps the chain going: the stage task plans a carry and
the replay task writes, without Spark, the output the next interval starts from (the previous
snapshot, or the table schemas and no records). On the local filesystem, with previous outputs
committed by the app's own manifest.build / manifest.commit (the shape a real run writes); the
end-to-end run is tests/airflow/test_dags_run.py."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import time

import pytest

from cdc_replay_airflow.hooks.archive import ArchiveHook
from cdc_replay_airflow.metrics import Incomplete, check_complete
from cdc_replay_airflow.tasks import Refused, carry_forward, plan_interval, publish, stage, validate
from spark_apps import manifest as manifest_mod
from spark_apps import lease, storage
from spark_apps.options import ReplayArgs, parser
from spark_apps.storage import ObjectInfo

UTC = dt.timezone.utc
START = dt.datetime(2026, 1, 1, tzinfo=UTC)
SCHEMAS = ["CREATE TABLE `shop`.`orders` (`id` BIGINT NOT NULL, `amount` DECIMAL(12,2), PRIMARY KEY (`id`))"]


def h(hour: int) -> dt.datetime:
    return START + dt.timedelta(hours=hour)


def tso(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000) << 18


def committed_output(output: str, emit: str, *, until: int, complete: int, rows: int = 3) -> dict:
    """What the app commits for an interval (manifest.build + manifest.commit), with `rows`
    records in one data object for a snapshot."""
    argv = ["--source", "/archive", "--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true",
            "--output", output, "--emit", emit, "--until", str(until)]
    args = ReplayArgs.from_namespace(parser().parse_args(argv))
    staging = os.path.join(output, "_staging", "r1")
    data = os.path.join(staging, "data", "shop", "0", "shop+0+00000000000000000000.jsonl.gz")
    os.makedirs(os.path.dirname(data))
    with open(data, "wb") as f:
        f.write(gzip.compress(b"".join(b'{"record": %d}\n' % i for i in range(rows))))
    written = [{"uri": data, "topic": "shop", "partition": 0, "first_offset": 0, "last_offset": rows - 1,
                "records": rows, "events": rows, "rows": rows, "bytes": os.path.getsize(data)}]
    partitions = [{"topic": "shop", "partition": 0, "records": 10, "watermark": complete,
                   "min_commit_ts": until - 1000, "max_commit_ts": until - 10, "positioned": 0}]
    counts = [{"status": "applied", "kind": "row", "database": "shop", "table": "orders", "error_stage": None,
               "events": 10, "min_commit_ts": until - 1000, "max_commit_ts": until - 10}]
    manifest = manifest_mod.build(
        manifest_mod.RunFacts(run_id="r1", args=args, source="/archive", output=output, started=time.time(),
                              source_options={"enable-tidb-extension": True}, target_protocol="canal-json",
                              target_options={"enable-tidb-extension": True}, window={"since": None, "until": until}),
        manifest_mod.ReadFacts(objects=[ObjectInfo("/archive/a.jsonl.gz", 100)], partition_stats=partitions,
                               cut=manifest_mod.compute_cut(partitions, until), counts=counts),
        manifest_mod.Outcome(
            written=written, quarantine_objects=[], ddl_log=[], ddl_failures=[], schemas=SCHEMAS,
            table_rows=[{"database": "shop", "table": "orders", "rows": rows}] if emit == "snapshot" else None))
    manifest_mod.commit(output, staging, manifest)
    return manifest


def config(tmp_path, emit: str, **extra) -> dict:
    os.makedirs(tmp_path / "archive" / "shop" / "0" / "dt=2026-01-01" / "hour=00", exist_ok=True)
    # an object archived in hour 00 only: the intervals [01:00, 02:00) and later have none
    with open(tmp_path / "archive" / "shop" / "0" / "dt=2026-01-01" / "hour=00" / "shop+0+0.jsonl.gz", "wb") as f:
        f.write(gzip.compress(b"{}\n"))
    return {"source": str(tmp_path / "archive"), "protocol": "canal-json",
            "protocol_options": {"enable-tidb-extension": "true"}, "output": str(tmp_path / "lake"),
            "emit": emit, "lateness_minutes": 0, **extra}


def run_empty_interval(tmp_path, emit: str, hour: int, *, previous=True, require_complete=True, **extra):
    """plan -> stage -> replay (carry_forward) -> validate -> publish for the interval starting at `hour`."""
    hook = ArchiveHook(aws_conn_id=None)
    planned = plan_interval(config(tmp_path, emit, **extra), h(hour), h(hour + 1), first_start=START,
                            previous=(h(hour - 1), h(hour)) if previous else None, exists=hook.exists)
    staged = stage(hook, planned["request"], dag_id="d", run_id=f"r{hour}",
                   interval=(h(hour), h(hour + 1)), schema_from=planned["schema_from"],
                   chain_missing=planned["chain_missing"])
    assert staged["staged"]["objects"] == 0 and staged["staged"]["mode"] == "carried"
    manifest = carry_forward(hook, staged)
    metrics = validate(hook, staged, dag_id="d", run_id=f"r{hour}", data_interval=tuple(planned["interval"]),
                       require_complete=require_complete)
    publish(hook, staged, metrics)
    return planned, staged, manifest, metrics


def _files(root) -> dict:
    return {os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
            for d, _dirs, names in os.walk(root) for n in names}


def test_an_empty_snapshot_interval_carries_the_previous_snapshot(tmp_path):
    lake = tmp_path / "lake"
    previous = committed_output(str(lake / "20260101T000000Z"), "snapshot", until=tso(h(1)) - 1,
                                complete=tso(h(1)) + 5)
    stale = lake / "20260101T010000Z" / "shop" / "9" / "stale.jsonl.gz"  # an earlier run's leftover
    os.makedirs(stale.parent)
    stale.write_bytes(b"stale")
    # the earlier run listed it (so it is ours to delete); notes.txt is the user's: left, reported
    (stale.parent.parent.parent / "_manifest.json").write_text(json.dumps({"committed": ["shop/9/stale.jsonl.gz"]}))
    (stale.parent.parent.parent / "notes.txt").write_bytes(b"mine")

    planned, staged, manifest, metrics = run_empty_interval(tmp_path, "snapshot", 1, require_complete=False)
    assert planned["request"]["base_snapshot"] == str(lake / "20260101T000000Z")
    assert staged["carry"]["from"] == str(lake / "20260101T000000Z")
    out = lake / "20260101T010000Z"
    data = {k: v for k, v in _files(out).items() if k not in ("_manifest.json", "notes.txt")}
    assert data == {k: v for k, v in _files(lake / "20260101T000000Z").items() if k != "_manifest.json"}
    assert (out / "notes.txt").read_bytes() == b"mine" and manifest["foreign_objects"] == ["notes.txt"]
    assert manifest["carried_from"] == str(lake / "20260101T000000Z")
    # built by the app's own builder (spark_apps.manifest.build): its version, its table rows
    assert manifest["version"] == manifest_mod.MANIFEST_VERSION and manifest["counts"]["reconciled"]
    assert [(t["table"], t["rows"], t["applied"]) for t in manifest["tables"]] == [("orders", 3, 0)]
    # what the app checks of a --base-snapshot, and the next interval's --since
    assert manifest["output"]["emit"] == "snapshot" and manifest["output"]["format"] == "kafka"
    assert manifest["cut"]["commit_ts"] == tso(h(2)) - 1 == planned["request"]["until"]
    assert manifest["window"]["base_cut"] == previous["cut"]["commit_ts"]
    assert manifest["schemas"] == SCHEMAS
    assert manifest["output"]["records"] == 3 and manifest["output"]["rows"] == 3
    assert [o["uri"] for o in manifest["output"]["objects"]] == [str(out / "shop/0/shop+0+00000000000000000000.jsonl.gz")]
    assert json.loads((out / "_manifest.json").read_text()) == manifest
    assert metrics["counts"]["read"] == 0 and metrics["counts"]["emitted"] == 3 and metrics["staging"] == "carried"
    assert "no archive object was archived in" in metrics["warnings"][0]

    # the interval after it chains from the carried output like from any other
    hook = ArchiveHook(aws_conn_id=None)
    after = plan_interval(config(tmp_path, "snapshot"), h(2), h(3), first_start=START, previous=(h(1), h(2)),
                          exists=hook.exists)
    assert after["request"]["base_snapshot"] == str(out) and after["request"]["since"] == manifest["cut"]["commit_ts"]

    # a rerun replaces the output as a whole: same objects, nothing added
    again = run_empty_interval(tmp_path, "snapshot", 1, require_complete=False)[2]
    assert {k: v for k, v in _files(out).items() if k not in ("_manifest.json", "notes.txt")} == data
    assert again["output"]["objects"] == manifest["output"]["objects"]


def test_without_a_watermark_an_empty_interval_is_not_published_when_completeness_is_required(tmp_path):
    lake = tmp_path / "lake"
    committed_output(str(lake / "20260101T000000Z"), "snapshot", until=tso(h(1)) - 1, complete=tso(h(1)) + 5)
    with pytest.raises(Incomplete) as e:
        run_empty_interval(tmp_path, "snapshot", 1)
    assert "no archive object was archived in this interval's objects window" in str(e.value)
    assert "set require_complete to false" in str(e.value)
    assert e.value.metrics["status"] == "incomplete"
    # the output is committed for inspection (not published)
    assert (lake / "20260101T010000Z" / "_manifest.json").exists()
    # the watermarks the previous interval read do cover it when they reach its end
    manifest = json.loads((lake / "20260101T010000Z" / "_manifest.json").read_text())
    manifest["cut"]["complete_commit_ts"] = tso(h(2))
    assert "complete for the window" in check_complete(manifest, tso(h(2)) - 1)


def test_an_empty_topics_interval_carries_the_table_schemas(tmp_path):
    lake = tmp_path / "lake"
    committed_output(str(lake / "20260101T000000Z"), "topics", until=tso(h(1)) - 1, complete=tso(h(1)) + 5)
    planned, staged, manifest, metrics = run_empty_interval(tmp_path, "topics", 1, require_complete=False)
    assert planned["schema_from"] == str(lake / "20260101T000000Z")
    out = lake / "20260101T010000Z"
    assert set(_files(out)) == {"_manifest.json"}  # no records
    assert manifest["schemas"] == SCHEMAS and manifest["output"]["records"] == 0 and manifest["tables"] == []
    assert manifest["window"]["base_snapshot"] is None
    assert metrics["counts"]["emitted"] == 0

    # the next interval (it has an object) starts from those schemas
    (tmp_path / "archive" / "shop" / "0" / "dt=2026-01-01" / "hour=02").mkdir(parents=True)
    (tmp_path / "archive" / "shop" / "0" / "dt=2026-01-01" / "hour=02" / "shop+0+5.jsonl.gz").write_bytes(
        gzip.compress(b"{}\n"))
    hook = ArchiveHook(aws_conn_id=None)
    after = plan_interval(config(tmp_path, "topics"), h(2), h(3), first_start=START, previous=(h(1), h(2)),
                          exists=hook.exists)
    assert after["schema_from"] == str(out)
    plan = stage(hook, after["request"], dag_id="d", run_id="r2", interval=(h(2), h(3)),
                 schema_from=after["schema_from"], chain_missing=after["chain_missing"])
    assert "carry" not in plan
    assert open(plan["request"]["schema"]).read() == SCHEMAS[0] + ";\n"


@pytest.mark.parametrize("source", ["sql", "storage-sink"])
def test_an_empty_first_interval_writes_an_empty_output_with_the_starting_schemas(tmp_path, source):
    if source == "sql":
        schema = tmp_path / "schema.sql"
        schema.write_text("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(8));\n")
    else:  # a TiCDC storage sink's root: its table schema files
        schema = tmp_path / "sink"
        (schema / "shop" / "t" / "meta").mkdir(parents=True)
        (schema / "shop" / "t" / "meta" / "schema_5_0000000005.json").write_text(json.dumps(
            {"Table": "t", "Schema": "shop", "Version": 1, "TableVersion": 5, "TableColumns": [
                {"ColumnName": "id", "ColumnType": "INT", "ColumnIsPk": "true"},
                {"ColumnName": "v", "ColumnType": "VARCHAR", "ColumnLength": "8"}]}))
    # the DAG starts at 01:00 here, and [01:00, 02:00) has no object
    hook = ArchiveHook(aws_conn_id=None)
    planned = plan_interval(config(tmp_path, "snapshot", schema=str(schema)), h(1), h(2), first_start=h(1))
    staged = stage(hook, planned["request"], dag_id="d", run_id="r1", interval=(h(1), h(2)))
    assert staged["carry"] == {"from": None, "objects_window": [h(1).isoformat(), h(2).isoformat()]}
    manifest = carry_forward(hook, staged)
    assert manifest["output"]["objects"] == [] and manifest["output"]["protocol"] == "canal-json"
    assert manifest["cut"]["commit_ts"] == tso(h(2)) - 1 and manifest["cut"]["complete_commit_ts"] is None
    assert len(manifest["schemas"]) == 1 and "`t`" in manifest["schemas"][0]


@pytest.mark.parametrize("emit, extra", [("snapshot", {}), ("history", {}),
                                         ("snapshot", {"target_format": "delta"})])
def test_an_empty_first_interval_with_a_base_export_is_refused(tmp_path, emit, extra):
    """The interval that starts from the export has no archive object: carrying an empty output
    (or skipping the tables) would drop the export's rows for every later interval."""
    hook = ArchiveHook(aws_conn_id=None)
    planned = plan_interval(config(tmp_path, emit, base_export=str(tmp_path / "export"), **extra), h(1), h(2),
                            first_start=h(1), exists=hook.exists)
    with pytest.raises(Refused, match="the interval that starts from base_export"):
        stage(hook, planned["request"], dag_id="d", run_id="r1", interval=(h(1), h(2)),
              chain_missing=planned["chain_missing"], lake_window=planned["lake_window"])


def test_an_empty_interval_with_a_broken_chain_is_refused(tmp_path):
    """Nothing to carry forward: refused naming the missing output (it used to be skipped, and the
    interval after it then failed)."""
    hook = ArchiveHook(aws_conn_id=None)
    planned = plan_interval(config(tmp_path, "snapshot"), h(1), h(2), first_start=START, previous=None,
                            exists=hook.exists)
    with pytest.raises(Refused, match="the output of the interval ending at 2026-01-01T01:00:00"):
        stage(hook, planned["request"], dag_id="d", run_id="r1", interval=(h(1), h(2)),
              chain_missing=planned["chain_missing"])


def test_an_empty_interval_is_refused_while_another_run_holds_its_output(tmp_path):
    """One run at a time per output, as for the app (spark_apps.lease): a live lease on the
    interval's output refuses the carry naming the run that holds it, and nothing is written; once
    released, the carry takes the lease, commits and gives it back."""
    lake = tmp_path / "lake"
    committed_output(str(lake / "20260101T000000Z"), "snapshot", until=tso(h(1)) - 1, complete=tso(h(1)) + 5)
    out = lake / "20260101T010000Z"
    hook = ArchiveHook(aws_conn_id=None)
    planned = plan_interval(config(tmp_path, "snapshot"), h(1), h(2), first_start=START, previous=(h(0), h(1)),
                            exists=hook.exists)
    staged = stage(hook, planned["request"], dag_id="d", run_id="r1", interval=(h(1), h(2)),
                   schema_from=planned["schema_from"], chain_missing=planned["chain_missing"])
    with lease.Lease(str(out), "the-other-run", 600):
        with pytest.raises(Refused, match=r"is in use by another replay: run the-other-run \(pid"):
            carry_forward(hook, staged)
        assert not (out / "_manifest.json").exists() and not (out / "_staging" / staged["run_id"]).exists()
    manifest = carry_forward(hook, staged)
    assert manifest["carried_from"] == str(lake / "20260101T000000Z") and manifest["output"]["records"] == 3
    assert not (out / "_lease.json").exists() and not (out / "_commit.json").exists()


def test_a_reader_sees_the_old_or_the_new_carried_output_at_every_step(tmp_path, monkeypatch):
    """The carry-forward commit (spark_apps.manifest.commit), watched after every write, copy and
    delete of the object store: the output's
    manifest always names a complete set of existing objects, the old output's or the new one's
    (here the new copy overwrites an old object of the same name)."""
    lake = tmp_path / "lake"
    committed_output(str(lake / "20260101T000000Z"), "snapshot", until=tso(h(1)) - 1, complete=tso(h(1)) + 5)
    out = lake / "20260101T010000Z"
    committed_output(str(out), "snapshot", until=tso(h(2)) - 1, complete=tso(h(2)) + 5, rows=5)  # the old output

    def contents(manifest_path) -> list[bytes]:
        manifest = json.loads(open(manifest_path).read())
        return sorted(open(o["uri"], "rb").read() for o in manifest["output"]["objects"])

    old = contents(out / "_manifest.json")
    new = contents(lake / "20260101T000000Z" / "_manifest.json")
    assert old != new
    seen = []

    def check(after: str) -> None:
        state = contents(out / "_manifest.json")
        assert state in (old, new), f"after {after}: the manifest names neither output"
        seen.append("old" if state == old else "new")

    def watched(name):  # the object store's write, copy and delete, each watched right after it
        real = getattr(storage, name)

        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            check(f"{name} {args[0]}")
            return result
        monkeypatch.setattr(storage, name, call)

    for name in ("write_bytes", "copy", "delete"):
        watched(name)
    hook = ArchiveHook(aws_conn_id=None)
    planned = plan_interval(config(tmp_path, "snapshot"), h(1), h(2), first_start=START, previous=(h(0), h(1)),
                            exists=hook.exists)
    staged = stage(hook, planned["request"], dag_id="d", run_id="r1", interval=(h(1), h(2)),
                   schema_from=planned["schema_from"], chain_missing=planned["chain_missing"])
    seen.clear()
    carry_forward(hook, staged)
    assert contents(out / "_manifest.json") == new and seen[-1] == "new" and "old" not in seen[seen.index("new"):]
