"""open-protocol: TiCDC's Open Protocol, batched JSON events in binary length-prefixed frames.

One Kafka message holds several events. The Kafka *key* is an 8-byte big-endian version (1)
followed by N x (8-byte big-endian length, event key JSON); the Kafka *value* is N x (8-byte
big-endian length, event value JSON). The event key says what the event is: `{"ts", "scm",
"tbl", "rid", "ptn", "t", "ohk", "ccl"}` with `t` = 1 row, 2 DDL, 3 resolved. Row values are
`{"u": new}` (INSERT), `{"u": new, "p": old}` (UPDATE) or `{"d": old}` (DELETE), each column
`{"t": MySQL type code, "h": handle key, "f": TiCDC column flags, "v": value}`; DDL values are
`{"q": query, "t": TiDB action code}`; a resolved event has an empty value.

Decoding reads what TiCDC (pingcap/tiflow and the newer pingcap/ticdc) writes. Encoding writes
what tiflow's encoder writes, byte for byte: Go's encoding/json of the key struct (field order
ts, scm, tbl, rid, ptn, t; empty ones omitted) and of the value maps (column names sorted byte-wise,
as Go sorts map keys), Go 1.22+ string escaping, float32 / float64 in Go's shortest format,
binary-flagged CHAR/VARCHAR values through Go's `strconv.Quote`, BLOB/TEXT in base64; row events
batched up to `max-batch-size` events and `max-message-bytes` bytes as tiflow's batch encoder
does, DDL and resolved events alone in their message. docs/protocols/open-protocol.md lists the
options, the field mapping and what the protocol cannot carry.

Written by hand, because no kept library does it:
* the frame reader/writer (8-byte lengths; struct would add nothing over int.from_bytes);
* Go's `strconv.Quote` / `Unquote` for binary-flagged strings (Go-specific escapes `\\xNN`,
  `\\a`, `\\v`, `\\U0010ffff` and Go's idea of a printable rune);
* the JSON writer: orjson cannot escape `<`, `>`, `&` and U+2028/9 as Go does, nor write
  float32 values the way Go's encoding/json does. JSON is *parsed* with orjson, which keeps
  integers exact up to 2^64-1; numbers beyond that turn into floats, so integer columns accept
  only Python ints. Go writes a float column's negative zero as `-0`, which orjson would read
  as the integer 0: such values are rewritten to `-0.0` before parsing.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from collections.abc import Iterable, Iterator

import numpy as np
import orjson

from . import claim_check, compression
from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .canal_common import TZ_OPTION
from .ddl_types import ACTION_CODES, ACTION_NAMES, classify
from .errors import ConfigError, DecodeError, EncodeError
from .events import EVENT_FIELD_NAMES, ColumnFlag, Kind, Op
from .mysql_types import parse_type
from .tso import physical_ms

BATCH_VERSION = 1
_VERSION_HEADER = BATCH_VERSION.to_bytes(8, "big")
# sarama's worst-case per-record overhead that TiCDC adds to a message's length
# (5 * MaxVarintLen32 + MaxVarintLen64 + 1).
MAX_RECORD_OVERHEAD = 36
DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_BATCH_SIZE = 16

MESSAGE_ROW, MESSAGE_DDL, MESSAGE_RESOLVED = 1, 2, 3

_BINARY = int(ColumnFlag.BINARY)
_HANDLE_KEY = int(ColumnFlag.HANDLE_KEY)
_UNSIGNED = int(ColumnFlag.UNSIGNED)

# ---------------------------------------------------------------- MySQL type codes

# code -> (name for a text column, name with the binary flag)
TYPE_NAMES: dict[int, tuple[str, str]] = {
    0: ("decimal", "decimal"),
    1: ("tinyint", "tinyint"),
    2: ("smallint", "smallint"),
    3: ("int", "int"),
    4: ("float", "float"),
    5: ("double", "double"),
    6: ("null", "null"),
    7: ("timestamp", "timestamp"),
    8: ("bigint", "bigint"),
    9: ("mediumint", "mediumint"),
    10: ("date", "date"),
    11: ("time", "time"),
    12: ("datetime", "datetime"),
    13: ("year", "year"),
    14: ("date", "date"),
    15: ("varchar", "varbinary"),
    16: ("bit", "bit"),
    225: ("vector", "vector"),
    245: ("json", "json"),
    246: ("decimal", "decimal"),
    247: ("enum", "enum"),
    248: ("set", "set"),
    249: ("tinytext", "tinyblob"),
    250: ("mediumtext", "mediumblob"),
    251: ("longtext", "longblob"),
    252: ("text", "blob"),
    253: ("varchar", "varbinary"),
    254: ("char", "binary"),
    255: ("geometry", "geometry"),
}
# canonical base name -> code written on encode (253 and 14 and 0 are read, never written)
TYPE_CODES: dict[str, int] = {
    "tinyint": 1, "smallint": 2, "int": 3, "float": 4, "double": 5, "null": 6, "timestamp": 7,
    "bigint": 8, "mediumint": 9, "date": 10, "time": 11, "datetime": 12, "year": 13,
    "varchar": 15, "varbinary": 15, "bit": 16, "vector": 225, "json": 245, "decimal": 246,
    "enum": 247, "set": 248, "tinytext": 249, "tinyblob": 249, "mediumtext": 250,
    "mediumblob": 250, "longtext": 251, "longblob": 251, "text": 252, "blob": 252,
    "char": 254, "binary": 254, "geometry": 255,
}
_BINARY_NAMES = frozenset({"varbinary", "binary", "tinyblob", "mediumblob", "longblob", "blob"})
_UNSIGNED_CODES = frozenset({0, 1, 2, 3, 4, 5, 8, 9, 246})  # where MySQL writes " unsigned"

# value rule per code
_INT_CODES = frozenset({1, 2, 3, 8, 9, 13, 16, 247, 248})  # JSON integers
_FLOAT_BITS = {4: 32, 5: 64}  # JSON numbers, float32 / float64
_TEXT_CODES = frozenset({0, 7, 10, 11, 12, 14, 225, 245, 246})  # JSON strings as written
_CHAR_CODES = frozenset({15, 253, 254})  # strings; binary flag: Go-quoted
_BASE64_CODES = frozenset({249, 250, 251, 252, 255})  # Go []byte: base64
_NULL_CODE = 6

_INT_LIMITS = {  # code -> (signed min, signed max, unsigned max)
    1: (-(1 << 7), (1 << 7) - 1, (1 << 8) - 1),
    2: (-(1 << 15), (1 << 15) - 1, (1 << 16) - 1),
    9: (-(1 << 23), (1 << 23) - 1, (1 << 24) - 1),
    3: (-(1 << 31), (1 << 31) - 1, (1 << 32) - 1),
    8: (-(1 << 63), (1 << 63) - 1, (1 << 64) - 1),
}

_TYPE_TEXT: dict[tuple[int, int], str] = {}


def type_text(code: int, flags: int) -> str | None:
    """Canonical mysql_type of a type code and column flags ("int unsigned", "varbinary")."""
    key = (code, flags & (_BINARY | _UNSIGNED))
    text = _TYPE_TEXT.get(key)
    if text is None:
        names = TYPE_NAMES.get(code)
        if names is None:
            return None
        text = names[1] if flags & _BINARY else names[0]
        if flags & _UNSIGNED and code in _UNSIGNED_CODES:
            text += " unsigned"
        _TYPE_TEXT[key] = text
    return text


# ---------------------------------------------------------------- Go strings

# Go encoding/json (1.22+) string escapes: \" \\ \b \f \n \r \t, other controls \u00xx,
# <, >, & and U+2028/9 as \u escapes. Invalid UTF-8 bytes (decoded with surrogateescape)
# become \ufffd, as Go writes them.
_JSON_ESCAPES: dict[int, str] = {c: f"\\u{c:04x}" for c in range(0x20)}
_JSON_ESCAPES.update({
    ord('"'): '\\"', ord("\\"): "\\\\", ord("\b"): "\\b", ord("\f"): "\\f", ord("\n"): "\\n",
    ord("\r"): "\\r", ord("\t"): "\\t", ord("<"): "\\u003c", ord(">"): "\\u003e",
    ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029",
})
_JSON_ESCAPES.update({c: "\\ufffd" for c in range(0xDC80, 0xDD00)})


def go_json_string(text: str) -> str:
    """`text` as Go's encoding/json writes a string (with its quotes)."""
    return '"' + text.translate(_JSON_ESCAPES) + '"'


_QUOTE_SHORT = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                "\v": "\\v", '"': '\\"', "\\": "\\\\"}


def go_quote(data: bytes) -> str:
    """Go's strconv.Quote(string(data)) without the surrounding quotes.

    Printable runes stay as they are (Go's IsPrint = Unicode L, M, N, P, S and ASCII space,
    which is Python's str.isprintable; Unicode versions may differ for newly assigned
    characters), invalid UTF-8 bytes become \\xNN, other runes \\a \\b \\f \\n \\r \\t \\v,
    \\xNN below 0x20 and 0x7f, \\uNNNN or \\UNNNNNNNN."""
    text = data.decode("utf-8", "surrogateescape")
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _QUOTE_SHORT:
            out.append(_QUOTE_SHORT[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # an invalid byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


_UNQUOTE = re.compile(
    r'\\(?:x([0-9A-Fa-f]{2})|([0-7]{3})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|([abfnrtv\\"]))'
    r'|([\\"\n])'
)
_UNQUOTE_SHORT = {"a": b"\a", "b": b"\b", "f": b"\f", "n": b"\n", "r": b"\r", "t": b"\t",
                  "v": b"\v", "\\": b"\\", '"': b'"'}


# Text made only of literal characters and the escapes Python's bytes literals read the same
# way (\xHH, three-digit octal up to \377, \a \b \f \n \r \t \v \\ \"): `codecs.escape_decode`
# unquotes it in C. Anything else (\u, \U, errors) takes the regex loop below.
_SIMPLE_QUOTED = re.compile(r'(?:[^\\"\n]|\\(?:x[0-9A-Fa-f]{2}|[0-3][0-7]{2}|[abfnrtv\\"]))*\Z')


def go_unquote(text: str) -> bytes:
    """The bytes of Go's strconv.Unquote('"' + text + '"'); ValueError when Go would fail."""
    if "\\" not in text and '"' not in text and "\n" not in text:
        return text.encode()
    if _SIMPLE_QUOTED.match(text):
        return codecs.escape_decode(text.encode())[0]
    out = []
    pos = 0
    for m in _UNQUOTE.finditer(text):
        out.append(text[pos:m.start()].encode())
        pos = m.end()
        hex2, octal, hex4, hex8, short, bad = m.groups()
        if hex2 is not None:
            out.append(bytes((int(hex2, 16),)))
        elif octal is not None:
            value = int(octal, 8)
            if value > 255:
                raise ValueError(f"octal escape \\{octal} is above 255")
            out.append(bytes((value,)))
        elif short is not None:
            out.append(_UNQUOTE_SHORT[short])
        elif bad is not None:
            what = {"\\": "a backslash that starts no valid escape", '"': "an unescaped quote",
                    "\n": "a raw newline"}[bad]
            raise ValueError(f"{what} at character {m.start()}")
        else:
            rune = int(hex4 or hex8, 16)
            if rune > 0x10FFFF or 0xD800 <= rune <= 0xDFFF:
                raise ValueError(f"escape {m.group(0)} is not a valid Unicode scalar value")
            out.append(chr(rune).encode())
    out.append(text[pos:].encode())
    return b"".join(out)


# ---------------------------------------------------------------- floats

_F32_LIMIT = 3.4028235677973366e38  # float32 rounding overflow threshold
_F32_SMALL, _F32_LARGE = np.float32(1e-6), np.float32(1e21)


def float_text(value: float, bits: int) -> bytes:
    """Canonical text of a FLOAT (bits=32) / DOUBLE value: shortest round trip, no exponent."""
    if bits == 32:
        if abs(value) >= _F32_LIMIT:
            raise ValueError(f"{value!r} overflows float32")
        number = np.float32(value)
    else:
        number = np.float64(value)
    return np.format_float_positional(number, unique=True, trim="-").encode()


def go_float(text: bytes, bits: int) -> str:
    """A canonical FLOAT / DOUBLE value as Go's encoding/json writes a float32 / float64."""
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text!r} is not a finite number")
    if bits == 32:
        if abs(value) >= _F32_LIMIT:
            raise ValueError(f"{text!r} overflows float32")
        number = np.float32(value)
        magnitude = abs(number)
        exponent = magnitude != 0 and (magnitude < _F32_SMALL or magnitude >= _F32_LARGE)
    else:
        number = np.float64(value)
        magnitude = abs(value)
        exponent = magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21)
    if not exponent:
        return np.format_float_positional(number, unique=True, trim="-")
    out = np.format_float_scientific(number, unique=True, trim="-", exp_digits=2)
    if len(out) >= 4 and out[-4] == "e" and out[-3] == "-" and out[-2] == "0":
        out = out[:-2] + out[-1]  # Go writes e-7, not e-07
    return out


# value rules, cached per (type code, flags) in _COLUMN_KINDS; the float kinds are their bit width
_K_INT, _K_TEXT, _K_QUOTED, _K_BASE64, _K_NULL, _K_FLOAT32, _K_FLOAT64 = 0, 1, 2, 3, 4, 32, 64
_COLUMN_KINDS: dict[tuple[int, int], tuple[str, int]] = {}


def _value_kind(code: int, flags: int) -> int:
    """The value rule of a known type code and its flags (the binary flag quotes CHAR values)."""
    if code in _INT_CODES:
        return _K_INT
    if code in _CHAR_CODES:
        return _K_QUOTED if flags & _BINARY else _K_TEXT
    if code in _TEXT_CODES:
        return _K_TEXT
    if code in _BASE64_CODES:
        return _K_BASE64
    return _FLOAT_BITS.get(code, _K_NULL)


def _column_kind(code: int, flags: int) -> tuple[str, int] | None:
    """(mysql_type, value rule) of a type code and flags; None for an unknown code or bad flags."""
    if not 0 <= flags < 1 << 31:
        return None
    mysql_type = type_text(code, flags)
    if mysql_type is None:
        return None
    return mysql_type, _value_kind(code, flags)


# a float column's negative zero as Go writes it: "v":-0 followed by , or }
_NEG_ZERO = re.compile(rb'"v":-0(?=[,}])')


@register
class OpenProtocolCodec(Codec):
    name = "open-protocol"
    compiled_class = "OpenProtocolDecoder"
    compiled_takes_keys = True  # the event key is in the record key
    description = "TiCDC Open Protocol: batched JSON key/value events in length-prefixed frames"
    options = (
        Option("max-batch-size", DEFAULT_MAX_BATCH_SIZE, "encode: at most this many row events per Kafka message", int),
        Option("max-message-bytes", DEFAULT_MAX_MESSAGE_BYTES, "encode: a message's key + value + 36 bytes stays within this; a larger single event is an error", int),
        Option("only-output-updated-columns", False, "encode: UPDATE `p` holds only the columns that changed (decoding always fills the rest from `u`)", bool),
        Option("delete-only-output-handle-key-columns", False, "encode: DELETE `d` holds only the handle-key columns", bool),
        Option("large-message-handle-compression", "none", "every event value is compressed this way (no marker in the message)", str, compression.NAMES),
        *claim_check.OPTIONS,
        TZ_OPTION,
    )
    ddl_placement = "all"  # TiCDC broadcasts DDL to every partition except for canal / canal-json
    watermark_placement = "all"  # resolved events go to every partition

    def compiled_decoder(self, extension):
        return extension.OpenProtocolDecoder(_column_kind)

    compiled_encoder_class = "OpenProtocolEncoder"

    def compiled_encoder(self, extension):
        """Row events' key and value JSON (open_protocol_encode.rs); `frame` batches them."""
        return extension.OpenProtocolEncoder(compiled_rule, _HANDLE_KEY, self.config["only-output-updated-columns"],
                                             self.config["delete-only-output-handle-key-columns"], _printable)

    def compiled_entry(self, encoded: tuple[bytes, bytes]) -> tuple | None:
        key, text = encoded
        value = compression.compress(self.config["large-message-handle-compression"], text)
        if len(key) + len(value) + MAX_RECORD_OVERHEAD + 16 + 8 > self.config["max-message-bytes"]:
            return None  # too large: `entry` and `frame` say so, naming the event
        return Kind.ROW, key, value, None

    def validate(self) -> None:
        for name in ("max-batch-size", "max-message-bytes"):
            if self.config[name] <= 0:
                raise ConfigError(f"option {name}={self.config[name]}: must be positive")

    # ================================================================ decode
    def decode(self, record: KafkaRecord) -> list[dict]:
        key, value = record.key, record.value
        if key is None:
            raise self.error("record has no key; the open protocol keeps its event keys there", field="key")
        if value is None:
            raise self.error("record has no value (a tombstone); the open protocol always has one", field="value")
        if len(key) < 8:
            raise self.error(f"key is {len(key)} bytes, shorter than the 8-byte version", byte_offset=0, field="key")
        version = int.from_bytes(key[:8], "big")
        if version != BATCH_VERSION:
            raise self.error(f"unsupported batch version {version} (only {BATCH_VERSION} exists)", byte_offset=0, field="key")
        key_end, value_end = len(key), len(value)
        key_pos, value_pos = 8, 0
        events: list[dict] = []
        index = 0
        while key_pos < key_end:
            where = f"key[{index}]"
            start, key_pos = self._frame(key, key_pos, key_end, where, "key")
            msg_key = self._json(key[start:key_pos], start, where)
            if type(msg_key) is not dict:
                raise self.error(f"event key is a JSON {type(msg_key).__name__}, not an object", byte_offset=start, field=where)
            kind = msg_key.get("t")
            ts = self._ts(msg_key.get("ts"), start, where + ".ts")
            where = f"value[{index}]"
            if value_pos >= value_end:
                raise self.error(
                    f"value ends after {index} events but the key holds more", byte_offset=value_pos, field=where)
            vstart, value_pos = self._frame(value, value_pos, value_end, where, "value")
            if kind == MESSAGE_ROW:
                events.append(self._row(msg_key, ts, value[vstart:value_pos], start, vstart, index))
            elif kind == MESSAGE_DDL:
                events.append(self._ddl(msg_key, ts, value[vstart:value_pos], start, vstart, index))
            elif kind == MESSAGE_RESOLVED:
                if value_pos != vstart:
                    raise self.error(
                        f"resolved event has a {value_pos - vstart}-byte value; it must be empty",
                        byte_offset=vstart - 8, field=where)
                events.append(_event(Kind.WATERMARK, watermark_ts=ts, execute_ts_ms=physical_ms(ts)))
            else:
                raise self.error(f"unknown event type t={kind!r} (1 row, 2 DDL, 3 resolved)", byte_offset=start, field=f"key[{index}].t")
            index += 1
        if index == 0:
            raise self.error("key holds the version but no event", byte_offset=8, field="key")
        if value_pos != value_end:
            raise self.error(
                f"{value_end - value_pos} bytes after the {index} event values", byte_offset=value_pos, field="value")
        return events

    def _frame(self, buf: bytes, pos: int, end: int, where: str, part: str) -> tuple[int, int]:
        """(start, end) of the length-prefixed entry at `pos`."""
        if pos + 8 > end:
            raise self.error(
                f"{part} is truncated inside a length field ({end - pos} of 8 bytes)", byte_offset=pos, field=where)
        length = int.from_bytes(buf[pos:pos + 8], "big")
        start = pos + 8
        if length > end - start:
            raise self.error(
                f"entry length {length} runs past the end of the {part} ({end - start} bytes left)",
                byte_offset=pos, field=where)
        return start, start + length

    def _json(self, data, start: int, where: str, note: str = ""):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            try:
                offset = len(bytes(data).decode("utf-8")[: e.pos].encode())
            except UnicodeDecodeError:
                offset = e.pos
            raise self.error(f"{where} is not valid JSON{note}: {e.msg}", byte_offset=start + offset, field=where) from None

    def _ts(self, value, start: int, where: str) -> int:
        if type(value) is not int:
            raise self.error(f"ts is {value!r}, not an integer", byte_offset=start, field=where)
        if not 0 <= value < 1 << 63:
            raise self.error(f"ts {value} is outside 0..2^63-1", byte_offset=start, field=where)
        return value

    def _value_bytes(self, data, start: int, where: str):
        method = self.config["large-message-handle-compression"]
        if method == "none":
            return data, ""
        try:
            return compression.decompress(method, data, self.name), f" (after {method} decompression)"
        except DecodeError as e:
            raise self.error(e.reason, byte_offset=start, field=where) from None

    def _names(self, msg_key: dict, start: int, where: str) -> tuple[str | None, str | None]:
        schema, table = msg_key.get("scm"), msg_key.get("tbl")
        for name, text in (("scm", schema), ("tbl", table)):
            if text is not None and type(text) is not str:
                raise self.error(f"{name} is {text!r}, not a string", byte_offset=start, field=f"{where}.{name}")
        return schema or None, table or None

    def _claimed(self, location, kstart: int, where: str) -> dict:
        """The row event of the one-event message a claim-check key points at."""
        events = claim_check.decode_claimed(self, None, location, byte_offset=kstart, field=where)
        if len(events) != 1 or events[0]["kind"] != Kind.ROW:
            raise self.error(f"the claim-check object for {location!r} holds {len(events)} events, not one row",
                             byte_offset=kstart, field=where)
        return events[0]

    def _row(self, msg_key: dict, ts: int, data, kstart: int, vstart: int, index: int) -> dict:
        kwhere = f"key[{index}]"
        where = f"value[{index}]"
        if msg_key.get("ohk"):
            raise self.error(
                "message carries only the handle-key columns (TiCDC large-message-handle-option="
                "handle-key-only); the full row is not in the archive", byte_offset=kstart, field=kwhere + ".ohk")
        if msg_key.get("ccl"):
            return self._claimed(msg_key["ccl"], kstart, kwhere + ".ccl")
        schema, table = self._names(msg_key, kstart, kwhere)
        extras = None
        for name in ("rid", "ptn"):
            number = msg_key.get(name)
            if number is not None:
                if type(number) is not int or not -(1 << 63) <= number < 1 << 63:
                    raise self.error(f"{name} is {number!r}, not a 64-bit integer", byte_offset=kstart, field=f"{kwhere}.{name}")
                if extras is None:
                    extras = {}
                extras["open." + name] = str(number)
        raw, note = self._value_bytes(data, vstart, where)
        if b'":-0' in raw:
            raw = _NEG_ZERO.sub(b'"v":-0.0', raw)
        msg = self._json(raw, vstart, where, note)
        if type(msg) is not dict:
            raise self.error(f"row value is a JSON {type(msg).__name__}, not an object", byte_offset=vstart, field=where)
        new, old, deleted = msg.get("u"), msg.get("p"), msg.get("d")
        for name, part in (("u", new), ("p", old), ("d", deleted)):
            if part is not None and type(part) is not dict:
                raise self.error(f"{name} is a JSON {type(part).__name__}, not an object", byte_offset=vstart, field=f"{where}.{name}")
        before = after = None
        if deleted:
            if new or old:
                raise self.error("row value has both d and u/p", byte_offset=vstart, field=where)
            op = Op.DELETE
            before, keys = self._image(deleted, vstart, where + ".d")
        elif new:
            after, keys = self._image(new, vstart, where + ".u")
            if old:
                op = Op.UPDATE
                before, _ = self._image(old, vstart, where + ".p")
                if len(before) != len(after) or any(b["name"] != a["name"] for b, a in zip(before, after)):
                    before = _fill_old(before, after)
            else:
                op = Op.INSERT
        elif old:
            raise self.error("row value has p (old columns) without u (new columns)", byte_offset=vstart, field=where)
        else:
            raise self.error("row value has no columns (none of u, p, d)", byte_offset=vstart, field=where)
        return _event(
            Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=physical_ms(ts), database=schema, table=table,
            key_columns=keys, before=before, after=after, extras=extras,
        )

    def _image(self, columns: dict, vstart: int, where: str) -> tuple[list[dict], list[str]]:
        """Canonical columns and handle-key names of one u / p / d object.

        The hot path: one cached lookup per (type code, flags) gives the type name and the
        value rule; checks that fail hand over to `_column_error` for the message."""
        image = []
        keys = []
        append = image.append
        kinds = _COLUMN_KINDS
        for name, col in columns.items():
            try:
                code = col["t"]
                value = col["v"]
                flags = col.get("f", 0)
                if col.get("h") is True:
                    flags |= _HANDLE_KEY
            except (KeyError, TypeError, AttributeError):
                raise self._column_error(name, col, vstart, where) from None
            if type(code) is not int or type(flags) is not int:
                raise self._column_error(name, col, vstart, where)
            info = kinds.get((code, flags))
            if info is None:
                info = _column_kind(code, flags)
                if info is None:
                    raise self._column_error(name, col, vstart, where)
                kinds[(code, flags)] = info
            mysql_type, kind = info
            if value is None:
                data = None
            elif kind == _K_INT:
                if type(value) is not int:
                    raise self._column_error(name, col, vstart, where, mysql_type)
                data = str(value).encode()
            elif kind == _K_TEXT:
                if type(value) is not str:
                    raise self._column_error(name, col, vstart, where, mysql_type)
                data = value.encode()
            elif kind == _K_QUOTED:
                if type(value) is not str:
                    raise self._column_error(name, col, vstart, where, mysql_type)
                try:
                    data = go_unquote(value)
                except ValueError as e:
                    raise self.error(f"column {name!r} ({mysql_type}) value is not a Go-quoted string: {e}",
                                     byte_offset=vstart, field=f"{where}.{name}") from None
            elif kind == _K_BASE64:
                try:
                    data = binascii.a2b_base64(value, strict_mode=True)
                except (ValueError, TypeError):
                    raise self.error(f"column {name!r} ({mysql_type}) value {value!r:.60} is not base64",
                                     byte_offset=vstart, field=f"{where}.{name}") from None
            elif kind == _K_NULL:
                raise self._column_error(name, col, vstart, where, mysql_type)
            else:  # _K_FLOAT32 / _K_FLOAT64: the bit width
                if type(value) is not float and type(value) is not int:
                    raise self._column_error(name, col, vstart, where, mysql_type)
                try:
                    data = float_text(value, kind)
                except (ValueError, OverflowError) as e:
                    raise self.error(f"column {name!r} ({mysql_type}): {e}", byte_offset=vstart, field=f"{where}.{name}") from None
            if flags & _HANDLE_KEY:
                keys.append(name)
            append({"name": name, "mysql_type": mysql_type, "flags": flags, "value": data, "label": None})
        return image, keys

    def _column_error(self, name: str, col, vstart: int, where: str, mysql_type: str | None = None) -> DecodeError:
        """The DecodeError for a column the hot path rejected."""
        field = f"{where}.{name}"
        if type(col) is not dict:
            return self.error(f"column {name!r} is a JSON {type(col).__name__}, not an object", byte_offset=vstart, field=field)
        for part in ("t", "v"):
            if part not in col:
                return self.error(f"column {name!r} has no {part}", byte_offset=vstart, field=field)
        code, flags, value = col["t"], col.get("f", 0), col["v"]
        if type(flags) is not int or not 0 <= flags < 1 << 31:
            return self.error(f"column {name!r} flag f={flags!r} is not a 31-bit integer", byte_offset=vstart, field=field + ".f")
        if type(code) is not int or code not in TYPE_NAMES:
            return self.error(f"column {name!r} has unknown type code t={code!r}", byte_offset=vstart, field=field + ".t")
        if code == _NULL_CODE:
            return self.error(f"column {name!r} of type null has value {value!r:.60}", byte_offset=vstart, field=field)
        expected = "an integer" if code in _INT_CODES else "a number" if code in _FLOAT_BITS else "a string"
        return self.error(f"column {name!r} ({mysql_type}) value {value!r:.60} is not {expected}", byte_offset=vstart, field=field)

    def _ddl(self, msg_key: dict, ts: int, data, kstart: int, vstart: int, index: int) -> dict:
        where = f"value[{index}]"
        schema, table = self._names(msg_key, kstart, f"key[{index}]")
        raw, note = self._value_bytes(data, vstart, where)
        msg = self._json(raw, vstart, where, note)
        if type(msg) is not dict:
            raise self.error(f"DDL value is a JSON {type(msg).__name__}, not an object", byte_offset=vstart, field=where)
        query, action = msg.get("q"), msg.get("t")
        if type(query) is not str:
            raise self.error(f"DDL query q is {query!r}, not a string", byte_offset=vstart, field=where + ".q")
        if type(action) is not int:
            raise self.error(f"DDL type t is {action!r}, not an integer", byte_offset=vstart, field=where + ".t")
        extras = None
        ddl_type = ACTION_NAMES.get(action)
        if ddl_type is None:  # an action newer than our table: keep its code
            ddl_type = classify(query)
            extras = {"open.ddl_action": str(action)}
        return _event(
            Kind.DDL, commit_ts=ts, execute_ts_ms=physical_ms(ts), database=schema, table=table,
            ddl_query=query, ddl_type=ddl_type, extras=extras,
        )

    # ================================================================ encode
    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        return self.frame(self.entry(event, topic=topic, partition=partition) for event in events)

    def entry(self, event: dict, *, topic: str = "", partition: int = 0) -> tuple:
        """(kind, event key JSON, event value as written, the event): one frame of `frame`."""
        kind = event["kind"]
        if kind == Kind.ROW:
            key, value = self._row_entry(event)
        elif kind == Kind.DDL:
            key, value = self._ddl_entry(event)
        elif kind == Kind.WATERMARK:
            key, value = self._resolved_entry(event)
        else:
            raise EncodeError(f"open-protocol cannot encode event kind {kind!r}")
        return kind, key, value, event

    def frame(self, entries: Iterable[tuple]) -> Iterator[EncodedMessage]:
        """Row entries batched up to max-batch-size events and max-message-bytes bytes, as
        tiflow's batch encoder does; DDL and resolved events alone in their message. An entry
        the compiled encoder wrote has no event (`compiled_entry` leaves a too large one to
        `entry`, so the error below always names its event)."""
        max_batch = self.config["max-batch-size"]
        max_bytes = self.config["max-message-bytes"]
        keys: list[bytes] = []
        values: list[bytes] = []
        size = 0  # len(key buffer) + len(value buffer) of the open batch

        for kind, key, value, event in entries:
            if kind == Kind.ROW:
                single = len(key) + len(value) + MAX_RECORD_OVERHEAD + 16 + 8
                if single > max_bytes:
                    raise EncodeError(
                        f"open-protocol: a {event['op']} of {event['database']}.{event['table']} at commit ts "
                        f"{event['commit_ts']} needs {single} bytes, more than max-message-bytes={max_bytes}")
                if keys and (len(keys) >= max_batch or size + MAX_RECORD_OVERHEAD + len(key) + len(value) + 16 > max_bytes):
                    yield _message(keys, values)
                    keys, values = [], []
                if not keys:
                    size = 8
                keys.append(key)
                values.append(value)
                size += len(key) + len(value) + 16
            else:
                if keys:
                    yield _message(keys, values)
                    keys, values = [], []
                yield _message([key], [value])
        if keys:
            yield _message(keys, values)

    def _compress(self, text: str) -> bytes:
        return compression.compress(self.config["large-message-handle-compression"], text.encode())

    def _row_entry(self, event: dict) -> tuple[bytes, bytes]:
        ts = event["commit_ts"]
        if ts is None:
            raise EncodeError("open-protocol needs a commit ts for every row event (its key's ts)")
        extras = event.get("extras") or {}
        if not isinstance(extras, dict):
            extras = dict(extras)
        parts = [f'{{"ts":{ts}']
        if event["database"]:
            parts.append(',"scm":' + go_json_string(event["database"]))
        if event["table"]:
            parts.append(',"tbl":' + go_json_string(event["table"]))
        for name in ("rid", "ptn"):
            number = extras.get("open." + name)
            if number is not None:
                try:
                    number = int(number)
                except ValueError:
                    raise EncodeError(f"extras open.{name}={extras['open.' + name]!r} is not an integer") from None
                if number or name == "ptn":
                    parts.append(f',"{name}":{number}')
        parts.append(',"t":1}')
        key = "".join(parts).encode()

        op = event["op"]
        keys = set(event["key_columns"] or ())
        before, after = event["before"], event["after"]
        if op == Op.INSERT:
            if not after:
                raise EncodeError("insert event without the after image")
            text = '{"u":' + _columns_json(after, keys) + "}"
        elif op == Op.UPDATE:
            if not after:
                raise EncodeError("update event without the after image")
            text = '{"u":' + _columns_json(after, keys)
            if before:
                old = before
                if self.config["only-output-updated-columns"]:
                    new_values = {c["name"]: (c["value"], _code(c)) for c in after}
                    old = [c for c in before if new_values.get(c["name"], (None, -1)) != (c["value"], _code(c))]
                if old:
                    text += ',"p":' + _columns_json(old, keys)
            text += "}"
        elif op == Op.DELETE:
            if not before:
                raise EncodeError("delete event without the before image")
            image = before
            if self.config["delete-only-output-handle-key-columns"]:
                image = [c for c in before if (c["flags"] or 0) & _HANDLE_KEY or c["name"] in keys]
                if not image:
                    raise EncodeError("delete-only-output-handle-key-columns: the delete has no handle-key column")
            text = '{"d":' + _columns_json(image, keys) + "}"
        else:
            raise EncodeError(f"row event with op {op!r}")
        return key, self._compress(text)

    def _ddl_entry(self, event: dict) -> tuple[bytes, bytes]:
        ts = event["commit_ts"]
        if ts is None:
            raise EncodeError("open-protocol needs a commit ts for every DDL event (its key's ts)")
        parts = [f'{{"ts":{ts}']
        if event["database"]:
            parts.append(',"scm":' + go_json_string(event["database"]))
        if event["table"]:
            parts.append(',"tbl":' + go_json_string(event["table"]))
        parts.append(',"t":2}')
        query = event["ddl_query"] or ""
        extras = event.get("extras") or {}
        action = dict(extras).get("open.ddl_action")
        if action is not None:
            try:
                action = int(action)
            except ValueError:
                raise EncodeError(f"extras open.ddl_action={action!r} is not an integer") from None
        else:
            action = ACTION_CODES.get(event["ddl_type"] or "")
            if action is None:
                action = ACTION_CODES.get(classify(query), 0)
        value = '{"q":' + go_json_string(query) + f',"t":{action}}}'
        return "".join(parts).encode(), self._compress(value)

    def _resolved_entry(self, event: dict) -> tuple[bytes, bytes]:
        ts = event["watermark_ts"]
        if ts is None:
            raise EncodeError("watermark event without watermark_ts")
        return f'{{"ts":{ts},"t":3}}'.encode(), b""


def _message(keys: list[bytes], values: list[bytes]) -> EncodedMessage:
    key = [_VERSION_HEADER]
    value = []
    for k, v in zip(keys, values):
        key.append(len(k).to_bytes(8, "big"))
        key.append(k)
        value.append(len(v).to_bytes(8, "big"))
        value.append(v)
    return EncodedMessage(b"".join(key), b"".join(value))


def _code(col: dict) -> int:
    mysql_type = parse_type(col["mysql_type"])
    code = TYPE_CODES.get(mysql_type.base)
    if code is None:
        raise EncodeError(
            f"column {col['name']!r}: MySQL type {col['mysql_type']!r} has no open-protocol type code")
    return code


def _columns_json(image: list[dict], keys: set) -> str:
    """One u / p / d object as Go's encoding/json writes a map: names sorted byte-wise."""
    by_name = {c["name"]: c for c in image}
    if len(by_name) != len(image):
        raise EncodeError("an image names the same column twice")
    parts = []
    for name in sorted(by_name):
        col = by_name[name]
        code = _code(col)
        flags = _written_flags(parse_type(col["mysql_type"]), code, int(col["flags"] or 0))
        if name in keys:
            flags |= _HANDLE_KEY
        handle = '"h":true,' if flags & _HANDLE_KEY else ""
        parts.append(f'{go_json_string(name)}:{{"t":{code},{handle}"f":{flags},"v":{_value_json(col, code, flags)}}}')
    return "{" + ",".join(parts) + "}"


def _written_flags(mysql_type, code: int, flags: int) -> int:
    """A column's flags as written: unsigned from its type, and the binary flag saying which of
    varchar/varbinary, text/blob it is."""
    if mysql_type.unsigned:
        flags |= _UNSIGNED
    if code in _CHAR_CODES or code in _BASE64_CODES and code != 255:
        flags = flags | _BINARY if mysql_type.base in _BINARY_NAMES else flags & ~_BINARY
    return flags


def _int_range(code: int, flags: int) -> tuple[int, int]:
    """The lowest and highest value an integer column of this code and flags can be written with."""
    limits = _INT_LIMITS.get(code)
    if limits is None:
        return -(1 << 63), (1 << 64) - 1
    low, high, unsigned_high = limits
    return (0, unsigned_high) if flags & _UNSIGNED else (low, high)


def _printable(code: int) -> bool:
    """Whether `go_quote` keeps this character as it is (the compiled encoder asks once each)."""
    return chr(code).isprintable()


def compiled_rule(mysql_type: str | None, flags: int) -> tuple | None:
    """The compiled encoder's rule of a column's mysql_type and flags, asked once per pair
    (open_protocol_encode.rs): (type code, flags as written before the handle-key bit, value
    rule, an integer's lowest and highest value); None for a type with no code (Python encodes
    the event, and refuses it)."""
    parsed = parse_type(mysql_type)
    code = TYPE_CODES.get(parsed.base)
    if code is None:
        return None
    flags = _written_flags(parsed, code, flags)
    return (code, flags, _value_kind(code, flags), *_int_range(code, flags))


def _value_json(col: dict, code: int, flags: int) -> str:
    data = col["value"]
    if data is None or code == _NULL_CODE:
        return "null"
    try:
        if code in _INT_CODES:
            number = int(data)
            low, high = _int_range(code, flags)
            if not low <= number <= high:
                raise ValueError(f"{number} is out of range" if code in _INT_LIMITS else f"{number} does not fit 64 bits")
            return str(number)
        if code in _CHAR_CODES:
            if flags & _BINARY:
                return go_json_string(go_quote(data))
            return go_json_string(data.decode("utf-8", "surrogateescape"))
        if code in _TEXT_CODES:
            return go_json_string(data.decode("utf-8", "surrogateescape"))
        if code in _BASE64_CODES:
            return '"' + base64.b64encode(data).decode("ascii") + '"'
        return go_float(data, _FLOAT_BITS[code])
    except ValueError as e:
        raise EncodeError(f"column {col['name']!r} ({col['mysql_type']}) value {data!r:.60}: {e}") from None


def _fill_old(old: list[dict], new: list[dict]) -> list[dict]:
    """The full old row when `p` holds only some columns (only-output-updated-columns): a
    missing column was unchanged and takes its value from `u`."""
    by_name = {c["name"]: c for c in old}
    image = [by_name.get(c["name"]) or dict(c) for c in new]
    known = {c["name"] for c in new}
    image.extend(c for c in old if c["name"] not in known)
    return image


_BLANK = dict.fromkeys(EVENT_FIELD_NAMES)


def _event(kind: str, **fields) -> dict:
    """new_event without its checks (the hot path builds only known fields)."""
    event = _BLANK.copy()
    event["kind"] = kind
    event["event_index"] = 0
    event.update(fields)
    return event
