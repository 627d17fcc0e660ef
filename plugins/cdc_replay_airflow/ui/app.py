"""The monitoring page's FastAPI app, mounted in Airflow's API server by cdc_replay_plugin.py.

Every route requires the UI's authenticated user (GetUserDep: the `_token` cookie the UI sets,
or an `Authorization: Bearer` token from POST /auth/token); without one the answer is 401.
Data: the metrics the validate/publish tasks stored as XComs (key `cdc_replay_metrics`) and the
DAG runs' states, read from Airflow's metadata database.
"""

from __future__ import annotations

import datetime as dt
import json

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse

from airflow.api_fastapi.core_api.security import GetUserDep

from cdc_replay_airflow.metrics import METRICS_KEY
from cdc_replay_airflow.ui.render import S3_CONSOLE, render_page

URL_PREFIX = "/cdc-replay"
DAG_IDS = ("cdc_replay_manual", "cdc_replay_scheduled", "cdc_replay_backfill")  # the last: deprecated alias

app = FastAPI(title="CDC replay monitoring", description="Per run and per table: events read, emitted, "
              "deduplicated, quarantined, commit ts range, watermark lag, output location.")


def _value(row) -> dict | None:
    value = row.value
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def load_runs(dag_id: str | None = None, run_id: str | None = None, limit: int = 50) -> list[dict]:
    """Recent runs of our DAGs, newest first, each with its latest metrics (publish's over validate's)."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dag_ids = [dag_id] if dag_id else list(DAG_IDS)
    with create_session() as session:
        query = select(DagRun).where(DagRun.dag_id.in_(dag_ids))
        if run_id:
            query = query.where(DagRun.run_id == run_id)
        dag_runs = session.scalars(query.order_by(DagRun.id.desc()).limit(limit)).all()
        runs = {(r.dag_id, r.run_id): {
            "dag_id": r.dag_id, "run_id": r.run_id, "state": str(r.state.value if hasattr(r.state, "value") else r.state),
            "run_type": str(getattr(r.run_type, "value", r.run_type)),
            "logical_date": r.logical_date.isoformat() if r.logical_date else None,
            "metrics": None, "note": None, "_id": r.id,
        } for r in dag_runs}
        if runs:
            rows = session.execute(
                select(XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.value, XComModel.timestamp)
                .where(XComModel.key == METRICS_KEY, XComModel.dag_run_id.in_([r["_id"] for r in runs.values()]))
                .order_by(XComModel.timestamp)
            ).all()
            for row in rows:
                value = _value(row)
                run = runs.get((row.dag_id, row.run_id))
                if value is None or run is None:
                    continue
                current = run["metrics"]
                if current is None or current.get("status") != "published" or value.get("status") == "published":
                    run["metrics"] = value
    ordered = sorted(runs.values(), key=lambda r: -r.pop("_id"))
    return ordered


@app.get("/", response_class=HTMLResponse, summary="The monitoring page")
def page(user: GetUserDep, dag_id: str | None = Query(None), run_id: str | None = Query(None),
         limit: int = Query(50, ge=1, le=500)) -> HTMLResponse:
    runs = load_runs(dag_id, run_id, limit)
    name = getattr(user, "get_name", lambda: None)() or getattr(user, "username", None)
    from airflow.configuration import conf

    return HTMLResponse(render_page(runs, prefix=URL_PREFIX, dag_id=dag_id, run_id=run_id, user=name,
                                    generated_at=dt.datetime.now(dt.timezone.utc),
                                    s3_console=conf.get("cdc_replay", "s3_console_url", fallback=S3_CONSOLE)))


@app.get("/api/runs", summary="The page's data as JSON")
def runs_json(user: GetUserDep, dag_id: str | None = Query(None), run_id: str | None = Query(None),
              limit: int = Query(50, ge=1, le=500)) -> list[dict]:
    return load_runs(dag_id, run_id, limit)
