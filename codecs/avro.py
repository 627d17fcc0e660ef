"""avro: TiCDC's Avro protocol (`protocol=avro`, alias flat-avro) in the Confluent wire format.

A row change is one Kafka message: the key is the handle-key columns, the value every column,
each an Avro record framed as `0x00 | int32 BE schema id | Avro binary`, whose writer schema
lives in a schema registry (subjects `<topic>-key` / `<topic>-value`, `.` in the topic → `_`).
A DELETE is the key with a null value (a Kafka tombstone: no commit ts, no other columns).
With `enable-tidb-extension` the value adds `_tidb_op` ("c" insert / "u" update),
`_tidb_commit_ts` and `_tidb_commit_physical_time`; with `avro-enable-watermark` as well, DDL
events are sent as `0x01 | JSON {query,type,schema,table,commitTs}` and watermarks as
`0x02 | uint64 BE ts`, both with a null key.

Layers, kept apart:
* framing — `_frame`, `_read` (magic byte, schema id, trailing bytes);
* schemas — `_table_schema` generates TiCDC's schema for an image exactly as TiCDC's encoder
  serialises it (Go `json.Marshal` key order and escaping, `connect.parameters` tidb_type /
  length / allowed, `["null", T]` with `"default": null` for nullable columns, name
  sanitising); `_WriterSchema` analyses a registry schema into a per-column decoding plan.
  Both are cached: writer schemas by id, generated schemas by column signature, ids by
  (subject, schema). The registry (`schema_registry.py`) is rebuilt lazily after pickling;
* values — canonical bytes ↔ Avro datums per TiDB type (`_encoder_for`, `_decoder_for`).

fastavro reads and writes every record, with two deliberate schema adjustments made on a copy
of the writer schema (the registered text is untouched): Avro `string` is read and written as
`bytes` (identical binary encoding) so values stay byte-exact — canonical values are bytes and
TiCDC's Go strings may hold any bytes — and `logicalType` is dropped so DECIMAL bytes are
converted here: fastavro rounds decoded decimals to the schema precision without a word, and
the unscaled two's-complement integer is two lines of Python.

Decoding is schema-driven (handling modes and the extension are read from the writer schema);
the options only steer encoding. Deliberate deviations and every loss are listed in
docs/protocols/avro.md.
"""

from __future__ import annotations

import contextlib
import decimal
import functools
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import orjson

from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .canal_common import TZ_OPTION
from .ddl_types import ACTION_CODES, ACTION_NAMES, classify
from .errors import ConfigError, EncodeError
from .events import ColumnFlag, Kind, Op, new_event
from .gojson import quote
from .mysql_types import BINARY_BASES, INTEGER_BASES, TEXT_BASES, MySQLType, enum_set_label, enum_set_value, parse_type
from .schema_registry import SchemaRegistry, open_registry
from .tso import physical_ms

MAGIC_BYTE = 0x00
DDL_BYTE = 0x01
WATERMARK_BYTE = 0x02

DEFAULT_NAMESPACE = "default"  # the changefeed namespace TiCDC writes unless configured otherwise
OP_FIELD = "_tidb_op"
COMMIT_TS_FIELD = "_tidb_commit_ts"
PHYSICAL_TIME_FIELD = "_tidb_commit_physical_time"
CHECKSUM_FIELDS = ("_tidb_row_level_checksum", "_tidb_corrupted", "_tidb_checksum_version")
# extension field -> Avro type TiCDC writes
_EXTENSION_TYPES = {
    OP_FIELD: "string", COMMIT_TS_FIELD: "long", PHYSICAL_TIME_FIELD: "long",
    "_tidb_row_level_checksum": "string", "_tidb_corrupted": "boolean", "_tidb_checksum_version": "int",
}
_OPS = {b"c": Op.INSERT, b"u": Op.UPDATE}
_OP_CODES = {Op.INSERT: b"c", Op.UPDATE: b"u"}

_U64 = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


# ----------------------------------------------------------------------------- names

def sanitize_name(name: str) -> str:
    """TiCDC's Avro name sanitising: every character outside [A-Za-z0-9_] becomes `_`, and a
    leading digit gets a `_` prefix."""
    out = []
    for i, c in enumerate(name):
        if i == 0 and "0" <= c <= "9":
            out.append("_" + c)
        elif c == "_" or ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9"):
            out.append(c)
        else:
            out.append("_")
    return "".join(out)


def sanitize_topic(topic: str) -> str:
    """TiCDC replaces `.` in the topic before deriving the subjects."""
    return topic.replace(".", "_")


def escape_allowed(label: str) -> str:
    """One ENUM/SET label in `connect.parameters.allowed`, escaped as TiCDC (after Debezium) does."""
    return label.replace(",", "\\,").replace("\\'", "'").replace("''", "'")


def split_allowed(allowed: str) -> tuple[str, ...]:
    """The labels of an `allowed` parameter: split on commas not escaped as `\\,`."""
    labels, current, i = [], [], 0
    while i < len(allowed):
        c = allowed[i]
        if c == "\\" and i + 1 < len(allowed) and allowed[i + 1] == ",":
            current.append(",")
            i += 2
            continue
        if c == ",":
            labels.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    labels.append("".join(current))
    return tuple(labels)


def enum_set_type(base: str, labels: Iterable[str]) -> str:
    """`enum('a','it''s')` with quotes doubled and backslashes escaped, as parse_type reads it."""
    quoted = ",".join("'" + label.replace("\\", "\\\\").replace("'", "''") + "'" for label in labels)
    return f"{base}({quoted})"


# ----------------------------------------------------------------------------- values

def float32_text(value: float) -> bytes:
    """Shortest text that round-trips the float32, no exponent (Go's FormatFloat 'f', -1, 32)."""
    return np.format_float_positional(np.float32(value), unique=True, trim="-").encode()


def float64_text(value: float) -> bytes:
    return np.format_float_positional(np.float64(value), unique=True, trim="-").encode()


def decimal_text(unscaled: int, scale: int) -> bytes:
    """The canonical text of unscaled × 10^-scale, with exactly `scale` fraction digits."""
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled))
    if scale <= 0:
        return (sign + digits).encode()
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}".encode()


_DECIMAL_CONTEXT = decimal.Context(prec=200, traps=[decimal.InvalidOperation])


def decimal_unscaled(text: bytes, scale: int) -> int:
    """The unscaled integer of a decimal text at `scale`; ValueError when it needs more digits."""
    try:
        number = _DECIMAL_CONTEXT.create_decimal(text.decode("ascii").strip())
    except (UnicodeDecodeError, decimal.InvalidOperation):
        raise ValueError(f"{text[:40]!r} is not a decimal number") from None
    if not number.is_finite() or abs(number.adjusted()) > 100:
        raise ValueError(f"{text[:40]!r} is not a DECIMAL value")
    scaled = number.scaleb(scale, _DECIMAL_CONTEXT)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{text[:40]!r} has more than the column's {scale} fraction digits")
    return int(scaled)


def signed_bytes(n: int) -> bytes:
    """Minimal big-endian two's complement, at least one byte (goavro's toSignedBytes)."""
    length = ((n if n >= 0 else ~n).bit_length() + 8) // 8
    return n.to_bytes(length, "big", signed=True)


def bit_bytes(n: int) -> bytes:
    """BIT value as TiCDC writes it: minimal big-endian bytes, at least one."""
    return n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big")


def go_json(value: Any) -> str:
    """JSON as Go's encoding/json writes it for the structures TiCDC builds: no spaces, keys in
    the order given (callers order them as Go does), Go's string escaping."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{quote(k)}:{go_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"go_json cannot serialise {type(value).__name__}")


# ----------------------------------------------------------------------------- column types (encode)

@dataclass(frozen=True)
class _ColumnType:
    tidb_type: str
    avro: str  # Avro primitive of the registered schema
    params: tuple[tuple[str, str], ...]  # connect.parameters besides tidb_type
    decimal: tuple[int, int] | None  # (precision, scale) when a logical decimal
    kind: str  # value conversion, see _encoder_for
    labels: tuple[str, ...] | None = None


def column_type(type_text: str | None, flags: int, decimal_mode: str, bigint_mode: str) -> _ColumnType:
    """TiCDC's Avro type of a canonical column (its mysql_type and flags); EncodeError when
    TiCDC has no Avro mapping for it."""
    t: MySQLType = parse_type(type_text)
    base = t.base
    unsigned = t.unsigned or bool(flags & ColumnFlag.UNSIGNED)
    if base in INTEGER_BASES:
        if base == "bigint":
            tidb = "BIGINT UNSIGNED" if unsigned else "BIGINT"
            if unsigned:
                return _ColumnType(tidb, "string", (), None, "raw") if bigint_mode == "string" else \
                    _ColumnType(tidb, "long", (), None, "u64long")
            return _ColumnType(tidb, "long", (), None, "int64")
        tidb = "INT UNSIGNED" if unsigned else "INT"
        if base == "int" and unsigned:
            return _ColumnType(tidb, "long", (), None, "int64")
        return _ColumnType(tidb, "int", (), None, "int32")
    if base == "float":
        return _ColumnType("FLOAT", "float", (), None, "float")
    if base == "double":
        return _ColumnType("DOUBLE", "double", (), None, "float")
    if base == "bit":
        params = (("length", str(int(t.params[0]))),) if t.params and t.params[0].isdigit() else ()
        return _ColumnType("BIT", "bytes", params, None, "bit")
    if base == "decimal":
        if decimal_mode == "precise" and t.params and all(p.isdigit() for p in t.params[:2]):
            precision = int(t.params[0])
            scale = int(t.params[1]) if len(t.params) > 1 else 0
            return _ColumnType("DECIMAL", "bytes", (), (precision, scale), "decimal")
        # string mode, or precision/scale unknown (the source protocol dropped them): a string
        return _ColumnType("DECIMAL", "string", (), None, "raw")
    if base in BINARY_BASES or (flags & ColumnFlag.BINARY and base in ("char", "varchar", *TEXT_BASES)):
        return _ColumnType("BLOB", "bytes", (), None, "raw")
    if base in ("char", "varchar", *TEXT_BASES):
        return _ColumnType("TEXT", "string", (), None, "raw")
    if base in ("enum", "set"):
        labels = t.labels
        if labels is None:  # labels unknown: the canonical index/bitmask text, no `allowed`
            return _ColumnType(base.upper(), "string", (), None, "raw")
        allowed = ",".join(escape_allowed(label) for label in labels)
        return _ColumnType(base.upper(), "string", (("allowed", allowed),), None, base, labels)
    if base in ("json", "date", "datetime", "timestamp", "time"):
        return _ColumnType(base.upper(), "string", (), None, "raw")
    if base == "year":
        return _ColumnType("YEAR", "int", (), None, "int32")
    if base == "vector":
        return _ColumnType("TiDBVECTORFloat32", "string", (), None, "raw")
    raise EncodeError(f"TiCDC's avro protocol has no mapping for MySQL type {type_text!r}")


def _avro_type_json(ct: _ColumnType) -> dict:
    params = dict(sorted([("tidb_type", ct.tidb_type), *ct.params]))  # Go sorts map keys
    out: dict = {"type": "bytes" if ct.decimal else ct.avro, "connect.parameters": params}
    if ct.decimal:
        out["logicalType"] = "decimal"
        out["precision"], out["scale"] = ct.decimal
    return out


def _encoder_for(ct: _ColumnType) -> Callable[[bytes], Any]:
    """canonical bytes -> the datum fastavro writes (strings as bytes, decimals as bytes)."""
    kind = ct.kind
    if kind == "raw":
        return bytes
    if kind in ("int32", "int64"):
        lo, hi = (_I32_MIN, _I32_MAX) if kind == "int32" else (_I64_MIN, _I64_MAX)

        def integer(v: bytes) -> int:
            n = int(v)
            if not lo <= n <= hi:
                raise ValueError(f"{n} is outside Avro {ct.avro}")
            return n
        return integer
    if kind == "u64long":
        def u64(v: bytes) -> int:
            n = int(v)
            if not 0 <= n <= _U64:
                raise ValueError(f"{n} is outside BIGINT UNSIGNED")
            return n - (1 << 64) if n > _I64_MAX else n  # TiCDC's int64(uint64): wraps
        return u64
    if kind == "float":
        return lambda v: float(v)
    if kind == "bit":
        def bit(v: bytes) -> bytes:
            n = int(v)
            if not 0 <= n <= _U64:
                raise ValueError(f"{n} is outside BIT(64)")
            return bit_bytes(n)
        return bit
    if kind == "decimal":
        precision, scale = ct.decimal
        return lambda v: signed_bytes(decimal_unscaled(v, scale))
    if kind in ("enum", "set"):
        mysql_type = MySQLType(kind, ct.labels)

        def label(v: bytes) -> bytes:
            text = enum_set_label(mysql_type, v)
            if text is None:
                raise ValueError(f"{v[:40]!r} is not a valid {kind.upper()} value of {len(ct.labels)} labels")
            return text.encode()
        return label
    raise AssertionError(kind)


# ----------------------------------------------------------------------------- writer schemas (decode)

class _SchemaProblem(Exception):
    """A registry schema that is not one TiCDC's avro protocol writes."""


_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)


@dataclass
class _DecColumn:
    name: str
    mysql_type: str | None
    flags: int  # a plain int: IntFlag arithmetic per value is slow
    convert: Callable[[Any], tuple[bytes, str | None]]


def _io_type(t: Any) -> Any:
    """The type fastavro reads/writes: string as bytes, no logical types."""
    if isinstance(t, str):
        return "bytes" if t == "string" else t
    if isinstance(t, list):
        return [_io_type(x) for x in t]
    if isinstance(t, dict):
        out = {k: v for k, v in t.items() if k != "logicalType"}
        out["type"] = _io_type(t.get("type"))
        return out
    return t


def io_schema(schema: dict) -> dict:
    """A parsed fastavro schema for a TiCDC record schema, adjusted as the module says."""
    fields = [{"name": f["name"], "type": _io_type(f["type"])} for f in schema["fields"]]
    copy = {"type": "record", "name": schema["name"], "fields": fields}
    if "namespace" in schema:
        copy["namespace"] = schema["namespace"]
    return fastavro.parse_schema(copy)


def _branch(field_type: Any) -> tuple[Any, bool]:
    """(the non-null type, nullable) of a field type."""
    if isinstance(field_type, list):
        others = [t for t in field_type if t != "null"]
        if len(others) != 1 or len(field_type) != 2:
            raise _SchemaProblem(f"union {go_json(field_type)[:80]} is not [\"null\", T]")
        return others[0], True
    return field_type, False


def _int_param(branch: dict, key: str) -> int | None:
    v = branch.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# Column value converters (Avro datum -> (canonical value, label)). Module-level so the compiled
# decoder (spark_apps/native_decode.py) can tell which rule a column has; ENUM/SET keep a closure.

def _text(v):
    return bytes(v), None


def _integer(v):
    return str(v).encode(), None


def _u64(v):
    return str(v & _U64).encode(), None


def _float32(v):
    return float32_text(v), None


def _float64(v):
    return float64_text(v), None


def _boolean(v):
    return (b"1" if v else b"0"), None


def _bit(v):
    if len(v) > 8:
        raise ValueError(f"BIT value of {len(v)} bytes exceeds BIT(64)")
    return str(int.from_bytes(v, "big")).encode(), None


@dataclass(frozen=True)
class _Unscaled:
    """DECIMAL bytes: the unscaled two's-complement integer at the column's scale."""

    scale: int

    def __call__(self, v):
        return decimal_text(int.from_bytes(v, "big", signed=True), self.scale), None


def _decoder_for(name: str, tidb_type: str, prim: str, branch: dict) -> tuple[str | None, int, Callable]:
    """(mysql_type, flags, converter) of a TiCDC column; converters return (value, label)."""
    params = branch.get("connect.parameters") or {}

    def expect(*prims: str) -> None:
        if prim not in prims:
            raise _SchemaProblem(
                f"column {name!r}: tidb_type {tidb_type} written as Avro {prim}, expected {'/'.join(prims)}")

    flags = 0
    if "UNSIGNED" in tidb_type:
        flags |= ColumnFlag.UNSIGNED
    if tidb_type in ("INT", "INT UNSIGNED"):
        expect("int", "long")
        mysql_type = "int" if tidb_type == "INT" else ("int unsigned" if prim == "long" else "mediumint unsigned")
        return mysql_type, flags, _integer
    if tidb_type == "BIGINT":
        expect("long", "int")
        return "bigint", flags, _integer
    if tidb_type == "BIGINT UNSIGNED":
        expect("long", "int", "string")
        if prim == "string":
            return "bigint unsigned", flags, _text
        return "bigint unsigned", flags, _u64
    if tidb_type in ("FLOAT", "DOUBLE"):
        expect("float", "double")
        # TiCDC before v7.0 wrote FLOAT as Avro double: format it as the float32 it holds
        return tidb_type.lower(), flags, _float32 if tidb_type == "FLOAT" else _float64
    if tidb_type == "BIT":
        expect("bytes")
        length = params.get("length")
        return (f"bit({length})" if isinstance(length, str) and length.isdigit() else "bit"), flags, _bit
    if tidb_type == "DECIMAL":
        if prim == "string":
            return "decimal", flags, _text
        expect("bytes")
        if branch.get("logicalType") != "decimal":
            raise _SchemaProblem(f"column {name!r}: DECIMAL bytes without logicalType decimal")
        precision = _int_param(branch, "precision")
        scale = _int_param(branch, "scale") or 0
        if precision is None or not 0 <= scale <= 65 or precision <= 0:
            raise _SchemaProblem(
                f"column {name!r}: decimal precision/scale {branch.get('precision')!r}/{branch.get('scale')!r}")
        return f"decimal({precision},{scale})", flags, _Unscaled(scale)
    if tidb_type == "TEXT":
        expect("string")
        return "longtext", flags, _text
    if tidb_type == "BLOB":
        expect("bytes")
        return "longblob", flags | ColumnFlag.BINARY, _text
    if tidb_type in ("ENUM", "SET"):
        expect("string")
        allowed = params.get("allowed")
        base = tidb_type.lower()
        if not isinstance(allowed, str):
            return base, flags, _text  # no labels: the string is the value as written
        labels = split_allowed(allowed)
        mysql_type = enum_set_type(base, labels)
        parsed = MySQLType(base, labels)

        def label_value(v):
            label = bytes(v).decode("utf-8")
            value = enum_set_value(parsed, label)
            if value is None:
                raise ValueError(f"{label[:40]!r} is not among the {tidb_type} labels {allowed[:80]!r}")
            return value, label
        return mysql_type, flags, label_value
    if tidb_type in ("JSON", "DATE", "DATETIME", "TIMESTAMP", "TIME"):
        expect("string")
        return tidb_type.lower(), flags, _text
    if tidb_type == "YEAR":
        expect("int", "long")
        return "year", flags, _integer
    if tidb_type == "TiDBVECTORFloat32":
        expect("string")
        return "vector", flags, _text
    # A type this codec does not know (a newer TiCDC): keep the value by its Avro type.
    generic = {
        "int": _integer, "long": _integer, "string": _text, "bytes": _text,
        "float": _float32, "double": _float64, "boolean": _boolean,
    }
    if prim not in generic:
        raise _SchemaProblem(f"column {name!r}: unknown tidb_type {tidb_type!r} as Avro {prim}")
    return (tidb_type.lower() or None), flags, generic[prim]


_FIELDS: dict[bytes, tuple] = {}  # a field's JSON -> _field(field) (or its problem)
_FIELDS_MAX = 100_000


def _field(field: Any) -> tuple[_DecColumn | None, dict, tuple]:
    """`_analysed(field)` and the compiled decoder's spec of the field (`_compiled_field`),
    remembered by the field's JSON: writer schemas differ in a column or a null branch (TiCDC
    registers one per image shape, so ids are many) and share the rest."""
    key = orjson.dumps(field)
    found = _FIELDS.get(key)
    if found is None:
        try:
            column, io_field = _analysed(field)
            found = (column, io_field, _compiled_field(column, io_field))
        except _SchemaProblem as e:
            found = e
        if len(_FIELDS) >= _FIELDS_MAX:
            _FIELDS.clear()
        _FIELDS[key] = found
    if isinstance(found, _SchemaProblem):
        raise _SchemaProblem(*found.args)
    return found


def _analysed(field: Any) -> tuple[_DecColumn | None, dict]:
    """(the column, None for an extension field; the field as the codec reads it: `_io_type`)."""
    if not isinstance(field, dict) or not isinstance(field.get("name"), str):
        raise _SchemaProblem("has a field without a name")
    fname = field["name"]
    branch, nullable = _branch(field.get("type"))
    if isinstance(branch, str):
        prim, branch = branch, {}
    elif isinstance(branch, dict) and isinstance(branch.get("type"), str):
        prim = branch["type"]
    else:
        raise _SchemaProblem(
            f"field {fname!r} has type {go_json(field.get('type'))[:80]}, not a TiCDC column type")
    io_field = {"name": fname, "type": _io_type(field.get("type"))}
    params = branch.get("connect.parameters")
    tidb_type = params.get("tidb_type") if isinstance(params, dict) else None
    if tidb_type is None and fname in _EXTENSION_TYPES:
        if prim != _EXTENSION_TYPES[fname] or nullable:
            raise _SchemaProblem(f"extension field {fname!r} is {prim}, TiCDC writes {_EXTENSION_TYPES[fname]}")
        return None, io_field
    if not isinstance(tidb_type, str):
        raise _SchemaProblem(f"field {fname!r} has no connect.parameters.tidb_type: not a TiCDC column")
    mysql_type, flags, convert = _decoder_for(fname, tidb_type, prim, branch)
    if nullable:
        flags |= ColumnFlag.NULLABLE
    return _DecColumn(fname, mysql_type, int(flags), convert), io_field


def _io_code(t: Any) -> str:
    """An `_io_type` as the compiled decoder builds it: the primitive, or a union's branches
    joined by "," in their order ("null,long")."""
    if isinstance(t, list):
        return ",".join(_io_code(x) for x in t)
    return t["type"] if isinstance(t, dict) else t


def _compiled_field(column: _DecColumn | None, io_field: dict) -> tuple:
    """The compiled decoder's spec of a field: (name, mysql_type, flags, rule, arg, Avro type
    as read: `_io_code`); an extension field's rule is its name (the decoder knows each)."""
    name, code = io_field["name"], _io_code(io_field["type"])
    if column is None:
        return name, None, 0, name, None, code
    if isinstance(column.convert, _Unscaled):
        return name, column.mysql_type, column.flags, "decimal", column.convert.scale, code
    return name, column.mysql_type, column.flags, _COMPILED_RULES.get(column.convert, "call"), column.convert, code


class _WriterSchema:
    """A registry schema analysed for decoding: columns, extension fields, table name."""

    def __init__(self, schema_id: int, text: str):
        self.schema_id = schema_id
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise _SchemaProblem(f"is not JSON: {e}") from None
        if not isinstance(obj, dict) or obj.get("type") != "record" or not isinstance(obj.get("fields"), list):
            raise _SchemaProblem("is not an Avro record schema")
        name, namespace = obj.get("name"), obj.get("namespace")
        if not isinstance(name, str) or not isinstance(namespace, str) or "." not in namespace:
            raise _SchemaProblem(
                f"record {name!r} namespace {namespace!r} is not TiCDC's <changefeed namespace>.<schema>")
        self.text = text
        self.table = name
        self.namespace, _, self.database = namespace.partition(".")
        self.columns: list[_DecColumn] = []
        self.extension: list[str] = []
        # the fields as the codec reads them and the compiled decoder's specs: each shared with
        # every schema holding the same field (`_field`), so no new dict per schema id
        self.io_fields: list[dict] = []
        self.compiled_fields: list[tuple] = []
        for field in obj["fields"]:
            column, io_field, compiled = _field(field)
            self.io_fields.append(io_field)
            self.compiled_fields.append(compiled)
            if column is None:
                self.extension.append(io_field["name"])
            else:
                self.columns.append(column)

    # Made when first asked, not per schema id: with one id per image shape (ids are many),
    # fastavro's parse of each and the parsed JSON kept for each were most of a decode task's
    # time; the compiled decoder, which takes most records, needs neither.
    @functools.cached_property
    def obj(self) -> dict:
        """The registry's schema, parsed (the encoder compares it with its own)."""
        return orjson.loads(self.text)

    @functools.cached_property
    def parsed(self) -> dict:
        """fastavro's parse of the schema as the codec reads it, made when the codec first
        reads or writes a record of it. It cannot fail: every field the analysis accepts is a
        primitive type, plain, in a dict or in ["null", T], which fastavro always parses."""
        return fastavro.parse_schema(orjson.loads(self.io_text))

    @functools.cached_property
    def io_text(self) -> str:
        """The schema as the codec reads it (io_schema's copy), as text: kept as a string, not
        dicts, which the garbage collector walks."""
        return orjson.dumps({"type": "record", "name": self.table, "namespace": f"{self.namespace}.{self.database}",
                             "fields": self.io_fields}).decode()


_ANALYSED: dict[tuple[int, str], _WriterSchema | str] = {}  # (id, registry text) -> its analysis or problem
_ANALYSED_MAX = 20_000


def _writer_schema(schema_id: int, text: str) -> _WriterSchema | str:
    """The analysis of registry schema `schema_id` whose text is `text` (or its problem), kept
    for the life of the Python worker: Spark reuses a worker for the next decode task, whose
    codec is a fresh copy, and tasks name mostly the same ids (TiCDC registers one per image
    shape). Keyed by the text as read, not the id alone: a registry rewritten under the same
    location (a new `file://` folder) gives new text, hence a new analysis. The registry is
    still read once per id per codec; only the analysis is shared."""
    key = (schema_id, text)
    found = _ANALYSED.get(key)
    if found is None:
        try:
            found = _WriterSchema(schema_id, text)
        except _SchemaProblem as e:
            found = str(e)
        if len(_ANALYSED) >= _ANALYSED_MAX:
            _ANALYSED.clear()
        _ANALYSED[key] = found
    return found


def _normal(schema: dict) -> dict:
    """A schema without what does not change TiCDC's meaning: field defaults and the order of
    the null branch (TiCDC writes [T, "null"] when a column has a non-null default)."""
    fields = []
    for f in schema.get("fields", []):
        t = f.get("type")
        if isinstance(t, list) and "null" in t:
            t = ["null", *[x for x in t if x != "null"]]
        fields.append({"name": f.get("name"), "type": t})
    return {"type": schema.get("type"), "name": schema.get("name"), "namespace": schema.get("namespace"),
            "fields": fields}


# ----------------------------------------------------------------------------- encode plans

@dataclass
class _EncPlan:
    """How one image shape is written: its generated schema and per-column conversions."""

    text: str
    obj: dict
    fields: list[tuple[str, str, Callable[[bytes], Any]]]  # (column name, Avro field, to datum)
    rules: list[tuple[int, Any]]  # per column: the compiled encoder's (value rule, arg)
    valid: bool | None = None  # whether fastavro parses the schema (asked once, compiled path)


# _ColumnType.kind -> the compiled encoder's value rule (avro_encode.rs K_*); "float" by Avro type
_COMPILED_KINDS = {"raw": 0, "int32": 1, "int64": 2, "u64long": 3, "bit": 6, "decimal": 7, "enum": 8, "set": 8}


def _compiled_rule(ct: _ColumnType, to_datum: Callable) -> tuple[int, Any]:
    if ct.kind == "float":
        return (4 if ct.avro == "float" else 5), None
    if ct.kind == "decimal":
        return 7, ct.decimal[1]
    return _COMPILED_KINDS[ct.kind], to_datum if ct.kind in ("enum", "set") else None


class _Compiled:
    """A record shape the compiled encoder wrote (its token): the subject, plan and schema-id hint
    `frame` turns into the Confluent header, once, where the stream first has it."""

    __slots__ = ("subject", "plan", "hint", "header")

    def __init__(self, subject: str, plan: _EncPlan, hint: str | None):
        self.subject, self.plan, self.hint, self.header = subject, plan, hint, None


# ----------------------------------------------------------------------------- the codec

@register
class AvroCodec(Codec):
    name = "avro"
    compiled_class = "AvroDecoder"
    compiled_takes_keys = True  # a DELETE is its key record alone
    description = "TiCDC Avro (flat-avro) with the Confluent wire format and a schema registry"
    options = (
        Option("schema-registry", "", "Confluent registry URL (http[s]://[user:pass@]host:port) or exported registry directory file://DIR (required)", str),
        Option("enable-tidb-extension", False, "value adds _tidb_op, _tidb_commit_ts, _tidb_commit_physical_time", bool),
        Option("avro-decimal-handling-mode", "precise", "DECIMAL as Avro decimal bytes (precise) or string", str, ("precise", "string")),
        Option("avro-bigint-unsigned-handling-mode", "long", "BIGINT UNSIGNED as Avro long (wraps above 2^63-1) or string", str, ("long", "string")),
        Option("avro-enable-watermark", False, "with enable-tidb-extension: send DDL (0x01+JSON) and watermark (0x02+ts) values (TiCDC test mode)", bool),
        TZ_OPTION,
    )
    ddl_placement = "all"  # TiCDC broadcasts DDL to every partition for every protocol but canal/canal-json
    watermark_placement = "all"
    compiled_encoder_class = "AvroEncoder"
    registers_schemas = True  # a fresh registry numbers schemas as they come: ids in every header

    def compiled_encoder(self, extension):
        """The extension's encoder (avro_encode.rs): it writes each row's key and value Avro
        bodies, asking `_compiled_record` once per record shape; `frame` adds the headers."""
        return extension.AvroEncoder(self._compiled_record, int(ColumnFlag.UNSIGNED | ColumnFlag.BINARY),
                                     int(ColumnFlag.NULLABLE), _HANDLE_KEY, self.config["enable-tidb-extension"])

    def _compiled_record(self, topic: str, side: str, namespace: str | None, database: str, table: str,
                         shape: tuple, extension: tuple, hint: str | None) -> tuple | None:
        """(token, per column (value rule, arg)) of one record shape for the compiled encoder, or
        None where Python must encode (the codec refuses the shape, its schema is not valid
        Avro, a column's field is named as an extension field). Registers nothing: the token's
        schema id is asked in `frame`, where the Python path would ask it."""
        try:
            plan = self._plan_of(DEFAULT_NAMESPACE if namespace is None else namespace, database, table, shape,
                                 extension)
        except EncodeError:
            return None
        if plan.valid is None:
            try:
                io_schema(plan.obj)
                plan.valid = not any(field in extension for _, field, _ in plan.fields)
            except Exception:  # noqa: BLE001 - fastavro's SchemaParseException: `_schema_id` says so
                plan.valid = False
        if not plan.valid:
            return None
        return _Compiled(sanitize_topic(topic) + "-" + side, plan, hint), plan.rules

    def compiled_entry(self, encoded: tuple) -> tuple:
        return encoded  # (key token, key body, value token, value body): `frame` adds the headers

    def frame(self, entries: Iterable) -> Iterator[EncodedMessage]:
        """The messages of the entries: Python's (lists of messages) as they are, the compiled
        encoder's with each record's Confluent header, its schema id asked (and registered)
        here, in stream order, as the Python path asks it."""
        for entry in entries:
            if type(entry) is not tuple:
                yield from entry
                continue
            key_token, key, value_token, value = entry
            if key_token is not None:
                key = (key_token.header or self._header(key_token)) + key
            if value_token is not None:
                value = (value_token.header or self._header(value_token)) + value
            yield EncodedMessage(key, value)

    def _header(self, token: _Compiled) -> bytes:
        schema_id, _ = self._schema_id(token.subject, token.plan, token.hint)
        header = bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big", signed=True)
        if self._noting is None:  # noting: every message asks again (`noted` is per message)
            token.header = header
        return header

    def noting_registrations(self) -> None:
        self._noting = []

    def noted(self) -> list[tuple[str, str]]:
        noted, self._noting = self._noting, []
        return noted

    def register_schema(self, subject: str, schema: str) -> int:
        return self.registry.register(subject, schema)

    @contextlib.contextmanager
    def registered(self, ids):
        """Why: the writer tasks would each ask the registry again for ids the driver has just
        registered, and a directory registry's first lookup reads every id it holds (0.75 CPU s
        per task at 10,000 ids)."""
        spec = self.config["schema-registry"]
        _REGISTERED[spec] = dict(ids)
        try:
            yield
        finally:
            _REGISTERED.pop(spec, None)

    def compiled_decoder(self, extension):
        return extension.AvroDecoder(self._compiled_plan)

    def _compiled_plan(self, schema_id: int):
        """The compiled decoder's plan of a writer schema: this codec's own analysis of it
        (`_WriterSchema`, from the registry cache) as (namespace, database, table, per field
        `_compiled_field`'s spec); None when the codec rejects the id or the schema (its
        records then go to the codec, which names the problem). The extension builds the
        crate's schema from the specs' Avro types: no schema text is parsed again."""
        try:
            writer = self._writer(schema_id, "value")
        except Exception:  # noqa: BLE001 - unknown id, foreign schema, registry down: the codec says so
            return None
        return writer.namespace, writer.database, writer.table, writer.compiled_fields

    def validate(self) -> None:
        spec = self.config["schema-registry"]
        if not spec:
            raise ConfigError("protocol avro needs schema-registry=<Confluent registry URL> or schema-registry=file://DIR")
        open_registry(spec)  # checks the form; connects lazily
        self._reset()

    # pickling for Spark executors: the registry client and caches are rebuilt lazily
    def __getstate__(self) -> dict:
        return {"config": self.config}

    def __setstate__(self, state: dict) -> None:
        self.config = state["config"]
        self._reset()

    def _reset(self) -> None:
        self._registry: SchemaRegistry | None = None
        self._writers: dict[int, _WriterSchema | str] = {}
        self._plans: dict[tuple, _EncPlan] = {}
        self._ids: dict[tuple[str, str], tuple[int, Any]] = {}
        self._hints: dict[tuple[int, str], Any] = {}
        self._noting: list[tuple[str, str]] | None = None  # `noting_registrations`: asked, not registered

    @property
    def registry(self) -> SchemaRegistry:
        if self._registry is None:
            self._registry = open_registry(self.config["schema-registry"])
        return self._registry

    # ---------------------------------------------------------------- decode
    def decode(self, record: KafkaRecord) -> list[dict]:
        key, value = record.key or None, record.value
        if key is None:
            if not value:
                raise self.error("record has neither key nor value")
            first = value[0]
            if first == DDL_BYTE:
                return [self._decode_ddl(value)]
            if first == WATERMARK_BYTE:
                return [self._decode_watermark(value)]
        return [self._decode_row(key, value)]

    def _read(self, data: bytes, part: str) -> tuple[_WriterSchema, dict]:
        if len(data) < 5:
            raise self.error(f"{part} is {len(data)} bytes, shorter than the 5-byte Confluent header",
                             byte_offset=len(data), field=part)
        if data[0] != MAGIC_BYTE:
            hint = ""
            if data[0] == 0x03:
                hint = (" (0x03 starts both the AWS Glue registry framing, 0x03 0x00 + UUID, and newest "
                        "TiCDC's test-only DELETE-with-commit-ts value; this codec reads neither)")
            elif part == "value" and data[0] in (DDL_BYTE, WATERMARK_BYTE):
                hint = " (a DDL/watermark value, but the record has a key)"
            raise self.error(f"{part} starts with byte 0x{data[0]:02x}, not the Confluent magic byte 0x00{hint}",
                             byte_offset=0, field=part)
        schema_id = int.from_bytes(data[1:5], "big", signed=True)
        writer = self._writer(schema_id, part)
        fo = io.BytesIO(data)
        fo.seek(5)
        try:
            datum = fastavro.schemaless_reader(fo, writer.parsed, None)
        except Exception as e:  # fastavro raises EOFError, IndexError, ValueError, ... on bad bytes
            raise self.error(f"{part} body does not match its writer schema {schema_id}: {type(e).__name__}: {e}",
                             byte_offset=fo.tell(), field=part) from e
        if fo.tell() != len(data):
            raise self.error(f"{part} has {len(data) - fo.tell()} bytes after the Avro record of schema {schema_id}",
                             byte_offset=fo.tell(), field=part)
        return writer, datum

    def _writer(self, schema_id: int, part: str) -> _WriterSchema:
        writer = self._writers.get(schema_id)
        if writer is None:
            text = self.registry.schema(schema_id) if schema_id > 0 else None
            if text is None:
                raise self.error(f"{part} schema id {schema_id} is not in the schema registry {self.registry.location}",
                                 byte_offset=1, field=part)
            writer = self._writers[schema_id] = _writer_schema(schema_id, text)
        if isinstance(writer, str):
            raise self.error(f"{part} writer schema {schema_id} {writer}", byte_offset=1, field=part)
        return writer

    def _image(self, writer: _WriterSchema, datum: dict, part: str, keys: frozenset) -> list[dict]:
        image = []
        for col in writer.columns:
            raw = datum.get(col.name)
            value = label = None
            if raw is not None:
                try:
                    value, label = col.convert(raw)
                except (ValueError, TypeError, OverflowError) as e:
                    raise self.error(f"column {col.name!r}: {e}", field=f"{part}.{col.name}") from e
            image.append({"name": col.name, "mysql_type": col.mysql_type,
                          "flags": col.flags | _HANDLE_KEY if col.name in keys else col.flags,
                          "value": value, "label": label})
        return image

    def _decode_row(self, key: bytes | None, value: bytes | None) -> dict:
        extras: dict[str, str] = {}
        key_names: list[str] = []
        key_writer = key_datum = None
        if key is not None:
            key_writer, key_datum = self._read(key, "key")
            key_names = [c.name for c in key_writer.columns]
            extras["avro.key_schema_id"] = str(key_writer.schema_id)
        keys = frozenset(key_names)
        if not value:  # a tombstone: DELETE carries the key only
            if key_writer is None:
                raise self.error("record has neither key nor value")
            self._namespace_extra(key_writer, extras)
            return new_event(
                Kind.ROW, op=Op.DELETE, database=key_writer.database, table=key_writer.table,
                key_columns=key_names, before=self._image(key_writer, key_datum, "key", keys),
                extras=extras or None,
            )
        writer, datum = self._read(value, "value")
        extras["avro.value_schema_id"] = str(writer.schema_id)
        if key_writer is not None and (key_writer.database, key_writer.table, key_writer.namespace) != (
                writer.database, writer.table, writer.namespace):
            raise self.error(
                f"key schema {key_writer.schema_id} names {key_writer.namespace}.{key_writer.database}.{key_writer.table} "
                f"but value schema {writer.schema_id} names {writer.namespace}.{writer.database}.{writer.table}",
                field="key")
        self._namespace_extra(writer, extras)
        op, commit_ts, physical = Op.INSERT, None, None
        if OP_FIELD in writer.extension:
            op = _OPS.get(bytes(datum[OP_FIELD]))
            if op is None:
                raise self.error(f"_tidb_op is {bytes(datum[OP_FIELD])[:20]!r}, not c or u", field=f"value.{OP_FIELD}")
        if COMMIT_TS_FIELD in writer.extension:
            commit_ts = datum[COMMIT_TS_FIELD]
            if commit_ts < 0:
                raise self.error(f"_tidb_commit_ts is {commit_ts}, outside 0..2^63-1", field=f"value.{COMMIT_TS_FIELD}")
            commit_ts = commit_ts or None  # TiCDC's default 0: no commit ts
        if PHYSICAL_TIME_FIELD in writer.extension:
            physical = datum[PHYSICAL_TIME_FIELD] or None
        for name in CHECKSUM_FIELDS:
            if name in writer.extension:
                raw = datum[name]
                extras["avro." + name[len("_tidb_"):]] = (
                    ("true" if raw else "false") if isinstance(raw, bool) else
                    bytes(raw).decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw))
        return new_event(
            Kind.ROW, op=op, commit_ts=commit_ts, execute_ts_ms=physical, database=writer.database,
            table=writer.table, key_columns=key_names, after=self._image(writer, datum, "value", keys),
            extras=extras or None,
        )

    @staticmethod
    def _namespace_extra(writer: _WriterSchema, extras: dict) -> None:
        if writer.namespace != DEFAULT_NAMESPACE:
            extras["avro.namespace"] = writer.namespace

    def _decode_ddl(self, value: bytes) -> dict:
        try:
            doc = orjson.loads(value[1:])
        except orjson.JSONDecodeError as e:
            raise self.error(f"DDL value is not 0x01 + JSON: {e}", byte_offset=1 + getattr(e, "pos", 0), field="value") from e
        if not isinstance(doc, dict):
            raise self.error(f"DDL value holds a JSON {type(doc).__name__}, not an object", byte_offset=1, field="value")
        query = doc.get("query")
        if not isinstance(query, str) or not query:
            raise self.error("DDL value has no query", byte_offset=1, field="value.query")
        code = doc.get("type", 0)
        commit_ts = doc.get("commitTs", 0)
        for field, number in (("type", code), ("commitTs", commit_ts)):
            if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < 1 << 63:
                raise self.error(f"DDL {field} is {number!r}, not an integer in 0..2^63-1", byte_offset=1, field=f"value.{field}")
        schema, table = doc.get("schema", ""), doc.get("table", "")
        if not isinstance(schema, str) or not isinstance(table, str):
            raise self.error("DDL schema/table are not strings", byte_offset=1, field="value.schema")
        extras = None
        ddl_type = ACTION_NAMES.get(code)
        if ddl_type is None:
            ddl_type = classify(query)
            extras = {"avro.ddl_type_code": str(code)}
        return new_event(
            Kind.DDL, commit_ts=commit_ts or None, execute_ts_ms=physical_ms(commit_ts) or None,
            database=schema or None, table=table or None, ddl_query=query, ddl_type=ddl_type, extras=extras,
        )

    def _decode_watermark(self, value: bytes) -> dict:
        if len(value) != 9:
            raise self.error(f"watermark value is {len(value)} bytes, not 0x02 + 8-byte ts",
                             byte_offset=min(len(value), 9), field="value")
        ts = int.from_bytes(value[1:9], "big")
        if ts >= 1 << 63:
            raise self.error(f"watermark ts {ts} is outside 0..2^63-1", byte_offset=1, field="value")
        return new_event(Kind.WATERMARK, watermark_ts=ts, execute_ts_ms=physical_ms(ts) or None)

    # ---------------------------------------------------------------- encode
    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        subject = sanitize_topic(topic)
        special = self.config["enable-tidb-extension"] and self.config["avro-enable-watermark"]
        for event in events:
            kind = event["kind"]
            if kind == Kind.ROW:
                yield self._encode_row(event, subject)
            elif kind == Kind.DDL:
                if special:  # TiCDC sends DDL only in this test mode
                    yield EncodedMessage(None, bytes([DDL_BYTE]) + self._ddl_json(event).encode())
            elif kind == Kind.WATERMARK:
                if special:
                    ts = event["watermark_ts"]
                    if ts is None or not 0 <= ts <= _U64:
                        raise EncodeError(f"watermark ts {ts!r} is not a uint64")
                    yield EncodedMessage(None, bytes([WATERMARK_BYTE]) + ts.to_bytes(8, "big"))
            else:
                raise EncodeError(f"avro cannot encode event kind {kind!r}")

    @staticmethod
    def _ddl_json(event: dict) -> str:
        extras = _extras(event)
        code = extras.get("avro.ddl_type_code")
        if code is None or not str(code).isdigit():
            code = ACTION_CODES.get(event["ddl_type"] or classify(event["ddl_query"]), 0)
        return (
            f'{{"query":{quote(event["ddl_query"] or "")},"type":{int(code)},'
            f'"schema":{quote(event["database"] or "")},"table":{quote(event["table"] or "")},'
            f'"commitTs":{int(event["commit_ts"] or 0)}}}'
        )

    def _encode_row(self, event: dict, subject: str) -> EncodedMessage:
        op = event["op"]
        if op not in (Op.INSERT, Op.UPDATE, Op.DELETE):
            raise EncodeError(f"row event with op {op!r}")
        image = event["before"] if op == Op.DELETE else event["after"]
        if not image:
            raise EncodeError(f"{op} event without its {'before' if op == Op.DELETE else 'after'} image")
        if event["database"] is None or event["table"] is None:
            raise EncodeError("row event without database or table")
        names = event["key_columns"]
        if names is not None:
            wanted = set(names)
            key_cols = [c for c in image if c["name"] in wanted]
            missing = wanted - {c["name"] for c in key_cols}
            if missing:
                raise EncodeError(f"key columns {sorted(missing)} are not in the {op} image")
        else:
            key_cols = [c for c in image if c["flags"] & ColumnFlag.HANDLE_KEY]
        extras = _extras(event)
        key = None
        if key_cols:
            key = self._record(subject + "-key", event, key_cols, None, extras.get("avro.key_schema_id"))
        if op == Op.DELETE:
            if key is None:
                raise EncodeError("a DELETE is sent as its key alone: the table has no handle-key columns")
            return EncodedMessage(key, None)
        extension = None
        if self.config["enable-tidb-extension"]:
            commit_ts = event["commit_ts"] or 0
            physical = event["execute_ts_ms"]
            if physical is None:
                physical = physical_ms(commit_ts)
            extension = {OP_FIELD: _OP_CODES[op], COMMIT_TS_FIELD: commit_ts, PHYSICAL_TIME_FIELD: physical}
            if all("avro." + n[len("_tidb_"):] in extras for n in CHECKSUM_FIELDS):
                extension["_tidb_row_level_checksum"] = extras["avro.row_level_checksum"].encode()
                extension["_tidb_corrupted"] = extras["avro.corrupted"] == "true"
                extension["_tidb_checksum_version"] = int(extras["avro.checksum_version"])
        value = self._record(subject + "-value", event, image, extension, extras.get("avro.value_schema_id"))
        return EncodedMessage(key, value)

    def _plan(self, event: dict, columns: list[dict], extension: dict | None) -> _EncPlan:
        namespace = _extras(event).get("avro.namespace", DEFAULT_NAMESPACE)
        shape = tuple(
            (c["name"], c["mysql_type"], c["flags"] & (ColumnFlag.UNSIGNED | ColumnFlag.BINARY),
             bool(c["flags"] & ColumnFlag.NULLABLE or c["value"] is None))
            for c in columns
        )
        return self._plan_of(namespace, event["database"], event["table"], shape, tuple(extension or ()))

    def _plan_of(self, namespace: str, database: str, table: str, shape: tuple, extension: tuple) -> _EncPlan:
        signature = (namespace, database, table, shape, extension)
        plan = self._plans.get(signature)
        if plan is None:
            plan = self._build_plan(namespace, database, table, shape, extension)
            self._plans[signature] = plan
        return plan

    def _build_plan(self, namespace: str, database: str, table: str, shape: tuple, extension: tuple) -> _EncPlan:
        fields, schema_fields, seen, rules = [], [], set(), []
        for name, type_text, flags, nullable in shape:
            ct = column_type(type_text, flags, self.config["avro-decimal-handling-mode"],
                             self.config["avro-bigint-unsigned-handling-mode"])
            field = sanitize_name(name)
            if field in seen:
                raise EncodeError(f"columns sanitise to the same Avro field name {field!r}")
            seen.add(field)
            avro_type = _avro_type_json(ct)
            schema_fields.append({"default": None, "name": field, "type": ["null", avro_type]} if nullable
                                 else {"name": field, "type": avro_type})
            fields.append((name, field, _encoder_for(ct)))
            rules.append(_compiled_rule(ct, fields[-1][2]))
        for name in extension or ():
            default = {"string": "", "boolean": False}.get(_EXTENSION_TYPES[name], 0)
            schema_fields.append({"default": default, "name": name, "type": _EXTENSION_TYPES[name]})
        sanitized_ns = sanitize_name(namespace)
        sanitized_db = sanitize_name(database)
        obj = {
            "type": "record", "name": sanitize_name(table),
            "namespace": f"{sanitized_ns}.{sanitized_db}" if sanitized_db else sanitized_ns,
            "fields": schema_fields,
        }
        return _EncPlan(go_json(obj), obj, fields, rules)

    def _record(self, subject: str, event: dict, columns: list[dict], extension: dict | None, hint: str | None) -> bytes:
        plan = self._plan(event, columns, extension)
        schema_id, parsed = self._schema_id(subject, plan, hint)
        datum = {}
        for (name, field, to_datum), col in zip(plan.fields, columns):
            raw = col["value"]
            if raw is None:
                datum[field] = None
                continue
            try:
                datum[field] = to_datum(raw)
            except (ValueError, TypeError, OverflowError) as e:
                raise EncodeError(f"column {name!r} ({col['mysql_type']}): {e}") from e
        if extension:
            datum.update(extension)
        out = io.BytesIO()
        out.write(bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big", signed=True))
        try:
            fastavro.schemaless_writer(out, parsed, datum)
        except Exception as e:
            raise EncodeError(f"{subject}: fastavro could not write the record: {type(e).__name__}: {e}") from e
        return out.getvalue()

    def _schema_id(self, subject: str, plan: _EncPlan, hint: str | None) -> tuple[int, Any]:
        """The schema id to write with: the decoded message's own writer schema when this
        registry holds it and it says the same as the generated one (TiCDC also writes column
        defaults, which events do not carry), else the generated schema, registered (noted,
        with the placeholder id 0, when `noting_registrations`)."""
        if hint is not None and str(hint).isdigit():
            hint_id = int(hint)
            cached = self._hints.get((hint_id, plan.text))
            if cached is None:
                cached = False
                try:
                    writer = self._writer(hint_id, "hint")
                except Exception:  # unknown here or not TiCDC's: fall back to registering
                    writer = None
                if writer is not None and _normal(writer.obj) == _normal(plan.obj):
                    cached = writer.parsed
                self._hints[(hint_id, plan.text)] = cached
            if cached is not False:
                return hint_id, cached
        found = self._ids.get((subject, plan.text))
        if found is None:
            try:
                parsed = io_schema(plan.obj)
            except Exception as e:  # fastavro's SchemaParseException: e.g. an empty table name
                raise EncodeError(f"{subject}: the generated schema is not valid Avro: {e}") from e
            if self._noting is not None:
                schema_id = 0
            else:
                schema_id = _REGISTERED.get(self.config["schema-registry"], {}).get((subject, plan.text))
                if schema_id is None:
                    schema_id = self.registry.register(subject, plan.text)
            found = (schema_id, parsed)
            self._ids[(subject, plan.text)] = found
        if self._noting is not None:
            self._noting.append((subject, plan.text))
        return found


# registry spec -> {(subject, schema): id} registered by the driver for the write running in
# this process (`AvroCodec.registered`)
_REGISTERED: dict[str, dict[tuple[str, str], int]] = {}


def _extras(event: dict) -> dict:
    """An event's extras as a dict (Arrow hands maps over as lists of pairs)."""
    extras = event.get("extras")
    if not extras:
        return {}
    return extras if isinstance(extras, dict) else dict(extras)


# the value converters -> the rules the compiled decoder implements ("call": the converter
# itself, once per distinct value: ENUM/SET labels)
_COMPILED_RULES = {_text: "text", _integer: "integer", _u64: "u64", _float32: "float32",
                   _float64: "float64", _boolean: "boolean", _bit: "bit"}
