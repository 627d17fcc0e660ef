"""
### Replay a CDC archive once (manual backfill)

Trigger this DAG from the form: pick the archive (an `s3://bucket/prefix` holding the Kafka
records TiCDC, Canal or OceanBase sent, one JSON line per record), its protocol and codec
options, what to emit — a point-in-time **snapshot** (one INSERT per live row) or the ordered,
deduplicated **topics** re-encoded in any protocol — and where the output goes.

| task | what it does |
|---|---|
| `check` | checks every field (the form's schema first, then protocol options against the codec, table patterns, commit ts); a bad value fails the run here, naming the field, before any work starts |
| `stage` | lists the archive objects the replay will read (boto3, Airflow connection `aws_default`) and writes their list to `<output>/_staging/airflow/staged.json` |
| `replay` | runs `spark_apps/replay.py` with spark-submit on the `spark_default` connection (local[*] unless it names a cluster) |
| `validate` | reconciles the run's `_manifest.json` (read = applied + deduplicated + pending + filtered + quarantined) and the staged objects; fails loudly when more records were quarantined than `max_bad_records` |
| `publish` | removes the staging area, records the metrics (the **CDC replay** page in the UI), and emits an asset event for the output URI (through the `cdc_replay_outputs` alias), so downstream DAGs can schedule on it |

The output prefix is replaced as a whole when a run succeeds, so re-running is safe.
Commit ts fields take a TiDB TSO (an integer) or an ISO-8601 time such as `2026-01-01T00:00:30Z`.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import AssetAlias, Param, dag, get_current_context, task

from cdc_replay_airflow.operators.replay import ReplayOperator
from cdc_replay_airflow.request import LAYOUTS, PROTOCOLS, TABLE_PATTERN, URI_PATTERN, app_capabilities

ALIAS = "cdc_replay_outputs"
CAPS = app_capabilities()


def _commit_ts_param(title: str, description: str, option: str) -> Param:
    if not CAPS.accepts(option):
        description += (f" **Not accepted yet**: the installed replay app has no `{option}` (it arrives with "
                        "cdc-replay issue 5); a value here is refused.")
    return Param(None, type=["null", "integer", "string"], title=title, description_md=description,
                 section="What to replay")


PARAMS = {
    "source": Param("s3://cdc-archive/tidb/shop", type="string", pattern=URI_PATTERN, title="Source archive",
                    description="s3://bucket/prefix (or an absolute local path) holding *.jsonl / *.jsonl.gz "
                                "Kafka-record objects, found recursively", section="Source"),
    "layout": Param("auto", type="string", enum=list(LAYOUTS), title="Archive layout",
                    description="how the source holds the records (docs/layouts.md): kafka-records, TiCDC's "
                                "storage sink (ticdc-storage), the Kafka Connect S3 sink (kafka-connect-s3); "
                                "auto detects it", section="Source"),
    "protocol": Param("canal-json", type="string", enum=list(PROTOCOLS), title="Source protocol",
                      description="protocol of the archived message values", section="Source"),
    "protocol_options": Param({"enable-tidb-extension": "true"}, type="object",
                              additionalProperties={"type": ["string", "boolean", "integer"]},
                              title="Source protocol options",
                              description="codec options named as TiCDC's sink-URI parameters, e.g. "
                                          '{"enable-tidb-extension": "true"}', section="Source"),
    "tables": Param([], type="array", items={"type": "string", "pattern": TABLE_PATTERN},
                    title="Tables", description="db.table patterns, one per line (shell wildcards: shop.*, "
                                                "*.orders); empty = every table", section="What to replay"),
    "as_of": _commit_ts_param("As of", "Replay up to and including this commit ts. Empty = the cut (the lowest "
                              "partition watermark; the archive's end without watermarks).", "--as-of"),
    "since": _commit_ts_param("Since", "Start of a window, exclusive: only changes committed after it. A snapshot "
                              "of a window needs a base snapshot (the snapshot at since); Delta / Iceberg tables need none: "
                              "the window is merged into them, `last` = the cut they hold.", "--since"),
    "until": _commit_ts_param("Until", "End of a window, inclusive (the same bound as as_of: give one).",
                              "--until"),
    "emit": Param("snapshot", type="string", enum=list(CAPS.emit_modes), title="Emit",
                  description="snapshot: one INSERT per live row at the cut; topics: the ordered, deduplicated "
                              "stream (rows and DDL) re-encoded; history: SCD type 2 versions of every row "
                              "(Parquet)", section="Output"),
    "target_protocol": Param(None, type=["null", "string"], enum=[None, *PROTOCOLS], title="Target protocol",
                             description="protocol of the output records (empty = the source protocol)",
                             section="Output"),
    "target_options": Param({"enable-tidb-extension": "true"}, type="object",
                            additionalProperties={"type": ["string", "boolean", "integer"]},
                            title="Target protocol options", description="codec options of the target protocol",
                            section="Output"),
    "dispatcher": Param("index-value", type="string", enum=list(CAPS.dispatchers), title="Partition dispatcher",
                        description="output partition of a row, as the producer places it: TiCDC's hash of its "
                                    "key (index-value), of its table, commit ts modulo partitions (ts), or Canal's "
                                    "key / table hash (canal, canal-table)", section="Output"),
    "target_partitions": Param(None, type=["null", "integer"], minimum=1, title="Partitions per output topic",
                               description="empty = as many as the source topics have", section="Output"),
    "target_topic": Param("{topic}", type="string", pattern=r"^[A-Za-z0-9._\-{}]+$", title="Output topic name",
                          description="{topic}, {schema} and {table} are replaced", section="Output"),
    "output": Param("s3://cdc-lake/replay/shop-snapshot", type="string", pattern=URI_PATTERN, title="Output URI",
                    description="s3://bucket/prefix (or an absolute local path), outside the source; replaced as "
                                "a whole when the run succeeds", section="Output"),
    "max_bad_records": Param(0, type="integer", minimum=0, title="Quarantine limit",
                             description="fail the run when more records than this are quarantined",
                             section="Output"),
}
if CAPS.accepts("--target-format"):
    PARAMS["target_format"] = Param(None, type=["null", "string"], enum=[None, *CAPS.target_formats],
                                    title="Target format", description="kafka: a Kafka-record archive in the target "
                                    "protocol (default for snapshot and topics); parquet: one typed Parquet dataset "
                                    "per table (snapshot; the default for history); delta / iceberg: one Delta Lake / "
                                    "Iceberg table per source table, a new table version per run stamped with the "
                                    "cut (snapshot, history; docs/lakehouse.md)", section="Output")
if CAPS.accepts("--target-table"):
    PARAMS["target_table"] = Param("{schema}.{table}", type="string", pattern=r"^[^\s]+\.[^\s]+$",
                                   title="Table name (Delta / Iceberg)", description="namespace.table with "
                                   "{schema} and {table} replaced; Delta tables live at <output>/<namespace>/<table>",
                                   section="Output")
if CAPS.accepts("--catalog"):
    PARAMS["catalog"] = Param({}, type="object", additionalProperties={"type": ["string", "integer", "boolean"]},
                              title="Iceberg catalog", description="pyiceberg catalog properties: uri=sqlite:////"
                              "path/catalog.sqlite or uri=postgresql+psycopg2://user:pass@host/db (SQL catalog), "
                              "type=filesystem (Hadoop layout, local paths), type=rest + uri=...; empty = a SQLite "
                              "catalog in a local output (docs/lakehouse.md)", section="Output")
if CAPS.accepts("--base-snapshot"):
    PARAMS["base_snapshot"] = Param(None, type=["null", "string"], pattern=URI_PATTERN + "|^$",
                                    title="Base snapshot", description="output of an earlier snapshot run: the "
                                    "window's changes are applied on top of it (since defaults to its cut)",
                                    section="What to replay")
if CAPS.accepts("--require-schema"):
    PARAMS["require_schema"] = Param(False, type="boolean", title="Require schemas",
                                     description="quarantine rows of tables that no DDL, starting schema or base "
                                                 "snapshot describes (default: read them with the schema the "
                                                 "messages carry)", section="Source")
if CAPS.accepts("--require-contiguous"):
    PARAMS["require_contiguous"] = Param(False, type="boolean", title="Require contiguous offsets",
                                         description="fail the run when a source partition's Kafka offsets have "
                                                     "holes (a missing or truncated archive object); without it "
                                                     "the holes are only reported", section="Source")
if CAPS.accepts("--schema"):
    PARAMS["schema"] = Param(None, type=["null", "string"], pattern=URI_PATTERN + "|^$", title="Starting schemas",
                             description="s3:// or local: a SQL file with CREATE TABLE statements for tables "
                                         "created before the archive starts, a TiCDC storage-sink schema file, or "
                                         "a prefix holding both (e.g. the storage sink's root)", section="Source")


@dag(
    dag_id="cdc_replay_backfill",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=2,
    doc_md=__doc__,
    tags=["cdc-replay", "backfill", "spark"],
    params=PARAMS,
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
)
def cdc_replay_backfill():
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

        ti = get_current_context()["ti"]
        try:
            return tasks.stage(ArchiveHook(), request, dag_id=ti.dag_id, run_id=ti.run_id)
        except LookupError as e:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(str(e)) from e

    @task
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

    @task(outlets=[AssetAlias(ALIAS)])
    def publish(plan: dict, metrics: dict) -> dict:
        from airflow.sdk import Asset

        from cdc_replay_airflow import tasks
        from cdc_replay_airflow.hooks.archive import ArchiveHook
        from cdc_replay_airflow.metrics import METRICS_KEY

        context = get_current_context()
        published = tasks.publish(ArchiveHook(), plan, metrics)
        output = published["output"]
        asset = Asset(output if output.startswith("s3://") else f"file://{output}")
        context["outlet_events"][AssetAlias(ALIAS)].add(asset, extra=tasks.asset_extra(published))
        for uri, extra in tasks.table_assets(published):  # delta/iceberg: one asset per table
            context["outlet_events"][AssetAlias(ALIAS)].add(Asset(uri), extra=extra)
        context["ti"].xcom_push(METRICS_KEY, published)
        return published

    plan = stage(check())
    replayed = ReplayOperator(task_id="replay", plan=plan)
    publish(plan, validate(plan, replayed.output))


cdc_replay_backfill()
