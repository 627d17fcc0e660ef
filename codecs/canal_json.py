"""canal-json: TiCDC's Canal-JSON (with the `_tidb` extension and WATERMARK events) and the
official Alibaba Canal flat message, which TiCDC's format copies.

Decoding reads both flavours (multi-row `data`, partial `old`, `gtid`, mysqlType with
parameters). Encoding writes TiCDC's flavour byte for byte as its encoder does: key order
`id, database, table, pkNames, isDdl, type, es, ts, sql, sqlType, mysqlType, old, data, _tidb`
for DML and `... sqlType, mysqlType, data, old, _tidb` for DDL and watermarks, Go's JSON
escaping, binary values as ISO-8859-1 characters, value-dependent sqlType promotion.

With `flat-message-flavor=canal` the encoder writes Alibaba Canal's own flat message instead
(canal_common.flat_message_json: fastjson key order, `old` with only the changed columns,
mysqlType with parameters, Canal's sqlType codes, es in whole seconds, several rows of one
table and transaction in one message) and the decoder turns Canal's Java float text ("1.0E10")
into canonical text; see docs/protocols/canal-protobuf.md.

Deliberate deviations from TiCDC (documented in docs/protocols/canal-json.md):
* `ts` (the build time, a wall clock in TiCDC) is the decoded message's `ts` when the event
  came from canal-json, else `es`, so re-encoding is reproducible.
* `mysqlType` keys follow column order (TiCDC iterates a Go map: random order).
"""

from __future__ import annotations

import functools

import re
from collections.abc import Iterable, Iterator

import orjson

from . import canal_common, claim_check, compression
from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .ddl_types import classify
from .errors import ConfigError, DecodeError, EncodeError
from .events import ColumnFlag, Kind, Op, new_event
from .gojson import quote
from .mysql_types import (
    BINARY_BASES,
    MySQLType,
    enum_set_label,
    parse_type,
)
from .tso import physical_ms

WATERMARK_TYPE = "TIDB_WATERMARK"
_DML_TYPES = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
_DML_NAMES = {op: name for name, op in _DML_TYPES.items()}

# java.sql.Types codes TiCDC writes per MySQL base type (binary types are BLOB, 2004).
JAVA_SQL_TYPES = {
    "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5,
    "float": 7, "double": 8, "decimal": 3,
    "date": 91, "datetime": 93, "timestamp": 93, "time": 92, "year": 12,
    "char": 1, "varchar": 12, "tinytext": 2005, "text": 2005, "mediumtext": 2005, "longtext": 2005,
    "binary": 2004, "varbinary": 2004, "tinyblob": 2004, "blob": 2004, "mediumblob": 2004,
    "longblob": 2004, "enum": 4, "set": -7, "bit": -7, "json": 12, "geometry": -2, "null": 0,
}
# Unsigned values above the signed range are promoted to the next wider Java type.
_UNSIGNED_PROMOTION = {
    "tinyint": (127, 5),
    "smallint": (32767, 4),
    "int": (2147483647, -5),
    "bigint": (9223372036854775807, 3),
}

# Canal's DDL `type` for each TiDB action (as TiCDC's convertDdlEventType maps them).
_CANAL_DDL_TYPES = {
    "create table": "CREATE",
    "rename table": "RENAME", "rename tables": "RENAME",
    "add index": "CINDEX", "add foreign key": "CINDEX", "add primary key": "CINDEX",
    "drop index": "DINDEX", "drop foreign key": "DINDEX", "drop primary key": "DINDEX",
    "drop table": "ERASE",
    "truncate table": "TRUNCATE",
    **dict.fromkeys(
        [
            "add column", "drop column", "modify column", "rebase auto_increment ID",
            "set default value", "modify table comment", "rename index", "add partition",
            "drop partition", "modify table charset and collate", "truncate partition",
            "alter index visibility", "alter table multi-schema change",
            "alter table reorganize partition", "alter table partition by",
            "alter table remove partitioning", "add multi-columns", "drop multi-columns",
        ],
        "ALTER",
    ),
}


def canal_ddl_type(ddl_type: str | None) -> str:
    return _CANAL_DDL_TYPES.get(ddl_type or "", "QUERY")


def java_sql_type(mysql_type: MySQLType, flags: int, value: bytes | None) -> int:
    """TiCDC's sqlType: by base type, promoted for unsigned values beyond the signed range."""
    code = JAVA_SQL_TYPES.get(mysql_type.base, 12)
    if flags & ColumnFlag.BINARY and mysql_type.base in ("char", "varchar", "text", "tinytext",
                                                         "mediumtext", "longtext"):
        code = 2004
    unsigned = mysql_type.unsigned or bool(flags & ColumnFlag.UNSIGNED)
    promotion = _UNSIGNED_PROMOTION.get(mysql_type.base)
    if unsigned and promotion and value is not None:
        limit, wider = promotion
        try:
            if int(value) > limit:
                code = wider
        except ValueError:
            pass
    return code


def is_binary(mysql_type: MySQLType, type_text: str | None, flags: int = 0) -> bool:
    # TiCDC's rule: the type string contains "blob" or "binary"; Canal's adds the spatial
    # types (their canonical value is the raw SRID + WKB bytes), as canal_common.is_binary.
    if mysql_type.base in BINARY_BASES or mysql_type.base in canal_common.SPATIAL:
        return True
    text = (type_text or "").lower()
    return "blob" in text or "binary" in text or bool(flags & ColumnFlag.BINARY and mysql_type.base in ("char", "varchar"))


def short_type(mysql_type: MySQLType) -> str:
    """TiCDC's mysqlType without content-compatible: base name, `unsigned`, `zerofill`."""
    text = mysql_type.base
    if mysql_type.unsigned and text not in ("bit", "year"):
        text += " unsigned"
    if mysql_type.zerofill and text not in ("bit", "year"):
        text += " zerofill"
    return text


@register
class CanalJsonCodec(Codec):
    name = "canal-json"
    compiled_class = "CanalJsonDecoder"
    description = "TiCDC Canal-JSON (optionally with the _tidb extension) and Canal flat-message JSON"
    options = (
        Option("enable-tidb-extension", False, "add _tidb.commitTs to DML/DDL and send TIDB_WATERMARK events", bool),
        Option("content-compatible", False, "official-Canal content: mysqlType with parameters; implies only-output-updated-columns", bool),
        Option("only-output-updated-columns", False, "UPDATE `old` holds only the columns that changed", bool),
        Option("large-message-handle-compression", "none", "every value is compressed this way (no marker in the message)", str, compression.NAMES),
        Option("flat-message-flavor", "ticdc", "ticdc: TiCDC's Canal-JSON; canal: the flat message Alibaba Canal writes (canal.mq.flatMessage=true)", str, ("ticdc", "canal")),
        *claim_check.OPTIONS,
        canal_common.TZ_OPTION,
    )
    ddl_placement = "first"
    watermark_placement = "all"

    def compiled_decoder(self, extension):
        return extension.CanalJsonDecoder(compiled_type_rule, self.config["flat-message-flavor"] == "canal")

    compiled_encoder_class = "CanalJsonEncoder"

    def compiled_encoder(self, extension):
        """TiCDC's flavour only (the canal flavour groups rows into messages: Python)."""
        config = self.config
        if config["flat-message-flavor"] != "ticdc":
            return None
        compatible = bool(config["content-compatible"])
        rule = lambda type_text, flags: _encode_rule(type_text, flags, compatible)  # noqa: E731
        return extension.CanalJsonEncoder(rule, bool(config["enable-tidb-extension"]),
                                          compatible or bool(config["only-output-updated-columns"]))

    def compiled_entry(self, encoded: bytes) -> list[EncodedMessage]:
        return [EncodedMessage(None, compression.compress(self.config["large-message-handle-compression"], encoded))]

    def compiled_values(self) -> bool:
        return self.config["large-message-handle-compression"] == "none"

    def compiled_entries(self, encoded: list) -> list:
        if self.config["large-message-handle-compression"] != "none":
            return super().compiled_entries(encoded)
        return [None if value is None else [EncodedMessage(None, value)] for value in encoded]

    def validate(self) -> None:
        if self.config["flat-message-flavor"] == "canal" and self.config["enable-tidb-extension"]:
            raise ConfigError("flat-message-flavor=canal writes Alibaba Canal's message, which has no _tidb "
                              "extension: drop enable-tidb-extension")

    # ---------------------------------------------------------------- decode
    def decode(self, record: KafkaRecord) -> list[dict]:
        if record.value is None:
            raise self.error("record has no value (a tombstone); canal-json always has one")
        raw = compression.decompress(self.config["large-message-handle-compression"], record.value, self.name)
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise self.error(f"value is not JSON: {e}", byte_offset=getattr(e, "pos", None)) from e
        if not isinstance(msg, dict):
            raise self.error(f"value is a JSON {type(msg).__name__}, not an object")
        tidb = msg.get("_tidb")
        if tidb is not None and not isinstance(tidb, dict):
            raise self.error("_tidb is not an object", field="_tidb")
        tidb = tidb or {}
        if tidb.get("onlyHandleKey"):
            raise self.error(
                "message carries only the handle-key columns (TiCDC large-message-handle-option="
                "handle-key-only); the full row is not in the archive", field="_tidb.onlyHandleKey")
        if tidb.get("claimCheckLocation"):
            return claim_check.decode_claimed(self, record, tidb["claimCheckLocation"], field="_tidb.claimCheckLocation")
        kind_type = msg.get("type")
        extras = {}
        if msg.get("ts") is not None:
            extras["canal.ts"] = str(msg["ts"])
        if msg.get("id"):
            if not isinstance(msg["id"], (int, str)) or isinstance(msg["id"], bool):
                # a batch id is a long; anything else cannot be written back (the compiled decoder
                # hands such messages to this one)
                raise self.error(f"id is {msg['id']!r}, not an integer", field="id")
            extras["canal.id"] = str(msg["id"])
        es = _int_or_none(msg.get("es"), self, "es")
        commit_ts = _int_or_none(tidb.get("commitTs"), self, "_tidb.commitTs")

        if msg.get("isDdl") is True:
            query = msg.get("sql")
            if not isinstance(query, str):
                raise self.error("DDL message has no sql", field="sql")
            ddl_type = classify(query)
            if kind_type != canal_ddl_type(ddl_type):
                extras["canal.type"] = str(kind_type)
            return [
                new_event(
                    Kind.DDL, commit_ts=commit_ts, execute_ts_ms=es, database=msg.get("database") or None,
                    table=msg.get("table") or None, ddl_query=query, ddl_type=ddl_type,
                    tx_id=msg.get("gtid") or None, extras=extras or None,
                )
            ]
        if kind_type == WATERMARK_TYPE:
            watermark = _int_or_none(tidb.get("watermarkTs"), self, "_tidb.watermarkTs")
            if watermark is None:
                raise self.error("TIDB_WATERMARK without _tidb.watermarkTs", field="_tidb.watermarkTs")
            return [new_event(Kind.WATERMARK, watermark_ts=watermark, execute_ts_ms=es, extras=extras or None)]

        op = _DML_TYPES.get(kind_type)
        if op is None:
            raise self.error(f"unknown event type {kind_type!r}", field="type")
        data = msg.get("data")
        if not isinstance(data, list) or not data:
            raise self.error("DML message has no data rows", field="data")
        old = msg.get("old")
        if op == Op.UPDATE and not isinstance(old, list):
            raise self.error("UPDATE message has no old rows", field="old")
        mysql_types = msg.get("mysqlType") or {}
        if not isinstance(mysql_types, dict):
            raise self.error("mysqlType is not an object", field="mysqlType")
        pk_names = msg.get("pkNames")
        if pk_names is not None and not isinstance(pk_names, list):
            raise self.error("pkNames is not a list", field="pkNames")
        pk_set = set(pk_names or ())
        database, table = msg.get("database"), msg.get("table")
        tx_id = msg.get("gtid") or None
        events = []
        for i, row in enumerate(data):
            image = self._image(row, mysql_types, pk_set, f"data[{i}]")
            before = after = None
            if op == Op.INSERT:
                after = image
            elif op == Op.DELETE:
                before = image
            else:
                after = image
                if i >= len(old):
                    raise self.error(f"UPDATE has {len(data)} data rows but {len(old)} old rows", field="old")
                before = self._old_image(old[i], image, mysql_types, pk_set, f"old[{i}]")
            events.append(
                new_event(
                    Kind.ROW, op=op, commit_ts=commit_ts, execute_ts_ms=es, database=database,
                    table=table, key_columns=list(pk_names) if pk_names is not None else None,
                    before=before, after=after, tx_id=tx_id, extras=dict(extras) if extras else None,
                )
            )
        return events

    def _column(self, name: str, value, type_text: str | None, pk_set: set, where: str) -> dict:
        type_lower, flags, binary, mysql_type, java_float = _column_rule(type_text, name in pk_set)
        if value is None:
            data = None
        elif isinstance(value, str):
            if binary:
                try:
                    data = value.encode("latin-1")
                except UnicodeEncodeError as e:
                    raise self.error(
                        f"binary column {name!r} holds character U+{ord(value[e.start]):04X}, "
                        "outside ISO-8859-1", field=f"{where}.{name}") from None
            else:
                if java_float and self.config["flat-message-flavor"] == "canal":
                    try:  # Canal writes Java's Float/Double.toString ("1.0E10")
                        value = canal_common.canonical_float(value, mysql_type.base == "float")
                    except ValueError:
                        raise self.error(f"column {name!r} value {value!r} is not a {mysql_type.base}",
                                         field=f"{where}.{name}") from None
                data = value.encode("utf-8", "surrogatepass")
        else:
            raise self.error(f"column {name!r} value {value!r} is not a string", field=f"{where}.{name}")
        return {
            "name": name,
            "mysql_type": type_lower,
            "flags": flags,
            "value": data,
            "label": enum_set_label(mysql_type, data) if mysql_type.labels else None,
        }

    def _image(self, row, mysql_types: dict, pk_set: set, where: str) -> list[dict]:
        if not isinstance(row, dict):
            raise self.error("row is not an object", field=where)
        return [self._column(n, v, mysql_types.get(n), pk_set, where) for n, v in row.items()]

    def _old_image(self, old_row, new_image: list[dict], mysql_types: dict, pk_set: set, where: str) -> list[dict]:
        """`old` may hold only the changed columns (Canal, only-output-updated-columns):
        a missing column was unchanged and takes its value from `data`."""
        if not isinstance(old_row, dict):
            raise self.error("old row is not an object", field=where)
        image = []
        for col in new_image:
            name = col["name"]
            if name in old_row:
                image.append(self._column(name, old_row[name], mysql_types.get(name), pk_set, where))
            else:
                image.append(col)
        known = {c["name"] for c in new_image}
        for name, value in old_row.items():
            if name not in known:
                image.append(self._column(name, value, mysql_types.get(name), pk_set, where))
        return image

    # ---------------------------------------------------------------- encode
    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        compress = self.config["large-message-handle-compression"]
        if self.config["flat-message-flavor"] == "canal":
            rows_and_ddl = (e for e in events if e["kind"] != Kind.WATERMARK)
            for group in canal_common.group_flat(rows_and_ddl):
                text = canal_common.flat_message_json(group, self._canal_type_name)
                yield EncodedMessage(None, compression.compress(compress, text.encode("utf-8")))
            return
        for event in events:
            kind = event["kind"]
            if kind == Kind.ROW:
                text = self._dml_json(event)
            elif kind == Kind.DDL:
                text = self._ddl_json(event)
            elif kind == Kind.WATERMARK:
                if not self.config["enable-tidb-extension"]:
                    continue  # TiCDC sends watermarks only with the extension
                text = self._watermark_json(event)
            else:
                raise EncodeError(f"canal-json cannot encode event kind {kind!r}")
            yield EncodedMessage(None, compression.compress(compress, text.encode("utf-8")))

    def _times(self, event: dict) -> tuple[int, str]:
        es = event["execute_ts_ms"]
        if es is None:
            ts = event["commit_ts"] if event["kind"] != Kind.WATERMARK else event["watermark_ts"]
            es = physical_ms(ts or 0)
        extras = _extras(event)
        return es, extras.get("canal.ts", str(es))

    def _head(self, event: dict, is_ddl: bool, type_name: str, database, table, pk_json: str) -> str:
        es, ts = self._times(event)
        extras = _extras(event)
        return (
            f'{{"id":{int(extras.get("canal.id", 0))},"database":{quote(database or "")},'
            f'"table":{quote(table or "")},"pkNames":{pk_json},"isDdl":{"true" if is_ddl else "false"},'
            f'"type":{quote(type_name)},"es":{es},"ts":{ts}'
        )

    def _dml_json(self, event: dict) -> str:
        op = event["op"]
        before, after = event["before"], event["after"]
        if op not in _DML_NAMES:
            raise EncodeError(f"row event with op {op!r}")
        image = before if op == Op.DELETE else after
        if not image:
            raise EncodeError(f"{op} event without the {'before' if op == Op.DELETE else 'after'} image")
        keys = event["key_columns"]
        pk_json = "null" if keys is None else "[" + ",".join(quote(k) for k in keys) + "]"
        compatible = self.config["content-compatible"]
        columns = [_ColumnText(c, compatible) for c in image]
        sql_type = "{" + ",".join(f"{_quote_name(c.name)}:{c.java_type}" for c in columns) + "}"
        mysql_type = "{" + ",".join(f"{_quote_name(c.name)}:{_quote_name(c.type_text)}" for c in columns) + "}"
        parts = [
            self._head(event, False, _DML_NAMES[op], event["database"], event["table"], pk_json),
            ',"sql":""',
            f',"sqlType":{sql_type},"mysqlType":{mysql_type}',
        ]
        if op == Op.UPDATE:
            if not before:
                raise EncodeError("update event without the before image")
            old_columns = [_ColumnText(c, compatible) for c in before]
            if compatible or self.config["only-output-updated-columns"]:
                new_values = {c["name"]: (c["value"], c["mysql_type"]) for c in after}
                old_columns = [c for c in old_columns if new_values.get(c.name) != (c.raw, c.raw_type)]
            parts.append(f',"old":{_rows_json(old_columns)},"data":{_rows_json(columns)}')
        else:
            parts.append(f',"old":null,"data":{_rows_json(columns)}')
        if self.config["enable-tidb-extension"] and event["commit_ts"] is not None:
            parts.append(f',"_tidb":{{"commitTs":{event["commit_ts"]}}}')
        parts.append("}")
        return "".join(parts)

    @staticmethod
    def _canal_type_name(event: dict) -> str:
        return _extras(event).get("canal.type") or canal_ddl_type(event["ddl_type"] or classify(event["ddl_query"]))

    def _ddl_json(self, event: dict) -> str:
        type_name = self._canal_type_name(event)
        text = (
            self._head(event, True, type_name, event["database"], event["table"], "null")
            + f',"sql":{quote(event["ddl_query"] or "")},"sqlType":null,"mysqlType":null,"data":null,"old":null'
        )
        if self.config["enable-tidb-extension"] and event["commit_ts"] is not None:
            text += f',"_tidb":{{"commitTs":{event["commit_ts"]}}}'
        return text + "}"

    def _watermark_json(self, event: dict) -> str:
        return (
            self._head(event, False, WATERMARK_TYPE, "", "", "null")
            + ',"sql":"","sqlType":null,"mysqlType":null,"data":null,"old":null'
            + f',"_tidb":{{"watermarkTs":{event["watermark_ts"]}}}}}'
        )


class _ColumnText:
    """A canonical column rendered as canal-json text."""

    __slots__ = ("name", "raw", "raw_type", "type_text", "java_type", "json_value")

    def __init__(self, col: dict, compatible: bool):
        self.name = col["name"]
        self.raw = raw = col["value"]
        self.raw_type = col["mysql_type"]
        self.type_text, code, promotion, binary = _encode_rule(col["mysql_type"], col["flags"] or 0, compatible)
        if promotion is not None and raw is not None:
            try:
                if int(raw) > promotion[0]:
                    code = promotion[1]
            except ValueError:
                pass
        self.java_type = code
        if raw is None:
            self.json_value = "null"
        elif binary:
            self.json_value = quote(raw.decode("latin-1"))
        else:
            self.json_value = quote(raw.decode("utf-8", "replace"))


@functools.lru_cache(maxsize=8192)
def _encode_rule(type_text: str | None, flags: int, compatible: bool) -> tuple:
    """What a column's (type, flags) imply for its text, once per distinct pair (the encode
    runs per column of every row): the mysqlType text, the sqlType code before the unsigned
    promotion that depends on the value (`java_sql_type`'s rule), that promotion's (limit,
    code) or None, and whether the value is binary."""
    mysql_type = parse_type(type_text)
    code = java_sql_type(mysql_type, flags, None)
    unsigned = mysql_type.unsigned or bool(flags & ColumnFlag.UNSIGNED)
    promotion = _UNSIGNED_PROMOTION.get(mysql_type.base) if unsigned else None
    return ((type_text or "") if compatible else short_type(mysql_type), code, promotion,
            is_binary(mysql_type, type_text, flags))


_QUOTED = re.compile(r"('(?:[^'\\]|\\.|'')*')")


@functools.lru_cache(maxsize=8192)
def _column_rule(type_text: str | None, is_key: bool) -> tuple:
    """What a column's type string implies, computed once per (type, key) pair: the hot
    decode path then only converts the value."""
    mysql_type = parse_type(type_text)
    binary = is_binary(mysql_type, type_text)
    flags = 0
    if binary:
        flags |= int(ColumnFlag.BINARY)
    if mysql_type.unsigned:
        flags |= int(ColumnFlag.UNSIGNED)
    if is_key:
        flags |= int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
    return _lower_type(type_text), flags, binary, mysql_type, mysql_type.base in ("float", "double")


def _lower_type(text: str | None) -> str | None:
    """The canonical mysql_type is lower case (OceanBase writes "VARCHAR(255)"); quoted ENUM/SET
    labels keep their case."""
    if not text:
        return text
    parts = _QUOTED.split(text)
    return "".join(p if i % 2 else p.lower() for i, p in enumerate(parts))


def _rows_json(columns: list[_ColumnText]) -> str:
    return "[{" + ",".join(f"{_quote_name(c.name)}:{c.json_value}" for c in columns) + "}]"


# column names and type texts: the same few strings on every row
_quote_name = functools.lru_cache(maxsize=16384)(quote)


def _extras(event: dict) -> dict:
    extras = event.get("extras")
    if not extras:
        return {}
    return extras if isinstance(extras, dict) else dict(extras)


def _int_or_none(value, codec: Codec, field: str) -> int | None:
    """An integer field that must fit the canonical int64 columns."""
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(codec.name, f"{field} is {value!r}, not an integer", field=field)
    if not 0 <= value < 1 << 63:
        raise DecodeError(codec.name, f"{field} is {value}, outside 0..2^63-1", field=field)
    return value


def compiled_type_rule(type_text: str | None) -> tuple:
    """The rule of a type text in the shape the compiled decoder caches (once per type):
    (type_lower, flags, binary, java float (0 no, 1 DOUBLE, 2 FLOAT), ENUM/SET labels, is_enum)."""
    type_lower, flags, binary, mysql_type, java_float = _column_rule(type_text, False)
    labels = mysql_type.labels
    java = (2 if mysql_type.base == "float" else 1) if java_float else 0
    return type_lower, flags, binary, java, list(labels) if labels else None, mysql_type.base == "enum"
