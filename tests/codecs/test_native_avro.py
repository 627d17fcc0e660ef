"""The compiled TiCDC Avro decoder (native/cdc_replay_native/src/avro.rs) against the Python
codec, the reference: golden vectors, hand-written edge cases, a generated archive, mutated
records and hypothesis-generated event streams decoded by both paths must give identical
DECODED_ARROW_SCHEMA rows, quarantine rows included."""

from __future__ import annotations

import random
import re
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.events import ColumnFlag, Kind, Op, column, new_event
from cdc_codecs.schema_registry import DirectoryRegistry
from spark_apps import native_decode

from .. import strategies
from . import native_paths as paths
from . import test_avro as golden
from .test_avro import TS, blob, framed, orders_event, value_body, zz
from .test_native_canal_json import RECORDS

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

F = ColumnFlag
PK = F.PRIMARY_KEY | F.HANDLE_KEY


def kv_batch(pairs: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    n = len(pairs)
    return pa.RecordBatch.from_pydict({
        "topic": ["shop.orders"] * n, "partition": [i % 3 for i in range(n)], "offset": list(range(100, 100 + n)),
        "timestamp": [1700000000000 + i for i in range(n)], "key": [k for k, _ in pairs],
        "value": [v for _, v in pairs], "object": ["s3://b/shop.orders/0/x.avro"] * n,
        "line": list(range(1, n + 1))}, schema=RECORDS)


def options_for(registry, **extra) -> dict:
    return {"schema-registry": f"file://{registry}", "enable-tidb-extension": "true",
            **{k.replace("_", "-"): str(v) for k, v in extra.items()}}


_ADDRESS = re.compile(r" object at 0x[0-9a-f]+>")


def _rows(batch, mode, options) -> list[dict]:
    """The rows of one path; fastavro's messages name a BytesIO by its address: masked."""
    rows = paths.decode("avro", batch, mode, options).to_pylist()
    for row in rows:
        if row["error"]:
            row["error"] = _ADDRESS.sub(" object>", row["error"])
    return rows


def assert_same(pairs, options) -> list[dict]:
    batch = kv_batch(pairs)
    python, native = _rows(batch, "python", options), _rows(batch, "native", options)
    assert len(native) == len(python)
    for a, b in zip(python, native):
        assert b == a
    return python


def native_share(pairs, options) -> tuple[int, int]:
    return paths.native_share("avro", kv_batch(pairs), options)


def encode(options, events, topic="shop.orders") -> list[tuple[bytes | None, bytes | None]]:
    return [(m.key, m.value) for m in get_codec("avro", options).encode(events, topic=topic, partition=0)]


# ----------------------------------------------------------------------------- golden vectors

def _golden(tmp_path, **extra):
    options = options_for(tmp_path, avro_enable_watermark=True, **extra)
    events = [orders_event(), orders_event(Op.UPDATE), orders_event(Op.DELETE),
              new_event(Kind.WATERMARK, watermark_ts=TS),
              new_event(Kind.DDL, commit_ts=TS, ddl_query="CREATE TABLE t (a INT)", database="d", table="t")]
    return options, encode(options, events)


@pytest.mark.parametrize("decimal", ["precise", "string"])
@pytest.mark.parametrize("bigint", ["long", "string"])
def test_golden_vectors_decode_the_same(tmp_path, decimal, bigint):
    options, pairs = _golden(tmp_path, avro_decimal_handling_mode=decimal, avro_bigint_unsigned_handling_mode=bigint)
    key, value = pairs[0]
    bad = [  # the codec tests' bad records: each a quarantine row
        (key, b"\x00\x00\x00\x00\x63" + value[5:]), (b"\x01" + key[1:], value), (key, b"\x03\x00" + b"\x11" * 16 + b"\x02"),
        (b"\x00\x00", value), (None, None), (key + b"\x00", value), (key, value[:-3]), (None, b"\x07abcdefg"),
        (None, b"\x01{nope"), (None, b"\x02\x00\x01"), (None, b"\x02" + (1 << 63).to_bytes(8, "big")),
    ]
    python = assert_same(pairs + bad, options)
    assert [r["kind"] for r in python[:5]] == ["row", "row", "row", "watermark", "ddl"]
    assert [r["kind"] for r in python[5:]] == ["quarantine"] * len(bad)
    # rows and watermarks are taken natively (the tombstone too), DDL and bad records are not
    assert native_share(pairs + bad, options) == (4, 1 + len(bad))


def test_bad_column_values_decode_the_same(tmp_path):
    options, pairs = _golden(tmp_path)
    key = pairs[0][0]
    bodies = [
        value_body().replace(blob(b"paid"), blob(b"lost")),  # not an ENUM label
        value_body().replace(blob(b"\x05"), blob(b"\x01" * 9), 1),  # BIT wider than 64
        value_body().replace(blob(b"c") + zz(TS), blob(b"x") + zz(TS)),  # _tidb_op
        value_body(commit_ts=-5),  # negative commit ts
        value_body(commit_ts=0),  # no commit ts
        value_body().replace(blob(b"\xfb\x1e"), blob(b"\x80" + b"\x00" * 20)),  # a DECIMAL wider than i128
        value_body().replace(blob(b"\xfb\x1e"), blob(b"")),  # an empty DECIMAL: zero
    ]
    python = assert_same([(key, framed(2, body)) for body in bodies], options)
    assert [r["kind"] for r in python] == ["quarantine"] * 4 + ["row"] * 3


# ----------------------------------------------------------------------------- edge cases

def _edge_events():
    after = [
        column("id", str((1 << 64) - 1), "bigint unsigned", PK | F.UNSIGNED),
        column("neg", str(-(1 << 63)), "bigint"), column("small", "-1", "tinyint"), column("m", "16777215", "mediumint unsigned", F.UNSIGNED),
        column("u", "4294967295", "int unsigned", F.UNSIGNED), column("y", "2155", "year"),
        column("bit", str((1 << 64) - 1), "bit(64)"), column("b0", "0", "bit(1)"),
        column("e", "3", "enum('a','b','it''s')", label="it's"), column("e0", "0", "enum('a')", label=""),
        column("s", "5", "set('a','b','c')", label="a,c"), column("s0", "0", "set('a')", label=""),
        column("d1", "-0", "double"), column("d2", "1e300", "double"), column("d3", "5e-324", "double"),
        column("f1", "3.4028235e38", "float"), column("f2", "1e-45", "float"), column("f3", "0.3", "float"),
        column("dec", "-12.50", "decimal(5,2)"), column("dec0", "0.000", "decimal(3,3)"),
        column("dec1", "99999999999999999999999999999999999999", "decimal(38,0)"),
        column("decw", "-" + "9" * 40 + ".5", "decimal(65,1)"),  # beyond i128: the Python path
        column("bin", b"\xff\x00\xfe", "varbinary(3)", F.BINARY), column("nonutf8", b"\xff\xfe", "varchar(8)"),
        column("t", "\u4e2d\U0001f600", "text"), column("n", None, "varchar(3)", F.NULLABLE),
        column("j", '{"a": 1}', "json"), column("tm", "-838:59:59.000000", "time(6)"), column("dt", "2026-11-25 10:00:00", "datetime"),
        column("ts", "2026-11-25 10:00:00.5", "timestamp(1)"), column("dd", "0000-00-00", "date"),
        column("v", "[1,2.5]", "vector"),
    ]
    return [
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=TS, database="shop", table="wide", key_columns=["id"], after=after),
        new_event(Kind.ROW, op=Op.UPDATE, commit_ts=TS + 1, database="shop", table="wide", key_columns=["id"], after=after),
        new_event(Kind.ROW, op=Op.DELETE, database="shop", table="wide", key_columns=["id"], before=after),
        # no key at all: a value alone; non-ASCII and case-differing names; another namespace
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=TS, database="db", table="nokey", key_columns=[],
                  after=[column("a", "1", "int")]),
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=TS, database="d-b", table="t.1", key_columns=["Ét"],
                  after=[column("Ét", "1", "int", PK), column("1x", "2", "int")]),
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=TS, database="shop", table="ns", key_columns=["id"],
                  after=[column("id", "1", "int", PK)], extras={"avro.namespace": "cf-1"}),
    ]


@pytest.mark.parametrize("decimal", ["precise", "string"])
@pytest.mark.parametrize("bigint", ["long", "string"])
def test_edge_cases_decode_the_same(tmp_path, decimal, bigint):
    options = options_for(tmp_path, avro_decimal_handling_mode=decimal, avro_bigint_unsigned_handling_mode=bigint)
    pairs = encode(options, _edge_events())
    python = assert_same(pairs, options)
    assert all(r["kind"] == "row" for r in python)
    taken, left = native_share(pairs, options)
    assert left == (2 if decimal == "precise" else 0)  # the DECIMAL(65,1) beyond i128


def test_hand_written_schemas_decode_the_same(tmp_path):
    """Schemas the encoder does not write: TiCDC's defaults and [T, "null"], pre-v7 FLOAT as
    double, checksum fields, unknown tidb_types, a key naming another table, a schema the
    codec rejects, a key whose column is missing from the value, unknown schema ids."""
    registry = DirectoryRegistry(tmp_path)
    ids = {name: registry.register(name, text) for name, text in {
        "t-key": golden.TICDC_KEY, "t-value": golden.TICDC_WITH_DEFAULTS,
        "f-value": '{"type":"record","name":"f","namespace":"default.d","fields":['
                   '{"name":"f","type":{"type":"double","connect.parameters":{"tidb_type":"FLOAT"}}},'
                   '{"name":"g","type":{"type":"float","connect.parameters":{"tidb_type":"DOUBLE"}}}]}',
        "c-value": '{"type":"record","name":"c","namespace":"default.d","fields":['
                   '{"name":"a","type":{"type":"int","connect.parameters":{"tidb_type":"INT"}}},'
                   '{"name":"_tidb_op","type":"string"},{"name":"_tidb_commit_ts","type":"long"},'
                   '{"name":"_tidb_commit_physical_time","type":"long"},'
                   '{"name":"_tidb_row_level_checksum","type":"string"},{"name":"_tidb_corrupted","type":"boolean"},'
                   '{"name":"_tidb_checksum_version","type":"int"}]}',
        "u-value": '{"type":"record","name":"u","namespace":"default.d","fields":['
                   '{"name":"b","type":{"type":"boolean","connect.parameters":{"tidb_type":"NEWTYPE"}}},'
                   '{"name":"l","type":["null",{"type":"long","connect.parameters":{"tidb_type":"OTHER"}}]},'
                   '{"name":"e","type":{"type":"string","connect.parameters":{"tidb_type":"SET"}}}]}',
        "x-value": '{"type":"record","name":"x","namespace":"default.d","fields":[{"name":"a","type":"int"}]}',
        "k-key": '{"type":"record","name":"k","namespace":"default.d","fields":['
                 '{"name":"zz","type":{"type":"int","connect.parameters":{"tidb_type":"INT"}}}]}',
        "o-key": '{"type":"record","name":"other","namespace":"default.test","fields":['
                 '{"name":"id","type":{"type":"int","connect.parameters":{"tidb_type":"INT"}}}]}',
    }.items()}
    t_value = zz(1) + zz(0) + blob(b"ab") + zz(5) + blob(b"u") + zz(TS) + zz(TS >> 18)
    f32 = struct.pack("<d", struct.unpack("<f", struct.pack("<f", 3.14))[0])
    pairs = [
        (framed(ids["t-key"], zz(1)), framed(ids["t-value"], t_value)),
        (framed(ids["t-key"], zz(1)), framed(ids["t-value"], zz(1) + zz(1) + zz(5) + blob(b"c") + zz(0) + zz(0))),
        (None, framed(ids["f-value"], f32 + struct.pack("<f", 0.1))),
        (None, framed(ids["f-value"], struct.pack("<d", 1e39) + struct.pack("<f", 2.5))),  # float32 overflow
        (None, framed(ids["f-value"], struct.pack("<d", float("nan")) + struct.pack("<f", float("inf")))),
        (None, framed(ids["c-value"], zz(-3) + blob(b"c") + zz(TS) + zz(-1) + blob(b"abc") + b"\x01" + zz(2))),
        (None, framed(ids["c-value"], zz(-3) + blob(b"c") + zz(TS) + zz(0) + blob(b"\xff") + b"\x00" + zz(2))),
        (None, framed(ids["u-value"], b"\x01" + zz(1) + zz(-7) + blob(b"x,y"))),
        (None, framed(ids["u-value"], b"\x02" + zz(0) + blob(b""))),  # a boolean byte fastavro may read
        (None, framed(ids["x-value"], zz(1))),  # not a TiCDC schema
        (framed(ids["k-key"], zz(1)), framed(ids["t-value"], t_value)),  # key column not in the row
        (framed(ids["o-key"], zz(1)), framed(ids["t-value"], t_value)),  # key of another table
        (framed(ids["o-key"], zz(1)), None),  # a tombstone of another table
        (framed(99, zz(1)), None), (framed(0, zz(1)), None), (b"\x00\xff\xff\xff\xff" + zz(1), framed(ids["t-value"], t_value)),
        (b"", framed(ids["t-value"], t_value)),  # an empty key is no key
        (framed(ids["t-key"], zz(1)), b""),  # an empty value is a tombstone
    ]
    python = assert_same(pairs, options_for(tmp_path))
    assert {r["kind"] for r in python} == {"row", "quarantine"}


# ----------------------------------------------------------------------------- archives

def test_a_generated_archive_decodes_the_same_through_the_object_reader(tmp_path):
    options = options_for(tmp_path / "registry", avro_enable_watermark=True)
    out = paths.generated_archive("avro", tmp_path, records_per_object=50, options=options)
    assert len(out["native"]) == len(out["python"]) > 300
    assert out["native"] == out["python"]
    assert {"row", "ddl", "watermark", "quarantine"} <= {r["kind"] for r in out["python"]}


# ----------------------------------------------------------------------------- fuzzing

def test_mutated_records_decode_the_same(tmp_path):
    """The codec tests' mutations of keys and values (bit flips, truncation, junk, huge
    lengths, another schema id): same rows or same quarantine rows."""
    options, pairs = _golden(tmp_path)
    pairs += encode(options, _edge_events())
    rng = random.Random(20261125)
    mutated = []
    for n in range(1500):
        key, value = pairs[n % len(pairs)]
        values = golden._mutations(rng, value)
        mutated.append((golden._mutations(rng, key)[0] if n % 3 == 0 else key, values[n % len(values)]))
    python = assert_same(mutated, options)
    kinds = [r["kind"] for r in python]
    assert kinds.count("quarantine") > 300 and kinds.count("row") > 100


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=st.lists(strategies.events(commit_ts=True) | strategies.events(commit_ts=False), min_size=1, max_size=8),
       options=golden.OPTIONS)
def test_generated_event_streams_decode_the_same(tmp_path_factory, wide_decimal_context, events, options):
    directory = tmp_path_factory.getbasetemp() / "native-avro-registry"
    options = {"schema-registry": f"file://{directory}", **options}
    assert_same(encode(options, events, topic="gen.topic"), options)


wide_decimal_context = golden.wide_decimal_context


FLOATS = st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False),
                            st.floats(width=32, allow_nan=False, allow_infinity=False)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=FLOATS)
def test_float_and_double_texts_decode_the_same(tmp_path_factory, pairs):
    directory = tmp_path_factory.getbasetemp() / "native-avro-floats"
    options = options_for(directory)
    events = [new_event(Kind.ROW, op=Op.INSERT, commit_ts=TS, database="d", table="f", key_columns=["id"],
                        after=[column("id", str(i), "int", PK), column("d", repr(d), "double"),
                               column("f", repr(f), "float")]) for i, (d, f) in enumerate(pairs)]
    assert_same(encode(options, events), options)


def test_the_http_registry_decodes_the_same(tmp_path):
    from tests.support.schema_registry_server import SchemaRegistryServer

    with SchemaRegistryServer() as server:
        options = {"schema-registry": server.url, "enable-tidb-extension": "true"}
        pairs = encode(options, [orders_event(), orders_event(Op.DELETE), *_edge_events()])
        python = assert_same(pairs, options)
    assert {r["kind"] for r in python} == {"row"}
