"""The replay request of the Airflow form (and of the scheduled DAG's Variable): its fields'
shapes checked one by one, then the request checked by the same rules, with the same messages,
as `cdc-replay replay` and the app itself (spark_apps.contract), and turned into the replay
app's arguments by the contract's renderer (tests assert the exact list).

Importing this module is cheap (no Spark, no codecs): DAG files import it at parse time.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from spark_apps import contract
from spark_apps.contract import LAYOUTS, PROTOCOLS, TABLE_PATTERN  # noqa: F401

FIELDS = (
    "source", "protocol", "protocol_options", "schema", "require_schema", "require_contiguous", "tables", "as_of", "since", "until", "base_snapshot",
    "emit", "target_format", "target_protocol", "target_options", "target_topic", "target_partitions",
    "dispatcher", "output", "max_bad_records", "layout", "target_table", "catalog",
    "kafka_connection", "starting_offsets", "ending_offsets", "manifest_uri", "spark_conf",
    "max_columns", "max_rows", "max_inflate_ratio", "max_line_bytes", "lease_timeout",
)
# the Spark settings a run's request may set (its resources): what a form user may change
# without changing what runs or where (no spark.pyspark.python, Java options, jars or
# archives: those stay the deployment's, $CDC_REPLAY_SPARK_CONF)
SPARK_CONF_ALLOWED = re.compile(
    r"spark\.(executor\.(memory|memoryOverhead|cores|instances|pyspark\.memory)|driver\.(memory|cores|maxResultSize)"
    r"|cores\.max|default\.parallelism|sql\.shuffle\.partitions|task\.cpus|yarn\.queue|kubernetes\.namespace"
    r"|dynamicAllocation\.(enabled|minExecutors|maxExecutors|initialExecutors)|memory\.fraction)")
_BUCKET = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
URI_PATTERN = rf"^(s3://{_BUCKET}(/[^\s]*)?|file:///[^\s]*|/[^\s]*)$"
# Kafka in the form: the bootstrap servers come from an Airflow connection (`kafka_connection`,
# default kafka_default), so the source names topics only and the output just says kafka
KAFKA = contract.KAFKA
KAFKA_SOURCE_PATTERN = r"^kafka://[A-Za-z0-9._\-]+(,[A-Za-z0-9._\-]+)*$"
KAFKA_OUTPUT = contract.KAFKA


class RequestError(ValueError):
    """A field of the request that cannot be used; str() names the field and says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclasses.dataclass(frozen=True)
class ReplayRequest:
    source: str
    protocol: str
    output: str
    emit: str = "snapshot"
    protocol_options: tuple = ()  # ((key, value), ...) in the order given
    tables: tuple = ()
    as_of: int | None = None
    since: int | None = None
    until: int | None = None
    target_protocol: str | None = None
    target_options: tuple = ()
    target_format: str | None = None
    target_topic: str = "{topic}"
    target_partitions: int | None = None
    dispatcher: str = "index-value"
    base_snapshot: str | None = None
    schema: str | None = None
    require_schema: bool = False
    require_contiguous: bool = False
    max_bad_records: int = 0
    layout: str = "auto"
    kafka_connection: str = "kafka_default"
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    manifest_uri: str | None = None
    target_table: str = "{schema}.{table}"  # delta/iceberg: the table name template
    catalog: tuple = ()  # iceberg: catalog properties ((key, value), ...)
    spark_conf: tuple = ()  # this run's Spark resources ((key, value), ...; SPARK_CONF_ALLOWED)
    # limits per message and object (docs/reliability.md "Limits"), and the output lease's timeout
    max_columns: int = 4096
    max_rows: int = 100_000
    max_inflate_ratio: float = 100.0
    max_line_bytes: int = 64 << 20
    lease_timeout: float | None = None

    @property
    def kafka_source(self) -> bool:
        return self.source.startswith(KAFKA)

    @property
    def kafka_output(self) -> bool:
        return self.output.startswith(KAFKA)

    @property
    def home(self) -> str:
        """Where the manifest, the quarantine and the DAG's staging area go: the output, or
        manifest_uri for a Kafka output."""
        return (self.manifest_uri if self.kafka_output else self.output).rstrip("/")

    def with_kafka_servers(self, servers: str) -> "ReplayRequest":
        """The app's request: `kafka://topics` and `kafka://` made kafka://servers/topics and
        kafka://servers (the connection's bootstrap servers)."""
        changes = {}
        if self.kafka_source and "/" not in self.source[len(KAFKA):]:
            changes["source"] = f"{KAFKA}{servers}/{self.source[len(KAFKA):]}"
        if self.kafka_output and self.output == KAFKA_OUTPUT:
            changes["output"] = f"{KAFKA}{servers}"
        return self.replace(**changes)

    @property
    def output_format(self) -> str:
        """As the app decides it (spark_apps.options.ReplayArgs.output_format)."""
        return self.target_format or ("parquet" if self.emit == "history" else "kafka")

    def as_dict(self) -> dict:
        """JSON-friendly (XCom): options as objects, tables as a list."""
        out = dataclasses.asdict(self)
        out["protocol_options"] = dict(self.protocol_options)
        out["target_options"] = dict(self.target_options)
        out["tables"] = list(self.tables)
        out["catalog"] = dict(self.catalog)
        out["spark_conf"] = dict(self.spark_conf)
        return out

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "ReplayRequest":
        """The inverse of as_dict() (a request that travelled as an XCom)."""
        fields = dict(value)
        fields["protocol_options"] = tuple((fields.get("protocol_options") or {}).items())
        fields["target_options"] = tuple((fields.get("target_options") or {}).items())
        fields["tables"] = tuple(fields.get("tables") or ())
        fields["catalog"] = tuple((fields.get("catalog") or {}).items())
        fields["spark_conf"] = tuple((fields.get("spark_conf") or {}).items())
        return cls(**fields)

    def replace(self, **changes) -> "ReplayRequest":
        return dataclasses.replace(self, **changes)


# --- parsing and checking ---------------------------------------------------------------------


def _uri(field: str, value: Any, required: bool = True) -> str | None:
    if value in (None, ""):
        if required:
            raise RequestError(field, "is required (s3://bucket/prefix or an absolute local path)")
        return None
    if not isinstance(value, str) or not re.match(URI_PATTERN, value.strip()):
        raise RequestError(field, f"{value!r} is not s3://bucket/prefix (a valid bucket name) or an absolute local path")
    value = value.strip()
    if value.startswith("file://"):
        value = value[len("file://"):]
    return value.rstrip("/") or "/"


def _options(field: str, value: Any) -> tuple:
    """{"k": "v"}, ["k=v", ...] or "k=v&k2=v2" -> (("k", "v"), ...); values as text."""
    if value in (None, "", [], {}):
        return ()
    pairs: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, str | list | tuple):
        items = []
        for item in [value] if isinstance(value, str) else value:
            if not isinstance(item, str):
                raise RequestError(field, f"{item!r} is not a key=value text")
            for part in item.split("&"):
                if not part.strip():
                    continue
                key, sep, val = part.partition("=")
                if not sep or not key.strip():
                    raise RequestError(field, f"{part!r} is not of the form key=value")
                items.append((key, val))
    else:
        raise RequestError(field, f"expected an object of option names to values, got {type(value).__name__}")
    for key, val in items:
        if not isinstance(key, str) or not key.strip():
            raise RequestError(field, f"option name {key!r} is empty")
        if isinstance(val, bool):
            val = "true" if val else "false"
        elif isinstance(val, int | float):
            val = str(val)
        elif not isinstance(val, str):
            raise RequestError(field, f"option {key!r}: value {val!r} must be text, a number or a boolean")
        if any(c in key + val for c in "&\n"):
            raise RequestError(field, f"option {key!r}: '&' and newlines are not allowed")
        pairs.append((key.strip(), val.strip()))
    return tuple(pairs)


def _commit_ts(field: str, value: Any) -> int | str | None:
    """A commit ts (TSO) as an integer, or an ISO-8601 time with a zone, converted to a TSO
    (the contract's rule); `since` may also be `last`."""
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RequestError(field, f"{value!r} is not a commit ts")
    try:
        return (contract.since_ts if field == "since" else contract.commit_ts)(value)
    except ValueError as e:  # worded as the command line words it
        raise RequestError(field, f"--{field.replace('_', '-')}: {e}") from None


def _int(field: str, value: Any, default: int | None) -> int | None:
    """An integer (or its digits as text); its range is the contract's rule."""
    if value in (None, ""):
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        else:
            raise RequestError(field, f"{value!r} is not an integer")
    return value


def _number(field: str, value: Any, default: float | None) -> float | None:
    """A number (or its text); its range is the contract's rule."""
    if value in (None, ""):
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise RequestError(field, f"{value!r} is not a number") from None
    return float(value)


def _tables(value: Any) -> tuple:
    if value in (None, "", []):
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise RequestError("tables", "expected a list of db.table patterns")
    patterns = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            continue
        patterns.append(item.strip())  # each checked by the contract (check_table_patterns)
    return tuple(patterns)


# the form's fields by the app option the contract names in its refusals
FIELD_OF_OPTION = {
    "--source": "source", "--protocol": "protocol", "--protocol-option": "protocol_options", "--schema": "schema",
    "--require-schema": "require_schema", "--require-contiguous": "require_contiguous", "--tables": "tables",
    "--as-of": "as_of", "--since": "since", "--until": "until", "--base-snapshot": "base_snapshot",
    "--emit": "emit", "--target-format": "target_format", "--target-protocol": "target_protocol",
    "--target-option": "target_options", "--target-topic": "target_topic",
    "--target-partitions": "target_partitions", "--dispatcher": "dispatcher", "--output": "output",
    "--max-bad-records": "max_bad_records", "--layout": "layout", "--target-table": "target_table",
    "--catalog": "catalog", "--starting-offsets": "starting_offsets", "--ending-offsets": "ending_offsets",
    "--manifest-uri": "manifest_uri", "--max-columns": "max_columns", "--max-rows": "max_rows",
    "--max-inflate-ratio": "max_inflate_ratio", "--max-line-bytes": "max_line_bytes",
    "--lease-timeout": "lease_timeout",
}
# a form's kafka:// request names no servers (they come from the connection): its rules are
# checked with these in their place
PLACEHOLDER_SERVERS = "kafka-connection:9092"


def _refused(e: contract.RequestError) -> RequestError:
    return RequestError(FIELD_OF_OPTION.get(e.option, e.option), e.message)


def parse_request(conf: Mapping[str, Any]) -> ReplayRequest:
    """Check every field's shape, then the request by the contract's rules (spark_apps.contract,
    the same rules and messages as `cdc-replay replay`), and build it. Raises RequestError naming
    the first bad field. Imports no codecs: see check_codecs()."""
    unknown = sorted(set(conf) - set(FIELDS))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; the fields are {', '.join(FIELDS)}")
    raw_source, raw_output = conf.get("source"), conf.get("output")
    kafka_in = isinstance(raw_source, str) and raw_source.strip().startswith(KAFKA)
    kafka_out = isinstance(raw_output, str) and raw_output.strip().startswith(KAFKA)
    if kafka_in:
        source = raw_source.strip()
        if not re.match(KAFKA_SOURCE_PATTERN, source):
            raise RequestError("source", f"{source!r}: a Kafka source is kafka://topic1,topic2 (the bootstrap servers "
                                         "come from the Kafka connection)")
    else:
        source = _uri("source", raw_source)
    if kafka_out:
        output = raw_output.strip()
        if output != KAFKA_OUTPUT:
            raise RequestError("output", f"{output!r}: a Kafka output is just kafka:// (the bootstrap servers come "
                                         "from the Kafka connection; topics from target_topic)")
    else:
        output = _uri("output", raw_output)
    kafka_connection = conf.get("kafka_connection") or "kafka_default"
    if not isinstance(kafka_connection, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", kafka_connection):
        raise RequestError("kafka_connection", f"{kafka_connection!r} is not an Airflow connection id")
    text = {}
    for field, default in (("protocol", None), ("target_protocol", None), ("emit", "snapshot"),
                           ("dispatcher", "index-value"), ("target_format", None), ("target_topic", "{topic}"),
                           ("layout", "auto"), ("target_table", "{schema}.{table}"),
                           ("starting_offsets", "earliest"), ("ending_offsets", "latest")):
        value = conf.get(field) or default
        if value is not None and not isinstance(value, str):
            raise RequestError(field, f"{value!r} is not text")
        text[field] = value
    if text["protocol"] is None:
        raise RequestError("protocol", f"is required: one of {', '.join(PROTOCOLS)}")
    flags = {}
    for field in ("require_schema", "require_contiguous"):
        flags[field] = conf.get(field) or False
        if not isinstance(flags[field], bool):
            raise RequestError(field, f"{flags[field]!r} is not true or false")
    request = ReplayRequest(
        source=source, output=output, **text, **flags,
        protocol_options=_options("protocol_options", conf.get("protocol_options")),
        tables=_tables(conf.get("tables")),
        as_of=_commit_ts("as_of", conf.get("as_of")), since=_commit_ts("since", conf.get("since")),
        until=_commit_ts("until", conf.get("until")),
        schema=_uri("schema", conf.get("schema"), required=False),
        target_options=_options("target_options", conf.get("target_options")),
        target_partitions=_int("target_partitions", conf.get("target_partitions"), None),
        base_snapshot=_uri("base_snapshot", conf.get("base_snapshot"), required=False),
        max_bad_records=_int("max_bad_records", conf.get("max_bad_records"), 0),
        kafka_connection=kafka_connection, manifest_uri=_uri("manifest_uri", conf.get("manifest_uri"), required=False),
        catalog=_options("catalog", conf.get("catalog")),
        spark_conf=_spark_conf(conf.get("spark_conf")),
        max_columns=_int("max_columns", conf.get("max_columns"), ReplayRequest.max_columns),
        max_rows=_int("max_rows", conf.get("max_rows"), ReplayRequest.max_rows),
        max_inflate_ratio=_number("max_inflate_ratio", conf.get("max_inflate_ratio"), ReplayRequest.max_inflate_ratio),
        max_line_bytes=_int("max_line_bytes", conf.get("max_line_bytes"), ReplayRequest.max_line_bytes),
        lease_timeout=_number("lease_timeout", conf.get("lease_timeout"), None),
    )
    try:
        contract.check(app_args(request.with_kafka_servers(PLACEHOLDER_SERVERS)))
    except contract.RequestError as e:
        raise _refused(e) from None
    return request


def _spark_conf(value: Any) -> tuple:
    """The run's Spark resources ({"spark.executor.memory": "8g"}, ...): only SPARK_CONF_ALLOWED
    keys, values one word."""
    pairs = _options("spark_conf", value)
    for key, val in pairs:
        if not SPARK_CONF_ALLOWED.fullmatch(key.strip()):
            raise RequestError("spark_conf", f"{key!r} is not a Spark resource setting a run may set (executor and "
                                             "driver memory and cores, executor instances, cores.max, parallelism, "
                                             "shuffle partitions, dynamic allocation, YARN queue, Kubernetes "
                                             "namespace); others go in $CDC_REPLAY_SPARK_CONF")
        if not val.strip() or any(ch.isspace() for ch in val.strip()):
            raise RequestError("spark_conf", f"{key}={val!r}: the value must be one word")
    return tuple((key.strip(), val.strip()) for key, val in pairs)


def check_codecs(request: ReplayRequest) -> None:
    """Configure the source and target codecs as the app will (the contract's codec check),
    naming the form field. Imports cdc_codecs: call it in a task, not at parse time."""
    try:
        contract.check_codecs(app_args(request))
    except contract.RequestError as e:
        raise _refused(e) from None


# --- the app's arguments ---------------------------------------------------------------------


def app_args(request: ReplayRequest, *, run_id: str | None = None, spark_conf: tuple = ()):
    """The request as the app's own arguments (spark_apps.options.ReplayArgs)."""
    from spark_apps.options import ReplayArgs

    return ReplayArgs(
        source=request.source, protocol=request.protocol, output=request.output, emit=request.emit,
        protocol_option=[f"{k}={v}" for k, v in request.protocol_options], target_protocol=request.target_protocol,
        target_option=[f"{k}={v}" for k, v in request.target_options], as_of=request.as_of,
        tables=",".join(request.tables) or None, target_format=request.target_format, until=request.until,
        since=request.since, base_snapshot=request.base_snapshot, schema=request.schema,
        require_schema=request.require_schema, require_contiguous=request.require_contiguous,
        target_topic=request.target_topic, target_partitions=request.target_partitions,
        dispatcher=request.dispatcher, max_bad_records=request.max_bad_records, max_records_per_object=100_000,
        master="local[*]", spark_conf=list(spark_conf), run_id=run_id, layout=request.layout,
        target_table=request.target_table, catalog=[f"{k}={v}" for k, v in request.catalog],
        starting_offsets=request.starting_offsets, ending_offsets=request.ending_offsets,
        manifest_uri=request.manifest_uri, max_columns=request.max_columns, max_rows=request.max_rows,
        max_inflate_ratio=request.max_inflate_ratio, max_line_bytes=request.max_line_bytes,
        lease_timeout=request.lease_timeout,
    )


def replay_arguments(request: ReplayRequest, *, run_id: str | None = None,
                     spark_conf: tuple = ()) -> list[str]:
    """The replay app's arguments for `request` (after `--master`, which the operator adds
    from the Spark connection): the contract's rendering, the arguments `cdc-replay replay` takes."""
    return contract.to_argv(app_args(request, run_id=run_id, spark_conf=spark_conf), master=False)


def safe_run_id(*parts: str) -> str:
    """A run id usable in a storage path: letters, digits, . _ - only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ".".join(p for p in parts if p)).strip("._")[:200]
