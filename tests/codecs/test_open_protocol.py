"""open-protocol: golden vectors (TiCDC docs examples, tiflow's encoder test, hand-built batches
in tiflow's exact format), errors with byte positions, batching, hypothesis round trips and a
mutation fuzz test."""

from __future__ import annotations

import decimal
import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import ConfigError, DecodeError, EncodeError, KafkaRecord, decode_record, encode_records, get_codec
from cdc_codecs.events import CONTENT_FIELDS, ColumnFlag, Kind, Op, new_event
from cdc_codecs import open_protocol
from cdc_codecs.mysql_types import parse_type
from cdc_codecs.open_protocol import go_float, go_quote, go_unquote

from .. import strategies

OBJECT = "s3://b/cdc/0/cdc+0+100.jsonl.gz"


def frame(entries: list[tuple[str | bytes, str | bytes]], version: int = 1) -> tuple[bytes, bytes]:
    """A Kafka key and value holding these (key JSON, value JSON) events."""
    key = [version.to_bytes(8, "big")]
    value = []
    for k, v in entries:
        k = k.encode() if isinstance(k, str) else k
        v = v.encode() if isinstance(v, str) else v
        key += [len(k).to_bytes(8, "big"), k]
        value += [len(v).to_bytes(8, "big"), v]
    return b"".join(key), b"".join(value)


def record(key: bytes | None, value: bytes | None, offset: int = 100) -> KafkaRecord:
    return KafkaRecord("cdc", 0, offset, 1700000000000, key, value, (), OBJECT)


def encode(codec, events) -> list[tuple[bytes, bytes]]:
    return [(m.key, m.value) for m in codec.encode(events, topic="cdc", partition=0)]


def values(image) -> dict:
    return {c["name"]: c["value"] for c in image}


# ----------------------------------------------------------------------------- golden vectors

# TiCDC docs (ticdc-open-protocol.md, "Examples of the Event stream output", logs 1 and 2)
DOC_DDL_KEY = '{"ts":415508856908021766,"scm":"test","tbl":"t1","t":2}'
DOC_DDL_VALUE = '{"q":"CREATE TABLE test.t1(id int primary key, val varchar(16))","t":3}'
DOC_RESOLVED_KEY = '{"ts":415508856908021766,"t":3}'


def test_docs_ddl_event_decodes_and_reencodes_byte_exact():
    codec = get_codec("open-protocol")
    key, value = frame([(DOC_DDL_KEY, DOC_DDL_VALUE)])
    [event] = decode_record(codec, record(key, value))
    assert event["kind"] == Kind.DDL
    assert (event["database"], event["table"]) == ("test", "t1")
    assert event["commit_ts"] == 415508856908021766
    assert event["execute_ts_ms"] == 415508856908021766 >> 18
    assert event["ddl_query"] == "CREATE TABLE test.t1(id int primary key, val varchar(16))"
    assert event["ddl_type"] == "create table"
    assert (event["object"], event["offset"], event["event_index"]) == (OBJECT, 100, 0)
    assert encode(codec, [event]) == [(key, value)]


def test_docs_resolved_event_has_an_empty_value_and_reencodes_byte_exact():
    codec = get_codec("open-protocol")
    key, value = frame([(DOC_RESOLVED_KEY, "")])
    assert value == bytes(8)
    [event] = decode_record(codec, record(key, value))
    assert event["kind"] == Kind.WATERMARK
    assert event["watermark_ts"] == 415508856908021766
    assert event["commit_ts"] is None and event["database"] is None
    assert encode(codec, [event]) == [(key, value)]


def test_schema_level_ddl_omits_the_table():
    key, value = frame([('{"ts":5,"scm":"shop","t":2}', '{"q":"CREATE DATABASE shop","t":1}')])
    codec = get_codec("open-protocol")
    [event] = decode_record(codec, record(key, value))
    assert (event["database"], event["table"], event["ddl_type"]) == ("shop", None, "create schema")
    assert encode(codec, [event]) == [(key, value)]


def test_unknown_ddl_action_code_is_kept_for_reencoding():
    key, value = frame([('{"ts":5,"scm":"s","tbl":"t","t":2}', '{"q":"ALTER TABLE t SET NEW FEATURE","t":200}')])
    codec = get_codec("open-protocol")
    [event] = decode_record(codec, record(key, value))
    assert event["extras"] == {"open.ddl_action": "200"}
    assert encode(codec, [event]) == [(key, value)]


# tiflow pkg/sink/codec/open/open_protocol_encoder_test.go: `testEvent` (commit ts 1, a.b,
# col1 varchar "aa" handle+primary key, col2 varchar "bb") just fits max-message-bytes=173.
TIFLOW_TEST_EVENT = new_event(
    Kind.ROW, op=Op.INSERT, commit_ts=1, execute_ts_ms=0, database="a", table="b", key_columns=["col1"],
    after=[
        {"name": "col1", "mysql_type": "varchar", "flags": 10, "value": b"aa", "label": None},
        {"name": "col2", "mysql_type": "varchar", "flags": 0, "value": b"bb", "label": None},
    ],
)


def test_tiflow_encoder_test_event_is_byte_exact_and_fits_173_bytes_not_172():
    [(key, value)] = encode(get_codec("open-protocol", {"max-message-bytes": "173"}), [TIFLOW_TEST_EVENT])
    assert (key, value) == frame([
        ('{"ts":1,"scm":"a","tbl":"b","t":1}',
         '{"u":{"col1":{"t":15,"h":true,"f":10,"v":"aa"},"col2":{"t":15,"f":0,"v":"bb"}}}'),
    ])
    with pytest.raises(EncodeError, match="needs 173 bytes, more than max-message-bytes=172"):
        encode(get_codec("open-protocol", {"max-message-bytes": "172"}), [TIFLOW_TEST_EVENT])


def test_every_batch_stays_within_max_message_bytes():
    codec = get_codec("open-protocol", {"max-message-bytes": "256", "max-batch-size": "1000"})
    messages = encode(codec, [TIFLOW_TEST_EVENT] * 500)
    assert all(len(k) + len(v) + 36 <= 256 for k, v in messages)
    # 8-byte version + 2 x (16 + 34 + 79) = 266 bytes + 36 > 256: one event per message
    assert len(messages) == 500


def test_max_batch_size_counts_row_events_per_message():
    codec = get_codec("open-protocol", {"max-batch-size": "64"})
    messages = encode(codec, [TIFLOW_TEST_EVENT] * 1000)
    counts = [len(decode_record(codec, record(k, v))) for k, v in messages]
    assert counts == [64] * 15 + [40]
    assert len(encode(get_codec("open-protocol"), [TIFLOW_TEST_EVENT] * 40)) == 3  # default 16


# A batch of three row events as tiflow writes them: Go's encoding/json of the key struct and
# of the value maps (names sorted), every type's value rule.
ALL_TYPES_KEY = '{"ts":425000000000000001,"scm":"test","tbl":"t_all","rid":1,"t":1}'
ALL_TYPES_VALUE = (
    '{"u":{'
    '"c_bigint_u":{"t":8,"f":193,"v":18446744073709551615},'
    '"c_binary":{"t":254,"f":65,"v":"\\\\x89PNG\\\\r\\\\n\\\\x1a\\\\n"},'
    '"c_bit":{"t":16,"f":193,"v":65},'
    '"c_blob":{"t":252,"f":65,"v":"AAEC/w=="},'
    '"c_char":{"t":254,"f":64,"v":"abc"},'
    '"c_date":{"t":10,"f":65,"v":"2024-02-29"},'
    '"c_datetime":{"t":12,"f":65,"v":"2024-02-29 12:34:56.789"},'
    '"c_decimal":{"t":246,"f":65,"v":"129012.1230000"},'
    '"c_double":{"t":5,"f":65,"v":0.1},'
    '"c_double_big":{"t":5,"f":65,"v":1e+300},'
    '"c_enum":{"t":247,"f":64,"v":2},'
    '"c_float":{"t":4,"f":65,"v":1.5e-7},'
    '"c_float_max":{"t":4,"f":65,"v":3.4028235e+38},'
    '"c_float_negzero":{"t":4,"f":65,"v":-0},'
    '"c_int":{"t":3,"f":65,"v":-2147483648},'
    '"c_json":{"t":245,"f":65,"v":"{\\"html\\": \\"\\u003cb\\u003e\\", \\"key1\\": \\"value1\\"}"},'
    '"c_longtext":{"t":251,"f":64,"v":""},'
    '"c_null":{"t":15,"f":64,"v":null},'
    '"c_set":{"t":248,"f":64,"v":3},'
    '"c_text":{"t":252,"f":64,"v":"5rWL6K+VdGV4dA=="},'
    '"c_time":{"t":11,"f":65,"v":"-838:59:59"},'
    '"c_timestamp":{"t":7,"f":65,"v":"1973-12-30 15:30:00"},'
    '"c_tinyint":{"t":1,"f":65,"v":-128},'
    '"c_ubigint_small":{"t":8,"f":193,"v":0},'
    '"c_varbinary":{"t":15,"f":65,"v":"\\\\u00a0é\\\\\\"\\\\\\\\\\\\x00"},'
    '"c_varchar":{"t":15,"f":64,"v":"\\u003ctag\\u003e \\u0026 \\u2028 \\b\\f\\n\\t\\u0000 😀"},'
    '"c_year":{"t":13,"f":193,"v":2024},'
    '"id":{"t":3,"h":true,"f":11,"v":1}'
    "}}"
)
PART_UPDATE_KEY = '{"ts":425000000000000001,"scm":"test","tbl":"t_part","rid":7,"ptn":112,"t":1}'
PART_UPDATE_VALUE = (
    '{"u":{"id":{"t":8,"h":true,"f":11,"v":7},"name":{"t":15,"f":64,"v":"new"}},'
    '"p":{"id":{"t":8,"h":true,"f":11,"v":7},"name":{"t":15,"f":64,"v":"old"}}}'
)
PART_DELETE_KEY = '{"ts":425000000000000002,"scm":"test","tbl":"t_part","rid":8,"ptn":113,"t":1}'
PART_DELETE_VALUE = '{"d":{"id":{"t":8,"h":true,"f":11,"v":8},"name":{"t":15,"f":64,"v":null}}}'

BATCH = frame([
    (ALL_TYPES_KEY, ALL_TYPES_VALUE),
    (PART_UPDATE_KEY, PART_UPDATE_VALUE),
    (PART_DELETE_KEY, PART_DELETE_VALUE),
])


def test_the_golden_batch_is_valid_json_in_every_entry():
    for text in (ALL_TYPES_KEY, ALL_TYPES_VALUE, PART_UPDATE_KEY, PART_UPDATE_VALUE):
        json.loads(text)


def test_batched_row_events_decode_with_every_value_rule():
    codec = get_codec("open-protocol")
    insert, update, delete = decode_record(codec, record(*BATCH))
    assert [e["event_index"] for e in (insert, update, delete)] == [0, 1, 2]
    assert (insert["op"], update["op"], delete["op"]) == (Op.INSERT, Op.UPDATE, Op.DELETE)
    assert insert["commit_ts"] == 425000000000000001 and delete["commit_ts"] == 425000000000000002
    assert insert["key_columns"] == ["id"] and insert["extras"] == {"open.rid": "1"}
    assert update["extras"] == {"open.rid": "7", "open.ptn": "112"}
    assert insert["before"] is None and delete["after"] is None
    cols = {c["name"]: c for c in insert["after"]}
    assert values(insert["after"]) == {
        "c_bigint_u": b"18446744073709551615",
        "c_binary": b"\x89PNG\r\n\x1a\n",
        "c_bit": b"65",
        "c_blob": b"\x00\x01\x02\xff",
        "c_char": b"abc",
        "c_date": b"2024-02-29",
        "c_datetime": b"2024-02-29 12:34:56.789",
        "c_decimal": b"129012.1230000",
        "c_double": b"0.1",
        "c_double_big": b"1" + b"0" * 300,
        "c_enum": b"2",
        "c_float": b"0.00000015",
        "c_float_max": b"340282350000000000000000000000000000000",
        "c_float_negzero": b"-0",
        "c_int": b"-2147483648",
        "c_json": b'{"html": "<b>", "key1": "value1"}',
        "c_longtext": b"",
        "c_null": None,
        "c_set": b"3",
        "c_text": "测试text".encode(),
        "c_time": b"-838:59:59",
        "c_timestamp": b"1973-12-30 15:30:00",
        "c_tinyint": b"-128",
        "c_ubigint_small": b"0",
        "c_varbinary": "\u00a0é".encode() + b'"\\\x00',
        "c_varchar": "<tag> & \u2028 \b\f\n\t\x00 😀".encode(),
        "c_year": b"2024",
        "id": b"1",
    }
    assert {n: c["mysql_type"] for n, c in cols.items() if n in (
        "c_bigint_u", "c_binary", "c_blob", "c_text", "c_longtext", "c_varbinary", "c_bit", "c_year", "c_int",
    )} == {
        "c_bigint_u": "bigint unsigned", "c_binary": "binary", "c_blob": "blob", "c_text": "text",
        "c_longtext": "longtext", "c_varbinary": "varbinary", "c_bit": "bit", "c_year": "year", "c_int": "int",
    }
    assert cols["id"]["flags"] == ColumnFlag.BINARY | ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY
    assert all(c["label"] is None for c in insert["after"])
    assert values(update["before"]) == {"id": b"7", "name": b"old"}
    assert values(update["after"]) == {"id": b"7", "name": b"new"}
    assert values(delete["before"]) == {"id": b"8", "name": None}


def test_batched_row_events_reencode_byte_exact():
    codec = get_codec("open-protocol")
    events = decode_record(codec, record(*BATCH))
    assert encode(codec, events) == [BATCH]


def test_old_values_with_only_the_updated_columns_are_filled_from_the_new_row():
    key = '{"ts":9,"scm":"s","tbl":"t","t":1}'
    value = ('{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":15,"f":64,"v":"x"},"c":{"t":3,"f":65,"v":5}},'
             '"p":{"b":{"t":15,"f":64,"v":"y"}}}')
    message = frame([(key, value)])
    [event] = decode_record(get_codec("open-protocol"), record(*message))
    assert values(event["before"]) == {"a": b"1", "b": b"y", "c": b"5"}
    partial = get_codec("open-protocol", {"only-output-updated-columns": "true"})
    assert encode(partial, [event]) == [message]
    # the default writes every old column
    [(_, full)] = encode(get_codec("open-protocol"), [event])
    assert json.loads(full[8:])["p"].keys() == {"a", "b", "c"}


def test_update_without_old_values_decodes_as_insert_like_ticdc():
    """enable-old-value=false: an UPDATE is `{"u": ...}` only, indistinguishable from INSERT."""
    message = frame([('{"ts":9,"scm":"s","tbl":"t","t":1}', '{"u":{"a":{"t":3,"h":true,"f":11,"v":1}}}')])
    [event] = decode_record(get_codec("open-protocol"), record(*message))
    assert event["op"] == Op.INSERT


def test_new_ticdc_column_order_is_kept_on_decode():
    """pingcap/ticdc (the rewrite) writes columns in table order, not sorted."""
    value = '{"u":{"z":{"t":3,"h":true,"f":11,"v":1},"a":{"t":15,"f":64,"v":"x"}}}'
    message = frame([('{"ts":9,"scm":"s","tbl":"t","t":1}', value)])
    [event] = decode_record(get_codec("open-protocol"), record(*message))
    assert [c["name"] for c in event["after"]] == ["z", "a"]


def test_delete_only_handle_key_columns():
    codec = get_codec("open-protocol")
    delete = decode_record(codec, record(*BATCH))[2]
    short = get_codec("open-protocol", {"delete-only-output-handle-key-columns": "true"})
    [(_, value)] = encode(short, [delete])
    assert value[8:] == b'{"d":{"id":{"t":8,"h":true,"f":11,"v":8}}}'


def test_ddl_and_resolved_events_are_alone_and_flush_the_open_batch():
    codec = get_codec("open-protocol")
    [ddl] = decode_record(codec, record(*frame([(DOC_DDL_KEY, DOC_DDL_VALUE)])))
    [resolved] = decode_record(codec, record(*frame([(DOC_RESOLVED_KEY, "")])))
    stream = [TIFLOW_TEST_EVENT] * 3 + [ddl] + [TIFLOW_TEST_EVENT] * 2 + [resolved, resolved]
    messages = encode(codec, stream)
    decoded = [decode_record(codec, record(k, v)) for k, v in messages]
    assert [[e["kind"] for e in events] for events in decoded] == [
        ["row"] * 3, ["ddl"], ["row"] * 2, ["watermark"], ["watermark"],
    ]


def test_ddl_and_resolved_events_are_broadcast_to_every_partition():
    codec = get_codec("open-protocol")
    assert (codec.ddl_placement, codec.watermark_placement) == ("all", "all")
    [ddl] = decode_record(codec, record(*frame([(DOC_DDL_KEY, DOC_DDL_VALUE)])))
    records = encode_records(codec, [TIFLOW_TEST_EVENT, ddl], topic="t", partitions=3, dispatch=lambda e: 1)
    assert sorted((r.partition, r.offset) for r in records) == [(0, 0), (1, 0), (1, 1), (2, 0)]


def test_compressed_values_need_the_option():
    lz4 = get_codec("open-protocol", {"large-message-handle-compression": "lz4"})
    plain = get_codec("open-protocol")
    events = decode_record(plain, record(*BATCH))
    [(key, value)] = encode(lz4, events)
    assert key == BATCH[0] and value != BATCH[1]
    assert [e["after"] for e in decode_record(lz4, record(key, value))] == [e["after"] for e in events]
    with pytest.raises(DecodeError, match="not valid JSON"):
        decode_record(plain, record(key, value))
    with pytest.raises(DecodeError, match="not lz4-compressed") as info:
        decode_record(lz4, record(*BATCH))
    assert info.value.byte_offset == 8 and info.value.field == "value[0]"


# ----------------------------------------------------------------------------- Go value rules

def test_go_quote_matches_the_docs_example_and_go_rules():
    assert go_quote(bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])) == "\\x89PNG\\r\\n\\x1a\\n"
    assert go_quote(b"\x07\x08\x0b\x7f\xc2\x80\xc2\xa0\xc2\xad\xe2\x80\xa8") == "\\a\\b\\v\\x7f\\u0080\\u00a0\\u00ad\\u2028"
    assert go_quote("é中😀 \"\\".encode()) == 'é中😀 \\"\\\\'
    assert go_quote(b"\xed\xa0\x80\xf4\x90\x80\x80") == "\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80"  # surrogate, > U+10FFFF
    assert go_quote("\U000e0001".encode()) == "\\U000e0001"  # a format character


@pytest.mark.parametrize(
    "text, reason",
    [("\\'", "no valid escape"), ("\\q", "no valid escape"), ("\\400", "above 255"), ("\\ud800", "not a valid Unicode"),
     ("\\U00110000", "not a valid Unicode"), ('a"b', "unescaped quote"), ("a\nb", "raw newline"), ("\\x4", "no valid escape")],
)
def test_go_unquote_rejects_what_go_rejects(text, reason):
    with pytest.raises(ValueError, match=reason):
        go_unquote(text)


def test_go_unquote_reads_every_go_escape():
    assert go_unquote("\\a\\b\\f\\n\\r\\t\\v\\\\\\\"\\x00\\xFF\\101\\u00e9\\U0001F600é") == (
        b"\a\b\f\n\r\t\v\\\"\x00\xffA" + "é😀é".encode())


@given(st.binary(max_size=64))
def test_go_quote_round_trips_any_bytes(data):
    assert go_unquote(go_quote(data)) == data


@pytest.mark.parametrize(
    "text, bits, expected",
    [(b"1", 64, "1"), (b"-0", 64, "-0"), (b"0.1", 32, "0.1"), (b"0.1", 64, "0.1"), (b"1000000000000000000000", 64, "1e+21"),
     (b"100000000000000000000", 64, "100000000000000000000"), (b"0.00000015", 32, "1.5e-7"), (b"0.000001", 64, "0.000001"),
     (b"0.0000001", 64, "1e-7"), (b"1e-300", 64, "1e-300"), (b"123456790", 32, "123456790"),
     (b"340282350000000000000000000000000000000", 32, "3.4028235e+38"), (b"-1.5", 32, "-1.5")],
)
def test_floats_are_written_as_go_encoding_json_writes_them(text, bits, expected):
    assert go_float(text, bits) == expected


# ----------------------------------------------------------------------------- errors

def _key(ts=1, t=1, **extra) -> str:
    return json.dumps({"ts": ts, "scm": "s", "tbl": "t", "t": t, **extra}, separators=(",", ":"))


ROW = '{"u":{"a":{"t":3,"h":true,"f":11,"v":1}}}'


def _row(col: str) -> str:
    return '{"u":{"a":' + col + "}}"


KEY, VALUE = frame([(_key(), ROW)])
BAD_JSON = '{"u":{"é":{"t":3,"v":1},]}'  # the error position is a byte offset, after the two-byte é

ERRORS = [
    ((b"\x00" * 7, VALUE), "shorter than the 8-byte version", 0, "key"),
    ((frame([(_key(), ROW)], version=2)[0], VALUE), "unsupported batch version 2", 0, "key"),
    ((KEY[:12], VALUE), "truncated inside a length field (4 of 8 bytes)", 8, "key[0]"),
    ((KEY[:-1], VALUE), "runs past the end of the key", 8, "key[0]"),
    ((KEY, VALUE[:-1]), "runs past the end of the value", 0, "value[0]"),
    ((KEY, b""), "value ends after 0 events", 0, "value[0]"),
    ((KEY, VALUE + b"\x00"), "1 bytes after the 1 event values", len(VALUE), "value"),
    ((KEY[:8], b""), "no event", 8, "key"),
    (frame([('{"ts":1,"t":1', ROW)]), "key[0] is not valid JSON", 29, "key[0]"),
    (frame([("[1]", ROW)]), "not an object", 16, "key[0]"),
    (frame([(_key(t=4), ROW)]), "unknown event type t=4", 16, "key[0].t"),
    (frame([(_key(scm=5), ROW)]), "scm is 5, not a string", 16, "key[0].scm"),
    (frame([(_key(t=2, tbl=[]), '{"q":"DROP TABLE t","t":4}')]), "tbl is [], not a string", 16, "key[0].tbl"),
    (frame([(_key(rid="7"), ROW)]), "rid is '7', not a 64-bit integer", 16, "key[0].rid"),
    (frame([(_key(ts="1"), ROW)]), "ts is '1', not an integer", 16, "key[0].ts"),
    (frame([(_key(ts=-1), ROW)]), "outside 0..2^63-1", 16, "key[0].ts"),
    (frame([(_key(ohk=True), ROW)]), "only the handle-key columns", 16, "key[0].ohk"),
    (frame([(_key(ohk=False, ccl="s3://b/x.json"), ROW)]), "claim-check message", 16, "key[0].ccl"),
    (frame([(_key(), '{"x":1}')]), "no columns (none of u, p, d)", 8, "value[0]"),
    (frame([(_key(), '{"u":[]}')]), "u is a JSON list", 8, "value[0].u"),
    (frame([(_key(), '{"d":' + ROW[5:-1] + ',"u":' + ROW[5:])]), "both d and u/p", 8, "value[0]"),
    (frame([(_key(), '{"p":' + ROW[5:])]), "p (old columns) without u", 8, "value[0]"),
    (frame([(_key(), _row('{"t":999,"f":0,"v":1}'))]), "unknown type code t=999", 8, "value[0].u.a.t"),
    (frame([(_key(), _row('{"t":3,"f":0,"v":"1"}'))]), "value '1' is not an integer", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":8,"f":128,"v":18446744073709551616}'))]), "is not an integer", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":3,"f":0,"v":1.5}'))]), "is not an integer", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":15,"f":1,"v":"\\\\q"}'))]), "not a Go-quoted string", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":252,"f":1,"v":"abc"}'))]), "is not base64", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":4,"f":0,"v":1e39}'))]), "overflows float32", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":4,"f":0,"v":"1"}'))]), "is not a number", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":6,"f":0,"v":1}'))]), "of type null has value 1", 8, "value[0].u.a"),
    (frame([(_key(), _row('{"t":3,"f":-1,"v":1}'))]), "not a 31-bit integer", 8, "value[0].u.a.f"),
    (frame([(_key(t=2), '{"t":3}')]), "DDL query q is None", 8, "value[0].q"),
    (frame([(_key(t=2), '{"q":"DROP TABLE t","t":"4"}')]), "DDL type t is '4'", 8, "value[0].t"),
    (frame([(_key(t=3), "{}")]), "resolved event has a 2-byte value", 0, "value[0]"),
    (frame([(_key(), BAD_JSON)]), "value[0] is not valid JSON", 8 + BAD_JSON.encode().index(b"]"), "value[0]"),
    ((None, VALUE), "record has no key", None, "key"),
    ((KEY, None), "no value (a tombstone)", None, "value"),
]


@pytest.mark.parametrize("message, reason, byte_offset, field", ERRORS)
def test_bad_messages_raise_a_decode_error_naming_protocol_object_offset_and_byte(message, reason, byte_offset, field):
    with pytest.raises(DecodeError) as info:
        decode_record(get_codec("open-protocol"), record(*message))
    error = info.value
    assert reason in error.reason
    assert (error.byte_offset, error.field) == (byte_offset, field)
    text = str(error)
    assert text.startswith("open-protocol: ")
    assert f"object {OBJECT}" in text and "offset 100" in text
    if byte_offset is not None:
        assert f"byte {byte_offset}" in text


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        get_codec("open-protocol", {"max-batch-sise": "4"})
    assert "max-batch-size" in str(info.value) and "max-message-bytes" in str(info.value)
    with pytest.raises(ConfigError, match="must be positive"):
        get_codec("open-protocol", {"max-batch-size": "0"})
    with pytest.raises(ConfigError, match="expected an integer"):
        get_codec("open-protocol", {"max-message-bytes": "10M"})


@pytest.mark.parametrize(
    "change, reason",
    [({"commit_ts": None}, "needs a commit ts"),
     ({"after": [{"name": "a", "mysql_type": "number(10)", "flags": 0, "value": b"1", "label": None}]}, "no open-protocol type code"),
     ({"after": [{"name": "a", "mysql_type": "tinyint", "flags": 0, "value": b"300", "label": None}]}, "out of range"),
     ({"after": [{"name": "a", "mysql_type": "double", "flags": 0, "value": b"abc", "label": None}]}, "could not convert"),
     ({"after": None}, "without the after image"),
     ({"op": "upsert"}, "op 'upsert'")],
)
def test_events_the_protocol_cannot_carry_raise_an_encode_error(change, reason):
    event = {**TIFLOW_TEST_EVENT, **change}
    with pytest.raises(EncodeError, match=reason):
        encode(get_codec("open-protocol"), [event])


# ----------------------------------------------------------------------------- round trips

EXTRA_TYPES = st.sampled_from([
    ("tinyblob", ColumnFlag.BINARY, st.binary(max_size=16)),
    ("mediumblob", ColumnFlag.BINARY, st.binary(max_size=16)),
    ("longblob", ColumnFlag.BINARY, st.binary(max_size=16)),
    ("tinytext", 0, strategies.TEXT.map(str.encode)),
    ("longtext", 0, strategies.TEXT.map(str.encode)),
    ("varbinary(255)", ColumnFlag.BINARY, st.binary(max_size=24)),
    ("binary(4)", ColumnFlag.BINARY, st.binary(min_size=4, max_size=4)),
    ("bigint unsigned", ColumnFlag.UNSIGNED, st.sampled_from([b"18446744073709551615", b"9223372036854775808", b"0"])),
    ("double", 0, st.sampled_from([b"-0", b"0.000001", b"0.0000001", b"1" + b"0" * 21, b"100000000000000000000"])),
    ("float", 0, st.sampled_from([b"-0", b"0.00000015", b"340282350000000000000000000000000000000", b"16777216"])),
    ("year", ColumnFlag.UNSIGNED, st.sampled_from([b"0", b"1901", b"2155"])),
]).map(lambda t: (t[0], int(t[1]), t[2]))


@st.composite
def open_tables(draw):
    """strategies.table_schemas plus the types only the open protocol distinguishes."""
    schema = draw(strategies.table_schemas())
    for i in range(draw(st.integers(0, 3))):
        type_text, flags, values_ = draw(EXTRA_TYPES)
        schema["columns"].append((f"x{i}", type_text, flags, values_))
    return schema


def open_events():
    return st.one_of(
        open_tables().flatmap(lambda schema: strategies.row_events(schema)),
        strategies.ddl_events(),
        strategies.watermark_events(),
    )


def as_open_protocol(event: dict, updated_only: bool = False, delete_keys_only: bool = False) -> dict:
    """What the open protocol carries of a canonical event: columns sorted by name, type
    names without parameters, no ENUM/SET labels, flags completed from the type and the key,
    key columns from the handle-key flag, the event time derived from the TSO. With
    only-output-updated-columns an UPDATE that changes nothing has no `p` and reads back as an
    INSERT (as in TiCDC); with delete-only-output-handle-key-columns a DELETE keeps its keys."""
    expected = {k: event[k] for k in CONTENT_FIELDS}
    ts = event["watermark_ts"] if event["kind"] == Kind.WATERMARK else event["commit_ts"]
    expected["execute_ts_ms"] = ts >> 18
    expected["extras"] = None
    if event["kind"] != Kind.ROW:
        return expected
    keys = set(event["key_columns"] or ())
    for side in ("before", "after"):
        if expected[side] is None:
            continue
        image = []
        for c in sorted(expected[side], key=lambda c: c["name"]):
            mysql_type = parse_type(c["mysql_type"])
            base = mysql_type.base
            flags = c["flags"]
            if c["name"] in keys:
                flags |= ColumnFlag.HANDLE_KEY
            if mysql_type.unsigned:
                flags |= ColumnFlag.UNSIGNED
            if base in ("char", "varchar", "binary", "varbinary") or base.endswith(("blob", "text")):
                flags = flags | ColumnFlag.BINARY if mysql_type.is_binary else flags & ~ColumnFlag.BINARY
            unsigned = flags & ColumnFlag.UNSIGNED and base in (
                "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal")
            image.append({**c, "mysql_type": base + (" unsigned" if unsigned else ""), "flags": int(flags), "label": None})
        expected[side] = image
    if updated_only and event["op"] == Op.UPDATE and [c["value"] for c in expected["before"]] == [
            c["value"] for c in expected["after"]]:
        expected["op"], expected["before"] = Op.INSERT, None
    if delete_keys_only and event["op"] == Op.DELETE:
        expected["before"] = [c for c in expected["before"] if c["flags"] & ColumnFlag.HANDLE_KEY]
    main = expected["before"] if event["op"] == Op.DELETE else expected["after"]
    expected["key_columns"] = [c["name"] for c in main if c["flags"] & ColumnFlag.HANDLE_KEY]
    return expected


@pytest.fixture(scope="module")
def wide_decimals():
    """tests/strategies.py draws DECIMAL(p,s) with p up to 40 but quantizes in the default
    28-digit decimal context (InvalidOperation for p > 28): give it room."""
    with decimal.localcontext() as context:
        context.prec = 80
        yield


@settings(max_examples=250, deadline=None)
@given(
    events=st.lists(open_events(), min_size=1, max_size=6), batch=st.integers(1, 4),
    compress=st.sampled_from(["none", "snappy"]), updated_only=st.booleans(), delete_keys_only=st.booleans(),
)
def test_round_trip_of_any_event(wide_decimals, events, batch, compress, updated_only, delete_keys_only):
    assert decimal.getcontext().prec == 80
    codec = get_codec("open-protocol", {
        "max-batch-size": batch, "large-message-handle-compression": compress,
        "only-output-updated-columns": updated_only, "delete-only-output-handle-key-columns": delete_keys_only,
    })
    messages = encode(codec, events)
    decoded = []
    for offset, (key, value) in enumerate(messages):
        decoded += decode_record(codec, KafkaRecord("t", 3, offset, None, key, value))
    assert [{k: e[k] for k in CONTENT_FIELDS} for e in decoded] == [
        as_open_protocol(e, updated_only, delete_keys_only) for e in events]
    # and encoding the decoded events again gives the same bytes
    assert encode(codec, decoded) == messages


@settings(max_examples=60, deadline=None)
@given(schema=open_tables(), data=st.data())
def test_an_update_round_trips_with_only_the_changed_old_columns(wide_decimals, schema, data):
    event = data.draw(strategies.row_events(schema).filter(lambda e: e["op"] == Op.UPDATE))
    codec = get_codec("open-protocol", {"only-output-updated-columns": "true"})
    [(key, value)] = encode(codec, [event])
    old = json.loads(value[8:]).get("p", {})
    changed = {c["name"] for c, n in zip(event["before"], event["after"]) if c["value"] != n["value"]}
    assert set(old) == changed
    [decoded] = decode_record(codec, record(key, value))
    assert {k: decoded[k] for k in CONTENT_FIELDS} == as_open_protocol(event, updated_only=True)


# ----------------------------------------------------------------------------- fuzz

GOLDEN_ENTRIES = [
    [(ALL_TYPES_KEY, ALL_TYPES_VALUE), (PART_UPDATE_KEY, PART_UPDATE_VALUE), (PART_DELETE_KEY, PART_DELETE_VALUE)],
    [(DOC_DDL_KEY, DOC_DDL_VALUE)],
    [(DOC_RESOLVED_KEY, "")],
    [(_key(), '{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":15,"f":65,"v":"\\\\x00\\\\u00a0"}},'
              '"p":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":4,"f":65,"v":-0}}}')],
]


FUZZ_VALUES = [
    None, True, False, 0, -1, 1, 2**31, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 1.5, -0.0, 1e300, 1e-7,
    "", "x", "\\x00", "\\q", "\\400", "\\ud800", "AAEC/w==", "AAE", "é", '"', [], [1], {}, {"t": 3},
] + sorted(range(0, 256, 7)) + [225, 245, 246, 247, 248, 249, 252, 253, 254, 255, 6]


def _mutate_json(rng: random.Random, text: bytes) -> bytes:
    """Change one field of a parsed event key / value: a column's t, f, h or v, or a whole
    image or key field, to another JSON value or delete it."""
    doc = json.loads(text) if text else {}
    targets = [(doc, k) for k in doc] if isinstance(doc, dict) else []
    for image in (doc.values() if isinstance(doc, dict) else ()):
        if isinstance(image, dict):
            for col in image.values():
                if isinstance(col, dict):
                    targets += [(col, k) for k in ("t", "f", "h", "v")]
    if not targets:
        return json.dumps(rng.choice(FUZZ_VALUES)).encode()
    holder, name = rng.choice(targets)
    if rng.random() < 0.15:
        holder.pop(name, None)
    else:
        holder[name] = rng.choice(FUZZ_VALUES)
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()


def _mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if not data or choice < 0.15:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif choice < 0.35:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice < 0.5:
            del data[rng.randrange(len(data)):]
        elif choice < 0.6:
            pos = rng.randrange(len(data))
            del data[pos:pos + rng.randint(1, 8)]
        elif choice < 0.75:  # a length field or the version: big, small, off by a little
            pos = rng.randrange(0, max(1, len(data) - 7))
            number = rng.choice([0, 1, 7, 2**63, 2**64 - 1, int.from_bytes(data[pos:pos + 8], "big") + rng.randint(-3, 3)])
            data[pos:pos + 8] = (number % 2**64).to_bytes(8, "big")
        else:  # JSON-aware: swap a structural or escape character
            pos = rng.randrange(len(data))
            data[pos] = ord(rng.choice('{}[]":,\\-0123456789eEtfnux'))
    return bytes(data)


def test_mutated_golden_messages_raise_only_decode_errors():
    rng = random.Random(20240229)
    codec = get_codec("open-protocol")
    outcomes = {"decoded": 0, "error": 0}
    for i in range(10000):
        entries = [(k.encode(), v.encode()) for k, v in rng.choice(GOLDEN_ENTRIES)]
        which = rng.random()
        if which < 0.3:  # change one field of one entry's JSON, frame it with correct lengths
            n = rng.randrange(len(entries))
            k, v = entries[n]
            entries[n] = (_mutate_json(rng, k), v) if rng.random() < 0.3 else (k, _mutate_json(rng, v))
            key, value = frame(entries)
        elif which < 0.5:  # mutate one entry's bytes, frame it with correct lengths
            n = rng.randrange(len(entries))
            k, v = entries[n]
            entries[n] = (_mutate(rng, k), v) if rng.random() < 0.3 else (k, _mutate(rng, v))
            key, value = frame(entries)
        else:  # mutate the framed bytes
            key, value = frame(entries)
            if which < 0.7:
                key = _mutate(rng, key)
            elif which < 0.9:
                value = _mutate(rng, value)
            else:
                key, value = _mutate(rng, key), _mutate(rng, value)
        try:
            events = codec.decode(record(key, value, offset=i))
        except DecodeError as e:
            assert e.protocol == "open-protocol" and e.reason
            assert e.field is not None  # every error says which part of the message
            outcomes["error"] += 1
        else:
            assert events and all(e["kind"] in (Kind.ROW, Kind.DDL, Kind.WATERMARK) for e in events)
            outcomes["decoded"] += 1
        # and through decode_record, every error names the archive object and offset
        try:
            decode_record(codec, record(key, value, offset=i))
        except DecodeError as e:
            assert e.object == OBJECT and e.offset == i
    assert outcomes["error"] > 5000 and outcomes["decoded"] > 300, outcomes


_ESCAPE_ALPHABET = st.sampled_from(["\\", "x", "u", "U", "0", "3", "4", "7", "8", "a", "f", "n", "v", "q", '"', "\n",
                                    "é", "F", "\x00", "'", "😀"])


@settings(max_examples=1000, deadline=None)
@given(text=st.lists(_ESCAPE_ALPHABET, max_size=14).map("".join) | st.binary(max_size=24).map(go_quote))
def test_go_unquote_fast_path_agrees_with_the_escape_by_escape_reader(text):
    """Text made of simple escapes is unquoted by codecs.escape_decode; everything must come out
    as the escape-by-escape reader gives it, errors included."""

    def read(path: re.Pattern):
        saved, open_protocol._SIMPLE_QUOTED = open_protocol._SIMPLE_QUOTED, path
        try:
            return ("bytes", go_unquote(text))
        except ValueError:
            return ("error",)
        finally:
            open_protocol._SIMPLE_QUOTED = saved

    assert read(open_protocol._SIMPLE_QUOTED) == read(re.compile(r"(?!)"))
