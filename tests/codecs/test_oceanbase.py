"""oceanbase-avro (OMS data subscription AvroRecord) and OceanBase's Canal JSON, from the seed
/work/shared/seeds/oceanbase-avro-and-canal-json.txt.

The seed has the Avro schema but no example records, so the golden records here are built by
hand as AvroRecord dicts and written with fastavro (not with the codec), then decoded field by
field; one of them is also written out as bytes. The seed's Canal JSON example is decoded by the
canal-json codec."""

from __future__ import annotations

import io
import random
import struct

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import ConfigError, DecodeError, KafkaRecord, decode_record, get_codec
from cdc_codecs.ddl_types import classify
from cdc_codecs.events import CONTENT_FIELDS, ColumnFlag, Kind, Op, column, new_event
from cdc_codecs.mysql_types import BINARY_BASES, enum_set_label, parse_type
from cdc_codecs.oceanbase_avro import _PARAM_BASES, CODE_TYPES, SCHEMA, TYPE_CODES, quote_label

from .. import strategies
from ..support.canonical import to_record_batch

NS = "com.xxx.oms.xxx.xxx.avro."  # the seed's (redacted) namespace; names never reach the bytes
OBJECT = "s3://b/ob/0/x.jsonl.gz"


def avro(record: dict) -> bytes:
    """A hand-built AvroRecord dict written by fastavro (not by the codec)."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, SCHEMA, record)
    return buffer.getvalue()


def kafka(value: bytes, offset: int = 7) -> KafkaRecord:
    return KafkaRecord("ob", 0, offset, 1700000000000, None, value, (), OBJECT)


def base_record(**fields) -> dict:
    record = {
        "id": 1001, "version": 1, "operation": "INSERT", "xid": None, "txind": None,
        "position": None, "timestamp": None, "source": None, "schemaName": "shop", "tableName": "t",
        "fields": None, "pkIndexes": None, "ukIndexes": None, "beforeImages": None,
        "afterImages": None, "sql": None, "tags": None, "total": -1, "index": -1,
        "beforeImageBytes": b"", "afterImageBytes": b"",
    }
    record.update(fields)
    return record


def cv(type_info: str, value=None, member: str | None = None) -> dict:
    """A ColumnValue; `member` names the union branch (a record name gets the namespace)."""
    if member is not None:
        value = (member if member in ("int", "long", "float", "double", "string", "bytes", "boolean")
                 else NS + member, value)
    return {"type_info": type_info, "value": value}


def by_name(image) -> dict:
    return {c["name"]: c for c in image}


def reencode(codec, events) -> bytes:
    messages = list(codec.encode(events, topic="ob", partition=0))
    assert len(messages) == 1 and messages[0].key is None
    return messages[0].value


# ----------------------------------------------------------------------------- every value member

WKB_POINT = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2)

# (name, dataTypeNumber, ColumnValue, expected mysql_type, value, label, flags)
ALL_MEMBERS = [
    ("id", 8, cv("LONG", 1, "long"), "bigint", b"1", None, ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY),
    ("c_tinyint", 1, cv("INTEGER", -128, "int"), "tinyint", b"-128", None, 0),
    ("c_bool", 1, cv("BOOLEAN", True, "boolean"), "tinyint", b"1", None, 0),
    ("c_mediumint", 9, cv("INTEGER", -8388608, "int"), "mediumint", b"-8388608", None, 0),
    ("c_int_unsigned", 3, cv("LONG", 4294967295, "long"), "int", b"4294967295", None, 0),
    ("c_bigint_unsigned", 8, cv("LONG", "18446744073709551615", "string"), "bigint", b"18446744073709551615", None, 0),
    ("c_float", 4, cv("FLOAT", 0.1, "float"), "float", b"0.1", None, 0),
    ("c_double", 5, cv("DOUBLE", 0.1, "double"), "double", b"0.1", None, 0),
    ("c_decimal", 246, cv("DECIMAL", {"precision": 10, "scale": 4, "value": "129012.123"}, "DecimalObject"),
     "decimal(10,4)", b"129012.1230", None, 0),
    ("c_date", 10, cv("DATE", {"year": 2020, "month": 2, "day": 29}, "DateObject"), "date", b"2020-02-29", None, 0),
    ("c_zero_date", 10, cv("DATE", "0000-00-00", "string"), "date", b"0000-00-00", None, 0),
    ("c_time", 11, cv("TIME", {"negative": True, "hours": 838, "minutes": 59, "seconds": 59, "nanos": 0},
                      "TimeObject"), "time", b"-838:59:59", None, 0),
    ("c_datetime", 12, cv("DATETIME", {"year": 2021, "month": 12, "day": 31, "hours": 23, "minutes": 59,
                                       "seconds": 59, "nanos": 123456000}, "DateTimeObject"),
     "datetime", b"2021-12-31 23:59:59.123456", None, 0),
    ("c_timestamp", 7, cv("TIMESTAMP", {"seconds": 1639633094, "nanos": 670000000, "timezone": "+08:00"},
                          "TimestampObject"), "timestamp", b"2021-12-16 13:38:14.670000", None, 0),
    ("c_timestamp_utc", 7, cv("TIMESTAMP", {"seconds": 0, "nanos": 0, "timezone": None}, "TimestampObject"),
     "timestamp", b"1970-01-01 00:00:00", None, 0),
    ("c_year", 13, cv("INTEGER", 2155, "int"), "year", b"2155", None, 0),
    ("c_bit", 16, cv("BIT", {"bit_length": 7, "value": "65"}, "BitObject"), "bit(7)", b"65", None, 0),
    ("c_enum", 247, cv("ENUM", {"value": "b", "defines": ["a", "b", "it's"]}, "EnumSetValue"),
     "enum('a','b','it''s')", b"2", "b", 0),
    ("c_set", 248, cv("SET", {"value": "a,c", "defines": ["a", "b", "c"]}, "EnumSetValue"),
     "set('a','b','c')", b"5", "a,c", 0),
    ("c_enum_labels_only", 247, cv("ENUM", {"value": "x", "defines": None}, "EnumSetValue"),
     "enum", b"x", "x", 0),
    ("c_varchar", 15, cv("STRING", "中文 & <tag>", "string"), "varchar", "中文 & <tag>".encode(), None, 0),
    ("c_char", 254, cv("STRING", {"charsetName": "utf8mb4", "value": "abc"}, "StringObject"), "char", b"abc", None, 0),
    ("c_varbinary", 198, cv("BINARY", b"\x00\xff\x10", "bytes"), "varbinary", b"\x00\xff\x10", None, ColumnFlag.BINARY),
    ("c_binary", 254, cv("BINARY", b"ab\x00\x00", "bytes"), "binary", b"ab\x00\x00", None, ColumnFlag.BINARY),
    ("c_text", 252, cv("STRING", "long text", "string"), "text", b"long text", None, 0),
    ("c_blob", 252, cv("BINARY", b"\x89PNG", "bytes"), "blob", b"\x89PNG", None, ColumnFlag.BINARY),
    ("c_json", 245, cv("STRING", '{"k": "v"}', "string"), "json", b'{"k": "v"}', None, 0),
    ("c_geometry", 255, cv("GEOMETRY", {"srid": 4326, "wkb": WKB_POINT}, "GeometryValue"), "geometry",
     bytes.fromhex("e6100000") + WKB_POINT, None, 0),
    ("c_null", 15, cv("STRING"), "varchar", None, None, 0),
]

ALL_MEMBERS_RECORD = base_record(
    id=1639633094000123, operation="INSERT", xid="tx-77", txind="M", position="1639633094@22",
    timestamp=1639633094, source=(NS + "Source", {"sourceType": "OB_MYSQL", "version": "4.2.1"}),
    fields=[{"name": n, "dataTypeNumber": code} for n, code, *_ in ALL_MEMBERS],
    pkIndexes=[0], ukIndexes=[[1, 2]], tags={"region": "hz"},
    afterImages=[value for _, _, value, *_ in ALL_MEMBERS],
)


def test_every_value_member_decodes_to_its_canonical_text():
    [event] = decode_record(get_codec("oceanbase-avro"), kafka(avro(ALL_MEMBERS_RECORD)))
    assert (event["kind"], event["op"]) == (Kind.ROW, Op.INSERT)
    assert event["before"] is None
    columns = by_name(event["after"])
    assert list(columns) == [m[0] for m in ALL_MEMBERS]
    for name, _, _, mysql_type, value, label, flags in ALL_MEMBERS:
        assert columns[name] == {"name": name, "mysql_type": mysql_type, "flags": int(flags),
                                 "value": value, "label": label}, name


def test_record_fields_map_to_the_event():
    [event] = decode_record(get_codec("oceanbase-avro"), kafka(avro(ALL_MEMBERS_RECORD)))
    assert event["position"] == [1639633094000123]
    assert event["commit_ts"] is None
    assert event["execute_ts_ms"] == 1639633094000
    assert (event["database"], event["table"]) == ("shop", "t")
    assert event["key_columns"] == ["id"]
    assert event["tx_id"] == "tx-77"
    assert event["extras"] == {
        "oceanbase.txind": "M", "oceanbase.position": "1639633094@22",
        "oceanbase.sourceType": "OB_MYSQL", "oceanbase.sourceVersion": "4.2.1",
        "oceanbase.ukIndexes": "[[1,2]]", "oceanbase.tags": '{"region":"hz"}',
        # c_binary has the raw libobcdc code 254 (the encoder writes BINARY as 199): kept
        "oceanbase.dataTypeNumbers": ",".join(str(code) for _, code, *_ in ALL_MEMBERS),
    }
    assert (event["topic"], event["partition"], event["offset"], event["object"]) == ("ob", 0, 7, OBJECT)


def test_reencoding_a_record_of_every_member_keeps_its_canonical_content():
    codec = get_codec("oceanbase-avro")
    [event] = decode_record(codec, kafka(avro(ALL_MEMBERS_RECORD)))
    [again] = decode_record(codec, kafka(reencode(codec, [event])))
    content = {k: event[k] for k in CONTENT_FIELDS}
    # the timestamp was +08:00 text; re-encoded in the codec's zone it is the same text
    assert {k: again[k] for k in CONTENT_FIELDS} == content


# ----------------------------------------------------------------------------- byte-exact golden

GOLDEN_INSERT = base_record(
    id=1639633094000124, operation="INSERT", xid="tx-78", txind="W", position="1639633094@23",
    timestamp=1639633094, source=(NS + "Source", {"sourceType": "OB_MYSQL", "version": "4.2.1"}),
    fields=[
        {"name": "id", "dataTypeNumber": 8}, {"name": "qty", "dataTypeNumber": 3},
        {"name": "price", "dataTypeNumber": 246}, {"name": "note", "dataTypeNumber": 15},
        {"name": "raw", "dataTypeNumber": 198}, {"name": "at", "dataTypeNumber": 12},
        {"name": "state", "dataTypeNumber": 247}, {"name": "gone", "dataTypeNumber": 252},
    ],
    pkIndexes=[0], ukIndexes=None, tags=None,
    afterImages=[
        cv("LONG", 7, "long"), cv("INTEGER", -3, "int"),
        cv("DECIMAL", {"precision": 5, "scale": 2, "value": "9.90"}, "DecimalObject"),
        cv("STRING", "hi", "string"), cv("BINARY", b"\x01\x02", "bytes"),
        cv("DATETIME", {"year": 2024, "month": 1, "day": 2, "hours": 3, "minutes": 4, "seconds": 5,
                        "nanos": 0}, "DateTimeObject"),
        cv("ENUM", {"value": "on", "defines": ["off", "on"]}, "EnumSetValue"),
        cv("STRING"),
    ],
)
# fastavro's bytes for GOLDEN_INSERT, checked by hand against the Avro spec: zigzag varint id,
# union branch indexes, length-prefixed strings, arrays as one block then 0.
GOLDEN_INSERT_BYTES = bytes.fromhex(
    "f8f789c29acfe905"  # id 1639633094000124
    "0002"  # version: branch 0, int 1
    "0200"  # operation: branch 1, enum 0 INSERT
    "020a74782d3738"  # xid "tx-78"
    "0206"  # txind W
    "021a313633393633333039344032 33"  # position "1639633094@23"
    "028cc3d69b0c"  # timestamp 1639633094
    "0200 0a342e322e31"  # source: OB_MYSQL, "4.2.1"
    "020873686f70"  # schemaName "shop"
    "020274"  # tableName "t"
    "0210 046964 10 06717479 06 0a7072696365 ec03 086e6f7465 1e 06726177 8c03 046174 18"
    "0a7374617465 ee03 08676f6e65 f803 00"  # fields
    "02 02 00 00"  # pkIndexes [0]
    "00"  # ukIndexes null
    "00"  # beforeImages null
    "02 10 04 06 0e"  # afterImages: 8 values; id LONG long 7
    "02 04 05"  # qty INTEGER int -3
    "0a 12 0a 04 08392e3930"  # price DECIMAL DecimalObject(5, 2, "9.90")
    "0c 0e 046869"  # note STRING string "hi"
    "0e 0c 040102"  # raw BINARY bytes 01 02
    "16 18 d01f 02 04 06 08 0a 00"  # at DATETIME DateTimeObject 2024-01-02 03:04:05
    "20 1e 046f6e 02 04 066f6666 046f6e 00"  # state ENUM EnumSetValue("on", [off, on])
    "0c 00"  # gone STRING null
    "00"  # end of afterImages
    "00"  # sql null
    "00"  # tags null
    "01 01 00 00"  # total -1, index -1, empty image bytes
)


def test_golden_bytes_are_what_fastavro_writes_for_the_hand_built_record():
    assert avro(GOLDEN_INSERT) == GOLDEN_INSERT_BYTES


def test_golden_insert_decodes_field_by_field_and_reencodes_byte_exact():
    codec = get_codec("oceanbase-avro")
    [event] = decode_record(codec, kafka(GOLDEN_INSERT_BYTES))
    assert event["position"] == [1639633094000124] and event["tx_id"] == "tx-78"
    assert event["extras"]["oceanbase.txind"] == "W"
    assert [(c["name"], c["mysql_type"], c["value"], c["label"]) for c in event["after"]] == [
        ("id", "bigint", b"7", None), ("qty", "int", b"-3", None),
        ("price", "decimal(5,2)", b"9.90", None), ("note", "varchar", b"hi", None),
        ("raw", "varbinary", b"\x01\x02", None), ("at", "datetime", b"2024-01-02 03:04:05", None),
        ("state", "enum('off','on')", b"2", "on"), ("gone", "text", None, None),
    ]
    assert reencode(codec, [event]) == GOLDEN_INSERT_BYTES


def test_update_and_delete_images():
    fields = [{"name": "id", "dataTypeNumber": 3}, {"name": "v", "dataTypeNumber": 15}]
    update = base_record(operation="UPDATE", fields=fields, pkIndexes=[0],
                         beforeImages=[cv("INTEGER", 1, "int"), cv("STRING", "old", "string")],
                         afterImages=[cv("INTEGER", 1, "int"), cv("STRING", "new", "string")])
    delete = base_record(operation="DELETE", fields=fields, pkIndexes=None,
                         beforeImages=[cv("INTEGER", 2, "int"), cv("STRING")])
    codec = get_codec("oceanbase-avro")
    [u] = decode_record(codec, kafka(avro(update)))
    assert u["op"] == Op.UPDATE
    assert [c["value"] for c in u["before"]] == [b"1", b"old"]
    assert [c["value"] for c in u["after"]] == [b"1", b"new"]
    [d] = decode_record(codec, kafka(avro(delete)))
    assert d["op"] == Op.DELETE and d["after"] is None
    assert [c["value"] for c in d["before"]] == [b"2", None]
    assert d["key_columns"] == []  # no pkIndexes: the table has no primary key
    for record, event in ((update, u), (delete, d)):
        assert reencode(codec, [event]) == avro(record)


def test_ddl_record():
    record = base_record(operation="DDL", sql="ALTER TABLE `t` ADD COLUMN `c` INT", timestamp=1700000000,
                         xid="tx-1")
    codec = get_codec("oceanbase-avro")
    [event] = decode_record(codec, kafka(avro(record)))
    assert event["kind"] == Kind.DDL
    assert event["ddl_query"] == "ALTER TABLE `t` ADD COLUMN `c` INT"
    assert event["ddl_type"] == "add column"
    assert (event["database"], event["table"], event["position"]) == ("shop", "t", [1001])
    assert event["execute_ts_ms"] == 1700000000000 and event["key_columns"] is None
    assert reencode(codec, [event]) == avro(record)


def test_transaction_boundaries_and_heartbeats_are_no_events_and_xid_is_the_tx_id():
    codec = get_codec("oceanbase-avro")
    fields = [{"name": "id", "dataTypeNumber": 3}]
    stream = [
        base_record(id=10, operation="BEGIN", xid="tx-9", txind="B", schemaName=None, tableName=None),
        base_record(id=11, operation="INSERT", xid="tx-9", txind="M", fields=fields, afterImages=[cv("INTEGER", 1, "int")]),
        base_record(id=12, operation="INSERT", xid="tx-9", txind="M", fields=fields, afterImages=[cv("INTEGER", 2, "int")]),
        base_record(id=13, operation="COMMIT", xid="tx-9", txind="E", schemaName=None, tableName=None),
        base_record(id=14, operation="HEARTBEAT", timestamp=1700000001, schemaName=None, tableName=None),
    ]
    decoded = [decode_record(codec, kafka(avro(r), offset)) for offset, r in enumerate(stream)]
    assert [len(events) for events in decoded] == [0, 1, 1, 0, 0]
    rows = decoded[1] + decoded[2]
    assert [(e["tx_id"], e["position"], e["extras"]["oceanbase.txind"]) for e in rows] == [
        ("tx-9", [11], "M"), ("tx-9", [12], "M")]


def test_raw_libobcdc_codes_are_disambiguated_and_kept_for_reencoding():
    """libobcdc gives VARCHAR and VARBINARY one code (253), CHAR and BINARY another (254), TEXT
    and BLOB the blob codes: the value's type_info / member tells them apart."""
    fields = [{"name": n, "dataTypeNumber": code} for n, code in
              [("a", 253), ("b", 253), ("c", 254), ("d", 251), ("e", 251), ("f", 252)]]
    record = base_record(fields=fields, afterImages=[
        cv("STRING", "x", "string"), cv("BINARY", b"\x00", "bytes"), cv("STRING", "y", "string"),
        cv("STRING", "z", "string"), cv("BINARY", b"\x01", "bytes"), cv("STRING")])
    codec = get_codec("oceanbase-avro")
    [event] = decode_record(codec, kafka(avro(record)))
    assert [c["mysql_type"] for c in event["after"]] == ["varchar", "varbinary", "char", "longtext", "longblob", "text"]
    assert event["extras"] == {"oceanbase.dataTypeNumbers": "253,253,254,251,251,252"}
    assert reencode(codec, [event]) == avro(record)


def test_timestamp_unit_and_time_zone_options():
    fields = [{"name": "ts", "dataTypeNumber": 7}]
    record = base_record(timestamp=1700000000123, fields=fields, afterImages=[
        cv("TIMESTAMP", {"seconds": 0, "nanos": 5000, "timezone": None}, "TimestampObject")])
    [event] = decode_record(get_codec("oceanbase-avro", {"timestamp-unit": "ms", "time-zone": "Asia/Shanghai"}),
                            kafka(avro(record)))
    assert event["execute_ts_ms"] == 1700000000123
    assert event["after"][0]["value"] == b"1970-01-01 08:00:00.000005"
    [event] = decode_record(get_codec("oceanbase-avro", {"time-zone": "-05:30"}), kafka(avro(record)))
    assert event["after"][0]["value"] == b"1969-12-31 18:30:00.000005"
    with pytest.raises(ConfigError, match="time-zone"):
        get_codec("oceanbase-avro", {"time-zone": "Mars/Olympus"})


# ----------------------------------------------------------------------------- framing

def test_confluent_framing_is_read_in_auto_mode_and_written_on_request():
    plain = avro(GOLDEN_INSERT)
    framed = b"\x00" + struct.pack(">I", 42) + plain
    [event] = decode_record(get_codec("oceanbase-avro"), kafka(framed))
    assert event["extras"]["oceanbase.schemaId"] == "42"
    confluent = get_codec("oceanbase-avro", {"avro-framing": "confluent"})
    assert reencode(confluent, [event]) == framed
    del event["extras"]["oceanbase.schemaId"]
    assert reencode(get_codec("oceanbase-avro", {"avro-framing": "confluent", "avro-schema-id": "7"}),
                    [event]) == b"\x00\x00\x00\x00\x07" + plain
    assert reencode(get_codec("oceanbase-avro"), [event]) == plain  # plain by default


def test_plain_record_with_id_zero_starts_like_a_confluent_one():
    plain = avro(base_record(id=0, operation="DDL", sql="DROP TABLE t"))
    assert plain[:1] == b"\x00"
    [event] = decode_record(get_codec("oceanbase-avro"), kafka(plain))
    assert event["position"] == [0] and "oceanbase.schemaId" not in (event["extras"] or {})
    with pytest.raises(DecodeError):
        decode_record(get_codec("oceanbase-avro", {"avro-framing": "confluent"}), kafka(plain))


# ----------------------------------------------------------------------------- bad input

def _bad(**changes) -> bytes:
    fields = [{"name": "id", "dataTypeNumber": 3}]
    record = base_record(fields=fields, pkIndexes=[0], afterImages=[cv("INTEGER", 1, "int")])
    record.update(changes)
    return avro(record)


@pytest.mark.parametrize(
    "value, reason, where",
    [
        (GOLDEN_INSERT_BYTES[:40], "not an AvroRecord", "byte 40"),
        (GOLDEN_INSERT_BYTES + b"\x00", "1 bytes after the AvroRecord", f"byte {len(GOLDEN_INSERT_BYTES)}"),
        (b"\x02\x00\x02\x02\x20", "not an AvroRecord", "byte "),
        (_bad(operation=None), "no operation", "field operation"),
        (_bad(pkIndexes=[3]), "pkIndexes[0]=3 is not a field index", "field pkIndexes"),
        (_bad(afterImages=[]), "afterImages has 0 values for 1 fields", "field afterImages"),
        (_bad(afterImages=None), "INSERT record has no afterImages", "field afterImages"),
        (_bad(operation="UPDATE"), "UPDATE record has no beforeImages", "field beforeImages"),
        (_bad(beforeImages=[cv("INTEGER", 1, "int")]), "INSERT record has beforeImages", "field beforeImages"),
        (_bad(fields=None, afterImages=None), "INSERT record has no fields", "field fields"),
        (_bad(operation="DDL"), "DDL record has no sql", "field sql"),
        (_bad(total=3, index=1), "one shard of a split message", "field total"),
        (_bad(afterImageBytes=b"\x01"), "one shard of a split message", "field total"),
        (_bad(timestamp=1 << 62), "overflows epoch milliseconds", "field timestamp"),
        (_bad(fields=[{"name": "d", "dataTypeNumber": 10}],
              afterImages=[cv("DATE", {"year": 2020, "month": 13, "day": 1}, "DateObject")]),
         "date 2020-13-1 is out of range", "field afterImages[0]"),
        (_bad(fields=[{"name": "d", "dataTypeNumber": 246}],
              afterImages=[cv("DECIMAL", {"precision": 5, "scale": 2, "value": "12x"}, "DecimalObject")]),
         "DecimalObject value '12x' is not a number", "field afterImages[0]"),
        (_bad(fields=[{"name": "d", "dataTypeNumber": 246}],
              afterImages=[cv("DECIMAL", {"precision": 2, "scale": 5, "value": "1"}, "DecimalObject")]),
         "precision 2 / scale 5 are invalid", "field fields[0]"),
        (_bad(fields=[{"name": "b", "dataTypeNumber": 16}],
              afterImages=[cv("BIT", {"bit_length": 8, "value": "b'101'"}, "BitObject")]),
         "is not an unsigned decimal", "field afterImages[0]"),
        (_bad(fields=[{"name": "b", "dataTypeNumber": 16}],
              afterImages=[cv("BIT", {"bit_length": 8, "value": "256"}, "BitObject")]),
         "does not fit 8 bits", "field afterImages[0]"),
        (_bad(fields=[{"name": "e", "dataTypeNumber": 247}],
              afterImages=[cv("ENUM", {"value": "z", "defines": ["a"]}, "EnumSetValue")]),
         "'z' is not made of the defines", "field afterImages[0]"),
        (_bad(fields=[{"name": "b", "dataTypeNumber": 198}], afterImages=[cv("BINARY", "中", "string")]),
         "outside ISO-8859-1", "field afterImages[0]"),
        (_bad(fields=[{"name": "f", "dataTypeNumber": 5}], afterImages=[cv("DOUBLE", float("nan"), "double")]),
         "not a MySQL number", "field afterImages[0]"),
        (_bad(fields=[{"name": "t", "dataTypeNumber": 7}],
              afterImages=[cv("TIMESTAMP", {"seconds": 1 << 60, "nanos": 0, "timezone": None}, "TimestampObject")]),
         "bad TimestampObject value", "field afterImages[0]"),
        (_bad(fields=[{"name": "t", "dataTypeNumber": 7}],
              afterImages=[cv("TIMESTAMP", {"seconds": 0, "nanos": 0, "timezone": "Nowhere/Land"}, "TimestampObject")]),
         "bad TimestampObject value", "field afterImages[0]"),
    ],
)
def test_bad_records_raise_a_decode_error_naming_protocol_and_location(value, reason, where):
    with pytest.raises(DecodeError) as info:
        decode_record(get_codec("oceanbase-avro"), kafka(value))
    message = str(info.value)
    assert message.startswith("oceanbase-avro: ")
    assert reason in message
    assert where in message
    assert f"object {OBJECT}" in message and "offset 7" in message


def test_tombstone_is_a_decode_error():
    with pytest.raises(DecodeError, match="no value"):
        decode_record(get_codec("oceanbase-avro"), KafkaRecord("ob", 0, 1, None, b"k", None))


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        get_codec("oceanbase-avro", {"framing": "plain"})
    assert "avro-framing" in str(info.value) and "timestamp-unit" in str(info.value)
    with pytest.raises(ConfigError, match="expected one of auto, plain, confluent"):
        get_codec("oceanbase-avro", {"avro-framing": "glue"})


def test_watermarks_are_not_encoded():
    watermark = new_event(Kind.WATERMARK, watermark_ts=1 << 60)
    assert list(get_codec("oceanbase-avro").encode([watermark], topic="ob", partition=0)) == []


# ----------------------------------------------------------------------------- fuzz

def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four of: a bit flipped, a byte replaced, junk put in, bytes cut out, the end cut off."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.random()
        pos = rng.randrange(len(data)) if data else 0
        if action < 0.4 and data:
            data[pos] ^= 1 << rng.randrange(8)
        elif action < 0.6 and data:
            data[pos] = rng.randrange(256)
        elif action < 0.75:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        elif action < 0.9 and data:
            del data[pos:pos + rng.randint(1, 4)]
        else:
            data = data[:pos]
    return bytes(data)


def test_mutated_records_raise_only_decode_errors():
    """Thousands of mutations of the golden records: decoding either works or raises DecodeError
    (from the codec itself, not only through decode_record's catch-all)."""
    rng = random.Random(20240611)
    seeds = [GOLDEN_INSERT_BYTES, avro(ALL_MEMBERS_RECORD), _bad(operation="DDL", sql="DROP TABLE t"),
             b"\x00\x00\x00\x00\x01" + GOLDEN_INSERT_BYTES]
    codec = get_codec("oceanbase-avro")
    outcomes = {"ok": 0, "error": 0}
    for i in range(4000):
        data = mutate(rng, rng.choice(seeds))
        try:
            events = codec.decode(kafka(data, i))
        except DecodeError:
            outcomes["error"] += 1
            continue
        outcomes["ok"] += 1
        to_record_batch(events)  # what decodes fits the canonical Arrow schema
        # and re-encodes to records that decode to the same content, whatever members it used
        for event, message in zip(events, codec.encode(events, topic="ob", partition=0)):
            [again] = codec.decode(kafka(message.value))
            assert {k: again[k] for k in CONTENT_FIELDS if k != "extras"} == \
                {k: event[k] for k in CONTENT_FIELDS if k != "extras"}
    assert outcomes["error"] > 1000 and outcomes["ok"] > 100, outcomes


# ----------------------------------------------------------------------------- OceanBase Canal JSON

SEED_CANAL_JSON = """{
"data": [
{
"id": "111",
"name": "name",
"description": "Big 2-wheel scooter",
"weight": "5.18"
}
],
"database": "inventory",
"es": 1589373560000,
"id": 9,
"isDdl": false,
"mysqlType": {
"id": "INTEGER",
"name": "VARCHAR(255)",
"description": "VARCHAR(512)",
"weight": "FLOAT"
},
"old": [
{
"weight": "5.15"
}
],
"pkNames": [
"id"
],
"sql": "",
"sqlType": {
"id": 4,
"name": 12,
"description": 12,
"weight": 7
},
"table": "products",
"ts": 1589373560798,
"type": "UPDATE"
}"""


def test_oceanbase_canal_json_example_decodes_with_the_canal_json_codec():
    [event] = decode_record(get_codec("canal-json"), kafka(SEED_CANAL_JSON.encode()))
    assert (event["kind"], event["op"]) == (Kind.ROW, Op.UPDATE)
    assert (event["database"], event["table"]) == ("inventory", "products")
    assert event["key_columns"] == ["id"]
    assert event["execute_ts_ms"] == 1589373560000 and event["commit_ts"] is None
    assert event["extras"] == {"canal.ts": "1589373560798", "canal.id": "9"}
    after, before = by_name(event["after"]), by_name(event["before"])
    assert {n: c["value"] for n, c in after.items()} == {
        "id": b"111", "name": b"name", "description": b"Big 2-wheel scooter", "weight": b"5.18"}
    # `old` holds only the changed column: the others are unchanged, taken from `data`
    assert {n: c["value"] for n, c in before.items()} == {
        "id": b"111", "name": b"name", "description": b"Big 2-wheel scooter", "weight": b"5.15"}
    # mysql_type is lower case (docs/canonical-events.md), with the parameters OceanBase wrote
    assert {n: c["mysql_type"] for n, c in after.items()} == {
        "id": "integer", "name": "varchar(255)", "description": "varchar(512)", "weight": "float"}
    assert after["id"]["flags"] == ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY
    assert after["name"]["flags"] == 0


# ----------------------------------------------------------------------------- round trips

def carried_type(mysql_type: str | None, with_params: bool) -> str | None:
    """The MySQL type an oceanbase-avro record carries for a canonical column type (the
    expectation `as_oceanbase` builds; moved here from the codec, which never called it): the base
    name of its dataTypeNumber, plus the parameters a value record states (DECIMAL precision
    and scale, BIT length, ENUM/SET labels) when the column has a non-NULL value."""
    parsed = parse_type(mysql_type)
    base = parsed.base
    if base not in TYPE_CODES:
        return None if not base else ("varchar" if base not in BINARY_BASES else "varbinary")
    base = CODE_TYPES[TYPE_CODES[base]]
    if isinstance(base, tuple):
        base = base[1] if parsed.base in BINARY_BASES else base[0]
    if not with_params or base not in _PARAM_BASES or not parsed.params:
        return base
    if base == "decimal":
        precision = parsed.params[0]
        scale = parsed.params[1] if len(parsed.params) > 1 else "0"
        return f"decimal({int(precision)},{int(scale)})"
    if base == "bit":
        return f"bit({int(parsed.params[0])})"
    return f"{base}(" + ",".join(quote_label(label) for label in parsed.params) + ")"


def as_oceanbase(event: dict, record_id: int) -> dict:
    """What oceanbase-avro carries of a canonical event: no commit ts, the record id as position,
    whole seconds, type parameters only from DECIMAL / BIT / ENUM / SET value records, flags from
    the type and pkIndexes, classified DDL types."""
    expected = {k: event[k] for k in CONTENT_FIELDS}
    expected["commit_ts"] = None
    expected["position"] = [record_id]
    ms = event["execute_ts_ms"]
    if ms is None and event["commit_ts"] is not None:
        ms = event["commit_ts"] >> 18
    expected["execute_ts_ms"] = None if ms is None else ms // 1000 * 1000
    expected["extras"] = None
    if event["kind"] == Kind.DDL:
        expected["ddl_type"] = classify(event["ddl_query"])
        return expected
    keys = event["key_columns"] or []
    expected["key_columns"] = list(keys)
    has_value = {c["name"] for side in ("before", "after") for c in event[side] or () if c["value"] is not None}
    for side in ("before", "after"):
        if expected[side] is None:
            continue
        image = []
        for c in expected[side]:
            mysql_type = carried_type(c["mysql_type"], c["name"] in has_value)
            parsed = parse_type(mysql_type)
            flags = ColumnFlag.BINARY if parsed.base in BINARY_BASES else 0
            if c["name"] in keys:
                flags |= ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY
            label = enum_set_label(parsed, c["value"]) if parsed.labels else None
            image.append({**c, "mysql_type": mysql_type, "flags": int(flags), "label": label})
        expected[side] = image
    return expected


@st.composite
def streams(draw):
    events = draw(st.lists(strategies.events(), min_size=1, max_size=5))
    for event in events:
        if event["kind"] != Kind.WATERMARK:
            event["tx_id"] = draw(st.none() | st.text(max_size=8))
    return events


@settings(max_examples=300, deadline=None)
@given(events=streams(),
       zone=st.sampled_from(["UTC", "+08:00", "America/New_York"]),
       framing=st.sampled_from(["plain", "confluent"]))
def test_round_trip_of_any_event(events, zone, framing):
    codec = get_codec("oceanbase-avro", {"time-zone": zone, "avro-framing": framing})
    messages = list(codec.encode(events, topic="ob", partition=3))
    carried = [e for e in events if e["kind"] != Kind.WATERMARK]
    assert len(messages) == len(carried)
    for offset, (event, message) in enumerate(zip(carried, messages)):
        [decoded] = decode_record(codec, KafkaRecord("ob", 3, offset, None, message.key, message.value))
        content = {k: decoded[k] for k in CONTENT_FIELDS}
        if framing == "confluent":
            assert content["extras"].pop("oceanbase.schemaId") == "1"
            content["extras"] = content["extras"] or None
        assert content == as_oceanbase(event, offset + 1)
        # and encoding the decoded event again gives the same bytes
        assert next(codec.encode([decoded], topic="ob", partition=3)).value == message.value


@settings(max_examples=100, deadline=None)
@given(event=strategies.row_events(commit_ts=False), record_id=st.integers(-(1 << 63), (1 << 63) - 1))
def test_an_oceanbase_position_is_the_record_id(event, record_id):
    event["position"] = [record_id]
    codec = get_codec("oceanbase-avro")
    [message] = codec.encode([event], topic="ob", partition=0)
    [decoded] = decode_record(codec, kafka(message.value))
    assert decoded["position"] == [record_id]


def test_bigint_unsigned_max_decimals_bytes_nulls_and_enum_set_survive():
    keys = ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY
    row = [
        column("id", "18446744073709551615", "bigint unsigned", keys | ColumnFlag.UNSIGNED),
        column("d", "-99999999999999999999.9999999999", "decimal(30,10)"),
        column("b", bytes(range(256)), "blob", ColumnFlag.BINARY),
        column("n", None, "varchar(8)"),
        column("e", "3", "enum('a','b','c,d')", label="c,d"),
        column("s", "0", "set('a','b')", label=""),
        column("bit", "18446744073709551615", "bit(64)", ColumnFlag.UNSIGNED),
    ]
    event = new_event(Kind.ROW, op=Op.INSERT, database="d", table="t", key_columns=["id"], after=row,
                      position=[5], execute_ts_ms=1700000000000)
    codec = get_codec("oceanbase-avro")
    [message] = codec.encode([event], topic="ob", partition=0)
    [decoded] = decode_record(codec, kafka(message.value))
    assert {c["name"]: (c["mysql_type"], c["value"], c["label"]) for c in decoded["after"]} == {
        "id": ("bigint", b"18446744073709551615", None),
        "d": ("decimal(30,10)", b"-99999999999999999999.9999999999", None),
        "b": ("blob", bytes(range(256)), None),
        "n": ("varchar", None, None),
        "e": ("enum('a','b','c,d')", b"3", "c,d"),
        "s": ("set('a','b')", b"0", ""),
        "bit": ("bit(64)", b"18446744073709551615", None),
    }
    assert {k: decoded[k] for k in CONTENT_FIELDS} == as_oceanbase(event, 5)
