"""
### Replay each archive window (scheduled)

Every data interval [start, end) replays **the changes committed in it**, read from **the objects
archived in [start, end + lateness)**. An object's archive time comes from Hive-style partitions in
its key (`dt=2026-01-01/hour=00/...`, `year=/month=/day=/hour=`, as Kafka Connect's S3 sink and
Secor write them) or else its LastModified time. Objects are read by two intervals (a change made
just before the end of an interval can be archived in the next one), but the commit ts window
(`--since TSO(start)-1 --until TSO(end)-1`) puts every change in exactly one interval's output.

A `kafka://topics` source is read by offsets instead: each interval reads from where the previous
interval ended (the first from `starting_offsets`, default earliest) up to the first record stamped
at or after the interval's end (or the high watermark when there is none yet), recorded in
`<output>/_kafka_windows/` so that a rerun reads the same records; emit topics or history, every
event of the window replayed (docs/kafka.md). A `kafka://` output produces each interval's records,
its manifest at `<manifest_uri>/<interval start>`.

Each interval writes its own output, `<output>/<interval start, e.g. 20260101T000000Z>`, replaced
as a whole when the interval runs again: catchup and `airflow backfill create` replay history
interval by interval, and re-running an interval is idempotent. `emit: topics` (or `history`) gives
the interval's changes; `emit: snapshot` chains the intervals — each snapshot is the previous
interval's plus this window's changes (`--base-snapshot`); with `target_format` delta or iceberg the
output holds one set of tables and each interval merges its changes into them (`--since last`,
docs/lakehouse.md), so the tables grow interval by interval. An interval without archive objects
carries the previous interval's output forward without Spark (its snapshot, or its table schemas
and no records), so the next interval still has what it starts from; an interval the archive's
watermarks have not passed yet fails validation (clear it later) — an empty interval too, unless
`require_complete` is false, since no watermark was read for it.

**Configuration** — the Variable `cdc_replay_scheduled`, a JSON object with the backfill form's
fields (`source`, `protocol`, `protocol_options`, `output` — the base of the interval outputs —,
`emit`, `target_protocol`, `target_options`, `tables`, `max_bad_records`, ...), plus
`lateness_minutes` (default: one interval) and `require_complete` (default true); checked field by
field by the first task. The schedule (default `@hourly`) and the first interval (default
2026-01-01T00:00Z) come from `CDC_REPLAY_SCHEDULE` and `CDC_REPLAY_START` in the DAG processor's
environment; `CDC_REPLAY_CATCHUP=false` turns catchup off (history is then replayed only by
`airflow backfill create`).

Tasks: `plan` (the interval's request; refuses bad configuration), `wait_for_archive` (until
end + lateness has passed), `stage` (select the objects with boto3, stage them, write the
staged-objects manifest), `replay` (spark-submit on `spark_default`), `validate` (reconcile the
manifest, the quarantine limit, completeness), `publish` (clean the staging area, record metrics,
emit the output assets).
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
CATCHUP = os.environ.get("CDC_REPLAY_CATCHUP", "true").strip().lower() not in ("false", "0", "no", "off")


@dag(
    dag_id="cdc_replay_scheduled",
    # data intervals [start, end): a plain cron string would give Airflow 3's CronTriggerTimetable,
    # whose runs have no interval to select objects by
    schedule=CronDataIntervalTimetable(SCHEDULE, timezone="UTC"),
    start_date=START,
    catchup=CATCHUP,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["cdc-replay", "scheduled", "spark"],
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
)
def cdc_replay_scheduled():
    @task
    def plan(data_interval_start=None, data_interval_end=None, prev_data_interval_start_success=None,
             prev_data_interval_end_success=None) -> dict:
        from airflow.sdk import Variable
        from airflow.sdk.exceptions import AirflowFailException

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook

        config = Variable.get(VARIABLE, default=None, deserialize_json=True)
        previous = ((prev_data_interval_start_success, prev_data_interval_end_success)
                    if prev_data_interval_start_success else None)
        try:
            return tasks.plan_interval(config, data_interval_start, data_interval_end, first_start=START,
                                       previous=previous, exists=ArchiveHook().exists)
        except tasks.Refused as e:
            raise AirflowFailException(str(e)) from e

    @task.sensor(poke_interval=300, timeout=6 * 3600, mode="reschedule")
    def wait_for_archive(planned: dict):
        """Objects archived up to `lateness` after the interval belong to it: wait until then."""
        from airflow.sdk import PokeReturnValue

        ready_at = dt.datetime.fromisoformat(planned["objects_window"][1])
        now = dt.datetime.now(dt.timezone.utc)
        if now < ready_at:
            print(f"Waiting for the archive: objects archived until {ready_at.isoformat()} belong to this "
                  f"interval ({(ready_at - now).total_seconds() / 60:.0f} min to go)")
        return PokeReturnValue(is_done=now >= ready_at)

    @task
    def stage(planned: dict) -> dict:
        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook
        from cdc_replay_airflow.hooks.kafka import bootstrap_servers, client_config

        ti = get_current_context()["ti"]
        # archive objects: those archived in [start, end + lateness); a Kafka source: the offset
        # window of the data interval itself (kafka_window), read once end + lateness has passed
        window = planned["interval"] if planned.get("kafka_window") else planned["objects_window"]
        start, end = (dt.datetime.fromisoformat(t) for t in window)
        try:
            return tasks.stage(ArchiveHook(), planned["request"], dag_id=ti.dag_id, run_id=ti.run_id,
                               interval=(start, end), schema_from=planned.get("schema_from"),
                               chain_missing=planned.get("chain_missing"),
                               lake_window=bool(planned.get("lake_window")), kafka_servers=bootstrap_servers,
                               kafka_window=planned.get("kafka_window"), kafka_config=client_config)
        except LookupError as e:
            raise AirflowSkipException(f"{e}: nothing to replay") from e
        except tasks.Refused as e:
            raise AirflowFailException(str(e)) from e

    @task(show_return_value_in_logs=False)  # the metrics: the CDC replay page and the XCom show them
    def validate(planned: dict, staged: dict, replayed: dict) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook
        from cdc_replay_airflow.metrics import METRICS_KEY, Incomplete, ValidationError

        ti = get_current_context()["ti"]
        try:
            metrics = tasks.validate(ArchiveHook(), staged, dag_id=ti.dag_id, run_id=ti.run_id,
                                     data_interval=tuple(planned["interval"]),
                                     require_complete=planned["require_complete"])
        except ValidationError as e:
            if getattr(e, "metrics", None):
                ti.xcom_push(METRICS_KEY, e.metrics)
            if isinstance(e, Incomplete):
                raise AirflowFailException(f"{e}. Clear this run when the archive has caught up (or raise "
                                           "lateness_minutes in the Variable cdc_replay_scheduled)") from e
            raise AirflowFailException(str(e)) from e
        ti.xcom_push(METRICS_KEY, metrics)
        return metrics

    @task(outlets=[AssetAlias(ALIAS)], show_return_value_in_logs=False)
    def publish(planned: dict, staged: dict, metrics: dict) -> dict:
        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook
        from cdc_replay_airflow.metrics import METRICS_KEY

        context = get_current_context()
        published = tasks.publish(ArchiveHook(), staged, metrics)
        tasks.emit_assets(context["outlet_events"], ALIAS, published, series=planned["output_base"].rstrip("/"),
                          interval=planned["interval"])
        context["ti"].xcom_push(METRICS_KEY, published)
        return published

    planned = plan()
    staged = stage(planned)
    wait_for_archive(planned) >> staged
    replayed = ReplayOperator(task_id="replay", plan=staged, options_variable=VARIABLE)
    publish(planned, staged, validate(planned, staged, replayed.output))


cdc_replay_scheduled()
