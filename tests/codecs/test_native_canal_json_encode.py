"""The compiled canal-json encoder (native/cdc_replay_native, canal_json_encode.rs) against the
Python codec, the reference: for the same events both must give the same messages, byte for
byte (hypothesis: every column type, hostile text, odd extras and timestamps), and the same
EncodeError where the codec refuses an event."""

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
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

OPTIONS = st.fixed_dictionaries({}, optional={
    "enable-tidb-extension": st.sampled_from(["true", "false"]),
    "content-compatible": st.sampled_from(["true", "false"]),
    "only-output-updated-columns": st.sampled_from(["true", "false"]),
    "large-message-handle-compression": st.sampled_from(["none", "lz4", "snappy"]),
})

HOSTILE = st.sampled_from(['"', "\\", "<", ">", "&", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028",
                           "\u2029", "é", "€", "\U0001f600", "\ufffd", "'", "/", " "])
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join)
RAW = st.one_of(
    TEXT.map(lambda t: t.encode("utf-8")),
    st.binary(max_size=12),  # invalid UTF-8 too: the compiled path leaves it to Python
    st.sampled_from([b"127", b"128", b"255", b"32767", b"32768", b"2147483648", b"9223372036854775808",
                     b"18446744073709551615", b"-1", b"007", b"+5", b" 5", b"1_0", b"", b"-", b"00000000000000000000128"]),
)
TYPES = st.one_of(st.none(), st.sampled_from([
    "int unsigned", "tinyint unsigned", "smallint(5) unsigned", "bigint unsigned", "mediumint unsigned",
    "int(10) unsigned zerofill", "varchar(20)", "char(3)", "binary(4)", "varbinary(8)", "blob", "text",
    "year", "bit(3)", "json", "enum('a','<b>')", "set('x','y')", "geometry", "point", "VARCHAR(255)",
    "decimal(10,2) unsigned", "weird type"]), TEXT)
FLAGS = st.sampled_from([0, int(ColumnFlag.BINARY), int(ColumnFlag.UNSIGNED), int(ColumnFlag.PRIMARY_KEY),
                         int(ColumnFlag.BINARY | ColumnFlag.UNSIGNED)])


# a null value too: Python's dict holds None (int(None) raises, a None ts is written `None`)
EXTRAS = st.none() | st.dictionaries(
    st.sampled_from(["canal.id", "canal.ts", "canal.type", "other"]),
    st.one_of(st.integers(-(10 ** 20), 10 ** 20).map(str), st.sampled_from(["", "x", "+1", " 2", "1_0"]), st.none()),
    max_size=3)


@st.composite
def hostile_watermarks(draw):
    """A watermark of any watermark_ts (null too), execute_ts_ms and extras."""
    return new_event(Kind.WATERMARK, watermark_ts=draw(st.none() | st.integers(-(1 << 63), (1 << 63) - 1)),
                     execute_ts_ms=draw(st.none() | st.integers(-(1 << 62), 1 << 62)), extras=draw(EXTRAS))


@st.composite
def hostile_column(draw, names):
    return {"name": draw(names), "mysql_type": draw(TYPES), "flags": draw(FLAGS),
            "value": draw(st.none() | RAW), "label": None}


@st.composite
def hostile_events(draw):
    """A row event of random columns, names, types, flags, values, extras and timestamps."""
    names = st.one_of(st.sampled_from(["id", "c0", "c1", "ID"]), TEXT)
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    before = draw(st.lists(hostile_column(names), min_size=1, max_size=5)) if op != Op.INSERT else None
    after = draw(st.lists(hostile_column(names), min_size=1, max_size=5)) if op != Op.DELETE else None
    if op == Op.UPDATE and before and after and draw(st.booleans()):
        after = copy.deepcopy(before)  # some columns unchanged: only-output-updated-columns drops them
        after[0]["value"] = draw(st.none() | RAW)
    ts = draw(st.none() | st.integers(0, (1 << 63) - 1))
    extras = draw(EXTRAS)
    return new_event(
        Kind.ROW, op=op, commit_ts=ts,
        execute_ts_ms=draw(st.none() | st.integers(-(1 << 62), 1 << 62)),
        database=draw(st.none() | TEXT), table=draw(st.none() | TEXT),
        key_columns=draw(st.none() | st.lists(names, max_size=3)),
        before=before, after=after, extras=extras,
    )


def both(options: dict, events: list[dict], chunk: int = 3):
    """(messages or the EncodeError's text) of the Python codec and of the compiled path."""
    codec = get_codec("canal-json", options)

    def python():
        return [(m.key, m.value, m.headers) for m in codec.encode(copy.deepcopy(events), topic="t", partition=0)]

    def compiled():
        encoder = native_encode.compiled_encoder(codec, True)
        assert encoder is not None
        pairs = native_encode.encode_each(codec, copy.deepcopy(events), topic="t", partition=0, encoder=encoder,
                                          chunk=chunk)
        return [(m.key, m.value, m.headers) for _, messages in pairs for m in messages]

    out = []
    for fn in (python, compiled):
        try:
            out.append(fn())
        except (EncodeError, ValueError, TypeError) as e:  # the codec's int() of a bad or null canal.id
            out.append((type(e).__name__, str(e)))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, st.lists(st.one_of(hostile_events(), hostile_watermarks(), strategies.events(),
                                   strategies.events(commit_ts=False)), min_size=1, max_size=8))
def test_the_compiled_encoder_writes_the_python_codecs_bytes(options, events):
    python, compiled = both(options, events)
    assert compiled == python


@settings(max_examples=100, deadline=None)
@given(st.lists(strategies.row_events(), min_size=1, max_size=6))
def test_ordinary_row_events_are_encoded_by_the_compiled_path(events):
    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    counts = native_encode.Counts()
    encoder = native_encode.compiled_encoder(codec, True)
    list(native_encode.encode_each(codec, events, topic="t", partition=0, encoder=encoder, counts=counts))
    assert (counts.native, counts.python) == (len(events), 0)
    assert both({"enable-tidb-extension": "true"}, events)[0] == both({"enable-tidb-extension": "true"}, events)[1]


SHAPE_NAMES = st.sampled_from(["id", "c0", "c1", "ID", "é", 'a"<b>', ""])
SHAPE_TYPES = st.sampled_from(["int unsigned", "bigint unsigned", "tinyint unsigned", "int", "varchar(20)",
                               "binary(4)", "blob", "VARCHAR(255)", None])
SHAPE_VALUES = st.none() | st.sampled_from([b"1", b"255", b"256", b"4294967296", b"18446744073709551615", b"-3",
                                            b"+5", b"x\xff", b"\xe9t\xe9", b"caf\xc3\xa9", b""])


@st.composite
def shaped_events(draw):
    """Row events whose images take a few shapes (names, type texts, flags) again and again,
    with more shapes than the compiled encoder keeps (its `Shape` cache) and shapes that differ
    from another in one column's name, type or flags only, so a row meets a shape it has just
    seen, one seen a while ago, one evicted, a near twin, or a new one; the values
    promote an unsigned sqlType or not, are NULL or not UTF-8; an update's old image has the
    new one's shape or another, some values equal (only-output-updated-columns drops them)."""
    shapes = draw(st.lists(st.lists(st.tuples(SHAPE_NAMES, SHAPE_TYPES, FLAGS), min_size=1, max_size=4),
                           min_size=1, max_size=12))
    for _ in range(draw(st.integers(0, 10))):  # near twins: one column's name, type or flags changed
        twin = list(draw(st.sampled_from(shapes)))
        j, part = draw(st.integers(0, len(twin) - 1)), draw(st.integers(0, 2))
        column = list(twin[j])
        column[part] = draw((SHAPE_NAMES, SHAPE_TYPES, FLAGS)[part])
        twin[j] = tuple(column)
        shapes.append(twin)

    def image(shape):
        return [{"name": n, "mysql_type": t, "flags": f, "value": draw(SHAPE_VALUES), "label": None}
                for n, t, f in shape]

    events = []
    for _ in range(draw(st.integers(1, 40))):
        op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
        shape = draw(st.sampled_from(shapes))
        before = image(draw(st.sampled_from([shape, *shapes]))) if op != Op.INSERT else None
        after = image(shape) if op != Op.DELETE else None
        if op == Op.UPDATE and len(before) == len(after) and draw(st.booleans()):
            for old, new in zip(before, after):
                if draw(st.booleans()):
                    new["value"] = old["value"]
        events.append(new_event(Kind.ROW, op=op, commit_ts=draw(st.integers(1 << 40, 1 << 62)), database="d",
                                table="t", key_columns=["id"], before=before, after=after))
    return events


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, shaped_events(), st.sampled_from([1, 7, 64]))
def test_rows_of_recurring_shapes_are_written_as_python_writes_them(options, events, chunk):
    python, compiled = both(options, events, chunk)
    assert compiled == python


def test_rows_of_more_shapes_than_kept_are_compiled():
    """Forty shapes in turn (more than the encoder keeps), each met again: every row compiled,
    the Python codec's bytes."""
    events = [new_event(Kind.ROW, op=Op.UPDATE, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
                        before=[{"name": f"c{k % 40}", "mysql_type": "int unsigned", "flags": 0, "value": b"7",
                                 "label": None}],
                        after=[{"name": f"c{k % 40}", "mysql_type": "int unsigned", "flags": 0,
                                "value": b"4294967296" if k % 3 else None, "label": None}])
              for k in range(120)]
    events += [new_event(Kind.WATERMARK, watermark_ts=(1 << 40) + k) for k in range(3)]
    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    counts = native_encode.Counts()
    list(native_encode.encode_each(codec, events, topic="t", partition=0,
                                   encoder=native_encode.compiled_encoder(codec, True), counts=counts))
    assert (counts.native, counts.python) == (len(events), 0)
    python, compiled = both({"enable-tidb-extension": "true"}, events, 50)
    assert compiled == python


@pytest.mark.parametrize("event", [
    new_event(Kind.ROW, op=Op.UPDATE, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[{"name": "id", "mysql_type": "int", "flags": 0, "value": b"1", "label": None}]),
    new_event(Kind.ROW, op=Op.INSERT, commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[]),
    new_event(Kind.ROW, op="upsert", commit_ts=1 << 40, database="d", table="t", key_columns=["id"],
              before=None, after=[{"name": "id", "mysql_type": "int", "flags": 0, "value": b"1", "label": None}]),
])
def test_an_event_the_codec_refuses_is_refused_alike(event):
    python, compiled = both({}, [event])
    assert python[0] == "EncodeError" and compiled == python


def test_other_flavours_and_protocols_stay_with_python():
    assert native_encode.compiled_encoder(get_codec("canal-json", {"flat-message-flavor": "canal"}), True) is None
    assert native_encode.compiled_encoder(get_codec("canal-json", {}), False) is None
    assert native_encode.compiled_encoder(get_codec("csv", {}), True) is None  # no compiled encoder


def test_the_switch(monkeypatch):
    monkeypatch.delenv(native_encode.ENV, raising=False)
    assert native_encode.compiled_encoder(get_codec("canal-json", {})) is not None  # compiled by default
    assert native_encode.compiled_encoder(get_codec("canal-json", {"flat-message-flavor": "canal"})) is None
    monkeypatch.setenv(native_encode.ENV, "")  # empty: the default
    assert native_encode.requested()
    monkeypatch.setenv(native_encode.ENV, "0")
    assert native_encode.compiled_encoder(get_codec("canal-json", {})) is None
    monkeypatch.setenv(native_encode.ENV, "1")
    assert native_encode.compiled_encoder(get_codec("canal-json", {})) is not None
    monkeypatch.setenv(native_encode.ENV, "yes")
    with pytest.raises(ValueError, match="CDC_REPLAY_NATIVE_ENCODE"):
        native_encode.requested()
