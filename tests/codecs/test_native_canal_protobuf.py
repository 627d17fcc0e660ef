"""The compiled canal-protobuf decoder (native/cdc_replay_native/src/canal_protobuf.rs) against
the Python codec, the reference: golden vectors, hand-written edge cases (proto2 defaults,
NULLs, unsigned, decimals, binary as ISO-8859-1 text, ENUM/SET, temporal types, transactions,
DDL, bad and truncated bytes), a generated archive, mutated messages and hypothesis-generated
event streams decoded by both paths must give identical DECODED_ARROW_SCHEMA rows, quarantine
rows included."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.proto import canal_pb2 as pb
from spark_apps import native_decode

from .. import strategies
from . import native_paths as paths
from . import test_canal_protobuf as golden
from .test_canal_protobuf import builder_packet, column, entry, header, raw_packet, row_change, sf, vf
from .test_native_canal_json import records_batch

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

SHANGHAI = {"source-timezone": "Asia/Shanghai"}


def assert_same(values, options=None) -> list[dict]:
    return paths.assert_same("canal-protobuf", records_batch(values), options)


def native_share(values, options=None) -> tuple[int, int]:
    return paths.native_share("canal-protobuf", records_batch(values), options)


def insert(cols: list[bytes], *, head=None, batch=1) -> bytes:
    """A one-row INSERT entry of the given Column messages in a builder Packet."""
    head = head if head is not None else header(event_type=pb.INSERT, props=[("rowsCount", "1")])
    return builder_packet(batch, [entry(head, 2, row_change(pb.INSERT, [b"".join(sf(2, c) for c in cols)]))])


def one(name, value, mysql_type, sql_type=12, key=False) -> bytes:
    return column(0, sql_type, name, value, mysql_type, key=key, updated=True)


# ----------------------------------------------------------------------------- golden vectors

BAD = [value for value, _, _ in golden.test_bad_values_raise_a_decode_error_with_position.pytestmark[0].args[1]]
GOLDEN = [*golden._golden_vectors(), None, *BAD]


def test_golden_vectors_decode_the_same():
    for options in (None, SHANGHAI):
        python = assert_same(GOLDEN, options)
        kinds = [r["kind"] for r in python]
        assert {"row", "ddl", "quarantine"} <= set(kinds)
        assert kinds.count("quarantine") == len(BAD) + 1


def test_the_compiled_path_takes_rows_and_leaves_ddl_bad_and_empty_messages():
    raw_delete, inserted, transaction, ddl = golden._golden_vectors()
    heartbeat = golden.raw_packet(4, [entry(vf(11, pb.MHEARTBEAT), 4, b"")])
    assert native_share([raw_delete, inserted, transaction, ddl, heartbeat, None, *BAD]) == (3, 3 + len(BAD))
    # a TIMESTAMP column from another zone is moved by the Python codec; DATETIME needs no zone
    assert native_share([inserted], SHANGHAI) == (0, 1)
    assert native_share([insert([one("at", "2024-01-01 00:00:00", "datetime", 93)])], SHANGHAI) == (1, 0)
    # the manifest's decoder entry; keep-original-entries needs a trial encode per entry in
    # Python: the whole run takes the Python path and says why
    assert native_decode.choose("canal-protobuf", {}, "auto") == (
        "native", "compiled canal-protobuf decoder (records it cannot take exactly go to the Python codec)")
    assert native_decode.choose("canal-protobuf", {"keep-original-entries": True}, "auto") == (
        "python", "keep-original-entries: each entry is re-encoded in Python to compare")


# ----------------------------------------------------------------------------- edge cases

def _every_value() -> bytes:
    """Values at their limits: NULLs (isNull set, and isNull absent with no value), unsigned,
    decimals, floats in Java's text, binary as ISO-8859-1 text, ENUM/SET in and out of range,
    temporal types, JSON, spatial, a column without mysqlType and one without a name."""
    cols = [
        one("id", "18446744073709551615", "bigint(20) unsigned", 3, key=True),
        one("neg", "-9223372036854775808", "bigint(20)", -5), one("tiny", "255", "tinyint(3) unsigned", 5),
        one("dec", "-0.0000100", "decimal(20,7)", 3), one("d1", "1.0E-5", "double", 8), one("d2", "-0.0", "double", 8),
        one("d3", "1.7976931348623157E308", "double", 8), one("f1", "3.4028235E38", "float", 7),
        one("f2", "1.4E-45", "float", 7), one("f3", "0.1", "float unsigned", 7),
        one("raw", bytes(range(256)).decode("latin-1"), "varbinary(256)", 2004),
        one("blob", "\x00\xff", "mediumblob", 2004), one("geo", "\x01\x02", "geometry", -2),
        one("e0", "0", "enum('a','b')", 4), one("e9", "9", "ENUM('a','b')", 4), one("e2", "2", "enum('a','b')", 4),
        one("s", "3", "set('x','y')", -7), one("s9", "8", "set('x','y')", -7),
        one("ts", "2024-02-29 23:59:59.999999", "timestamp(6)", 93), one("zero", "0000-00-00 00:00:00", "timestamp", 93),
        one("tm", "-838:59:59.000000", "time(6)", 92), one("dt", "9999-12-31 23:59:59", "datetime", 93),
        one("y", "0000", "year", 12), one("bit", "18446744073709551615", "bit(64)", -7),
        one("j", '{"a": "\u4e2d", "b": null}', "json", 12), one("n", None, "varchar(8)", 12),
        one("blank", "", "varchar(8)", 12), one("untyped", "v", "", 12), one("", "nameless", "int", 4),
        one("emoji", "\U0001f600 \u00e9", "text", 2005),
        sf(3, "no_is_null") + sf(10, "int"),  # isNull and value absent: "" (proto2 default false)
    ]
    return insert(cols)


def _entries(*entries: bytes, raw=False, batch=7) -> bytes:
    return raw_packet(batch, list(entries)) if raw else builder_packet(batch, list(entries))


def _row_entry(op, rows, **head) -> bytes:
    head.setdefault("event_type", op)
    return entry(header(**head), 2, row_change(op, rows))


def _image(field, *cols) -> bytes:
    return b"".join(sf(field, c) for c in cols)


KEY = one("id", "1", "int(11)", 4, key=True)
VAL = one("v", "a", "varchar(8)")

EDGE = [
    _every_value(),
    # packet forms: magic / version / compression (NONE and proto3's 0), raw with batch 0 (Python decides)
    vf(1, 17) + vf(2, 1) + vf(3, 7) + vf(4, 1) + sf(5, vf(1, 3) + sf(2, _row_entry(pb.INSERT, [_image(2, KEY)]))),
    vf(3, 7) + vf(4, 0) + sf(5, vf(1, 3) + sf(2, _row_entry(pb.INSERT, [_image(2, KEY)]))),
    vf(1, (1 << 64) - 5) + vf(3, 7) + sf(5, sf(2, _row_entry(pb.INSERT, [_image(2, KEY)]))),
    raw_packet(0, [_row_entry(pb.INSERT, [_image(2, KEY)])]),
    vf(3, 7) + sf(5, sf(2, _row_entry(pb.INSERT, [_image(2, KEY)]))),  # no header fields, no batch id: "bare"
    builder_packet(-3, [_row_entry(pb.INSERT, [_image(2, KEY)])]),
    # transactions: BEGIN with and without thread id, END with and without xid, events outside
    _entries(entry(header(schema="", table=""), 1, vf(4, 9)), _row_entry(pb.INSERT, [_image(2, KEY), _image(2, KEY)]),
             entry(header(schema="", table=""), 3, sf(2, "x1")), _row_entry(pb.DELETE, [_image(1, KEY)]),
             entry(header(schema="", table=""), 1, b""), _row_entry(pb.UPDATE, [_image(1, KEY) + _image(2, VAL, KEY)]),
             entry(header(schema="", table=""), 3, b""), entry(vf(11, pb.MHEARTBEAT), 4, b"")),
    # annotations and GTID entries around rows; a heartbeat alone (no event: Python's empty marker)
    _entries(entry(header(event_type=pb.QUERY), 2, vf(2, pb.QUERY) + sf(11, "BEGIN")), entry(b"", 5, sf(1, "g")),
             _row_entry(pb.INSERT, [_image(2, KEY)]), entry(header(event_type=pb.XACOMMIT), 2, vf(2, pb.XACOMMIT))),
    _entries(entry(vf(11, pb.MHEARTBEAT), 4, b"")),
    # header details: props repeated (first place, last value), no logfile, offset 0, no execute time, gtid
    _entries(_row_entry(pb.INSERT, [_image(2, KEY)], props=[("a", "1"), ("rowsCount", "1"), ("a", "2"), ("", "")],
                        gtid="uuid:1-5", logfile="", offset=0, execute=0, length=0)),
    # binlog names: deep suffix, leading zeros, no suffix, non-ASCII digits, 2^63 (all but the first two: Python)
    *[_entries(_row_entry(pb.INSERT, [_image(2, KEY)], logfile=name)) for name in
      ("a.b.9223372036854775807", "mysql-bin.000", "binlog", "mysql-bin.\u0663", "mysql-bin.9223372036854775808",
       "mysql-bin.", "mysql-bin.00000000000000000000001")],
    _entries(_row_entry(pb.INSERT, [_image(2, KEY)], execute=-1)),
    _entries(_row_entry(pb.INSERT, [_image(2, KEY)], offset=-1)),
    # names: empty database or table, an empty key name
    _entries(_row_entry(pb.INSERT, [_image(2, KEY)], schema="")),
    _entries(_row_entry(pb.INSERT, [_image(2, KEY)], table="")),
    _entries(_row_entry(pb.INSERT, [_image(2, one("", "1", "int", 4, key=True))])),
    # images: INSERT with a before image (dropped, but still checked), DELETE with an after image,
    # UPDATE without before, a bad value in a dropped image, no rows (statement DML), no key
    _entries(_row_entry(pb.INSERT, [_image(1, VAL) + _image(2, KEY)])),
    _entries(_row_entry(pb.DELETE, [_image(1, KEY) + _image(2, VAL)])),
    _entries(_row_entry(pb.UPDATE, [_image(2, KEY)])),
    _entries(_row_entry(pb.INSERT, [_image(1, one("b", "\u4e2d", "blob")) + _image(2, KEY)])),
    _entries(_row_entry(pb.DELETE, [_image(1, KEY) + _image(2, one("f", "x", "float"))])),
    _entries(_row_entry(pb.INSERT, [])),
    _entries(_row_entry(pb.INSERT, [_image(2, VAL)])),
    # RowChange without eventType or with 0 (UPDATE), isDdl false explicitly, unknown event type
    _entries(entry(header(), 2, sf(12, _image(1, KEY) + _image(2, KEY)))),
    _entries(entry(header(), 2, vf(2, 0) + vf(10, 0) + sf(12, _image(1, KEY) + _image(2, KEY)))),
    _entries(entry(header(), 2, vf(2, 99) + sf(12, _image(2, KEY)))),
    _entries(entry(header(), 0, row_change(pb.INSERT, [_image(2, KEY)]))),  # entryType 0: ROWDATA
    # a SET value that is no plain integer (no label; Python decides)
    insert([KEY, one("sx", "x1", "set('x','y')", -7)]),
    # floats Python reads but the plain grammar does not (left to Python), and non-numbers
    *[insert([KEY, one("f", text, "double", 8)]) for text in (" 1.5", "1_0", "nan", "inf", "1e400", "0x1p3", "", "+.5")],
    # unknown fields, a string that is not UTF-8, a group, a field of the wrong wire type
    insert([KEY + vf(15, 1) + sf(16, b"\xff")]),
    insert([KEY[:-len(sf(10, "int(11)"))] + sf(10, b"\xc3\x28")]),
    insert([KEY + b"\x7b\x08\x01\x7c"]),  # field 15 as a group holding a varint
    insert([KEY + sf(6, b"x")]),  # isNull as a string
    # a statement annotation whose (unread) rows hold a name that is not UTF-8: the runtime refuses it
    _entries(entry(header(event_type=pb.QUERY), 2, vf(2, pb.QUERY) + sf(12, sf(2, sf(3, b"\xff") + sf(10, "int")))),
             _row_entry(pb.INSERT, [_image(2, KEY)])),
    insert([KEY + b"\x20" + b"\xff" * 9 + b"\x7f"]),  # isKey as a 10-byte varint that overflows (upb takes it)
    # DDL and a DDL flag on a row entry
    _entries(entry(header(event_type=pb.ALTER), 2, vf(2, pb.ALTER) + vf(10, 1) + sf(11, "ALTER TABLE t ADD c INT"))),
]


def test_edge_cases_decode_the_same():
    python = assert_same(EDGE)
    kinds = [r["kind"] for r in python]
    assert {"row", "ddl", "quarantine", "empty"} <= set(kinds)
    taken, left = native_share(EDGE)
    assert taken >= 20 and left >= 20


def test_every_value_is_taken_natively():
    assert native_share([_every_value()]) == (1, 0)


def test_truncated_and_garbage_bytes_decode_the_same():
    base = golden.transaction_message()
    values = [base[:n] for n in range(len(base))]
    rng = random.Random(5)
    values += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(300)]
    python = assert_same(values)
    assert sum(r["kind"] == "quarantine" for r in python) > 200


# ----------------------------------------------------------------------------- archives

def test_a_generated_archive_decodes_the_same_through_the_object_reader(tmp_path):
    out = paths.generated_archive("canal-protobuf", tmp_path, records_per_object=50)
    assert len(out["native"]) == len(out["python"]) > 300
    assert out["native"] == out["python"]
    assert {"row", "ddl", "quarantine"} <= {r["kind"] for r in out["python"]}


# ----------------------------------------------------------------------------- fuzzing

def test_mutated_messages_decode_the_same():
    """The codec tests' mutation fuzzer over the golden vectors and the edge cases: same rows
    or same quarantine rows, whichever path decodes."""
    rng = random.Random(20261125)
    seeds = [*golden._golden_vectors(), _every_value(), *EDGE[:8]]
    values = [golden._mutations(rng, seeds[n % len(seeds)]) for n in range(3000)]
    python = assert_same(values)
    kinds = [r["kind"] for r in python]
    assert kinds.count("quarantine") > 800 and kinds.count("row") > 300


def encode(events, **options) -> list[bytes]:
    codec = get_codec("canal-protobuf", {k.replace("_", "-"): str(v) for k, v in options.items()})
    return [m.value for m in codec.encode(events, topic="t", partition=0)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(strategies.events(), min_size=1, max_size=8), form=st.sampled_from(["builder", "raw"]))
def test_generated_event_streams_decode_the_same(events, form):
    assert_same(encode(events, packet_form=form))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=golden.canal_batches(), raw=st.booleans())
def test_canal_batches_with_multi_row_entries_decode_the_same(events, raw):
    if raw:
        for e in events:
            e["extras"]["canal.packet"] = "raw"
    assert_same(encode(events))


# ----------------------------------------------------------------------------- arbitrary packets
# Packets written field by field with the hand wire writer, every optional field present or
# absent, values of any text for any type: the checks the compiled path makes (and the records
# it leaves) must agree with the reference's on every combination, not only on encoder output.

TYPES = {  # type text -> its values as Canal writes them
    "int(11)": st.integers(-2**31, 2**31).map(str), "bigint(20) unsigned": st.integers(0, 2**64 - 1).map(str),
    "varchar(8)": st.text(max_size=6), "mediumtext": st.text(max_size=6), "json": st.just('{"a": [1]}'),
    "varbinary(4)": st.binary(max_size=4).map(lambda b: b.decode("latin-1")), "blob": st.just("\x00\xff"),
    "BINARY(2)": st.just("\x80a"), "geometry": st.just("\x01"),
    "float": st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda f: repr(f).upper()),
    "double": st.floats(allow_nan=False, allow_infinity=False).map(repr),
    "timestamp(3)": st.just("2024-01-01 00:00:00.500"), "datetime": st.just("0000-00-00 00:00:00"),
    "enum('a','b')": st.integers(0, 3).map(str), "ENUM('a')": st.just("1"), "set('x','y')": st.integers(-1, 4).map(str),
    "decimal(5,2)": st.just("-1.50"), "bit(8)": st.just("255"), "year": st.just("2024"), "time": st.just("-01:00:00"),
    "": st.text(max_size=3),
}
ANY_TEXT = st.one_of(st.text(max_size=6), st.floats().map(repr), st.sampled_from(["1.0E10", " 1", "nan", "x", b"\xc3("]))


def _opt(field, draw, values, varint=True, p=0.5):
    """The field (varint or string) with a drawn value, present with probability about `p`."""
    if draw(st.integers(0, 99)) >= p * 100:
        return b""
    value = draw(values)
    return vf(field, value) if varint else sf(field, value)


@st.composite
def columns(draw, field, key):
    out = b""
    for i in range(draw(st.integers(1, 4))):
        mysql_type = draw(st.sampled_from(sorted(TYPES)))
        value = draw(TYPES[mysql_type] if draw(st.integers(0, 19)) else ANY_TEXT)
        name = key if i == 0 else draw(st.sampled_from(["v", "w", "\u00c4", "", b"\xff"]) | st.text(max_size=3))
        c = (_opt(1, draw, st.integers(0, 9)) + _opt(2, draw, st.integers(-7, 2005)) + sf(3, name)
             + (vf(4, 1) if i == 0 and draw(st.integers(0, 4)) else _opt(4, draw, st.integers(0, 2), p=0.1))
             + _opt(6, draw, st.sampled_from([0, 0, 0, 1]), p=0.9) + _opt(8, draw, st.just(value), False, p=0.95)
             + _opt(10, draw, st.just(mysql_type), False, p=0.95))
        out += sf(field, c)
    return out


@st.composite
def entries(draw):
    odd = draw(st.integers(0, 9)) == 0  # one entry in ten: any header
    head = header(
        logfile=draw(st.sampled_from(["mysql-bin.000001", "", "x.10", "binlog"]) if odd else st.just("mysql-bin.000012")),
        offset=draw(st.sampled_from([0, 4, 2**40])), execute=draw(st.sampled_from([0, 1000, 1700000000000])),
        schema=draw(st.sampled_from(["shop", ""]) if odd else st.just("shop")),
        table=draw(st.sampled_from(["t", ""]) if odd else st.just("t")),
        props=draw(st.lists(st.tuples(st.sampled_from(["a", "rowsCount"]), st.text(max_size=2)), max_size=3)),
        gtid=draw(st.sampled_from(["", "u:1"])))
    kind = draw(st.sampled_from([None, 0, 1, 2, 2, 2, 2, 2, 3, 4, 5] * 3 + [9]))
    if kind in (None, 0, 2):
        event_type = draw(st.sampled_from([None, 0, 1, 2, 3, 1, 2, 3, 7, 13]))
        op = 2 if not event_type else event_type
        key = draw(st.sampled_from(["id", "ID", "id", ""]))
        rows = b""
        for _ in range(draw(st.integers(0 if odd else 1, 3))):
            before = draw(columns(1, key)) if op != 1 or odd else b""
            after = draw(columns(2, key)) if op != 3 or odd else b""
            rows += sf(12, before + after)
        store = (_opt(1, draw, st.integers(0, 5)) + (b"" if event_type is None else vf(2, event_type))
                 + _opt(10, draw, st.sampled_from([0] * 9 + [1])) + rows)
    elif kind == 1:
        store = _opt(4, draw, st.integers(0, 99))
    elif kind == 3:
        store = _opt(2, draw, st.sampled_from(["", "7"]), False)
    else:
        store = b""
    return sf(1, head) + (b"" if kind is None else vf(2, kind)) + (sf(3, store) if store else b"")


@st.composite
def packets(draw):
    body = _opt(1, draw, st.sampled_from([0, 1, 2**62, (1 << 64) - 1]), p=0.8) + b"".join(
        sf(2, e) for e in draw(st.lists(entries(), min_size=1, max_size=4)))
    return (_opt(1, draw, st.sampled_from([17, 0]), p=0.2) + _opt(2, draw, st.sampled_from([1, 2]), p=0.7)
            + vf(3, draw(st.sampled_from([7] * 9 + [3]))) + _opt(4, draw, st.sampled_from([0, 1, 2]), p=0.2) + sf(5, body))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=st.lists(packets(), min_size=1, max_size=8), zone=st.sampled_from([None, SHANGHAI]))
def test_arbitrary_packets_decode_the_same(values, zone):
    assert_same(values, zone)


# ----------------------------------------------------------------------------- archive lines

def test_archive_lines_decode_the_same_through_the_line_reader(monkeypatch, tmp_path):
    """The line reader (src/archive.rs) feeds this decoder too, positions included: a
    Kafka-record object of golden, edge and bad messages, plus a line without a key (taken: the
    key is not read), one whose key is not base64 and one with a header (left to Python)."""
    from . import test_native_shared as shared
    from .test_native_canal_json import object_bytes

    messages = [(None, value) for value in [*golden._golden_vectors(), *EDGE[:12], *BAD]]
    path = tmp_path / "canal+2+0.jsonl"
    path.write_bytes(object_bytes(shared._lines(messages)))
    rows = shared._both(monkeypatch, "canal-protobuf", str(path))
    assert {"row", "ddl", "quarantine", "empty"} <= {r["kind"] for r in rows}
    assert any(r["position"] for r in rows)
    taken, left = shared._lines_share("canal-protobuf", str(path))
    assert taken + left == len(messages) + 3 and taken >= 8
