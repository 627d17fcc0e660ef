"""`native_decode.merge`: the compiled decoder's rows and the Python codec's (the records it
declined) in record order, as the stable sort of both by record ordinal gives them — by slices
when both are in record order, by the sort otherwise (hypothesis; no Spark)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_apps.native_decode import merge


SCHEMA = pa.schema([("ordinal", pa.int32()), ("source", pa.string()), ("n", pa.int64()),
                    ("image", pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())])))])


def _rows(ordinals: list[int], source: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "ordinal": ordinals, "source": [source] * len(ordinals), "n": list(range(len(ordinals))),
        "image": [[{"name": source, "value": str(o)}] for o in ordinals]}, schema=SCHEMA)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 3), st.booleans()), max_size=30), st.booleans())
def test_rows_of_both_paths_come_in_record_order(records, shuffled):
    """Each record is decoded by one path into 1-3 rows; rows keep their path's order within a
    record. The merged batch is the stable sort by ordinal of native rows then Python rows."""
    native, python = [], []
    for ordinal, (_, events, compiled) in enumerate(records):
        (native if compiled else python).extend([ordinal] * events)
    if shuffled and len(native) > 1:  # out of record order: the sort path
        native = native[::-1]
    native_batch, python_batch = _rows(native, "native"), _rows(python, "python")
    got = merge(native_batch, pa.array(native, pa.int32()), python_batch, python)
    both = pa.Table.from_batches([native_batch, python_batch])
    order = np.argsort(np.array(native + python, dtype=np.int64), kind="stable")
    expected = both.take(pa.array(order)).to_pylist() if python else both.to_pylist()  # no Python rows: as is
    assert pa.Table.from_batches([got]).to_pylist() == expected


def test_without_python_rows_the_native_batch_is_kept_as_is():
    native = _rows([0, 1, 1, 2], "native")
    assert merge(native, pa.array([0, 1, 1, 2], pa.int32()), None, []) is native
