"""The compiled craft decoder (native/cdc_replay_native/src/craft.rs) against the Python codec,
the reference: golden vectors, hand-written edge cases, a generated archive, mutated messages and
hypothesis-generated event streams decoded by both paths must give identical DECODED_ARROW_SCHEMA
rows, quarantine rows included."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.events import ColumnFlag, Kind, Op, column, new_event
from spark_apps import native_decode

from .. import strategies
from . import native_paths as paths
from . import test_craft as golden
from .test_native_canal_json import records_batch

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

PK = ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY


def assert_same(values, options=None) -> list[dict]:
    return paths.assert_same("craft", records_batch(values), options)


def native_share(values) -> tuple[int, int]:
    return paths.native_share("craft", records_batch(values))


def encode(events, **options) -> list[bytes]:
    codec = get_codec("craft", {k.replace("_", "-"): str(v) for k, v in options.items()})
    return [m.value for m in codec.encode(events, topic="t", partition=0)]


def row(op, before=None, after=None, *, keys=("id",), ts=449_500_000_000_000_000, database="shop", table="orders",
        extras=None):
    return new_event(Kind.ROW, op=op, commit_ts=ts, database=database, table=table, key_columns=list(keys),
                     before=before, after=after, extras=extras)


def f64(v: float) -> bytes:
    return struct.pack("<d", v)


# ----------------------------------------------------------------------------- golden vectors

GOLDEN = [*golden.SEEDS, golden.batched_message(), None, *(value for value, _, _ in golden.BAD)]


def test_golden_vectors_decode_the_same():
    python = assert_same(GOLDEN)
    assert {r["kind"] for r in python} >= {"row", "watermark", "ddl", "quarantine"}
    assert sum(r["kind"] == "quarantine" for r in python) == len(golden.BAD) + 1


def test_the_compiled_path_takes_rows_and_resolved_events_and_leaves_ddl_and_bad_messages():
    assert native_share([golden.SEED_ROW, golden.SEED_RESOLVED, golden.batched_message(),
                         golden.SEED_DDL, b"", None, golden.SEED_ROW[:-3]]) == (3, 4)


# ----------------------------------------------------------------------------- edge cases

def _values_event():
    """Every value kind at its limits: integers signed and unsigned, YEAR, BIT/ENUM/SET,
    float and double text, binary and non-UTF-8 bytes, NULLs, and partitioned tables."""
    after = [
        column("id", str((1 << 64) - 1), "bigint unsigned", PK | ColumnFlag.UNSIGNED),
        column("neg", str(-(1 << 63)), "bigint"), column("small", "-1", "tinyint"), column("z", "0", "int"),
        column("y", "-5", "year"), column("bit", str((1 << 64) - 1), "bit(64)"), column("e", "3", "enum('a','b','c')"),
        column("s", "0", "set('a')"), column("d1", "-0", "double"), column("d2", "1e300", "double"),
        column("d3", "5e-324", "double"), column("d4", "0.1", "double"), column("d5", "123456789012345680000", "double"),
        column("f1", "3.4028235e38", "float"), column("f2", "1e-45", "float"), column("f3", "0.3", "float"),
        column("f4", "-16777217", "float unsigned"), column("b", b"\xff\x00\xfe", "varbinary(3)", ColumnFlag.BINARY),
        column("t", "\u4e2d\U0001f600", "text"), column("n", None, "varchar(3)"), column("g", b"\x01", "geometry"),
        column("j", '{"a": 1}', "json"), column("dec", "-12.50", "decimal(5,2)"), column("tm", "-838:59:59", "time"),
    ]
    return row(Op.INSERT, after=after, extras={"craft.partition_id": "-7"})


EDGE_EVENTS = [
    [_values_event()],
    # UPDATE whose new image lacks the key column the old image flags: quarantined by the reference
    [row(Op.UPDATE, before=[column("id", "1", "int", PK), column("v", "a", "varchar")],
         after=[column("v", "b", "varchar")])],
    # key names: differing ASCII case, non-ASCII, and a Kelvin sign (lower-cases to ASCII k)
    [row(Op.UPDATE, before=[column("ID", "1", "int", PK)], after=[column("id", "1", "int")], keys=())],
    [row(Op.DELETE, before=[column("\u00c9t\u00e9", "1", "int", PK)], keys=("\u00c9t\u00e9",))],
    [row(Op.UPDATE, before=[column("\u212a", "1", "int", PK)], after=[column("k", "1", "int")], keys=())],
    [row(Op.INSERT, after=[column("id", "1", "int")], keys=())],  # no key at all
    [row(Op.INSERT, after=[column("id", "1", "int", PK)], database="")],
    [row(Op.INSERT, after=[column("id", "1", "int", PK)], table="")],
    [row(Op.INSERT, after=[column("id", "1", "int", PK)], database=None)],
    # batches: rows of several tables, then a watermark and a DDL alone in their messages
    [row(Op.INSERT, after=[column("id", str(i), "int", PK)], table=f"t{i % 3}", ts=(1 << 50) + i) for i in range(7)]
    + [new_event(Kind.WATERMARK, watermark_ts=(1 << 50) + 9, extras={"craft.partition_id": "12"}),
       new_event(Kind.DDL, commit_ts=(1 << 50) + 10, database="shop", table="t0", ddl_query="TRUNCATE TABLE t0",
                 ddl_type="truncate table")],
]


def _with_value(message: bytes, value: bytes, template: bytes) -> bytes:
    """The message with one value's bytes replaced by others of the same length."""
    at = message.index(template)
    return message[:at] + value + message[at + len(template):]


def test_edge_cases_decode_the_same():
    values = [v for events in EDGE_EVENTS for v in encode(events, max_batch_size=4)]
    python = assert_same(values)
    assert sum(r["kind"] == "quarantine" for r in python) == 4  # the missing key, the three without names
    assert {r["kind"] for r in python} == {"row", "watermark", "ddl", "quarantine"}


def test_non_finite_and_odd_value_bytes_decode_the_same():
    base = encode([row(Op.INSERT, after=[column("id", "7", "bigint", PK), column("d", "2.5", "double"),
                                         column("f", "1.5", "float")])])[0]
    values = [base]
    for new in (float("nan"), float("inf"), float("-inf"), 1e39, -1e39, 3.4028235677973366e38):
        values.append(_with_value(base, f64(new), f64(2.5)))
        values.append(_with_value(base, f64(new), f64(1.5)))
    values.append(_with_value(base, b"\x10\x8e", b"\x10\x0e"))  # the id's varint cut short: quarantined
    python = assert_same(values)
    assert [r["kind"] for r in python].count("quarantine") == 1
    # NaN and infinities (3 doubles, 3 floats), float32 overflow (3: the last rounds up to infinity), the varint
    assert native_share(values) == (4, 3 + 6 + 1)


# ----------------------------------------------------------------------------- archives

def test_a_generated_archive_decodes_the_same_through_the_object_reader(tmp_path):
    out = paths.generated_archive("craft", tmp_path, records_per_object=50)
    assert len(out["native"]) == len(out["python"]) > 300
    assert out["native"] == out["python"]
    assert {"row", "ddl", "watermark", "quarantine"} <= {r["kind"] for r in out["python"]}


# ----------------------------------------------------------------------------- fuzzing

def test_mutated_messages_decode_the_same():
    """Truncated, corrupted and extended golden vectors (half with the framing intact, so the
    corruption reaches headers, term ids, layouts and values): same rows or same quarantine."""
    seeds = [*golden.SEEDS, golden.batched_message(), *encode(EDGE_EVENTS[0])]
    rng = random.Random(20261125)
    values = []
    for n in range(3000):
        seed = seeds[n % len(seeds)]
        framed = n % 2 and seed[-1] < 0x80
        values.append(golden.interior_mutation(seed, rng) if framed else golden.mutations(seed, rng))
    python = assert_same(values)
    kinds = [r["kind"] for r in python]
    assert kinds.count("quarantine") > 1000 and kinds.count("row") > 100


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(strategies.events(), min_size=1, max_size=10), batch=st.integers(1, 5))
def test_generated_event_streams_decode_the_same(events, batch):
    assert_same(encode(events, max_batch_size=batch))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schema=strategies.table_schemas(min_columns=3, max_columns=12), data=st.data())
def test_one_table_batches_decode_the_same(schema, data):
    events = data.draw(st.lists(strategies.row_events(schema), min_size=2, max_size=20))
    assert_same(encode(events, max_batch_size=20))


FLOATS = st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False),
                            st.floats(width=32, allow_nan=False, allow_infinity=False)), min_size=1, max_size=40)


@settings(max_examples=100, deadline=None)
@given(pairs=FLOATS)
@example(pairs=[(2.50390625, 2.50390625), (0.5, 1e-45), (9007199254740993.0, 16777217.0), (1e23, 3.4028234663852886e38),
                (5e-324, 1.1754942e-38), (-0.0, -0.0), (123456789.125, 0.1)])
def test_float_and_double_texts_decode_the_same(pairs):
    """Shortest texts, and the exact ties between two of them, which Python renders."""
    events = [row(Op.INSERT, after=[column("id", str(i), "int", PK), column("d", repr(d), "double"),
                                    column("f", repr(f), "float")]) for i, (d, f) in enumerate(pairs)]
    assert_same(encode(events, max_batch_size=40))
