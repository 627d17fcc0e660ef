"""The compiled canal-json decoder (native/cdc_replay_native) against the Python codec, the
reference: golden vectors, a generated archive and hypothesis-fuzzed records decoded by both
paths must give identical DECODED_ARROW_SCHEMA rows, quarantine rows included."""

from __future__ import annotations

import base64
import gzip
import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from spark_apps import native_decode
from spark_apps.archive_io import decode_objects_fn, decode_records_fn
from spark_apps.schema import DECODED_ARROW_SCHEMA

from .. import strategies
from . import test_canal_json as golden

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

TIDB = {"enable-tidb-extension": "true"}
RECORDS = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                     ("timestamp", pa.int64()), ("key", pa.binary()), ("value", pa.binary()),
                     ("object", pa.string()), ("line", pa.int64())])


def records_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "topic": ["orders"] * n, "partition": [i % 3 for i in range(n)], "offset": list(range(100, 100 + n)),
        "timestamp": [1700000000000 + i for i in range(n)], "key": [None] * n, "value": values,
        "object": ["s3://b/orders/0/x.jsonl.gz"] * n, "line": list(range(1, n + 1))}, schema=RECORDS)


def decode_both(monkeypatch, values, options=TIDB) -> tuple[list[dict], list[dict], pa.Table]:
    """The rows of one batch of record values by the Python codec and by the compiled path."""
    batch = records_batch(values)
    out = {}
    for mode in ("python", "native"):
        monkeypatch.setenv(native_decode.ENV, mode)
        table = pa.Table.from_batches(list(decode_records_fn("canal-json", options)(iter([batch]))),
                                      schema=DECODED_ARROW_SCHEMA)
        table.validate(full=True)
        out[mode] = table
    return out["python"].to_pylist(), out["native"].to_pylist(), out["native"]


def assert_same(monkeypatch, values, options=TIDB):
    python, native, _ = decode_both(monkeypatch, values, options)
    assert len(native) == len(python)
    for a, b in zip(python, native):
        assert b == a
    return python


def native_share(values, options=TIDB) -> tuple[int, int]:
    """(records the compiled decoder took, records it left to Python)."""
    codec = get_codec("canal-json", options)
    native = native_decode.NativeDecoder(codec)
    batch = records_batch(values)
    source = {"topic": batch.column("topic"), "partition": batch.column("partition"),
              "offset": batch.column("offset"), "record_timestamp": batch.column("timestamp"),
              "object": batch.column("object"), "line": batch.column("line")}
    native.decode(batch.column("value"), source)
    return native.native_records, native.python_records


def dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


# ----------------------------------------------------------------------------- golden vectors

GOLDEN = [
    golden.compact(golden.SEED_INSERT),
    golden.compact(golden.SEED_WATERMARK),
    golden.compact(golden.SEED_DDL),
    golden.tp_int_update(golden.TP_INT_OLD).encode(),
    golden.tp_int_update({"c_int": "2147483647"}).encode(),  # partial old (Canal)
    *(value for value, _ in golden.test_bad_values_raise_a_decode_error_naming_protocol_and_location
      .pytestmark[0].args[1]),
]

# shapes real producers write beside the seed's, and the unusual ones the compiled path must
# hand to Python (or take exactly)
BASE = {"id": 0, "database": "shop", "table": "orders", "pkNames": ["id"], "isDdl": False, "type": "INSERT",
        "es": 1700000000123, "ts": 1700000000456, "sql": "", "sqlType": {"id": 4, "v": 12},
        "mysqlType": {"id": "int", "v": "varchar"}, "old": None, "data": [{"id": "1", "v": "x"}],
        "_tidb": {"commitTs": 445678901234567890}}

EDGE = [
    {**BASE, "mysqlType": {"id": "int unsigned", "e": "enum('a','b''c','D')", "s": "set('x','y')",
                           "b": "varbinary(8)", "t": "TEXT", "f": "double"},
     "data": [{"id": "4294967295", "e": "2", "s": "3", "b": "\u00ff\u0000a", "t": "\u4e2d\U0001f600", "f": "1.5"}]},
    {**BASE, "mysqlType": {"id": "int", "e": "enum('a','b')", "s": "set('x','y')"},
     "data": [{"id": "1", "e": "0", "s": "0"}, {"id": "2", "e": "3", "s": "4"}, {"id": "3", "e": "-1", "s": "x"},
              {"id": "4", "e": "x", "s": None}, {"id": "5", "e": " 1", "s": "+1"}]},
    {**BASE, "type": "DELETE", "pkNames": ["ID"], "data": [{"id": "1", "v": None}]},  # key case differs
    {**BASE, "pkNames": ["missing"]},  # the key is not in the row: quarantined
    {**BASE, "pkNames": None},
    {**BASE, "pkNames": []},
    {**BASE, "pkNames": [""]},
    {**BASE, "database": ""},
    {**BASE, "table": None},
    {**BASE, "mysqlType": None},
    {**BASE, "mysqlType": {}},
    {**BASE, "mysqlType": {"id": 4}},
    {**BASE, "mysqlType": {"id": None, "v": "blob"}, "data": [{"id": "1", "v": "\u0100"}]},
    {**BASE, "id": 17, "ts": "99", "es": "1700000000000", "gtid": "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"},
    {**BASE, "id": "abc", "ts": None, "es": None, "gtid": ""},
    {**BASE, "id": 1.5},
    {**BASE, "ts": True},
    {**BASE, "es": -5},
    {**BASE, "es": 1 << 63},
    {**BASE, "_tidb": None},
    {**BASE, "_tidb": []},
    {**BASE, "_tidb": {"commitTs": "12"}},
    {**BASE, "_tidb": {"commitTs": 1, "claimCheckLocation": "file:///nowhere/x.json"}},
    {**BASE, "_tidb": {"onlyHandleKey": False}},
    {**BASE, "type": "UPDATE", "old": [{"v": "old"}, {"v": "extra row"}], "data": [{"id": "1", "v": "new"}]},
    {**BASE, "type": "UPDATE", "old": [{"zz": "only in old", "v": "o"}], "data": [{"id": "1", "v": "new"}]},
    {**BASE, "type": "UPDATE", "old": [], "data": [{"id": "1", "v": "new"}]},
    {**BASE, "type": "UPDATE", "old": [None], "data": [{"id": "1", "v": "new"}]},
    {**BASE, "type": "INSERT", "old": "ignored", "data": [{"id": "1", "v": "x"}, {"id": "2", "v": "y"}]},
    {**BASE, "data": [{"id": "1", "v": 5}]},
    {**BASE, "data": [["id"]]},
    {**BASE, "isDdl": True, "type": "ALTER", "sql": "ALTER TABLE t ADD COLUMN c INT", "data": None},
    {**BASE, "isDdl": "yes"},
    {**BASE, "type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": "123"}},
    {**BASE, "type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": 1.5}},
    {**BASE, "type": ["INSERT"]},
    {**BASE, "data": [{"\u00c9t\u00e9": "1", "id": "2"}], "pkNames": ["\u00e9T\u00c9"]},
    {**BASE, "mysqlType": {"id": "enum('a", "v": "set(", "w": "  "}, "data": [{"id": "1", "v": "1", "w": "2"}]},
]
RAW_EDGE = [
    None,  # a tombstone
    b"",
    b"   ",
    b'{"type":"INSERT","database":"d","table":"t","data":[{"a":"1","a":"2"}]}',  # duplicate keys
    b'{"type":"INSERT","database":"d","table":"t","data":[{"a":"\\ud800"}]}',  # lone surrogate
    b'{"type":"INSERT","database":"d","table":"t","data":[{"a":"\\ud83d\\ude00"}]}',
    b'{"type":"INSERT","database":"d","table":"t","data":[{"a":"1"}]} trailing',
    b'{"type":"INSERT","database":"d","table":"t","data":[{"a":"1"}]}\n',
    b'\xff{"type":"INSERT"}',
    b'{"type":"INSERT","database":"d","table":"t","data":[{"a":"\xe4\xb8\xad"}]}',
    b'{"type":"INSERT","database":"d","table":"t","es":1e3,"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","es":-0,"ts":-0,"id":-0,"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","ts":18446744073709551615,"id":-7,"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","sqlType":{"a":100000000000000000000000},"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","es":100000000000000000000000,"data":[{"a":"1"}]}',
    # what the typed front end checks without building (sql, sqlType, unknown fields), escapes
    # in names, and repeats it must leave to Python
    b'{"type":"INSERT","database":"d","table":"t","sqlType":{"a":1e400},"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","sql":"\\ud800","data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","other":[{"x":"\\udc00"}],"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","other":[1,{"x":[true,null,-1.5e3]}],"data":[{"a":"1"}]}',
    b'{"\\u0074ype":"INSERT","database":"d","t\\u0061ble":"t","data":[{"\\u0061":"\\u00ff1"}],'
    b'"mysqlType":{"\\u0061":"binary(2)"}}',
    b'{"type":"INSERT","type":"DELETE","database":"d","table":"t","data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","_tidb":{"commitTs":5,"commitTs":6},"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","mysqlType":{"a":"int","a":"blob"},"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","mysqlType":{"a":"int","b":7},"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","mysqlType":{"b":"blob","a":"int"},"data":[{"a":"1","b":"\xc3\xbf"}]}',
    b'{"type":"UPDATE","database":"d","table":"t","mysqlType":{"a":"int","b":"int"},"pkNames":["a"],'
    b'"data":[{"a":"1","b":"2"}],"old":[{"b":"3","b":"4"}]}',
    b'{"type":"UPDATE","database":"d","table":"t","mysqlType":{"a":"int","b":"int"},"pkNames":["a"],'
    b'"data":[{"a":"1","b":"2"}],"old":[{"b":"3","a":"0"}]}',
    b'{"type":"UPDATE","database":"d","table":"t","mysqlType":{"a":"int","b":"int"},"pkNames":["a"],'
    b'"data":[{"a":"1","b":"2"}],"old":[{"a":"0","b":"3"}]}',
    b'{"type":"INSERT","database":"d","table":"t","_tidb":{"commitTs":5,"other":{"x":1}},"data":[{"a":"1"}]}',
    b'{"type":"INSERT","database":"d","table":"t","pkNames":["a",1],"data":[{"a":"1"}]}',
    b'{"type":"TIDB_WATERMARK","_tidb":{"watermarkTs":5},"data":"odd","old":7,"mysqlType":[]}',
    *(dumps({**BASE, "table": f"t{i}", "mysqlType": {"id": "int", "v": ["varchar", "blob", "int"][i % 3]},
             "data": [{"id": str(i), "v": "\u00e9"}]}) for i in range(70)),  # more tables than the cache holds
    dumps({**BASE, "table": "t1", "mysqlType": {"id": "int", "v": "text"}, "data": [{"id": "1", "v": "\u00e9"}]}),
]


def test_golden_vectors_decode_the_same(monkeypatch):
    python = assert_same(monkeypatch, GOLDEN)
    assert {r["kind"] for r in python} >= {"row", "watermark", "ddl", "quarantine"}


def test_edge_cases_decode_the_same(monkeypatch):
    python = assert_same(monkeypatch, [dumps(d) for d in EDGE] + RAW_EDGE)
    assert sum(r["kind"] == "quarantine" for r in python) >= 10


JAVA_FLOATS = ["1.0E10", "1.5", "-0.0", "0.1", "3.4028235E38", "1.4E-45", "4.9E-324", "1.0E-7", ".5", "5.", "+3",
               "2.50390625", "NaN", "Infinity", "1e40", " 1.5", "1_0", "0x1p3", "", "-"]


def test_canal_flavor_decodes_java_float_text_the_same(monkeypatch):
    """Canal writes FLOAT/DOUBLE with Java's toString ("1.0E10"): the compiled path makes the
    canonical text the reference makes (canal_common.canonical_float), and leaves what it does
    not read the same way (NaN, spaces, underscores, float32 overflow, exact ties) to Python."""
    options = {"flat-message-flavor": "canal"}
    values = [dumps({**BASE, "mysqlType": {"id": "int", "v": t}, "data": [{"id": "1", "v": v}]})
              for t in ("float", "double") for v in JAVA_FLOATS]
    values += [dumps({**BASE, "mysqlType": {"id": "int", "v": "double"}, "data": [{"id": "1", "v": None}]}),
               dumps(BASE)]
    assert_same(monkeypatch, values, options)
    native, python = native_share(values, options)
    assert native >= 20 and python >= 12


def test_the_compiled_path_takes_ordinary_rows_and_watermarks_and_leaves_ddl():
    values = [golden.compact(golden.SEED_INSERT), golden.compact(golden.SEED_WATERMARK),
              golden.compact(golden.SEED_DDL), b"not json"]
    assert native_share(values) == (2, 2)


def test_a_generated_archive_decodes_the_same_through_the_object_reader(monkeypatch, tmp_path):
    from spark_apps.generate import generate, write_archive

    gen = generate(transactions=300, partitions=2, bad_values=3, seed=11)
    uris = write_archive(gen.records, str(tmp_path / "archive"), records_per_object=200)
    batch = pa.RecordBatch.from_pydict({"uri": [str(u) for u in uris]})
    out = {}
    for mode in ("python", "native"):
        monkeypatch.setenv(native_decode.ENV, mode)
        batches = list(decode_objects_fn("canal-json", TIDB)(iter([batch])))
        table = pa.Table.from_batches(batches, schema=DECODED_ARROW_SCHEMA)
        table.validate(full=True)
        out[mode] = table.to_pylist()
    assert len(out["native"]) == len(out["python"]) > 300
    assert out["native"] == out["python"]
    kinds = {r["kind"] for r in out["python"]}
    assert {"row", "ddl", "watermark"} <= kinds


# ----------------------------------------------------------------------------- archive lines
# The compiled decoder reads the archive object's lines itself (src/archive.rs): every line it
# is not sure about must reach the Python path (codecs/archive.parse_line, the layout's
# quarantine rows) and give the same rows, line numbers and error texts.

def archive_line(payload: bytes | None = None, **fields) -> bytes:
    """An archive line as codecs/archive.format_record writes it, `fields` replaced (DROP: removed)."""
    doc = {"topic": "orders", "partition": 1, "offset": 7, "timestamp": 1700000000000, "key": "a2V5",
           "value": None if payload is None else base64.b64encode(payload).decode()}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not DROP}, ensure_ascii=False).encode()


DROP = object()
ROW = dumps(BASE)
ROW_B64 = base64.b64encode(ROW).decode()

LINES = [
    archive_line(ROW),
    archive_line(golden.compact(golden.SEED_WATERMARK), offset=8),
    archive_line(golden.compact(golden.SEED_DDL), offset=9),  # DDL: the decoder hands it back
    archive_line(b"not json", offset=10),
    archive_line(None, offset=11),  # a tombstone
    archive_line(b"", offset=12),
    archive_line(ROW, offset=13, key=None),
    archive_line(ROW, offset=14, key=DROP, timestamp=DROP),
    archive_line(ROW, offset=15, timestamp=None),
    archive_line(ROW, offset=16, timestamp=-5),
    archive_line(ROW, offset=17, timestamp=1 << 63),
    archive_line(ROW, offset=18, timestamp=-(1 << 63)),
    archive_line(ROW, offset=19, timestamp=1.5),
    archive_line(ROW, partition=-1), archive_line(ROW, partition=1 << 31), archive_line(ROW, partition=(1 << 31) - 1),
    archive_line(ROW, partition=True), archive_line(ROW, partition=1.0), archive_line(ROW, partition="1"),
    archive_line(ROW, offset=1 << 63), archive_line(ROW, offset=(1 << 63) - 1), archive_line(ROW, offset=-1),
    archive_line(ROW, offset=DROP), archive_line(ROW, topic=DROP), archive_line(ROW, topic=""),
    archive_line(ROW, topic=5), archive_line(ROW, topic="\u00e9v\u00e9nements/\U0001f600"),
    archive_line(ROW, offset=20, key="not base64!"), archive_line(ROW, offset=21, key=5),
    archive_line(ROW, offset=22, value=ROW_B64[:-1]),  # bad padding
    archive_line(ROW, offset=23, value=ROW_B64 + "\n"),
    archive_line(ROW, offset=24, value=ROW_B64.replace("e", "-", 1)),
    archive_line(ROW, offset=25, value="QR=="),  # non-canonical trailing bits: Python accepts it
    archive_line(ROW, offset=26, value=5),
    archive_line(ROW, offset=26, key="\u0080"),  # not ASCII: was an error ending the object, now this line's
    archive_line(ROW, offset=26, value="QUJD\u00e9"),
    archive_line(ROW, offset=27, headers=[]), archive_line(ROW, offset=28, headers=None),
    archive_line(ROW, offset=29, headers=[["h", "QQ=="]]), archive_line(ROW, offset=30, headers=[["h", "@"]]),
    archive_line(ROW, offset=31, headers=False), archive_line(ROW, offset=32, headers="x"),
    archive_line(ROW, offset=33, extra={"nested": [1, 2.5, None]}),  # unknown field: ignored by both
    archive_line(ROW, offset=34).replace(b'"partition": 1', b'"partition": 1, "partition": 2'),  # duplicate
    archive_line(ROW, offset=35).replace(b'"key": "a2V5"', b'"key": "a2\\u00565"'),  # an escape in base64 text
    archive_line(ROW, offset=36).replace(b'"topic": "orders"', b'"topic": "\\ud800"'),  # lone surrogate
    archive_line(ROW, offset=37).replace(b'"topic": "orders"', b'"topic": "or\xffders"'),  # not UTF-8
    b'{"topic": "broken", "partition": ',
    b"[1, 2]",
    b"null",
    b"\xef\xbb\xbf" + archive_line(ROW, offset=38),  # a byte-order mark
    b"  " + archive_line(ROW, offset=39) + b" \t",
    archive_line(dumps({**BASE, "data": [{"id": str(i), "v": "\u00e9" * 50_000} for i in range(4)]}), offset=40),
    archive_line(dumps({**BASE, "data": [{"id": "1", "v": "\u4e2d\U0001f600"}]}), offset=41),
]


def object_bytes(lines: list[bytes], ends: list[bytes] | None = None, final: bool = True) -> bytes:
    ends = ends or [b"\n"]
    out = b"".join(line + ends[i % len(ends)] for i, line in enumerate(lines))
    return out if final else out.rstrip(b"\r\n")


def decode_object_both(monkeypatch, uri: str, params: str | None = None) -> dict[str, list[dict]]:
    batch = {"uri": [uri]} if params is None else {"uri": [uri], "params": [params]}
    out = {}
    for mode in ("python", "native"):
        monkeypatch.setenv(native_decode.ENV, mode)
        batches = list(decode_objects_fn("canal-json", TIDB)(iter([pa.RecordBatch.from_pydict(batch)])))
        table = pa.Table.from_batches(batches, schema=DECODED_ARROW_SCHEMA)
        table.validate(full=True)
        out[mode] = table.to_pylist()
    assert out["native"] == out["python"]
    return out


def lines_share(uri: str, params: str | None = None) -> tuple[int, int]:
    """(records whose lines the compiled decoder took, records it left to the Python path)."""
    from spark_apps import archive_io

    codec = get_codec("canal-json", TIDB)
    native = native_decode.NativeCanalJson(codec)
    list(archive_io._native_lines_object(native, codec, uri, *archive_io._native_lines(native, params)))
    return native.native_records, native.python_records


@pytest.mark.parametrize("ends,final", [([b"\n"], True), ([b"\r\n"], False), ([b"\n", b"\r\r\n", b"\n\n  \n\x0b\x0c\n"], True)])
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_archive_lines_read_by_the_compiled_decoder_give_the_python_paths_rows(monkeypatch, tmp_path, ends, final,
                                                                            suffix):
    data = object_bytes(LINES, ends, final)
    path = tmp_path / f"orders+1+0{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    out = decode_object_both(monkeypatch, str(path))
    rows = out["python"]
    assert {r["kind"] for r in rows} >= {"row", "watermark", "ddl", "quarantine"}
    assert sum(r["error_stage"] == "archive" for r in rows) >= 15
    taken, left = lines_share(str(path))
    assert taken >= 14 and left >= 30 and taken + left == len(LINES)


def test_archive_lines_split_across_pieces_and_batches(monkeypatch, tmp_path):
    """Lines longer than a decompressed piece, and more records than one call takes."""
    from spark_apps import archive_io, storage

    monkeypatch.setattr(storage, "CHUNK", 1000)
    monkeypatch.setattr(archive_io, "BATCH_ROWS", 7)
    lines = [archive_line(ROW, offset=i) if i % 9 else archive_line(b"{", offset=i) for i in range(60)]
    lines.insert(30, archive_line(dumps({**BASE, "data": [{"id": "1", "v": "x" * 5000}]}), offset=999))
    for suffix in (".jsonl", ".jsonl.gz"):
        path = tmp_path / f"orders+1+0{suffix}"
        data = object_bytes(lines, [b"\n", b"\r\n", b"\n\n"], final=False)
        path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
        out = decode_object_both(monkeypatch, str(path))
        assert [r["line"] for r in out["python"]] == sorted(r["line"] for r in out["python"])
        assert lines_share(str(path)) == (54, 7)


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_a_damaged_gzip_object_ends_the_same_way(monkeypatch, tmp_path, cut):
    data = gzip.compress(object_bytes([archive_line(ROW, offset=i) for i in range(2000)] + [b'{"topic": ']))
    path = tmp_path / "orders+1+0.jsonl.gz"
    path.write_bytes(data[:int(len(data) * cut)])
    rows = decode_object_both(monkeypatch, str(path))["python"]
    assert rows[-1]["kind"] == "quarantine" and "damaged" in rows[-1]["error"]
    path.write_bytes(data[:5] + b"\xff" * 40 + data[45:])  # corrupt from the start
    assert decode_object_both(monkeypatch, str(path))["python"][-1]["kind"] == "quarantine"


def test_an_error_reading_a_left_line_ends_the_object_after_the_same_rows(monkeypatch, tmp_path):
    """Whatever the Python path raises on a line the compiled reader left, the rows before it
    are kept and the object ends with the same row, as on the record path."""
    from spark_apps.layouts import kafka_records

    read_line = kafka_records.read_line

    def failing(uri, line_no, line):
        if line_no == 4:
            raise RuntimeError("disk on fire")
        return read_line(uri, line_no, line)

    monkeypatch.setattr(kafka_records, "read_line", failing)
    path = tmp_path / "orders+1+0.jsonl"
    path.write_bytes(object_bytes([archive_line(ROW, offset=i) for i in range(3)] + [b"{", archive_line(ROW)]))
    rows = decode_object_both(monkeypatch, str(path))["python"]
    assert [r["kind"] for r in rows] == ["row"] * 3 + ["quarantine"]
    assert rows[-1]["error"] == "object unreadable after line 3: RuntimeError: disk on fire"


def test_ticdc_storage_json_files_are_read_by_the_compiled_decoder_alike(monkeypatch, tmp_path):
    from spark_apps.layouts import ticdc_storage

    values = [ROW, golden.compact(golden.SEED_WATERMARK), golden.compact(golden.SEED_DDL), b"not json", b"  ",
              dumps({**BASE, "type": "DELETE"}), b"", dumps({**BASE, "pkNames": ["missing"]})]
    path = tmp_path / "CDC000007.json"
    path.write_bytes(object_bytes(values, [b"\r\n"], final=False))
    params = json.dumps({"layout": "ticdc-storage", "topic": "shop.orders", "file": 7})
    rows = decode_object_both(monkeypatch, str(path), params)["python"]
    assert {r["kind"] for r in rows} == {"row", "watermark", "ddl", "quarantine"}
    assert {r["offset"] for r in rows if r["kind"] == "row"} == {ticdc_storage.offset(7, 1),
                                                                 ticdc_storage.offset(7, 6)}
    assert lines_share(str(path), params) == (3, 3)


@st.composite
def archive_objects(draw):
    """Archive lines the writer writes, some with one field replaced by an arbitrary JSON value,
    removed, or with bytes cut out or put in; line ends of every kind."""
    lines = []
    for i in range(draw(st.integers(1, 6))):
        value = draw(encoded_records())
        line = archive_line(value, offset=i)
        mutation = draw(st.integers(0, 4))
        if mutation == 1:
            doc = json.loads(line)
            doc[draw(st.sampled_from(["topic", "partition", "offset", "timestamp", "key", "value", "headers"]))] = \
                draw(JSON_VALUES)
            line = dumps(doc)
        elif mutation == 2:
            doc = json.loads(line)
            doc.pop(draw(st.sampled_from(sorted(doc))))
            line = dumps(doc)
        elif mutation == 3:
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.sampled_from([b"", b"=", b"\\", b"\r", b" ", b"\xc3", b'"', b"A"])) + \
                line[at + draw(st.integers(0, 2)):]
        lines.append(line)
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\n \n"]), min_size=1, max_size=3))
    return object_bytes(lines, ends, draw(st.booleans()))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=archive_objects())
def test_fuzzed_archive_lines_decode_the_same(tmp_path, data):
    mp = pytest.MonkeyPatch()
    try:
        path = tmp_path / "orders+1+0.jsonl"
        path.write_bytes(data)
        decode_object_both(mp, str(path))
    finally:
        mp.undo()


# ----------------------------------------------------------------------------- fuzzing

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 65), 1 << 65) | st.floats(allow_nan=False)
    | st.text(max_size=6) | st.sampled_from(["", "0", "12", "INSERT", "UPDATE", "TIDB_WATERMARK"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
FIELDS = ["id", "database", "table", "pkNames", "isDdl", "type", "es", "ts", "mysqlType", "old", "data", "_tidb",
          "gtid"]


@st.composite
def encoded_records(draw):
    """A message the canal-json encoder writes for an arbitrary event, sometimes with one field
    (or one value inside data/old/mysqlType/_tidb) replaced by an arbitrary JSON value."""
    event = draw(strategies.events())
    options = {**TIDB, "content-compatible": str(draw(st.booleans())),
               "only-output-updated-columns": str(draw(st.booleans()))}
    [message] = get_codec("canal-json", options).encode([event], topic="t", partition=0)
    mutation = draw(st.integers(0, 3))
    if mutation == 0:
        return message.value
    doc = json.loads(message.value)
    if mutation == 1:
        doc[draw(st.sampled_from(FIELDS))] = draw(JSON_VALUES)
    elif mutation == 2:
        target = draw(st.sampled_from(["data", "old", "mysqlType", "_tidb"]))
        inner = doc.get(target)
        if isinstance(inner, list) and inner and isinstance(inner[0], dict) and inner[0]:
            inner[0][draw(st.sampled_from(sorted(inner[0])))] = draw(JSON_VALUES)
        elif isinstance(inner, dict) and inner:
            inner[draw(st.sampled_from(sorted(inner)))] = draw(JSON_VALUES)
    else:
        doc.pop(draw(st.sampled_from(FIELDS)), None)
    return dumps(doc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=st.lists(encoded_records(), min_size=1, max_size=6))
def test_fuzzed_records_decode_the_same(values):
    mp = pytest.MonkeyPatch()
    try:
        assert_same(mp, values)
    finally:
        mp.undo()


def test_decoder_choice_says_why(monkeypatch):
    monkeypatch.setenv(native_decode.ENV, "python")
    assert native_decode.choose("canal-json", {}) == ("python", f"forced by {native_decode.ENV}=python")
    monkeypatch.setenv(native_decode.ENV, "auto")
    assert native_decode.choose("canal-json", {})[0] == "native"
    assert native_decode.choose("csv", {})[0] == "python"
    assert native_decode.choose("canal-json", {"large-message-handle-compression": "lz4"})[0] == "python"
    monkeypatch.setenv(native_decode.ENV, "fast")
    with pytest.raises(ValueError, match="auto, native, python"):
        native_decode.choose("canal-json", {})


# ----------------------------------------------------------------------------- the replay

def _files(root) -> dict[str, bytes]:
    import pathlib

    base = pathlib.Path(root)
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*"))
            if p.is_file() and p.name != "_manifest.json" and "_staging" not in p.parts}


@pytest.mark.spark
def test_a_replay_writes_the_same_bytes_with_either_decoder_and_says_which(spark, monkeypatch, tmp_path):
    from spark_apps.generate import generate, write_archive
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    gen = generate(transactions=120, partitions=2, bad_values=2, seed=5)
    source = str(tmp_path / "archive")
    write_archive(gen.records, source, records_per_object=100, bad_lines=1)
    manifests, outputs = {}, {}
    for mode in ("native", "python"):
        monkeypatch.setenv(native_decode.ENV, mode)
        output = str(tmp_path / mode)
        argv = ["--source", source, "--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true",
                "--output", output, "--emit", "snapshot", "--target-option", "enable-tidb-extension=true"]
        manifests[mode] = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        outputs[mode] = _files(output)
    # what the decode tasks report they ran, with the records each path decoded
    native, python = manifests["native"]["decoder"], manifests["python"]["decoder"]
    assert native["path"] == native["expected"] == "native"
    assert {(g["path"], g["loaded_from"]) for g in native["executors"]} == {("native", "installed")}
    assert sum(g["compiled_records"] for g in native["executors"]) > 0
    forced = f"forced by {native_decode.ENV}=python"
    assert {k: python[k] for k in ("path", "reason", "expected")} == {"path": "python", "reason": forced,
                                                                      "expected": "python"}
    assert {(g["path"], g["reason"], g["loaded_from"]) for g in python["executors"]} == {("python", forced, None)}
    for manifest in manifests.values():  # every record but the lines that are none (the bad line)
        groups = manifest["decoder"]["executors"]
        unreadable = sum(r["records"] for r in manifest["quarantine"]["reasons"] if r["stage"] == "archive")
        assert unreadable == 1
        assert sum(g["compiled_records"] + g["python_records"] for g in groups) == \
            manifest["counts"]["records"] - unreadable
    assert native_decode.LOADED_FROM == "installed"
    assert manifests["native"]["counts"] == manifests["python"]["counts"]
    assert manifests["native"]["counts"]["quarantined"] >= 3
    assert outputs["native"] == outputs["python"] and any("_quarantine" in name for name in outputs["native"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=st.lists(st.tuples(st.floats(allow_nan=False), st.floats(width=32, allow_nan=False)), min_size=1, max_size=20),
       style=st.sampled_from(["{!r}", "{:E}", "{:.3e}", "{:.20f}"]))
def test_canal_flavor_float_texts_decode_the_same(pairs, style):
    values = [dumps({**BASE, "mysqlType": {"id": "int", "d": "double", "f": "float"},
                     "data": [{"id": str(i), "d": style.format(d), "f": style.format(f)}]}) for i, (d, f) in enumerate(pairs)]
    mp = pytest.MonkeyPatch()
    try:
        assert_same(mp, values, {"flat-message-flavor": "canal"})
    finally:
        mp.undo()
