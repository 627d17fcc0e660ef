"""The option table: every option of a replay request declared once — its name, type, default,
choices, help, and which entry points show it (`cdc-replay replay` and the Spark app share one
argparse parser; the Airflow request and its form show some). From it come the argparse parser
(add_replay_arguments), the app's arguments (ReplayArgs), their rendering back to argv
(spark_apps.contract.to_argv), the Airflow request's fields (cdc_replay_airflow.request) and the
form's Params (cdc_replay_airflow.manual). Adding an option: a row here, the code that uses it,
docs (docs/architecture.md "Options").

The choices (registries) and the commit-ts types are declared here too, for the table; the
request contract (spark_apps.contract), which holds every rule on a whole request, re-exports
them. Standard library only, importing nothing of ours: the contract and DAG files import it at
parse time, and `cdc-replay --help` stays fast (no Spark, Airflow, sqlglot or boto3)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import re
from typing import Any, Callable

# --- registries: the choices of the options ------------------------------------------------------

# The protocols cdc_codecs registers, and whether it writes them (codecs import nothing of ours,
# and importing them takes ~1.5 s (sqlglot): tests/test_contract.py checks this against
# cdc_codecs.protocols() and each codec's `writable`).
PROTOCOLS = {"avro": True, "canal-json": True, "canal-protobuf": True, "craft": True, "csv": False,
             "oceanbase-avro": True, "open-protocol": True}
# --layout: how an archive holds its records (spark_apps.layouts registers one reader per name)
LAYOUTS = ("auto", "kafka-records", "ticdc-storage", "kafka-connect-s3")
TARGET_LAYOUTS = ("kafka-records", "ticdc-storage")
EMITS = ("snapshot", "topics", "history")
TARGET_FORMATS = ("kafka", "parquet", "delta", "iceberg")
DISPATCHERS = ("index-value", "table", "ts", "canal", "canal-table")
DEFAULT_TARGET_TOPIC = "{topic}"
DEFAULT_TARGET_TABLE = "{schema}.{table}"
# shapes of values (the contract's rules and the Airflow form's patterns)
TABLE_PATTERN = r"^[^.\s,]+\.[^.\s,]+$"
_BUCKET = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
URI_PATTERN = rf"^(s3://{_BUCKET}(/[^\s]*)?|file:///[^\s]*|/[^\s]*)$"
# Kafka in the form: the bootstrap servers come from an Airflow connection (`kafka_connection`,
# default kafka_default), so the source names topics only and the output just says kafka
KAFKA_SOURCE_PATTERN = r"^kafka://[A-Za-z0-9._\-]+(,[A-Za-z0-9._\-]+)*$"

# --- commit ts ----------------------------------------------------------------------------------

LAST_CUT = "last"


class Invalid(argparse.ArgumentTypeError, ValueError):
    """A value that cannot be used; argparse shows its message as is."""


def commit_ts(text) -> int:
    """A commit ts given as a TSO integer or as an ISO-8601 time with a zone (converted to the
    TSO of that millisecond); Invalid says which forms are accepted."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise Invalid(f"{text} is negative; a commit ts (TSO) is 0 or more")
        return text
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    if re.fullmatch(r"-\d+", text):
        raise Invalid(f"{text} is negative; a commit ts (TSO) is 0 or more")
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Invalid(f"{text!r} is neither a commit ts (TSO integer) nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise Invalid(f"{text!r} has no time zone (add Z or +00:00)")
    # imported here: the table stays standard-library-only until a time has to become a TSO
    from cdc_codecs.tso import from_datetime

    return from_datetime(moment)


commit_ts.__name__ = "commit ts"  # argparse names the type in its error: "invalid commit ts value"


def since_ts(text) -> int | str:
    """--since: a commit ts, or `last` (a lakehouse snapshot: the tables' last committed cut)."""
    return LAST_CUT if str(text).strip().lower() == LAST_CUT else commit_ts(text)


since_ts.__name__ = "commit ts (or last)"


# --- the table ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Field:
    """An option's field in the Airflow request (cdc_replay_airflow.request) and its form.
    `kind` says how the request's value is read and handed to the app: text, flag, uri, pairs
    ({"k": "v"} -> repeated K=V), tables (a list -> db.table,...), commit_ts, int, number,
    spark_conf (the run's Spark resources, passed apart from the other arguments). `default` is
    the request's (None: the option's); `form` the form's Param (keyword arguments, `value`
    its default), None when the form does not show it."""

    name: str
    kind: str
    default: Any = None
    form: dict | None = None


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a replay request. `group` is its section of `cdc-replay replay --help`
    (None: not an app option, the Airflow request's only); `type`, `default`, `choices`,
    `metavar`, `required`, `action` and `help` are argparse's; `request` its Airflow field (None:
    the command line and the app only); `always_rendered`: given in argv even at its default."""

    name: str
    group: str | None
    help: str | None = None
    type: Callable | None = None
    default: Any = None
    choices: tuple | None = None
    metavar: str | None = None
    required: bool = False
    action: str | None = None
    request: Field | None = None
    always_rendered: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def app_default(self):
        """The value ReplayArgs holds when the option is not given."""
        if self.action == "append":
            return []
        if self.action == "store_true":
            return False
        return self.default


IO = "input and output"
WHAT = "what to emit"
RUN = "running"
LIMITS = ("limits (a message or object beyond one is quarantined with the reason; "
          "docs/reliability.md)")

# the Airflow form's sections, in the order the form shows them
SOURCE, REPLAYED, OUTPUT, SPARK = "Source", "What to replay", "Output", "Spark"
FORM_LIMITS = "Limits (defaults suit most archives)"
FORM_KAFKA = "Kafka (kafka:// source or output only)"
FORM_SECTIONS = (SOURCE, REPLAYED, OUTPUT, SPARK, FORM_LIMITS, FORM_KAFKA)

# A commit ts in the form is a TSO (integer, or its digits as text) or an ISO-8601 time. No
# `type`: a list of types makes the form draw a multi-line JSON editor and mark the field
# required; `anyOf` keeps one line of text, optional, while the REST API may still send an integer.
COMMIT_TS_SCHEMA = {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 64}]}
COMMIT_TS_HELP = (" A TiDB TSO such as `463268123941142528` or an ISO-8601 time with its zone such as "
                  "`2026-01-01T00:00:30Z`.")


def _commit_ts_form(title: str, description: str) -> dict:
    return {"value": None, **COMMIT_TS_SCHEMA, "title": f"{title} (TSO or ISO time)",
            "description_md": description + COMMIT_TS_HELP, "section": REPLAYED}


def _form(value, section: str, title: str, description: str, **schema) -> dict:
    return {"value": value, **schema, "title": title, "description": description, "section": section}


# In the order of `cdc-replay replay --help` (its usage line and groups).
OPTIONS: tuple[Option, ...] = (
    Option("source", IO, required=True, metavar="URI",
           help="archive to replay: a local directory or s3://bucket/prefix, read as --layout says "
                "(kafka-records: every *.jsonl object below it, recursively, skipping _* and .* paths, "
                "holds one Kafka record per line; .gz, .zst, .lz4 and .snappy objects are decompressed). Or Kafka topics: "
                "kafka://host:port/topic1,topic2 (docs/kafka.md)",
           request=Field("source", "source", form=_form(
               "s3://cdc-archive/tidb/shop", SOURCE, "Source archive",
               "s3://bucket/prefix (or an absolute local path) holding *.jsonl / *.jsonl.gz "
               "Kafka-record objects, found recursively; or Kafka topics kafka://topic1,topic2 "
               "read from the Kafka connection's cluster",
               type="string", pattern=f"{URI_PATTERN}|{KAFKA_SOURCE_PATTERN}"))),
    Option("layout", IO, default="auto", choices=LAYOUTS,
           help="how the source holds the records (docs/layouts.md): kafka-records (our JSON lines), "
                "ticdc-storage (TiCDC's cloud storage sink: data files, index files, schema files and "
                "the root metadata checkpoint), kafka-connect-s3 (the Kafka Connect S3 sink's Avro, "
                "JSON or ByteArray objects with optional .keys/.headers files); auto (default) detects "
                "it from the object names and logs what it found",
           request=Field("layout", "text", form=_form(
               "auto", SOURCE, "Archive layout",
               "how the source holds the records (docs/layouts.md): kafka-records, TiCDC's "
               "storage sink (ticdc-storage), the Kafka Connect S3 sink (kafka-connect-s3); "
               "auto detects it", type="string", enum=list(LAYOUTS)))),
    Option("layout_option", IO, action="append", metavar="K=V",
           help="layout option (repeatable), named as the producer's setting, e.g. "
                "format.bytearray.separator=\\r\\n for kafka-connect-s3 ByteArrayFormat objects; "
                "time-zone=ZONE for ticdc-storage: the TiCDC server's local zone, which names its date "
                "directories (used by the --base-export gap check)"),
    Option("starting_offsets", IO, default="earliest", metavar="OFFSETS",
           help="Kafka source: where to start, as Spark's Kafka source takes it: earliest (default), "
                'latest, or JSON per partition {"topic": {"0": 42, "1": -2}} (-2 earliest, -1 latest)',
           request=Field("starting_offsets", "text", form=_form(
               "earliest", FORM_KAFKA, "Kafka starting offsets",
               'kafka:// source: earliest, latest or JSON per partition '
               '{"topic": {"0": 42}} (-2 earliest, -1 latest)', type=["null", "string"]))),
    Option("ending_offsets", IO, default="latest", metavar="OFFSETS",
           help="Kafka source: where to stop (exclusive): latest (default, the end when the run "
                "starts) or JSON per partition (-1 latest)",
           request=Field("ending_offsets", "text", form=_form(
               "latest", FORM_KAFKA, "Kafka ending offsets",
               "kafka:// source: latest (the end when the run starts) or JSON per "
               "partition (exclusive)", type=["null", "string"]))),
    Option("protocol", IO, required=True, metavar="P",
           help="protocol of the archived values (see `cdc-replay protocols`)",
           request=Field("protocol", "text", form=_form(
               "canal-json", SOURCE, "Source protocol", "protocol of the archived message values",
               type="string", enum=list(PROTOCOLS)))),
    Option("protocol_option", IO, action="append", metavar="K=V",
           help="source codec option, named as TiCDC's sink-URI parameter, e.g. "
                "enable-tidb-extension=true (repeatable; K=V&K2=V2 also accepted)",
           request=Field("protocol_options", "pairs", form=_form(
               {"enable-tidb-extension": "true"}, SOURCE, "Source protocol options",
               "codec options named as TiCDC's sink-URI parameters, e.g. "
               '{"enable-tidb-extension": "true"}', type=["null", "object"],
               additionalProperties={"type": ["string", "boolean", "integer"]}))),
    Option("output", IO, required=True, metavar="URI",
           help="where the result goes (local directory or s3://bucket/prefix, or kafka://host:port to "
                "produce the records into a Kafka cluster, see --manifest-uri). It is replaced "
                "as a whole when the run succeeds: data is staged under <output>/_staging/ and "
                "committed last, with <output>/_manifest.json; the quarantine is <output>/_quarantine/",
           request=Field("output", "output", form=_form(
               "s3://cdc-lake/replay/shop-snapshot", OUTPUT, "Output URI",
               "s3://bucket/prefix (or an absolute local path), outside the source; replaced as "
               "a whole when the run succeeds. Or kafka:// (emit topics): produced into the "
               "Kafka connection's cluster, the manifest at the manifest URI",
               type="string", pattern=f"{URI_PATTERN}|^kafka://$"))),
    Option("manifest_uri", IO, metavar="URI",
           help="with --output kafka://host:port: where the manifest (what was produced: topic, "
                "partition, first/last offset, counts), the quarantine and the produced-partition "
                "markers go (local directory or s3://bucket/prefix)",
           request=Field("manifest_uri", "uri", form=_form(
               None, OUTPUT, "Manifest URI",
               "with a kafka:// output: where the manifest of what was produced "
               "(topic, partition, first/last offset, counts) and the quarantine go",
               type=["null", "string"], pattern=URI_PATTERN + "|^$"))),
    Option("emit", WHAT, required=True, choices=EMITS,
           help="snapshot: one INSERT per live row at the cut; topics: the ordered, "
                "deduplicated stream (rows and DDL) re-encoded; history: SCD type 2 versions "
                "of every row (valid-from / valid-to commit ts, operation) as Parquet",
           request=Field("emit", "text", default="snapshot", form=_form(
               "snapshot", OUTPUT, "Emit",
               "snapshot: one INSERT per live row at the cut; topics: the ordered, deduplicated "
               "stream (rows and DDL) re-encoded; history: SCD type 2 versions of every row "
               "(Parquet)", type="string", enum=list(EMITS)))),
    Option("target_format", WHAT, choices=TARGET_FORMATS,
           help="kafka (default for snapshot/topics): a Kafka-record archive in --target-protocol; "
                "parquet (snapshot, and the default for history): one Parquet dataset per table "
                "at <output>/<db>/<table>/ with typed columns; delta / iceberg (snapshot, history): "
                "one Delta Lake / Iceberg table per source table, one table version per run stamped "
                "with the cut (docs/lakehouse.md)",
           request=Field("target_format", "text", form=_form(
               None, OUTPUT, "Target format",
               "kafka: a Kafka-record archive in the target "
               "protocol (default for snapshot and topics); parquet: one typed Parquet dataset "
               "per table (snapshot; the default for history); delta / iceberg: one Delta Lake / "
               "Iceberg table per source table, a new table version per run stamped with the "
               "cut (snapshot, history; docs/lakehouse.md)", type=["null", "string"],
               enum=[None, *TARGET_FORMATS], values_display={"null": "the emit mode's default"}))),
    Option("target_table", WHAT, default=DEFAULT_TARGET_TABLE, metavar="TEMPLATE",
           help="delta/iceberg table name, {schema} and {table} replaced (default: %(default)s): "
                "Iceberg namespace.table in the catalog; Delta tables live at <output>/<ns>/<table>/",
           request=Field("target_table", "text", form=_form(
               DEFAULT_TARGET_TABLE, OUTPUT, "Table name (Delta / Iceberg)",
               "namespace.table with {schema} and {table} replaced; Delta tables live at "
               "<output>/<namespace>/<table>", type=["null", "string"], pattern=r"^[^\s]+\.[^\s]+$"))),
    Option("catalog", WHAT, action="append", metavar="K=V",
           help="Iceberg catalog property for pyiceberg (repeatable), e.g. "
                "uri=postgresql+psycopg2://u:p@host/db; default: a SQL catalog on SQLite at "
                "<output>/_catalog.sqlite with <output> as warehouse",
           request=Field("catalog", "pairs", form=_form(
               {}, OUTPUT, "Iceberg catalog",
               "pyiceberg catalog properties: uri=sqlite:////"
               "path/catalog.sqlite or uri=postgresql+psycopg2://user:pass@host/db (SQL catalog), "
               "type=filesystem (Hadoop layout, local paths), type=rest + uri=...; empty = a SQLite "
               "catalog in a local output (docs/lakehouse.md)", type=["null", "object"],
               additionalProperties={"type": ["string", "integer", "boolean"]}))),
    Option("target_layout", WHAT, default="kafka-records", choices=TARGET_LAYOUTS,
           help="layout of a Kafka output (docs/layouts.md): kafka-records (default) or ticdc-storage, "
                "row events per table as TiCDC's cloud storage sink writes them (canal-json data "
                "files, index files, root metadata with the cut as checkpoint-ts), which --layout "
                "ticdc-storage reads back"),
    Option("target_protocol", WHAT, metavar="Q",
           help="protocol of the output records (default: the source protocol)",
           request=Field("target_protocol", "text", form=_form(
               None, OUTPUT, "Target protocol", "protocol of the output records (empty = the source protocol)",
               type=["null", "string"], enum=[None, *PROTOCOLS],
               values_display={"null": "same as the source protocol"}))),
    Option("target_option", WHAT, action="append", metavar="K=V",
           help="target codec option (repeatable), e.g. enable-tidb-extension=true",
           request=Field("target_options", "pairs", form=_form(
               {"enable-tidb-extension": "true"}, OUTPUT, "Target protocol options",
               "codec options of the target protocol", type=["null", "object"],
               additionalProperties={"type": ["string", "boolean", "integer"]}))),
    Option("as_of", WHAT, type=commit_ts, metavar="COMMIT_TS",
           help="replay up to this commit ts: a TSO, or an ISO-8601 time with a zone "
                "(2026-01-01T03:00:00Z), converted to the TSO of that millisecond. Default: the cut, the highest commit ts every "
                "source partition's watermark has passed (the archive's end when there are no "
                "watermarks). Events above it are reported as pending",
           request=Field("as_of", "commit_ts", form=_commit_ts_form(
               "As of", "Replay up to and including this commit ts. Empty = the cut (the lowest "
               "partition watermark; the archive's end without watermarks)."))),
    Option("until", WHAT, type=commit_ts, metavar="COMMIT_TS",
           help="end of a window (inclusive); the same as --as-of",
           request=Field("until", "commit_ts", form=_commit_ts_form(
               "Until", "End of a window, inclusive (the same bound as as_of: give one)."))),
    Option("since", WHAT, type=since_ts, metavar="COMMIT_TS",
           help="start of a window (exclusive): changes at or below it are outside the window "
                "(counted as filtered). A snapshot or history of a window needs --base-snapshot, "
                "the snapshot at --since; topics of a window are just the window's changes. A "
                "Delta/Iceberg snapshot merges the window into its tables (no --base-snapshot); "
                "`--since last` is their last committed cut, read from their metadata",
           request=Field("since", "commit_ts", form=_commit_ts_form(
               "Since", "Start of a window, exclusive: only changes committed after it. A snapshot "
               "of a window needs a base snapshot (the snapshot at since); Delta / Iceberg tables need "
               "none: the window is merged into them, `last` = the cut they hold."))),
    Option("base_snapshot", WHAT, metavar="URI",
           help="output of an earlier snapshot run (its manifest gives its cut, protocol and table "
                "schemas): the window's changes are applied on top of its rows, so backfills can "
                "be incremental. --since defaults to its cut",
           request=Field("base_snapshot", "uri", form=_form(
               None, REPLAYED, "Base snapshot",
               "output of an earlier snapshot run: the "
               "window's changes are applied on top of it (since defaults to its cut)",
               type=["null", "string"], pattern=URI_PATTERN + "|^$"))),
    Option("base_export", WHAT, metavar="URI",
           help="a full export the archive continues, local or s3://: a Dumpling export (SQL or CSV; its "
                "metadata's TSO) or mysqldump file(s) (--source-data=2; its binlog position). Its CREATE "
                "statements are the starting schemas and its rows the snapshot's starting rows; archive "
                "events it already holds are skipped (counted in_base). --emit snapshot or history as Parquet, "
                "Delta or Iceberg, snapshot or topics (an INSERT per exported row first) as Kafka records; not "
                "with --since or --base-snapshot (docs/base-exports.md)",
           request=Field("base_export", "uri", form=_form(
               None, REPLAYED, "Base export",
               "a Dumpling export or mysqldump file(s) the archive continues: the snapshot starts from its "
               "tables and rows (snapshot, history or topics; Parquet, Kafka records, Delta or Iceberg; the "
               "scheduled DAG: Parquet/Kafka-record snapshots only)",
               type=["null", "string"], pattern=URI_PATTERN + "|^$"))),
    Option("base_export_time_zone", WHAT, metavar="ZONE",
           help="with --base-export: the zone its TIMESTAMP text is in (IANA name like Asia/Shanghai, +hh:mm "
                "or UTC; not SYSTEM): Dumpling's session time_zone (the server's unless --params time_zone=...), "
                "mysqldump --skip-tz-utc's server zone (a dump's own SET TIME_ZONE line must agree). When the "
                "archive's zone is known too (canal-protobuf: UTC; TiCDC protocols: --protocol-option tz=ZONE, "
                "TiCDC's --tz) and differs, the export's TIMESTAMP values are converted to it",
           request=Field("base_export_time_zone", "text", form=_form(
               None, REPLAYED, "Base export time zone",
               "the zone the base export's TIMESTAMP values are in (Asia/Shanghai, +08:00, UTC): they are "
               "converted to the archive's zone (canal-protobuf: UTC; TiCDC: protocol option tz)",
               type=["null", "string"], pattern=r"^[A-Za-z0-9_+\-/:]*$"))),
    Option("tables", WHAT, metavar="db.table,...",
           help="only these tables; shell wildcards allowed (shop.*, *.orders), case-insensitive",
           request=Field("tables", "tables", form=_form(
               [], REPLAYED, "Tables", "db.table patterns, one per line (shell wildcards: shop.*, "
               "*.orders); empty = every table", type=["null", "array"],
               items={"type": "string", "pattern": TABLE_PATTERN}))),
    Option("schema", WHAT, metavar="URI",
           help="starting schemas, local or s3://: a SQL file of CREATE TABLE statements (USE db; "
                "allowed), a TiCDC storage-sink table schema file (schema_<version>_<crc>.json), or a "
                "prefix holding any number of both (e.g. a storage sink's root: *.sql and "
                "meta/schema_*.json are read, other objects ignored). They describe tables as they were "
                "before the archive starts (a table's earliest schema file); DDL in the archive is "
                "applied on top, and every schema file version is cross-checked with the DDL history "
                "(disagreements listed in the manifest's schema_conflicts)",
           request=Field("schema", "uri", form=_form(
               None, SOURCE, "Starting schemas",
               "s3:// or local: a SQL file with CREATE TABLE statements for tables "
               "created before the archive starts, a TiCDC storage-sink schema file, or "
               "a prefix holding both (e.g. the storage sink's root)",
               type=["null", "string"], pattern=URI_PATTERN + "|^$"))),
    Option("require_schema", WHAT, action="store_true",
           help="quarantine row events of tables that neither the archive's DDL, --schema nor "
                "--base-snapshot describes (default: read them with the schema the messages carry)",
           request=Field("require_schema", "flag", form=_form(
               False, SOURCE, "Require schemas",
               "quarantine rows of tables that no DDL, starting schema or base "
               "snapshot describes (default: read them with the schema the "
               "messages carry)", type=["null", "boolean"]))),
    Option("require_contiguous", WHAT, action="store_true",
           help="fail the run (exit 2, nothing written) when a source partition's Kafka offsets have "
                "holes between the lowest and highest offset the archive holds (a missing or truncated "
                "archive object). Without it the holes are listed in the manifest (gaps) and the summary. "
                "Transactional producers and compacted topics leave holes too",
           request=Field("require_contiguous", "flag", form=_form(
               False, SOURCE, "Require contiguous offsets",
               "fail the run when a source partition's Kafka offsets have "
               "holes (a missing or truncated archive object); without it "
               "the holes are only reported", type=["null", "boolean"]))),
    Option("target_topic", WHAT, default=DEFAULT_TARGET_TOPIC, metavar="TEMPLATE",
           help="output topic name; {topic} (source topic), {schema} and {table} are replaced "
                "(default: %(default)s)",
           request=Field("target_topic", "text", form=_form(
               DEFAULT_TARGET_TOPIC, OUTPUT, "Output topic name",
               "topics and snapshots in a Kafka-record archive: "
               "{topic}, {schema} and {table} are replaced (empty: {topic})",
               type=["null", "string"], pattern=r"^[A-Za-z0-9._\-{}]+$"))),
    Option("target_partitions", WHAT, type=int, metavar="N",
           help="partitions per output topic (default: as many as the source topics have)",
           request=Field("target_partitions", "int", form=_form(
               None, OUTPUT, "Partitions per output topic", "empty = as many as the source topics have",
               type=["null", "integer"], minimum=1))),
    Option("dispatcher", WHAT, default="index-value", choices=DISPATCHERS,
           help="output partition of a row, placed exactly as the producer does: TiCDC's "
                "index-value (default: crc32 of database+table XOR crc32 of each handle-key column's "
                "name+value, %% N), table (crc32 of database+table), ts (commit ts %% N); Canal's "
                "placement (Java String.hashCode of database and key values, abs(h) %% N) or Canal's "
                "table hash. DDL and watermarks go where the target protocol's producer puts them",
           request=Field("dispatcher", "text", form=_form(
               "index-value", OUTPUT, "Partition dispatcher",
               "topics and snapshots in a Kafka-record archive: output partition of a row, "
               "as the producer places it: TiCDC's hash of its "
               "key (index-value), of its table, commit ts modulo partitions (ts), or Canal's "
               "key / table hash (canal, canal-table)", type=["null", "string"],
               enum=[None, *DISPATCHERS], values_display={"null": "index-value (the default)"}))),
    Option("max_bad_records", RUN, type=int, default=0, metavar="N", always_rendered=True,  # the operator's exit 3 rule reads it
           help="fail the run when more than N records are quarantined (default: %(default)s); "
                "the output is committed either way so the quarantine can be inspected",
           request=Field("max_bad_records", "int", form=_form(
               0, OUTPUT, "Quarantine limit", "fail the run when more records than this are quarantined",
               type=["null", "integer"], minimum=0))),
    Option("max_records_per_object", RUN, type=int, default=100_000, metavar="N",
           help="roll output objects after N records (default: %(default)s)"),
    Option("master", RUN, default="local[*]",
           help="Spark master: local[*] (default, embedded) or a cluster URL such as spark://host:7077"),
    Option("spark_conf", RUN, action="append", metavar="K=V",
           help="extra Spark configuration (repeatable)",
           request=Field("spark_conf", "spark_conf", form=_form(
               {}, SPARK, "Spark resources", "this run's Spark settings, e.g. "
               '{"spark.executor.memory": "8g", "spark.executor.instances": "4", '
               '"spark.sql.shuffle.partitions": "64"}: executor and driver memory and cores, '
               "executor instances, cores.max, parallelism, shuffle partitions, dynamic allocation, "
               "YARN queue, Kubernetes namespace (the rest is the deployment's: "
               "CDC_REPLAY_SPARK_CONF)", type=["null", "object"],
               additionalProperties={"type": ["string", "integer"]}))),
    Option("spark_ui", RUN, action="store_true",
           help="serve Spark's web UI while the run lasts, for following a long run stage by stage "
                "(off by default: it costs start-up time); its address is logged"),
    Option("run_id", RUN, help="id recorded in the manifest (default: generated)"),
    Option("s3_read_chunk_size", RUN, type=int, default=8 << 20, metavar="BYTES",
           help="S3 objects are read in Range GETs of this many bytes; a body cut mid-range (connection "
                "reset) is resumed from the first byte not yet received (default: %(default)s, 8 MiB; "
                "docs/reliability.md)"),
    Option("s3_max_attempts", RUN, type=int, metavar="N",
           help="attempts per S3 request, retried with exponential backoff on throttling (503 SlowDown), "
                "5xx and connection errors, and resumes of one interrupted body (default: "
                "AWS_MAX_ATTEMPTS, else 8)"),
    Option("lease_timeout", RUN, type=float, metavar="SECONDS",
           help="one run at a time per output: a run holds <output>/_lease.json, its heartbeat refreshed "
                "while it runs; another run on the output is refused (exit 2) unless the heartbeat is "
                "older than this, when the lease is taken over (a killed run's on another host; a killed run's on "
                "this host is taken over at once). Default: "
                "$CDC_REPLAY_LEASE_TIMEOUT, else 600 (docs/reliability.md)",
           request=Field("lease_timeout", "number", form=_form(
               None, FORM_LIMITS, "Lease timeout (seconds)",
               "a run on another host holding the output's lease longer than "
               "this without a heartbeat is taken over (empty: the default, "
               "docs/reliability.md); a dead run on this host is taken over at once",
               type=["null", "number"], minimum=1))),
    Option("engine", RUN, choices=("v1", "v2"),
           help="kept for the scripts that pass it: v2, the only engine (a no-op); v1 was removed in the "
                "twenty-fifth session and is refused, as is $CDC_REPLAY_ENGINE=v1 (docs/engine.md)"),
    Option("max_columns", LIMITS, type=int, default=4096, metavar="N",
           help="columns per row image (default: %(default)s, MySQL's and TiDB's most)",
           request=Field("max_columns", "int", form=_form(
               4096, FORM_LIMITS, "Columns per row image",
               "a message with a row image of more columns is quarantined (stage limit)",
               type=["null", "integer"], minimum=1))),
    Option("max_rows", LIMITS, type=int, default=100_000, metavar="N",
           help="rows per message (default: %(default)s)",
           request=Field("max_rows", "int", form=_form(
               100_000, FORM_LIMITS, "Rows per message", "a message with more row events is quarantined (stage limit)",
               type=["null", "integer"], minimum=1))),
    Option("max_inflate_ratio", LIMITS, type=float, default=100.0, metavar="RATIO",
           help="decompressed bytes per compressed object, as a ratio to its stored bytes (at least "
                "16 MiB); the lines before that point are kept, the rest of the object is not read "
                "(default: %(default)g)",
           request=Field("max_inflate_ratio", "number", form=_form(
               100.0, FORM_LIMITS, "Decompression ratio",
               "an object that inflates beyond this times its stored size "
               "(at least 16 MiB) stops there; the lines before it are kept",
               type=["null", "number"], minimum=1))),
    Option("max_line_bytes", LIMITS, type=int, default=64 << 20, metavar="BYTES",
           help="bytes per line of a line-based object (a Kafka-record line, a storage-sink data "
                "line); a longer line is never held whole (default: %(default)s, 64 MiB)",
           request=Field("max_line_bytes", "int", form=_form(
               64 << 20, FORM_LIMITS, "Line length (bytes)",
               "a longer line of an archive object is quarantined (stage limit)",
               type=["null", "integer"], minimum=1))),
    Option("s3_retry_mode", RUN, choices=("standard", "adaptive"),
           help="botocore's retry mode: standard (default, or AWS_RETRY_MODE) or adaptive (also slows "
                "the client down while S3 throttles)"),
    # the Airflow request's only: the cluster of a kafka:// source or output (the app takes servers)
    Option("kafka_connection", None, request=Field("kafka_connection", "connection", default="kafka_default", form=_form(
        "kafka_default", FORM_KAFKA, "Kafka connection",
        "Airflow connection of the Kafka cluster for a kafka:// source or output "
        "(its extra's bootstrap.servers, else host:port)", type=["null", "string"],
        pattern=r"^[A-Za-z0-9_.\-]+$"))),
)
OPTION = {o.name: o for o in OPTIONS}

# The order argv has been rendered in (tests and the Airflow operator's logs show exact lists);
# an option not named here is rendered after these, in table order.
ARGV_ORDER = (
    "source", "protocol", "layout", "layout_option", "starting_offsets", "ending_offsets", "protocol_option",
    "output", "emit", "manifest_uri", "target_protocol", "target_option", "target_format", "target_layout",
    "target_table", "catalog", "as_of", "since", "until", "base_snapshot", "schema", "require_schema",
    "require_contiguous", "tables", "target_topic", "target_partitions", "dispatcher", "max_bad_records",
    "max_records_per_object", "master", "run_id", "spark_conf", "spark_ui", "s3_read_chunk_size",
    "s3_max_attempts", "s3_retry_mode", "lease_timeout",
)
# The form's order inside its sections (FORM_SECTIONS orders the sections); a field not named
# here comes after these in its section, in table order.
FORM_ORDER = (
    "source", "layout", "protocol", "protocol_options", "require_schema", "require_contiguous", "schema",
    "tables", "as_of", "since", "until", "base_snapshot",
    "emit", "target_protocol", "target_options", "dispatcher", "target_partitions", "target_topic", "output",
    "max_bad_records", "target_format", "target_table", "catalog", "manifest_uri",
    "max_columns", "max_rows", "max_inflate_ratio", "max_line_bytes", "lease_timeout",
    "kafka_connection", "starting_offsets", "ending_offsets",
)


def _ordered(rows, order: tuple, name=lambda o: o.name) -> list:
    rank = {n: i for i, n in enumerate(order)}
    return sorted(rows, key=lambda o: rank.get(name(o), len(order)))  # stable: the rest in table order


def app_options() -> tuple[Option, ...]:
    """The options of `cdc-replay replay` and the Spark app, in --help order."""
    return tuple(o for o in OPTIONS if o.group is not None)


def argv_options() -> list[Option]:
    """The app's options in the order to_argv renders them."""
    return _ordered(app_options(), ARGV_ORDER)


def request_options() -> tuple[Option, ...]:
    """The options the Airflow request holds, in table order."""
    return tuple(o for o in OPTIONS if o.request is not None)


def form_options() -> list[Option]:
    """The options the Airflow form shows, section by section (FORM_SECTIONS), in FORM_ORDER."""
    shown = [o for o in request_options() if o.request.form is not None]
    by_field = _ordered(shown, FORM_ORDER, name=lambda o: o.request.name)
    return sorted(by_field, key=lambda o: FORM_SECTIONS.index(o.request.form["section"]))


# --- generated: the argparse parser -------------------------------------------------------------


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """The app's options on `parser`, in groups, as the table declares them."""
    groups: dict[str, Any] = {}
    for option in app_options():
        if option.group not in groups:
            groups[option.group] = parser.add_argument_group(option.group)
        kwargs: dict[str, Any] = {"help": option.help}
        if option.action:
            kwargs["action"] = option.action
            if option.action == "append":
                kwargs["default"] = []
        else:
            kwargs["default"] = option.default
            if option.type is not None:
                kwargs["type"] = option.type
        if option.required:
            kwargs["required"] = True
            kwargs.pop("default", None)
        for key in ("choices", "metavar"):
            if getattr(option, key) is not None:
                kwargs[key] = getattr(option, key)
        groups[option.group].add_argument(option.flag, **kwargs)


def parser(cls=argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = cls(prog="replay", description="Replay a CDC archive (three layouts: --layout) or Kafka topics with Spark.")
    add_replay_arguments(p)
    return p


# --- generated: the app's arguments -------------------------------------------------------------


class _Args:
    """What every ReplayArgs knows besides its fields (generated from the table below)."""

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "ReplayArgs":
        return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})

    @property
    def upper(self) -> int | None:
        """--as-of or --until (the same bound)."""
        return self.as_of if self.as_of is not None else self.until

    @property
    def output_format(self) -> str:
        return self.target_format or ("parquet" if self.emit == "history" else "kafka")

    def table_patterns(self) -> list[str]:
        return [p.strip() for p in (self.tables or "").split(",") if p.strip()]

    def read_settings(self):
        """The S3 read settings these options give (spark_apps.storage.ReadSettings)."""
        from spark_apps.storage import read_settings

        return read_settings(self)


def _field(option: Option):
    if option.required:
        return (option.name, Any)
    if option.action == "append":
        return (option.name, Any, dataclasses.field(default_factory=list))
    return (option.name, Any, dataclasses.field(default=option.app_default))


# The app's arguments, one field per app option (keyword-only, in --help order).
ReplayArgs = dataclasses.make_dataclass("ReplayArgs", [_field(o) for o in app_options()], bases=(_Args,),
                                        kw_only=True)
ReplayArgs.__module__ = __name__
ReplayArgs.__doc__ = "The app's arguments: one field per option of the table (spark_apps.options.OPTIONS)."


def to_argv(args, *, master: bool = True) -> list[str]:
    """The app's arguments for `args` (a ReplayArgs), options at their defaults left out (except
    the always-rendered ones); master=False leaves --master to the caller."""
    argv: list[str] = []
    for option in argv_options():
        value = getattr(args, option.name)
        if (option.name == "master" and not master) or value is None or (
                value == option.app_default and not option.always_rendered):
            continue
        if isinstance(value, bool):
            argv.append(option.flag)
        elif isinstance(value, list):
            for item in value:
                argv += [option.flag, str(item)]
        else:
            argv += [option.flag, str(value)]
    return argv
