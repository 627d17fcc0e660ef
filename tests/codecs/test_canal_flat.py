"""Alibaba Canal's own conventions: the flat message of canal-json's `flat-message-flavor=canal`,
the partition hash (codecs/dispatch.py), Java's float text and Canal's sqlType codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import ConfigError, KafkaRecord, decode_record, get_codec
from cdc_codecs.canal_common import (
    canal_sql_type,
    canonical_float,
    fastjson_quote,
    java_float_text,
)
from cdc_codecs.dispatch import canal_event_partition, canal_partition, java_string_hash
from cdc_codecs.events import CONTENT_FIELDS, Kind, Op, new_event

from .. import strategies
from ..support.canonical import column_flags

CANAL = {"flat-message-flavor": "canal"}



def record(value: bytes, offset: int = 3) -> KafkaRecord:
    return KafkaRecord("flat", 0, offset, None, None, value, (), "s3://b/flat/0/x.json")


def values(image) -> dict:
    return {c["name"]: c["value"] for c in image}


# ----------------------------------------------------------------------------- golden

# What Canal's MQMessageUtils + fastjson write for a two-row UPDATE: keys in alphabetical
# order, `old` per row with the columns changed in this or an earlier row (row 1 repeats
# `name`, unchanged there), sqlType of the last row (note is NULL there: LONGVARBINARY -4),
# BIGINT UNSIGNED beyond 2^63 as DECIMAL (3), binary bytes as ISO-8859-1 characters.
GOLDEN_UPDATE = (
    '{"data":[{"id":"1","name":"a\\u0000b","price":"1.50","raw":"\\u0000\u00ff","ratio":"1.0E10",'
    '"big":"18446744073709551615","color":"2","note":"x"},'
    '{"id":"2","name":"same","price":"3.00","raw":"","ratio":"0.5","big":"1","color":"1","note":null}],'
    '"database":"shop","es":1700000000000,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9","id":42,'
    '"isDdl":false,"mysqlType":{"id":"int(11)","name":"varchar(16)","price":"decimal(10,2)",'
    '"raw":"varbinary(4)","ratio":"float","big":"bigint(20) unsigned","color":"enum(\'red\',\'green\')",'
    '"note":"text"},"old":[{"name":"x"},{"name":"same","price":"2.00"}],"pkNames":["id"],"sql":"",'
    '"sqlType":{"id":4,"name":12,"price":3,"raw":2004,"ratio":7,"big":-5,"color":4,"note":-4},'
    '"table":"orders","ts":1700000000456,"type":"UPDATE"}'
)
GOLDEN_DDL = (
    '{"data":null,"database":"shop","es":1700000000000,"gtid":"","id":42,"isDdl":true,'
    '"mysqlType":null,"old":null,"pkNames":null,"sql":"CREATE TABLE t (id INT)","sqlType":null,'
    '"table":"t","ts":1700000000456,"type":"CREATE"}'
)


def test_golden_canal_update_decodes_and_reencodes_byte_exact():
    codec = get_codec("canal-json", CANAL)
    events = decode_record(codec, record(GOLDEN_UPDATE.encode()))
    assert [e["op"] for e in events] == [Op.UPDATE, Op.UPDATE]
    first, second = events
    assert values(first["after"])["raw"] == b"\x00\xff"
    assert values(first["after"])["ratio"] == b"10000000000"  # Java's 1.0E10, canonical
    assert values(first["after"])["big"] == b"18446744073709551615"
    assert values(first["before"])["name"] == b"x" and values(first["before"])["price"] == b"1.50"
    assert values(second["before"])["price"] == b"2.00" and values(second["after"])["note"] is None
    assert first["after"][6]["label"] == "green"
    assert first["key_columns"] == ["id"] and first["tx_id"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9"
    assert first["execute_ts_ms"] == 1700000000000 and first["commit_ts"] is None
    [message] = list(codec.encode(events, topic="flat", partition=0))
    assert message.value.decode() == GOLDEN_UPDATE
    assert json.loads(message.value)  # and it is JSON


def test_golden_canal_ddl():
    codec = get_codec("canal-json", CANAL)
    [event] = decode_record(codec, record(GOLDEN_DDL.encode()))
    assert event["kind"] == Kind.DDL and event["ddl_type"] == "create table"
    [message] = list(codec.encode([event], topic="flat", partition=0))
    assert message.value.decode() == GOLDEN_DDL


def test_canal_flavour_groups_rows_of_one_table_and_transaction():
    def row(i, ts, table="t"):
        return new_event(Kind.ROW, op=Op.INSERT, commit_ts=ts, execute_ts_ms=ts >> 18, database="d", table=table,
                         key_columns=["id"], after=[{"name": "id", "mysql_type": "int", "flags": 10,
                                                     "value": str(i).encode(), "label": None}])
    ts1, ts2 = 429918007904436226, 429918007904436999
    stream = [row(1, ts1), row(2, ts1), row(3, ts1, "u"), row(4, ts2, "u")]
    codec = get_codec("canal-json", CANAL)
    messages = [json.loads(m.value) for m in codec.encode(stream, topic="flat", partition=0)]
    assert [[r["id"] for r in m["data"]] for m in messages] == [["1", "2"], ["3"], ["4"]]
    assert messages[0]["es"] == (ts1 >> 18) // 1000 * 1000  # whole seconds
    assert messages[0]["old"] is None and messages[0]["pkNames"] == ["id"]
    # TiCDC's flavour (the default) stays one message per row
    assert len(list(get_codec("canal-json").encode(stream, topic="flat", partition=0))) == 4


def test_canal_flavour_refuses_the_tidb_extension():
    with pytest.raises(ConfigError, match="no _tidb"):
        get_codec("canal-json", {**CANAL, "enable-tidb-extension": "true"})
    with pytest.raises(ConfigError, match="ticdc, canal"):
        get_codec("canal-json", {"flat-message-flavor": "alibaba"})


def as_canal_flat(event: dict) -> dict | None:
    """What Canal's flat message carries: no commit ts, es in whole seconds (kept as `ts` too),
    no position, flags from type and key, key names only when there are some."""
    if event["kind"] == Kind.WATERMARK:
        return None
    expected = {k: event[k] for k in CONTENT_FIELDS}
    es = event["execute_ts_ms"]
    if es is None:
        es = event["commit_ts"] >> 18
    es = es // 1000 * 1000
    expected.update(commit_ts=None, execute_ts_ms=es, extras={"canal.ts": str(es)})
    if event["kind"] == Kind.ROW:
        keys = set(event["key_columns"] or ())
        main = event["before"] if event["op"] == Op.DELETE else event["after"]
        expected["key_columns"] = [c["name"] for c in main if c["name"] in keys] or None
        for side in ("before", "after"):
            if expected[side] is not None:
                expected[side] = [
                    {**c, "flags": column_flags(c["mysql_type"], c["name"] in keys)}
                    for c in expected[side]
                ]
    return expected


@settings(max_examples=200, deadline=None)
@given(events=st.lists(strategies.events(), min_size=1, max_size=6))
def test_round_trip_of_any_event_through_the_canal_flavour(events):
    codec = get_codec("canal-json", CANAL)
    messages = list(codec.encode(events, topic="t", partition=0))
    decoded = []
    for offset, message in enumerate(messages):
        these = decode_record(codec, KafkaRecord("t", 0, offset, None, None, message.value))
        [again] = list(codec.encode(these, topic="t", partition=0))
        assert again.value == message.value
        decoded.extend(these)
    expected = [e for e in map(as_canal_flat, events) if e is not None]
    assert [{k: d[k] for k in CONTENT_FIELDS} for d in decoded] == expected


# ----------------------------------------------------------------------------- partition hash

@pytest.mark.parametrize(
    "text, java_hash",
    [
        ("", 0), ("a", 97), ("abc", 96354), ("test", 3556498), ("Aa", 2112), ("BB", 2112),
        ("shop", 3529462),                 # ((115*31+104)*31+111)*31+112
        ("orders", -1008770331),           # 3286196965 - 2^32
        ("中文", 646394),                   # 0x4E2D*31 + 0x6587
        ("😀", 1772899),                    # surrogates 0xD83D*31 + 0xDE00
        ("hello world", 1794106052), ("Hello World", -862545276),
        ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE
    ],
)
def test_java_string_hash(text, java_hash):
    assert java_string_hash(text) == java_hash


def test_canal_partition_against_hand_computed_values():
    # "shop" ^ "1" = 0x35DAF6 ^ 0x31 = 0x35DAC7 = 3529415; 3529415 % 3 = 2
    assert canal_partition("shop", "t", ["1"], 3) == 2
    # without canal.mq.database.hash: "1".hashCode() = 49; 49 % 3 = 1
    assert canal_partition("shop", "t", ["1"], 3, hash_by_database=False) == 1
    # a NULL key value counts as ""; XOR of two equal hashes cancels
    assert canal_partition("", "t", [None], 7) == 0
    assert canal_partition("", "t", ["Aa", "BB"], 7) == 0
    # Math.abs(Integer.MIN_VALUE) stays negative; Java's % then abs: -(2^31 % 5) -> 3
    assert canal_partition("", "t", ["polygenelubricants"], 5) == 3
    # "Hello World" = -862545276: abs 862545276 % 4 = 0
    assert canal_partition("", "t", ["Hello World"], 4, hash_by_database=False) == 0
    # a table rule hashes the table name alone: abs(-1008770331) % 7 = 2
    assert canal_partition("shop", "orders", ["1"], 7, table_hash=True) == 2
    assert canal_partition("shop", "orders", ["1"], 7, ddl=True) == 0
    with pytest.raises(ValueError):
        canal_partition("d", "t", [], 0)


def test_canal_event_partition_renders_values_as_canal_does():
    event = new_event(Kind.ROW, op=Op.DELETE, database="shop", table="t", key_columns=["id", "b"],
                      before=[{"name": "id", "mysql_type": "int", "flags": 10, "value": b"1", "label": None},
                              {"name": "b", "mysql_type": "varbinary(4)", "flags": 11, "value": b"\xff", "label": None},
                              {"name": "v", "mysql_type": "text", "flags": 0, "value": b"x", "label": None}])
    h = java_string_hash("shop") ^ java_string_hash("1") ^ java_string_hash("\u00ff")
    assert canal_event_partition(event, 5) == abs(h) % 5
    assert canal_event_partition(new_event(Kind.DDL, ddl_query="DROP TABLE t"), 5) == 0


# ----------------------------------------------------------------------------- values

@pytest.mark.parametrize(
    "canonical, single, java",
    [
        ("1", False, "1.0"), ("1.5", False, "1.5"), ("10000000", False, "1.0E7"), ("1234567", False, "1234567.0"),
        ("0.001", False, "0.001"), ("0.0001", False, "1.0E-4"), ("-0", False, "-0.0"), ("0", True, "0.0"),
        ("100000000000000000000000", False, "1.0E23"), ("0.1", True, "0.1"),
        ("340282350000000000000000000000000000000", True, "3.4028235E38"),
        ("0.000000000000000000000000000000000000000000001", True, "1.4E-45"),  # Float.MIN_VALUE
        ("3.141592653589793", False, "3.141592653589793"), ("-0.00000000025", False, "-2.5E-10"),
    ],
)
def test_java_float_text(canonical, single, java):
    assert java_float_text(canonical, single) == java
    assert canonical_float(java, single) == canonical


@settings(max_examples=300, deadline=None)
@given(value=st.floats(allow_nan=False, allow_infinity=False), single=st.booleans())
def test_java_float_text_round_trips(value, single):
    with np.errstate(over="ignore"):
        typed = np.float32(value) if single else np.float64(value)
    if not np.isfinite(typed):
        return
    canonical = np.format_float_positional(typed, unique=True, trim="-")
    java = java_float_text(canonical, single)
    assert (np.float32(java) if single else float(java)) == typed
    assert canonical_float(java, single) == canonical


@pytest.mark.parametrize(
    "mysql_type, value, code",
    [
        ("tinyint(4)", b"127", -6), ("tinyint(3) unsigned", b"255", 5), ("smallint(5) unsigned", b"40000", 4),
        ("mediumint(8) unsigned", b"9000000", 4), ("int(10) unsigned", b"4294967295", -5),
        ("bigint(20) unsigned", b"18446744073709551615", 3), ("bigint(20) unsigned", None, -5),
        ("float", b"1", 7), ("double", b"1", 8), ("decimal(10,2)", b"1.00", 3), ("bit(8)", b"1", -7),
        ("char(4)", b"a", 1), ("varchar(4)", b"a", 12), ("text", b"a", 2005), ("text", None, -4),
        ("tinytext", None, -3), ("blob", b"a", 2004), ("longblob", None, -4), ("varbinary(4)", b"a", 2004),
        ("varbinary(4)", None, -3), ("binary(4)", None, -2), ("enum('a')", b"1", 4), ("enum('a')", None, 4),
        ("set('a')", b"1", -7), ("set('a')", None, -2), ("json", b"{}", 12), ("json", None, 1111),
        ("date", b"2020-01-01", 91), ("datetime(3)", b"2020-01-01 00:00:00.000", 93), ("timestamp", None, 93),
        ("time", b"00:00:00", 92), ("year(4)", b"2020", 12), ("geometry", b"\x00", 2004), ("geometry", None, -2),
    ],
)
def test_canal_sql_types(mysql_type, value, code):
    assert canal_sql_type(mysql_type, value) == code


def test_fastjson_quote():
    assert fastjson_quote('a"\\/\b\f\n\r\t\x00\x1f\x7f\x9f\xa0é中\u2028<&>') == (
        '"a\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001F\\u007F\\u009F\xa0é中\\u2028<&>"'
    )


def test_rows_with_different_column_types_are_not_merged_into_one_message():
    """A flat message has one `mysqlType` per column: rows without time or position (nothing
    else tells them apart) whose types differ go to separate messages, or the later row's type
    would overwrite the earlier one's (found by the conversion matrix: oceanbase-avro's
    `decimal(10,4)` / `decimal` for a NULL)."""
    def insert(mysql_type: str, value: bytes | None) -> dict:
        return new_event(Kind.ROW, op=Op.INSERT, database="shop", table="t", key_columns=["id"], after=[
            {"name": "id", "mysql_type": "int", "flags": 0, "value": b"1", "label": None},
            {"name": "d", "mysql_type": mysql_type, "flags": 0, "value": value, "label": None}])

    rows = [insert("decimal(10,4)", b"1.5000"), insert("decimal", None), insert("decimal", None)]
    codec = get_codec("canal-json", CANAL)
    messages = list(codec.encode(rows, topic="t", partition=0))
    assert len(messages) == 2  # the two rows of one type still share a message
    decoded = [e for offset, m in enumerate(messages) for e in decode_record(codec, record(m.value, offset))]
    assert [e["after"][1]["mysql_type"] for e in decoded] == ["decimal(10,4)", "decimal", "decimal"]
