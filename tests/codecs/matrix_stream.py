"""The rich canonical event stream the conversion matrix pushes through every protocol pair.

TiCDC-shaped (every event has a commit ts and `execute_ts_ms = commit_ts >> 18`, not whole
seconds), with rows of every MySQL type at their edges: BIGINT UNSIGNED 2^64-1, DECIMAL with
30 integer digits, float32/float64 extremes, arbitrary bytes (NUL, 0xFF, invalid UTF-8), text
with controls, quotes, `<>&`, U+2028 and astral characters, NULLs, zero dates, ENUM/SET with
labels (a comma and a quote inside labels), BIT(64); INSERT, UPDATE, a primary-key-changing
UPDATE, DELETE, a keyless table, table- and database-level DDL, watermarks.
"""

from __future__ import annotations

from cdc_codecs.events import ColumnFlag as F
from cdc_codecs.events import Kind, Op, new_event

U64_MAX = (1 << 64) - 1
KEY = F.PRIMARY_KEY | F.HANDLE_KEY
N = F.NULLABLE

# name, mysql_type, flags, label function (value -> label) or None
ENUM = "enum('a','b','c,d','it''s','é')"
SET = "set('a','b','x','y')"
COLUMNS = [
    ("id", "bigint", KEY),
    ("c_tinyint", "tinyint", N),
    ("c_tinyint_u", "tinyint unsigned", N | F.UNSIGNED),
    ("c_smallint", "smallint", N),
    ("c_mediumint_u", "mediumint unsigned", N | F.UNSIGNED),
    ("c_int", "int", N | F.MULTIPLE_KEY),
    ("c_int_u", "int unsigned", N | F.UNSIGNED),
    ("c_bigint", "bigint", N),
    ("c_bigint_u", "bigint unsigned", N | F.UNSIGNED | F.UNIQUE_KEY),
    ("c_float", "float", N),
    ("c_double", "double", N),
    ("c_decimal", "decimal(10,4)", N),
    ("c_decimal_wide", "decimal(40,10)", N),
    ("c_date", "date", N),
    ("c_datetime", "datetime", N),
    ("c_datetime6", "datetime(6)", N),
    ("c_timestamp", "timestamp", N),
    ("c_time", "time", N),
    ("c_year", "year", N),
    ("c_char", "char(16)", N),
    ("c_varchar", "varchar(64)", N),
    ("c_text", "text", N),
    ("c_binary", "binary(8)", N | F.BINARY),
    ("c_varbinary", "varbinary(64)", N | F.BINARY),
    ("c_blob", "blob", N | F.BINARY),
    ("c_enum", ENUM, N),
    ("c_set", SET, N),
    ("c_bit", "bit(64)", N | F.UNSIGNED),
    ("c_json", "json", N),
]
ENUM_LABELS = ("a", "b", "c,d", "it's", "é")
SET_LABELS = ("a", "b", "x", "y")

# Values per row: canonical text (str) or raw bytes; None is SQL NULL.
ROW_A = {
    "id": "1", "c_tinyint": "-128", "c_tinyint_u": "255", "c_smallint": "-32768", "c_mediumint_u": "16777215",
    "c_int": "-2147483648", "c_int_u": "4294967295", "c_bigint": "-9223372036854775808",
    "c_bigint_u": str(U64_MAX), "c_float": "340282350000000000000000000000000000000", "c_double": "-17976931348623157" + "0" * 292,
    "c_decimal": "-123456.7890", "c_decimal_wide": "123456789012345678901234567890.0123456789",
    "c_date": "2024-02-29", "c_datetime": "1000-01-01 00:00:00", "c_datetime6": "9999-12-31 23:59:59.999999",
    "c_timestamp": "2038-01-19 03:14:07", "c_time": "-838:59:59", "c_year": "2155",
    "c_char": "it's \"quoted\"", "c_varchar": "<a href=\"x\">&amp;</a>\u2028\u2029 é中文😀",
    "c_text": "line\nbreak\ttab\r\x00\x01\x1f\x7f end",
    "c_binary": b"\x00\xff\x80\x7f\n\"\\\x00", "c_varbinary": bytes(range(256))[::7],
    "c_blob": b"\xc3\x28 not utf-8 \xed\xa0\x80 \x00\xfe\xff",
    "c_enum": "4", "c_set": "11", "c_bit": str(U64_MAX), "c_json": '{"k": "v", "n": [1, 2.5, null]}',
}
ROW_B = {
    "id": "2", "c_tinyint": "0", "c_tinyint_u": "0", "c_smallint": "32767", "c_mediumint_u": "0",
    "c_int": "0", "c_int_u": "0", "c_bigint": "9223372036854775807", "c_bigint_u": "9223372036854775808",
    "c_float": "0.1", "c_double": "0.0000001", "c_decimal": "0.0000", "c_decimal_wide": "-0.0000000001",
    "c_date": "0000-00-00", "c_datetime": "0000-00-00 00:00:00", "c_datetime6": "2020-02-02 02:02:02.000100",
    "c_timestamp": "1970-01-01 00:00:01", "c_time": "00:00:00", "c_year": "1901",
    "c_char": "", "c_varchar": "", "c_text": "", "c_binary": b"\x00" * 8, "c_varbinary": b"", "c_blob": b"",
    "c_enum": "3", "c_set": "0", "c_bit": "0", "c_json": "[]",
}
ROW_A2 = {  # ROW_A updated: some values change, some become NULL
    **ROW_A, "c_tinyint": "127", "c_float": "-1.5", "c_double": "0." + "0" * 323 + "5", "c_decimal": "999999.9999",
    "c_varchar": None, "c_blob": b"\x01\x02", "c_enum": "5", "c_set": "15", "c_bit": "65", "c_text": None,
    "c_datetime6": "2001-01-01 01:01:01.000001", "c_time": "12:34:56",
}
ROW_NULLS = {name: None for name, _, _ in COLUMNS} | {"id": "3"}

KEYLESS_COLUMNS = [("note", "varchar(32)", N), ("amount", "decimal(12,2)", N), ("seen", "datetime", N)]


def _label(mysql_type: str, value: bytes | None) -> str | None:
    if value is None:
        return None
    if mysql_type == ENUM:
        return ENUM_LABELS[int(value) - 1]
    if mysql_type == SET:
        bits = int(value)
        return ",".join(label for i, label in enumerate(SET_LABELS) if bits >> i & 1)
    return None


def image(values: dict, columns=COLUMNS) -> list[dict]:
    out = []
    for name, mysql_type, flags in columns:
        value = values[name]
        if isinstance(value, str):
            value = value.encode()
        out.append({"name": name, "mysql_type": mysql_type, "flags": int(flags), "value": value,
                    "label": _label(mysql_type, value)})
    return out


BASE_TS = 449_500_000_000_000_000  # a 2024 TSO


def stream(shape: str = "ticdc") -> list[dict]:
    """A fresh copy of the canonical stream (events are mutable dicts).

    shape "ticdc": commit ts on every event, `execute_ts_ms = commit_ts >> 18`, watermarks.
    shape "canal": as Canal produces it: no commit ts, whole-second event times, binlog
    positions `[file, offset, 0]`, the GTID as `tx_id`, no watermarks.
    shape "untimed": no commit ts, event time or position at all (as tests/strategies.py
    draws events with commit_ts=False), no watermarks."""
    events = []
    ts = BASE_TS
    offset = 4

    def tick() -> dict:
        nonlocal ts, offset
        ts += (1234 << 18) + 7  # 1.234 s later, logical part non-zero
        if shape == "ticdc":
            return {"commit_ts": ts, "execute_ts_ms": ts >> 18}
        if shape == "untimed":
            return {}
        offset += 377
        return {"execute_ts_ms": (ts >> 18) // 1000 * 1000, "position": [12, offset, 0],
                "tx_id": f"3e11fa47-71ca-11e1-9e33-c80aa9429562:{offset}"}

    def ddl(query: str, ddl_type: str, table: str | None = "all_types", database: str = "shop"):
        events.append(new_event(Kind.DDL, **tick(), database=database, table=table, ddl_query=query, ddl_type=ddl_type))

    def row(op: str, before=None, after=None, table="all_types", columns=COLUMNS, keys=("id",)):
        events.append(new_event(
            Kind.ROW, op=op, **tick(), database="shop", table=table, key_columns=list(keys),
            before=None if before is None else image(before, columns),
            after=None if after is None else image(after, columns),
        ))

    def watermark():
        if shape != "ticdc":
            return
        events.append(new_event(Kind.WATERMARK, watermark_ts=ts, execute_ts_ms=ts >> 18))

    ddl("CREATE DATABASE `shop`", "create schema", table=None)
    ddl("CREATE TABLE `all_types` (`id` BIGINT PRIMARY KEY, `c_tinyint` TINYINT)", "create table")
    row(Op.INSERT, after=ROW_A)
    row(Op.INSERT, after=ROW_B)
    row(Op.INSERT, after=ROW_NULLS)
    watermark()
    row(Op.UPDATE, before=ROW_A, after=ROW_A2)
    row(Op.UPDATE, before=ROW_B, after={**ROW_B, "id": "200"})  # the primary key changes
    row(Op.UPDATE, before=ROW_NULLS, after={**ROW_B, "id": "3"})  # every NULL gets a value
    row(Op.DELETE, before=ROW_A2)
    ddl("ALTER TABLE `all_types` ADD COLUMN `c9` INT DEFAULT 5", "add column")
    # TiDB before 6.2 named this action "add multi-columns"; the query says multi-schema change
    ddl("ALTER TABLE `all_types` ADD COLUMN `c10` INT, ADD COLUMN `c11` INT", "add multi-columns")
    watermark()
    ddl("CREATE TABLE `order-log` (`note` VARCHAR(32), `amount` DECIMAL(12,2), `seen` DATETIME)", "create table",
        table="order-log")
    keyless = dict(table="order-log", columns=KEYLESS_COLUMNS, keys=())
    row(Op.INSERT, after={"note": "first", "amount": "-0.50", "seen": "2024-01-01 00:00:00"}, **keyless)
    row(Op.UPDATE, before={"note": "first", "amount": "-0.50", "seen": "2024-01-01 00:00:00"},
        after={"note": "second", "amount": None, "seen": "2024-01-01 00:00:00"}, **keyless)
    # TiDB's Go strings may hold bytes that are not UTF-8 (a latin-1 'é' here)
    row(Op.INSERT, after={"note": b"caf\xe9", "amount": "1.00", "seen": None}, **keyless)
    row(Op.DELETE, before={"note": "second", "amount": None, "seen": "2024-01-01 00:00:00"}, **keyless)
    ddl("TRUNCATE TABLE `all_types`", "truncate table")
    ddl("DROP TABLE `order-log`", "drop table", table="order-log")
    watermark()
    return events
