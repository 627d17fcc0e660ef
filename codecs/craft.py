"""craft: TiCDC's Craft binary protocol, decoded and encoded byte for byte as TiCDC's code
(pkg/sink/codec/craft) writes it.

A message is ``version | headers | bodies | term dictionary | size tables | trailer``:

* version: uvarint, 1.
* headers, columnar, one entry per event: commit ts (delta uvarint chunk, deltas mod 2^64),
  event type (uvarint chunk: 1 row, 2 DDL, 3 resolved), physical partition id (delta zigzag
  varint chunk, -1 = not a partitioned table), schema and table term ids (delta zigzag varint
  chunks, -1 = null).
* bodies: a row is its column groups, new values (type byte 1) first, then old values (2);
  a group is ``type byte | uvarint n | names (delta varint chunk of term ids) | types (uvarint
  chunk of MySQL type codes) | flags (uvarint chunk) | values (nullable bytes chunk: n zigzag
  lengths, -1 = NULL, then the bytes)``. A DDL is ``uvarint action | uvarint length + query``.
  A resolved event has no body.
* term dictionary: schema, table and column names in first-seen order (all schemas of the
  headers, then all tables, then column names group by group): ``uvarint count | string chunk``
  (all lengths, then all bytes). Nothing at all when there are no terms.
* size tables: [header bytes, dictionary bytes], [body sizes], then one [column group sizes]
  per row event; each ``uvarint count | delta zigzag varint chunk``.
* trailer: the byte length of the size tables as a uvarint with its bytes reversed, read
  backwards from the last byte.

The seed document gets two things wrong (TiCDC's code is the reference): delta varint deltas
and nullable-bytes lengths are zigzag varints, not uvarints.

Values: DATE/DATETIME/TIMESTAMP/TIME/JSON/DECIMAL are their text; CHAR/VARCHAR/TEXT/BLOB
(binary or not) the raw bytes; ENUM/SET/BIT a uvarint; FLOAT and DOUBLE a little-endian
float64; YEAR a zigzag varint; integers a uvarint with the unsigned flag, else a zigzag varint;
NULL/GEOMETRY/VECTOR values are never written (always NULL).

Why this is written by hand: no kept library reads craft. Its varints are protobuf's, but the
protobuf runtime exposes no public varint reader, and a chunk's length is not known before it
is read, so it cannot be handed to a protobuf parser. The decoder keeps per-value Python small
instead: runs of one-byte varints become a list in one C call (``bytes.isascii``); the part of
a column group that only describes columns (count, names, types, flags) is parsed once per
distinct bytes and term dictionary and recognised afterwards with ``bytes.startswith``; a
layout seen often gets a generated straight-line reader; small integers and repeated floats
are rendered through bounded tables keyed by their bytes. docs/protocols/craft.md has the
measured speed and what a compiled extension would add.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator
from itertools import accumulate

import numpy as np

from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .canal_common import TZ_OPTION
from .ddl_types import ACTION_CODES, ACTION_NAMES, classify
from .errors import ConfigError, DecodeError, EncodeError
from .events import ColumnFlag, Kind, Op, new_event
from .mysql_types import BINARY_BASES, parse_type
from .tso import compose, physical_ms

PROTOCOL = "craft"
VERSION = 1

ROW, DDL, RESOLVED = 1, 2, 3  # header event types (TiCDC's model.MessageType)
GROUP_NEW, GROUP_OLD = 1, 2  # column group types

# extras keys: what the canonical event has no field for, kept for byte-exact re-encoding
EXTRA_PARTITION = "craft.partition_id"  # physical table id of a partitioned table
EXTRA_DDL_ACTION = "craft.ddl_action"  # a DDL action code TiDB's ActionType list lacks

_U64 = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_I32_MAX = (1 << 31) - 1
_MAX_LENGTH = _I32_MAX  # TiCDC rejects counts and lengths above MaxInt32


def _error(reason: str, pos: int | None, field: str | None = None) -> DecodeError:
    return DecodeError(PROTOCOL, reason, byte_offset=pos, field=field)


# ------------------------------------------------------------------------------ primitives

def _uvarint_at(data: bytes, p: int, end: int, field: str) -> tuple[int, int]:
    """One uvarint at p (Go's binary.Uvarint rules: at most 10 bytes, no overflow)."""
    start = p
    x = shift = 0
    while True:
        if p >= end:
            raise _error("varint runs past the end of its section", start, field)
        b = data[p]
        p += 1
        if b < 0x80:
            if shift == 63 and b > 1:
                raise _error("varint overflows 64 bits", start, field)
            return x | b << shift, p
        x |= (b & 0x7F) << shift
        shift += 7
        if shift > 63:
            raise _error("varint longer than 10 bytes", start, field)


def _uvarints(data: bytes, p: int, end: int, n: int, field: str) -> tuple[list[int], int]:
    """A chunk of n uvarints; all one-byte varints (the usual case) take one C call."""
    q = p + n
    if q <= end:
        seg = data[p:q]
        if seg.isascii():
            return list(seg), q
    out = []
    append = out.append
    for _ in range(n):
        if p < end and data[p] < 0x80:
            append(data[p])
            p += 1
        else:
            v, p = _uvarint_at(data, p, end, field)
            append(v)
    return out, p


def _unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def _delta_varints(data: bytes, p: int, end: int, n: int, field: str) -> tuple[list[int], int]:
    raw, p = _uvarints(data, p, end, n, field)
    return list(accumulate((u >> 1) ^ -(u & 1) for u in raw)), p


def _delta_uvarints(data: bytes, p: int, end: int, n: int, field: str) -> tuple[list[int], int]:
    raw, p = _uvarints(data, p, end, n, field)
    return [v & _U64 for v in accumulate(raw)], p


def _count_at(data: bytes, p: int, end: int, field: str) -> tuple[int, int]:
    start = p
    n, p = _uvarint_at(data, p, end, field)
    if n > _MAX_LENGTH:
        raise _error(f"count {n} exceeds 2^31-1", start, field)
    return n, p


_SINGLE = [bytes((i,)) for i in range(128)]


def uvarint(v: int) -> bytes:
    if v < 0x80:
        return _SINGLE[v]
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def varint(v: int) -> bytes:
    return uvarint(v << 1 if v >= 0 else ((-v) << 1) - 1)


def _wrap_i64(v: int) -> int:
    """Go's int64 wrap-around (deltas between int64 values)."""
    v &= _U64
    return v - (1 << 64) if v > _I64_MAX else v


def _delta_varint_chunk(values: list[int]) -> bytes:
    out = [varint(values[0])]
    last = values[0]
    for v in values[1:]:
        out.append(varint(_wrap_i64(v - last)))
        last = v
    return b"".join(out)


def _delta_uvarint_chunk(values: list[int]) -> bytes:
    out = [uvarint(values[0])]
    last = values[0]
    for v in values[1:]:
        out.append(uvarint((v - last) & _U64))
        last = v
    return b"".join(out)


# ------------------------------------------------------------------------------ types

# MySQL type code -> (text type name, binary-flagged type name)
_TYPE_NAMES: dict[int, tuple[str, str]] = {
    1: ("tinyint", "tinyint"), 2: ("smallint", "smallint"), 3: ("int", "int"),
    4: ("float", "float"), 5: ("double", "double"), 6: ("null", "null"),
    7: ("timestamp", "timestamp"), 8: ("bigint", "bigint"), 9: ("mediumint", "mediumint"),
    10: ("date", "date"), 11: ("time", "time"), 12: ("datetime", "datetime"),
    13: ("year", "year"), 14: ("date", "date"), 15: ("varchar", "varbinary"), 16: ("bit", "bit"),
    225: ("vector", "vector"), 245: ("json", "json"), 246: ("decimal", "decimal"),
    247: ("enum", "enum"), 248: ("set", "set"), 249: ("tinytext", "tinyblob"),
    250: ("mediumtext", "mediumblob"), 251: ("longtext", "longblob"), 252: ("text", "blob"),
    253: ("varchar", "varbinary"), 254: ("char", "binary"), 255: ("geometry", "geometry"),
}
# base name -> the code TiDB uses for it (14 NEWDATE and 253 VAR_STRING decode to date/varchar)
TYPE_CODES: dict[str, int] = {}
for _code, (_text, _binary) in sorted(_TYPE_NAMES.items(), reverse=True):
    TYPE_CODES[_text] = _code
    TYPE_CODES[_binary] = _code
TYPE_CODES.update({"date": 10, "varchar": 15, "varbinary": 15})

_INTEGER_CODES = frozenset({1, 2, 3, 8, 9})
_NUMERIC_CODES = _INTEGER_CODES | {4, 5, 246}  # the ones whose type text takes " unsigned"
_NEVER_WRITTEN = frozenset({6, 225, 255})  # TiCDC's EncodeTiDBType writes nil for these
_UNSIGNED = int(ColumnFlag.UNSIGNED)
_BINARY = int(ColumnFlag.BINARY)
_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)


def mysql_type_of(code: int, flags: int) -> str:
    """The canonical mysql_type of a craft type code: the base name, `varbinary`/`blob`/`binary`
    for binary-flagged strings, ` unsigned` from the flag for numeric types."""
    text, binary = _TYPE_NAMES[code]
    name = binary if flags & _BINARY else text
    if flags & _UNSIGNED and code in _NUMERIC_CODES:
        name += " unsigned"
    return name


def type_code_of(mysql_type: str | None, flags: int) -> tuple[int, int]:
    """(craft type code, flags) of a canonical column: flags gain UNSIGNED / BINARY when the
    type says so (craft tells text from blob and signed from unsigned only by the flags). An
    unknown or missing type is written as VARCHAR (VARBINARY when binary-flagged)."""
    parsed = parse_type(mysql_type)
    code = TYPE_CODES.get(parsed.base)
    if parsed.unsigned:
        flags |= _UNSIGNED
    if parsed.base in BINARY_BASES:
        flags |= _BINARY
    if code is None:
        code = 15
    return code, flags


# ------------------------------------------------------------------------------ values (decode)

class _TextTable(dict):
    """varint bytes -> canonical decimal text. Lookups through `__getitem__` are C calls; a
    miss runs Python. Only one- and two-byte varints are remembered (small numbers repeat:
    flags, enums, counters; long ones are mostly ids), which bounds the table by construction
    at 128 + 128 * 128 entries."""

    __slots__ = ("signed",)

    def __init__(self, signed: bool):
        super().__init__()
        self.signed = signed

    def __missing__(self, raw: bytes) -> bytes:
        if len(raw) == 3 and raw[0] & raw[1] & 0x80 and raw[2] < 0x80:  # the usual miss
            value = (raw[0] & 0x7F) | (raw[1] & 0x7F) << 7 | raw[2] << 14
        else:
            value = self._parse(raw)
        if self.signed:
            value = (value >> 1) ^ -(value & 1)
        text = str(value).encode()
        if len(raw) <= 2:
            self[raw] = text
        return text

    @staticmethod
    def _parse(raw: bytes) -> int:
        value = shift = 0
        for i, b in enumerate(raw):
            value |= (b & 0x7F) << shift
            if b < 0x80:
                if i + 1 != len(raw):
                    raise ValueError(f"{len(raw) - i - 1} bytes after the varint")
                if i > 9 or (i == 9 and b > 1):
                    raise ValueError("varint overflows 64 bits")
                break
            shift += 7
        else:
            raise ValueError("truncated varint" if raw else "empty value")
        return value


_ZIGZAG_TEXT = _TextTable(signed=True)
_UVARINT_TEXT = _TextTable(signed=False)


class _Memo(dict):
    """raw value bytes -> canonical text through `render`, remembered up to a bound."""

    __slots__ = ("render",)
    LIMIT = 1 << 14

    def __init__(self, render):
        super().__init__()
        self.render = render

    def __missing__(self, raw: bytes) -> bytes:
        text = self.render(raw)
        if len(self) < self.LIMIT:
            self[raw] = text
        return text


_UNPACK_DOUBLE = struct.Struct("<d").unpack
_PACK_DOUBLE = struct.Struct("<d").pack
_FLOAT32 = struct.Struct("<f")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _special_float(v: float) -> bytes | None:
    if v != v:
        return b"NaN"  # Go's strconv spelling; TiDB stores no NaN or infinity, only odd input has them
    if v in (float("inf"), float("-inf")):
        return b"+Inf" if v > 0 else b"-Inf"
    return None


def double_text(raw: bytes) -> bytes:
    """Shortest round-trip text of a float64, no exponent (Go's FormatFloat(v, 'f', -1, 64))."""
    (v,) = _UNPACK_DOUBLE(raw)
    r = repr(v)
    if "e" in r or "n" in r:
        return _special_float(v) or np.format_float_positional(v, unique=True, trim="-").encode()
    return (r[:-2] if r.endswith(".0") else r).encode()


def float_text(raw: bytes) -> bytes:
    """Shortest text that round-trips the value as a float32 (FormatFloat(v, 'f', -1, 32))."""
    (v,) = _UNPACK_DOUBLE(raw)
    special = _special_float(v)
    if special is not None:
        return special
    if abs(v) > _FLOAT32_MAX:  # rounds to float32 infinity (Go's float32 conversion does)
        with np.errstate(over="ignore"):
            f32 = np.float32(v)
        if np.isinf(f32):
            return b"+Inf" if v > 0 else b"-Inf"
    return np.format_float_positional(np.float32(v), unique=True, trim="-").encode()


_DOUBLE_TEXT = _Memo(double_text)
_FLOAT_TEXT = _Memo(float_text)


def _value_decoder(code: int, flags: int):
    """The callable turning a column's value bytes into canonical bytes; None keeps them."""
    if code in _INTEGER_CODES:
        return (_UVARINT_TEXT if flags & _UNSIGNED else _ZIGZAG_TEXT).__getitem__
    if code == 13:
        return _ZIGZAG_TEXT.__getitem__
    if code in (16, 247, 248):
        return _UVARINT_TEXT.__getitem__
    if code == 5:
        return _DOUBLE_TEXT.__getitem__
    if code == 4:
        return _FLOAT_TEXT.__getitem__
    return None


# ------------------------------------------------------------------------------ values (encode)

# how a (type code, flags) pair's values are written (`_value_kind`; craft_encode.rs reads the
# same numbers): the bytes as they are, a uvarint (0..2^64-1), a zigzag varint (int64), a
# float64, a float32 widened to float64, never (always NULL)
V_RAW, V_UVARINT, V_ZIGZAG, V_DOUBLE, V_FLOAT, V_NULL = range(6)


def _value_kind(code: int, flags: int) -> int:
    if code in _NEVER_WRITTEN:
        return V_NULL
    if code in _INTEGER_CODES:
        return V_UVARINT if flags & _UNSIGNED else V_ZIGZAG
    if code in (16, 247, 248):
        return V_UVARINT
    if code == 13:
        return V_ZIGZAG
    if code == 5:
        return V_DOUBLE
    if code == 4:
        return V_FLOAT
    return V_RAW


@functools.lru_cache(maxsize=4096)
def compiled_rule(mysql_type: str | None, flags: int) -> tuple[int, int, int]:
    """(craft type code, flags as written before the handle-key bit, value kind) of a column's
    mysql_type and flags: the Python encoder's rule, which the compiled one (craft_encode.rs)
    asks once per pair. The handle-key bit commutes with `type_code_of` (it only adds bits)."""
    code, flags = type_code_of(mysql_type, flags)
    return code, flags, _value_kind(code, flags)


def _encode_value(kind: int, value: bytes | None, name: str) -> bytes | None:
    if value is None or kind == V_NULL:
        return None
    if kind == V_RAW:
        return bytes(value)
    try:
        if kind == V_UVARINT:
            v = int(value)
            if not 0 <= v <= _U64:
                raise ValueError(f"{v} is outside 0..2^64-1")
            return uvarint(v)
        if kind == V_ZIGZAG:
            v = int(value)
            if not _I64_MIN <= v <= _I64_MAX:
                raise ValueError(f"{v} is outside the int64 range")
            return varint(v)
        if kind == V_DOUBLE:
            return _PACK_DOUBLE(float(value))
        (f32,) = _FLOAT32.unpack(_FLOAT32.pack(float(value)))
        return _PACK_DOUBLE(f32)
    except (ValueError, OverflowError, struct.error) as e:
        raise EncodeError(f"craft: column {name!r} value {bytes(value)[:40]!r}: {e}") from e


# ------------------------------------------------------------------------------ decoding

class _GroupSchema:
    """What the describing part of a column group (count, names, types, flags) resolves to."""

    __slots__ = ("prefix", "count", "columns", "keys", "read", "uses")

    def __init__(self, prefix: bytes, names: list[str], codes: list[int], flags: list[int]):
        self.prefix = prefix
        self.count = len(names)
        # (name, canonical mysql_type, flags, value decoder or None) per column
        self.columns = tuple(
            (name, mysql_type_of(c, f), f, _value_decoder(c, f)) for name, c, f in zip(names, codes, flags)
        )
        self.keys = [n for n, f in zip(names, flags) if f & _HANDLE_KEY]
        self.read = _READERS.get(self.columns) or functools.partial(_read_values, self.columns)
        self.uses = 0


def _read_values(columns: tuple, data: bytes, q: int, end: int, lengths: list[int]) -> list[dict]:
    """The values of a column group, for layouts seen too rarely to get their own reader."""
    out = []
    for zz, (name, mysql_type, flags, decode) in zip(lengths, columns):
        if zz & 1:
            if zz != 1:
                raise _Odd
            value = None
        else:
            e = q + (zz >> 1)
            value = data[q:e] if decode is None else decode(data[q:e])
            q = e
        out.append({"name": name, "mysql_type": mysql_type, "flags": flags, "value": value, "label": None})
    if q != end:
        raise _Odd
    return out


class _Odd(Exception):
    """Raised by a generated reader for anything it does not expect; the caller diagnoses."""


_READERS: dict[tuple, object] = {}
_READERS_LIMIT = 1024
_COMPILE_AFTER = 8  # groups of one layout read before it gets a generated reader


def _reader(columns: tuple):
    """A function reading the values of a column group with this layout, unrolled: one
    straight-line block per column, names / types / flags / decoders bound as globals of the
    generated code (never written into its text). No per-value checks: a negative length or a
    value its decoder rejects raises, a length past the group shows in the final position."""
    reader = _READERS.get(columns)
    if reader is not None:
        return reader
    n = len(columns)
    env: dict = {"_Odd": _Odd}
    lines = ["def read(data, q, end, lengths):"]
    lines.append(f"    {', '.join(f'z{i}' for i in range(n))}, = lengths")
    for i, (name, mysql_type, flags, decode) in enumerate(columns):
        env[f"N{i}"], env[f"T{i}"], env[f"F{i}"], env[f"D{i}"] = name, mysql_type, flags, decode
        value = f"D{i}(data[q:e])" if decode is not None else "data[q:e]"
        lines += [
            f"    if z{i} & 1:",
            f"        if z{i} != 1: raise _Odd",
            f"        v{i} = None",
            "    else:",
            f"        e = q + (z{i} >> 1)",
            f"        v{i} = {value}",
            "        q = e",
        ]
    lines.append("    if q != end: raise _Odd")
    items = ", ".join(
        f'{{"name": N{i}, "mysql_type": T{i}, "flags": F{i}, "value": v{i}, "label": None}}' for i in range(n)
    )
    lines.append(f"    return [{items}]")
    exec(compile("\n".join(lines), f"<craft reader {n} columns>", "exec"), env)
    reader = env["read"]
    if len(_READERS) >= _READERS_LIMIT:
        _READERS.clear()
    _READERS[columns] = reader
    return reader


class _Dictionary:
    """A decoded term dictionary and the column-group schemas seen with it."""

    __slots__ = ("terms", "schemas")

    def __init__(self, terms: list[str]):
        self.terms = terms
        self.schemas: list[_GroupSchema] = []


_ROW_TEMPLATE = new_event(Kind.ROW)
_CACHE_LIMIT = 256  # distinct term dictionaries kept between messages
_SCHEMAS_PER_DICTIONARY = 64


@register
class CraftCodec(Codec):
    name = PROTOCOL
    compiled_class = "CraftDecoder"
    description = "TiCDC Craft: columnar binary batches of row, DDL and resolved events"
    options = (
        Option("max-batch-size", 16, "at most this many row events per message", int),
        Option(
            "max-message-bytes", 10 * 1024 * 1024,
            "a message is closed once TiCDC's size estimate of its rows exceeds this", int,
        ),
        TZ_OPTION,
    )
    # TiCDC broadcasts DDL (every protocol but canal/canal-json) and resolved events.
    ddl_placement = "all"
    watermark_placement = "all"

    def compiled_decoder(self, extension):
        return extension.CraftDecoder(compiled_type_rule)

    def __init__(self, options=None, **kwargs):
        super().__init__(options, **kwargs)
        self._dictionaries: dict[bytes, _Dictionary] = {}

    def validate(self) -> None:
        for key in ("max-batch-size", "max-message-bytes"):
            if self.config[key] <= 0:
                raise ConfigError(f"option {key}={self.config[key]}: must be positive")

    # ---------------------------------------------------------------- decode
    def decode(self, record: KafkaRecord) -> list[dict]:
        data = record.value
        if data is None:
            raise self.error("record has no value (a tombstone); craft always has one")
        if not isinstance(data, bytes):
            data = bytes(data)
        n = len(data)
        if n == 0:
            raise self.error("empty value", byte_offset=0)
        version, p = _uvarint_at(data, 0, n, "version")
        if version != VERSION:
            raise _error(f"unsupported craft version {version} (only {VERSION} exists)", 0, "version")

        tables, tables_start = self._size_tables(data, p, n)
        if len(tables) < 2:
            raise _error(f"{len(tables)} size tables; at least 2 (meta, bodies) are needed", tables_start, "size tables")
        meta, body_sizes = tables[0], tables[1]
        if len(meta) != 2 or meta[0] < 0 or meta[1] < 0:
            raise _error(f"meta size table {meta} is not [header size, dictionary size]", tables_start, "size tables")
        count = len(body_sizes)
        if count == 0:
            raise _error("message has no events", tables_start, "size tables")
        if min(body_sizes) < 0:
            raise _error(f"negative body size in {body_sizes}", tables_start, "size tables")
        header_end = p + meta[0]
        dict_start = header_end + sum(body_sizes)
        if dict_start + meta[1] != tables_start:
            raise _error(
                f"sections do not add up: version {p} + headers {meta[0]} + bodies {sum(body_sizes)}"
                f" + dictionary {meta[1]} bytes != {tables_start} bytes before the size tables",
                tables_start, "size tables",
            )
        dictionary = self._dictionary(data, dict_start, tables_start)
        terms = dictionary.terms

        # headers
        ts, q = _delta_uvarints(data, p, header_end, count, "header.commit_ts")
        types_at = q
        types, q = _uvarints(data, q, header_end, count, "header.type")
        partitions, q = _delta_varints(data, q, header_end, count, "header.partition")
        schema_at = q
        schema_ids, q = _delta_varints(data, q, header_end, count, "header.schema")
        table_at = q
        table_ids, q = _delta_varints(data, q, header_end, count, "header.table")
        if q != header_end:
            raise _error(f"headers end at byte {q}, their size says {header_end}", q, "header")
        schemas = self._names(schema_ids, terms, schema_at, "header.schema")
        tables_names = self._names(table_ids, terms, table_at, "header.table")
        if any(t > _I64_MAX for t in ts):
            raise _error("commit ts above 2^63-1", p, "header.commit_ts")
        has_rows = ROW in types
        if len(tables) != (2 + count if has_rows else 2):
            raise _error(
                f"{len(tables)} size tables for {count} events"
                + (" with rows (needs one column-group table per event)" if has_rows else ""),
                tables_start, "size tables",
            )

        events = []
        body = header_end
        for i in range(count):
            end = body + body_sizes[i]
            kind = types[i]
            commit_ts = ts[i]
            if kind == ROW:
                event = self._row(data, body, end, tables[2 + i], dictionary, i)
                event["commit_ts"] = commit_ts
            elif kind == DDL:
                event = self._ddl(data, body, end, i)
                event["commit_ts"] = commit_ts
            elif kind == RESOLVED:
                if end != body:
                    raise _error(f"resolved event with a {end - body}-byte body", body, f"event[{i}]")
                event = new_event(Kind.WATERMARK, watermark_ts=commit_ts)
            else:
                raise _error(f"unknown event type {kind} (1 row, 2 DDL, 3 resolved)", types_at, f"header.type[{i}]")
            event["execute_ts_ms"] = physical_ms(commit_ts)
            if kind != RESOLVED:
                event["database"] = schemas[i]
                event["table"] = tables_names[i]
            partition = _wrap_i64(partitions[i])
            if partition != -1:
                extras = event["extras"] or {}
                extras[EXTRA_PARTITION] = str(partition)
                event["extras"] = extras
            events.append(event)
            body = end
        return events

    def _size_tables(self, data: bytes, p: int, n: int) -> tuple[list[list[int]], int]:
        # trailer: a uvarint whose bytes are reversed, read from the last byte backwards
        tail = data[max(p, n - 10):][::-1]
        try:
            size, used = _uvarint_at(tail, 0, len(tail), "trailer")
        except DecodeError as e:
            raise _error(f"bad trailer: {e.reason}", n - 1, "trailer") from None
        trailer = n - used
        if size > trailer - p:
            raise _error(f"size tables of {size} bytes do not fit before the trailer", trailer, "trailer")
        start = trailer - size
        tables = []
        q = start
        while q < trailer:
            count, q = _count_at(data, q, trailer, "size tables")
            table, q = _delta_varints(data, q, trailer, count, "size tables")
            tables.append(table)
        return tables, start

    def _dictionary(self, data: bytes, start: int, end: int) -> _Dictionary:
        key = data[start:end]
        dictionary = self._dictionaries.get(key)
        if dictionary is not None:
            return dictionary
        terms: list[str] = []
        if end > start:
            count, p = _count_at(data, start, end, "dictionary")
            lengths, p = _uvarints(data, p, end, count, "dictionary")
            for i, length in enumerate(lengths):
                q = p + length
                if q > end:
                    raise _error(f"term {i} of {length} bytes runs past the dictionary", p, "dictionary")
                try:
                    terms.append(data[p:q].decode())
                except UnicodeDecodeError as e:
                    raise _error(f"term {i} is not UTF-8 ({e.reason})", p + e.start, "dictionary") from None
                p = q
            if p != end:
                raise _error(f"dictionary ends at byte {p}, its size says {end}", p, "dictionary")
        dictionary = _Dictionary(terms)
        if len(self._dictionaries) >= _CACHE_LIMIT:
            self._dictionaries.clear()
        self._dictionaries[key] = dictionary
        return dictionary

    @staticmethod
    def _names(ids: list[int], terms: list[str], at: int, field: str) -> list[str | None]:
        out = []
        for i in ids:
            if i == -1:
                out.append(None)
            elif 0 <= i < len(terms):
                out.append(terms[i])
            else:
                raise _error(f"term id {i} not in the {len(terms)}-term dictionary", at, field)
        return out

    def _ddl(self, data: bytes, p: int, end: int, index: int) -> dict:
        field = f"event[{index}].ddl"
        action, at = _uvarint_at(data, p, end, field)
        length, q = _count_at(data, at, end, field)
        if q + length != end:
            raise _error(f"DDL query of {length} bytes does not fill the {end - q} bytes left in its body", at, field)
        try:
            query = data[q:end].decode()
        except UnicodeDecodeError as e:
            raise _error(f"DDL query is not UTF-8 ({e.reason})", q + e.start, field) from None
        name = ACTION_NAMES.get(action)
        extras = None
        if name is None:
            name = classify(query)
            extras = {EXTRA_DDL_ACTION: str(action)}
        return new_event(Kind.DDL, ddl_query=query, ddl_type=name, extras=extras)

    def _row(self, data: bytes, p: int, end: int, group_sizes: list[int], dictionary: _Dictionary, index: int) -> dict:
        if not group_sizes:
            raise _error("row event without column groups", p, f"event[{index}]")
        if sum(group_sizes) != end - p or min(group_sizes) < 1:
            raise _error(f"column group sizes {group_sizes} do not fill the {end - p}-byte body", p, f"event[{index}]")
        event = _ROW_TEMPLATE.copy()
        for g, size in enumerate(group_sizes):
            group_end = p + size
            kind = data[p]
            if kind == GROUP_NEW:
                side = "after"
            elif kind == GROUP_OLD:
                side = "before"
            else:
                raise _error(f"column group type {kind} (1 new, 2 old)", p, f"event[{index}].group[{g}]")
            if event[side] is not None:
                raise _error(f"two {side} column groups", p, f"event[{index}].group[{g}]")
            schema, columns = self._group(data, p + 1, group_end, dictionary, f"event[{index}].{side}")
            event[side] = columns
            if side == "before" or event["key_columns"] is None:
                event["key_columns"] = schema.keys  # TiCDC takes the table info from the old group
            p = group_end
        before, after = event["before"], event["after"]
        event["op"] = Op.UPDATE if before is not None and after is not None else (
            Op.INSERT if after is not None else Op.DELETE)
        return event

    def _group(self, data: bytes, p: int, end: int, dictionary: _Dictionary, field: str):
        for schema in dictionary.schemas:
            if data.startswith(schema.prefix, p) and p + len(schema.prefix) <= end:
                q = p + len(schema.prefix)
                break
        else:
            schema, q = self._group_schema(data, p, end, dictionary, field)
        lengths, q = _uvarints(data, q, end, schema.count, field)
        schema.uses += 1
        if schema.uses == _COMPILE_AFTER:
            schema.read = _reader(schema.columns)
        try:
            return schema, schema.read(data, q, end, lengths)
        except Exception:
            # anything odd (a negative length, a value past the group, a value its type
            # rejects): walk the group again with every check to say what and where
            self._diagnose(data, q, end, lengths, schema, field)

    @staticmethod
    def _diagnose(data: bytes, q: int, end: int, lengths: list[int], schema: "_GroupSchema", field: str):
        """Walk a column group's values again with every check, and raise the first problem."""
        for zz, (name, mysql_type, _, decode) in zip(lengths, schema.columns):
            if zz & 1:
                if zz != 1:
                    raise _error(f"negative value length {_unzigzag(zz)}", q, f"{field}.{name}")
                continue
            nq = q + (zz >> 1)
            if nq > end:
                raise _error(f"value of {zz >> 1} bytes runs past its column group", q, f"{field}.{name}")
            if decode is not None:
                try:
                    decode(data[q:nq])
                except Exception as e:  # the type's decoder rejects it (bad varint, not 8 bytes, ...)
                    raise _error(f"bad {mysql_type} value: {e}", q, f"{field}.{name}") from e
            q = nq
        raise _error(f"column group ends at byte {q}, its size says {end}", q, field)

    def _group_schema(self, data: bytes, p: int, end: int, dictionary: _Dictionary, field: str):
        start = p
        n, p = _count_at(data, p, end, field)
        if n == 0:
            raise _error("column group with no columns (TiCDC never writes one)", start, field)
        names_at = p
        ids, p = _delta_varints(data, p, end, n, field + ".names")
        terms = dictionary.terms
        for i in ids:
            if not 0 <= i < len(terms):
                raise _error(f"column name term id {i} not in the {len(terms)}-term dictionary", names_at, field + ".names")
        types_at = p
        codes, p = _uvarints(data, p, end, n, field + ".types")
        for c in codes:
            if c not in _TYPE_NAMES:
                raise _error(f"unknown MySQL type code {c}", types_at, field + ".types")
        flags_at = p
        flags, p = _uvarints(data, p, end, n, field + ".flags")
        if max(flags) > _I32_MAX:
            raise _error(f"column flags {max(flags)} exceed 32 bits", flags_at, field + ".flags")
        schema = _GroupSchema(data[start:p], [terms[i] for i in ids], codes, flags)
        if len(dictionary.schemas) < _SCHEMAS_PER_DICTIONARY:
            dictionary.schemas.append(schema)
        return schema, p

    # ---------------------------------------------------------------- encode
    compiled_encoder_class = "CraftEncoder"

    def compiled_encoder(self, extension):
        """Row events' entries (craft_encode.rs); `frame` batches them. No option changes an
        event's share, so every configuration has one."""
        return extension.CraftEncoder(compiled_rule, _HANDLE_KEY)

    def compiled_entry(self, encoded: tuple) -> tuple:
        return encoded  # the extension writes the entry `_row_entry` makes

    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        return self.frame(self.entry(event, topic=topic, partition=partition) for event in events)

    def entry(self, event: dict, *, topic: str = "", partition: int = 0) -> tuple:
        """A row's header fields and column groups (`_row_entry`), a DDL or resolved event's
        whole message as (event type, bytes)."""
        kind = event["kind"]
        if kind == Kind.ROW:
            return _row_entry(event)
        if kind == Kind.DDL:
            return DDL, _ddl_message(event)
        if kind == Kind.WATERMARK:
            return RESOLVED, _resolved_message(event)
        raise EncodeError(f"craft cannot encode event kind {kind!r}")

    def frame(self, entries: Iterable[tuple]) -> Iterator[EncodedMessage]:
        """Rows are batched as TiCDC's BatchEncoder does: a message is closed right after the
        row that makes TiCDC's size estimate exceed max-message-bytes or the row count reach
        max-batch-size. DDL and resolved events are alone in their message; they close the
        pending batch first so the stream order is kept. The term dictionary, hence the column
        names' term ids, is the message's: made here, for compiled and Python entries alike."""
        max_rows, max_bytes = self.config["max-batch-size"], self.config["max-message-bytes"]
        batch: list[tuple] = []
        estimate = 0
        for entry in entries:
            if entry[0] == ROW:
                batch.append(entry)
                estimate += entry[5]
                if estimate > max_bytes or len(batch) >= max_rows:
                    yield EncodedMessage(None, _rows_message(batch))
                    batch, estimate = [], 0
                continue
            if batch:
                yield EncodedMessage(None, _rows_message(batch))
                batch, estimate = [], 0
            yield EncodedMessage(None, entry[1])
        if batch:
            yield EncodedMessage(None, _rows_message(batch))


# ------------------------------------------------------------------------------ encoding

def _commit_ts(event: dict) -> int:
    """The event's TSO; an event from a protocol without one (Canal) gets its event time as
    the physical part."""
    ts = event["commit_ts"]
    if ts is None:
        if event["execute_ts_ms"] is None:
            raise EncodeError("craft: event has neither commit_ts nor execute_ts_ms")
        ts = compose(event["execute_ts_ms"])
    if not 0 <= ts <= _I64_MAX:  # the canonical int64 (craft itself would take a uint64)
        raise EncodeError(f"craft: commit ts {ts} outside 0..2^63-1")
    return ts


def _partition_id(event: dict) -> int:
    extras = event.get("extras")
    if extras:
        raw = dict(extras).get(EXTRA_PARTITION)
        if raw is not None:
            try:
                return _wrap_i64(int(raw))
            except ValueError:
                raise EncodeError(f"craft: extras {EXTRA_PARTITION}={raw!r} is not an integer") from None
    return -1


def _term(text: str | None) -> bytes | None:
    """A schema or table name as a term: None (term id -1) for a missing or empty name."""
    return text.encode() if text else None


def _row_entry(event: dict) -> tuple:
    """One row event's share of a message: ``(ROW, commit ts, partition id, schema, table,
    size estimate, groups)``. A group is ``(head, names, rest)``: head is the group type and
    column count; names is the column names as a string chunk (``uvarint count | lengths |
    bytes``), whose term ids only the message knows; rest is the type codes, flags, value
    lengths and values, as written."""
    ts = _commit_ts(event)
    partition = _partition_id(event)
    schema, table = _term(event["database"]), _term(event["table"])
    keys = set(event["key_columns"] or ())
    # 32 bytes of header integers plus the names, as TiCDC's appendHeader counts
    estimate = 32 + len(schema or b"") + len(table or b"")
    groups = []
    for group_type, image in ((GROUP_NEW, event["after"]), (GROUP_OLD, event["before"])):
        if not image:
            continue  # TiCDC writes no group for a missing or empty image
        names, codes, flags, lengths, values = [], [], [], [], []
        for col in image:
            name = col["name"]
            col_flags = int(col["flags"] or 0)
            if col_flags < 0 or col_flags > _I32_MAX:
                raise EncodeError(f"craft: column {name!r} flags {col_flags} outside 0..2^31-1")
            code, col_flags, kind = compiled_rule(col["mysql_type"], col_flags)
            if name in keys:
                col_flags |= _HANDLE_KEY
            value = _encode_value(kind, col["value"], name)
            raw = name.encode()
            names.append(raw)
            codes.append(uvarint(code))
            flags.append(uvarint(col_flags))
            if value is None:
                lengths.append(_SINGLE[1])  # zigzag -1: NULL
                estimate += len(raw) + 16
            else:
                lengths.append(varint(len(value)))
                values.append(value)
                estimate += len(raw) + len(value) + 16
        count = uvarint(len(names))
        groups.append((
            _SINGLE[group_type] + count,
            b"".join((count, *(uvarint(len(n)) for n in names), *names)),
            b"".join((*codes, *flags, *lengths, *values)),
        ))
    if not groups:
        raise EncodeError(f"craft: {event['op']} row event has no column values to write")
    return ROW, ts, partition, schema, table, estimate, tuple(groups)


class _Terms:
    """The message's term dictionary (UTF-8 names): ids in first-seen order."""

    __slots__ = ("ids", "terms")

    def __init__(self):
        self.ids: dict[bytes, int] = {}
        self.terms: list[bytes] = []

    def id(self, term: bytes | None) -> int:
        if term is None:
            return -1
        i = self.ids.get(term)
        if i is None:
            i = self.ids[term] = len(self.terms)
            self.terms.append(term)
        return i

    def encode(self) -> bytes:
        if not self.terms:
            return b""
        raw = self.terms
        return uvarint(len(raw)) + b"".join(uvarint(len(r)) for r in raw) + b"".join(raw)


def _headers(terms: _Terms, ts, types, partitions, schemas, tables) -> bytes:
    schema_ids = [terms.id(s) for s in schemas]  # all schemas first, then all tables
    table_ids = [terms.id(t) for t in tables]
    return b"".join((
        _delta_uvarint_chunk(ts),
        b"".join(uvarint(t) for t in types),
        _delta_varint_chunk(partitions),
        _delta_varint_chunk(schema_ids),
        _delta_varint_chunk(table_ids),
    ))


def _message(header: bytes, bodies: list[bytes], terms: _Terms, group_tables: list[list[int]]) -> bytes:
    dictionary = terms.encode()
    tables = [[len(header), len(dictionary)], [len(b) for b in bodies], *group_tables]
    size_tables = b"".join(uvarint(len(t)) + _delta_varint_chunk(t) for t in tables)
    return b"".join((uvarint(VERSION), header, *bodies, dictionary, size_tables, uvarint(len(size_tables))[::-1]))


def _names_of(chunk: bytes) -> list[bytes]:
    """The names of a group's string chunk (`_row_entry`)."""
    n, p = _uvarint_at(chunk, 0, len(chunk), "names")
    lengths, p = _uvarints(chunk, p, len(chunk), n, "names")
    out = []
    for length in lengths:
        out.append(chunk[p:p + length])
        p += length
    return out


def _rows_message(rows: list[tuple]) -> bytes:
    """The message of row entries: a group's names become term ids here, once per distinct
    names chunk (ids, once given, do not change within a message)."""
    terms = _Terms()
    header = _headers(terms, [r[1] for r in rows], [ROW] * len(rows), [r[2] for r in rows],
                      [r[3] for r in rows], [r[4] for r in rows])
    ids: dict[bytes, bytes] = {}
    bodies, group_tables = [], []
    for row in rows:
        parts, sizes = [], []
        for head, names, rest in row[6]:
            chunk = ids.get(names)
            if chunk is None:
                chunk = ids[names] = _delta_varint_chunk([terms.id(n) for n in _names_of(names)])
            parts += (head, chunk, rest)
            sizes.append(len(head) + len(chunk) + len(rest))
        group_tables.append(sizes)
        bodies.append(b"".join(parts))
    return _message(header, bodies, terms, group_tables)


def _ddl_message(event: dict) -> bytes:
    extras = dict(event.get("extras") or {})
    if EXTRA_DDL_ACTION in extras:
        raw = extras[EXTRA_DDL_ACTION]
        action = int(raw) if raw.isdigit() else -1
        if not 0 <= action <= _U64:
            raise EncodeError(f"craft: extras {EXTRA_DDL_ACTION}={raw!r} is not a DDL action code")
    else:
        action = ACTION_CODES.get(event["ddl_type"] or "")
        if action is None:
            action = ACTION_CODES.get(classify(event["ddl_query"]), 0)
    query = (event["ddl_query"] or "").encode()
    terms = _Terms()
    header = _headers(
        terms, [_commit_ts(event)], [DDL], [_partition_id(event)],
        [_term(event["database"])], [_term(event["table"])],
    )
    return _message(header, [uvarint(action) + uvarint(len(query)) + query], terms, [])


def _resolved_message(event: dict) -> bytes:
    ts = event["watermark_ts"]
    if ts is None or not 0 <= ts <= _I64_MAX:
        raise EncodeError(f"craft: watermark ts {ts!r} outside 0..2^63-1")
    terms = _Terms()
    header = _headers(terms, [ts], [RESOLVED], [_partition_id(event)], [None], [None])
    return _message(header, [b""], terms, [])


# the value renderers -> the value kinds the compiled decoder implements (0: the raw bytes)
_COMPILED_KINDS = {_UVARINT_TEXT.__getitem__: 1, _ZIGZAG_TEXT.__getitem__: 2,
                   _DOUBLE_TEXT.__getitem__: 3, _FLOAT_TEXT.__getitem__: 4}


def compiled_type_rule(code: int, flags: int) -> tuple[str, int]:
    """The canonical type text and value kind of a (type code, flags) pair for the compiled
    decoder; raises for a code this codec does not know (the decoder then leaves the message
    to the codec)."""
    render = _value_decoder(code, flags)
    return mysql_type_of(code, flags), 0 if render is None else _COMPILED_KINDS[render]
