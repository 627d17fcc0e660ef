"""The duplicate check's identity computed in the decode task (spark_apps/identity.py): the
compiled extension and the plain-Python reference give the same 16 bytes for every row
(random rows, nulls anywhere, sliced batches), the reference is the documented encoding byte
for byte, and rows that differ anywhere in the identity's fields get different identities."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_apps import identity

TYPES = {
    "kind": pa.string(), "database": pa.string(), "table": pa.string(), "op": pa.string(),
    "commit_ts": pa.int64(), "position": pa.list_(pa.int64()), "execute_ts_ms": pa.int64(),
    "before_schema": pa.int64(), "before_values": pa.list_(pa.binary()), "before_labels": pa.list_(pa.string()),
    "after_schema": pa.int64(), "after_values": pa.list_(pa.binary()), "after_labels": pa.list_(pa.string()),
    "ddl_query": pa.string(), "topic": pa.string(), "partition": pa.int32(), "watermark_ts": pa.int64(),
    "offset": pa.int64(), "raw_value": pa.binary(), "event_index": pa.int32(),
}
KINDS = ["row", "ddl", "watermark", "quarantine", "empty"]

longs = st.none() | st.integers(-(2 ** 63), 2 ** 63 - 1)
texts = st.none() | st.text(max_size=6)
blobs = st.none() | st.binary(max_size=6)
rows = st.fixed_dictionaries({
    "kind": st.sampled_from(KINDS), "database": texts, "table": texts, "op": st.none() | st.sampled_from(["insert", "update", "delete"]),
    "commit_ts": longs, "position": st.none() | st.lists(st.integers(0, 2 ** 40), max_size=3),
    "execute_ts_ms": longs, "before_schema": longs, "before_values": st.none() | st.lists(blobs, max_size=4),
    "before_labels": st.none() | st.lists(texts, max_size=4), "after_schema": longs,
    "after_values": st.none() | st.lists(blobs, max_size=4), "after_labels": st.none() | st.lists(texts, max_size=4),
    "ddl_query": texts, "topic": texts, "partition": st.none() | st.integers(-(2 ** 31), 2 ** 31 - 1),
    "watermark_ts": longs, "offset": longs, "raw_value": blobs,
    "event_index": st.none() | st.integers(0, 2 ** 31 - 1),
})


def _batch(records: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({name: [r[name] for r in records] for name in TYPES},
                                      schema=pa.schema([pa.field(n, t) for n, t in TYPES.items()]))


needs_extension = pytest.mark.skipif(identity._native_identities is None, reason="cdc_replay_native not built")


@needs_extension
@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=12), st.integers(0, 5), st.integers(0, 5))
def test_the_extension_and_the_reference_give_the_same_identities(records, head, tail):
    batch = _batch(records)
    assert identity.identities(batch).to_pylist() == identity.reference(batch).to_pylist()
    # a slice: every buffer read at its offset
    if head + tail < batch.num_rows:
        part = batch.slice(head, batch.num_rows - head - tail)
        assert identity.identities(part).to_pylist() == identity.reference(part).to_pylist()
        assert identity.identities(part).to_pylist() == identity.reference(batch).to_pylist()[head:batch.num_rows - tail]


def test_the_reference_is_the_documented_encoding():
    row = {name: None for name in TYPES}
    row.update(kind="row", database="db", commit_ts=7, after_values=[b"a", None], topic="t", partition=3)
    encoded = bytearray()
    for name, condition in identity.FIELDS:
        # every condition is false here: a row event (not a watermark or a quarantine row), with a commit ts
        value = None if condition is not None else row[name]
        if value is None:
            encoded += b"\x00"
        elif isinstance(value, int):
            encoded += b"\x01" + value.to_bytes(8, "little", signed=True)
        elif isinstance(value, str):
            encoded += b"\x01" + len(value).to_bytes(8, "little") + value.encode()
        else:  # after_values: a list of two, the second null
            encoded += b"\x01" + (2).to_bytes(8, "little") + b"\x01" + (1).to_bytes(8, "little") + b"a" + b"\x00"
    expected = hashlib.blake2b(bytes(encoded), digest_size=16).digest()
    assert identity.reference(_batch([row])).to_pylist() == [expected]
    if identity._native_identities is not None:
        assert identity.identities(_batch([row])).to_pylist() == [expected]


def test_rows_that_differ_in_where_a_null_sits_or_in_a_condition_differ():
    base = {name: None for name in TYPES}
    base.update(kind="row", database="db", table="t", op="update", commit_ts=1, after_schema=5)
    variants = [
        {**base, "after_values": [b"x", None]},
        {**base, "after_values": [None, b"x"]},
        {**base, "after_values": [b"x"]},
        {**base, "after_values": [b"x", b""]},
        {**base, "after_values": None},
        {**base, "after_values": [b"x", None], "after_labels": [None, None]},
        {**base, "after_values": [b"x", None], "topic": "other"},  # a row's topic is not its identity...
        {**base, "kind": "watermark", "topic": "a", "watermark_ts": 9},
        {**base, "kind": "watermark", "topic": "b", "watermark_ts": 9},  # ...a watermark's is
    ]
    hashed = identity.identities(_batch(variants)).to_pylist()
    assert hashed[0] == hashed[6]
    assert len(set(hashed)) == len(variants) - 1
    assert all(len(h) == 16 for h in hashed)
