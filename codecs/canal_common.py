"""Alibaba Canal's own conventions, shared by the canal-protobuf codec and the `canal` flavour of
canal-json (the flat message Canal itself writes with canal.mq.flatMessage=true).

What Canal does, read from its sources (alibaba/canal: dbsync RowsLogBuffer, parse
LogEventConvert, connector MQMessageUtils, protocol FlatMessage):

* values are Java strings: integers in decimal (BIGINT UNSIGNED beyond 2^63 as the BigInteger
  sum, sqlType promoted), DECIMAL `toPlainString` (scale kept), FLOAT / DOUBLE as Java's
  `Float.toString` / `Double.toString` ("1.0", "1.0E10"), DATE / DATETIME / TIME as MySQL
  prints them, TIMESTAMP rendered by `java.sql.Timestamp` in the canal server's JVM time zone,
  YEAR digits, BIT an unsigned decimal, ENUM the 1-based index, SET the bitmask, JSON text,
  binary-charset values (type containing "binary", *BLOB) one ISO-8859-1 character per byte;
* the java.sql.Types code (`sqlType`) depends on the value: unsigned integers above the signed
  range are promoted (tinyint -> SMALLINT, smallint -> INTEGER, int -> BIGINT, bigint ->
  DECIMAL) and a NULL keeps the code of the raw binlog type (text/blob NULL is LONGVARBINARY,
  SET NULL is BINARY, JSON NULL is OTHER), because Canal only refines the code for non-NULL
  values.

The conversions between these texts and the canonical values (docs/canonical-events.md) live
here, with the flat-message writer, so that both codecs render a value the same way.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import re
import zoneinfo
from collections.abc import Iterable, Iterator

import numpy as np

from .base import Option
from .errors import ConfigError, EncodeError
from .events import ColumnFlag, Kind, Op
from .mysql_types import BINARY_BASES, TEXT_BASES, MySQLType, parse_type
from .tso import physical_ms

# ----------------------------------------------------------------------------- java.sql.Types

_SQL_TYPES = {
    "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5,
    "float": 7, "double": 8, "decimal": 3, "bit": -7,
    "date": 91, "datetime": 93, "timestamp": 93, "time": 92, "year": 12,
    "char": 1, "varchar": 12, "enum": 4, "set": -7, "json": 12,
}
# Non-NULL unsigned values above the signed range: Canal adds 2^bits and moves up one type.
_UNSIGNED_PROMOTION = {
    "tinyint": (127, 5), "smallint": (32767, 4), "mediumint": (8388607, 4),
    "int": (2147483647, -5), "bigint": (9223372036854775807, 3),
}
SPATIAL = frozenset({
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
    "multipolygon", "geometrycollection", "geomcollection",
})
BLOB, CLOB = 2004, 2005


def is_binary(mysql_type: MySQLType, type_text: str | None) -> bool:
    """Canal's rule (as TiCDC's): the type is binary-charset when it contains "binary" or
    "blob"; such values travel as one ISO-8859-1 character per byte. Canal reads spatial
    columns as java.sql.Types.BINARY and writes them the same way."""
    if mysql_type.base in BINARY_BASES or mysql_type.base in SPATIAL:
        return True
    text = (type_text or "").lower()
    return "blob" in text or "binary" in text


class TypeInfo:
    """What Canal's rules derive from a column type string (cached: columns repeat)."""

    __slots__ = ("mysql_type", "labels", "binary", "kind", "flags", "sql_null", "sql_value", "promotion")

    def __init__(self, type_text: str | None):
        t = parse_type(type_text)
        base = t.base
        self.mysql_type = t
        self.labels = t.labels
        self.binary = is_binary(t, type_text)
        self.kind = "binary" if self.binary else base if base in ("float", "double", "timestamp") else "text"
        self.flags = int((ColumnFlag.BINARY if self.binary else 0) | (ColumnFlag.UNSIGNED if t.unsigned else 0))
        # NULL: Canal keeps the code of the raw binlog column type
        if base in ("tinyblob", "tinytext", "varbinary"):
            self.sql_null = -3  # VARBINARY (a BLOB of pack length 1 in the binlog)
        elif base in ("blob", "mediumblob", "longblob", "text", "mediumtext", "longtext"):
            self.sql_null = -4  # LONGVARBINARY
        elif base == "binary" or base in SPATIAL or base == "set":
            self.sql_null = -2  # BINARY
        elif base == "json":
            self.sql_null = 1111  # OTHER
        else:
            self.sql_null = _SQL_TYPES.get(base, 12)
        if base in TEXT_BASES:
            self.sql_value = CLOB
        elif self.binary or base in SPATIAL:
            self.sql_value = BLOB
        else:
            self.sql_value = _SQL_TYPES.get(base, 12)
        self.promotion = _UNSIGNED_PROMOTION.get(base) if t.unsigned else None


@functools.lru_cache(maxsize=4096)
def type_info(type_text: str | None) -> TypeInfo:
    return TypeInfo(type_text)


def canal_sql_type(type_text: str | None, value: bytes | None) -> int:
    """The java.sql.Types code Canal writes for a column of `type_text` holding `value`
    (canonical bytes, None for NULL)."""
    info = type_info(type_text)
    if value is None:
        return info.sql_null
    if info.promotion:
        limit, wider = info.promotion
        try:
            if int(value) > limit:
                return wider
        except ValueError:
            pass
    return info.sql_value


# ----------------------------------------------------------------------------- FLOAT / DOUBLE

def _shortest(value: float, single: bool) -> tuple[str, int]:
    """Java's Float/Double.toString digits (JDK 19+): the shortest decimal that rounds to the
    value (numpy's Dragon4 `unique` mode gives the closest such), and when one digit would do,
    the closest decimal of two digits. Returns (digits, scientific exponent)."""
    typed = np.float32(value) if single else np.float64(value)
    mantissa, _, exponent = np.format_float_scientific(typed, unique=True, trim="-").partition("e")
    digits = mantissa.lstrip("-").replace(".", "")
    exp = int(exponent)
    if len(digits) == 1:
        two = decimal.Context(prec=2, rounding=decimal.ROUND_HALF_EVEN).plus(decimal.Decimal(float(abs(typed))))
        back = np.float32(float(two)) if single else float(two)
        if back == abs(typed):
            digits = "".join(map(str, two.as_tuple().digits))
            exp = two.adjusted()
    return digits.rstrip("0") or "0", exp


def java_float_text(text: bytes | str, single: bool) -> str:
    """Canonical FLOAT/DOUBLE text -> what Java's Float.toString / Double.toString prints.

    No kept library renders Java's format (at least one fractional digit, `E` notation outside
    [1e-3, 1e7)); the digit selection is numpy's, the layout is written here."""
    value = float(text)
    if value == 0:
        return "-0.0" if np.signbit(value) else "0.0"
    sign = "-" if value < 0 else ""
    digits, exp = _shortest(value, single)
    if -3 <= exp < 7:
        if exp >= 0:
            whole = (digits[: exp + 1]).ljust(exp + 1, "0")
            frac = digits[exp + 1 :] or "0"
        else:
            whole, frac = "0", "0" * (-exp - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def canonical_float(text: str, single: bool) -> str:
    """Any float text (Java's "1.0E10", "1.5") -> the canonical shortest positional text."""
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    typed = np.float32(value) if single else np.float64(value)
    return np.format_float_positional(typed, unique=True, trim="-")


# ----------------------------------------------------------------------------- TIMESTAMP zone

_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$")
_TIMESTAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?$")


@functools.lru_cache(maxsize=64)
def time_zone(name: str) -> dt.tzinfo:
    """`UTC`, an IANA zone name (`Asia/Shanghai`) or a fixed offset (`+08:00`)."""
    text = name.strip()
    if text.upper() in ("UTC", "Z", "GMT", "+00:00", "00:00"):
        return dt.timezone.utc
    m = _OFFSET.match(text)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3) or 0)
        return dt.timezone(dt.timedelta(minutes=-minutes if m.group(1) == "-" else minutes))
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
        raise ConfigError(f"unknown time zone {name!r}: use UTC, an IANA name or +hh:mm") from e


class ZoneOption(Option):
    """A codec's `tz`: the zone its producer rendered TIMESTAMP text in (TiCDC's server flag
    `--tz`, Canal's JVM zone). The codecs keep the text as written; the replay uses the zone
    to bring a base export's TIMESTAMP values to it (docs/base-exports.md). Empty: unknown.
    `SYSTEM` (a host's zone) is refused: no file tells which zone that was."""

    def parse(self, raw):
        text = super().parse(raw)
        if text.upper() in ("SYSTEM", "LOCAL"):
            raise ConfigError(f"option {self.name}={raw!r}: SYSTEM is the producer host's zone, which no file "
                              "records; give that zone (an IANA name like Asia/Shanghai, +hh:mm or UTC)")
        if text:
            try:
                time_zone(text)
            except ConfigError as e:
                raise ConfigError(f"option {self.name}={raw!r}: {e}") from None
        return text


TZ_OPTION = ZoneOption(
    "tz", "", "the zone the producer wrote TIMESTAMP text in (TiCDC's --tz; Canal's JVM zone): decoded "
    "TIMESTAMPs are kept as written; with --base-export the export's TIMESTAMPs are brought to it "
    "(IANA name, +hh:mm or UTC; empty: unknown)")


def timestamp_between(text: str, src: dt.tzinfo, dst: dt.tzinfo) -> str:
    """A TIMESTAMP rendered in `src` -> the same instant rendered in `dst`: the fraction is
    carried digit for digit, the zero date is kept, and a local time `src` shows twice (a DST
    fold) is taken as the earlier instant (fold=0, as `timestamp_to_utc`)."""
    return text if src == dst else _shift(text, src, dst)


def _shift(text: str, src: dt.tzinfo, dst: dt.tzinfo) -> str:
    if text.startswith("0000-00-00"):
        return text  # the zero TIMESTAMP is no instant: kept as written
    m = _TIMESTAMP.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a TIMESTAMP value (YYYY-MM-DD HH:MM:SS[.f])")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    moved = dt.datetime(year, month, day, hour, minute, second, tzinfo=src).astimezone(dst)
    return (
        f"{moved.year:04d}-{moved.month:02d}-{moved.day:02d} "
        f"{moved.hour:02d}:{moved.minute:02d}:{moved.second:02d}{m.group(7) or ''}"
    )


def timestamp_to_utc(text: str, zone: dt.tzinfo) -> str:
    """A TIMESTAMP rendered in `zone` (Canal's JVM zone) -> the same instant as UTC text.
    The fraction is carried unchanged; in a DST fold the earlier instant is taken."""
    return text if zone is dt.timezone.utc else _shift(text, zone, dt.timezone.utc)


def timestamp_from_utc(text: str, zone: dt.tzinfo) -> str:
    return text if zone is dt.timezone.utc else _shift(text, dt.timezone.utc, zone)


# ----------------------------------------------------------------------------- values

def canal_text(column: dict, zone: dt.tzinfo = dt.timezone.utc) -> str | None:
    """A canonical column's value as the Java string Canal carries (None for NULL)."""
    value = column["value"]
    if value is None:
        return None
    info = type_info(column["mysql_type"])
    if info.binary:
        return value.decode("latin-1")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EncodeError(
            f"column {column['name']!r} ({column['mysql_type']}) holds bytes that are not UTF-8 text: "
            f"{value[max(e.start - 4, 0):e.end + 4]!r}") from None
    kind = info.kind
    if kind == "text":
        return text
    if kind == "timestamp":
        try:
            return timestamp_from_utc(text, zone)
        except (ValueError, OverflowError):
            return text
    try:
        return java_float_text(text, kind == "float")
    except ValueError:
        return text


def canonical_bytes(text: str, type_text: str | None, zone: dt.tzinfo = dt.timezone.utc) -> bytes:
    """Canal's Java string -> canonical value bytes. Raises ValueError when the text cannot be
    the value of such a column (binary text outside ISO-8859-1, a float that is not one, a
    TIMESTAMP that is not a timestamp)."""
    kind = type_info(type_text).kind
    if kind == "text":
        return text.encode("utf-8")
    if kind == "binary":
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"binary value holds character U+{ord(text[e.start]):04X}, outside ISO-8859-1") from None
    if kind == "timestamp":
        return timestamp_to_utc(text, zone).encode("utf-8")
    return canonical_float(text, kind == "float").encode("utf-8")


# ----------------------------------------------------------------------------- flat message JSON

_FASTJSON_ESCAPES: dict[int, str] = {c: f"\\u{c:04X}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_FASTJSON_ESCAPES.update({
    ord("\b"): "\\b", ord("\t"): "\\t", ord("\n"): "\\n", ord("\f"): "\\f", ord("\r"): "\\r",
    ord('"'): '\\"', ord("\\"): "\\\\", 0x2028: "\\u2028", 0x2029: "\\u2029",
})


def fastjson_quote(text: str) -> str:
    """A JSON string as fastjson 1.x (Canal's JSON library) writes it: \\b \\t \\n \\f \\r \\" \\\\
    escaped by letter, other C0/C1 controls and U+2028/U+2029 as upper-case \\uXXXX, everything
    else (non-ASCII included) as is. Written by hand: no kept library escapes this way."""
    return '"' + text.translate(_FASTJSON_ESCAPES) + '"'


def _extras(event: dict) -> dict:
    extras = event.get("extras")
    return (extras if isinstance(extras, dict) else dict(extras)) if extras else {}


def flat_group_key(event: dict):
    """Rows Canal puts in one flat message: one binlog rows event = same table, operation,
    transaction and binlog position (or, without a position, the same commit ts), and the same
    columns and types (a message has one `mysqlType`; rows from events without any time or
    position must not be merged into another row's types)."""
    extras = _extras(event)
    position = event["position"]
    image = event["before"] if event["op"] == Op.DELETE else event["after"]
    return (
        event["database"], event["table"], event["op"], event["commit_ts"], event["tx_id"],
        tuple(position[:2]) if position else None, event["execute_ts_ms"],
        extras.get("canal.id"), extras.get("canal.ts"), tuple(event["key_columns"] or ()),
        tuple((c["name"], c["mysql_type"]) for c in image or ()),
    )


def group_flat(events: Iterable[dict]) -> Iterator[list[dict]]:
    """Consecutive row events with the same flat_group_key form one message; DDL alone."""
    group: list[dict] = []
    key = None
    for event in events:
        if event["kind"] != Kind.ROW:
            if group:
                yield group
                group = []
            yield [event]
            key = None
            continue
        k = flat_group_key(event)
        position = event["position"]
        continuing = (
            group and k == key
            and (position is None or (group[-1]["position"] and position[2] == group[-1]["position"][2] + 1))
        )
        if not continuing and group:
            yield group
            group = []
        group.append(event)
        key = k
    if group:
        yield group


def _es(event: dict) -> int:
    es = event["execute_ts_ms"]
    if es is None:
        ts = event["commit_ts"] if event["kind"] != Kind.WATERMARK else event["watermark_ts"]
        es = physical_ms(ts or 0)
    return es // 1000 * 1000  # Canal's es is the binlog event time: whole seconds


def flat_message_json(group: list[dict], ddl_type_name, zone: dt.tzinfo = dt.timezone.utc) -> str:
    """The flat message Canal writes for a group of row events (or one DDL event), keys in
    fastjson's alphabetical order: data, database, es, gtid, id, isDdl, mysqlType, old, pkNames,
    sql, sqlType, table, ts, type.

    As Canal's MQMessageUtils.messageConverter: `pkNames` are the key columns of the first row
    (null when none), `sqlType` / `mysqlType` hold the last row's codes per column, `old` holds
    per row the columns changed in this row or any earlier row of the message (Canal's shared
    update set), `es` has second precision, `ts` is the decoded message's `ts` when kept, else es.
    """
    first = group[0]
    extras = _extras(first)
    es = _es(first)
    ts = extras.get("canal.ts", str(es))
    head_id = int(extras.get("canal.id", 0))
    gtid = fastjson_quote(first["tx_id"] or "")
    if first["kind"] == Kind.DDL:
        return (
            f'{{"data":null,"database":{fastjson_quote(first["database"] or "")},"es":{es},'
            f'"gtid":{gtid},"id":{head_id},"isDdl":true,"mysqlType":null,"old":null,'
            f'"pkNames":null,"sql":{fastjson_quote(first["ddl_query"] or "")},"sqlType":null,'
            f'"table":{fastjson_quote(first["table"] or "")},"ts":{ts},'
            f'"type":{fastjson_quote(ddl_type_name(first))}}}'
        )
    op = first["op"]
    type_name = {Op.INSERT: "INSERT", Op.UPDATE: "UPDATE", Op.DELETE: "DELETE"}.get(op)
    if type_name is None:
        raise EncodeError(f"row event with op {op!r}")
    sql_types: dict[str, int] = {}
    mysql_types: dict[str, str] = {}
    data, old = [], []
    updated: set[str] = set()
    keys = set(first["key_columns"] or ())
    pk_names = None
    for index, event in enumerate(group):
        image = event["before"] if op == Op.DELETE else event["after"]
        if not image:
            raise EncodeError(f"{op} event without its {'before' if op == Op.DELETE else 'after'} image")
        if index == 0:
            pk_names = [c["name"] for c in image if c["name"] in keys] or None
        row = []
        before = {c["name"]: c for c in event["before"] or ()} if op == Op.UPDATE else {}
        for c in image:
            name = c["name"]
            sql_types[name] = canal_sql_type(c["mysql_type"], c["value"])
            mysql_types[name] = c["mysql_type"] or ""
            text = canal_text(c, zone)
            row.append(f"{fastjson_quote(name)}:{'null' if text is None else fastjson_quote(text)}")
            if op == Op.UPDATE:
                prior = before.get(name)
                if prior is None or (prior["value"], prior["mysql_type"]) != (c["value"], c["mysql_type"]):
                    updated.add(name)
        data.append("{" + ",".join(row) + "}")
        if op == Op.UPDATE:
            if not event["before"]:
                raise EncodeError("update event without its before image")
            changed = []
            for c in event["before"]:
                if c["name"] in updated:
                    text = canal_text(c, zone)
                    changed.append(f"{fastjson_quote(c['name'])}:{'null' if text is None else fastjson_quote(text)}")
            old.append("{" + ",".join(changed) + "}")
    pk_json = "null" if pk_names is None else "[" + ",".join(fastjson_quote(k) for k in pk_names) + "]"
    return (
        f'{{"data":[{",".join(data)}],"database":{fastjson_quote(first["database"] or "")},'
        f'"es":{es},"gtid":{gtid},"id":{head_id},"isDdl":false,'
        f'"mysqlType":{{{",".join(f"{fastjson_quote(k)}:{fastjson_quote(v)}" for k, v in mysql_types.items())}}},'
        f'"old":{"[" + ",".join(old) + "]" if old else "null"},"pkNames":{pk_json},"sql":"",'
        f'"sqlType":{{{",".join(f"{fastjson_quote(k)}:{v}" for k, v in sql_types.items())}}},'
        f'"table":{fastjson_quote(first["table"] or "")},"ts":{ts},"type":"{type_name}"}}'
    )
