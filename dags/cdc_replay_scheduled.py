"""
### Replay each new archive window (scheduled)

Every data interval [start, end) replays the archive objects archived in it: an object's
archive time is read from Hive-style partitions in its key (`dt=2026-01-01/hour=00/...`,
`year=/month=/day=/hour=`, as Kafka Connect's S3 sink and Secor write them) or else its
LastModified time, so every object belongs to exactly one interval. When the replay app accepts
`--since/--until` (cdc-replay issue 5), the run also keeps only the changes committed in the
interval; until then it replays every event of the interval's objects, and says so in its log.

Each interval writes its own output, `<output>/<interval start, e.g. 20260101T000000Z>`, replaced
as a whole when the interval is replayed again: catchup and `airflow backfill create` replay history
interval by interval, and re-running an interval is idempotent. An interval without archive objects
is skipped.

**Configuration**: the Variable `cdc_replay_scheduled`, a JSON object with the fields of the
backfill form (`source`, `protocol`, `protocol_options`, `output` — the base of the interval
outputs —, `emit`, `target_protocol`, `target_options`, `tables`, `max_bad_records`, ...), checked
field by field by the first task. The schedule (default `@hourly`) and the first interval
(default 2026-01-01T00:00Z) come from the environment variables `CDC_REPLAY_SCHEDULE` and
`CDC_REPLAY_START` of the DAG processor.

Tasks: `plan` (the interval's request; refuses bad configuration), `stage` (select the interval's
objects with boto3, stage them, write the staged-objects manifest), `replay` (spark-submit on
`spark_default`), `validate` (reconcile the manifest; fail loudly on quarantine beyond the
limit), `publish` (clean the staging area, record metrics, emit the output asset).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import AssetAlias, CronDataIntervalTimetable, dag, get_current_context, task

from cdc_replay_airflow.operators.replay import ReplayOperator

ALIAS = "cdc_replay_outputs"
VARIABLE = "cdc_replay_scheduled"
SCHEDULE = os.environ.get("CDC_REPLAY_SCHEDULE", "@hourly")
START = dt.datetime.fromisoformat(os.environ.get("CDC_REPLAY_START", "2026-01-01T00:00:00+00:00").replace("Z", "+00:00"))


@dag(
    dag_id="cdc_replay_scheduled",
    # data intervals [start, end): a plain cron string would give Airflow 3's CronTriggerTimetable,
    # whose runs have no interval to select objects by
    schedule=CronDataIntervalTimetable(SCHEDULE, timezone="UTC"),
    start_date=START,
    catchup=True,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["cdc-replay", "scheduled", "spark"],
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
)
def cdc_replay_scheduled():
    @task
    def plan(data_interval_start=None, data_interval_end=None) -> dict:
        from airflow.sdk import Variable
        from airflow.sdk.exceptions import AirflowFailException

        from cdc_replay_airflow import tasks

        config = Variable.get(VARIABLE, default=None, deserialize_json=True)
        try:
            return tasks.plan_interval(config, data_interval_start, data_interval_end)
        except tasks.Refused as e:
            raise AirflowFailException(str(e)) from e

    @task
    def stage(planned: dict) -> dict:
        from airflow.sdk.exceptions import AirflowSkipException

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook

        ti = get_current_context()["ti"]
        start, end = (dt.datetime.fromisoformat(t) for t in planned["interval"])
        try:
            return tasks.stage(ArchiveHook(), planned["request"], dag_id=ti.dag_id, run_id=ti.run_id,
                               interval=(start, end))
        except LookupError as e:
            raise AirflowSkipException(f"{e}: nothing to replay") from e

    @task
    def validate(planned: dict, staged: dict, replayed: dict) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook
        from cdc_replay_airflow.metrics import METRICS_KEY, ValidationError

        ti = get_current_context()["ti"]
        try:
            metrics = tasks.validate(ArchiveHook(), staged, dag_id=ti.dag_id, run_id=ti.run_id,
                                     data_interval=tuple(planned["interval"]))
        except ValidationError as e:
            if getattr(e, "metrics", None):
                ti.xcom_push(METRICS_KEY, e.metrics)
            raise AirflowFailException(str(e)) from e
        ti.xcom_push(METRICS_KEY, metrics)
        return metrics

    @task(outlets=[AssetAlias(ALIAS)])
    def publish(planned: dict, staged: dict, metrics: dict) -> dict:
        from airflow.sdk import Asset, Variable

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook
        from cdc_replay_airflow.metrics import METRICS_KEY

        context = get_current_context()
        published = tasks.publish(ArchiveHook(), staged, metrics)
        base = Variable.get(VARIABLE, deserialize_json=True)["output"].rstrip("/")
        extra = {**tasks.asset_extra(published), "interval": planned["interval"]}
        for uri in (base, published["output"]):  # the series, and this interval's output
            asset = Asset(uri if uri.startswith("s3://") else f"file://{uri}")
            context["outlet_events"][AssetAlias(ALIAS)].add(asset, extra=extra)
        context["ti"].xcom_push(METRICS_KEY, published)
        return published

    planned = plan()
    staged = stage(planned)
    replayed = ReplayOperator(task_id="replay", plan=staged)
    publish(planned, staged, validate(planned, staged, replayed.output))


cdc_replay_scheduled()
