"""The compiled open-protocol encoder (native/cdc_replay_native, open_protocol_encode.rs) against
the Python codec, the reference: for the same events and options both paths give the same Kafka
messages, byte for byte (hypothesis: every MySQL type the codec writes, NULLs, hostile and
non-UTF-8 text, binary, big and out-of-range numbers, updates and deletes with old values, DDL
and resolved events between rows, every encode option including the batching limits), and
the same EncodeError where the codec refuses an event."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.errors import EncodeError
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from spark_apps import native_decode, native_encode

from .. import strategies

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "OpenProtocolEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates OpenProtocolEncoder'} "
           "(scripts/bootstrap builds it with maturin; needs cargo)")

OPTIONS = st.fixed_dictionaries({}, optional={
    "max-batch-size": st.integers(1, 5).map(str),
    "max-message-bytes": st.sampled_from(["180", "400", "1000", "5000", str(10 * 1024 * 1024)]),
    "only-output-updated-columns": st.sampled_from(["true", "false"]),
    "delete-only-output-handle-key-columns": st.sampled_from(["true", "false"]),
    "large-message-handle-compression": st.sampled_from(["none", "lz4", "snappy"]),
    "claim-check-raw-value": st.sampled_from(["true", "false"]),  # decode options: no effect here
    "tz": st.sampled_from(["", "UTC", "+08:00"]),
})

HOSTILE = st.sampled_from(['"', "\\", "<", ">", "&", "\n", "\r", "\t", "\b", "\f", "\v", "\a", "\x00", "\x1f",
                           "\x7f", "\x80", "\x9f", "\xa0", "\xad", "\xa1", "\xff", "\u0100", "\u2028", "\u2029",
                           "é", "€", "\U0001f600", "\ufffd", "'", "/", " ", "\u200b", "\u0378"])
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join)
UTF8 = TEXT.map(lambda t: t.encode("utf-8"))
INTS = st.one_of(
    st.integers(-(1 << 65), 1 << 65).map(lambda i: str(i).encode()),
    st.sampled_from([b"127", b"128", b"-128", b"-129", b"255", b"256", b"32767", b"65535", b"8388607", b"16777215",
                     b"2147483648", b"4294967295", b"9223372036854775807", b"9223372036854775808",
                     b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808", b"-0", b"007",
                     b"+5", b" 5", b"5 ", b"1_0", b"", b"-", b"1.0", b"\xd9\xa1", b"0" * 40 + b"1"]))
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).encode()),
    st.floats(width=32).map(lambda f: repr(f).encode()),
    st.sampled_from([b"0", b"-0", b"-0.0", b"1e-7", b"1E-7", b"1e21", b"9.999999e20", b"1e-6", b"0.000001",
                     b"3.4028235e38", b"3.4028236e38", b"1e39", b"1e308", b"1e-320", b"nan", b"inf", b"-inf",
                     b"1.", b".5", b"+1", b" 1", b"1_0", b"0x10", b"1e", b"1e+5", b"", b"12345678.9",
                     b"16777217", b"0.1", b"1e-45", b"-1.5e-10"]))
DECIMALS = st.one_of(
    st.integers(-(10 ** 65), 10 ** 65).map(lambda i: str(i).encode()),
    st.tuples(st.integers(-(10 ** 40), 10 ** 40), st.integers(0, 10 ** 30)).map(lambda p: f"{p[0]}.{p[1]}".encode()))
BYTES = st.one_of(st.binary(max_size=12), UTF8, st.sampled_from([b"\xc3\xa9", b"\xff\xfe", b"\xe2\x80\xa8", b"\xc2\xa0"]))

def mostly(valid, hostile):
    """`valid` nine times in ten, else `hostile` (values the codec may refuse or Python may read
    otherwise): an event with one refused value is refused whole, so refusals stay rare."""
    return st.integers(0, 9).flatmap(lambda k: hostile if k == 7 else valid)  # not 0: hypothesis favours it


def in_range(low: int, high: int):
    return mostly(st.integers(low, high).map(lambda i: str(i).encode()), INTS)


_I = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
# (mysql_type, its values' strategy): every base type the codec writes a type code for, and some it does not
TYPES = st.one_of(
    st.sampled_from(list(_I)).map(lambda t: (t, in_range(-(1 << (_I[t] - 1)), (1 << (_I[t] - 1)) - 1))),
    st.sampled_from(list(_I)).map(lambda t: (t + " unsigned", in_range(0, (1 << _I[t]) - 1))),
    st.sampled_from([("int(10) unsigned zerofill", in_range(0, 1 << 32)), ("year", in_range(1901, 2155)),
                     ("bit(64)", in_range(0, (1 << 64) - 1)), ("enum('a','b')", in_range(0, 2)),
                     ("set('x','y')", in_range(0, 3))]),
    st.just(("float", mostly(st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode()),
                             FLOATS))),
    st.sampled_from(["double", "double(10,2)", "float unsigned"]).map(lambda t: (t, mostly(
        st.floats(allow_nan=False, allow_infinity=False, max_value=3e38, min_value=-3e38).map(lambda f: repr(f).encode()),
        FLOATS))),
    st.sampled_from(["decimal(65,30)", "decimal(10,2) unsigned"]).map(lambda t: (t, DECIMALS)),
    st.sampled_from(["varchar(20)", "char(3)", "text", "tinytext", "mediumtext", "longtext", "json", "date",
                     "time(3)", "datetime(6)", "timestamp", "vector(3)", "VARCHAR(255)"]).map(
        lambda t: (t, mostly(UTF8, BYTES))),
    st.sampled_from(["varbinary(8)", "binary(4)", "blob", "tinyblob", "mediumblob", "longblob", "geometry"]).map(
        lambda t: (t, BYTES)),
    mostly(st.sampled_from([("null", BYTES)]), st.sampled_from(["point", "weird type", "", "INT UNSIGNED"]).map(
        lambda t: (t, BYTES))),
)
FLAGS = st.sampled_from([0, int(ColumnFlag.BINARY), int(ColumnFlag.UNSIGNED), int(ColumnFlag.HANDLE_KEY),
                         int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY), int(ColumnFlag.NULLABLE),
                         int(ColumnFlag.BINARY | ColumnFlag.UNSIGNED), (1 << 31) - 1, 1 << 20])
NAMES = st.one_of(st.sampled_from(["id", "c0", "c1", "ID", "Ü", "a<b"]), TEXT)


@st.composite
def hostile_column(draw, names=NAMES):
    mysql_type, values = draw(TYPES)
    return {"name": draw(names), "mysql_type": mysql_type, "flags": draw(FLAGS),
            "value": draw(st.none() | values), "label": None}


@st.composite
def hostile_events(draw):
    """A row event of random columns, names, types, flags, values, extras and timestamps."""
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    image = mostly(st.lists(hostile_column(), min_size=1, max_size=5, unique_by=lambda c: c["name"]),
                   st.lists(hostile_column(), min_size=1, max_size=5))  # a name twice: refused
    before = draw(mostly(image, st.sampled_from([None, []]))) if op != Op.INSERT or draw(st.booleans()) else None
    after = draw(mostly(image, st.sampled_from([None, []]))) if op != Op.DELETE or draw(st.booleans()) else None
    if op == Op.UPDATE and before and draw(st.booleans()):
        after = copy.deepcopy(before)  # some columns unchanged: only-output-updated-columns drops them
        after[0]["value"] = draw(st.none() | BYTES)
        if len(after) > 1 and draw(st.booleans()):
            after[1]["mysql_type"] = draw(TYPES)[0]  # same value, another type code: changed
    extras = draw(st.none() | st.dictionaries(
        st.sampled_from(["open.rid", "open.ptn", "open.ddl_action", "other"]),
        mostly(st.integers(-(10 ** 20), 10 ** 20).map(str), st.sampled_from(["", "x", "+1", " 2", "1_0", "0", "-0"])),
        max_size=3))
    return new_event(
        Kind.ROW, op=draw(mostly(st.just(op), st.just("upsert"))),
        commit_ts=draw(mostly(st.integers(0, (1 << 63) - 1), st.none())),
        execute_ts_ms=draw(st.none() | st.integers(0, 1 << 40)),
        database=draw(st.none() | TEXT), table=draw(st.none() | TEXT),
        key_columns=draw(st.none() | st.lists(NAMES, max_size=3)),
        before=before, after=after, extras=extras,
    )


def messages(codec, events: list[dict], compiled: bool, chunk: int = 3, counts=None):
    """The messages (or the EncodeError's text) of the Python codec or of the compiled path
    (`counts`: the compiled path's, as `encode_each` keeps them). Every codec's encoder test uses it."""
    try:
        if not compiled:
            out = codec.encode(copy.deepcopy(events), topic="t", partition=0)
        else:
            encoder = native_encode.compiled_encoder(codec, True)
            assert encoder is not None
            pairs = native_encode.encode_each(codec, copy.deepcopy(events), topic="t", partition=0, encoder=encoder,
                                              chunk=chunk, counts=counts)
            out = codec.frame(entry for _, entry in pairs)
        return [(m.key, m.value, m.headers) for m in out]
    except EncodeError as e:
        return "EncodeError", str(e)


def both(options: dict, events: list[dict], chunk: int = 3):
    codec = get_codec("open-protocol", options)
    return messages(codec, events, False), messages(codec, events, True, chunk)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(st.one_of(hostile_events(), strategies.events(), strategies.events(commit_ts=False)),
                         min_size=1, max_size=10), st.integers(1, 6))
def test_the_compiled_encoder_writes_the_python_codecs_bytes(options, events, chunk):
    python, compiled = both(options, events, chunk)
    assert compiled == python


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(strategies.events(), min_size=1, max_size=30))
def test_batches_of_ordinary_events_are_the_same(options, events):
    python, compiled = both(options, events, chunk=7)
    assert compiled == python


def _column(name, mysql_type, value, flags=0):
    return {"name": name, "mysql_type": mysql_type, "flags": flags, "value": value, "label": None}


def ordinary_rows(n: int) -> list[dict]:
    """Row events of plain types and UTF-8 text: nothing in them needs Python."""
    events = []
    for i in range(n):
        image = [_column("id", "bigint", str(i).encode(), int(ColumnFlag.PRIMARY_KEY)),
                 _column("name", "varchar(20)", "nämé <&> \"q\"".encode()), _column("price", "decimal(10,2)", b"12.50"),
                 _column("f", "float", b"0.1"), _column("d", "double", b"-1e-7"), _column("u", "int unsigned", b"4294967295"),
                 _column("b", "varbinary(8)", b"\x00\x01ab\xff\xc3\xa9\xca\xa4\xe2\x80\x8b\xf0\x9f\x98\x80"), _column("blob", "blob", b"\x00\xff"),
                 _column("when", "datetime(3)", b"2020-01-02 03:04:05.123"), _column("gone", "text", None),
                 _column("e", "enum('a','b')", b"2"), _column("bits", "bit(3)", b"5")]
        op = (Op.INSERT, Op.UPDATE, Op.DELETE)[i % 3]
        events.append(new_event(Kind.ROW, op=op, commit_ts=(1 << 40) + i, database="shop", table="orders",
                                key_columns=["id"], before=None if op == Op.INSERT else image,
                                after=None if op == Op.DELETE else [dict(c, value=b"1") if c["name"] == "e" else c
                                                                    for c in image],
                                extras={"open.ptn": "3"} if i % 2 else None))
    return events


@pytest.mark.parametrize("options", [{}, {"only-output-updated-columns": "true", "max-batch-size": "2"},
                                     {"delete-only-output-handle-key-columns": "true",
                                      "large-message-handle-compression": "lz4", "max-message-bytes": "2000"}])
def test_ordinary_row_events_are_encoded_by_the_compiled_path(options):
    codec = get_codec("open-protocol", options)
    events = ordinary_rows(20)
    counts = native_encode.Counts()
    encoder = native_encode.compiled_encoder(codec, True)
    list(native_encode.encode_each(codec, events, topic="t", partition=0, encoder=encoder, counts=counts))
    assert (counts.native, counts.python) == (len(events), 0)
    python, compiled = both(options, events)
    assert compiled == python and len(python) > 1


@pytest.mark.parametrize("event", [
    new_event(Kind.ROW, op=Op.UPDATE, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=None, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("id", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("id", "tinyint", b"300")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("id", "int", b"1"), _column("id", "int", b"2")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("g", "point", b"")]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("id", "int", b"1")], extras={"open.rid": "x"}),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[_column("big", "longblob", b"x" * 400)]),
])
def test_an_event_the_codec_refuses_is_refused_alike(event):
    python, compiled = both({"max-message-bytes": "300"}, [event])
    assert python[0] == "EncodeError" and compiled == python


def test_only_open_protocol_and_ticdc_canal_json_have_a_compiled_encoder():
    assert native_encode.compiled_encoder(get_codec("open-protocol", {}), True) is not None
    assert native_encode.compiled_encoder(get_codec("open-protocol", {}), False) is None
    assert native_encode.compiled_encoder(get_codec("csv", {}), True) is None


EDGE_VALUES = [b"0", b"-0", b"-0.0", b"1e-7", b"1E-7", b"1e21", b"9.999999e20", b"1e-6", b"0.000001", b"3.4028235e38",
               b"3.4028236e38", b"1e39", b"1e308", b"1e-320", b"1e-45", b"-1.5e-10", b"16777217", b"0.1", b"1e+5",
               b"123456789012345678901234567890", b"-9223372036854775808", b"18446744073709551615", b"255", b"-129",
               b"\x00\x07\x08\x0b\x0c\x1b\x7f", b"\xc2\x80\xc2\x9f\xc2\xa0\xc2\xad\xc2\xa1\xc3\xbf\xc4\x80",
               b"\xff\xfe", b"\xe2\x80\xa8\xe2\x80\xa9<>&", b"3084328.25", b"-307.5156311921", b"885.8484497070312", b'"\\', b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]


@pytest.mark.parametrize("mysql_type", ["float", "double", "tinyint", "bigint unsigned", "bit(64)", "varchar(4)",
                                        "varbinary(4)", "blob", "decimal(65,0)"])
def test_edge_values_are_written_alike(mysql_type):
    for value in EDGE_VALUES:
        event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
                          before=None, after=[_column("v", mysql_type, value)])
        python, compiled = both({}, [event])
        assert compiled == python, value


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["float", "double"]), st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(repr),
    st.tuples(st.integers(-(10 ** 9), 10 ** 9), st.integers(0, 4), st.integers(1, 12)).map(
        lambda p: f"{p[0] / 2 ** p[1]:.{p[2]}f}")))  # short binary fractions: halfway texts
def test_floats_are_written_alike(mysql_type, text):
    """Go writes a float's shortest text; where two are as near, numpy (Python's path) rounds to
    even and Rust up, so the compiled encoder leaves those to Python."""
    event = new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=[],
                      before=None, after=[_column("v", mysql_type, text.encode())])
    python, compiled = both({}, [event])
    assert compiled == python
