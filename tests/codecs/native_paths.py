"""Both decode paths of a protocol over one batch of records: the Python codec (the reference)
and the compiled decoder (spark_apps/native_decode.py), for the tests/codecs/test_native_*.py
differential tests."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_codecs import get_codec
from spark_apps import native_decode
from spark_apps.archive_io import decode_records_fn
from spark_apps.schema import DECODED_ARROW_SCHEMA


def decode(protocol: str, batch: pa.RecordBatch, mode: str, options=None) -> pa.Table:
    """The rows decode_records_fn makes of the batch with CDC_REPLAY_DECODER=`mode`."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(native_decode.ENV, mode)
        batches = list(decode_records_fn(protocol, options or {})(iter([batch])))
    table = pa.Table.from_batches(batches, schema=DECODED_ARROW_SCHEMA)
    table.validate(full=True)
    return table


def assert_same(protocol: str, batch: pa.RecordBatch, options=None) -> list[dict]:
    """Both paths' rows, required identical (quarantine rows included); the reference's rows."""
    python = decode(protocol, batch, "python", options).to_pylist()
    native = decode(protocol, batch, "native", options).to_pylist()
    assert len(native) == len(python)
    for a, b in zip(python, native):
        assert b == a
    return python


def native_share(protocol: str, batch: pa.RecordBatch, options=None) -> tuple[int, int]:
    """(records the compiled decoder took, records it left to Python)."""
    native = native_decode.NativeDecoder(get_codec(protocol, options or {}))
    source = {"topic": batch.column("topic"), "partition": batch.column("partition"),
              "offset": batch.column("offset"), "record_timestamp": batch.column("timestamp"),
              "object": batch.column("object"), "line": batch.column("line")}
    native.decode(batch.column("value"), source, batch.column("key"))
    return native.native_records, native.python_records


def generated_archive(protocol: str, root, records_per_object: int, options=None) -> dict[str, list[dict]]:
    """A generated archive of `protocol` (DDL, watermarks, bad values and bad lines) decoded
    through the object reader (`decode_objects_fn`) by each path: {"python": rows, "native": rows}."""
    from spark_apps.archive_io import decode_objects_fn
    from spark_apps.generate import generate, write_archive

    options = options or {}
    gen = generate(transactions=300, partitions=2, bad_values=3, seed=11, protocol=protocol, options=options)
    uris = write_archive(gen.records, str(root / "archive"), records_per_object=records_per_object, bad_lines=2)
    batch = pa.RecordBatch.from_pydict({"uri": [str(u) for u in uris]})
    out = {}
    for mode in ("python", "native"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(native_decode.ENV, mode)
            batches = list(decode_objects_fn(protocol, options)(iter([batch])))
        table = pa.Table.from_batches(batches, schema=DECODED_ARROW_SCHEMA)
        table.validate(full=True)
        out[mode] = table.to_pylist()
    return out
