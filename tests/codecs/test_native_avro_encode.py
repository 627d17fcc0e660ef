"""The compiled TiCDC Avro encoder (native/cdc_replay_native, avro_encode.rs) against the Python
codec, the reference: for the same events and options both paths give the same Kafka messages,
byte for byte, and leave the same schema registry behind (the same schemas under the same ids,
registered in the same order: each path has its own fresh registry), or raise the same error
(hypothesis: every column type the codec maps, NULLs, hostile names and values, big and
out-of-range numbers, decimals at and beyond their scale, ENUM/SET labels, updates and deletes,
key columns named or flagged, the namespace, schema-id hints and checksum extras, DDL and
watermarks between rows, every encode option, two topics)."""

from __future__ import annotations

import copy
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.errors import EncodeError
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from spark_apps import native_decode, native_encode

from .. import strategies
from .test_native_open_protocol_encode import BYTES, DECIMALS, FLOATS, INTS, NAMES, TEXT, UTF8, in_range, mostly

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "AvroEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates AvroEncoder'} "
           "(scripts/bootstrap builds it with maturin; needs cargo)")

OPTIONS = st.fixed_dictionaries({}, optional={
    "enable-tidb-extension": st.sampled_from(["true", "false"]),
    "avro-decimal-handling-mode": st.sampled_from(["precise", "string"]),
    "avro-bigint-unsigned-handling-mode": st.sampled_from(["long", "string"]),
    "avro-enable-watermark": st.sampled_from(["true", "false"]),
})

_I = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
DECIMAL_TEXTS = st.one_of(DECIMALS, st.sampled_from([
    b"0", b"-0", b"-0.00", b"0.000", b"1.5", b"-1.5", b"-128", b"-129", b"127", b"128", b"255", b"-256", b"1.505",
    b"1.500", b"12345678901234567890123456789012345678901234567890.12", b"1e3", b" 1", b"+1", b".5", b"1.", b"1_0",
    b"NaN", b"-", b"", b"0." + b"0" * 101 + b"1", b"1" * 102, b"\xd9\xa1"]))
# (mysql_type, flags, its values' strategy): every type the codec maps, and some it refuses
TYPES = st.one_of(
    st.sampled_from(list(_I)).map(lambda t: (t, 0, in_range(-(1 << (_I[t] - 1)), (1 << (_I[t] - 1)) - 1))),
    st.sampled_from(list(_I)).map(lambda t: (t + " unsigned", 0, in_range(0, (1 << _I[t]) - 1))),
    st.sampled_from(list(_I)).map(lambda t: (t, int(ColumnFlag.UNSIGNED), in_range(0, (1 << _I[t]) - 1))),
    st.sampled_from([("year", 0, in_range(1901, 2155)), ("bit(64)", 0, in_range(0, (1 << 64) - 1)),
                     ("bit", 0, in_range(0, 300)), ("bit(x)", 0, INTS)]),
    st.sampled_from(["enum('a','b','c,d','it''s','é')", "set('a','b','x','y')", "enum", "set('x')"]).map(
        lambda t: (t, 0, mostly(in_range(0, 5), INTS))),
    st.sampled_from(["float", "double", "double(10,2)", "float unsigned"]).map(lambda t: (t, 0, mostly(
        st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode()), FLOATS))),
    st.sampled_from(["decimal(65,30)", "decimal(10,2) unsigned", "decimal(5)", "decimal(20,0)", "decimal",
                     "decimal(x,y)", "decimal(10,200)"]).map(lambda t: (t, 0, DECIMAL_TEXTS)),
    st.sampled_from(["varchar(20)", "char(3)", "text", "tinytext", "json", "date", "time(3)", "datetime(6)",
                     "timestamp", "vector(3)", "VARCHAR(255)"]).map(lambda t: (t, 0, mostly(UTF8, BYTES))),
    st.sampled_from(["varchar(20)", "text"]).map(lambda t: (t, int(ColumnFlag.BINARY), BYTES)),
    st.sampled_from(["varbinary(8)", "binary(4)", "blob", "longblob"]).map(lambda t: (t, 0, BYTES)),
    mostly(st.just(("int", 0, in_range(0, 9))), st.sampled_from(["point", "weird type", "", "geometry"]).map(
        lambda t: (t, 0, BYTES))),
)
COLUMN_NAMES = mostly(NAMES, st.sampled_from(["1x", "a-b", "a_b", "_tidb_op", "_tidb_commit_ts"]))


@st.composite
def hostile_column(draw):
    mysql_type, flags, values = draw(TYPES)
    return {"name": draw(COLUMN_NAMES), "mysql_type": mysql_type,
            "flags": flags | draw(st.sampled_from([0, 0, int(ColumnFlag.NULLABLE), int(ColumnFlag.HANDLE_KEY)])),
            "value": draw(st.none() | values), "label": None}


EXTRAS = st.none() | st.dictionaries(
    st.sampled_from(["avro.namespace", "avro.key_schema_id", "avro.value_schema_id", "avro.row_level_checksum",
                     "avro.corrupted", "avro.checksum_version", "other"]),
    st.one_of(st.sampled_from(["1", "2", "3", "4", "0", "x", "", "default", "ns.1", "99", "true", "false", "-1",
                               "+1", " 2", "9223372036854775808"]), TEXT), max_size=4)
CHECKSUMS = st.fixed_dictionaries({"avro.row_level_checksum": st.sampled_from(["123", ""]),
                                   "avro.corrupted": st.sampled_from(["true", "false", "x"]),
                                   "avro.checksum_version": mostly(st.sampled_from(["1", "0", "-5"]), st.just("x"))})


@st.composite
def hostile_events(draw):
    """A row event of random columns, names, types, flags, values, keys and extras."""
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    image = draw(mostly(st.lists(hostile_column(), min_size=1, max_size=5, unique_by=lambda c: c["name"]),
                        st.lists(hostile_column(), min_size=1, max_size=5)))  # a name twice: refused
    side = draw(mostly(st.just(image), st.sampled_from([None, []])))
    named = st.lists(st.sampled_from([c["name"] for c in image]), max_size=2)
    keys = draw(mostly(st.none() | named, st.lists(COLUMN_NAMES, max_size=3)))  # a name not in the image: refused
    extras = draw(st.one_of(EXTRAS, CHECKSUMS))
    return new_event(
        Kind.ROW, op=draw(mostly(st.just(op), st.just("upsert"))),
        commit_ts=draw(mostly(st.integers(0, (1 << 63) - 1), st.none())),
        execute_ts_ms=draw(st.none() | st.integers(0, 1 << 40)),
        database=draw(mostly(st.sampled_from(["d", "shop", "db-1"]), st.none() | TEXT)),
        table=draw(mostly(st.sampled_from(["t", "orders", "Weird Table"]), st.none() | TEXT)),
        key_columns=keys, before=side if op == Op.DELETE else None, after=side if op != Op.DELETE else None,
        extras=extras,
    )


def registry(path: str) -> dict[str, bytes]:
    """Every file of a directory registry by relative path (ids and subjects' versions)."""
    found = {}
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), path)] = f.read()
    return found


def messages(options: dict, streams: list[tuple[str, list[dict]]], compiled: bool, chunk: int = 3):
    """(messages or the error, the registry left behind) of the Python codec or of the compiled
    path, each with a fresh registry; `streams`: (topic, events) written one after the other."""
    with tempfile.TemporaryDirectory() as reg:
        codec = get_codec("avro", {**options, "schema-registry": f"file://{reg}"})
        encoder = native_encode.compiled_encoder(codec, True) if compiled else None
        out = []
        try:
            for topic, events in streams:
                events = copy.deepcopy(events)
                if not compiled:
                    written = codec.encode(events, topic=topic, partition=0)
                else:
                    assert encoder is not None
                    pairs = native_encode.encode_each(codec, events, topic=topic, partition=0, encoder=encoder,
                                                      chunk=chunk)
                    written = codec.frame(entry for _, entry in pairs)
                out += [(topic, m.key, m.value, m.headers) for m in written]
        except (EncodeError, ValueError, TypeError, AttributeError) as e:
            out = (type(e).__name__, str(e))
        return out, registry(reg)


def both(options: dict, streams, chunk: int = 3):
    return messages(options, streams, False), messages(options, streams, True, chunk)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(st.tuples(st.sampled_from(["t", "a.b"]), st.lists(
    st.one_of(hostile_events(), strategies.events(), strategies.events(commit_ts=False)), min_size=1, max_size=8)),
    min_size=1, max_size=2), st.integers(1, 6))
def test_the_compiled_encoder_writes_the_python_codecs_bytes(options, streams, chunk):
    python, compiled = both(options, streams, chunk)
    assert compiled == python


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(strategies.events(), min_size=1, max_size=30))
def test_streams_of_ordinary_events_are_the_same(options, events):
    python, compiled = both(options, [("t", events)], chunk=7)
    assert compiled == python


def _column(name, mysql_type, value, flags=0):
    return {"name": name, "mysql_type": mysql_type, "flags": flags, "value": value, "label": None}


def ordinary_rows(n: int) -> list[dict]:
    """Row events of the types the codec maps, NULLs and UTF-8 text: nothing in them needs Python."""
    events = []
    for i in range(n):
        image = [_column("id", "bigint", str(i).encode(), int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)),
                 _column("name", "varchar(20)", "nämé <&> \"q\"".encode()), _column("price", "decimal(10,2)", b"-12.50"),
                 _column("f", "float", b"0.1"), _column("d", "double", b"-1e-7"), _column("u", "int unsigned", b"4294967295"),
                 _column("big", "bigint unsigned", b"18446744073709551615"), _column("y", "year", b"2024"),
                 _column("b", "varbinary(8)", b"\x00\x01ab\xff"), _column("blob", "blob", b"\x00\xff"),
                 _column("when", "datetime(3)", b"2020-01-02 03:04:05.123"),
                 _column("gone", "text", None if i % 2 else b"here", int(ColumnFlag.NULLABLE)),
                 _column("e", "enum('a','b')", b"2"), _column("s", "set('x','y')", b"3"), _column("bits", "bit(3)", b"5")]
        op = (Op.INSERT, Op.UPDATE, Op.DELETE)[i % 3]
        events.append(new_event(Kind.ROW, op=op, commit_ts=(1 << 40) + i, database="shop", table="orders",
                                key_columns=["id"] if i % 4 else None, before=None if op == Op.INSERT else image,
                                after=None if op == Op.DELETE else image,
                                extras={"avro.namespace": "cf"} if i % 5 == 0 else None))
    return events


@pytest.mark.parametrize("options", [{}, {"enable-tidb-extension": "true", "avro-decimal-handling-mode": "string"},
                                     {"avro-bigint-unsigned-handling-mode": "string", "avro-enable-watermark": "true",
                                      "enable-tidb-extension": "true"}])
def test_ordinary_row_events_are_encoded_by_the_compiled_path(options, tmp_path):
    codec = get_codec("avro", {**options, "schema-registry": f"file://{tmp_path}"})
    events = ordinary_rows(20)
    counts = native_encode.Counts()
    encoder = native_encode.compiled_encoder(codec, True)
    list(native_encode.encode_each(codec, events, topic="t", partition=0, encoder=encoder, counts=counts))
    assert (counts.native, counts.python) == (len(events), 0)
    python, compiled = both(options, [("t", events)])
    assert compiled == python and len(python[0]) == len(events) and len(python[1]) > 4


def test_schemas_are_registered_in_stream_order_around_events_python_encodes():
    """The first event's int is `+5` (Python's int() reads it; the compiled encoder leaves it to
    Python, after its chunk): its schema must still get the first ids, as on the Python path."""
    first = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="a", key_columns=["id"],
                      after=[_column("id", "int", b"+5")])
    second = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="b", key_columns=["id"],
                       after=[_column("id", "int", b"6")])
    python, compiled = both({}, [("t", [first, second])], chunk=10)
    assert compiled == python and json.loads(json.loads(python[1]["ids/1.json"])["schema"])["name"] == "a"


@pytest.mark.parametrize("event", [
    new_event(Kind.ROW, op=Op.UPDATE, commit_ts=1 << 40, database="d", table="t", key_columns=["id"], after=[]),
    new_event(Kind.ROW, op=Op.DELETE, commit_ts=1 << 40, database="d", table="t", key_columns=[],
              before=[_column("v", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              after=[_column("v", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=None,
              after=[_column("id", "tinyint", b"3000000000")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=None,
              after=[_column("a-b", "int", b"1"), _column("a_b", "int", b"2")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=None,
              after=[_column("g", "point", b"")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=None,
              after=[_column("p", "decimal(5,1)", b"1.25")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=None,
              after=[_column("e", "enum('a')", b"7")]),
])
def test_an_event_the_codec_refuses_is_refused_alike(event):
    python, compiled = both({}, [("t", [event])])
    assert python[0][0] == "EncodeError" and compiled == python


EDGE_VALUES = [b"0", b"-0", b"-0.0", b"1e-7", b"1E-7", b"1e21", b"1e-6", b"3.4028235e38", b"3.4028236e38", b"1e39",
               b"1e308", b"1e400", b"1e-320", b"1e-45", b"16777217", b"0.1", b"1e+5", b"123456789012345678901234567890",
               b"-9223372036854775808", b"9223372036854775807", b"9223372036854775808", b"18446744073709551615",
               b"18446744073709551616", b"2147483647", b"2147483648", b"-2147483649", b"255", b"-129", b"007",
               b"-00.50", b"1.10", b"99999.99", b"-99999.99", b"\x00\x07", b"\xff\xfe", b"\xe2\x80\xa8", b'"\\']


@pytest.mark.parametrize("mysql_type", ["float", "double", "int", "bigint", "bigint unsigned", "int unsigned", "year",
                                        "bit(64)", "varchar(4)", "varbinary(4)", "decimal(65,0)", "decimal(10,2)",
                                        "decimal(65,30)", "set('a','b')"])
def test_edge_values_are_written_alike(mysql_type):
    for value in EDGE_VALUES:
        event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
                          after=[_column("v", mysql_type, value)])
        python, compiled = both({}, [("t", [event])])
        assert compiled == python, value


def test_the_switch_chooses_the_encoder():
    codec = get_codec("avro", {"schema-registry": "file:///nonexistent-registry"})
    assert native_encode.compiled_encoder(codec, True) is not None
    assert native_encode.compiled_encoder(codec, False) is None
