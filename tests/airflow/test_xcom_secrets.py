"""Credentials in option values never reach XCom (Airflow's database and UI): the check, plan
and stage tasks return them masked, and the replay task takes the real values from where the
DAG run got them (the backfill form's params, the scheduled DAG's Variable) and passes them to
spark-submit in the environment only. The end-to-end run (no secret in any XCom row of a real
`airflow dags test`) is in tests/airflow/test_dags_run.py."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os

import pytest

from cdc_replay_airflow.hooks.archive import ArchiveHook
from cdc_replay_airflow.operators.replay import ReplayOperator
from cdc_replay_airflow.tasks import Refused, check, plan_interval, stage
from spark_apps import masking

SECRET = "XcomS3cret-42"
CLAIMS = f"s3://claims/big?secret-access-key={SECRET}"


def _conf(tmp_path) -> dict:
    archive = tmp_path / "archive" / "shop" / "0"
    archive.mkdir(parents=True)
    (archive / "shop+0+00000000000000000000.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    return {"source": str(tmp_path / "archive"), "protocol": "canal-json", "output": str(tmp_path / "lake"),
            "emit": "snapshot", "protocol_options": {"enable-tidb-extension": "true", "claim-check-storage-uri": CLAIMS}}


def _argv_and_env(monkeypatch, plan: dict, given: dict | None) -> tuple[str, str]:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://local%5B1%5D")
    monkeypatch.delenv("CDC_REPLAY_SPARK_CONF", raising=False)
    operator = ReplayOperator(task_id="replay", plan=plan, python="/venv/bin/python")
    operator._given = given  # what execute() reads from the DAG run's params / the Variable
    operator.prepare()
    hook = operator._get_hook()  # the hook SparkSubmitOperator builds from its public arguments
    return " ".join(hook._build_spark_submit_command(operator.application)), hook._env.get(masking.ENV, "")


def test_the_backfill_tasks_push_no_secret_and_the_replay_still_gets_it(tmp_path, monkeypatch):
    conf = _conf(tmp_path)
    checked = check(conf)
    plan = stage(ArchiveHook(aws_conn_id=None), checked, dag_id="cdc_replay_backfill", run_id="manual__1")
    for xcom in (checked, plan):
        assert SECRET not in json.dumps(xcom)
    assert plan["request"]["protocol_options"]["claim-check-storage-uri"] == "s3://claims/big?secret-access-key=***"
    command, env = _argv_and_env(monkeypatch, plan, conf)
    assert SECRET not in command and "***" not in command
    assert f"claim-check-storage-uri={CLAIMS}" in env


def test_the_scheduled_plan_pushes_no_secret(tmp_path, monkeypatch):
    config = {**_conf(tmp_path), "emit": "topics", "lateness_minutes": 0}
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    planned = plan_interval(config, start, start + dt.timedelta(hours=1), first_start=start, exists=os.path.exists)
    assert SECRET not in json.dumps(planned)
    command, env = _argv_and_env(monkeypatch, {"request": planned["request"], "run_id": "d.r"}, config)
    assert SECRET not in command and f"claim-check-storage-uri={CLAIMS}" in env


def test_a_masked_value_the_run_no_longer_holds_is_refused(tmp_path, monkeypatch):
    conf = _conf(tmp_path)
    plan = stage(ArchiveHook(aws_conn_id=None), check(conf), dag_id="d", run_id="r")
    changed = {**conf, "protocol_options": {"enable-tidb-extension": "true"}}
    with pytest.raises(Refused, match="claim-check-storage-uri holds a credential"):
        _argv_and_env(monkeypatch, plan, changed)
