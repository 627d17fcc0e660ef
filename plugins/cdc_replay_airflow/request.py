"""The replay request: what the backfill form asks for (and what the scheduled DAG reads from
its Variable), checked field by field before any work starts, and turned into the replay
app's arguments by a pure function (tests assert the exact list).

The app's own option parser (`spark_apps.options`, which imports no Spark) is the single
source of what the app accepts: emit modes, dispatchers, and whether `--since`, `--until`,
`--base-snapshot` and `--target-format` exist yet. A field the app does not accept is refused
with a message naming the field, never silently dropped.

Importing this module is cheap (no Spark, no codecs): DAG files import it at parse time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import re
from collections.abc import Mapping
from typing import Any

# The registered protocols (cdc_codecs.protocols()). Written out because importing the codecs
# takes ~1.5 s (sqlglot), too slow for DAG parsing; tests/airflow/test_request.py checks it.
PROTOCOLS = ("avro", "canal-json", "canal-protobuf", "craft", "csv", "oceanbase-avro", "open-protocol")
# --layout of the replay app (docs/layouts.md); the DAGs' own listing and interval staging read
# Kafka-record archives only, so the other layouts are replayed whole (no data interval)
LAYOUTS = ("auto", "kafka-records", "ticdc-storage", "kafka-connect-s3")

FIELDS = (
    "source", "protocol", "protocol_options", "schema", "require_schema", "require_contiguous", "tables", "as_of", "since", "until", "base_snapshot",
    "emit", "target_format", "target_protocol", "target_options", "target_topic", "target_partitions",
    "dispatcher", "output", "max_bad_records", "layout", "target_table", "catalog",
    "kafka_connection", "starting_offsets", "ending_offsets", "manifest_uri",
)
# fields whose app options arrived later (cdc-replay issue 5): refused if the installed app lacks them
OPTIONAL_APP_OPTIONS = {"since": "--since", "until": "--until", "base_snapshot": "--base-snapshot", "layout": "--layout",
                        "target_format": "--target-format", "schema": "--schema",
                        "require_schema": "--require-schema", "require_contiguous": "--require-contiguous",
                        "manifest_uri": "--manifest-uri",
                        "target_table": "--target-table", "catalog": "--catalog"}

_BUCKET = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
URI_PATTERN = rf"^(s3://{_BUCKET}(/[^\s]*)?|file:///[^\s]*|/[^\s]*)$"
TABLE_PATTERN = r"^[^.\s,]+\.[^.\s,]+$"
TOPIC_PLACEHOLDERS = ("topic", "schema", "table")
# Kafka in the form: the bootstrap servers come from an Airflow connection (`kafka_connection`,
# default kafka_default), so the source names topics only and the output just says kafka
KAFKA = "kafka://"
KAFKA_SOURCE_PATTERN = r"^kafka://[A-Za-z0-9._\-]+(,[A-Za-z0-9._\-]+)*$"
KAFKA_OUTPUT = "kafka://"


class RequestError(ValueError):
    """A field of the request that cannot be used; str() names the field and says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What the installed replay app accepts, read from its argument parser."""

    options: frozenset
    emit_modes: tuple
    dispatchers: tuple
    target_formats: tuple = ()

    def accepts(self, option: str) -> bool:
        return option in self.options


@functools.cache
def app_capabilities() -> Capabilities:
    from spark_apps.options import parser

    actions = parser()._option_string_actions  # noqa: SLF001 - argparse has no public accessor
    formats = actions["--target-format"].choices if "--target-format" in actions else ()
    return Capabilities(
        options=frozenset(actions),
        emit_modes=tuple(actions["--emit"].choices),
        dispatchers=tuple(actions["--dispatcher"].choices),
        target_formats=tuple(formats or ()),
    )


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
        return out

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "ReplayRequest":
        """The inverse of as_dict() (a request that travelled as an XCom)."""
        fields = dict(value)
        fields["protocol_options"] = tuple((fields.get("protocol_options") or {}).items())
        fields["target_options"] = tuple((fields.get("target_options") or {}).items())
        fields["tables"] = tuple(fields.get("tables") or ())
        fields["catalog"] = tuple((fields.get("catalog") or {}).items())
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


def tso_of(moment: dt.datetime) -> int:
    """The TiDB TSO of a moment (one rule for every entry point: spark_apps.options)."""
    from spark_apps.options import tso_of as rule

    return rule(moment)


def time_of_tso(ts: int) -> dt.datetime:
    return dt.datetime.fromtimestamp((ts >> 18) / 1000, dt.timezone.utc)


def _commit_ts(field: str, value: Any) -> int | None:
    """A commit ts (TSO) as an integer, or an ISO-8601 time with a zone, converted to a TSO."""
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise RequestError(field, f"{value!r} is not a commit ts")
    if isinstance(value, int):
        if value < 0:
            raise RequestError(field, f"{value} is negative; a commit ts (TSO) is 0 or more")
        return value
    if isinstance(value, str):
        from spark_apps.options import commit_ts

        try:
            return commit_ts(value)
        except ValueError as e:
            raise RequestError(field, str(e)) from None
    raise RequestError(field, f"{value!r} is not a commit ts")


def _int(field: str, value: Any, minimum: int, default: int | None) -> int | None:
    if value in (None, ""):
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        else:
            raise RequestError(field, f"{value!r} is not an integer")
    if value < minimum:
        raise RequestError(field, f"{value} is below the minimum {minimum}")
    return value


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
        item = item.strip()
        if not re.match(TABLE_PATTERN, item):
            raise RequestError("tables", f"{item!r} is not of the form db.table (shell wildcards allowed: shop.*, *.orders)")
        patterns.append(item)
    return tuple(patterns)


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def parse_request(conf: Mapping[str, Any], capabilities: Capabilities | None = None) -> ReplayRequest:
    """Check every field (types, ranges, what the installed app accepts) and build the request.
    Raises RequestError naming the first bad field. Imports no codecs: see check_codecs()."""
    caps = capabilities or app_capabilities()
    unknown = sorted(set(conf) - set(FIELDS))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; the fields are {', '.join(FIELDS)}")
    for field, option in OPTIONAL_APP_OPTIONS.items():
        if conf.get(field) not in (None, "", False) and not caps.accepts(option):
            raise RequestError(field, f"the installed replay app does not accept {option} yet (it arrives with "
                                      "cdc-replay issue 5); leave this field empty")
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
    manifest_uri = _uri("manifest_uri", conf.get("manifest_uri"), required=False)
    if kafka_out and manifest_uri is None:
        raise RequestError("manifest_uri", "is required with a Kafka output: where the manifest of what was produced "
                                           "(topic, partition, offsets, counts) goes (s3://bucket/prefix)")
    if not kafka_out and manifest_uri is not None:
        raise RequestError("manifest_uri", "applies to a Kafka output (kafka://) only; a storage output holds its "
                                           "own manifest")
    kafka_connection = conf.get("kafka_connection") or "kafka_default"
    if not isinstance(kafka_connection, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", kafka_connection):
        raise RequestError("kafka_connection", f"{kafka_connection!r} is not an Airflow connection id")
    starting_offsets = conf.get("starting_offsets") or "earliest"
    ending_offsets = conf.get("ending_offsets") or "latest"
    if (starting_offsets, ending_offsets) != ("earliest", "latest"):
        if not kafka_in:
            raise RequestError("starting_offsets", "applies to a Kafka source (kafka://topics) only")
        from spark_apps.kafka_io import KafkaUriError, check_offsets

        for field, value in (("starting_offsets", starting_offsets), ("ending_offsets", ending_offsets)):
            if not isinstance(value, str):
                raise RequestError(field, f"{value!r}: earliest, latest or JSON text per partition")
            try:
                check_offsets(value, field, ending=field == "ending_offsets")
            except KafkaUriError as e:
                raise RequestError(field, str(e)) from None
    home = manifest_uri if kafka_out else output
    if not kafka_in and _nested(source, home):
        raise RequestError("manifest_uri" if kafka_out else "output",
                           f"{home} overlaps the source {source}: it is replaced as a whole when the run succeeds, "
                           "so it must lie outside the archive")
    if kafka_in and conf.get("layout") not in (None, "", "auto"):
        raise RequestError("layout", "a Kafka source has no archive layout; leave it auto")
    protocol = conf.get("protocol")
    if protocol not in PROTOCOLS:
        raise RequestError("protocol", f"{protocol!r} is not one of {', '.join(PROTOCOLS)}")
    target_protocol = conf.get("target_protocol") or None
    if target_protocol is not None and target_protocol not in PROTOCOLS:
        raise RequestError("target_protocol", f"{target_protocol!r} is not one of {', '.join(PROTOCOLS)}")
    emit = conf.get("emit") or "snapshot"
    if emit not in caps.emit_modes:
        raise RequestError("emit", f"{emit!r} is not one of {', '.join(caps.emit_modes)}")
    dispatcher = conf.get("dispatcher") or "index-value"
    if dispatcher not in caps.dispatchers:
        raise RequestError("dispatcher", f"{dispatcher!r} is not one of {', '.join(caps.dispatchers)}")
    target_format = conf.get("target_format") or None
    if target_format is not None and caps.target_formats and target_format not in caps.target_formats:
        raise RequestError("target_format", f"{target_format!r} is not one of {', '.join(caps.target_formats)}")
    target_topic = conf.get("target_topic") or "{topic}"
    if not isinstance(target_topic, str):
        raise RequestError("target_topic", "must be text")
    for name in re.findall(r"\{([^}]*)\}", target_topic):
        if name not in TOPIC_PLACEHOLDERS:
            raise RequestError("target_topic", f"unknown placeholder {{{name}}}; use {{topic}}, {{schema}} or {{table}}")
    if not re.fullmatch(r"[A-Za-z0-9._\-{}]+", target_topic):
        raise RequestError("target_topic", f"{target_topic!r}: a Kafka topic name has only letters, digits, . _ -")
    as_of = _commit_ts("as_of", conf.get("as_of"))
    lake = (target_format or "") in ("delta", "iceberg")
    since = "last" if lake and str(conf.get("since") or "").strip().lower() == "last" else \
        _commit_ts("since", conf.get("since"))
    until = _commit_ts("until", conf.get("until"))
    if as_of is not None and until is not None:
        raise RequestError("until", "as_of and until are the same bound (the cut): give one of them")
    upper = until if until is not None else as_of
    if isinstance(since, int) and upper is not None and since >= upper:
        raise RequestError("since", f"the window is empty: since {since} is not below until/as_of {upper}")
    base_snapshot = _uri("base_snapshot", conf.get("base_snapshot"), required=False)
    if base_snapshot is not None and emit != "snapshot":
        raise RequestError("base_snapshot", "applies to emit snapshot only (topics and history of a window need "
                                            "only since)")
    if since is not None and emit == "snapshot" and base_snapshot is None and not lake:
        raise RequestError("since", "a snapshot of a window needs base_snapshot (the snapshot at since); without "
                                    "it, emit topics or history for the window's changes")
    schema = _uri("schema", conf.get("schema"), required=False)
    for field, uri in (("base_snapshot", base_snapshot), ("schema", schema)):
        if uri is not None and _nested(uri, home):
            raise RequestError("output", f"{home} overlaps the {field} {uri}: the output prefix is replaced as a "
                                         "whole when the run succeeds, so it must lie outside what the run reads")
    layout = conf.get("layout") or "auto"
    if layout not in LAYOUTS:
        raise RequestError("layout", f"{layout!r} is not one of {', '.join(LAYOUTS)}")
    require_schema = conf.get("require_schema") or False
    if not isinstance(require_schema, bool):
        raise RequestError("require_schema", f"{require_schema!r} is not true or false")
    require_contiguous = conf.get("require_contiguous") or False
    if not isinstance(require_contiguous, bool):
        raise RequestError("require_contiguous", f"{require_contiguous!r} is not true or false")
    output_format = target_format or ("parquet" if emit == "history" else "kafka")
    target_table = conf.get("target_table") or "{schema}.{table}"
    if not isinstance(target_table, str) or len([p for p in target_table.split(".") if p]) < 2:
        raise RequestError("target_table", f"{target_table!r}: give at least namespace.table, e.g. {{schema}}.{{table}}")
    for name in re.findall(r"\{([^}]*)\}", target_table):
        if name not in ("schema", "table"):
            raise RequestError("target_table", f"unknown placeholder {{{name}}}; use {{schema}} or {{table}}")
    catalog = _options("catalog", conf.get("catalog"))
    if (target_table != "{schema}.{table}" and not lake) or (catalog and target_format != "iceberg"):
        raise RequestError("target_table" if not catalog else "catalog",
                           "applies to target_format delta/iceberg (catalog: iceberg only)")
    if emit == "history" and output_format not in ("parquet", "delta", "iceberg"):
        raise RequestError("target_format", "emit history is written as Parquet, Delta or Iceberg")
    if emit == "topics" and output_format != "kafka":
        raise RequestError("target_format", "emit topics is written as a Kafka-record archive (kafka)")
    if kafka_out and (emit != "topics" or output_format != "kafka"):
        raise RequestError("emit", "a Kafka output takes emit topics (the re-encoded records)")
    return ReplayRequest(
        source=source, protocol=protocol, output=output, emit=emit,
        protocol_options=_options("protocol_options", conf.get("protocol_options")),
        tables=_tables(conf.get("tables")),
        as_of=as_of, since=since, until=until, schema=schema,
        require_schema=require_schema, require_contiguous=require_contiguous,
        target_protocol=target_protocol,
        target_options=_options("target_options", conf.get("target_options")),
        target_format=target_format, target_topic=target_topic,
        target_partitions=_int("target_partitions", conf.get("target_partitions"), 1, None),
        dispatcher=dispatcher, base_snapshot=base_snapshot,
        max_bad_records=_int("max_bad_records", conf.get("max_bad_records"), 0, 0),
        layout=layout, kafka_connection=kafka_connection, starting_offsets=starting_offsets,
        ending_offsets=ending_offsets, manifest_uri=manifest_uri,
        target_table=target_table, catalog=catalog,
    )


def check_codecs(request: ReplayRequest) -> None:
    """Configure the source and target codecs as the app will (unknown option names, bad
    values), naming the form field. Imports cdc_codecs: call it in a task, not at parse time."""
    from cdc_codecs import get_codec
    from cdc_codecs.errors import CodecError

    try:
        get_codec(request.protocol, dict(request.protocol_options))
    except CodecError as e:
        raise RequestError("protocol_options", str(e)) from e
    target_options = dict(request.target_options)
    try:
        get_codec(request.target_protocol or request.protocol, target_options)
    except CodecError as e:
        raise RequestError("target_options" if target_options else "target_protocol", str(e)) from e


# --- the app's arguments ---------------------------------------------------------------------


def replay_arguments(request: ReplayRequest, *, run_id: str | None = None,
                     spark_conf: tuple = ()) -> list[str]:
    """The replay app's arguments for `request` (after `--master`, which the operator adds
    from the Spark connection): a pure function, the same arguments `cdc-replay replay` takes."""
    args = ["--source", request.source, "--protocol", request.protocol]
    if request.layout != "auto":
        args += ["--layout", request.layout]
    if request.starting_offsets != "earliest":
        args += ["--starting-offsets", request.starting_offsets]
    if request.ending_offsets != "latest":
        args += ["--ending-offsets", request.ending_offsets]
    for key, value in request.protocol_options:
        args += ["--protocol-option", f"{key}={value}"]
    args += ["--output", request.output, "--emit", request.emit]
    if request.manifest_uri:
        args += ["--manifest-uri", request.manifest_uri]
    if request.target_protocol:
        args += ["--target-protocol", request.target_protocol]
    for key, value in request.target_options:
        args += ["--target-option", f"{key}={value}"]
    if request.target_format:
        args += ["--target-format", request.target_format]
    if request.target_table != "{schema}.{table}":
        args += ["--target-table", request.target_table]
    for key, value in request.catalog:
        args += ["--catalog", f"{key}={value}"]
    if request.as_of is not None:
        args += ["--as-of", str(request.as_of)]
    if request.since is not None:
        args += ["--since", str(request.since)]
    if request.until is not None:
        args += ["--until", str(request.until)]
    if request.base_snapshot:
        args += ["--base-snapshot", request.base_snapshot]
    if request.schema:
        args += ["--schema", request.schema]
    if request.require_schema:
        args.append("--require-schema")
    if request.require_contiguous:
        args.append("--require-contiguous")
    if request.tables:
        args += ["--tables", ",".join(request.tables)]
    if request.target_topic != "{topic}":
        args += ["--target-topic", request.target_topic]
    if request.target_partitions is not None:
        args += ["--target-partitions", str(request.target_partitions)]
    if request.dispatcher != "index-value":
        args += ["--dispatcher", request.dispatcher]
    args += ["--max-bad-records", str(request.max_bad_records)]
    if run_id:
        args += ["--run-id", run_id]
    for item in spark_conf:
        args += ["--spark-conf", item]
    return args


def safe_run_id(*parts: str) -> str:
    """A run id usable in a storage path: letters, digits, . _ - only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ".".join(p for p in parts if p)).strip("._")[:200]
