"""The duplicate check's identity of a lean row, computed in the decode task.

What makes two events the same change (a redelivery, not a new change) is the set of fields
`FIELDS` names. The duplicate check used to hash them in Spark (`sha2(to_json(struct(...)))`:
every value of every image written as JSON, then SHA-256, in the check's map stage: about
half of that stage's time, measured). The decode task has the rows in Arrow already, so it
hashes them there, once: 16 bytes of BLAKE2b per row over an injective encoding of the fields
(each field in `FIELDS` order: a null is the byte 0; a string or binary value is 1, its length
as 8 bytes little-endian, its bytes; an integer is 1 and its 8 bytes little-endian; a list is
1, its element count as 8 bytes little-endian, then each element so). The compiled extension
does it (`cdc_replay_native.identities`, native/cdc_replay_native/src/identity.rs); this
module's `reference` is the same encoding in plain Python, used where the extension is not
built and by the tests that compare the two. Both give the same bytes, so rows hashed by
either path in one run compare equal.

The event's inferred commit ts (Avro DELETEs without one) is not known in the decode task:
`transforms.with_inferred_ts` appends it to the identity of the events that have one."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from .contract import Kind
from .native_decode import _bytes_view, cdc_replay_native
from .schema import QUARANTINE_KIND

# the extension as native_decode loaded it (on an executor, the copy shipped with the job);
# without it, or an extension built before `identities` existed: the reference hashes (slower, the same bytes)
_native_identities = getattr(cdc_replay_native, "identities", None)

NO_EVENT_POINT = "no commit ts or position"
# the identity's fields, in order; (name, condition): the field counts only where the
# condition holds (else it is null): the event is of that kind, or has NO_EVENT_POINT
FIELDS = (
    ("kind", None), ("database", None), ("table", None), ("op", None), ("commit_ts", None), ("position", None),
    # without commit ts or position, the event time is part of the identity, and so is the
    # row's place in its message (Canal sends a binlog rows event as one message: identical
    # rows of a table without a key in one INSERT are distinct rows, not redeliveries)
    ("execute_ts_ms", NO_EVENT_POINT), ("event_index", NO_EVENT_POINT),
    ("before_schema", None), ("before_values", None), ("before_labels", None),
    ("after_schema", None), ("after_values", None), ("after_labels", None), ("ddl_query", None),
    # a watermark is per partition
    ("topic", Kind.WATERMARK), ("partition", Kind.WATERMARK), ("watermark_ts", None),
    # a record that cannot be decoded is itself twice when overlapping archive objects hold it
    ("topic", QUARANTINE_KIND), ("partition", QUARANTINE_KIND), ("offset", QUARANTINE_KIND),
    ("raw_value", QUARANTINE_KIND),
)


def _condition(batch: pa.RecordBatch, condition: str) -> pa.Array:
    if condition == NO_EVENT_POINT:
        return pc.and_(pc.is_null(batch.column("commit_ts")), pc.is_null(batch.column("position")))
    return pc.equal(batch.column("kind"), condition)


def columns(batch: pa.RecordBatch) -> list[pa.Array]:
    """The identity's fields of a lean batch as arrays, conditions applied, integers as int64."""
    out = []
    for name, condition in FIELDS:
        array = batch.column(name)
        if pa.types.is_integer(array.type) and array.type != pa.int64():
            array = pc.cast(array, pa.int64())
        if condition is not None:
            array = pc.if_else(_condition(batch, condition), array, pa.scalar(None, array.type))
        out.append(array)
    return out


def _spec(array: pa.Array) -> tuple:
    """An array as identity.rs reads it: ("b", validity, offsets, data, offset) for strings
    and binaries, ("i", validity, data, offset) for int64, ("l", validity, offsets, offset,
    child) for lists (the child as a whole, offsets pointing into it)."""
    buffers = array.buffers()  # a missing buffer (all null, or empty) is never read: an empty view
    validity = _bytes_view(buffers[0]) if array.null_count else None
    if pa.types.is_list(array.type):
        return "l", validity, _bytes_view(buffers[1]), array.offset, _spec(array.values)
    if pa.types.is_string(array.type) or pa.types.is_binary(array.type):
        return "b", validity, _bytes_view(buffers[1]), _bytes_view(buffers[2]), array.offset
    if array.type == pa.int64():
        return "i", validity, _bytes_view(buffers[1]), array.offset
    raise TypeError(f"identity: no encoding for {array.type}")


def identities(batch: pa.RecordBatch) -> pa.Array:
    """Each row's identity (16 bytes, binary), by the extension when it is built."""
    if _native_identities is None:
        return reference(batch)
    return hashed(columns(batch), batch.num_rows)


def hashed(arrays: list[pa.Array], length: int) -> pa.Array:
    """The extension's 16 bytes per row of `arrays` (strings, binaries, int64, lists of them),
    the encoding above; the extension must be built."""
    data = _native_identities([_spec(a) for a in arrays], length)
    offsets = pa.array(range(0, 16 * length + 1, 16), pa.int32())
    return pa.Array.from_buffers(pa.binary(), length, [None, offsets.buffers()[1], pa.py_buffer(data)])


def _encode(value, out: bytearray) -> None:
    if value is None:
        out.append(0)
    elif isinstance(value, (bytes, str)):
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        out.append(1)
        out += len(raw).to_bytes(8, "little")
        out += raw
    elif isinstance(value, int):
        out.append(1)
        out += value.to_bytes(8, "little", signed=True)
    else:  # a list
        out.append(1)
        out += len(value).to_bytes(8, "little")
        for item in value:
            _encode(item, out)


def reference(batch: pa.RecordBatch) -> pa.Array:
    """`identities` in plain Python, row by row: the encoding's definition."""
    fields = [a.to_pylist() for a in columns(batch)]
    hashed = []
    for row in zip(*fields):
        encoded = bytearray()
        for value in row:
            _encode(value, encoded)
        hashed.append(hashlib.blake2b(bytes(encoded), digest_size=16).digest())
    return pa.array(hashed, pa.binary())
