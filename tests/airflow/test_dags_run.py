"""`airflow dags test` of the DAGs, end to end: real Airflow (SQLite), the S3 server on loopback,
spark-submit in local mode. (The backfill DAG's successful run is `cdc-replay demo`, tested in
test_demo.py.)"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3

import pytest

from spark_apps import storage

from .archives import topic_changes as _changes
from .archives import write_two_hour_archive
from .conftest import FAST_SPARK, run_airflow, task_logs

pytestmark = pytest.mark.airflow


def _db(home: str) -> sqlite3.Connection:
    return sqlite3.connect(f"{home}/airflow.db")


def _task_states(home: str, dag_id: str, run_id: str) -> dict:
    with _db(home) as db:
        return dict(db.execute("select task_id, state from task_instance where dag_id=? and run_id=?",
                               (dag_id, run_id)).fetchall())


def _xcom(home: str, dag_id: str, run_id: str, task_id: str, key: str):
    with _db(home) as db:
        row = db.execute("select value from xcom where dag_id=? and run_id=? and task_id=? and key=?",
                         (dag_id, run_id, task_id, key)).fetchone()
    if row is None:
        return None
    value = json.loads(row[0])
    return json.loads(value) if isinstance(value, str) else value


def _run_id(text: str) -> str:
    """The run id `airflow dags test` reports."""
    return next(line.split("run_id=")[1].split(",")[0] for line in text.splitlines() if "DagRun Finished" in line)


def test_backfill_refuses_a_bad_field_before_any_work(airflow_env, airflow_home, bucket):
    """Values the form's schema accepts but the codec does not: the check task fails (no retry)
    naming the field, and nothing is listed, staged or written."""
    output = f"{bucket}/out"
    conf = {"source": f"{bucket}/archive", "output": output, "protocol_options": {"enable-tidb-extension": "maybe"}}
    result = run_airflow(["dags", "test", "cdc_replay_manual", "-c", json.dumps(conf)], airflow_env())
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "refused before any work started: protocol_options: " in text and "expected true or false" in text
    run_id = _run_id(text)
    states = _task_states(airflow_home, "cdc_replay_manual", run_id)
    assert states["check"] == "failed" and states["stage"] == "upstream_failed" and states["replay"] == "upstream_failed"
    assert storage.list_objects(bucket) == []


@pytest.mark.slow
def test_scheduled_dag_replays_interval_by_interval(airflow_env, airflow_home, aws_secrets, s3_endpoint,
                                                    airflow_session):
    """Hourly intervals over an archive spread across three hours of archive time. Each interval
    reads the objects archived in it and in the next hour (lateness), and emits exactly the changes
    committed in it: across intervals every change appears once. Hour 00 is published (complete:
    the watermarks in hour 01's objects pass 01:00). Hour 01's objects include a corrupt record
    (limit 0): the output is committed for inspection but validate fails loudly and nothing is
    published; leftovers of an earlier run in that output are replaced. An interval without
    objects after it has nothing to carry forward (hour 01 was not published): refused."""
    storage.ensure_bucket("s3://sched-archive")
    storage.ensure_bucket("s3://sched-lake")
    archive = write_two_hour_archive("s3://sched-archive/tidb/shop", corrupt_in_hour_2=1)
    base = "s3://sched-lake/replay/shop-topics"
    # a credential in an option value (claim-check storage is read only for claim-check messages)
    secret = "XcomS3cret-42"
    config = {"source": "s3://sched-archive/tidb/shop", "protocol": "canal-json",
              "protocol_options": {"enable-tidb-extension": "true",
                                   "claim-check-storage-uri": f"s3://claims/big?secret-access-key={secret}"},
              "output": base, "emit": "topics",
              "target_options": {"enable-tidb-extension": "true"}, "max_bad_records": 0}
    # what an earlier attempt of hour 01 left in its staging area, and an object no run of ours
    # wrote (issue 16: left in place and reported, never deleted)
    storage.write_bytes(f"{base}/20260101T010000Z/shop/7/shop+7+00000000000000000000.jsonl.gz", b"stale")
    storage.write_bytes(f"{base}/20260101T010000Z/_staging/airflow/objects/stale.jsonl.gz", b"stale")
    env = airflow_env(AIRFLOW_VAR_CDC_REPLAY_SCHEDULED=json.dumps(config))
    airflow = airflow_session(env)  # one Airflow process for the three runs

    # a manual run at 01:00 replays the complete interval before it: [00:00, 01:00)
    first = airflow.run(["dags", "test", "cdc_replay_scheduled", "2026-01-01T01:00:00+00:00"])
    text = first.stdout + first.stderr
    assert first.returncode == 0, text[-5000:]
    n0 = len(archive.objects[0]) + len(archive.objects[1])
    assert f"Archived in [2026-01-01T00:00:00+00:00, 2026-01-01T02:00:00+00:00): {n0} archive objects" in text
    assert f"Staged {n0} of {n0} objects (100%" in text and "reading and decoding" in text
    assert "the archive is complete for the window" in text
    hour0 = f"{base}/20260101T000000Z"
    manifest = json.loads(storage.read_bytes(f"{hour0}/_manifest.json"))
    assert manifest["source"]["objects"] == n0 and manifest["counts"]["reconciled"]
    assert manifest["counts"]["records"] == archive.records[0] + archive.records[1]
    assert manifest["window"]["since"] == (1767225600000 << 18) - 1
    assert manifest["window"]["until"] == (1767229200000 << 18) - 1
    assert _changes(hour0) == archive.changes(0)  # exactly hour 00's changes, once each
    assert not storage.list_objects(f"{hour0}/_staging")  # published: staging removed
    run_id = _run_id(text)
    assert set(_task_states(airflow_home, "cdc_replay_scheduled", run_id).values()) == {"success"}
    metrics = _xcom(airflow_home, "cdc_replay_scheduled", run_id, "publish", "cdc_replay_metrics")
    assert metrics["status"] == "published" and metrics["data_interval"][0] == "2026-01-01T00:00:00+00:00"
    assert metrics["objects"] == n0 and metrics["staging"] == "copied"
    with _db(airflow_home) as db:
        uris = {row[0] for row in db.execute(
            "select a.uri from asset_event e join asset a on a.id = e.asset_id where e.source_run_id=?", (run_id,))}
    assert uris == {base, hour0}
    # no credential in what the tasks pushed to XCom or the replay task's rendered fields (the UI)
    with _db(airflow_home) as db:
        pushed = [row[0] for row in db.execute("select value from xcom where run_id=?", (run_id,))]
        rendered = [row[0] for row in db.execute(
            "select rendered_fields from rendered_task_instance_fields where run_id=?", (run_id,))]
    assert len(pushed) >= 4 and rendered
    assert not any(secret in str(value) for value in pushed + rendered)
    assert any("secret-access-key=***" in str(value) for value in pushed)

    second = airflow.run(["dags", "test", "cdc_replay_scheduled", "2026-01-01T02:00:00+00:00"])
    text2 = second.stdout + second.stderr
    assert second.returncode != 0
    assert "1 records quarantined, more than the limit max_bad_records=0" in text2
    run_id2 = _run_id(text2)
    states = _task_states(airflow_home, "cdc_replay_scheduled", run_id2)
    assert states["replay"] == "success" and states["validate"] == "failed" and states["publish"] == "upstream_failed"
    hour1 = f"{base}/20260101T010000Z"
    manifest2 = json.loads(storage.read_bytes(f"{hour1}/_manifest.json"))
    assert manifest2["source"]["objects"] == len(archive.objects[1]) + len(archive.objects[2])
    assert manifest2["counts"]["quarantined"] == 1
    foreign = "shop/7/shop+7+00000000000000000000.jsonl.gz"
    assert manifest2["foreign_objects"] == [foreign]
    assert any(foreign in w for w in manifest2["warnings"])
    left = [o.uri for o in storage.list_objects(hour1)]
    assert not any("stale" in uri for uri in left) and f"{hour1}/{foreign}" in left
    storage.delete(f"{hour1}/{foreign}")  # the user's own object: the changes below are the run's
    assert _changes(hour1) == archive.changes(1)  # every change of the history in exactly one interval
    failed = _xcom(airflow_home, "cdc_replay_scheduled", run_id2, "validate", "cdc_replay_metrics")
    assert failed["status"] == "failed validation" and "max_bad_records=0" in failed["error"]

    # an interval without archive objects whose previous interval has no published output has
    # nothing to carry forward: refused, naming the missing output (tests/airflow/test_carry.py and
    # test_scheduled_snapshots_chain_across_an_empty_interval carry one forward)
    third = airflow.run(["dags", "test", "cdc_replay_scheduled", "2026-01-01T05:00:00+00:00"])
    text3 = third.stdout + third.stderr
    assert third.returncode != 0
    assert "the output of the interval ending at 2026-01-01T04:00:00+00:00" in text3
    states3 = _task_states(airflow_home, "cdc_replay_scheduled", _run_id(text3))
    assert states3["plan"] == "success" and states3["stage"] == "failed" and states3["replay"] == "upstream_failed"

    everything = text + text2 + third.stdout + third.stderr + task_logs(airflow_home)
    assert aws_secrets.secret not in everything and aws_secrets.key_id not in everything


@pytest.fixture
def own_airflow_home(migrated_home, s3_endpoint, aws_secrets):
    """A migrated AIRFLOW_HOME (SQLite) of its own: the scheduled DAG's runs of other tests (same
    logical dates) must not be its previous runs."""
    from spark_apps import airflow_local as al

    home = migrated_home("airflow-home-chain")

    def make(**extra) -> dict:
        env = al.environment(home, aws=al.aws_connection(s3_endpoint, aws_secrets.key_id, aws_secrets.secret),
                             extra={**FAST_SPARK, **extra})
        for key in [k for k in env if k.startswith("AWS_")]:
            del env[key]
        return env

    return home, make


@pytest.mark.slow
def test_scheduled_snapshots_chain_across_an_empty_interval(own_airflow_home, airflow_session):
    """emit snapshot, hourly, lateness 0, over an archive with changes archived in hours 00 and 02
    and nothing in hour 01. [00:00, 01:00) is the first interval (the history from the archive's
    start); [01:00, 02:00) has no object and carries that snapshot forward without Spark, its cut
    moved to its end; [02:00, 03:00) is the app run with `--base-snapshot` = the carried output
    and `--since` = its cut. Each snapshot equals the state at its interval's end, the last one
    the generator's own final state."""
    from spark_apps.demo import read_snapshot

    from ..reference import reference_state
    from .archives import hour_tso, write_hourly_archive

    home, make_env = own_airflow_home
    storage.ensure_bucket("s3://chain-archive")
    storage.ensure_bucket("s3://chain-lake")
    archive = write_hourly_archive("s3://chain-archive/tidb/shop", hours=(0, 2), tail_hour=None)
    assert archive.objects[1] == [] and archive.objects[0] and archive.objects[2]
    base = "s3://chain-lake/replay/shop-snapshot"
    config = {"source": "s3://chain-archive/tidb/shop", "protocol": "canal-json",
              "protocol_options": {"enable-tidb-extension": "true"}, "output": base, "emit": "snapshot",
              "target_options": {"enable-tidb-extension": "true"}, "max_bad_records": 0,
              # no watermark is read for an empty interval: completeness cannot be shown for it
              "lateness_minutes": 0, "require_complete": False}
    airflow = airflow_session(make_env(AIRFLOW_VAR_CDC_REPLAY_SCHEDULED=json.dumps(config)))  # one for the runs
    outputs = {hour: f"{base}/20260101T0{hour}0000Z" for hour in (0, 1, 2)}
    texts = {}
    for hour in (0, 1, 2):  # a manual run at the interval's end replays the interval before it
        result = airflow.run(["dags", "test", "cdc_replay_scheduled", f"2026-01-01T0{hour + 1}:00:00+00:00"])
        texts[hour] = result.stdout + result.stderr
        assert result.returncode == 0, texts[hour][-5000:]
        states = _task_states(home, "cdc_replay_scheduled", _run_id(texts[hour]))
        assert set(states.values()) == {"success"}, states
    manifests = {hour: json.loads(storage.read_bytes(f"{outputs[hour]}/_manifest.json")) for hour in (0, 1, 2)}

    state_at = {hour: reference_state(archive.shifted(), hour_tso(hour + 1) - 1) for hour in (0, 1, 2)}
    assert state_at[0] and state_at[0] != state_at[2]
    # hour 00: the first interval, no base
    assert manifests[0]["window"]["since"] is None and manifests[0]["window"]["base_snapshot"] is None
    assert manifests[0]["cut"]["commit_ts"] == hour_tso(1) - 1
    assert read_snapshot(outputs[0]) == state_at[0]
    # hour 01: nothing archived; the snapshot carried forward, no Spark job
    assert "reading and decoding" not in texts[1] and "carries the snapshot of" in texts[1]
    assert manifests[1]["carried_from"] == outputs[0] and manifests[1]["source"]["objects"] == 0
    assert manifests[1]["cut"]["commit_ts"] == hour_tso(2) - 1
    assert read_snapshot(outputs[1]) == state_at[0] == state_at[1]
    # hour 02: the app on top of the carried snapshot
    assert "reading and decoding" in texts[2]
    assert manifests[2]["window"]["base_snapshot"] == outputs[1]
    assert manifests[2]["window"]["since"] == manifests[2]["window"]["base_cut"] == hour_tso(2) - 1
    assert manifests[2]["cut"]["commit_ts"] == hour_tso(3) - 1
    assert manifests[2]["counts"]["reconciled"] and manifests[2]["counts"]["quarantined"] == 0
    last = read_snapshot(outputs[2])
    assert last == state_at[2]
    assert last == {k: v for k, v in archive.generated.final.items() if v}  # the generator's own state


@pytest.mark.slow
def test_scheduled_delta_tables_grow_interval_by_interval(own_airflow_home, airflow_session):
    """emit snapshot as Delta tables, hourly, hours 00 and 02 archived, nothing in 01: one set of
    tables at the output; hour 00 writes them in full, hour 01 is skipped (the tables keep their
    cut), hour 02 merges its changes (`--since last` = the tables' cut). Every version reads (by
    the spec reader) as the reference state at its cut; publish emits one asset per table."""
    from ..support import lake_readers
    from ..test_lakehouse import as_state
    from ..reference import reference_state
    from .archives import hour_tso, write_hourly_archive

    home, make_env = own_airflow_home
    storage.ensure_bucket("s3://delta-archive")
    storage.ensure_bucket("s3://delta-lake")
    archive = write_hourly_archive("s3://delta-archive/tidb/shop", hours=(0, 2), tail_hour=None, ddl_rate=0)
    base = "s3://delta-lake/tables"
    config = {"source": "s3://delta-archive/tidb/shop", "protocol": "canal-json",
              "protocol_options": {"enable-tidb-extension": "true"}, "output": base, "emit": "snapshot",
              "target_format": "delta", "max_bad_records": 0, "lateness_minutes": 0, "require_complete": False}
    airflow = airflow_session(make_env(AIRFLOW_VAR_CDC_REPLAY_SCHEDULED=json.dumps(config)))  # one for the runs
    states = {}
    for hour in (0, 1, 2):
        result = airflow.run(["dags", "test", "cdc_replay_scheduled", f"2026-01-01T0{hour + 1}:00:00+00:00"],
                             timeout=1800)
        text = result.stdout + result.stderr
        assert result.returncode == 0, text[-5000:]
        states[hour] = (_task_states(home, "cdc_replay_scheduled", _run_id(text)), _run_id(text))
    assert states[1][0]["stage"] == "skipped" and states[1][0]["replay"] == "skipped"
    manifest = json.loads(storage.read_bytes(f"{base}/_manifest.json"))
    assert manifest["window"]["since"] == hour_tso(1) - 1 and manifest["cut"]["commit_ts"] == hour_tso(3) - 1

    for table in ("orders", "customers"):
        location = f"{base}/shop/{table}"
        commits = lake_readers.delta_commits(location)
        assert [c["commitInfo"]["cdc-replay.cut_commit_ts"] for c in commits] == [str(hour_tso(1) - 1),
                                                                                   str(hour_tso(3) - 1)]
        assert commits[1]["commitInfo"]["operation"] == "MERGE"
        for version, hour in ((0, 1), (1, 3)):
            expected = reference_state(archive.shifted(), hour_tso(hour) - 1).get(("shop", table)) or {}
            assert as_state(lake_readers.delta_read(location, version)[1]) == expected
    published = _xcom(home, "cdc_replay_scheduled", states[2][1], "publish", "cdc_replay_metrics")
    assets = {t["table"]: t for t in published["lakehouse"]}
    assert assets["shop.orders"]["location"] == f"{base}/shop/orders" and assets["shop.orders"]["version"] == 1
    assert not assets["shop.orders"]["unchanged"]


@pytest.mark.slow
def test_scheduled_history_starts_from_a_base_export(own_airflow_home, airflow_session):
    """The Variable's base_export with history (Parquet): hour 00 starts from the export (no
    --since; every row live at the export's TSO is an INSERT version at the TSO, re-sent copies of
    what the export holds are in_base) and holds the archive's changes after it; hour 01
    (`--since`, no export, the schemas from hour 00's output) holds only its own changes. Chained,
    the two give tests/reference.py's state over the full history (the changes before the archive,
    then the archive's) at each interval's end.

    The DAG hands base_export to the first interval's app run the same way whatever the emit (the
    plan: tests/airflow/test_plan.py, every emit and lake format), so this one run covers that
    path; what the app makes of an export per emit is tested without Airflow (twenty-fifth
    session: topics and Delta tables from an export here were exact repeats of that coverage):
    topics from an export, tests/test_base_export_replay.py (`test_dumpling_tso_topics_in_canal_json`,
    `test_mysqldump_topics_and_history_with_canal_protobuf`), a later topics interval on the
    schemas of the one before, `test_scheduled_dag_replays_interval_by_interval` above; Delta or
    Iceberg tables written from an export then merged `--since last`, tests/test_base_export_lake.py
    (`test_an_export_rewrites_tables_at_the_same_cut_and_windows_merge_after_it`), and
    `--since last` merges through the DAG, `test_scheduled_delta_tables_grow_interval_by_interval`."""
    from cdc_replay_airflow.window import interval_output

    from spark_apps.generate import write_base_export

    from ..reference import reference_state
    from ..test_base_export_lake import SCD2
    from ..test_lakehouse import as_state
    from ..test_outputs import read_parquet
    from .archives import hour_tso, write_hourly_archive

    home, make_env = own_airflow_home
    emit = "history"
    storage.ensure_bucket(f"s3://export-{emit}-archive")
    storage.ensure_bucket(f"s3://export-{emit}-out")
    source = f"s3://export-{emit}-archive/tidb/shop"
    archive = write_hourly_archive(source, hours=(0, 1), tail_hour=None, ddl_rate=0, transactions=80,
                                   base_export=True)
    export = f"s3://export-{emit}-archive/dumpling/shop"
    write_base_export(archive.generated, "dumpling-csv", export, rows_per_file=7)
    tso = archive.generated.base.position["tso"]
    base = f"s3://export-{emit}-out/replay"
    config = {"source": source, "protocol": "canal-json", "protocol_options": {"enable-tidb-extension": "true"},
              "output": base, "emit": emit, "base_export": export, "max_bad_records": 0, "lateness_minutes": 0,
              "require_complete": False}
    airflow = airflow_session(make_env(AIRFLOW_VAR_CDC_REPLAY_SCHEDULED=json.dumps(config)))
    outputs = {hour: interval_output(base, dt.datetime(2026, 1, 1, hour, tzinfo=dt.timezone.utc)) for hour in (0, 1)}
    _run_two_hours_from_an_export(airflow, home, export, outputs.get)

    history = archive.full_history()
    schema_sql = archive.generated.schema_sql
    state: dict = {}
    for hour in (0, 1):
        tables = read_parquet(outputs[hour])
        versions = [r | {"table": table} for (_, table), rows in tables.items() for r in rows.to_pylist()]
        low = tso if hour == 0 else hour_tso(1) - 1
        assert versions and all(low <= r["_valid_from_ts"] <= hour_tso(hour + 1) - 1 for r in versions)
        assert (min(r["_valid_from_ts"] for r in versions) == tso) == (hour == 0)  # the export's rows: hour 00 only
        for row in sorted(versions, key=lambda r: r["_valid_from_ts"]):  # each key's versions in order
            key = (row.pop("table"), (row["id"],))
            if row["_op"] == "delete":
                state.pop(key, None)
            else:
                state[key] = row
        expected = reference_state(history, hour_tso(hour + 1) - 1, schema_sql)
        got = {}
        for (table, _), row in state.items():
            got.setdefault(table, []).append(row)
        for table in ("orders", "customers"):
            want = expected.get(("shop", table)) or {}
            assert want and as_state(got.get(table, []), skip=SCD2) == want, (hour, table)


def _run_two_hours_from_an_export(airflow, home: str, export: str, output_of) -> None:
    """`airflow dags test` of the scheduled DAG for hours 00 and 01 (the Variable's base_export
    set): each run succeeds; hour 00 starts from the export (no --since, re-sent copies of what
    it holds in_base), hour 01 from hour 00's output (--since, no export, nothing in_base).
    `output_of(hour)`: where that hour's manifest is."""
    from .archives import hour_tso

    manifests = {}
    for hour in (0, 1):
        result = airflow.run(["dags", "test", "cdc_replay_scheduled", f"2026-01-01T0{hour + 1}:00:00+00:00"],
                             timeout=1800)
        text = result.stdout + result.stderr
        assert result.returncode == 0, text[-5000:]
        assert set(_task_states(home, "cdc_replay_scheduled", _run_id(text)).values()) == {"success"}
        manifests[hour] = json.loads(storage.read_bytes(f"{output_of(hour)}/_manifest.json"))
    first, second = manifests[0], manifests[1]
    assert first["window"]["since"] is None and first["window"]["base_export"] == export
    assert first["counts"]["in_base"] >= 1 and first["counts"]["reconciled"]
    assert second["window"]["since"] == hour_tso(1) - 1 and not second["window"].get("base_export")
    assert second["counts"]["reconciled"] and not second["counts"].get("in_base")
