"""The compiled oceanbase-avro encoder (native/cdc_replay_native, oceanbase_avro_encode.rs) against
the Python codec, the reference: for the same events and options both paths give the same Kafka
messages, byte for byte (hypothesis: every MySQL type the codec writes and every ColumnValue
member it picks, ENUM/SET labels right, wrong and missing, NULLs, hostile and non-UTF-8 text,
out-of-range numbers and times, fixed and rule-based time zones, updates and deletes with old
values, every `oceanbase.*` extra valid or not, positions that set the record id or not, DDL and
watermarks between rows, every encode option), and the same EncodeError where the codec
refuses an event."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from cdc_codecs.mysql_types import enum_set_label, parse_type
from cdc_codecs.oceanbase_avro import _NS
from spark_apps import native_decode, native_encode

from .. import strategies
from .test_native_open_protocol_encode import messages, mostly

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "OceanBaseAvroEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates OceanBaseAvroEncoder'} "
           "(scripts/bootstrap builds it with maturin; needs cargo)")

OPTIONS = st.fixed_dictionaries({}, optional={
    "avro-framing": st.sampled_from(["auto", "plain", "confluent"]),
    "avro-schema-id": st.sampled_from(["0", "1", "77", "4294967295"]),
    "timestamp-unit": st.sampled_from(["s", "ms"]),
    "time-zone": st.sampled_from(["UTC", "+08:00", "-05:30", "Asia/Shanghai", "America/New_York"]),
})

HOSTILE = st.sampled_from(['"', "\\", "\n", "\x00", "\x7f", "\x80", "\xff", "é", "€", "\U0001f600", "\ufffd", "'",
                           ",", " ", "\u0378", "١"])
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join)
UTF8 = TEXT.map(lambda t: t.encode("utf-8"))
BYTES = st.one_of(st.binary(max_size=12), UTF8, st.sampled_from([b"\xc3\xa9", b"\xff\xfe", b"\xed\xa0\x80", b"abcd"]))
INTS = st.one_of(
    st.integers(-(1 << 65), 1 << 65).map(lambda i: str(i).encode()),
    st.sampled_from([b"2147483647", b"2147483648", b"-2147483648", b"-2147483649", b"9223372036854775807",
                     b"9223372036854775808", b"-9223372036854775808", b"-0", b"007", b"+5", b" 5", b"1_0", b"",
                     b"-", b"1.0", b"\xd9\xa1", b"0" * 40 + b"1"]))
FLOATS = st.one_of(
    st.floats().map(lambda f: repr(f).encode()),
    st.floats(width=32).map(lambda f: repr(f).encode()),
    st.sampled_from([b"0", b"-0", b"-0.0", b"1e-7", b"0.0000001", b"100000000000000000000", b"1e21", b"3.4028235e38",
                     b"340282350000000000000000000000000000000", b"340282360000000000000000000000000000000",
                     b"nan", b"inf", b"1.", b".5", b"+1", b" 1", b"1_0", b"", b"0.1", b"0.30000000000000004",
                     b"16777217", b"0.5", b"2.5", b"0.125", b"9007199254740993"]))
DECIMALS = st.one_of(
    st.integers(-(10 ** 40), 10 ** 40).map(lambda i: str(i).encode()),
    st.tuples(st.integers(-(10 ** 20), 10 ** 20), st.integers(0, 10 ** 12)).map(lambda p: f"{p[0]}.{p[1]}".encode()),
    st.sampled_from([b"1e5", b"abc", b" 1.5", b"1.", b".5", b"-0", b"\xd9\xa1.5", b"NaN", b"Infinity", b"1_0"]))
DATES = st.one_of(st.dates().map(lambda d: d.isoformat().encode()),
                  st.sampled_from([b"0000-00-00", b"2020-13-01", b"2020-02-30", b"2020-1-1", b"9999-12-31",
                                   b"\xd9\xa2020-01-01", b"2020-01-01 "]))
FRACTIONS = st.sampled_from(["", ".5", ".123", ".123456", ".000000001", ".999999999", ".1234567", ".000001000"])
TIMES = st.one_of(
    st.tuples(st.sampled_from(["", "-"]), st.integers(0, 840), st.integers(0, 60), st.integers(0, 60), FRACTIONS).map(
        lambda t: f"{t[0]}{t[1]:02d}:{t[2]:02d}:{t[3]:02d}{t[4]}".encode()),
    st.sampled_from([b"0838:00:00", b"-00:00:00", b"1:00:00", b"12:00", b"12:00:00.", b"12:00:00.1234567890"]))
DATETIMES = st.one_of(
    st.tuples(st.datetimes(), FRACTIONS).map(lambda t: (t[0].strftime("%Y-%m-%d %H:%M:%S") + t[1]).encode()),
    st.tuples(st.integers(0, 10000), st.integers(0, 13), st.integers(0, 32), st.integers(0, 24), FRACTIONS).map(
        lambda t: f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d} {t[3]:02d}:59:59{t[4]}".encode()),
    st.sampled_from([b"0001-01-01 00:00:00", b"9999-12-31 23:59:59", b"2021-03-14 02:30:00", b"2021-11-07 01:30:00",
                     b"2020-02-29 12:00:00", b"2019-02-29 12:00:00", b"2020-01-01T00:00:00", b"2020-01-01 00:00:60"]))


def in_range(low: int, high: int):
    return mostly(st.integers(low, high).map(lambda i: str(i).encode()), INTS)


_I = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
_LABELLED = ["enum('a','b','c,d','it''s','é','a')", "set('a','b','x','y')", "set('a,b','a','b')",
             "enum('" + "','".join(f"l{i}" for i in range(70)) + "')",
             "set('" + "','".join(f"s{i}" for i in range(64)) + "')"]
# (mysql_type, its values' strategy): every base type the codec writes a type code for, and some it does not
TYPES = st.one_of(
    st.sampled_from(list(_I)).map(lambda t: (t, in_range(-(1 << (_I[t] - 1)), (1 << (_I[t] - 1)) - 1))),
    st.sampled_from(list(_I)).map(lambda t: (t + " unsigned", in_range(0, (1 << _I[t]) - 1))),
    st.just(("year", in_range(1901, 2155))),
    st.sampled_from(["bit(1)", "bit(8)", "bit(64)", "bit", "bit(x)", "bit(0)"]).map(lambda t: (t, in_range(0, (1 << 64) - 1))),
    st.sampled_from(_LABELLED).map(lambda t: (t, in_range(0, 70))),
    st.sampled_from(["enum", "set"]).map(lambda t: (t, mostly(st.integers(-(1 << 40), 1 << 40).map(
        lambda i: str(i).encode()), BYTES))),
    st.sampled_from(["float", "double", "float unsigned"]).map(lambda t: (t, mostly(st.one_of(
        strategies._float32(), strategies._float64()), FLOATS))),
    st.sampled_from(["decimal(65,30)", "decimal(10,2)", "decimal(10)", "decimal", "decimal(a,b)",
                     "decimal(99999999999,2)", "decimal(10,-1)"]).map(lambda t: (t, DECIMALS)),
    st.sampled_from(["date"]).map(lambda t: (t, DATES)),
    st.sampled_from(["time", "time(6)"]).map(lambda t: (t, TIMES)),
    st.sampled_from(["datetime", "datetime(6)", "timestamp", "timestamp(3)"]).map(lambda t: (t, DATETIMES)),
    st.sampled_from(["varchar(20)", "char(3)", "text", "longtext", "json"]).map(lambda t: (t, mostly(UTF8, BYTES))),
    st.sampled_from(["varbinary(8)", "binary(4)", "blob", "longblob", "geometry", "point"]).map(lambda t: (t, BYTES)),
    st.sampled_from(["null", "weird type", "", "INT UNSIGNED", "roaringbitmap", "array"]).map(lambda t: (t, BYTES)),
)
FLAGS = st.sampled_from([0, int(ColumnFlag.BINARY), int(ColumnFlag.UNSIGNED), int(ColumnFlag.NULLABLE),
                         int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)])
NAMES = st.one_of(st.sampled_from(["id", "c0", "c1", "Ü", "a<b"]), TEXT)


@st.composite
def hostile_column(draw, names=NAMES):
    mysql_type, values = draw(TYPES)
    value = draw(st.none() | values)
    parsed = parse_type(mysql_type)
    right = enum_set_label(parsed, value) if parsed.labels else None
    label = draw(mostly(st.just(right), st.one_of(st.none(), TEXT, st.just(right),
                                                   st.just(value.decode("utf-8", "replace") if value else "x"))))
    return {"name": draw(names), "mysql_type": mysql_type, "flags": draw(FLAGS), "value": value, "label": label}


EXTRAS = {
    "oceanbase.version": ["1", "2", "007", "-1", "2147483648", "x", " 3"],
    "oceanbase.txind": ["B", "M", "E", "W", "X", ""],
    "oceanbase.position": ["1631500000@12", "", "é"],
    "oceanbase.sourceType": ["OB_MYSQL", "OB_ORACLE", "MYSQL"],
    "oceanbase.sourceVersion": ["4.2.1", ""],
    "oceanbase.ukIndexes": ["[[0],[1,2]]", "[]", "[[]]", "[[1.0]]", "[[true]]", "{}", "[[2147483648]]", "bad"],
    "oceanbase.tags": ['{"a":"b","c":"d","a":"e"}', "{}", '{"a":1}', "[]", "bad", '{"é":"\\u00e9"}'],
    "oceanbase.total": ["-1", "1", "3", "x", "2147483648", "-9223372036854775808", "9223372036854775808"],
    "oceanbase.index": ["-1", "0", "2"],
    "oceanbase.dataTypeNumbers": ["1,2,3", "", "x", "253", "3", "15,15", "2147483648", "1, 2"],
    "oceanbase.schemaId": ["5", "4294967296", "-1", "x"],
    "other": ["x"],
}


@st.composite
def extras(draw):
    keys = draw(st.lists(st.sampled_from(sorted(EXTRAS)), max_size=4, unique=True))
    return {k: draw(mostly(st.sampled_from(EXTRAS[k]), st.none())) for k in keys} or None


@st.composite
def hostile_events(draw):
    """A row event of random columns, names, types, labels, values, extras and positions."""
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    image = mostly(st.lists(hostile_column(), min_size=1, max_size=5, unique_by=lambda c: c["name"]),
                   st.lists(hostile_column(), min_size=1, max_size=5))
    before = draw(mostly(image, st.sampled_from([None, []]))) if op != Op.INSERT or draw(st.booleans()) else None
    after = draw(mostly(image, st.sampled_from([None, []]))) if op != Op.DELETE or draw(st.booleans()) else None
    if op == Op.UPDATE and before and draw(mostly(st.just(True), st.just(False))):
        after = copy.deepcopy(before)  # the same columns (else the codec refuses the update)
        after[0]["value"] = draw(st.none() | BYTES)
    names = [c["name"] for c in (after or before or [])]
    return new_event(
        Kind.ROW, op=draw(mostly(st.just(op), st.just("upsert"))),
        commit_ts=draw(st.none() | st.integers(-(1 << 63), (1 << 63) - 1)),
        execute_ts_ms=draw(st.none() | st.integers(-(1 << 50), 1 << 50)),
        position=draw(st.one_of(st.none(), st.just([]), st.lists(st.integers(-(1 << 63), (1 << 63) - 1),
                                                                   min_size=1, max_size=2))),
        database=draw(st.none() | TEXT), table=draw(st.none() | TEXT), tx_id=draw(st.none() | TEXT),
        key_columns=draw(st.none() | st.lists(mostly(st.sampled_from(names or ["id"]), NAMES), max_size=3)),
        before=before, after=after, extras=draw(extras()),
    )


def both(options: dict, events: list[dict], chunk: int = 3, counts=None):
    codec = get_codec("oceanbase-avro", options)
    return messages(codec, events, False), messages(codec, events, True, chunk, counts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(st.one_of(hostile_events(), strategies.events(), strategies.events(commit_ts=False)),
                         min_size=1, max_size=8), st.integers(1, 5))
def test_the_compiled_encoder_writes_the_python_codecs_bytes(options, events, chunk):
    python, compiled = both(options, events, chunk)
    assert compiled == python


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(strategies.events(), min_size=1, max_size=30))
def test_batches_of_ordinary_events_are_the_same(options, events):
    python, compiled = both(options, events, chunk=7)
    assert compiled == python


def _column(name, mysql_type, value, label=None, flags=0):
    return {"name": name, "mysql_type": mysql_type, "flags": flags, "value": value, "label": label}


# (column, the ColumnValue member `_carry` picks): every member the Python encoder writes
# (it never writes `boolean` nor StringObject, which only OMS writes)
MEMBERS = [
    (_column("n", "int", None), None),
    (_column("i", "int", b"-7"), "int"),
    (_column("y", "year", b"2024"), "int"),
    (_column("l", "bigint", b"-9223372036854775808"), "long"),
    (_column("u", "int unsigned", b"4294967295"), "long"),
    (_column("f", "float", b"0.1"), "float"),
    (_column("d", "double", b"-0.30000000000000004"), "double"),
    (_column("b", "varbinary(8)", b"\x00\xff"), "bytes"),
    (_column("s", "varchar(8)", "é€".encode()), "string"),
    (_column("x", "text", b"\xff"), "bytes"),
    (_column("dec", "decimal(10,2)", b"-12.50"), "DecimalObject"),
    (_column("dec2", "decimal(10,2)", b"12.5"), "string"),
    (_column("date", "date", b"2020-02-29"), "DateObject"),
    (_column("time", "time(6)", b"-838:59:59.000001"), "TimeObject"),
    (_column("dt", "datetime(6)", b"2020-01-02 03:04:05.123456"), "DateTimeObject"),
    (_column("dt3", "datetime(3)", b"2020-01-02 03:04:05.123"), "string"),
    (_column("ts", "timestamp", b"1970-01-01 00:00:00"), "TimestampObject"),
    (_column("bit", "bit(64)", b"18446744073709551615"), "BitObject"),
    (_column("e", "enum('a','b')", b"2", "b"), "EnumSetValue"),
    (_column("set", "set('a','b','c')", b"5", "a,c"), "EnumSetValue"),
    (_column("e0", "enum('a','b')", b"2"), "bytes"),
    (_column("el", "enum", b"b", "b"), "EnumSetValue"),
    (_column("ei", "enum", b"3"), "int"),
    (_column("vl", "varchar(4)", b"x", "x"), "EnumSetValue"),
    (_column("g", "geometry", b"\xe6\x10\x00\x00\x01\x01\x00\x00\x00"), "GeometryValue"),
]


@pytest.mark.parametrize("options", [{}, {"avro-framing": "confluent", "time-zone": "+08:00"}])
def test_every_member_is_written_by_the_compiled_path(options):
    codec = get_codec("oceanbase-avro", options)
    picked = set()
    for col, member in MEMBERS:
        value = codec._carry(col)["value"]
        name = None if value is None else value[0].removeprefix(_NS)
        assert name == member, col
        picked.add(name)
    assert len(picked) == 15  # the 17 members but boolean and StringObject
    events = [new_event(Kind.ROW, op=op, commit_ts=(1 << 40) + i, database="d", table="t", key_columns=["i"],
                        tx_id="tx", position=[i] if i % 2 else None,
                        before=None if op == Op.INSERT else [c for c, _ in MEMBERS],
                        after=None if op == Op.DELETE else [c for c, _ in MEMBERS])
              for i, op in enumerate([Op.INSERT, Op.UPDATE, Op.DELETE] * 3)]
    counts = native_encode.Counts()
    python, compiled = both(options, events, counts=counts)
    assert (counts.native, counts.python) == (len(events), 0)
    assert compiled == python and len(python) == len(events)


def test_a_zone_with_rules_leaves_timestamps_to_python():
    col = _column("ts", "timestamp", b"2021-03-14 02:30:00")  # a gap in New York
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
                      after=[col])
    counts = native_encode.Counts()
    python, compiled = both({"time-zone": "America/New_York"}, [event], counts=counts)
    assert compiled == python and (counts.native, counts.python) == (0, 1)


@pytest.mark.parametrize("event", [
    new_event(Kind.ROW, op=Op.UPDATE, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("id", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["nope"],
              after=[_column("id", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
              after=[_column("id", "int", b"1")], extras={"oceanbase.txind": "X"}),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
              after=[_column("id", "int", b"1")], extras={"oceanbase.version": "2147483648"}),
])
def test_an_event_the_codec_refuses_is_refused_alike(event):
    python, compiled = both({}, [event])
    assert python[0] == "EncodeError" and compiled == python


def test_a_record_id_past_the_last_long_is_refused_alike():
    events = [new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
                        after=[_column("id", "int", b"1")], position=position) for position in ([(1 << 63) - 1], None)]
    python, compiled = both({}, events)
    assert python[0] == "EncodeError" and compiled == python
