"""canal-json: golden vectors from the seed (docs/seeds: ticdc-canal-json.txt), Canal's flat
message, errors, and hypothesis round trips."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import ConfigError, DecodeError, KafkaRecord, decode_record, get_codec
from cdc_codecs.canal_json import canal_ddl_type, java_sql_type, short_type
from cdc_codecs.events import CONTENT_FIELDS, ColumnFlag, Kind, Op
from cdc_codecs.mysql_types import parse_type

from .. import strategies

TIDB = {"enable-tidb-extension": "true"}


def record(value: bytes | str, offset: int = 7) -> KafkaRecord:
    if isinstance(value, str):
        value = value.encode()
    return KafkaRecord("orders", 0, offset, 1700000000000, None, value, (), "s3://b/orders/0/x.jsonl.gz")


def compact(text: str) -> bytes:
    """The seed's pretty-printed JSON as TiCDC writes it: no spaces, same key order."""
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False).encode()


def reencode(codec, events) -> bytes:
    messages = list(codec.encode(events, topic="orders", partition=0))
    assert len(messages) == 1 and messages[0].key is None
    return messages[0].value


# ----------------------------------------------------------------------------- seed examples

SEED_DDL = """{
    "id": 0, "database": "test", "table": "", "pkNames": null, "isDdl": true, "type": "QUERY",
    "es": 1639633094670, "ts": 1639633095489, "sql": "drop database if exists test",
    "sqlType": null, "mysqlType": null, "data": null, "old": null,
    "_tidb": {"commitTs": 163963309467037594}
}"""

SEED_INSERT = """{
    "id": 0, "database": "test", "table": "tp_int", "pkNames": ["id"], "isDdl": false,
    "type": "INSERT", "es": 1639633141221, "ts": 1639633142960, "sql": "",
    "sqlType": {"c_bigint": -5, "c_int": 4, "c_mediumint": 4, "c_smallint": 5, "c_tinyint": -6, "id": 4},
    "mysqlType": {"c_bigint": "bigint", "c_int": "int", "c_mediumint": "mediumint",
                  "c_smallint": "smallint", "c_tinyint": "tinyint", "id": "int"},
    "data": [{"c_bigint": "9223372036854775807", "c_int": "2147483647", "c_mediumint": "8388607",
              "c_smallint": "32767", "c_tinyint": "127", "id": "2"}],
    "old": null,
    "_tidb": {"commitTs": 163963314122145239}
}"""

SEED_WATERMARK = """{
    "id": 0, "database": "", "table": "", "pkNames": null, "isDdl": false,
    "type": "TIDB_WATERMARK", "es": 1640007049196, "ts": 1640007050284, "sql": "",
    "sqlType": null, "mysqlType": null, "data": null, "old": null,
    "_tidb": {"watermarkTs": 429918007904436226}
}"""

TP_INT_TYPES = {"c_bigint": "bigint", "c_int": "int", "c_mediumint": "mediumint",
                "c_smallint": "smallint", "c_tinyint": "tinyint", "id": "int"}
TP_INT_SQL = {"c_bigint": -5, "c_int": 4, "c_mediumint": 4, "c_smallint": 5, "c_tinyint": -6, "id": 4}
TP_INT_NEW = {"c_bigint": "9223372036854775807", "c_int": "0", "c_mediumint": "8388607",
              "c_smallint": "32767", "c_tinyint": "0", "id": "2"}
TP_INT_OLD = {"c_bigint": "9223372036854775807", "c_int": "2147483647", "c_mediumint": "8388607",
              "c_smallint": "32767", "c_tinyint": "127", "id": "2"}


def tp_int_update(old: dict) -> str:
    return json.dumps({
        "id": 0, "database": "test", "table": "tp_int", "pkNames": ["id"], "isDdl": False,
        "type": "UPDATE", "es": 1639633141221, "ts": 1639633142960, "sql": "",
        "sqlType": TP_INT_SQL, "mysqlType": TP_INT_TYPES, "old": [old], "data": [TP_INT_NEW],
        "_tidb": {"commitTs": 163963314122145239},
    }, separators=(",", ":"))


def values(image) -> dict:
    return {c["name"]: c["value"] for c in image}


def test_seed_ddl_decodes_and_reencodes_byte_exact():
    codec = get_codec("canal-json", TIDB)
    [event] = decode_record(codec, record(SEED_DDL))
    assert event["kind"] == Kind.DDL
    assert event["database"] == "test" and event["table"] is None
    assert event["ddl_query"] == "drop database if exists test"
    assert event["ddl_type"] == "drop schema"
    assert event["commit_ts"] == 163963309467037594
    assert event["execute_ts_ms"] == 1639633094670
    assert (event["topic"], event["partition"], event["offset"]) == ("orders", 0, 7)
    assert reencode(codec, [event]) == compact(SEED_DDL)


def test_seed_watermark_decodes_and_reencodes_byte_exact():
    codec = get_codec("canal-json", TIDB)
    [event] = decode_record(codec, record(SEED_WATERMARK))
    assert event["kind"] == Kind.WATERMARK
    assert event["watermark_ts"] == 429918007904436226
    assert event["database"] is None and event["table"] is None
    assert reencode(codec, [event]) == compact(SEED_WATERMARK)


def test_watermarks_are_only_sent_with_the_tidb_extension():
    [event] = decode_record(get_codec("canal-json", TIDB), record(SEED_WATERMARK))
    assert list(get_codec("canal-json").encode([event], topic="t", partition=0)) == []


def test_seed_insert_decodes_every_value():
    codec = get_codec("canal-json", TIDB)
    [event] = decode_record(codec, record(SEED_INSERT))
    assert (event["kind"], event["op"]) == (Kind.ROW, Op.INSERT)
    assert event["commit_ts"] == 163963314122145239
    assert event["key_columns"] == ["id"]
    assert event["before"] is None
    assert values(event["after"]) == {
        "c_bigint": b"9223372036854775807", "c_int": b"2147483647", "c_mediumint": b"8388607",
        "c_smallint": b"32767", "c_tinyint": b"127", "id": b"2",
    }
    id_column = event["after"][-1]
    assert id_column["flags"] == ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY


def test_seed_insert_reencodes_to_the_same_content_with_old_before_data():
    codec = get_codec("canal-json", TIDB)
    [event] = decode_record(codec, record(SEED_INSERT))
    value = reencode(codec, [event])
    assert orjson.loads(value) == orjson.loads(SEED_INSERT)
    # TiCDC's DML key order (its encoder writes `old` before `data`; the seed's docs don't).
    assert list(orjson.loads(value)) == [
        "id", "database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql", "sqlType",
        "mysqlType", "old", "data", "_tidb",
    ]


def test_update_with_all_old_columns_round_trips_byte_exact():
    codec = get_codec("canal-json", TIDB)
    text = tp_int_update(TP_INT_OLD)
    [event] = decode_record(codec, record(text))
    assert event["op"] == Op.UPDATE
    assert values(event["before"])["c_int"] == b"2147483647"
    assert values(event["after"])["c_int"] == b"0"
    assert reencode(codec, [event]) == text.encode()


def test_official_canal_update_old_holds_only_changed_columns():
    codec = get_codec("canal-json", TIDB)
    text = tp_int_update({"c_int": "2147483647", "c_tinyint": "127"})
    [event] = decode_record(codec, record(text))
    assert values(event["before"]) == {k: v.encode() for k, v in TP_INT_OLD.items()}
    # re-encoded with only-output-updated-columns, `old` is partial again, byte for byte
    partial = get_codec("canal-json", {**TIDB, "only-output-updated-columns": "true"})
    assert reencode(partial, [event]) == text.encode()
    # and the default (TiCDC) writes every old column
    assert orjson.loads(reencode(codec, [event]))["old"] == [TP_INT_OLD]


def test_delete_reads_data_both_before_and_after_v5_4():
    codec = get_codec("canal-json", TIDB)
    doc = json.loads(SEED_INSERT)
    doc["type"] = "DELETE"
    for old in (None, doc["data"]):  # v5.4.0+: old null; earlier: old duplicates data
        doc["old"] = old
        [event] = decode_record(codec, record(json.dumps(doc)))
        assert event["op"] == Op.DELETE and event["after"] is None
        assert values(event["before"])["c_bigint"] == b"9223372036854775807"


def test_seed_binary_rendering_is_byte_exact():
    raw = bytes([5, 7, 10, 15, 36, 50, 43, 99, 120, 60, 38, 255, 254, 45, 55, 70])
    expected = '"c_varbinary":"\\u0005\\u0007\\n\\u000f$2+cx\\u003c\\u0026ÿþ-7F"'.encode()
    doc = json.loads(SEED_INSERT)
    doc["mysqlType"] = {"id": "int", "c_varbinary": "varbinary"}
    doc["sqlType"] = {"id": 4, "c_varbinary": 2004}
    doc["data"] = [{"id": "2", "c_varbinary": raw.decode("latin-1")}]
    codec = get_codec("canal-json", TIDB)
    [event] = decode_record(codec, record(json.dumps(doc)))
    assert values(event["after"])["c_varbinary"] == raw
    assert event["after"][1]["flags"] & ColumnFlag.BINARY
    out = reencode(codec, [event])
    assert expected in out
    [again] = decode_record(codec, record(out))
    assert values(again["after"])["c_varbinary"] == raw


def test_official_canal_mysql_types_with_parameters_give_enum_and_set_labels():
    doc = {
        "data": [{"id": "1", "c_decimal": "123.4560", "c_char": "abc", "c_binary": "abc\u0000",
                  "c_enum": "1", "c_set": "3", "c_bit": "65"}],
        "database": "test", "es": 1700000000000, "id": 3, "isDdl": False,
        "mysqlType": {"id": "int", "c_decimal": "decimal(10, 4)", "c_char": "char(16)",
                      "c_binary": "binary(4)", "c_enum": "enum('a','b','c')",
                      "c_set": "set('a','b','c')", "c_bit": "bit(64)"},
        "old": None, "pkNames": ["id"], "sql": "", "sqlType": {}, "table": "t",
        "ts": 1700000000123, "type": "INSERT", "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23",
    }
    [event] = decode_record(get_codec("canal-json"), record(json.dumps(doc)))
    cols = {c["name"]: c for c in event["after"]}
    assert cols["c_enum"]["value"] == b"1" and cols["c_enum"]["label"] == "a"
    assert cols["c_set"]["value"] == b"3" and cols["c_set"]["label"] == "a,b"
    assert cols["c_bit"]["value"] == b"65"
    assert cols["c_binary"]["value"] == b"abc\x00"
    assert cols["c_decimal"]["mysql_type"] == "decimal(10, 4)"
    assert event["commit_ts"] is None and event["execute_ts_ms"] == 1700000000000
    assert event["tx_id"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    assert event["extras"]["canal.id"] == "3"


def test_official_canal_multi_row_message_is_one_event_per_row():
    doc = {
        "id": 9, "database": "shop", "table": "t", "pkNames": ["id"], "isDdl": False,
        "type": "UPDATE", "es": 1700000000000, "ts": 1700000000001, "sql": "",
        "sqlType": {"id": 4, "v": 12}, "mysqlType": {"id": "int(11)", "v": "varchar(8)"},
        "data": [{"id": "1", "v": "x"}, {"id": "2", "v": "y"}],
        "old": [{"v": "a"}, {"v": None}],
    }
    events = decode_record(get_codec("canal-json"), record(json.dumps(doc)))
    assert [e["event_index"] for e in events] == [0, 1]
    assert [values(e["before"]) for e in events] == [{"id": b"1", "v": b"a"}, {"id": b"2", "v": None}]
    assert [values(e["after"]) for e in events] == [{"id": b"1", "v": b"x"}, {"id": b"2", "v": b"y"}]


@pytest.mark.parametrize(
    "mysql_type, value, code",
    [
        ("tinyint", "127", -6), ("tinyint unsigned", "127", -6), ("tinyint unsigned", "128", 5),
        ("smallint unsigned", "32767", 5), ("smallint unsigned", "32768", 4),
        ("mediumint unsigned", "16777215", 4),
        ("int unsigned", "2147483647", 4), ("int unsigned", "2147483648", -5),
        ("bigint unsigned", "9223372036854775807", -5), ("bigint unsigned", "9223372036854775808", 3),
        ("bigint unsigned", "18446744073709551615", 3), ("bigint unsigned", None, -5),
        ("float", "1.5", 7), ("double", "1.5", 8), ("decimal", "1.50", 3), ("char", "a", 1),
        ("varchar", "a", 12), ("binary", "a", 2004), ("varbinary", "a", 2004), ("text", "a", 2005),
        ("longtext", "a", 2005), ("blob", "a", 2004), ("date", "2020-01-01", 91),
        ("datetime", "2020-01-01 00:00:00", 93), ("timestamp", "2020-01-01 00:00:00", 93),
        ("time", "12:00:00", 92), ("year", "2020", 12), ("enum", "1", 4), ("set", "1", -7),
        ("bit", "1", -7), ("json", "{}", 12),
    ],
)
def test_sql_type_mapping_with_value_dependent_unsigned_promotion(mysql_type, value, code):
    assert java_sql_type(parse_type(mysql_type), 0, None if value is None else value.encode()) == code


@pytest.mark.parametrize(
    "query, canal_type",
    [
        ("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE"),
        ("DROP TABLE t", "ERASE"),
        ("TRUNCATE TABLE t", "TRUNCATE"),
        ("RENAME TABLE a TO b", "RENAME"),
        ("RENAME TABLE a TO b, c TO d", "RENAME"),
        ("CREATE INDEX i ON t (c)", "CINDEX"),
        ("ALTER TABLE t ADD INDEX i (c)", "CINDEX"),
        ("ALTER TABLE t ADD PRIMARY KEY (id)", "CINDEX"),
        ("ALTER TABLE t DROP INDEX i", "DINDEX"),
        ("ALTER TABLE t ADD COLUMN c INT", "ALTER"),
        ("ALTER TABLE t DROP COLUMN c", "ALTER"),
        ("ALTER TABLE t MODIFY COLUMN c BIGINT", "ALTER"),
        ("ALTER TABLE t ADD COLUMN a INT, ADD COLUMN b INT", "ALTER"),
        ("ALTER TABLE t COMMENT = 'x'", "ALTER"),
        ("CREATE DATABASE d", "QUERY"),
        ("DROP DATABASE IF EXISTS d", "QUERY"),
        ("CREATE VIEW v AS SELECT 1", "QUERY"),
    ],
)
def test_ddl_type_mapping(query, canal_type):
    from cdc_codecs.ddl_types import classify

    assert canal_ddl_type(classify(query)) == canal_type


def test_a_canal_type_that_disagrees_with_the_query_survives_reencoding():
    doc = json.loads(SEED_DDL)
    doc["type"] = "ALTER"  # an older producer's choice for a schema-level statement
    codec = get_codec("canal-json", TIDB)
    [event] = decode_record(codec, record(json.dumps(doc)))
    assert reencode(codec, [event]) == compact(json.dumps(doc))


def test_content_compatible_keeps_type_parameters_and_forces_partial_old():
    text = tp_int_update(TP_INT_OLD).replace('"int"', '"int(11)"')
    [event] = decode_record(get_codec("canal-json", TIDB), record(text))
    compatible = get_codec("canal-json", {**TIDB, "content-compatible": "true"})
    out = orjson.loads(reencode(compatible, [event]))
    assert out["mysqlType"]["c_int"] == "int(11)"
    assert out["old"] == [{"c_int": "2147483647", "c_tinyint": "127"}]
    plain = orjson.loads(reencode(get_codec("canal-json", TIDB), [event]))
    assert plain["mysqlType"]["c_int"] == "int"


def test_compressed_values_need_the_option():
    lz4 = get_codec("canal-json", {**TIDB, "large-message-handle-compression": "lz4"})
    [event] = decode_record(get_codec("canal-json", TIDB), record(SEED_DDL))
    value = reencode(lz4, [event])
    assert not value.startswith(b"{")
    assert decode_record(lz4, record(value))[0]["ddl_query"] == event["ddl_query"]
    with pytest.raises(DecodeError, match="not JSON"):
        decode_record(get_codec("canal-json", TIDB), record(value))
    with pytest.raises(DecodeError, match="not lz4-compressed"):
        decode_record(lz4, record(SEED_DDL))


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"not json", "value is not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"isDdl": false, "type": "UPSERT", "data": [{}]}', "unknown event type 'UPSERT'"),
        (b'{"isDdl": false, "type": "INSERT", "data": []}', "no data rows"),
        (b'{"isDdl": false, "type": "UPDATE", "data": [{"a": "1"}]}', "no old rows"),
        (b'{"isDdl": false, "type": "INSERT", "data": [{"a": 1}], "mysqlType": {"a": "int"}}', "is not a string"),
        (b'{"isDdl": false, "type": "INSERT", "data": [{"a": "\\u4e2d"}], "mysqlType": {"a": "blob"}}', "outside ISO-8859-1"),
        (b'{"isDdl": false, "type": "TIDB_WATERMARK", "_tidb": {}}', "without _tidb.watermarkTs"),
        (b'{"isDdl": true, "type": "QUERY"}', "DDL message has no sql"),
        (b'{"isDdl": false, "type": "INSERT", "data": [{"a": "1"}], "_tidb": {"commitTs": -1}}', "outside 0..2^63-1"),
        (b'{"isDdl": false, "type": "INSERT", "data": [{"a": "1"}], "_tidb": {"onlyHandleKey": true}}', "only the handle-key"),
        # a batch id that is no integer could not be written back (found by the mutation test)
        (b'{"id": -4.514154119301842e+16, "isDdl": false, "type": "INSERT", "data": [{"a": "1"}]}', "id is -4.5"),
    ],
)
def test_bad_values_raise_a_decode_error_naming_protocol_and_location(value, reason):
    with pytest.raises(DecodeError) as info:
        decode_record(get_codec("canal-json", TIDB), record(value))
    message = str(info.value)
    assert reason in message
    assert message.startswith("canal-json: ")
    assert "object s3://b/orders/0/x.jsonl.gz" in message and "offset 7" in message


def test_tombstone_is_a_decode_error():
    with pytest.raises(DecodeError, match="no value"):
        decode_record(get_codec("canal-json"), KafkaRecord("t", 0, 1, None, b"k", None))


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        get_codec("canal-json", {"enable-tidb-extention": "true"})
    assert "enable-tidb-extension" in str(info.value) and "content-compatible" in str(info.value)
    with pytest.raises(ConfigError, match="expected true or false"):
        get_codec("canal-json", {"enable-tidb-extension": "maybe"})


# ----------------------------------------------------------------------------- round trips

def as_canal_json(event: dict, compatible: bool) -> dict:
    """What canal-json can carry of a canonical event: flags derive from the type and the
    key, es/ts are the event time, type parameters only with content-compatible."""
    expected = {k: event[k] for k in CONTENT_FIELDS}
    es = event["execute_ts_ms"]
    if es is None:
        es = (event["commit_ts"] if event["kind"] != Kind.WATERMARK else event["watermark_ts"]) >> 18
    expected["execute_ts_ms"] = es
    expected["extras"] = {"canal.ts": str(es)}
    keys = set(event["key_columns"] or ())
    for side in ("before", "after"):
        if expected[side] is None:
            continue
        image = []
        for c in expected[side]:
            mysql_type = parse_type(c["mysql_type"])
            type_text = c["mysql_type"] if compatible else short_type(mysql_type)
            flags = 0
            if mysql_type.is_binary:
                flags |= ColumnFlag.BINARY
            if mysql_type.unsigned:
                flags |= ColumnFlag.UNSIGNED
            if c["name"] in keys:
                flags |= ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY
            label = c["label"] if compatible else None
            image.append({**c, "mysql_type": type_text, "flags": int(flags), "label": label})
        expected[side] = image
    return expected


@settings(max_examples=300, deadline=None)
@given(events=st.lists(strategies.events(), min_size=1, max_size=5), compatible=st.booleans())
def test_round_trip_of_any_event(events, compatible):
    options = {**TIDB, "content-compatible": str(compatible)}
    codec = get_codec("canal-json", options)
    messages = list(codec.encode(events, topic="t", partition=3))
    assert len(messages) == len(events)
    for offset, (event, message) in enumerate(zip(events, messages)):
        [decoded] = decode_record(codec, KafkaRecord("t", 3, offset, None, message.key, message.value))
        assert {k: decoded[k] for k in CONTENT_FIELDS} == as_canal_json(event, compatible)
        # and encoding the decoded event again gives the same bytes
        assert next(codec.encode([decoded], topic="t", partition=3)).value == message.value


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(list('\x00\x1f\n\r\t"\\<>&\u2028\u2029\x7f'))))
def test_quote_fast_path_escapes_as_the_table(text):
    """quote() skips the translate when nothing needs escaping: the same text either way."""
    from cdc_codecs.gojson import _ESCAPES, quote

    assert quote(text) == '"' + text.translate(_ESCAPES) + '"'


@settings(max_examples=300, deadline=None)
@given(type_text=st.sampled_from([None, "", "int", "int unsigned", "bigint(20) unsigned", "tinyint unsigned zerofill",
                                  "mediumint unsigned", "smallint", "varchar(10)", "char(3)", "text", "blob",
                                  "varbinary(8)", "binary(2)", "geometry", "bit(3)", "year", "enum('a','B')",
                                  "decimal(10,2) unsigned", "double", "json", "datetime(3)"]),
       flags=st.integers(0, 255), compatible=st.booleans(),
       value=st.none() | st.sampled_from([b"0", b"-1", b"127", b"255", b"65535", b"4294967296",
                                          b"18446744073709551615", b"9223372036854775808", b"x", b"\xff"]))
def test_column_text_rule_cache_matches_the_uncached_rules(type_text, flags, compatible, value):
    """The encoder's per-(type, flags) cache gives what the rules give for every value."""
    from cdc_codecs.canal_json import _ColumnText, is_binary
    from cdc_codecs.gojson import _ESCAPES

    col = _ColumnText({"name": "c", "value": value, "mysql_type": type_text, "flags": flags}, compatible)
    mysql_type = parse_type(type_text)
    assert col.java_type == java_sql_type(mysql_type, flags, value)
    assert col.type_text == ((type_text or "") if compatible else short_type(mysql_type))
    if value is None:
        assert col.json_value == "null"
    else:
        text = value.decode("latin-1" if is_binary(mysql_type, type_text, flags) else "utf-8", "replace")
        assert col.json_value == '"' + text.translate(_ESCAPES) + '"'
