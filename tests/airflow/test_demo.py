"""`cdc-replay demo` (what ./scripts/demo runs): the manual DAG end to end through `airflow dags
test` with an embedded SQLite DB, a loopback S3 server and Spark local mode; its snapshot equals
the generator's truth, the run's metrics and asset event are recorded, progress is readable, the
UI is explained, and no secret is printed or logged."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from spark_apps.local_s3 import DEMO_CREDENTIALS

from .conftest import task_logs

pytestmark = pytest.mark.airflow


READ_TASK_LOGS = r"""
import json
from airflow.models.taskinstance import TaskInstance
from airflow.utils.log.log_reader import TaskLogReader
from airflow.utils.session import create_session

with create_session() as session:
    out = {}
    for ti in session.query(TaskInstance).filter(TaskInstance.dag_id == "cdc_replay_manual"):
        logs, _ = TaskLogReader().read_log_chunks(ti, ti.try_number, {})
        out[ti.task_id] = [str(getattr(m, "event", m)) for m in logs if "No logs" not in str(m)]
print(json.dumps(out))
"""


def test_task_log_lines_split_the_console_per_task():
    from spark_apps.airflow_local import task_log_lines

    console = ["2026-11-27T21:43:01.3Z [info     ] [DAG TEST] starting task_id=replay map_index=-1 [x] loc=dag.py:1\n",
               "2026-11-27T21:43:04.6Z [info     ] events read 606 [SparkSubmitHook] loc=spark_submit.py:965\n",
               "a line without a time\n",
               "2026-11-27T21:43:26.4Z [info     ] [DAG TEST] end task task_id=replay map_index=-1 [x] loc=dag.py:2\n",
               "2026-11-27T21:43:26.5Z [info     ] between tasks\n"]
    assert task_log_lines(console) == {"replay": [
        {"timestamp": "2026-11-27T21:43:04.6Z", "level": "info",
         "event": "events read 606 [SparkSubmitHook] loc=spark_submit.py:965"},
        {"event": "a line without a time"}]}


def test_demo_runs_the_manual_dag_and_matches_the_truth(tmp_path):
    home = str(tmp_path / "airflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW"))}
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "cdc-replay"), "demo", "--transactions",
                             "300", "--airflow-home", home], capture_output=True, text=True, env=env, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    for expected in (
        "airflow dags test cdc_replay_manual -c '",
        "[check] Request checked: replay s3://cdc-archive/tidb/shop [canal-json enable-tidb-extension=true]",
        "[stage] Listed 3 objects under s3://cdc-archive/tidb/shop",
        "[replay] [replay cdc_replay_manual.",  # the app's own progress: phases, stages, counts
        "reading and decoding 3 objects",
        "[validate] Check: counts reconcile",
        "[publish] Published s3://cdc-lake/replay/shop-snapshot",
        "events read ",  # the summary
        "matches the generator's state at its last watermark: yes",
        f"AIRFLOW_HOME={home} ",
        "api-server --port 8080",
        "http://localhost:8080/plugin/cdc-replay",
        # the whole local Airflow, so that a run triggered in the UI runs (issue 31)
        f"bin/airflow scheduler > {home}/scheduler.log 2>&1 &",
        f"bin/airflow dag-processor > {home}/dag-processor.log 2>&1 &",
        "its connections are in the metadata DB: spark_default local[*], aws_default",
    ):
        assert expected in out, expected
    secret = DEMO_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    logs = task_logs(home) + open(os.path.join(home, "demo-dags-test.log")).read()
    assert "Spark-Submit cmd: spark-submit --master local[2]" in task_logs(home)
    # issue 31 point 1: the demo's run's task logs are where the UI reads them, as Airflow's own
    # log reader (the api-server's log endpoint) reads them for each task instance
    read = subprocess.run([sys.executable, "-c", READ_TASK_LOGS], capture_output=True, text=True, timeout=300,
                          env={**env, "AIRFLOW_HOME": home})
    assert read.returncode == 0, read.stderr[-3000:]
    events = json.loads(read.stdout.strip().splitlines()[-1])
    assert sorted(events) == ["check", "publish", "replay", "stage", "validate"]
    assert all(events.values()), events
    replay_log = "\n".join(events["replay"])
    assert "reading and decoding 3 objects" in replay_log and "events read " in replay_log  # progress, summary
    assert secret not in out and secret not in logs

    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
        (run_id, state), = db.execute("select run_id, state from dag_run where dag_id='cdc_replay_manual'")
        value = db.execute("select value from xcom where dag_id='cdc_replay_manual' and task_id='publish' "
                           "and key='cdc_replay_metrics'").fetchone()[0]
        assets = [row[0] for row in db.execute(
            "select a.uri from asset_event e join asset a on a.id = e.asset_id where e.source_run_id=?", (run_id,))]
    assert state == "success"
    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:  # for runs triggered in the UI later
        connections = dict(db.execute("select conn_id, conn_type || ' ' || coalesce(host, '') from connection "
                                      "where conn_id in ('spark_default', 'aws_default')"))
    assert connections == {"spark_default": "spark local[*]", "aws_default": "aws "}
    metrics = json.loads(value)
    metrics = json.loads(metrics) if isinstance(metrics, str) else metrics
    assert metrics["status"] == "published" and metrics["counts"]["quarantined"] == 2
    assert {t["table"] for t in metrics["tables"]} == {"shop.orders", "shop.customers"}
    assert assets == ["s3://cdc-lake/replay/shop-snapshot"]
