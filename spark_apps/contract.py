"""The contract between `cdc-replay replay`, the Spark app and the Airflow package: what a
replay request may hold and which requests are refused (with which message), the registries
its choices come from, how a request is rendered to the app's arguments and parsed back, the
event statuses and kinds, and the names the app gives to what it writes.

One module, imported by all three, so that a request is refused identically wherever it is
made (tests/test_contract.py runs one table of requests through the command line, the app's
argument parsing and the Airflow form). It imports only the standard library: DAG files import
it at parse time, and `cdc-replay --help` stays fast (no Spark, Airflow, sqlglot or boto3; the
codec check imports the codecs when it is called). The options themselves (names, types,
defaults, choices, help) are one table, spark_apps.options (standard library only too), from
which the parser, ReplayArgs and the rendering to argv are generated; this module adds the
rules on a whole request.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
from dataclasses import dataclass, field

# The choices of the options, declared with them in the option table (spark_apps.options)
from spark_apps.options import (  # noqa: F401  (the registries: re-exported)
    DEFAULT_TARGET_TABLE,
    DEFAULT_TARGET_TOPIC,
    DISPATCHERS,
    EMITS,
    LAST_CUT,
    LAYOUTS,
    PROTOCOLS,
    TABLE_PATTERN,
    TARGET_FORMATS,
    TARGET_LAYOUTS,
    Invalid,
    ReplayArgs,
    commit_ts,
    parser,
    since_ts,
    to_argv,
)
from spark_apps.paths import _local, join, overlaps  # noqa: F401  (the naming rules: re-exported)

# --- registries ---------------------------------------------------------------------------------

LAKE_FORMATS = ("delta", "iceberg")
TOPIC_PLACEHOLDERS = ("topic", "schema", "table")
TABLE_PLACEHOLDERS = ("schema", "table")


class Status:
    """Every decoded event (or undecodable record) has exactly one status; the counts reconcile:
    read = applied + duplicate + pending + filtered + quarantined. EMPTY marks the summary row
    of an archive object that held no records (counted as nothing)."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    PENDING = "pending"
    FILTERED = "filtered"
    QUARANTINED = "quarantined"
    EMPTY = "empty"
    COUNTED = (APPLIED, DUPLICATE, PENDING, FILTERED, QUARANTINED)
    # an event the --base-export already holds (at or before its position): counted apart, and
    # only in runs with a base export (read = the COUNTED ones + in_base)
    IN_BASE = "in_base"


class Kind:
    """Event kinds (the same values as cdc_codecs.Kind, which must not import this module)."""

    ROW = "row"
    DDL = "ddl"
    WATERMARK = "watermark"
    # the app's own: a record that could not be decoded, an archive object without records
    QUARANTINE = "quarantine"
    EMPTY = "empty"
    DECODED = (ROW, DDL, WATERMARK)


# --- naming: what the app writes below its output (or --manifest-uri) --------------------------

MANIFEST = "_manifest.json"
STAGING = "_staging"
QUARANTINE = "_quarantine"
CATALOG = "_catalog.sqlite"
COMMIT_LOG = "_commit.json"  # the commit's own log (spark_apps.manifest.commit)
# below _staging/ but not a run's staging: the Airflow DAGs' staged archive objects and the Kafka
# output's produced-partition markers
AIRFLOW_STAGING = f"{STAGING}/airflow"
PRODUCED_MARKERS = f"{STAGING}/_produced"


@dataclass(frozen=True)
class ProtocolSpec:
    """A protocol and its options as the request gives them (`--protocol-option` or
    `--target-option` pairs): what a decode or an encode is always handed together."""

    protocol: str
    options: dict = field(default_factory=dict)


def manifest_path(home: str) -> str:
    return join(home, MANIFEST)


def staging_prefix(home: str, run_id: str | None = None) -> str:
    """Where a run stages its data (and the Airflow DAGs the archive objects they hand over)."""
    return join(home, STAGING, *([run_id] if run_id else []))


def in_staging(home: str, uri: str) -> bool:
    """Inside <home>/_staging/: where the Airflow DAGs stage the archive objects they hand to the
    app. The commit never touches _staging/ (each run stages under its own id), so reading from
    there cannot read or replace an output."""
    staging = staging_prefix(home)
    if uri.startswith("s3://") != staging.startswith("s3://"):
        return False
    if not uri.startswith("s3://"):
        staging, uri = _local(staging), _local(uri)
    return (uri.rstrip("/") + "/").startswith(staging.rstrip("/") + "/")


# --- the manifest -------------------------------------------------------------------------------

# `version` of _manifest.json. spark_apps.manifest.build is its only builder (the app's runs and
# the Airflow carry-forward of an interval without objects); read_manifest_doc its reader.
# 0: no `version` field (before 2026-11-25). 1: `version`; every section below always present.
MANIFEST_VERSION = 1
# sections added over time, with the value that means "none" (what an older manifest lacks)
MANIFEST_DEFAULTS = {"window": {}, "schemas": [], "schema_conflicts": [], "inferred_schemas": [], "coverage": None,
                     "timeline": None,
                     "warnings": [], "ddl": [], "partitions": [],
                     "gaps": {"count": 0, "missing_offsets": 0, "listed": []}}


class ManifestError(ValueError):
    """A manifest this version cannot read; str() follows the manifest's name ("<uri> is not ...")."""


def read_manifest_doc(doc) -> dict:
    """A manifest of this version or an older one, as this version: sections an older one lacks
    get their empty value; a newer version is refused (its meaning may have changed)."""
    if not isinstance(doc, dict) or not {"run_id", "output"} <= set(doc):
        raise ManifestError("is not a cdc-replay manifest (no run_id and output)")
    version = doc.get("version", 0)
    if not isinstance(version, int) or version > MANIFEST_VERSION:
        raise ManifestError(f"was written by a newer cdc-replay (manifest version {version!r}); this one reads "
                            f"versions up to {MANIFEST_VERSION}")
    out = {**{k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
              for k, v in MANIFEST_DEFAULTS.items()}, **doc, "version": MANIFEST_VERSION}
    quarantine = dict(out.get("quarantine") or {})
    quarantine.setdefault("reasons", [])
    quarantine.setdefault("ddl", [])
    quarantine.setdefault("objects", [])
    out["quarantine"] = quarantine
    return out


# --- Kafka URIs and offsets ---------------------------------------------------------------------

KAFKA = "kafka://"


class KafkaUriError(ValueError):
    pass


def is_kafka(uri: str | None) -> bool:
    return bool(uri) and uri.startswith(KAFKA)


def parse_kafka_uri(uri: str, *, topics_required: bool) -> tuple[str, list[str]]:
    """kafka://servers[/topic,...] -> (bootstrap servers, topics)."""
    rest = uri[len(KAFKA):]
    servers, _, path = rest.partition("/")
    topics = [t.strip() for t in path.split(",") if t.strip()]
    if not servers or any(":" not in s for s in servers.split(",")):
        raise KafkaUriError(f"{uri}: expected kafka://host:port[,host:port]{'/topic[,topic]' if topics_required else ''}")
    if topics_required and not topics:
        raise KafkaUriError(f"{uri}: name the topics to read, e.g. kafka://{servers}/topic1,topic2")
    if not topics_required and topics:
        raise KafkaUriError(f"{uri}: a Kafka output takes no topics in the URI; name them with --target-topic")
    return servers, topics


def check_offsets(value: str, option: str, *, ending: bool) -> None:
    """Spark's Kafka source accepts earliest/latest or JSON {"topic": {"partition": offset}},
    -2 meaning earliest and -1 latest (an ending offset cannot be earliest)."""
    if value in ("earliest", "latest"):
        if ending and value == "earliest":
            raise KafkaUriError(f"{option} earliest would read nothing; use latest or per-partition offsets")
        return
    try:
        doc = json.loads(value)
    except ValueError:
        raise KafkaUriError(f"{option} must be earliest, latest or JSON like "
                            f'{{"topic": {{"0": 42, "1": -2}}}}, not {value!r}') from None
    if not isinstance(doc, dict) or not all(
            isinstance(parts, dict) and all(str(p).isdigit() and isinstance(o, int) and o >= -2 for p, o in parts.items())
            for parts in doc.values()):
        raise KafkaUriError(f"{option} JSON must map topics to {{partition: offset}} with offsets >= -2, not {value}")
    if ending and any(o == -2 for parts in doc.values() for o in parts.values()):
        raise KafkaUriError(f"{option}: -2 (earliest) is not allowed as an ending offset (Spark's rule)")


# --- the request: rules -------------------------------------------------------------------------


class RequestError(ValueError):
    """A request refused; `option` is the app option at fault (--output ...), str() the message,
    the same whichever entry point made the request."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option
        self.message = message


def check_table_patterns(patterns) -> None:
    for pattern in patterns:
        if not re.match(TABLE_PATTERN, pattern.strip()):
            raise RequestError("--tables", f"--tables pattern {pattern!r} is not of the form db.table (shell "
                                           "wildcards allowed: shop.*, *.orders)")
        re.compile(fnmatch.translate(pattern))


def _one_of(option: str, value, allowed) -> None:
    if value not in allowed:
        raise RequestError(option, f"{option} {value!r} is not one of {', '.join(allowed)}")


def _placeholders(option: str, template: str, allowed) -> None:
    for name in re.findall(r"\{([^}]*)\}", template):
        if name not in allowed:
            raise RequestError(option, f"{option} {template!r}: unknown placeholder {{{name}}}; use "
                                       + " or ".join(f"{{{a}}}" for a in allowed))


def check(args) -> None:
    """Every rule that needs neither the network nor the codecs, in one order; raises
    RequestError. `args` is a spark_apps.options.ReplayArgs (from the command line, the app's
    arguments or the Airflow form's request)."""
    output_format = args.output_format
    lake = output_format in LAKE_FORMATS
    for option, protocol in (("--protocol", args.protocol), ("--target-protocol", args.target_protocol)):
        if protocol is not None and protocol not in PROTOCOLS:
            raise RequestError(option, f"unknown protocol {protocol!r}; valid protocols: {', '.join(PROTOCOLS)}")
    target_protocol = args.target_protocol or args.protocol
    if not PROTOCOLS[target_protocol]:
        raise RequestError("--target-protocol", f"{target_protocol} is read, not written: give --target-protocol "
                                                "(e.g. canal-json with --target-option enable-tidb-extension=true)")
    _one_of("--emit", args.emit, EMITS)
    if args.target_format is not None:
        _one_of("--target-format", args.target_format, TARGET_FORMATS)
    _one_of("--layout", args.layout, LAYOUTS)
    _one_of("--target-layout", args.target_layout, TARGET_LAYOUTS)
    _one_of("--dispatcher", args.dispatcher, DISPATCHERS)
    # Kafka sources and outputs (docs/kafka.md)
    try:
        if is_kafka(args.source):
            parse_kafka_uri(args.source, topics_required=True)
    except KafkaUriError as e:
        raise RequestError("--source", str(e)) from None
    for option, value, ending in (("--starting-offsets", args.starting_offsets, False),
                                  ("--ending-offsets", args.ending_offsets, True)):
        try:
            if is_kafka(args.source):
                check_offsets(value, option, ending=ending)
        except KafkaUriError as e:
            raise RequestError(option, str(e)) from None
    if is_kafka(args.source):
        if args.layout != "auto":
            raise RequestError("--layout", "--layout: a kafka:// --source has no archive layout; leave it auto")
    elif (args.starting_offsets, args.ending_offsets) != ("earliest", "latest"):
        raise RequestError("--starting-offsets", "--starting-offsets / --ending-offsets apply to a kafka:// "
                                                 "--source")
    try:
        if is_kafka(args.output):
            parse_kafka_uri(args.output, topics_required=False)
    except KafkaUriError as e:
        raise RequestError("--output", str(e)) from None
    if is_kafka(args.output):
        if output_format != "kafka":
            raise RequestError("--output", "a kafka:// --output takes Kafka records (--emit topics or snapshot)")
        if not args.manifest_uri:
            raise RequestError("--manifest-uri", "a kafka:// --output needs --manifest-uri: where the manifest of "
                                                 "what was produced, the quarantine and the produced-partition "
                                                 "markers go")
        if is_kafka(args.manifest_uri):
            raise RequestError("--manifest-uri", "--manifest-uri is object storage (a local directory or s3://), "
                                                 "not Kafka")
    elif args.manifest_uri:
        raise RequestError("--manifest-uri", "--manifest-uri applies to a kafka:// --output (other outputs hold "
                                             "their manifest)")
    if is_kafka(args.base_snapshot):
        raise RequestError("--base-snapshot", "--base-snapshot must be an archive (a snapshot run's output), not "
                                              "Kafka")
    _check_base_export(args)
    # the output is replaced as a whole: it must lie outside everything the run reads
    option_out, home = ("--manifest-uri", args.manifest_uri) if is_kafka(args.output) else ("--output", args.output)
    for option, uri in (("--source", args.source), ("--base-snapshot", args.base_snapshot), ("--schema", args.schema),
                        ("--base-export", getattr(args, "base_export", None))):
        if home and uri and not is_kafka(uri) and overlaps(home, uri) and not in_staging(home, uri):
            raise RequestError(option_out, f"{option_out} {home} overlaps {option} {uri}: the output (with its "
                                           f"{QUARANTINE}/ and {STAGING}/) is replaced when the run commits, so it "
                                           "must lie outside what the run reads")
    check_table_patterns(args.table_patterns())
    if args.target_partitions is not None and args.target_partitions < 1:
        raise RequestError("--target-partitions", "--target-partitions must be at least 1")
    if args.max_bad_records < 0:
        raise RequestError("--max-bad-records", "--max-bad-records must be 0 or more")
    for name in ("max_columns", "max_rows", "max_inflate_ratio", "max_line_bytes"):
        value = getattr(args, name, 1)
        if value < 1:
            option = f"--{name.replace('_', '-')}"
            raise RequestError(option, f"{option} must be at least 1, got {value:g}")
    if getattr(args, "lease_timeout", None) is not None and not args.lease_timeout > 0:
        raise RequestError("--lease-timeout", f"--lease-timeout: the lease timeout must be more than 0 seconds, "
                                              f"got {args.lease_timeout:g}")
    for name in ("as_of", "until", "since"):
        value = getattr(args, name)
        if value is not None and value != LAST_CUT and (not isinstance(value, int) or value < 0):
            raise RequestError(f"--{name.replace('_', '-')}",
                               f"--{name.replace('_', '-')} must be a commit ts (a non-negative TSO)")
    if args.as_of is not None and args.until is not None:
        raise RequestError("--until", "--as-of and --until are the same bound: give one of them")
    # what is emitted, and how it is written
    if args.emit == "history" and output_format not in ("parquet", *LAKE_FORMATS):
        raise RequestError("--target-format", "--emit history is written as Parquet, Delta or Iceberg "
                                              "(--target-format parquet|delta|iceberg)")
    if args.emit == "topics" and output_format != "kafka":
        raise RequestError("--target-format", "--emit topics is written as a Kafka-record archive "
                                              "(--target-format kafka)")
    if args.target_layout == "ticdc-storage" and (output_format != "kafka" or target_protocol != "canal-json"):
        raise RequestError("--target-layout", "--target-layout ticdc-storage writes canal-json data files: use "
                                              "--target-protocol canal-json (with --target-option "
                                              "enable-tidb-extension=true) and --emit snapshot or topics")
    _placeholders("--target-topic", args.target_topic, TOPIC_PLACEHOLDERS)
    if not re.fullmatch(r"[A-Za-z0-9._\-{}]+", args.target_topic):
        raise RequestError("--target-topic", f"--target-topic {args.target_topic!r}: a Kafka topic name has only "
                                             "letters, digits, . _ -")
    if args.target_table != DEFAULT_TARGET_TABLE and not lake:
        raise RequestError("--target-table", "--target-table applies to --target-format delta or iceberg")
    if args.catalog and output_format != "iceberg":
        raise RequestError("--catalog", "--catalog applies to --target-format iceberg")
    _placeholders("--target-table", args.target_table, TABLE_PLACEHOLDERS)
    if len([p for p in args.target_table.split(".") if p]) < 2:
        raise RequestError("--target-table", f"--target-table {args.target_table!r} must give at least "
                                             "namespace.table (e.g. {schema}.{table})")
    # a window: (since, until]
    if args.since == LAST_CUT and not (lake and args.emit == "snapshot"):
        raise RequestError("--since", "--since last applies to --emit snapshot with --target-format delta or iceberg")
    if args.base_snapshot:
        if args.emit == "topics":
            raise RequestError("--base-snapshot", "--base-snapshot applies to --emit snapshot; topics of a window "
                                                  "need only --since")
        if lake:
            raise RequestError("--base-snapshot", "--base-snapshot is not used with --target-format delta/iceberg: "
                                                  "the tables hold the state at --since, and the window is merged "
                                                  "into them")
    elif args.since is not None and args.emit == "snapshot" and not lake:
        raise RequestError("--since", "a snapshot of a window needs --base-snapshot (the snapshot at --since); "
                                      "without it, use --emit topics or history for the window's changes")
    if isinstance(args.since, int) and args.upper is not None and args.upper <= args.since:
        raise RequestError("--since", f"the window is empty: --since {args.since} is not below --until/--as-of "
                                      f"{args.upper}")


# what --base-export joins (docs/base-exports.md): a TiDB TSO needs commit ts, a binlog position
# needs Canal's (file, offset) per event, which only canal-protobuf carries. Every emit mode and
# target format takes an export (snapshot, history, topics; Parquet, Kafka records, Delta, Iceberg),
# and so does a kafka:// source (its records' offsets prove it continues the export, as an archive's)
BASE_EXPORT_BINLOG_PROTOCOLS = ("canal-protobuf",)
BASE_EXPORT_TSO_PROTOCOLS = ("canal-json", "open-protocol", "craft", "avro", "csv")


def _check_base_export(args) -> None:
    """--base-export: what it combines with (the export's position kind is checked against the
    protocol once the export is read, stages/validate.py)."""
    uri = getattr(args, "base_export", None)
    zone = getattr(args, "base_export_time_zone", None)
    if zone is not None:
        if not uri:
            raise RequestError("--base-export-time-zone", "--base-export-time-zone is the zone of --base-export's "
                                                          "TIMESTAMP values: give it with --base-export")
        export_time_zone(zone)
    if not uri:
        return
    if is_kafka(uri):
        raise RequestError("--base-export", "--base-export is a Dumpling export or mysqldump file(s) on object "
                                            "storage (a local path or s3://), not Kafka")
    if args.base_snapshot:
        raise RequestError("--base-export", "--base-export and --base-snapshot are two starting points: give one")
    if args.since is not None:
        # the export is the state at its own position, not at --since: a window after it builds on
        # the first run's output, which already holds the export's rows
        raise RequestError("--base-export", "--base-export starts the replay at the export's own position, so "
                                            "--since is not used with it; replay the export once without --since, "
                                            "then each later window without --base-export: Delta/Iceberg snapshot "
                                            "tables with --since last, a Parquet/Kafka-record snapshot with "
                                            "--since and --base-snapshot (the previous output), history and topics "
                                            "with --since (the previous run's --until) and --schema (the schemas at "
                                            "it, as the previous run's manifest lists them)")


def export_time_zone(name: str):
    """--base-export-time-zone as a tzinfo; RequestError for SYSTEM (the server's zone, which
    no file records) and for a name that is no zone."""
    from cdc_codecs.canal_common import time_zone
    from cdc_codecs.errors import ConfigError

    if name.strip().upper() in ("SYSTEM", "LOCAL", ""):
        raise RequestError("--base-export-time-zone", f"--base-export-time-zone {name!r}: SYSTEM is the server "
                                                      "host's zone, which no file records; give that zone (an IANA "
                                                      "name like Asia/Shanghai, +hh:mm or UTC)")
    try:
        return time_zone(name)
    except ConfigError as e:
        raise RequestError("--base-export-time-zone", f"--base-export-time-zone: {e}") from None


def check_codecs(args) -> None:
    """Configure the source and target codecs as the app will (unknown option names, bad values).
    Imports the codecs (~1.5 s): call it before work starts, not while a DAG file is parsed."""
    from cdc_codecs import get_codec, parse_option_pairs
    from cdc_codecs.errors import CodecError

    try:
        get_codec(args.protocol, parse_option_pairs(args.protocol_option))
    except CodecError as e:
        raise RequestError("--protocol-option", str(e)) from None
    try:
        get_codec(args.target_protocol or args.protocol, parse_option_pairs(args.target_option))
    except CodecError as e:
        raise RequestError("--target-option" if args.target_option else "--target-protocol", str(e)) from None


# --- rendering and parsing back -----------------------------------------------------------------

def argparse_refusal(message: str) -> RequestError:
    """argparse's message ("argument --as-of: X") as the contract words it ("--as-of: X", the
    same text the Airflow form gives for that field)."""
    match = re.match(r"argument (--[\w-]+)(?:/[^:]*)?: (.*)", message, re.S)
    if not match:
        return RequestError("arguments", message)
    return RequestError(match.group(1), f"{match.group(1)}: {match.group(2)}")


class RefusingParser(argparse.ArgumentParser):
    """An argument parser whose refusals are RequestError (the contract's words), not exit 2."""

    def error(self, message):
        raise argparse_refusal(message)


def parse(argv: list[str]):
    """The app's arguments -> ReplayArgs (RequestError for what argparse refuses)."""
    return ReplayArgs.from_namespace(parser(RefusingParser).parse_args(argv))
