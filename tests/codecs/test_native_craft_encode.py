"""The compiled craft encoder (native/cdc_replay_native, craft_encode.rs) against the Python
codec, the reference: for the same events and options both paths give the same Kafka messages,
byte for byte (hypothesis: every MySQL type the codec writes, NULLs, hostile and non-UTF-8
text, binary, big and out-of-range numbers, updates and deletes with old values, partition ids,
DDL and resolved events between rows, the batching limits), and the same EncodeError where the
codec refuses an event. Compiled and Python-encoded rows share messages: `frame` gives the
names their term ids per message, so a message mixing both must still be the reference's."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from spark_apps import native_decode, native_encode

from .. import strategies
from .test_native_open_protocol_encode import FLAGS, NAMES, TEXT, TYPES, messages, mostly

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "CraftEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates CraftEncoder'} "
           "(scripts/bootstrap builds it with maturin; needs cargo)")

OPTIONS = st.fixed_dictionaries({}, optional={
    "max-batch-size": st.integers(1, 5).map(str),
    "max-message-bytes": st.sampled_from(["1", "120", "400", "1000", str(10 * 1024 * 1024)]),
    "tz": st.sampled_from(["", "UTC", "+08:00"]),  # a decode option: no effect here
})
PARTITION_IDS = mostly(st.integers(-(1 << 63), (1 << 63) - 1).map(str),
                       st.sampled_from(["", "x", "+1", " 2", "1_0", "0", "-0", "-1", str(1 << 64), str(-(1 << 70)),
                                        "9" * 40, "١"]))


@st.composite
def column(draw):
    mysql_type, values = draw(TYPES)
    return {"name": draw(NAMES), "mysql_type": mysql_type, "flags": draw(mostly(FLAGS, st.just(-1))),
            "value": draw(st.none() | values), "label": None}


@st.composite
def hostile_events(draw):
    """A row event of random columns (a name may repeat: craft writes it twice), names, types,
    flags, values, extras and timestamps; its op is not read."""
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    image = st.lists(column(), min_size=1, max_size=5)
    before = draw(mostly(image, st.sampled_from([None, []]))) if op != Op.INSERT or draw(st.booleans()) else None
    after = draw(mostly(image, st.sampled_from([None, []]))) if op != Op.DELETE or draw(st.booleans()) else None
    if op == Op.UPDATE and before and draw(st.booleans()):
        after = copy.deepcopy(before)
        after[0]["value"] = draw(st.none() | st.binary(max_size=6))
    extras = draw(st.none() | st.dictionaries(st.sampled_from(["craft.partition_id", "craft.ddl_action", "other"]),
                                              PARTITION_IDS, max_size=2))
    return new_event(
        Kind.ROW, op=draw(mostly(st.just(op), st.just("upsert"))),
        commit_ts=draw(mostly(st.integers(0, (1 << 63) - 1), st.sampled_from([None, -1]))),
        execute_ts_ms=draw(st.none() | st.integers(0, 1 << 40) | st.just(1 << 46)),
        database=draw(st.none() | TEXT), table=draw(st.none() | TEXT),
        key_columns=draw(st.none() | st.lists(NAMES, max_size=3)),
        before=before, after=after, extras=extras,
    )


def both(options: dict, events: list[dict], chunk: int = 3):
    codec = get_codec("craft", options)
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
    """Row events of every value kind, two tables, some partitioned: nothing in them needs Python."""
    events = []
    for i in range(n):
        image = [_column("id", "bigint", str(i).encode(), int(ColumnFlag.PRIMARY_KEY)),
                 _column("name", "varchar(20)", "nämé <&> \"q\"".encode()), _column("price", "decimal(10,2)", b"12.50"),
                 _column("f", "float", b"0.1"), _column("d", "double", b"-1e-7"), _column("u", "int unsigned", b"4294967295"),
                 _column("b", "varbinary(8)", b"\x00\x01ab\xff"), _column("blob", "blob", b"\x00\xff"),
                 _column("when", "datetime(3)", b"2020-01-02 03:04:05.123"), _column("gone", "text", None),
                 _column("e", "enum('a','b')", b"2"), _column("bits", "bit(3)", b"5"), _column("y", "year", b"2024"),
                 _column("g", "geometry", b"\x01"), _column("j", "json", b'{"a": 1}')]
        op = (Op.INSERT, Op.UPDATE, Op.DELETE)[i % 3]
        events.append(new_event(Kind.ROW, op=op, commit_ts=(1 << 40) + i, database="shop",
                                table="orders" if i % 4 else "items", key_columns=["id"],
                                before=None if op == Op.INSERT else image,
                                after=None if op == Op.DELETE else [dict(c, value=b"1") if c["name"] == "e" else c
                                                                    for c in image],
                                extras={"craft.partition_id": str(100 + i % 2)} if i % 5 else None))
    return events


@pytest.mark.parametrize("options", [{}, {"max-batch-size": "2"}, {"max-message-bytes": "700"}])
def test_ordinary_row_events_are_encoded_by_the_compiled_path(options):
    codec = get_codec("craft", options)
    events = ordinary_rows(20)
    counts = native_encode.Counts()
    encoder = native_encode.compiled_encoder(codec, True)
    list(native_encode.encode_each(codec, events, topic="t", partition=0, encoder=encoder, counts=counts))
    assert (counts.native, counts.python) == (len(events), 0)
    python, compiled = both(options, events)
    assert compiled == python and len(python) > 1


def test_a_message_mixing_compiled_and_python_rows_is_the_references():
    """A row Python encodes (its value is not plain decimal) between compiled rows of other
    tables: the message's term ids are given in `frame`, whoever wrote the rows."""
    events = ordinary_rows(6)
    events[1]["after"][0]["value"] = b" 2"  # int() reads it; the extension leaves it to Python (an update: both images)
    events[3]["database"] = "other"
    counts = native_encode.Counts()
    codec = get_codec("craft", {"max-batch-size": "16"})
    list(native_encode.encode_each(codec, events, topic="t", partition=0,
                                   encoder=native_encode.compiled_encoder(codec, True), counts=counts))
    assert (counts.native, counts.python) == (5, 1)
    python, compiled = both({"max-batch-size": "16"}, events)
    assert compiled == python and len(python) == 1


def _insert(*cols, **fields):
    event = dict(op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"], before=None,
                 after=list(cols))
    event.update(fields)
    return new_event(Kind.ROW, **event)


@pytest.mark.parametrize("event", [
    _insert(after=[]),
    _insert(_column("id", "int", b"1"), commit_ts=None),
    _insert(_column("id", "int", b"1"), commit_ts=-1),
    _insert(_column("id", "int", b"1"), commit_ts=None, execute_ts_ms=1 << 46),
    _insert(_column("id", "tinyint", b"9223372036854775808")),
    _insert(_column("id", "bigint unsigned", b"18446744073709551616")),
    _insert(_column("id", "int", b"x")),
    _insert(_column("f", "float", b"3.5e38")),
    _insert(_column("f", "double", b"one")),
    _insert(_column("id", "int", b"1", flags=-1)),
    _insert(_column("id", "int", b"1"), extras={"craft.partition_id": "p1"}),
])
def test_an_event_the_codec_refuses_is_refused_alike(event):
    python, compiled = both({}, [event])
    assert python[0] == "EncodeError" and compiled == python


def test_every_option_has_a_compiled_encoder():
    for options in ({}, {"max-batch-size": "1", "max-message-bytes": "1", "tz": "+08:00"}):
        assert native_encode.compiled_encoder(get_codec("craft", options), True) is not None
    assert native_encode.compiled_encoder(get_codec("craft", {}), False) is None


EDGE_VALUES = [b"0", b"-0", b"-0.0", b"007", b"+5", b" 5", b"1_0", b"", b"1e-7", b"1E-7", b"1e21", b"1e-320", b"1e-45",
               b"3.4028235e38", b"3.4028236e38", b"1e39", b"1e308", b"1e400", b"-1e400", b"nan", b"inf", b"16777217",
               b"0.1", b"1e+5", b"123456789012345678901234567890", b"-9223372036854775808", b"-9223372036854775809",
               b"9223372036854775807", b"18446744073709551615", b"18446744073709551616", b"-1", b"255",
               b"0" * 40 + b"1", b"\xff\xfe", b"\xd9\xa1", b"\xe2\x80\xa8"]


@pytest.mark.parametrize("mysql_type", ["float", "double", "tinyint", "bigint", "bigint unsigned", "year", "bit(64)",
                                        "enum('a')", "set('a')", "varchar(4)", "varbinary(4)", "decimal(65,0)", "null",
                                        "vector(3)", "no such type", None])
def test_edge_values_are_written_alike(mysql_type):
    for value in EDGE_VALUES:
        python, compiled = both({}, [_insert(_column("v", mysql_type, value))])
        assert compiled == python, value


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["float", "double"]), st.one_of(
    st.floats(allow_nan=False).map(repr), st.floats(width=32, allow_nan=False).map(repr),
    st.tuples(st.integers(-(10 ** 9), 10 ** 9), st.integers(0, 60)).map(lambda p: f"{p[0]}e{p[1] - 30}")))
def test_floats_are_written_alike(mysql_type, text):
    python, compiled = both({}, [_insert(_column("v", mysql_type, text.encode()))])
    assert compiled == python
