"""canal-protobuf: golden vectors built by hand from Canal's field numbers (independently of the
generated code), proto2 defaults, the raw Packet form, transaction entries, errors, hypothesis
round trips and a mutation fuzz test."""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import ConfigError, DecodeError, KafkaRecord, decode_record, get_codec
from cdc_codecs.canal_protobuf import binlog_file_number
from cdc_codecs.events import CONTENT_FIELDS, ColumnFlag, Kind, Op, new_event
from cdc_codecs.proto import canal_pb2 as pb

from .. import strategies
from ..support.canonical import column_flags, to_record_batch


# ----------------------------------------------------------------------------- a hand wire writer
# Protobuf wire format written out by hand, so the golden bytes do not come from the code under
# test: key = field << 3 | wire type; 0 varint (negative int32/int64: 10 bytes), 2 length-delimited.

def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def vf(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def sf(field: int, data: bytes | str) -> bytes:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return varint(field << 3 | 2) + varint(len(data)) + data


def column(index, sql_type, name, value, mysql_type, key=False, updated=False) -> bytes:
    """A Column as Canal's LogEventConvert fills it: isNull always set, value only when not NULL."""
    return (
        (vf(1, index) if index else b"") + (vf(2, sql_type) if sql_type else b"") + sf(3, name)
        + (vf(4, 1) if key else b"") + (vf(5, 1) if updated else b"")
        + vf(6, 1 if value is None else 0) + (sf(8, value) if value else b"") + sf(10, mysql_type)
    )


def header(logfile="mysql-bin.000123", offset=4567, execute=1700000000000, schema="shop", table="orders",
           length=120, event_type=None, props=(), gtid="") -> bytes:
    """A Header as Canal's createHeader writes it (version 1, UTF-8, MYSQL)."""
    return (
        vf(1, 1) + sf(2, logfile) + vf(3, offset) + vf(4, 1) + sf(5, "UTF-8") + vf(6, execute) + vf(7, 2)
        + (sf(8, schema) if schema else b"") + (sf(9, table) if table else b"") + vf(10, length)
        + (vf(11, event_type) if event_type is not None else b"")
        + b"".join(sf(12, sf(1, k) + sf(2, v)) for k, v in props) + (sf(13, gtid) if gtid else b"")
    )


def entry(head: bytes, entry_type: int, store: bytes) -> bytes:
    return sf(1, head) + vf(2, entry_type) + (sf(3, store) if store else b"")


def row_change(event_type: int, rows: list[bytes], table_id=108) -> bytes:
    return vf(1, table_id) + vf(2, event_type) + vf(10, 0) + b"".join(sf(12, r) for r in rows)


def builder_packet(batch_id: int, entries: list[bytes]) -> bytes:
    """CanalMessageSerializerUtil's builder path: version=1, type=MESSAGES, body."""
    body = (vf(1, batch_id) if batch_id else b"") + b"".join(sf(2, e) for e in entries)
    return vf(2, 1) + vf(3, 7) + sf(5, body)


def raw_packet(batch_id: int, entries: list[bytes]) -> bytes:
    """Its raw path: type and body only, batch_id always written."""
    return vf(3, 7) + sf(5, vf(1, batch_id) + b"".join(sf(2, e) for e in entries))


KEEP = {"keep-original-entries": "true"}



def record(value: bytes, offset: int = 11) -> KafkaRecord:
    return KafkaRecord("canal", 2, offset, 1700000000000, None, value, (), "s3://b/canal/2/x.avro")


def reencode(codec, events) -> bytes:
    [message] = list(codec.encode(events, topic="canal", partition=2))
    assert message.key is None
    return message.value


def values(image) -> dict:
    return {c["name"]: c["value"] for c in image}


# ----------------------------------------------------------------------------- golden vectors

# A one-row DELETE in the raw form, every byte written out:
RAW_DELETE = bytes.fromhex(
    "1807"                      # Packet.type = MESSAGES (7)
    "2a68"                      # Packet.body, 104 bytes: Messages
    "0805"                      #   batch_id = 5
    "1264"                      #   messages[0], 100 bytes: Entry
    "0a3e"                      #     header, 62 bytes
    "0801"                      #       version = 1
    "1210" "6d7973716c2d62696e2e303030303031"  # logfileName = mysql-bin.000001
    "1804"                      #       logfileOffset = 4
    "2001"                      #       serverId = 1
    "2a05" "5554462d38"         #       serverenCode = UTF-8
    "30e807"                    #       executeTime = 1000
    "3802"                      #       sourceType = MYSQL
    "4201" "64"                 #       schemaName = d
    "4a01" "74"                 #       tableName = t
    "501e"                      #       eventLength = 30
    "5803"                      #       eventType = DELETE
    "620e" "0a09" "726f7773436f756e74" "1201" "31"  # props: rowsCount = 1
    "1002"                      #     entryType = ROWDATA
    "1a20"                      #     storeValue, 32 bytes: RowChange
    "082a"                      #       tableId = 42
    "1003"                      #       eventType = DELETE
    "5000"                      #       isDdl = false
    "6218"                      #       rowDatas[0], 24 bytes
    "0a16"                      #         beforeColumns[0], 22 bytes
    "1004"                      #           sqlType = 4 (INTEGER)
    "1a02" "6964"               #           name = id
    "2001"                      #           isKey = true
    "3000"                      #           isNull = false
    "4201" "37"                 #           value = 7
    "5207" "696e74283131 29".replace(" ", "")  # mysqlType = int(11)
)


def test_raw_delete_every_byte():
    assert len(RAW_DELETE) == 108
    # the hand writer produces the same bytes
    col = column(0, 4, "id", "7", "int(11)", key=True)
    head = header("mysql-bin.000001", 4, 1000, "d", "t", 30, pb.DELETE, [("rowsCount", "1")])
    assert raw_packet(5, [entry(head, 2, row_change(3, [sf(1, col)], table_id=42))]) == RAW_DELETE
    codec = get_codec("canal-protobuf")
    [event] = decode_record(codec, record(RAW_DELETE))
    assert (event["kind"], event["op"]) == (Kind.ROW, Op.DELETE)
    assert event["position"] == [1, 4, 0]
    assert event["commit_ts"] is None and event["execute_ts_ms"] == 1000
    assert (event["database"], event["table"], event["key_columns"]) == ("d", "t", ["id"])
    assert event["after"] is None
    assert event["before"] == [{"name": "id", "mysql_type": "int(11)", "flags": ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY,
                                "value": b"7", "label": None}]
    assert event["extras"] == {
        "canal.id": "5", "canal.packet": "raw", "canal.logfileName": "mysql-bin.000001",
        "canal.serverId": "1", "canal.eventLength": "30", "canal.header.rowsCount": "1",
        "canal.tableId": "42",
    }
    assert (event["topic"], event["partition"], event["offset"], event["event_index"]) == ("canal", 2, 11, 0)
    assert reencode(codec, [event]) == RAW_DELETE
    to_record_batch([event])  # fits the Arrow schema


U64_MAX = "18446744073709551615"
BINARY = bytes([0, 1, 10, 34, 92, 127, 128, 200, 255])

INSERT_COLUMNS = [
    # index, sqlType, name, Canal's value, mysqlType, isKey
    (0, 4, "id", "1", "int(11)", True),
    (1, 3, "big", U64_MAX, "bigint(20) unsigned", False),  # > 2^63: BigInteger, sqlType DECIMAL
    (2, -5, "small_u", "9223372036854775807", "bigint(20) unsigned", False),
    (3, 3, "price", "129012.1230000", "decimal(20,7)", False),
    (4, 2004, "raw", BINARY.decode("latin-1"), "varbinary(16)", False),
    (5, 4, "color", "2", "enum('red','green','it''s')", False),
    (6, -7, "tags", "5", "set('a','b','c')", False),
    (7, 7, "ratio", "1.0E10", "float", False),
    (8, 8, "pi", "3.141592653589793", "double", False),
    (9, 93, "created", "2023-11-15 06:13:20.123", "timestamp(3)", False),
    (10, 93, "at", "2023-11-15 06:13:20", "datetime", False),
    (11, 2005, "note", "中文 & <tag> \"q\"", "text", False),
    (12, -4, "nothing", None, "mediumtext", False),
    (13, 12, "doc", '{"k": [1, 2]}', "json", False),
    (14, -7, "flags", "65", "bit(8)", False),
    (15, 12, "y", "2024", "year(4)", False),
]


def insert_message() -> bytes:
    cols = b"".join(sf(2, column(i, t, n, v, m, key=k, updated=True)) for i, t, n, v, m, k in INSERT_COLUMNS)
    head = header(event_type=pb.INSERT, props=[("curtGtid", "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"), ("rowsCount", "1")],
                  gtid="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23")
    return builder_packet(1001, [entry(head, 2, row_change(pb.INSERT, [cols]))])


def test_builder_insert_of_every_type_with_the_server_time_zone():
    value = insert_message()
    codec = get_codec("canal-protobuf", {"source-timezone": "Asia/Shanghai"})
    [event] = decode_record(codec, record(value))
    assert event["op"] == Op.INSERT and event["before"] is None
    assert event["position"] == [123, 4567, 0]
    assert event["tx_id"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23"
    assert event["extras"]["canal.header.curtGtid"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    assert event["extras"]["canal.id"] == "1001" and "canal.packet" not in event["extras"]
    cols = {c["name"]: c for c in event["after"]}
    assert [c["name"] for c in event["after"]] == [c[2] for c in INSERT_COLUMNS]
    assert cols["big"]["value"] == U64_MAX.encode() and cols["big"]["flags"] == ColumnFlag.UNSIGNED
    assert cols["small_u"]["value"] == b"9223372036854775807"
    assert cols["price"]["value"] == b"129012.1230000"
    assert cols["raw"]["value"] == BINARY and cols["raw"]["flags"] == ColumnFlag.BINARY
    assert (cols["color"]["value"], cols["color"]["label"]) == (b"2", "green")
    assert (cols["tags"]["value"], cols["tags"]["label"]) == (b"5", "a,c")
    assert cols["ratio"]["value"] == b"10000000000"  # Java's 1.0E10 -> canonical
    assert cols["pi"]["value"] == b"3.141592653589793"
    assert cols["created"]["value"] == b"2023-11-14 22:13:20.123"  # Asia/Shanghai -> UTC
    assert cols["at"]["value"] == b"2023-11-15 06:13:20"  # DATETIME has no zone
    assert cols["note"]["value"] == "中文 & <tag> \"q\"".encode()
    assert cols["nothing"]["value"] is None
    assert cols["doc"]["value"] == b'{"k": [1, 2]}'
    assert cols["flags"]["value"] == b"65" and cols["y"]["value"] == b"2024"
    assert cols["id"]["flags"] == ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY
    assert event["key_columns"] == ["id"]
    [kept] = decode_record(get_codec("canal-protobuf", {**KEEP, "source-timezone": "Asia/Shanghai"}), record(value))
    assert "canal.entry" not in kept["extras"]  # Canal's layout: the encoder writes this entry itself
    assert reencode(codec, [event]) == value
    # read in UTC, the TIMESTAMP stays as Canal wrote it
    [utc] = decode_record(get_codec("canal-protobuf"), record(value))
    assert values(utc["after"])["created"] == b"2023-11-15 06:13:20.123"


def update_rows() -> list[bytes]:
    def image(id_, v, field):
        return b"".join(sf(field, c) for c in [
            column(0, 4, "id", id_, "int(11)", key=True, updated=field == 2 and id_ != "1"),
            column(1, 12, "v", v, "varchar(8)", updated=field == 2 and v != "old"),
        ])
    # row 0: v changes; row 1: the primary key changes (1 -> 2), v stays
    return [image("1", "old", 1) + image("1", "new", 2), image("1", "old", 1) + image("2", "old", 2)]


def transaction_message() -> bytes:
    begin = entry(header(offset=4000, schema="", table="", length=80), 1, vf(4, 77))
    update = entry(header(event_type=pb.UPDATE, props=[("rowsCount", "2")]), 2, row_change(pb.UPDATE, update_rows()))
    end = entry(header(offset=4800, schema="", table="", length=31), 3, sf(2, "9001"))
    return raw_packet(0, [begin, update, end])


def test_raw_transaction_with_a_primary_key_change():
    value = transaction_message()
    codec = get_codec("canal-protobuf")
    events = decode_record(codec, record(value))
    assert [e["op"] for e in events] == [Op.UPDATE, Op.UPDATE]
    assert [e["position"] for e in events] == [[123, 4567, 0], [123, 4567, 1]]
    assert [e["event_index"] for e in events] == [0, 1]
    first, second = events
    assert values(first["before"]) == {"id": b"1", "v": b"old"} and values(first["after"]) == {"id": b"1", "v": b"new"}
    # one event whose before and after keys differ
    assert values(second["before"])["id"] == b"1" and values(second["after"])["id"] == b"2"
    for e in events:
        assert e["extras"]["canal.xid"] == "9001" and e["extras"]["canal.threadId"] == "77"
        assert e["extras"]["canal.packet"] == "raw" and e["extras"]["canal.id"] == "0"
    # BEGIN and END are no events; their bytes ride along for the re-encode
    assert base64.b64decode(first["extras"]["canal.leading"])[:2] == b"\x0a" + bytes([len(header(offset=4000, schema="", table="", length=80))])
    assert "canal.trailing" in second["extras"]
    assert reencode(codec, events) == value


def test_proto2_defaults_apply_when_fields_are_absent():
    # no entryType (-> ROWDATA), header without version / sourceType / eventType, RowChange
    # without eventType (-> UPDATE) and isDdl (-> false), columns without isNull (-> false)
    head = sf(2, "mysql-bin.000007") + vf(3, 99) + sf(8, "shop") + sf(9, "t")
    row = sf(1, sf(3, "id") + sf(8, "1") + sf(10, "int")) + sf(2, sf(3, "id") + sf(8, "2") + sf(10, "int"))
    value = vf(3, 7) + sf(5, sf(2, sf(1, head) + sf(3, sf(12, row))))
    codec = get_codec("canal-protobuf", KEEP)
    [event] = decode_record(codec, record(value))
    assert (event["kind"], event["op"]) == (Kind.ROW, Op.UPDATE)
    assert values(event["before"]) == {"id": b"1"} and values(event["after"]) == {"id": b"2"}
    assert event["position"] == [7, 99, 0] and event["key_columns"] == []
    assert event["execute_ts_ms"] is None
    # not the layout Canal writes: the original entry is kept and the re-encode is still exact
    assert "canal.entry" in event["extras"]
    assert reencode(codec, [event]) == value
    # without keeping it (the default), the encoder writes Canal's layout, which says the same
    plain = get_codec("canal-protobuf")
    [again] = decode_record(plain, record(value))
    rewritten = reencode(plain, [again])
    assert rewritten != value
    [third] = decode_record(plain, record(rewritten))
    same = ("kind", "op", "position", "database", "table", "before", "after")
    assert {k: third[k] for k in same} == {k: again[k] for k in same}
    # an explicit 0 (proto3's placeholder, unknown to proto2 readers) reads as the default too
    zero = vf(3, 7) + sf(5, sf(2, sf(1, head) + vf(2, 0) + sf(3, vf(2, 0) + sf(12, row))))
    [event0] = decode_record(plain, record(zero))
    assert (event0["kind"], event0["op"]) == (Kind.ROW, Op.UPDATE)


def test_a_kept_entry_is_not_used_when_the_event_changed():
    head = sf(2, "mysql-bin.000007") + vf(3, 99) + sf(8, "shop") + sf(9, "t")
    row = sf(1, sf(3, "id") + sf(8, "1") + sf(10, "int")) + sf(2, sf(3, "id") + sf(8, "2") + sf(10, "int"))
    value = vf(3, 7) + sf(5, sf(2, sf(1, head) + sf(3, sf(12, row))))
    codec = get_codec("canal-protobuf", KEEP)
    [event] = decode_record(codec, record(value))
    assert "canal.entry" in event["extras"]
    event["after"][0]["value"] = b"3"
    [changed] = decode_record(codec, record(reencode(codec, [event])))
    assert values(changed["after"]) == {"id": b"3"}


def test_ddl_entry():
    store = vf(2, pb.CREATE) + vf(10, 1) + sf(11, "CREATE TABLE t (id INT PRIMARY KEY)") + sf(14, "shop")
    value = builder_packet(3, [entry(header(schema="shop", table="t", event_type=pb.CREATE), 2, store)])
    codec = get_codec("canal-protobuf")
    [event] = decode_record(codec, record(value))
    assert event["kind"] == Kind.DDL and event["ddl_type"] == "create table"
    assert event["ddl_query"] == "CREATE TABLE t (id INT PRIMARY KEY)"
    assert (event["database"], event["table"], event["position"]) == ("shop", "t", [123, 4567, 0])
    assert "canal.type" not in event["extras"] and "canal.ddlSchemaName" not in event["extras"]
    assert reencode(codec, [event]) == value
    assert codec.partitions_for(event, 4, 3) == (0,)


def test_ddl_schema_and_type_that_differ_are_kept():
    # CREATE DATABASE run without USE: no ddlSchemaName; Canal calls it QUERY, TiCDC too
    store = vf(2, pb.QUERY) + vf(10, 1) + sf(11, "CREATE DATABASE shop")
    value = builder_packet(3, [entry(header(schema="shop", table="", event_type=pb.QUERY), 2, store)])
    [event] = decode_record(get_codec("canal-protobuf"), record(value))
    assert event["ddl_type"] == "create schema" and event["table"] is None
    assert event["extras"]["canal.ddlSchemaName"] == ""
    assert reencode(get_codec("canal-protobuf"), [event]) == value
    # an ALTER Canal files as QUERY keeps its type
    store = vf(2, pb.QUERY) + vf(10, 1) + sf(11, "ALTER TABLE t ADD COLUMN c INT") + sf(14, "shop")
    value = builder_packet(3, [entry(header(schema="shop", table="t", event_type=pb.QUERY), 2, store)])
    [event] = decode_record(get_codec("canal-protobuf"), record(value))
    assert event["ddl_type"] == "add column" and event["extras"]["canal.type"] == "QUERY"
    assert reencode(get_codec("canal-protobuf"), [event]) == value


def test_per_key_split_entries_of_one_binlog_event_stay_apart():
    # canal.mq.partitionHash splits a rows event into one entry per row, all with its header
    def one(id_):
        cols = sf(2, column(0, 4, "id", id_, "int(11)", key=True, updated=True))
        return entry(header(event_type=pb.INSERT, props=[("rowsCount", "3")]), 2, row_change(pb.INSERT, [cols]))
    value = builder_packet(8, [one("1"), one("3")])
    codec = get_codec("canal-protobuf")
    events = decode_record(codec, record(value))
    assert [e["position"] for e in events] == [[123, 4567, 0], [123, 4567, 0]]
    assert [e["extras"]["canal.header.rowsCount"] for e in events] == ["3", "3"]
    assert reencode(codec, events) == value


def test_heartbeat_and_gtid_entries_are_not_rows():
    heartbeat = entry(vf(11, pb.MHEARTBEAT), 4, b"")
    assert decode_record(get_codec("canal-protobuf"), record(raw_packet(4, [heartbeat]))) == []
    gtid = entry(header(schema="", table="", event_type=pb.GTID), 5, sf(1, "gtid") + sf(2, "uuid:5"))
    cols = sf(2, column(0, 4, "id", "1", "int(11)", key=True, updated=True))
    row = entry(header(event_type=pb.INSERT, props=[("rowsCount", "1")]), 2, row_change(pb.INSERT, [cols]))
    value = raw_packet(4, [gtid, row, heartbeat])
    codec = get_codec("canal-protobuf")
    [event] = decode_record(codec, record(value))
    assert event["op"] == Op.INSERT
    assert reencode(codec, [event]) == value


def test_statement_annotation_rides_along_but_statement_dml_is_refused():
    query = entry(header(schema="", table="t", event_type=pb.QUERY), 2, vf(2, pb.QUERY) + sf(11, "insert into t values (1)"))
    cols = sf(2, column(0, 4, "id", "1", "int(11)", key=True, updated=True))
    row = entry(header(event_type=pb.INSERT, props=[("rowsCount", "1")]), 2, row_change(pb.INSERT, [cols]))
    value = builder_packet(4, [query, row])
    codec = get_codec("canal-protobuf")
    [event] = decode_record(codec, record(value))
    assert reencode(codec, [event]) == value
    statement = entry(header(event_type=pb.INSERT), 2, vf(2, pb.INSERT) + vf(10, 0) + sf(11, "insert into t values (1)"))
    with pytest.raises(DecodeError, match="statement-format"):
        decode_record(codec, record(builder_packet(4, [statement])))


def test_positions_order_numerically_across_binlog_rotation():
    assert binlog_file_number("mysql-bin.000009") == 9
    assert binlog_file_number("mysql-bin.1000000") == 1000000
    assert binlog_file_number("binlog") is None
    codec = get_codec("canal-protobuf")

    def at(name, offset):
        cols = sf(2, column(0, 4, "id", "1", "int(11)", key=True, updated=True))
        value = builder_packet(1, [entry(header(logfile=name, offset=offset, event_type=pb.INSERT,
                                                props=[("rowsCount", "1")]), 2, row_change(pb.INSERT, [cols]))])
        return decode_record(codec, record(value))[0]["position"]

    # text order would put .1000000 first and offset 900 after 10000
    assert at("mysql-bin.999999", 10000) < at("mysql-bin.1000000", 4)
    assert at("mysql-bin.000010", 900) < at("mysql-bin.000010", 10000)


def test_encoding_foreign_events_writes_canal_layout():
    event = new_event(
        Kind.ROW, op=Op.UPDATE, commit_ts=429918007904436226, execute_ts_ms=None, database="shop",
        table="t", key_columns=["id"],
        before=[{"name": "id", "mysql_type": "int", "flags": 10, "value": b"1", "label": None}],
        after=[{"name": "id", "mysql_type": "int", "flags": 10, "value": b"1", "label": None}],
    )
    codec = get_codec("canal-protobuf")
    value = reencode(codec, [event])
    packet = pb.Packet.FromString(value)
    assert packet.version == 1 and packet.type == pb.Packet.MESSAGES
    body = pb.Messages.FromString(packet.body)
    assert body.batch_id == 0
    entry_ = pb.Entry.FromString(body.messages[0])
    assert entry_.HasField("entryType") and entry_.entryType == pb.ROWDATA
    assert entry_.header.executeTime == 429918007904436226 >> 18
    assert entry_.header.logfileName == "" and entry_.header.serverenCode == "UTF-8"
    change = pb.RowChange.FromString(entry_.storeValue)
    assert change.HasField("isDdl") and not change.isDdl
    after = change.rowDatas[0].afterColumns[0]
    assert after.isKey and not after.updated and after.HasField("isNull") and after.sqlType == 4
    raw = get_codec("canal-protobuf", {"packet-form": "raw"})
    raw_value = reencode(raw, [event])
    assert raw_value[:6] == bytes.fromhex("18072a") + bytes([len(raw_value) - 4]) + bytes.fromhex("0800")
    [decoded] = decode_record(codec, record(value))
    assert decoded["position"] is None and decoded["commit_ts"] is None


@pytest.mark.parametrize(
    "value, reason, byte_offset",
    [
        (b"\xff\xff\xff", "not a Canal Packet", 0),
        (vf(3, 3), "not MESSAGES", 0),
        (vf(3, 7) + vf(4, 3), "compression 3 is not NONE", 0),
        (vf(3, 7) + sf(5, b"\x12\x05\x0a"), "not a Messages", 4),
        (vf(3, 7) + sf(5, sf(2, b"\x0a\x09zz")), "not a Canal Entry", 6),
        (vf(3, 7) + sf(5, sf(2, vf(2, 9))), "unknown entryType 9", 6),
        (vf(3, 7) + sf(5, sf(2, vf(2, 2) + sf(3, b"\x62\x05"))), "not a RowChange", 10),
        (builder_packet(1, [entry(header(logfile="binlog", event_type=pb.INSERT), 2,
                                  row_change(pb.INSERT, [sf(2, column(0, 4, "id", "1", "int"))]))]), "no numeric suffix", None),
        (builder_packet(1, [entry(header(event_type=pb.INSERT), 2,
                                  row_change(pb.INSERT, [sf(2, column(0, 2004, "b", "中", "blob"))]))]), "outside ISO-8859-1", None),
        (builder_packet(1, [entry(header(event_type=pb.INSERT), 2,
                                  row_change(pb.INSERT, [sf(2, column(0, 7, "f", "abc", "float"))]))]), "column 'f' (float)", None),
        (builder_packet(1, [entry(header(event_type=pb.UPDATE), 2,
                                  row_change(pb.UPDATE, [sf(2, column(0, 4, "id", "1", "int"))]))]), "without beforeColumns", None),
        (builder_packet(1, [entry(header(event_type=pb.CREATE), 2, vf(2, pb.CREATE) + vf(10, 1))]), "DDL entry has no sql", None),
    ],
)
def test_bad_values_raise_a_decode_error_with_position(value, reason, byte_offset):
    with pytest.raises(DecodeError) as info:
        decode_record(get_codec("canal-protobuf"), record(value))
    error = info.value
    assert reason in str(error)
    assert str(error).startswith("canal-protobuf: ")
    assert "object s3://b/canal/2/x.avro" in str(error) and "offset 11" in str(error)
    if byte_offset is not None:
        assert error.byte_offset == byte_offset
    else:  # rows: the byte offset of the entry's storeValue and the field path
        assert error.byte_offset and error.byte_offset > 0 and error.field.startswith("messages[0]")


def test_tombstone_and_options():
    with pytest.raises(DecodeError, match="no value"):
        decode_record(get_codec("canal-protobuf"), KafkaRecord("t", 0, 1, None, b"k", None))
    with pytest.raises(ConfigError, match="unknown time zone"):
        get_codec("canal-protobuf", {"source-timezone": "Mars/Olympus"})
    with pytest.raises(ConfigError, match="packet-form"):
        get_codec("canal-protobuf", {"packet-form": "json"})
    assert get_codec("canal-protobuf", {"source-timezone": "+08:00"}).zone.utcoffset(None).total_seconds() == 8 * 3600


def test_watermarks_are_not_sent():
    event = new_event(Kind.WATERMARK, watermark_ts=1 << 50)
    assert list(get_codec("canal-protobuf").encode([event], topic="t", partition=0)) == []


# ----------------------------------------------------------------------------- round trips

def as_canal_protobuf(event: dict) -> dict | None:
    """What canal-protobuf carries of a canonical event from another protocol: no commit ts
    (executeTime is the event time, or commit_ts >> 18), no position (no binlog), flags from the
    type and the key, key columns named in column order, the batch id and Canal's rowsCount."""
    if event["kind"] == Kind.WATERMARK:
        return None
    expected = {k: event[k] for k in CONTENT_FIELDS}
    expected["commit_ts"] = None
    if expected["execute_ts_ms"] is None and event["commit_ts"] is not None:
        expected["execute_ts_ms"] = event["commit_ts"] >> 18
    expected["extras"] = {"canal.id": "0"}
    if event["kind"] == Kind.ROW:
        expected["extras"]["canal.header.rowsCount"] = "1"
        keys = set(event["key_columns"] or ())
        main = event["before"] if event["op"] == Op.DELETE else event["after"]
        expected["key_columns"] = [c["name"] for c in main if c["name"] in keys]
        for side in ("before", "after"):
            if expected[side] is not None:
                expected[side] = [
                    {**c, "flags": column_flags(c["mysql_type"], c["name"] in keys)}
                    for c in expected[side]
                ]
    return expected


@settings(max_examples=250, deadline=None)
@given(events=st.lists(strategies.events(), min_size=1, max_size=5))
def test_round_trip_of_any_event(events):
    codec = get_codec("canal-protobuf", KEEP)  # and what it writes needs no kept original
    messages = list(codec.encode(events, topic="t", partition=1))
    expected = [e for e in map(as_canal_protobuf, events) if e is not None]
    assert len(messages) == len(expected)
    for offset, (want, message) in enumerate(zip(expected, messages)):
        decoded = decode_record(codec, KafkaRecord("t", 1, offset, None, message.key, message.value))
        assert [{k: d[k] for k in CONTENT_FIELDS} for d in decoded] == [want]
        assert reencode(codec, decoded) == message.value


@st.composite
def canal_batches(draw):
    """Events as Canal produces them: entries of 1..3 rows of one table and op at one binlog
    position, whole-second event times, GTIDs, the header details in extras, one batch id."""
    seq = draw(st.integers(1, 10**7))
    batch = draw(st.integers(1, 2**62))
    gtid = draw(st.none() | st.just("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9"))
    events = []
    offset = draw(st.integers(4, 10**9))
    for _ in range(draw(st.integers(1, 3))):
        schema = draw(strategies.table_schemas(max_columns=4))
        rows = draw(st.integers(1, 3))
        op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
        es = draw(st.integers(1, 4102444800)) * 1000
        extras = {
            "canal.id": str(batch), "canal.logfileName": f"mysql-bin.{seq:06d}", "canal.serverId": "1",
            "canal.eventLength": str(draw(st.integers(1, 5000))), "canal.header.rowsCount": str(rows),
            "canal.tableId": str(draw(st.integers(1, 10**6))),
        }
        for r in range(rows):
            before = draw(strategies.images(schema)) if op != Op.INSERT else None
            after = draw(strategies.images(schema)) if op != Op.DELETE else None
            events.append(new_event(
                Kind.ROW, op=op, position=[seq, offset, r], execute_ts_ms=es, database=schema["database"],
                table=schema["table"], key_columns=["id"], before=before, after=after, tx_id=gtid,
                extras=dict(extras),
            ))
        offset += draw(st.integers(1, 10**6))
    return events


@settings(max_examples=150, deadline=None)
@given(events=canal_batches(), raw=st.booleans())
def test_round_trip_of_canal_batches_with_multi_row_entries(events, raw):
    if raw:
        for e in events:
            e["extras"]["canal.packet"] = "raw"
    codec = get_codec("canal-protobuf", KEEP)
    [message] = list(codec.encode(events, topic="t", partition=0))
    decoded = decode_record(codec, KafkaRecord("t", 0, 0, None, None, message.value))
    assert [{k: d[k] for k in CONTENT_FIELDS} for d in decoded] == [
        {k: v for k, v in as_canal_protobuf(e).items() if k not in ("extras", "commit_ts")} | {
            "extras": e["extras"], "commit_ts": None} for e in events
    ]
    assert reencode(codec, decoded) == message.value
    to_record_batch(decoded)


@st.composite
def timestamps(draw):
    seconds = draw(st.integers(1, 2**31 - 1))
    fsp = draw(st.sampled_from(["", ".5", ".123456"]))
    import datetime as dt

    text = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + fsp
    return text


@settings(max_examples=100, deadline=None)
@given(value=timestamps(), zone=st.sampled_from(["Asia/Shanghai", "America/New_York", "+05:30", "UTC"]))
def test_timestamps_convert_to_utc_and_back(value, zone):
    codec = get_codec("canal-protobuf", {"source-timezone": zone})
    event = new_event(Kind.ROW, op=Op.INSERT, execute_ts_ms=1000, database="d", table="t", key_columns=[],
                      after=[{"name": "ts", "mysql_type": "timestamp(6)", "flags": 0, "value": value.encode(), "label": None}])
    [message] = list(codec.encode([event], topic="t", partition=0))
    [decoded] = decode_record(codec, KafkaRecord("t", 0, 0, None, None, message.value))
    assert decoded["after"][0]["value"] == value.encode()
    rendered = pb.RowChange.FromString(pb.Entry.FromString(pb.Messages.FromString(pb.Packet.FromString(message.value).body).messages[0]).storeValue)
    shown = rendered.rowDatas[0].afterColumns[0].value
    assert (shown == value) == (zone == "UTC" or value.startswith("0000"))


# ----------------------------------------------------------------------------- fuzz

def _golden_vectors() -> list[bytes]:
    return [RAW_DELETE, insert_message(), transaction_message(),
            builder_packet(3, [entry(header(schema="shop", table="t", event_type=pb.CREATE), 2,
                                     vf(2, pb.CREATE) + vf(10, 1) + sf(11, "CREATE TABLE t (id INT)") + sf(14, "shop"))])]


def _mutations(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        i = rng.randrange(len(data)) if data else 0
        if choice < 0.35 and data:
            data[i] ^= 1 << rng.randrange(8)
        elif choice < 0.55 and data:
            data[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0x08, 0x12, 0x1A, 0x22, 0x62])
        elif choice < 0.7:
            del data[i:i + rng.randint(1, 8)]
        elif choice < 0.85:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        else:
            data = data[: rng.randrange(len(data) + 1)]
    return bytes(data)


def test_fuzz_mutated_vectors_raise_only_decode_errors():
    rng = random.Random(20240601)
    codecs = [get_codec("canal-protobuf"), get_codec("canal-protobuf", {**KEEP, "source-timezone": "Asia/Shanghai"})]
    vectors = _golden_vectors()
    outcomes = {"events": 0, "errors": 0}
    for n in range(10000):
        value = _mutations(rng, rng.choice(vectors))
        codec = codecs[n % 2]
        rec = record(value, offset=n)
        try:
            events = codec.decode(rec)  # the codec itself, not only decode_record's safety net
        except DecodeError:
            outcomes["errors"] += 1
            continue
        outcomes["events"] += 1
        decode_record(codec, rec)
        to_record_batch(events)  # whatever decodes fits the canonical schema
        if events:
            list(codec.encode(events, topic="t", partition=0))
    assert outcomes["errors"] > 3000 and outcomes["events"] > 600, outcomes


def test_a_position_that_is_not_a_binlog_position_is_not_written():
    """OceanBase's one-element position (its record id) says nothing about a binlog: it must
    not be read as (file, offset, row) — found by the conversion matrix (oceanbase-avro ->
    canal-protobuf raised IndexError)."""
    rows = [
        new_event(Kind.ROW, op=Op.INSERT, position=[7], execute_ts_ms=1700000000000, database="shop",
                  table="t", key_columns=["id"], after=[
                      {"name": "id", "mysql_type": "int", "flags": 0, "value": str(i).encode(), "label": None}])
        for i in (1, 2)
    ]
    codec = get_codec("canal-protobuf")
    messages = list(codec.encode(rows, topic="t", partition=0))
    decoded = [e for offset, m in enumerate(messages) for e in decode_record(codec, record(m.value, offset))]
    assert [values(e["after"]) for e in decoded] == [{"id": b"1"}, {"id": b"2"}]
    assert [e["position"] for e in decoded] == [None, None]
    assert all("canal.logfileName" not in e["extras"] for e in decoded)
