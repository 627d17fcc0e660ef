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
from cdc_replay_airflow.request import (
    KAFKA_SOURCE_PATTERN,
    LAYOUTS,
    PROTOCOLS,
    TABLE_PATTERN,
    URI_PATTERN,
)
from spark_apps.contract import DISPATCHERS, EMITS, TARGET_FORMATS

DAG_ID = "cdc_replay_manual"
DEPRECATED_DAG_ID = "cdc_replay_backfill"
ALIAS = "cdc_replay_outputs"


# A commit ts is a TSO (integer, or its digits as text) or an ISO-8601 time. No `type`: a list of
# types makes the form draw a multi-line JSON editor and mark the field required; `anyOf` keeps
# one line of text, optional, while the REST API may still send an integer.
COMMIT_TS = {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 64}]}
COMMIT_TS_HELP = (" A TiDB TSO such as `463268123941142528` or an ISO-8601 time with its zone such as "
                  "`2026-01-01T00:00:30Z`.")


def _commit_ts_param(title: str, description: str) -> Param:
    return Param(None, **COMMIT_TS, title=f"{title} (TSO or ISO time)", description_md=description + COMMIT_TS_HELP,
                 section="What to replay")


PARAMS = {
    "source": Param("s3://cdc-archive/tidb/shop", type="string", pattern=f"{URI_PATTERN}|{KAFKA_SOURCE_PATTERN}",
                    title="Source archive",
                    description="s3://bucket/prefix (or an absolute local path) holding *.jsonl / *.jsonl.gz "
                                "Kafka-record objects, found recursively; or Kafka topics kafka://topic1,topic2 "
                                "read from the Kafka connection's cluster", section="Source"),
    "kafka_connection": Param("kafka_default", type=["null", "string"], pattern=r"^[A-Za-z0-9_.\-]+$",
                              title="Kafka connection",
                              description="Airflow connection of the Kafka cluster for a kafka:// source or output "
                                          "(its extra's bootstrap.servers, else host:port)", section="Source"),
    "starting_offsets": Param("earliest", type=["null", "string"], title="Kafka starting offsets",
                              description='kafka:// source: earliest, latest or JSON per partition '
                                          '{"topic": {"0": 42}} (-2 earliest, -1 latest)', section="Source"),
    "ending_offsets": Param("latest", type=["null", "string"], title="Kafka ending offsets",
                            description="kafka:// source: latest (the end when the run starts) or JSON per "
                                        "partition (exclusive)", section="Source"),
    "layout": Param("auto", type="string", enum=list(LAYOUTS), title="Archive layout",
                    description="how the source holds the records (docs/layouts.md): kafka-records, TiCDC's "
                                "storage sink (ticdc-storage), the Kafka Connect S3 sink (kafka-connect-s3); "
                                "auto detects it", section="Source"),
    "protocol": Param("canal-json", type="string", enum=list(PROTOCOLS), title="Source protocol",
                      description="protocol of the archived message values", section="Source"),
    "protocol_options": Param({"enable-tidb-extension": "true"}, type=["null", "object"],
                              additionalProperties={"type": ["string", "boolean", "integer"]},
                              title="Source protocol options",
                              description="codec options named as TiCDC's sink-URI parameters, e.g. "
                                          '{"enable-tidb-extension": "true"}', section="Source"),
    "tables": Param([], type=["null", "array"], items={"type": "string", "pattern": TABLE_PATTERN},
                    title="Tables", description="db.table patterns, one per line (shell wildcards: shop.*, "
                                                "*.orders); empty = every table", section="What to replay"),
    "as_of": _commit_ts_param("As of", "Replay up to and including this commit ts. Empty = the cut (the lowest "
                              "partition watermark; the archive's end without watermarks)."),
    "since": _commit_ts_param("Since", "Start of a window, exclusive: only changes committed after it. A snapshot "
                              "of a window needs a base snapshot (the snapshot at since); Delta / Iceberg tables need "
                              "none: the window is merged into them, `last` = the cut they hold."),
    "until": _commit_ts_param("Until", "End of a window, inclusive (the same bound as as_of: give one)."),
    "emit": Param("snapshot", type="string", enum=list(EMITS), title="Emit",
                  description="snapshot: one INSERT per live row at the cut; topics: the ordered, deduplicated "
                              "stream (rows and DDL) re-encoded; history: SCD type 2 versions of every row "
                              "(Parquet)", section="Output"),
    "target_protocol": Param(None, type=["null", "string"], enum=[None, *PROTOCOLS],
                             values_display={"null": "same as the source protocol"}, title="Target protocol",
                             description="protocol of the output records (empty = the source protocol)",
                             section="Output"),
    "target_options": Param({"enable-tidb-extension": "true"}, type=["null", "object"],
                            additionalProperties={"type": ["string", "boolean", "integer"]},
                            title="Target protocol options", description="codec options of the target protocol",
                            section="Output"),
    "dispatcher": Param("index-value", type=["null", "string"], enum=[None, *DISPATCHERS],
                        values_display={"null": "index-value (the default)"}, title="Partition dispatcher",
                        description="topics and snapshots in a Kafka-record archive: output partition of a row, "
                                    "as the producer places it: TiCDC's hash of its "
                                    "key (index-value), of its table, commit ts modulo partitions (ts), or Canal's "
                                    "key / table hash (canal, canal-table)", section="Output"),
    "target_partitions": Param(None, type=["null", "integer"], minimum=1, title="Partitions per output topic",
                               description="empty = as many as the source topics have", section="Output"),
    "target_topic": Param("{topic}", type=["null", "string"], pattern=r"^[A-Za-z0-9._\-{}]+$",
                          title="Output topic name", description="topics and snapshots in a Kafka-record archive: "
                          "{topic}, {schema} and {table} are replaced (empty: {topic})", section="Output"),
    "output": Param("s3://cdc-lake/replay/shop-snapshot", type="string", pattern=f"{URI_PATTERN}|^kafka://$",
                    title="Output URI",
                    description="s3://bucket/prefix (or an absolute local path), outside the source; replaced as "
                                "a whole when the run succeeds. Or kafka:// (emit topics): produced into the "
                                "Kafka connection's cluster, the manifest at the manifest URI", section="Output"),
    "max_bad_records": Param(0, type=["null", "integer"], minimum=0, title="Quarantine limit",
                             description="fail the run when more records than this are quarantined",
                             section="Output"),
}
PARAMS["target_format"] = Param(None, type=["null", "string"], enum=[None, *TARGET_FORMATS],
                                values_display={"null": "the emit mode's default"}, title="Target format", description="kafka: a Kafka-record archive in the target "
                                "protocol (default for snapshot and topics); parquet: one typed Parquet dataset "
                                "per table (snapshot; the default for history); delta / iceberg: one Delta Lake / "
                                "Iceberg table per source table, a new table version per run stamped with the "
                                "cut (snapshot, history; docs/lakehouse.md)", section="Output")
PARAMS["target_table"] = Param("{schema}.{table}", type=["null", "string"], pattern=r"^[^\s]+\.[^\s]+$",
                               title="Table name (Delta / Iceberg)", description="namespace.table with "
                               "{schema} and {table} replaced; Delta tables live at <output>/<namespace>/<table>",
                               section="Output")
PARAMS["catalog"] = Param({}, type=["null", "object"], additionalProperties={"type": ["string", "integer", "boolean"]},
                          title="Iceberg catalog", description="pyiceberg catalog properties: uri=sqlite:////"
                          "path/catalog.sqlite or uri=postgresql+psycopg2://user:pass@host/db (SQL catalog), "
                          "type=filesystem (Hadoop layout, local paths), type=rest + uri=...; empty = a SQLite "
                          "catalog in a local output (docs/lakehouse.md)", section="Output")
PARAMS["manifest_uri"] = Param(None, type=["null", "string"], pattern=URI_PATTERN + "|^$", title="Manifest URI",
                               description="with a kafka:// output: where the manifest of what was produced "
                               "(topic, partition, first/last offset, counts) and the quarantine go",
                               section="Output")
PARAMS["base_snapshot"] = Param(None, type=["null", "string"], pattern=URI_PATTERN + "|^$",
                                title="Base snapshot", description="output of an earlier snapshot run: the "
                                "window's changes are applied on top of it (since defaults to its cut)",
                                section="What to replay")
PARAMS["require_schema"] = Param(False, type=["null", "boolean"], title="Require schemas",
                                 description="quarantine rows of tables that no DDL, starting schema or base "
                                             "snapshot describes (default: read them with the schema the "
                                             "messages carry)", section="Source")
PARAMS["require_contiguous"] = Param(False, type=["null", "boolean"],
                                     title="Require contiguous offsets",
                                     description="fail the run when a source partition's Kafka offsets have "
                                                 "holes (a missing or truncated archive object); without it "
                                                 "the holes are only reported", section="Source")
PARAMS["schema"] = Param(None, type=["null", "string"], pattern=URI_PATTERN + "|^$", title="Starting schemas",
                         description="s3:// or local: a SQL file with CREATE TABLE statements for tables "
                                     "created before the archive starts, a TiCDC storage-sink schema file, or "
                                     "a prefix holding both (e.g. the storage sink's root)", section="Source")
PARAMS["spark_conf"] = Param({}, type=["null", "object"], additionalProperties={"type": ["string", "integer"]},
                             title="Spark resources", description="this run's Spark settings, e.g. "
                             '{"spark.executor.memory": "8g", "spark.executor.instances": "4", '
                             '"spark.sql.shuffle.partitions": "64"}: executor and driver memory and cores, '
                             "executor instances, cores.max, parallelism, shuffle partitions, dynamic allocation, "
                             "YARN queue, Kubernetes namespace (the rest is the deployment's: "
                             "CDC_REPLAY_SPARK_CONF)", section="Spark")

# limits per message and object, and the output lease (docs/reliability.md), after the output's
_LIMIT = "Limits (defaults suit most archives)"
PARAMS["max_columns"] = Param(4096, type=["null", "integer"], minimum=1, title="Columns per row image",
                              description="a message with a row image of more columns is quarantined (stage limit)",
                              section=_LIMIT)
PARAMS["max_rows"] = Param(100_000, type=["null", "integer"], minimum=1, title="Rows per message",
                           description="a message with more row events is quarantined (stage limit)",
                           section=_LIMIT)
PARAMS["max_inflate_ratio"] = Param(100.0, type=["null", "number"], minimum=1, title="Decompression ratio",
                                    description="an object that inflates beyond this times its stored size "
                                                "(at least 16 MiB) stops there; the lines before it are kept",
                                    section=_LIMIT)
PARAMS["max_line_bytes"] = Param(64 << 20, type=["null", "integer"], minimum=1, title="Line length (bytes)",
                                 description="a longer line of an archive object is quarantined (stage limit)",
                                 section=_LIMIT)
PARAMS["lease_timeout"] = Param(None, type=["null", "number"], minimum=1, title="Lease timeout (seconds)",
                                description="a run on another host holding the output's lease longer than "
                                            "this without a heartbeat is taken over (empty: the default, "
                                            "docs/reliability.md); a dead run on this host is taken over at once",
                                section=_LIMIT)

# the form: what everyone fills first (source, layout, protocol, ...); the Kafka-only fields
# (a kafka:// source or output) in their own section after the output's
for _name in ("kafka_connection", "starting_offsets", "ending_offsets"):
    PARAMS[_name] = PARAMS.pop(_name)
    PARAMS[_name].schema["section"] = "Kafka (kafka:// source or output only)"


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
            from airflow.sdk import Asset

            from cdc_replay_airflow import tasks
            from cdc_replay_airflow.hooks.archive import ArchiveHook
            from cdc_replay_airflow.metrics import METRICS_KEY

            context = get_current_context()
            published = tasks.publish(ArchiveHook(), plan, metrics)
            output = published["output"]
            if output.startswith("kafka://"):  # one asset per topic produced into, as kafka://servers/topic
                for topic in sorted({p["topic"] for p in published.get("produced") or []}):
                    context["outlet_events"][AssetAlias(ALIAS)].add(Asset(f"{output}/{topic}"),
                                                                     extra=tasks.asset_extra(published))
            else:
                asset = Asset(output if output.startswith("s3://") else f"file://{output}")
                context["outlet_events"][AssetAlias(ALIAS)].add(asset, extra=tasks.asset_extra(published))
            for uri, extra in tasks.table_assets(published):  # delta/iceberg: one asset per table
                context["outlet_events"][AssetAlias(ALIAS)].add(Asset(uri), extra=extra)
            context["ti"].xcom_push(METRICS_KEY, published)
            return published

        plan = stage(check())
        replayed = ReplayOperator(task_id="replay", plan=plan)
        publish(plan, validate(plan, replayed.output))


    return manual_replay()
