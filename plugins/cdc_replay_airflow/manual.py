"""The manual replay DAG: a typed trigger form and check -> stage -> replay -> validate -> publish.

Built by `manual_replay_dag()` so that a user's own DAG file can build one too (with their own
id, tags or defaults) from the installed package; `dags/cdc_replay_manual.py` is our example.
It was called `cdc_replay_backfill`, a name that collides with Airflow's own *backfill* (re-running
a scheduled DAG over past data intervals: `airflow backfill create`); `dags/cdc_replay_backfill.py`
keeps that id as a deprecated alias for REST clients that trigger it.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import AssetAlias, Param, dag, get_current_context, task

from cdc_replay_airflow.operators.replay import ReplayOperator
from spark_apps.options import COMMIT_TS_HELP  # noqa: F401  (the form's commit-ts words, kept importable)
from spark_apps.options import COMMIT_TS_SCHEMA as COMMIT_TS  # noqa: F401
from spark_apps.options import form_options

DAG_ID = "cdc_replay_manual"
DEPRECATED_DAG_ID = "cdc_replay_backfill"
ALIAS = "cdc_replay_outputs"


def _param(form: dict) -> Param:
    schema = dict(form)
    return Param(schema.pop("value"), **schema)


# The form's fields: the option table's (spark_apps.options), section by section.
PARAMS = {o.request.name: _param(o.request.form) for o in form_options()}


def manual_replay_dag(dag_id: str = DAG_ID, *, doc_md: str | None = None, tags: list[str] | None = None,
                      params: dict | None = None, max_active_runs: int = 2):
    """The manual replay DAG under `dag_id`; `params` replaces the form's defaults field by field."""

    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=max_active_runs,
        doc_md=doc_md,
        tags=tags or ["cdc-replay", "manual", "spark"],
        params={**PARAMS, **(params or {})},
        default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    )
    def manual_replay():
        @task
        def check(params: dict | None = None) -> dict:
            from airflow.sdk.exceptions import AirflowFailException

            from cdc_replay_airflow import tasks

            try:
                return tasks.check(dict(params))
            except tasks.Refused as e:
                raise AirflowFailException(str(e)) from e

        @task
        def stage(request: dict) -> dict:
            from cdc_replay_airflow import tasks
            from cdc_replay_airflow.hooks.archive import ArchiveHook
            from cdc_replay_airflow.hooks.kafka import bootstrap_servers, client_config

            ti = get_current_context()["ti"]
            try:  # the client settings: a kafka:// source's records are counted before Spark starts
                return tasks.stage(ArchiveHook(), request, dag_id=ti.dag_id, run_id=ti.run_id,
                                   kafka_servers=bootstrap_servers, kafka_config=client_config)
            except LookupError as e:
                from airflow.sdk.exceptions import AirflowFailException

                raise AirflowFailException(str(e)) from e

        @task(show_return_value_in_logs=False)  # the metrics: the CDC replay page and the XCom show them
        def validate(plan: dict, replayed: dict) -> dict:
            from airflow.sdk.exceptions import AirflowFailException

            from cdc_replay_airflow import tasks
            from cdc_replay_airflow.hooks.archive import ArchiveHook
            from cdc_replay_airflow.metrics import METRICS_KEY, ValidationError

            ti = get_current_context()["ti"]
            try:
                metrics = tasks.validate(ArchiveHook(), plan, dag_id=ti.dag_id, run_id=ti.run_id)
            except ValidationError as e:
                if getattr(e, "metrics", None):
                    ti.xcom_push(METRICS_KEY, e.metrics)
                raise AirflowFailException(str(e)) from e
            ti.xcom_push(METRICS_KEY, metrics)
            return metrics

        @task(outlets=[AssetAlias(ALIAS)], show_return_value_in_logs=False)
        def publish(plan: dict, metrics: dict) -> dict:
            from cdc_replay_airflow import tasks
            from cdc_replay_airflow.hooks.archive import ArchiveHook
            from cdc_replay_airflow.metrics import METRICS_KEY

            context = get_current_context()
            published = tasks.publish(ArchiveHook(), plan, metrics)
            tasks.emit_assets(context["outlet_events"], ALIAS, published)
            context["ti"].xcom_push(METRICS_KEY, published)
            return published

        plan = stage(check())
        replayed = ReplayOperator(task_id="replay", plan=plan)
        publish(plan, validate(plan, replayed.output))


    return manual_replay()
