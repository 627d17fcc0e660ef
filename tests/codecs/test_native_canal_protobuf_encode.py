"""The compiled canal-protobuf encoder (native/cdc_replay_native, canal_protobuf_encode.rs)
against the Python codec, the reference: for the same events and options both paths give the
same Kafka messages, byte for byte (hypothesis: every MySQL type, NULLs, hostile and non-UTF-8
text, binary, unsigned values at their promotion limits, updates and deletes with old values,
rows of one binlog event grouped into one entry (compiled and Python rows in one entry), batch
ids and packet forms, kept entries, header props and extras, DDL and watermarks between rows,
every encode option), and the same EncodeError where the codec refuses an event."""

from __future__ import annotations

import base64
import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.base import KafkaRecord
from cdc_codecs.events import Kind, Op, new_event
from spark_apps import native_decode, native_encode

from .. import strategies
from .test_native_open_protocol_encode import BYTES, FLOATS, INTS, NAMES, TEXT, TYPES, UTF8, messages, mostly

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "CanalProtobufEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates CanalProtobufEncoder'} "
           "(scripts/bootstrap builds it with maturin; needs cargo)")

OPTIONS = st.fixed_dictionaries({}, optional={
    "source-timezone": st.sampled_from(["UTC", "+08:00", "Asia/Shanghai"]),
    "packet-form": st.sampled_from(["builder", "raw"]),
    "keep-original-entries": st.sampled_from(["true", "false"]),  # a decode option: no effect here
})

# Canal's own type texts besides the open-protocol test's (timestamps move with the zone)
CANAL_TYPES = st.one_of(TYPES, st.sampled_from([
    ("timestamp(3)", mostly(st.just(b"2020-03-08 02:30:00.125"), BYTES)),
    ("timestamp", mostly(st.sampled_from([b"2020-01-01 00:00:00", b"0000-00-00 00:00:00"]), BYTES)),
    ("tinyint(3) unsigned", mostly(st.sampled_from([b"127", b"128", b"255", b"0128"]), INTS)),
    ("bigint(20) unsigned", mostly(st.sampled_from([b"9223372036854775807", b"9223372036854775808"]), INTS)),
    ("float", FLOATS), ("set('a','b')", st.just(b"3")), ("varchar(10) binary", BYTES), ("tinytext", UTF8),
    (None, BYTES)]))
ENTRY_B64 = base64.b64encode(b"\x10\x04\x1a\x00").decode()  # a HEARTBEAT entry's bytes


@st.composite
def column(draw):
    mysql_type, values = draw(CANAL_TYPES)
    return {"name": draw(NAMES), "mysql_type": mysql_type, "flags": draw(st.sampled_from([0, 1, 8, 11])),
            "value": draw(st.none() | values), "label": None}


EXTRAS = st.dictionaries(
    st.sampled_from(["canal.id", "canal.packet", "canal.logfileName", "canal.serverId", "canal.eventLength",
                     "canal.tableId", "canal.header.curtGtid", "canal.header.rowsCount", "canal.header.other",
                     "canal.header.curtGtidLct", "canal.header.", "canal.xid", "canal.threadId", "canal.type",
                     "canal.leading", "canal.trailing", "canal.entry", "other"]),
    mostly(st.sampled_from(["1", "7", "0", "-3", "9223372036854775807", "mysql-bin.000002", "", "a"]),
           st.sampled_from(["+1", " 2", "1_0", "x", "9223372036854775808", "-0", "007", ENTRY_B64,
                            "version=1", "raw", "magic=17,version=1,compression=1"])),
    max_size=4)


def _fix(key: str, value: str) -> str:
    """Values the codec reads as numbers or base64 (a parse error there is not an EncodeError)."""
    if key in ("canal.leading", "canal.trailing", "canal.entry"):
        return ENTRY_B64
    if key == "canal.id" and not value.lstrip("-").isdigit():
        return "5"
    if key == "canal.packet":
        return value if value in ("raw", "version=1", "magic=17,version=1,compression=1") else "version=1"
    return value


@st.composite
def canal_rows(draw):
    """A row event as a Canal decode gives it (binlog position, Canal extras), sometimes hostile."""
    op = draw(mostly(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]), st.just("upsert")))
    image = mostly(st.lists(column(), min_size=1, max_size=5), st.sampled_from([None, []]))
    before = draw(image) if op != Op.INSERT or draw(st.booleans()) else None
    after = draw(image) if op != Op.DELETE or draw(st.booleans()) else None
    if op == Op.UPDATE and before and after and draw(st.booleans()):
        after = copy.deepcopy(before)  # unchanged columns: updated false
        after[0]["value"] = draw(st.none() | BYTES)
    extras = draw(st.none() | EXTRAS.map(lambda d: {k: _fix(k, v) for k, v in d.items()}))
    return new_event(
        Kind.ROW, op=op, commit_ts=draw(st.none() | st.integers(0, (1 << 63) - 1)),
        execute_ts_ms=draw(st.none() | st.integers(0, 1 << 42)),
        position=draw(st.none() | st.sampled_from([[2, 504, 0], [1, 4, 0], [-1, 0, 0], [3, 9, 1], [1, 2]])),
        database=draw(st.none() | TEXT), table=draw(st.none() | TEXT),
        key_columns=draw(st.none() | st.lists(NAMES, max_size=3)),
        before=before, after=after, tx_id=draw(st.none() | st.sampled_from(["", "uuid:1-5", "é"])), extras=extras,
    )


@st.composite
def streams(draw):
    """Events in partition order; a row is often followed by the next rows of its binlog event
    (the same entry), some of them differing in what decides that."""
    out = []
    for event in draw(st.lists(st.one_of(canal_rows(), strategies.events()), min_size=1, max_size=8)):
        out.append(event)
        if event["kind"] != Kind.ROW or not event["position"] or len(event["position"]) != 3:
            continue
        for _ in range(draw(st.integers(0, 3))):
            follower = copy.deepcopy(out[-1])
            follower["position"][2] += 1
            image = draw(st.lists(column(), min_size=1, max_size=4))
            side = "before" if follower["op"] == Op.DELETE else "after"
            follower[side] = image
            change = draw(st.integers(0, 9))
            extras = dict(follower["extras"] or {})
            if change == 1:
                extras["canal.xid"] = "9"  # context: still the same entry
            elif change == 2:
                extras["other"] = "changed"  # another entry
            elif change == 3:
                follower["commit_ts"] = (follower["commit_ts"] or 0) + (1 << 30)
            elif change == 4:
                extras["canal.entry"] = ENTRY_B64
            elif change == 5:
                follower["key_columns"] = None
            follower["extras"] = extras or follower["extras"]
            out.append(follower)
    return out


def both(options: dict, events: list[dict], chunk: int = 3):
    codec = get_codec("canal-protobuf", options)
    return messages(codec, events, False), messages(codec, events, True, chunk)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPTIONS, streams(), st.integers(1, 6))
def test_the_compiled_encoder_writes_the_python_codecs_bytes(options, events, chunk):
    python, compiled = both(options, events, chunk)
    assert compiled == python


def _column(name, mysql_type, value):
    return {"name": name, "mysql_type": mysql_type, "flags": 0, "value": value, "label": None}


def ordinary_rows(n: int, per_entry: int = 1) -> list[dict]:
    """Canal row events of plain types (no FLOAT / DOUBLE), `per_entry` rows per binlog event."""
    events = []
    for i in range(n):
        image = [_column("id", "bigint(20) unsigned", str(i + (1 << 63) * (i % 2)).encode()),
                 _column("name", "varchar(20)", "nämé\x00\n".encode()), _column("price", "decimal(10,2)", b"12.50"),
                 _column("b", "varbinary(8)", b"\x00\x01ab\xff\xc3\xa9"), _column("blob", "blob", b"\x00\xff"),
                 _column("when", "datetime(3)", b"2020-01-02 03:04:05.123"), _column("gone", "text", None),
                 _column("t", "timestamp", b"2020-01-02 03:04:05"), _column("e", "enum('a','b')", b"2"),
                 _column("j", "json", None)]
        op = (Op.INSERT, Op.UPDATE, Op.DELETE)[i // per_entry % 3]
        events.append(new_event(
            Kind.ROW, op=op, commit_ts=(1 << 40) + i, execute_ts_ms=1_700_000_000_000 + i // per_entry,
            position=[7, 100 + i // per_entry, i % per_entry], database="shop", table="orders",
            key_columns=["id"], before=None if op == Op.INSERT else image,
            after=None if op == Op.DELETE else [dict(c, value=b"1") if c["name"] == "e" else c for c in image],
            tx_id="uuid:1-5", extras={"canal.id": str(i // per_entry // 7), "canal.serverId": "1",
                                      "canal.header.curtGtid": "uuid:1-5"}))
    return events


@pytest.mark.parametrize("options", [{}, {"packet-form": "raw"}])
def test_ordinary_row_events_are_encoded_by_the_compiled_path(options):
    codec = get_codec("canal-protobuf", options)
    events = ordinary_rows(30)
    counts = native_encode.Counts()
    encoder = native_encode.compiled_encoder(codec, True)
    list(native_encode.encode_each(codec, events, topic="t", partition=0, encoder=encoder, counts=counts))
    assert (counts.native, counts.python) == (len(events), 0)
    python, compiled = both(options, events)
    assert compiled == python and len(python) == 5  # one message per batch id


def test_rows_after_the_first_of_an_entry_go_to_python_and_join_its_entry():
    codec = get_codec("canal-protobuf", {})
    events = ordinary_rows(12, per_entry=3)
    counts = native_encode.Counts()
    encoder = native_encode.compiled_encoder(codec, True)
    list(native_encode.encode_each(codec, events, topic="t", partition=0, encoder=encoder, counts=counts))
    assert (counts.native, counts.python) == (4, 8)
    python, compiled = both({}, events)
    assert compiled == python
    decoded = [e for m in python for e in codec.decode(KafkaRecord("t", 0, 0, None, None, m[1]))]
    assert [e["position"] for e in decoded] == [e["position"] for e in events]  # 4 entries of 3 rows


@pytest.mark.parametrize("event", [
    new_event(Kind.ROW, op=Op.UPDATE, database="d", table="t", key_columns=["id"], before=None,
              after=[_column("id", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, database="d", table="t", key_columns=["id"], before=None, after=[]),
    new_event(Kind.ROW, op="upsert", database="d", table="t", key_columns=["id"], before=None,
              after=[_column("id", "int", b"1")]),
    new_event(Kind.ROW, op=Op.INSERT, database="d", table="t", key_columns=["id"], before=None,
              after=[_column("id", "varchar(3)", b"\xff")]),
    new_event(Kind.ROW, op=Op.INSERT, database="d", table="t", key_columns=["id"], before=None,
              after=[_column("id", "int", b"1")], extras={"canal.serverId": "x"}),
    new_event(Kind.ROW, op=Op.INSERT, database="d", table="t", key_columns=["id"], before=None,
              after=[_column("id", "int", b"1")], extras={"canal.tableId": "9223372036854775808"}),
])
def test_an_event_the_codec_refuses_is_refused_alike(event):
    python, compiled = both({}, [event])
    assert python[0] == "EncodeError" and compiled == python


def test_the_type_rule_covers_every_type_the_codec_writes():
    """Each kind of `compiled_encode_rule`: text, binary, left to Python (FLOAT / DOUBLE, and
    TIMESTAMP outside UTC): compiled or declined, the bytes are the reference's."""
    from cdc_codecs.canal_protobuf import compiled_encode_rule

    assert compiled_encode_rule(True)("timestamp")[4] == 0 and compiled_encode_rule(False)("timestamp")[4] == 2
    assert compiled_encode_rule(True)("blob")[4] == 1 and compiled_encode_rule(True)("double")[4] == 2
    for mysql_type in ["tinyint", "tinyint unsigned", "smallint unsigned", "mediumint unsigned", "int unsigned",
                       "bigint unsigned", "float", "double", "decimal(10,2)", "bit(8)", "date", "datetime", "timestamp",
                       "time", "year", "char(2)", "varchar(2)", "binary(2)", "varbinary(2)", "tinyblob", "blob",
                       "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext", "enum('a')", "set('a')",
                       "json", "geometry", "point", "vector(3)", None, ""]:
        for value in [None, b"0", b"127", b"128", b"4294967296", b"18446744073709551615", b"1.5", b"\xff", b"a"]:
            for zone in ("UTC", "+08:00"):
                event = new_event(Kind.ROW, op=Op.INSERT, database="d", table="t", key_columns=[], before=None,
                                  position=[1, 2, 0], after=[_column("v", mysql_type, value)])
                python, compiled = both({"source-timezone": zone}, [event])
                assert compiled == python, (mysql_type, value, zone)


def test_a_batch_id_beyond_int64_is_an_encode_error_on_both_paths():
    """A Hypothesis example (twenty-seventh session): `canal.id` 2**63 crashed the framing with
    protobuf's ValueError; Canal's batch id is a Java long, so it is an EncodeError (the
    writer's unencodable event), alike on the Python and the compiled path."""
    event = new_event(Kind.ROW, op=Op.INSERT, after=[{"name": "id", "mysql_type": "tinyint", "flags": 0,
                                                    "value": None, "label": None}],
                      extras={"canal.id": str(1 << 63)})
    python, compiled = both({}, [event])
    assert python == compiled
    assert python[0] == "EncodeError" and "outside a batch id's range" in python[1]
