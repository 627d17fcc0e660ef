"""oceanbase-avro: OceanBase data subscription (OMS) `AvroRecord` messages, one record per Kafka
message, as plain Avro binary or in the Confluent wire format (0x00, 4-byte schema id, Avro).

Layers, kept apart:

* framing (`_read`, `encode`): plain or Confluent; the Kafka framing is not documented by
  OceanBase, so decoding accepts both (option `avro-framing=auto`) and encoding writes plain Avro
  unless told otherwise;
* the schema: the seed's AvroRecord schema, kept as schemas/oceanbase-avro-record.avsc and read
  and written with fastavro (the seed's one invalid default, `DateTimeObject.nanos: null` on an
  `int`, is dropped there: fastavro rejects it and defaults never reach the binary encoding);
* value conversion (`_render` / `_carry`): every `ColumnValue.value` union member to and from the
  canonical text of docs/canonical-events.md.

Written by hand, because no kept library does it: the 5-byte Confluent header (`struct`; no
registry is consulted, the schema is always AvroRecord) and the value conversion (OMS's value
records are its own). Avro itself is fastavro's.

What the records mean (docs/protocols/oceanbase-avro.md has the full mapping and the losses):

* INSERT / UPDATE / DELETE -> one row event; DDL -> one DDL event; BEGIN / COMMIT -> no event
  (their `xid` is on every row as `tx_id`, `txind` goes to extras); HEARTBEAT -> no event: it
  carries only a wall-clock second, not a position every earlier record is known to be below,
  so it cannot be a canonical watermark (whose `watermark_ts` is on the commit-ts scale).
* `id` is the ordering position (`position = [id]`); `timestamp` (seconds) is `execute_ts_ms`.
* `fields[].dataTypeNumber` is the MySQL field-type code libobcdc gives every column (verified in
  oceanbase/oceanbase: ObSMUtils type map, ENUM=247 / SET=248 forced by libobcdc's meta manager)
  or its OMS-corrected variant (oblogclient LogTypeHelper: VARCHAR=15, VAR_BINARY=198,
  BINARY=199, CLOB=211); that OMS writes exactly these codes into Avro is inferred.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import io
import json
import re
import struct
import zoneinfo
from collections.abc import Iterable, Iterator
from importlib import resources

import fastavro
import numpy as np
import orjson

from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .ddl_types import classify
from .errors import ConfigError, DecodeError, EncodeError
from .events import ColumnFlag, Kind, Op, new_event
from .mysql_types import BINARY_BASES, MySQLType, enum_set_label, enum_set_value, parse_type
from .tso import physical_ms

SCHEMA_RESOURCE = "schemas/oceanbase-avro-record.avsc"
SCHEMA_JSON: dict = json.loads(resources.files(__package__).joinpath(SCHEMA_RESOURCE).read_text("utf-8"))
SCHEMA = fastavro.parse_schema(SCHEMA_JSON)
_NS = SCHEMA_JSON["namespace"] + "."  # the seed's namespace (redacted there: "com.xxx.oms...")

CONFLUENT_MAGIC = 0
EXTRA = "oceanbase."  # prefix of the extras this codec keeps

# ---------------------------------------------------------------------------- type codes

# dataTypeNumber -> MySQL base type. A pair is (text or character type, binary type): the raw
# libobcdc codes share one code between them, the value / type_info tells which one it is.
CODE_TYPES: dict[int, str | tuple[str, str]] = {
    0: "decimal", 1: "tinyint", 2: "smallint", 3: "int", 4: "float", 5: "double", 6: "null",
    7: "timestamp", 8: "bigint", 9: "mediumint", 10: "date", 11: "time", 12: "datetime",
    13: "year", 14: "date", 15: "varchar", 16: "bit", 17: "timestamp", 18: "datetime", 19: "time",
    161: "array", 197: "text", 198: "varbinary", 199: "binary", 211: "text", 215: "roaringbitmap",
    245: "json", 246: "decimal", 247: "enum", 248: "set",
    249: ("tinytext", "tinyblob"), 250: ("mediumtext", "mediumblob"), 251: ("longtext", "longblob"),
    252: ("text", "blob"), 253: ("varchar", "varbinary"), 254: ("char", "binary"), 255: "geometry",
}
# MySQL base type -> the code the encoder writes (unambiguous codes where OMS has one).
TYPE_CODES: dict[str, int] = {
    "decimal": 246, "tinyint": 1, "smallint": 2, "int": 3, "float": 4, "double": 5, "null": 6,
    "timestamp": 7, "bigint": 8, "mediumint": 9, "date": 10, "time": 11, "datetime": 12,
    "year": 13, "varchar": 15, "bit": 16, "array": 161, "varbinary": 198, "binary": 199,
    "roaringbitmap": 215, "json": 245, "enum": 247, "set": 248, "tinytext": 249, "tinyblob": 249,
    "mediumtext": 250, "mediumblob": 250, "longtext": 251, "longblob": 251, "text": 252,
    "blob": 252, "char": 254, "geometry": 255,
    **dict.fromkeys(
        ["point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
         "geometrycollection", "geomcollection"], 255),
}
# The DataType (`type_info`) the seed's mapping table gives each MySQL type.
TYPE_INFOS: dict[str, str] = {
    "tinyint": "INTEGER", "smallint": "INTEGER", "mediumint": "INTEGER", "int": "INTEGER",
    "year": "INTEGER", "bigint": "LONG", "decimal": "DECIMAL", "float": "FLOAT", "double": "DOUBLE",
    "bit": "BIT", "datetime": "DATETIME", "timestamp": "TIMESTAMP", "date": "DATE", "time": "TIME",
    "enum": "ENUM", "set": "SET", "geometry": "GEOMETRY", "null": "NULL",
    "roaringbitmap": "ROARINGBITMAP", "array": "ARRAY",
}
_TEXT_INFOS = {"STRING"}
_BINARY_INFOS = {"BINARY", "RAW"}
# character types -> the binary-charset type holding the same values as bytes
_BINARY_OF = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
              "mediumtext": "mediumblob", "longtext": "longblob"}
_PARAM_BASES = ("decimal", "bit", "enum", "set")  # types whose parameters a value record carries
_OB_ONLY_INFOS = {"ARRAY", "VECTOR", "SPARSE_VECTOR", "ROARINGBITMAP", "MAP", "RAW"}
_PRIMITIVES = ("boolean", "int", "long", "float", "double", "bytes", "string")

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_OPERATIONS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
_OP_NAMES = {op: name for name, op in _OPERATIONS.items()}

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})\Z")
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\Z")
_TIME = re.compile(r"(-?)(\d{2,}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\Z")
_INTEGER = re.compile(r"-?\d+\Z")
_PLAIN_DECIMAL = re.compile(r"-?\d+(?:\.(\d+))?\Z")


@functools.lru_cache(maxsize=4096)
def type_code(mysql_type: str | None, flags: int = 0) -> int:
    """The dataTypeNumber the encoder writes for a canonical column type."""
    parsed = parse_type(mysql_type)
    code = TYPE_CODES.get(parsed.base)
    if code is not None:
        return code
    return TYPE_CODES["varbinary"] if flags & ColumnFlag.BINARY else TYPE_CODES["varchar"]


def type_info(mysql_type: str | None, flags: int = 0) -> str:
    """The ColumnValue.type_info the encoder writes for a canonical column type."""
    parsed = parse_type(mysql_type)
    info = TYPE_INFOS.get(parsed.base)
    if info is not None:
        return info
    binary = parsed.base in BINARY_BASES or (not parsed.base and flags & ColumnFlag.BINARY)
    return "BINARY" if binary else "STRING"


def quote_label(label: str) -> str:
    return "'" + label.replace("\\", "\\\\").replace("'", "''") + "'"


def _fraction(nanos: int) -> str:
    if nanos == 0:
        return ""
    if nanos % 1000 == 0:
        return f".{nanos // 1000:06d}"
    return f".{nanos:09d}"


def _nanos(digits: str | None) -> int:
    return int((digits or "").ljust(9, "0")) if digits else 0


def format_float(value: float, single: bool) -> str:
    """Shortest text that round-trips the float32 / float64, no exponent (canonical FLOAT/DOUBLE)."""
    number = np.float32(value) if single else np.float64(value)
    return np.format_float_positional(number, unique=True, trim="-")


@functools.lru_cache(maxsize=256)
def parse_zone(text: str) -> dt.tzinfo:
    """A time zone: "UTC", a fixed offset "+08:00" / "-0530", or an IANA name."""
    m = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", text.strip())
    if m:
        delta = dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
        if delta >= dt.timedelta(hours=24):
            raise ValueError(f"offset {text!r} out of range")
        return dt.timezone(-delta if m.group(1) == "-" else delta)
    if text.strip().upper() in ("UTC", "Z", "GMT"):
        return dt.timezone.utc
    return zoneinfo.ZoneInfo(text.strip())


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


# ---------------------------------------------------------------------------- the codec

@register
class OceanBaseAvroCodec(Codec):
    name = "oceanbase-avro"
    compiled_class = "OceanBaseAvroDecoder"
    description = "OceanBase data subscription (OMS) Avro AvroRecord, plain Avro or Confluent-framed"
    options = (
        Option("avro-framing", "auto", "decode: auto-detect / plain / confluent (0x00 + 4-byte schema id); "
               "encode: plain (also for auto) or confluent", str, ("auto", "plain", "confluent")),
        Option("avro-schema-id", 1, "schema id written with avro-framing=confluent (unless the event kept its own)", int),
        Option("timestamp-unit", "s", "unit of AvroRecord.timestamp: s (the seed) or ms", str, ("s", "ms")),
        Option("time-zone", "UTC", "zone TimestampObject values without a timezone are rendered in "
               "(and TIMESTAMP text is read in when encoding): UTC, +08:00, Asia/Shanghai", str),
    )
    ddl_placement = "first"
    watermark_placement = "all"

    def compiled_decoder(self, extension):
        return extension.OceanBaseAvroDecoder(json.dumps(SCHEMA_JSON), self.config["avro-framing"], self.ms_per_unit,
                                              *_compiled_rules(self))

    def validate(self) -> None:
        try:
            self.zone = parse_zone(self.config["time-zone"])
        except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError) as e:
            raise ConfigError(f"option time-zone={self.config['time-zone']!r}: not a time zone ({e})") from None
        if not 0 <= self.config["avro-schema-id"] < 1 << 32:
            raise ConfigError("option avro-schema-id: expected 0..4294967295")
        self.ms_per_unit = 1000 if self.config["timestamp-unit"] == "s" else 1

    # ---------------------------------------------------------------- decode
    def decode(self, record: KafkaRecord) -> list[dict]:
        if record.value is None:
            raise self.error("record has no value (a tombstone); oceanbase-avro always has one")
        msg, schema_id = self._read(record.value)
        return self._events(msg, schema_id)

    def _read(self, data: bytes) -> tuple[dict, int | None]:
        framing = self.config["avro-framing"]
        if framing == "confluent" or (framing == "auto" and data[:1] == b"\x00" and len(data) >= 5):
            if data[:1] != b"\x00" or len(data) < 5:
                raise self.error("not Confluent-framed: expected magic byte 0 and a 4-byte schema id", byte_offset=0)
            schema_id = struct.unpack(">I", data[1:5])[0]
            try:
                return self._avro(data, 5), schema_id
            except DecodeError:
                if framing == "confluent":
                    raise
            # auto: a plain record whose id is 0 also starts with byte 0
        return self._avro(data, 0), None

    def _avro(self, data: bytes, start: int) -> dict:
        buffer = io.BytesIO(data)
        buffer.seek(start)
        try:
            msg = fastavro.schemaless_reader(buffer, SCHEMA, None, return_record_name=True)
        except Exception as e:  # fastavro raises EOFError, IndexError, UnicodeDecodeError, ...
            raise self.error(f"not an AvroRecord ({type(e).__name__}: {e})", byte_offset=buffer.tell()) from e
        if buffer.tell() != len(data):
            raise self.error(f"{len(data) - buffer.tell()} bytes after the AvroRecord", byte_offset=buffer.tell())
        return msg

    def _events(self, msg: dict, schema_id: int | None) -> list[dict]:
        operation = msg["operation"]
        if operation is None:
            raise self.error("record has no operation", field="operation")
        if operation in ("BEGIN", "COMMIT", "HEARTBEAT"):
            return []  # transaction boundaries and heartbeats carry no change (module docstring)
        self._check_not_split(msg)
        extras = self._extras(msg, schema_id)
        timestamp = msg["timestamp"]
        execute_ts_ms = None
        if timestamp is not None:
            execute_ts_ms = timestamp * self.ms_per_unit
            if not _INT64[0] <= execute_ts_ms <= _INT64[1]:
                raise self.error(f"timestamp {timestamp} overflows epoch milliseconds", field="timestamp")
        common = dict(
            position=[msg["id"]], execute_ts_ms=execute_ts_ms, database=msg["schemaName"],
            table=msg["tableName"], tx_id=msg["xid"],
        )
        if operation == "DDL":
            if msg["sql"] is None:
                raise self.error("DDL record has no sql", field="sql")
            return [new_event(Kind.DDL, ddl_query=msg["sql"], ddl_type=classify(msg["sql"]),
                              extras=extras or None, **common)]
        op = _OPERATIONS[operation]
        fields = msg["fields"]
        if not fields:
            raise self.error(f"{operation} record has no fields", field="fields")
        names = [f["name"] for f in fields]
        keys = self._key_columns(msg["pkIndexes"], names)
        before = self._side(msg, "beforeImages", op != Op.INSERT, len(fields))
        after = self._side(msg, "afterImages", op != Op.DELETE, len(fields))
        before_cols, after_cols, codes = self._images(fields, before, after, set(keys))
        defaults = [type_code(c["mysql_type"], c["flags"]) for c in (after_cols or before_cols)]
        if codes != defaults:
            extras[EXTRA + "dataTypeNumbers"] = ",".join(map(str, codes))
        return [new_event(Kind.ROW, op=op, key_columns=keys, before=before_cols, after=after_cols,
                          extras=extras or None, **common)]

    def _check_not_split(self, msg: dict) -> None:
        total, index = msg["total"], msg["index"]
        if msg["beforeImageBytes"] or msg["afterImageBytes"] or total not in (-1, 1) or index not in (-1, 0):
            raise self.error(
                f"record is one shard of a split message (total={total}, index={index}); the format of "
                "beforeImageBytes/afterImageBytes is not documented, so shards cannot be reassembled",
                field="total")

    def _extras(self, msg: dict, schema_id: int | None) -> dict:
        extras: dict[str, str] = {}
        if msg["txind"] is not None:
            extras[EXTRA + "txind"] = msg["txind"]
        if msg["position"] is not None:
            extras[EXTRA + "position"] = msg["position"]
        if msg["version"] != 1:
            extras[EXTRA + "version"] = str(msg["version"])
        source = msg["source"]
        if source is not None:
            _, source = source
            extras[EXTRA + "sourceType"] = source["sourceType"]
            extras[EXTRA + "sourceVersion"] = source["version"]
        if msg["ukIndexes"] is not None:
            extras[EXTRA + "ukIndexes"] = orjson.dumps(msg["ukIndexes"]).decode()
        if msg["tags"] is not None:
            extras[EXTRA + "tags"] = orjson.dumps(msg["tags"]).decode()
        if msg["total"] != -1 or msg["index"] != -1:
            extras[EXTRA + "total"] = str(msg["total"])
            extras[EXTRA + "index"] = str(msg["index"])
        if schema_id is not None:
            extras[EXTRA + "schemaId"] = str(schema_id)
        return extras

    def _key_columns(self, pk_indexes: list[int] | None, names: list[str]) -> list[str]:
        if pk_indexes is None:
            return []  # the seed: pkIndexes is left out when the table has no primary key
        keys = []
        for i, index in enumerate(pk_indexes):
            if not 0 <= index < len(names):
                raise self.error(f"pkIndexes[{i}]={index} is not a field index (0..{len(names) - 1})",
                                 field="pkIndexes")
            keys.append(names[index])
        return keys

    def _side(self, msg: dict, name: str, wanted: bool, width: int) -> list | None:
        image = msg[name]
        if not wanted:
            if image:
                raise self.error(f"{msg['operation']} record has {name}", field=name)
            return None
        if image is None:
            raise self.error(f"{msg['operation']} record has no {name}", field=name)
        if len(image) != width:
            raise self.error(f"{name} has {len(image)} values for {width} fields", field=name)
        return image

    def _images(self, fields: list[dict], before: list | None, after: list | None, keys: set):
        images = [img for img in (after, before) if img is not None]
        before_cols: list[dict] | None = [] if before is not None else None
        after_cols: list[dict] | None = [] if after is not None else None
        codes = []
        for i, field in enumerate(fields):
            code = field["dataTypeNumber"]
            codes.append(code)
            values = [img[i] for img in images]
            mysql_type, parsed = self._column_type(code, values, f"fields[{i}]")
            flags = _BINARY_FLAG if parsed.base in BINARY_BASES else 0
            if field["name"] in keys:
                flags |= _KEY_FLAGS
            for img, out, side in ((after, after_cols, "afterImages"), (before, before_cols, "beforeImages")):
                if img is None:
                    continue
                value, label = self._render(img[i], parsed, f"{side}[{i}]")
                out.append({"name": field["name"], "mysql_type": mysql_type, "flags": flags,
                            "value": value, "label": label})
        return before_cols, after_cols, codes

    def _column_type(self, code: int, values: list[dict], where: str) -> tuple[str | None, MySQLType]:
        """The column's MySQL type from its code, disambiguated and completed by its values."""
        base = CODE_TYPES.get(code)
        if base is None:  # an OceanBase-only type: name it after its type_info when that says more
            infos = {v["type_info"] for v in values} & _OB_ONLY_INFOS
            base = infos.pop().lower() if len(infos) == 1 else None
            return base, _mysql_type(base or "")
        if isinstance(base, tuple):
            binary = any(map(_says_binary, values))
            text = any(v["type_info"] in _TEXT_INFOS for v in values) and not binary
            if text or binary:
                base = base[0] if text else base[1]
            else:  # all NULL without a telling type_info: the name MySQL gives the code
                base = base[1] if code in (249, 250, 251, 252) else base[0]
        elif base in _BINARY_OF and any(_says_binary(v) for v in values):
            # a character code (OMS's VARCHAR 15, CLOB 211) whose values are binary: the column
            # is the binary type, or every later conversion would read its bytes as UTF-8 text
            base = _BINARY_OF[base]
        if base not in _PARAM_BASES:  # no value record states parameters of this type
            return base, _mysql_type(base)
        for v in values:
            kind, record = _member(v["value"])
            if base not in _PARAM_BASES or kind is None:
                continue
            if base == "decimal" and kind == "DecimalObject":
                precision, scale = record["precision"], record["scale"]
                if not 0 <= scale <= precision or precision <= 0:
                    raise self.error(f"DecimalObject precision {precision} / scale {scale} are invalid",
                                     field=where)
                return f"decimal({precision},{scale})", _mysql_type("decimal", (str(precision), str(scale)))
            if base == "bit" and kind == "BitObject":
                length = record["bit_length"]
                if not 1 <= length <= 64:
                    raise self.error(f"BitObject bit_length {length} is outside 1..64", field=where)
                return f"bit({length})", _mysql_type("bit", (str(length),))
            if base in ("enum", "set") and kind == "EnumSetValue" and record["defines"] is not None:
                labels = tuple(record["defines"])
                return _enum_set_text(base, labels), _mysql_type(base, labels)
        return base, _mysql_type(base)

    def _render(self, column_value: dict, mysql_type: MySQLType, where: str) -> tuple[bytes | None, str | None]:
        """(canonical value bytes, ENUM/SET label) of one ColumnValue."""
        if column_value["value"] is None:
            return None, None
        kind, value = _member(column_value["value"])
        base = mysql_type.base
        binary = base in BINARY_BASES
        try:
            if kind is None:
                if isinstance(value, bool):
                    return (b"1" if value else b"0"), None
                if isinstance(value, int):
                    text = str(value).encode()
                    return text, enum_set_label(mysql_type, text) if mysql_type.labels else None
                if isinstance(value, float):
                    if not np.isfinite(value):
                        raise ValueError(f"{value} is not a MySQL number")
                    single = base == "float" and float(np.float32(value)) == value
                    return format_float(value, single).encode(), None
                if isinstance(value, bytes):
                    return value, None
                if base in ("enum", "set"):  # a plain string is the label text (libobcdc writes labels)
                    number = enum_set_value(mysql_type, value) if mysql_type.labels else None
                    return (number if number is not None else value.encode()), value
                return self._text(value, binary, base), None
            if kind == "StringObject":
                text = value["value"]
                return self._text(text, binary or value["charsetName"].lower() == "binary", base), None
            if kind == "DecimalObject":
                return _decimal_text(value["value"], value["scale"]).encode(), None
            if kind == "DateObject":
                return _date_text(value["year"], value["month"], value["day"]).encode(), None
            if kind == "TimeObject":
                return _time_text(value["negative"], value["hours"], value["minutes"], value["seconds"],
                                  value["nanos"]).encode(), None
            if kind == "DateTimeObject":
                return (_date_text(value["year"], value["month"], value["day"]) + " " + _time_text(
                    False, value["hours"], value["minutes"], value["seconds"], value["nanos"], 23)).encode(), None
            if kind == "TimestampObject":
                zone = parse_zone(value["timezone"]) if value["timezone"] else self.zone
                return _timestamp_text(value["seconds"], value["nanos"], zone).encode(), None
            if kind == "BitObject":
                text, length = value["value"], value["bit_length"]
                if not text.isascii() or not text.isdigit():
                    raise ValueError(f"BitObject value {text!r} is not an unsigned decimal")
                if not 1 <= length <= 64 or int(text) >> length:
                    raise ValueError(f"BitObject value {text} does not fit {length} bits")
                return str(int(text)).encode(), None
            if kind == "EnumSetValue":
                label = value["value"]
                if value["defines"] is None or mysql_type.labels is None:
                    return label.encode(), label  # labels only: the value is the label text
                number = enum_set_value(MySQLType(base, tuple(value["defines"])), label)
                if number is None:
                    raise ValueError(f"{label!r} is not made of the defines {value['defines']}")
                return number, label
            if kind == "GeometryValue":
                return struct.pack("<i", value["srid"]) + value["wkb"], None
        except (ValueError, OverflowError, ArithmeticError, OSError, zoneinfo.ZoneInfoNotFoundError) as e:
            raise self.error(f"bad {kind or type(value).__name__} value: {e}", field=where) from e
        raise self.error(f"unknown value member {kind}", field=where)

    def _text(self, text: str, binary: bool, base: str) -> bytes:
        if binary:
            try:
                return text.encode("latin-1")  # bytes as ISO-8859-1 characters, as Canal writes them
            except UnicodeEncodeError as e:
                raise ValueError(f"binary {base} value holds U+{ord(text[e.start]):04X}, outside ISO-8859-1") from None
        return text.encode("utf-8")

    # ---------------------------------------------------------------- encode
    compiled_encoder_class = "OceanBaseAvroEncoder"
    encodes_labels = True  # `_carry` picks the ColumnValue member by value and label

    def compiled_encoder(self, extension):
        """Row events' records without their id (oceanbase_avro_encode.rs); `frame` numbers them."""
        offset = int(self.zone.utcoffset(None).total_seconds()) if isinstance(self.zone, dt.timezone) else None
        return extension.OceanBaseAvroEncoder(_encode_rule, self.config["avro-framing"] == "confluent",
                                              self.config["avro-schema-id"], self.ms_per_unit,
                                              self.config["time-zone"], offset)

    def compiled_entry(self, encoded: tuple[int | None, bytes]) -> tuple[int | None, bytes]:
        return encoded

    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        return self.frame(self.entry(event, topic=topic, partition=partition) for event in events)

    def entry(self, event: dict, *, topic: str = "", partition: int = 0) -> tuple[int | None, bytes] | None:
        """(the record id the event states, its one-value position, else None; the message
        without the id), or None for a watermark (no OceanBase record means "everything before
        was sent", module docstring). The id is `frame`'s: it counts on from the last one."""
        kind = event["kind"]
        if kind == Kind.WATERMARK:
            return None
        if kind not in (Kind.ROW, Kind.DDL):
            raise EncodeError(f"oceanbase-avro cannot encode event kind {kind!r}")
        position = event["position"]
        record_id = position[0] if position is not None and len(position) == 1 else None
        buffer = io.BytesIO()
        try:
            record = self._record(event, 0)
            if self.config["avro-framing"] == "confluent":
                extras = event.get("extras") or {}
                schema_id = int(extras.get(EXTRA + "schemaId", self.config["avro-schema-id"]))
                buffer.write(struct.pack(">BI", CONFLUENT_MAGIC, schema_id))
            fastavro.schemaless_writer(buffer, SCHEMA, record)
        except EncodeError:
            raise
        except Exception as e:  # bad extras or values beyond what the schema's types hold
            raise EncodeError(f"oceanbase-avro: event does not fit the AvroRecord schema: {e}") from e
        data = buffer.getvalue()
        head = self._head()
        return record_id, data[:head] + data[head + 1:]  # id 0 is the one byte 0

    def frame(self, entries: Iterable) -> Iterator[EncodedMessage]:
        """One message per entry, its record id (the first field) put in: the event's own, else
        the previous id + 1, as OMS numbers its records."""
        last_id = 0
        head = self._head()
        for entry in entries:
            if entry is None:
                continue
            record_id, data = entry
            if record_id is None:
                record_id = last_id + 1
            last_id = record_id
            if not _INT64[0] <= record_id <= _INT64[1]:
                raise EncodeError(f"oceanbase-avro: event does not fit the AvroRecord schema: record id {record_id} "
                                  "is not an Avro long")
            yield EncodedMessage(None, data[:head] + _avro_long(record_id) + data[head:])

    def _head(self) -> int:
        return 5 if self.config["avro-framing"] == "confluent" else 0

    def _record(self, event: dict, record_id: int) -> dict:
        extras = dict(event.get("extras") or {})
        ms = event["execute_ts_ms"]
        if ms is None and event["commit_ts"] is not None:
            ms = physical_ms(event["commit_ts"])
        source = None
        if EXTRA + "sourceType" in extras:
            source = (_NS + "Source", {"sourceType": extras[EXTRA + "sourceType"],
                                       "version": extras.get(EXTRA + "sourceVersion", "")})
        record = {
            "id": record_id,
            "version": int(extras.get(EXTRA + "version", 1)),
            "operation": None, "xid": event["tx_id"], "txind": extras.get(EXTRA + "txind"),
            "position": extras.get(EXTRA + "position"),
            "timestamp": None if ms is None else ms // self.ms_per_unit,
            "source": source, "schemaName": event["database"], "tableName": event["table"],
            "fields": None, "pkIndexes": None,
            "ukIndexes": orjson.loads(extras[EXTRA + "ukIndexes"]) if EXTRA + "ukIndexes" in extras else None,
            "beforeImages": None, "afterImages": None, "sql": None,
            "tags": orjson.loads(extras[EXTRA + "tags"]) if EXTRA + "tags" in extras else None,
            "total": int(extras.get(EXTRA + "total", -1)), "index": int(extras.get(EXTRA + "index", -1)),
            "beforeImageBytes": b"", "afterImageBytes": b"",
        }
        if event["kind"] == Kind.DDL:
            record["operation"] = "DDL"
            record["sql"] = event["ddl_query"] or ""
            return record
        op = event["op"]
        if op not in _OP_NAMES:
            raise EncodeError(f"row event with op {op!r}")
        record["operation"] = _OP_NAMES[op]
        before, after = event["before"], event["after"]
        if op != Op.INSERT and not before:
            raise EncodeError(f"{op} event without the before image")
        if op != Op.DELETE and not after:
            raise EncodeError(f"{op} event without the after image")
        image = after if op != Op.DELETE else before
        names = [c["name"] for c in image]
        if op == Op.UPDATE and [c["name"] for c in before] != names:
            raise EncodeError("update event whose before and after images have different columns")
        codes = [type_code(c["mysql_type"], c["flags"]) for c in image]
        kept = extras.get(EXTRA + "dataTypeNumbers")
        if kept:
            kept_codes = [int(x) for x in kept.split(",")]
            if len(kept_codes) == len(codes):
                codes = kept_codes
        record["fields"] = [{"name": n, "dataTypeNumber": code} for n, code in zip(names, codes)]
        keys = event["key_columns"] or []
        try:
            record["pkIndexes"] = [names.index(k) for k in keys] or None
        except ValueError:
            raise EncodeError(f"key columns {keys} are not all in the row image {names}") from None
        if before is not None and op != Op.INSERT:
            record["beforeImages"] = [self._carry(c) for c in before]
        if after is not None and op != Op.DELETE:
            record["afterImages"] = [self._carry(c) for c in after]
        return record

    def _carry(self, col: dict) -> dict:
        """The ColumnValue for a canonical column: the structured member OMS uses for its type
        when it renders back to the same canonical bytes, else the plain string / bytes member."""
        mysql_type = parse_type(col["mysql_type"])
        info = type_info(col["mysql_type"], col["flags"])
        raw = col["value"]
        if raw is None:
            return {"type_info": info, "value": None}
        try:
            candidates = [self._structured(mysql_type, raw, col["label"])]
        except (ValueError, ArithmeticError, OverflowError, UnicodeDecodeError):
            candidates = []
        if col["label"] is not None:  # a label on a type without labels: EnumSetValue keeps it
            candidates.append((_NS + "EnumSetValue", {"value": col["label"], "defines": None}))
        for candidate in candidates:
            if candidate is None:
                continue
            try:
                rendered = self._render({"value": candidate}, self._render_type(mysql_type, candidate), "")
            except DecodeError:
                continue
            if rendered == (raw, col["label"]):
                return {"type_info": info, "value": candidate}
        if mysql_type.base in BINARY_BASES or mysql_type.base in ("geometry", "enum", "set"):
            # (a plain string in an ENUM / SET column would be read back as a label)
            return {"type_info": info, "value": ("bytes", raw)}
        try:
            return {"type_info": info, "value": ("string", raw.decode("utf-8"))}
        except UnicodeDecodeError:
            return {"type_info": info, "value": ("bytes", raw)}

    def _render_type(self, mysql_type: MySQLType, candidate) -> MySQLType:
        kind, value = _member(candidate)
        if kind == "EnumSetValue" and value["defines"] is not None:
            return MySQLType(mysql_type.base, tuple(value["defines"]))
        return mysql_type

    def _structured(self, mysql_type: MySQLType, raw: bytes, label: str | None):
        base = mysql_type.base
        if base in BINARY_BASES:
            return ("bytes", raw)
        if base == "geometry":
            return (_NS + "GeometryValue", {"srid": struct.unpack("<i", raw[:4])[0], "wkb": raw[4:]}) \
                if len(raw) >= 4 else None
        text = raw.decode("utf-8")
        if base in ("tinyint", "smallint", "mediumint", "int", "year", "bigint"):
            if not _INTEGER.match(text):
                return None
            number = int(text)
            if base != "bigint" and _INT32[0] <= number <= _INT32[1]:
                return ("int", number)
            return ("long", number) if _INT64[0] <= number <= _INT64[1] else None
        if base == "float":
            with np.errstate(over="ignore"):
                return ("float", float(np.float32(text)))
        if base == "double":
            return ("double", float(text))
        if base == "decimal":
            if len(mysql_type.params) < 1:
                return None
            precision = int(mysql_type.params[0])
            scale = int(mysql_type.params[1]) if len(mysql_type.params) > 1 else 0
            return (_NS + "DecimalObject", {"precision": precision, "scale": scale, "value": text})
        if base == "bit":
            if not mysql_type.params:
                return None
            return (_NS + "BitObject", {"bit_length": int(mysql_type.params[0]), "value": text})
        if base == "date":
            m = _DATE.match(text)
            return (_NS + "DateObject", {"year": int(m[1]), "month": int(m[2]), "day": int(m[3])}) if m else None
        if base == "time":
            m = _TIME.match(text)
            if not m:
                return None
            return (_NS + "TimeObject", {"negative": m[1] == "-", "hours": int(m[2]), "minutes": int(m[3]),
                                         "seconds": int(m[4]), "nanos": _nanos(m[5])})
        if base == "datetime":
            m = _DATETIME.match(text)
            if not m:
                return None
            return (_NS + "DateTimeObject", {
                "year": int(m[1]), "month": int(m[2]), "day": int(m[3]), "hours": int(m[4]),
                "minutes": int(m[5]), "seconds": int(m[6]), "nanos": _nanos(m[7])})
        if base == "timestamp":
            m = _DATETIME.match(text)
            if not m:
                return None
            local = dt.datetime(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]),
                                tzinfo=self.zone)
            seconds = (local - _EPOCH) // dt.timedelta(seconds=1)
            return (_NS + "TimestampObject", {"seconds": seconds, "nanos": _nanos(m[7]),
                                              "timezone": self.config["time-zone"]})
        if base in ("enum", "set"):
            labels = mysql_type.labels
            if labels is not None:
                name = enum_set_label(mysql_type, raw)
                return None if name is None else (_NS + "EnumSetValue", {"value": name, "defines": list(labels)})
            if label is not None:
                return (_NS + "EnumSetValue", {"value": label, "defines": None})
            if _INTEGER.match(text) and _INT64[0] <= int(text) <= _INT64[1]:
                number = int(text)
                return ("int", number) if _INT32[0] <= number <= _INT32[1] else ("long", number)
            return None
        return None


# ---------------------------------------------------------------------------- compiled encoder

def _avro_long(n: int) -> bytes:
    """Avro's encoding of a long: zigzag, then 7 bits a byte, low first."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# the ColumnValue kinds of oceanbase_avro_encode.rs (`K_*`, same order): which structured member
# `_structured` tries for a type; "text": none (the string / bytes fallback); "decline": Python
_ENCODE_KINDS = {k: i for i, k in enumerate((
    "text", "bytes", "geometry", "int", "bigint", "float", "double", "decimal", "bit", "date", "time", "datetime",
    "timestamp", "enum", "set", "decline"))}
_DATA_TYPES: list[str] = next(f for f in SCHEMA_JSON["fields"] if f["name"] == "beforeImages")["type"][1][
    "items"]["fields"][0]["type"]["symbols"]


@functools.lru_cache(maxsize=4096)
def _encode_rule(mysql_type: str | None, flags: int) -> tuple:
    """(DataType index, dataTypeNumber, kind, p1, p2, ENUM/SET labels) the compiled encoder
    writes a column of this type with (`_carry`'s choices, as `_ENCODE_KINDS`): p1, p2 are
    DECIMAL precision and scale or the BIT length."""
    parsed = parse_type(mysql_type)
    base = parsed.base
    kind, p1, p2, labels = "text", 0, 0, None
    if base in BINARY_BASES:
        kind = "bytes"
    elif base in ("geometry", "float", "double", "date", "time", "datetime", "timestamp"):
        kind = base
    elif base in ("tinyint", "smallint", "mediumint", "int", "year", "bigint"):
        kind = "bigint" if base == "bigint" else "int"
    elif base in ("enum", "set"):
        kind, labels = base, (list(parsed.labels) if parsed.labels is not None else None)
    elif base in ("decimal", "bit") and parsed.params:
        try:
            p1 = int(parsed.params[0])
            p2 = int(parsed.params[1]) if base == "decimal" and len(parsed.params) > 1 else 0
        except ValueError:
            pass  # `_structured` raises ValueError: no structured member
        else:
            kind = base
            if not (_INT32[0] <= p1 <= _INT32[1] and _INT32[0] <= p2 <= _INT32[1]):
                kind, p1, p2 = ("decline" if base == "decimal" else "text"), 0, 0
    return (_DATA_TYPES.index(type_info(mysql_type, flags)), type_code(mysql_type, flags), _ENCODE_KINDS[kind],
            p1, p2, labels)


# ---------------------------------------------------------------------------- value texts

_BINARY_FLAG = int(ColumnFlag.BINARY)
_KEY_FLAGS = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)


@functools.lru_cache(maxsize=4096)
def _enum_set_text(base: str, labels: tuple[str, ...]) -> str:
    return f"{base}(" + ",".join(quote_label(label) for label in labels) + ")"


@functools.lru_cache(maxsize=4096)
def _mysql_type(base: str, params: tuple[str, ...] = ()) -> MySQLType:
    """MySQLType(base, params), built once per distinct type (every record repeats them)."""
    return MySQLType(base, params)


def _says_binary(column_value: dict) -> bool:
    """A ColumnValue that states binary data: type_info BINARY / RAW, a StringObject in the
    binary charset, or Avro `bytes` under any type_info but STRING (OMS writes text in a
    charset other than UTF-8 as STRING bytes: that stays text)."""
    kind, value = _member(column_value["value"])
    if column_value["type_info"] in _BINARY_INFOS:
        return True
    if kind == "StringObject":
        return value["charsetName"].lower() == "binary"
    return isinstance(value, bytes) and column_value["type_info"] not in _TEXT_INFOS


def _member(value) -> tuple[str | None, object]:
    """(record name without namespace, or None for a primitive member; the value). fastavro's
    reader gives records as (full name, dict) and primitives bare; the encoder names both."""
    if isinstance(value, tuple):
        kind, inner = value
        return (None, inner) if kind in _PRIMITIVES else (kind[len(_NS):], inner)
    return None, value


def _decimal_text(text: str, scale: int) -> str:
    """DecimalObject.value with the column's scale: a plain number gets its missing fraction
    zeros; anything else that is a finite decimal is kept as written."""
    m = _PLAIN_DECIMAL.match(text)
    if m:
        digits = len(m.group(1) or "")
        if digits < scale:
            return text + ("" if m.group(1) else ".") + "0" * (scale - digits)
        return text
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise ValueError(f"DecimalObject value {text!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"DecimalObject value {text!r} is not a finite number")
    return text


def _date_text(year: int, month: int, day: int) -> str:
    if not (0 <= year <= 9999 and 0 <= month <= 12 and 0 <= day <= 31):
        raise ValueError(f"date {year}-{month}-{day} is out of range")
    return f"{year:04d}-{month:02d}-{day:02d}"


def _time_text(negative: bool, hours: int, minutes: int, seconds: int, nanos: int, max_hours: int = 838) -> str:
    if not (0 <= hours <= max_hours and 0 <= minutes < 60 and 0 <= seconds < 60 and 0 <= nanos < 1_000_000_000):
        raise ValueError(f"time {hours}:{minutes}:{seconds}.{nanos} is out of range")
    return f"{'-' if negative else ''}{hours:02d}:{minutes:02d}:{seconds:02d}{_fraction(nanos)}"


def _timestamp_text(seconds: int, nanos: int, zone: dt.tzinfo) -> str:
    if not 0 <= nanos < 1_000_000_000:
        raise ValueError(f"nanos {nanos} is out of range")
    local = (_EPOCH + dt.timedelta(seconds=seconds)).astimezone(zone)
    return (f"{local.year:04d}-{local.month:02d}-{local.day:02d} "
            f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}{_fraction(nanos)}")


# a ColumnValue member's stand-in for `_column_type`, which reads only its kind, whether it is
# bytes, and a record's charset / DECIMAL precision and scale / BIT length / ENUM-SET defines
_SAMPLES = {"null": None, "boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0, "bytes": b"",
            "string": ""}
_DETAILS = {"StringObject": lambda d: {"charsetName": d, "value": ""},
            "DecimalObject": lambda d: {"precision": d[0], "scale": d[1], "value": "0"},
            "BitObject": lambda d: {"bit_length": d, "value": "0"},
            "EnumSetValue": lambda d: {"value": "", "defines": d}}


def _sample_member(kind: str, detail):
    if kind in _SAMPLES:
        return _SAMPLES[kind]
    return (_NS + kind, _DETAILS.get(kind, lambda d: {})(detail))


def _compiled_rules(codec: OceanBaseAvroCodec):
    """(column, render, zone) for the compiled decoder, each this codec's own rule:
    `column(code, [(type_info, member, detail) of the after and before values])` is
    `_column_type` (None when it refuses), as (mysql_type, flags, binary, float, enum_set,
    labels, default dataTypeNumber, the parsed type); `render(parsed, member, payload)` is
    `_render` of an ENUM/SET value (None when refused); `zone(text or None: the codec's)` is the
    zone's fixed offset in seconds, None for zones with rules (their values go to the codec)."""
    def column(code: int, values: list):
        sample = [{"type_info": info, "value": _sample_member(kind, detail)} for info, kind, detail in values]
        try:
            mysql_type, parsed = codec._column_type(code, sample, "")
        except DecodeError:
            return None
        binary = parsed.base in BINARY_BASES
        flags = int(ColumnFlag.BINARY) if binary else 0
        return (mysql_type, flags, binary, parsed.base == "float", parsed.base in ("enum", "set"),
                parsed.labels is not None, type_code(mysql_type, flags), parsed)

    def render(parsed, kind: str, payload):
        member = (_NS + kind, {"value": payload[0], "defines": payload[1]}) if kind == "EnumSetValue" else payload
        try:
            return codec._render({"type_info": "NULL", "value": member}, parsed, "")
        except DecodeError:
            return None

    def zone(text):
        try:
            tz = codec.zone if text is None else parse_zone(text)
        except Exception:  # noqa: BLE001 - not a zone: the codec names it
            return None
        return int(tz.utcoffset(None).total_seconds()) if isinstance(tz, dt.timezone) else None

    return column, render, zone
