"""craft: golden vectors from the seed (docs/seeds: ticdc-craft-zh.txt), TiCDC's batching,
malformed input, a mutation fuzz test, and hypothesis round trips."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import ConfigError, DecodeError, EncodeError, KafkaRecord, decode_record, encode_records, get_codec
from cdc_codecs.craft import double_text, float_text, uvarint, varint
from cdc_codecs.events import CONTENT_FIELDS, ColumnFlag, Kind, Op, column, new_event
from cdc_codecs.mysql_types import parse_type

from .. import strategies

OBJECT = "s3://b/craft/0/x.avro"


def hexdump(text: str) -> bytes:
    """The seed's `hexdump -C` lines: the hex columns before `|`."""
    return bytes.fromhex("".join(line.split("|")[0] for line in text.strip().splitlines()))


def record(value: bytes, offset: int = 7) -> KafkaRecord:
    return KafkaRecord("orders", 0, offset, 1700000000000, None, value, (), OBJECT)


def encode(codec, events, partition: int = 0) -> list[bytes]:
    messages = list(codec.encode(events, topic="orders", partition=partition))
    assert all(m.key is None and m.headers == () for m in messages)
    return [m.value for m in messages]


# ----------------------------------------------------------------------------- seed examples

SEED_ROW = hexdump("""
    01 81 80 f0 81 81 b5 de  f1 05 01 01 00 02 01 08  |................|
    04 02 02 02 02 02 02 02  0f fe 01 0a 07 0c 04 03  |................|
    06 00 00 00 00 00 00 00  00 10 0e 14 26 26 10 04  |............&&..|
    01 76 61 72 63 68 61 72  31 73 74 72 69 6e 67 31  |.varchar1string1|
    32 30 32 31 2f 30 31 2f  30 32 32 30 32 31 2f 30  |2021/01/022021/0|
    31 2f 30 32 20 30 30 3a  30 30 3a 30 30 32 30 32  |1/02 00:00:00202|
    31 2f 30 31 2f 30 32 20  30 30 3a 30 30 3a 30 30  |1/01/02 00:00:00|
    00 00 00 00 00 00 00 40  a0 1f 02 08 04 02 02 02  |.......@........|
    02 02 02 02 0f fe 01 0a  07 0c 04 03 06 00 00 00  |................|
    00 00 00 00 00 10 0e 14  26 26 10 04 01 76 61 72  |........&&...var|
    63 68 61 72 30 73 74 72  69 6e 67 30 32 30 32 31  |char0string02021|
    2f 30 31 2f 30 31 32 30  32 31 2f 30 31 2f 30 31  |/01/012021/01/01|
    20 30 30 3a 30 30 3a 30  30 32 30 32 31 2f 30 31  | 00:00:002021/01|
    2f 30 31 20 30 30 3a 30  30 3a 30 30 00 00 00 00  |/01 00:00:00....|
    00 00 f0 3f d0 0f 0a 01  01 07 06 04 09 08 05 04  |...?............|
    04 61 62 76 61 72 63 68  61 72 73 74 72 69 6e 67  |.abvarcharstring|
    64 61 74 65 74 69 6d 65  73 74 61 6d 70 64 61 74  |datetimestampdat|
    65 74 69 6d 65 66 6c 6f  61 74 6c 6f 6e 67 6e 75  |etimefloatlongnu|
    6c 6c 02 1a 5e 01 b0 03  02 d8 01 00 0a           |ll..^........|
""")

SEED_DDL = hexdump("""
    01 81 80 c0 dc f5 b5 de  f1 05 02 01 00 02 01 0e  |................|
    63 72 65 61 74 65 20 74  61 62 6c 65 20 61 02 01  |create table a..|
    01 61 62 02 1a 0f 01 20  05                       |.ab.... .|
""")

SEED_RESOLVED = hexdump("""
    01 81 80 e0 bb 9b b6 de  f1 05 03 01 01 01 02 1a  |................|
    19 01 00 05                                       |....|
""")

SEEDS = [SEED_ROW, SEED_DDL, SEED_RESOLVED]

SEED_ROW_TYPES = ["varchar", "char", "date", "timestamp", "datetime", "float", "int", "null"]


def image(event, side) -> dict:
    return {c["name"]: c["value"] for c in event[side]}


def test_seed_row_event_decodes_to_the_documented_update():
    codec = get_codec("craft")
    [event] = decode_record(codec, record(SEED_ROW))
    assert (event["kind"], event["op"]) == (Kind.ROW, Op.UPDATE)
    assert event["commit_ts"] == 424316552636792833
    assert event["execute_ts_ms"] == 424316552636792833 >> 18
    assert (event["database"], event["table"]) == ("a", "b")
    assert event["key_columns"] == []  # no column carries the handle-key flag
    assert event["extras"] is None  # partition id -1: not a partitioned table
    assert image(event, "after") == {
        "varchar": b"varchar1", "string": b"string1", "date": b"2021/01/02",
        "timestamp": b"2021/01/02 00:00:00", "datetime": b"2021/01/02 00:00:00",
        "float": b"2", "long": b"2000", "null": None,
    }
    assert image(event, "before") == {
        "varchar": b"varchar0", "string": b"string0", "date": b"2021/01/01",
        "timestamp": b"2021/01/01 00:00:00", "datetime": b"2021/01/01 00:00:00",
        "float": b"1", "long": b"1000", "null": None,
    }
    assert [c["mysql_type"] for c in event["after"]] == SEED_ROW_TYPES
    assert [c["mysql_type"] for c in event["before"]] == SEED_ROW_TYPES
    assert {c["flags"] for c in event["after"] + event["before"]} == {0}
    assert (event["topic"], event["partition"], event["offset"], event["object"]) == ("orders", 0, 7, OBJECT)


def test_seed_ddl_event_decodes_with_the_action_the_message_states():
    [event] = decode_record(get_codec("craft"), record(SEED_DDL))
    assert event["kind"] == Kind.DDL
    assert event["commit_ts"] == 424316583965360129
    assert (event["database"], event["table"]) == ("a", "b")
    assert event["ddl_query"] == "create table a"
    # the seed's example is synthetic: action 1 (create schema) with a CREATE TABLE query;
    # the canonical ddl_type is what the protocol says
    assert event["ddl_type"] == "create schema"


def test_seed_resolved_event_decodes_to_a_watermark():
    [event] = decode_record(get_codec("craft"), record(SEED_RESOLVED))
    assert event["kind"] == Kind.WATERMARK
    assert event["watermark_ts"] == 424316594097225729
    assert event["commit_ts"] is None
    assert event["execute_ts_ms"] == 424316594097225729 >> 18
    assert event["database"] is None and event["table"] is None


@pytest.mark.parametrize("seed", SEEDS, ids=["row", "ddl", "resolved"])
def test_seed_examples_reencode_byte_for_byte(seed):
    codec = get_codec("craft")
    events = decode_record(codec, record(seed))
    assert encode(codec, events) == [seed]


# ----------------------------------------------------------------------------- layout details

def test_partition_id_survives_in_extras_and_key_columns_follow_handle_key_flags():
    pk = ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY
    event = new_event(
        Kind.ROW, op=Op.DELETE, commit_ts=5 << 18, database="shop", table="orders",
        key_columns=["id"], before=[column("id", "7", "bigint", pk), column("v", None, "varchar(10)", 64)],
        extras={"craft.partition_id": "120"},
    )
    codec = get_codec("craft")
    [value] = encode(codec, [event])
    [decoded] = decode_record(codec, record(value))
    assert decoded["op"] == Op.DELETE and decoded["after"] is None
    assert decoded["extras"] == {"craft.partition_id": "120"}
    assert decoded["key_columns"] == ["id"]
    assert decoded["before"] == [
        {"name": "id", "mysql_type": "bigint", "flags": int(pk), "value": b"7", "label": None},
        {"name": "v", "mysql_type": "varchar", "flags": 64, "value": None, "label": None},
    ]


def test_batch_layout_dictionary_order_and_size_tables():
    """Two rows of two tables in one message, checked byte by byte against the layout TiCDC
    writes: schemas, then tables, then column names enter the dictionary in first-seen order."""
    rows = [
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=1000, database="d", table="t1",
                  key_columns=[], after=[column("a", "-1", "int")]),
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=1001, database="d", table="t2",
                  key_columns=[], after=[column("b", "x", "varchar")]),
    ]
    [value] = encode(get_codec("craft"), rows)
    header = (
        uvarint(1000) + uvarint(1)  # commit ts, delta
        + b"\x01\x01"  # row, row
        + varint(-1) + varint(0)  # partition -1, -1
        + varint(0) + varint(0)  # schema ids 0, 0
        + varint(1) + varint(1)  # table ids 1, 2
    )
    group1 = b"\x01\x01" + varint(3) + b"\x03" + b"\x00" + varint(1) + varint(-1)
    group2 = b"\x01\x01" + varint(4) + b"\x0f" + b"\x00" + varint(1) + b"x"
    dictionary = b"\x05" + b"\x01\x02\x02\x01\x01" + b"dt1t2ab"
    tables = (
        b"\x02" + varint(len(header)) + varint(len(dictionary) - len(header))
        + b"\x02" + varint(len(group1)) + varint(0)
        + b"\x01" + varint(len(group1))
        + b"\x01" + varint(len(group2))
    )
    expected = b"\x01" + header + group1 + group2 + dictionary + tables + uvarint(len(tables))[::-1]
    assert value == expected


def test_trailer_is_a_reversed_uvarint_when_the_size_tables_are_long():
    rows = [
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40 | i, database="d", table="t",
                  key_columns=[], after=[column("a", str(i), "int")])
        for i in range(200)
    ]
    codec = get_codec("craft", {"max-batch-size": "200"})
    [value] = encode(codec, rows)
    assert value[-1] & 0x80 and not value[-2] & 0x80  # two bytes, least significant group last
    assert [e["after"][0]["value"] for e in decode_record(codec, record(value))] == [
        str(i).encode() for i in range(200)
    ]


@pytest.mark.parametrize(
    "mysql_type, flags, text, raw",
    [
        ("bigint unsigned", ColumnFlag.UNSIGNED, "18446744073709551615", b"\xff" * 9 + b"\x01"),
        ("bigint", 0, "-9223372036854775808", b"\xff" * 9 + b"\x01"),
        ("bigint", 0, "9223372036854775807", b"\xfe" + b"\xff" * 8 + b"\x01"),
        ("tinyint", 0, "-1", b"\x01"),
        ("int unsigned", ColumnFlag.UNSIGNED, "300", b"\xac\x02"),
        ("year", 0, "2021", varint(2021)),
        ("bit", ColumnFlag.UNSIGNED, "65", b"\x41"),
        ("enum('a','b')", 0, "2", b"\x02"),
        ("set('a','b')", 0, "3", b"\x03"),
        ("double", 0, "0.1", struct.pack("<d", 0.1)),
        ("double", 0, "100000000000000000000", struct.pack("<d", 1e20)),
        ("float", 0, "0.1", struct.pack("<d", float(np.float32(0.1)))),
        ("float", 0, "-0", struct.pack("<d", -0.0)),
        ("decimal(10,4)", 0, "129012.1230", b"129012.1230"),
        ("json", 0, '{"k": "v"}', b'{"k": "v"}'),
        ("time", 0, "-838:59:59", b"-838:59:59"),
        ("blob", ColumnFlag.BINARY, "\x00\xff", b"\x00\xff"),
    ],
)
def test_value_encodings(mysql_type, flags, text, raw):
    value = text.encode("latin-1") if flags & ColumnFlag.BINARY else text.encode()
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1, database="d", table="t", key_columns=[],
                      after=[column("c", value, mysql_type, flags)])
    codec = get_codec("craft")
    [message] = encode(codec, [event])
    assert raw in message
    [decoded] = decode_record(codec, record(message))
    assert decoded["after"][0]["value"] == value


@pytest.mark.parametrize(
    "mysql_type, flags, expected",
    [
        ("int(10) unsigned", 0, ("int unsigned", ColumnFlag.UNSIGNED)),
        ("decimal(5,2) unsigned", ColumnFlag.UNSIGNED, ("decimal unsigned", ColumnFlag.UNSIGNED)),
        ("varbinary(16)", 0, ("varbinary", ColumnFlag.BINARY)),
        ("varchar(16)", ColumnFlag.BINARY, ("varbinary", ColumnFlag.BINARY)),
        ("longblob", 0, ("longblob", ColumnFlag.BINARY)),
        ("mediumtext", 0, ("mediumtext", 0)),
        ("char(3)", 0, ("char", 0)),
        ("binary(3)", 0, ("binary", ColumnFlag.BINARY)),
        ("bit(1)", ColumnFlag.UNSIGNED, ("bit", ColumnFlag.UNSIGNED)),
        ("boolean", 0, ("tinyint", 0)),
        ("geometry", 0, ("geometry", 0)),
        (None, 0, ("varchar", 0)),
        ("uuid", 0, ("varchar", 0)),
    ],
)
def test_type_mapping(mysql_type, flags, expected):
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1, database="d", table="t", key_columns=[],
                      after=[column("c", None, mysql_type, flags)])
    codec = get_codec("craft")
    [decoded] = decode_record(codec, record(encode(codec, [event])[0]))
    c = decoded["after"][0]
    assert (c["mysql_type"], c["flags"]) == (expected[0], int(expected[1]))


def test_geometry_values_are_not_written_as_tidb_does():
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1, database="d", table="t", key_columns=[],
                      after=[column("g", b"\x00\x01", "geometry")])
    codec = get_codec("craft")
    [decoded] = decode_record(codec, record(encode(codec, [event])[0]))
    assert decoded["after"][0]["value"] is None


def test_unknown_ddl_action_code_is_kept_in_extras():
    codec = get_codec("craft")
    event = new_event(Kind.DDL, commit_ts=9 << 18, database="d", table="t",
                      ddl_query="ALTER TABLE t ADD COLUMN c INT", ddl_type="add column",
                      extras={"craft.ddl_action": "250"})
    [value] = encode(codec, [event])
    [decoded] = decode_record(codec, record(value))
    assert decoded["ddl_type"] == "add column" and decoded["extras"] == {"craft.ddl_action": "250"}
    assert encode(codec, [decoded]) == [value]


def test_event_without_commit_ts_gets_its_event_time_as_the_physical_part():
    event = new_event(Kind.DDL, execute_ts_ms=1700000000000, database="d", ddl_query="CREATE DATABASE d",
                      ddl_type="create schema")
    codec = get_codec("craft")
    [decoded] = decode_record(codec, record(encode(codec, [event])[0]))
    assert decoded["commit_ts"] == 1700000000000 << 18 and decoded["execute_ts_ms"] == 1700000000000
    assert decoded["table"] is None


def test_wide_tables_and_odd_column_names_round_trip():
    """The decoder builds one straight-line reader per column layout; names are bound as
    values, never spliced into its code, and thousands of columns are fine."""
    odd = ['x"}, {"y', "a\nb", "{v0}", "__import__('os')", "é中", ""]
    cols = [column(name, str(i), "int") for i, name in enumerate(odd)]
    cols += [column(f"c{i}", None if i % 3 else f"v{i}", "varchar(8)") for i in range(1500)]
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="wide",
                      key_columns=[], after=cols)
    codec = get_codec("craft")
    [value] = encode(codec, [event])
    expected = [(c["name"], c["value"]) for c in cols]
    for _ in range(10):  # the first reads take the generic loop, later ones the generated reader
        [decoded] = decode_record(codec, record(value))
        assert [(c["name"], c["value"]) for c in decoded["after"]] == expected


@pytest.mark.parametrize(
    "mysql_type, flags, value, reason",
    [
        ("int", 0, b"abc", "invalid literal"),
        ("bigint unsigned", ColumnFlag.UNSIGNED, b"-1", r"outside 0\.\.2\^64-1"),
        ("bigint", 0, b"9223372036854775808", "outside the int64 range"),
        ("set('a')", 0, b"18446744073709551616", r"outside 0\.\.2\^64-1"),
        ("float", 0, b"1e39", "too large"),
        ("double", 0, b"x", "could not convert"),
    ],
)
def test_values_craft_cannot_hold_are_encode_errors(mysql_type, flags, value, reason):
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1, database="d", table="t", key_columns=[],
                      after=[column("c", value, mysql_type, flags)])
    with pytest.raises(EncodeError, match=reason):
        encode(get_codec("craft"), [event])


@pytest.mark.parametrize(
    "event, reason",
    [
        (new_event(Kind.DDL, commit_ts=1, ddl_query="q", extras={"craft.ddl_action": "-1"}), "not a DDL action code"),
        (new_event(Kind.DDL, ddl_query="q"), "neither commit_ts nor execute_ts_ms"),
        (new_event(Kind.WATERMARK, watermark_ts=1 << 63), "outside 0..2"),
        (new_event(Kind.ROW, op=Op.INSERT, commit_ts=1, after=[column("c", "1", "int")],
                   extras={"craft.partition_id": "p1"}), "is not an integer"),
    ],
)
def test_events_craft_cannot_hold_are_encode_errors(event, reason):
    with pytest.raises(EncodeError, match=reason):
        encode(get_codec("craft"), [event])


def test_row_events_without_values_are_encode_errors():
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1, database="d", table="t", key_columns=[], after=[])
    with pytest.raises(EncodeError, match="no column values"):
        encode(get_codec("craft"), [event])


# ----------------------------------------------------------------------------- batching

def rows(n: int, value: str = "aa"):
    return [
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=(1 << 40) + i, database="a", table="b",
                  key_columns=[], after=[column("col1", value, "varchar")])
        for i in range(n)
    ]


def test_max_batch_size_splits_rows_like_ticdc():
    codec = get_codec("craft", {"max-batch-size": "64"})
    messages = encode(codec, rows(1000))
    counts = [len(decode_record(codec, record(m))) for m in messages]
    assert counts == [64] * 15 + [40]


def test_default_batch_size_is_16():
    codec = get_codec("craft")
    assert [len(decode_record(codec, record(m))) for m in encode(codec, rows(40))] == [16, 16, 8]


def test_max_message_bytes_uses_ticdcs_estimate_and_includes_the_row_that_crosses_it():
    # TiCDC's estimate per row here: 32 + len("a") + len("b") + len("col1") + len("aa") + 16 = 56
    codec = get_codec("craft", {"max-message-bytes": "256"})
    messages = encode(codec, rows(10000))
    assert {len(decode_record(codec, record(m))) for m in messages} == {5}  # 5 * 56 = 280 > 256
    assert max(len(m) for m in messages) <= 256  # TiCDC's own test: real size stays below


def test_ddl_and_watermarks_are_alone_and_close_the_pending_batch():
    codec = get_codec("craft")
    ddl = new_event(Kind.DDL, commit_ts=(1 << 40) + 5, database="a", table="b",
                    ddl_query="ALTER TABLE b ADD COLUMN c INT", ddl_type="add column")
    mark = new_event(Kind.WATERMARK, watermark_ts=(1 << 40) + 6)
    stream = rows(3)[:2] + [ddl] + rows(3)[2:] + [mark]
    messages = encode(codec, stream)
    decoded = [[e["kind"] for e in decode_record(codec, record(m))] for m in messages]
    assert decoded == [["row", "row"], ["ddl"], ["row"], ["watermark"]]


def test_ddl_and_watermarks_are_broadcast_to_every_partition():
    codec = get_codec("craft")
    ddl = new_event(Kind.DDL, commit_ts=1 << 40, database="a", table="b", ddl_query="TRUNCATE TABLE b",
                    ddl_type="truncate table")
    mark = new_event(Kind.WATERMARK, watermark_ts=1 << 40)
    records = encode_records(codec, [*rows(2), ddl, mark], topic="t", partitions=3, dispatch=lambda e: 1)
    kinds = {(r.partition, e["kind"]) for r in records for e in decode_record(codec, r)}
    assert kinds == {(0, "ddl"), (1, "ddl"), (2, "ddl"), (0, "watermark"), (1, "watermark"),
                     (2, "watermark"), (1, "row")}


def test_options_are_validated_and_unknown_ones_listed():
    with pytest.raises(ConfigError, match="max-batch-size"):
        get_codec("craft", {"max-batch-size": "0"})
    with pytest.raises(ConfigError, match="expected an integer"):
        get_codec("craft", {"max-message-bytes": "1MB"})
    with pytest.raises(ConfigError) as info:
        get_codec("craft", {"enable-tidb-extension": "true"})
    assert "max-batch-size, max-message-bytes" in str(info.value)


# ----------------------------------------------------------------------------- bad input

def with_version(seed: bytes, version: int) -> bytes:
    return uvarint(version) + seed[1:]


BAD = [
    (b"", "empty value", 0),
    (with_version(SEED_RESOLVED, 2), "unsupported craft version 2", 0),
    (with_version(SEED_RESOLVED, 0), "unsupported craft version 0", 0),
    (b"\x80", "varint runs past the end", 0),
    # a resolved event whose commit ts is an 11-byte varint / overflows 64 bits (sizes adjusted)
    (b"\x01" + b"\xff" * 10 + b"\x01" + b"\x03\x01\x01\x01" + b"\x02\x1e\x1d\x01\x00\x05",
     "varint longer than 10 bytes", 1),
    (b"\x01" + b"\xff" * 9 + b"\x02" + b"\x03\x01\x01\x01" + b"\x02\x1c\x1b\x01\x00\x05",
     "varint overflows 64 bits", 1),
    (b"\x01" + b"\xff" * 9 + b"\x01" + b"\x03\x01\x01\x01" + b"\x02\x1c\x1b\x01\x00\x05",
     "commit ts above 2^63-1", 1),
    (SEED_RESOLVED[:-1], "size tables", None),
    (SEED_RESOLVED[:-1] + b"\x7f", "do not fit before the trailer", None),
    (SEED_RESOLVED[:-2] + b"\x02\x05", "sections do not add up", 14),
    (SEED_RESOLVED[:-2] + b"\x01\x05", "negative body size", 14),
    (SEED_RESOLVED[:10] + b"\x07" + SEED_RESOLVED[11:], "unknown event type 7", 10),
    (SEED_RESOLVED[:12] + b"\x00" + SEED_RESOLVED[13:], "term id 0 not in the 0-term dictionary", 12),
    (SEED_DDL[:15] + b"\x7f" + SEED_DDL[16:], "does not fill", 15),
    (SEED_DDL[:16] + b"\xff" + SEED_DDL[17:], "not UTF-8", 16),
    (SEED_ROW[:17] + b"\x7e" + SEED_ROW[18:], "not in the 10-term dictionary", 16),
    (SEED_ROW[:25] + b"\x11" + SEED_ROW[26:], "unknown MySQL type code 17", 24),
    (SEED_ROW[:41] + b"\x03" + SEED_ROW[42:], "negative value length -2", 49),
    (SEED_ROW[:47] + b"\x08" + SEED_ROW[48:], "runs past its column group", 120),  # int of 4 bytes
    (SEED_ROW[:46] + b"\x04" + SEED_ROW[47:], "bad float value", 112),  # float of 2 bytes
    (SEED_ROW[:47] + b"\x02" + SEED_ROW[48:], "bad int value", 120),  # int of 1 byte
    (SEED_ROW[:14] + b"\x03" + SEED_ROW[15:], "column group type 3", 14),
]


@pytest.mark.parametrize("value, reason, byte", BAD, ids=[r for _, r, _ in BAD])
def test_bad_messages_raise_a_decode_error_naming_protocol_object_offset_and_byte(value, reason, byte):
    with pytest.raises(DecodeError) as info:
        decode_record(get_codec("craft"), record(value))
    error = info.value
    message = str(error)
    assert reason in message
    assert message.startswith("craft: ")
    assert f"object {OBJECT}" in message and "offset 7" in message and "byte " in message
    assert error.byte_offset is not None
    if byte is not None:
        assert error.byte_offset == byte


def test_tombstone_is_a_decode_error():
    with pytest.raises(DecodeError, match="no value"):
        decode_record(get_codec("craft"), KafkaRecord("t", 0, 1, None, b"k", None))


def mutations(seed: bytes, rng: random.Random) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(data)) if data else 0
        if op == 0 and data:
            data[i] = rng.randrange(256)
        elif op == 1 and data:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 2:
            data.insert(i, rng.randrange(256))
        elif op == 3 and data:
            del data[i : i + rng.randint(1, 8)]
        elif op == 4:
            data = data[: rng.randrange(len(data) + 1)]  # truncate
        else:
            data[i:i] = bytes(rng.choice([[0x80] * 11, [0xFF] * 10 + [0x7F], [0x7F], [0x01], [0x00]]))
    return bytes(data)


def interior_mutation(seed: bytes, rng: random.Random) -> bytes:
    """Bytes changed in place between the version and the size tables: the framing still
    adds up, so decoding reaches headers, term ids, column layouts and values."""
    assert seed[-1] < 0x80  # a one-byte trailer
    tables_start = len(seed) - 1 - seed[-1]
    data = bytearray(seed)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(1, tables_start)
        data[i] = rng.choice([rng.randrange(256), data[i] ^ 1 << rng.randrange(8), 0x80, 0x01, 0x7F])
    return bytes(data)


def batched_message() -> bytes:
    pk = ColumnFlag.UNSIGNED | ColumnFlag.HANDLE_KEY
    events = [
        new_event(Kind.ROW, op=Op.UPDATE, commit_ts=(1 << 40) + i, database="d", table=f"t{i % 2}",
                  key_columns=["id"],
                  before=[column("id", str(i), "bigint unsigned", pk), column("f", "1.5", "double"),
                          column("y", "2001", "year"), column("e", "2", "enum"), column("b", b"\xff", "blob")],
                  after=[column("id", str(i), "bigint unsigned", pk), column("f", "2.5", "float"),
                         column("y", None, "year"), column("e", "1", "set"), column("b", b"", "blob")])
        for i in range(4)
    ]
    [value] = encode(get_codec("craft", {"max-batch-size": "4"}), events)
    return value


def test_mutation_fuzz_only_decode_errors_escape():
    """Thousands of truncated / corrupted / extended golden vectors and a batched message, half
    of them corrupted only inside (framing intact): `decode` itself raises nothing but a
    DecodeError with a byte position."""
    codec = get_codec("craft")
    seeds = [*SEEDS, batched_message()]
    rng = random.Random(20240611)
    outcomes = {"ok": 0, "error": 0}
    fields = set()
    for n in range(8000):
        seed = seeds[n % len(seeds)]
        value = interior_mutation(seed, rng) if n % 2 else mutations(seed, rng)
        try:
            events = codec.decode(record(value))
        except DecodeError as e:
            assert e.byte_offset is not None, (value.hex(), str(e))
            assert 0 <= e.byte_offset <= len(value), (value.hex(), str(e))
            outcomes["error"] += 1
            fields.add((e.field or "").split(".")[0].split("[")[0])
            continue
        outcomes["ok"] += 1
        assert all(isinstance(e, dict) for e in events)
    assert outcomes["error"] > 5000 and outcomes["ok"] > 100
    # every section of the message was reached by some corruption
    assert {"version", "trailer", "size tables", "header", "dictionary", "event"} <= fields
    # and decode_record names the record for every one of them
    with pytest.raises(DecodeError, match=f"object {OBJECT}.*offset 7.*byte"):
        decode_record(codec, record(SEED_ROW[:-3]))


# ----------------------------------------------------------------------------- float text

@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_text_is_numpys_shortest_positional_rendering(f):
    assert double_text(struct.pack("<d", f)) == np.format_float_positional(f, unique=True, trim="-").encode()


@settings(max_examples=500, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float_text_round_trips_the_float32(f):
    text = float_text(struct.pack("<d", f))
    assert b"e" not in text
    assert np.float32(text.decode()) == np.float32(f)


def test_non_finite_floats_use_gos_spelling_and_round_trip():
    for f, text in ((float("nan"), b"NaN"), (float("inf"), b"+Inf"), (float("-inf"), b"-Inf")):
        raw = struct.pack("<d", f)
        assert double_text(raw) == float_text(raw) == text


# ----------------------------------------------------------------------------- round trips


def craft_type(mysql_type: str | None) -> str:
    """What craft keeps of a type: the base name (craft carries the MySQL type code), with
    `unsigned` for numeric types."""
    parsed = parse_type(mysql_type)
    base = parsed.base
    if parsed.unsigned and base in ("tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal"):
        return base + " unsigned"
    return base


def as_craft(event: dict) -> dict:
    """What craft can carry of a canonical event: commit ts (event time << 18 when missing),
    execute_ts_ms = commit_ts >> 18, type names without parameters, no labels, no tx_id /
    position / extras, key columns = the handle-key flagged columns."""
    expected = {k: event[k] for k in CONTENT_FIELDS}
    expected.update(position=None, tx_id=None, extras=None)
    if event["kind"] == Kind.WATERMARK:
        expected.update(execute_ts_ms=event["watermark_ts"] >> 18, database=None, table=None)
        return expected
    ts = event["commit_ts"] if event["commit_ts"] is not None else event["execute_ts_ms"] << 18
    expected.update(commit_ts=ts, execute_ts_ms=ts >> 18, database=event["database"] or None,
                    table=event["table"] or None)
    if event["kind"] == Kind.DDL:
        return expected
    keys = set(event["key_columns"] or ())
    for side in ("before", "after"):
        if not expected[side]:
            expected[side] = None
            continue
        out = []
        for c in expected[side]:
            flags = c["flags"] | (ColumnFlag.HANDLE_KEY if c["name"] in keys else 0)
            value = None if parse_type(c["mysql_type"]).base == "geometry" else c["value"]
            out.append({"name": c["name"], "mysql_type": craft_type(c["mysql_type"]), "flags": int(flags),
                        "value": value, "label": None})
        expected[side] = out
    image = expected["before"] or expected["after"]
    expected["key_columns"] = [c["name"] for c in image if c["flags"] & ColumnFlag.HANDLE_KEY]
    if expected["before"] is None:
        expected["op"] = Op.INSERT
    elif expected["after"] is None:
        expected["op"] = Op.DELETE
    return expected


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(strategies.events(), min_size=1, max_size=8),
    batch=st.integers(1, 5),
    max_bytes=st.sampled_from([1, 400, 10485760]),
)
def test_round_trip_of_any_event_stream(events, batch, max_bytes):
    codec = get_codec("craft", {"max-batch-size": str(batch), "max-message-bytes": str(max_bytes)})
    messages = encode(codec, events, partition=3)
    decoded = [
        e for offset, value in enumerate(messages)
        for e in decode_record(codec, KafkaRecord("t", 3, offset, None, None, value))
    ]
    assert [{k: e[k] for k in CONTENT_FIELDS} for e in decoded] == [as_craft(e) for e in events]
    # re-encoding the decoded stream gives the same messages, byte for byte
    assert encode(codec, decoded, partition=3) == messages


@settings(max_examples=100, deadline=None)
@given(schema=strategies.table_schemas(min_columns=3, max_columns=12), data=st.data())
def test_round_trip_of_one_table_batch(schema, data):
    """Many rows of one table share a message (and the decoder's cached group layouts)."""
    events = data.draw(st.lists(strategies.row_events(schema), min_size=2, max_size=20))
    codec = get_codec("craft", {"max-batch-size": "20"})
    [value] = encode(codec, events)
    decoded = decode_record(codec, record(value))
    assert [{k: e[k] for k in CONTENT_FIELDS} for e in decoded] == [as_craft(e) for e in events]
    # a second decode (layouts now cached) gives the same events
    assert [{k: e[k] for k in CONTENT_FIELDS} for e in decode_record(codec, record(value))] == [
        {k: e[k] for k in CONTENT_FIELDS} for e in decoded
    ]
