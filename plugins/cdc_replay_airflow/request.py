"""The replay request of the Airflow form (and of the scheduled DAG's Variable): its fields (the
option table's, spark_apps.options: generated, as the form's Params are) and their shapes
checked one by one, then the request checked by the same rules, with the same messages,
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
from spark_apps.options import KAFKA_SOURCE_PATTERN, URI_PATTERN, Option, request_options  # noqa: F401

# the request's fields: the option table's (spark_apps.options), in its order
FIELDS = tuple(o.request.name for o in request_options())
# the Spark settings a run's request may set (its resources): what a form user may change
# without changing what runs or where (no spark.pyspark.python, Java options, jars or
# archives: those stay the deployment's, $CDC_REPLAY_SPARK_CONF)
SPARK_CONF_ALLOWED = re.compile(
    r"spark\.(executor\.(memory|memoryOverhead|cores|instances|pyspark\.memory)|driver\.(memory|cores|maxResultSize)"
    r"|cores\.max|default\.parallelism|sql\.shuffle\.partitions|task\.cpus|yarn\.queue|kubernetes\.namespace"
    r"|dynamicAllocation\.(enabled|minExecutors|maxExecutors|initialExecutors)|memory\.fraction)")
# Kafka in the form: the bootstrap servers come from an Airflow connection (`kafka_connection`,
# default kafka_default), so the source names topics only and the output just says kafka
KAFKA = contract.KAFKA
KAFKA_OUTPUT = contract.KAFKA


class RequestError(ValueError):
    """A field of the request that cannot be used; str() names the field and says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _Request:
    """What every ReplayRequest knows besides its fields (generated below from the option table)."""

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
        for name in _PAIRS:
            out[name] = dict(getattr(self, name))
        out["tables"] = list(self.tables)
        return out

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "ReplayRequest":
        """The inverse of as_dict() (a request that travelled as an XCom)."""
        fields = dict(value)
        for name in _PAIRS:
            fields[name] = tuple((fields.get(name) or {}).items())
        fields["tables"] = tuple(fields.get("tables") or ())
        return cls(**fields)

    def replace(self, **changes) -> "ReplayRequest":
        return dataclasses.replace(self, **changes)


# how each kind of field is held when the request leaves it out (Field.default overrides)
_EMPTY = {"pairs": (), "tables": (), "spark_conf": (), "flag": False}


def _default(option: Option):
    field = option.request
    if field.default is not None:
        return field.default
    return _EMPTY.get(field.kind, option.default)


# The request: one field per option the table gives a request field (keyword-only, frozen; the
# options and tables as tuples, so a request is hashable and compares by value).
ReplayRequest = dataclasses.make_dataclass(
    "ReplayRequest",
    [(o.request.name, Any) if o.required and o.request.default is None
     else (o.request.name, Any, dataclasses.field(default=_default(o)))
     for o in request_options()],
    bases=(_Request,), frozen=True, kw_only=True)
ReplayRequest.__module__ = __name__
_PAIRS = tuple(o.request.name for o in request_options() if o.request.kind in ("pairs", "spark_conf"))


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


def _options(field: str, value: Any, default: Any = None) -> tuple:
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
FIELD_OF_OPTION = {o.flag: o.request.name for o in request_options() if o.group is not None}
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
    values = {"source": source, "output": output, "kafka_connection": kafka_connection}
    for option in sorted(request_options(), key=lambda o: _KIND_ORDER.index(o.request.kind)):
        field, kind = option.request.name, option.request.kind
        if field in values:
            continue
        value, default = conf.get(field), _default(option)
        if kind == "text":
            value = value or default
            if value is not None and not isinstance(value, str):
                raise RequestError(field, f"{value!r} is not text")
        elif kind == "flag":
            value = value or False
            if not isinstance(value, bool):
                raise RequestError(field, f"{value!r} is not true or false")
        else:
            value = _READ[kind](field, value, default)
        values[field] = value
        if kind == "text" and all(f in values for f in _TEXT) and values["protocol"] is None:
            raise RequestError("protocol", f"is required: one of {', '.join(PROTOCOLS)}")
    request = ReplayRequest(**values)
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


# how a field of each kind is read (text and flags are read in parse_request), in the order the
# kinds are checked: the first bad field is named
_KIND_ORDER = ("source", "output", "connection", "text", "flag", "pairs", "tables", "commit_ts", "uri", "int",
               "number", "spark_conf")
_TEXT = tuple(o.request.name for o in request_options() if o.request.kind == "text")
_READ = {
    "pairs": _options,
    "tables": lambda field, value, default: _tables(value),
    "commit_ts": lambda field, value, default: _commit_ts(field, value),
    "uri": lambda field, value, default: _uri(field, value, required=False),
    "int": _int,
    "number": _number,
    "spark_conf": lambda field, value, default: _spark_conf(value),
}


def check_codecs(request: ReplayRequest) -> None:
    """Configure the source and target codecs as the app will (the contract's codec check),
    naming the form field. Imports cdc_codecs: call it in a task, not at parse time."""
    try:
        contract.check_codecs(app_args(request))
    except contract.RequestError as e:
        raise _refused(e) from None


# --- the app's arguments ---------------------------------------------------------------------


def app_args(request: ReplayRequest, *, run_id: str | None = None, spark_conf: tuple = ()):
    """The request as the app's own arguments (spark_apps.options.ReplayArgs): each field the
    table gives an app option, the rest at their defaults; `spark_conf` the run's merged settings."""
    from spark_apps.options import ReplayArgs

    values = {}
    for option in request_options():
        if option.group is None or option.request.kind == "spark_conf":
            continue
        value = getattr(request, option.request.name)
        if option.request.kind == "pairs":
            value = [f"{k}={v}" for k, v in value]
        elif option.request.kind == "tables":
            value = ",".join(value) or None
        values[option.name] = value
    return ReplayArgs(**values, spark_conf=list(spark_conf), run_id=run_id)


def replay_arguments(request: ReplayRequest, *, run_id: str | None = None,
                     spark_conf: tuple = ()) -> list[str]:
    """The replay app's arguments for `request` (after `--master`, which the operator adds
    from the Spark connection): the contract's rendering, the arguments `cdc-replay replay` takes."""
    return contract.to_argv(app_args(request, run_id=run_id, spark_conf=spark_conf), master=False)


def safe_run_id(*parts: str) -> str:
    """A run id usable in a storage path: letters, digits, . _ - only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ".".join(p for p in parts if p)).strip("._")[:200]
