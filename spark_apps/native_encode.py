"""The compiled encoders (native/cdc_replay_native: canal_json_encode.rs, open_protocol_encode.rs,
craft_encode.rs, oceanbase_avro_encode.rs, avro_encode.rs)
behind the Python codecs, for the re-encoded snapshot and topics (spark_apps/outputs/kafka_records.py).

A codec says whether it has one (`Codec.compiled_encoder_class`, `compiled_encoder`: canal-json
in TiCDC's flavour, open-protocol, craft, oceanbase-avro, TiCDC Avro, canal-protobuf); nothing
here names a protocol. Every event, compiled or not, becomes an *entry* (`compiled_entry` /
`entry`) and the codec's `frame` makes the messages of a partition's entries in order: one
message per canal-json entry; open-protocol's entries are each event's key and value JSON,
batched by the codec (max-batch-size, max-message-bytes) as its Python `encode` does; craft's
are each row's header fields and column groups, whose names get their term ids per message in
`frame`; oceanbase-avro's are each record without its id, which the codec numbers; Avro's are
each row's key and value bodies, whose schema ids `frame` registers in stream order;
canal-protobuf's are each row's entry pieces, grouped into entries and Packets by the codec.
The encoders read `position` and `tx_id` too.

The writer's row events and watermarks that its hook leaves alone (`prepare.unchanged`) go to
the extension straight from Spark's Arrow batch (`encode_batch`); the others become dicts, are
prepared and go in chunks as one Arrow batch each (`encode_each` / `encode_batch`); it writes
each row event with no Python object per value.
Every event it is not sure about (DDL, a watermark but canal-json's with its extension, text
that is not UTF-8, ...) comes back unencoded and the Python codec, which stays the reference,
encodes it: the messages are the same either way (tests/codecs/test_native_canal_json_encode.py
and test_native_open_protocol_encode.py, byte for byte).

`CDC_REPLAY_NATIVE_ENCODE` unset or `1` (default since the twentieth session): the compiled
encoder where it applies (the codec has one for its options, and the extension loads:
spark_apps/native_decode.py loads it; one that does not load is logged); `0` forces the Python
encoder, the reference. On by default because the bytes are the same (the differential tests
run both paths, the replay tests ran with both) and the writer's CPU falls 35-60% (docs/engine.md,
"The compiled canal-json encoder", "The compiled open-protocol encoder"). The driver's
setting is captured when the writer function is built, so executors follow it
(`CDC_REPLAY_DECODER` is the decoders' switch).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from cdc_codecs.base import Codec
from cdc_codecs.events import EVENT_SCHEMA

from . import native_decode

log = logging.getLogger("cdc_replay")

ENV = "CDC_REPLAY_NATIVE_ENCODE"
DEFAULT = "1"  # compiled where it applies; "0" forces the Python reference encoder
CHUNK = 4096  # events per call: an Arrow batch of a few MB

# the event fields the encoder reads
_SCHEMA = pa.schema([EVENT_SCHEMA.field(n) for n in (
    "kind", "op", "commit_ts", "position", "execute_ts_ms", "watermark_ts", "database", "table", "key_columns",
    "before", "after", "tx_id", "extras")])


def requested() -> bool:
    """$CDC_REPLAY_NATIVE_ENCODE: "1" (default) the compiled encoder where it applies, "0" the Python one."""
    value = (os.environ.get(ENV) or DEFAULT).strip()
    if value not in ("0", "1"):
        raise ValueError(f"${ENV}={value!r}: expected 0 or 1")
    return value == "1"


def compiled_encoder(codec: Codec, wanted: bool | None = None):
    """The extension's encoder for this codec and its options (`Codec.compiled_encoder`), or
    None (Python encodes)."""
    if not (requested() if wanted is None else wanted) or codec.compiled_encoder_class is None:
        return None
    module = native_decode.cdc_replay_native
    if module is None or not hasattr(module, codec.compiled_encoder_class):  # said, not silent: Python encodes
        why = native_decode.UNAVAILABLE or f"cdc_replay_native predates {codec.compiled_encoder_class}; run scripts/bootstrap"
        log.warning("the compiled %s encoder is not available (%s): the Python codec encodes "
                    "($%s=0 chooses it without this warning)", codec.name, why, ENV)
        return None
    return codec.compiled_encoder(module)


def _valid(array: pa.Array) -> memoryview:
    return memoryview(np.ascontiguousarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=np.uint8))


def _ints(array: pa.Array, dtype) -> memoryview:
    return memoryview(np.ascontiguousarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)).cast("B")


def _strs(array: pa.Array) -> tuple:
    return native_decode._binary_args(array)


def _arrays(batch: pa.RecordBatch) -> dict:
    """The batch as the extension reads it (`CanalJsonEncoder.encode` in canal_json_encode.rs)."""
    col = batch.column
    cols = {name: _strs(col(name)) for name in ("kind", "op", "database", "table", "tx_id")}
    for name in ("commit_ts", "execute_ts_ms", "watermark_ts"):
        cols[name] = _ints(col(name), np.int64)
        cols[name + "_valid"] = _valid(col(name))
    position = col("position")
    cols.update(position_valid=_valid(position), position_offsets=_ints(position.offsets, np.int32),
                position_values=_ints(position.values, np.int64))
    keys = col("key_columns")
    cols.update(key_valid=_valid(keys), key_offsets=_ints(keys.offsets, np.int32), key_names=_strs(keys.values))
    extras = col("extras")
    cols.update(extras_valid=_valid(extras), extras_offsets=_ints(extras.offsets, np.int32),
                extras_keys=_strs(extras.keys), extras_values=_strs(extras.items))
    for side in ("before", "after"):
        image = col(side)
        items = image.values
        cols.update({f"{side}_valid": _valid(image), f"{side}_offsets": _ints(image.offsets, np.int32),
                     f"{side}_name": _strs(items.field("name")), f"{side}_type": _strs(items.field("mysql_type")),
                     f"{side}_flags": _ints(items.field("flags"), np.int32), f"{side}_value": _strs(items.field("value")),
                     f"{side}_label": _strs(items.field("label"))})
    return cols


class Counts:
    """How many events each encoder wrote (nothing is dropped: the rest went to Python)."""

    def __init__(self):
        self.native = 0
        self.python = 0
        self.arrow = 0  # events encoded from the writer's Arrow batch, with no dict
        self.dicts = 0  # events turned into dicts (prepared, or declined by the extension)
        self.projected = 0  # of `arrow`: projected without dicts (the snapshot's prepare.project)


def encode_each(codec: Codec, events: Iterable[dict], *, topic: str, partition: int, encoder=None,
                counts: Counts | None = None, chunk: int = CHUNK) -> Iterator[tuple[dict, object]]:
    """(event, its entry) in order, for `codec.frame` (a list of messages for a codec whose
    messages each hold one event). With `encoder` (compiled_encoder's) the row events are
    encoded by the extension in chunks and the rest by the codec one at a time; without, by
    the codec. An EncodeError carries the event (`e.event`)."""
    counts = counts if counts is not None else Counts()
    if encoder is None:
        for event in events:
            counts.python += 1
            yield event, _python(codec, event, topic, partition)
        return
    pending: list[dict] = []
    for event in events:
        pending.append(event)
        if len(pending) >= chunk:
            yield from _chunk(codec, encoder, pending, topic, partition, counts)
            pending = []
    if pending:
        yield from _chunk(codec, encoder, pending, topic, partition, counts)


def _compiled(codec, encoder, batch: pa.RecordBatch, topic: str | pa.Array, values: bool = False) -> list:
    """The compiled encoder's entries of a batch of events (None: the event goes to Python);
    `topic`: their output topic, one or per event (Avro's schema subjects are named after it);
    `values`: the encoder's outputs as they are (`Codec.compiled_values`)."""
    cols = _arrays(batch)
    cols["topic"] = topic if isinstance(topic, str) else _strs(topic)
    encoded = encoder.encode(batch.num_rows, cols)
    return encoded if values else codec.compiled_entries(encoded)


def _chunk(codec, encoder, events, topic, partition, counts):
    entries = _compiled(codec, encoder, pa.RecordBatch.from_pylist(events, _SCHEMA), topic)
    for event, entry in zip(events, entries, strict=True):
        if entry is None:
            counts.python += 1
            yield event, _python(codec, event, topic, partition)
        else:
            counts.native += 1
            yield event, entry


def _python(codec, event, topic, partition):
    from cdc_codecs.errors import EncodeError

    try:
        return codec.entry(event, topic=topic, partition=partition)
    except EncodeError as e:
        e.event = event
        raise


def encode_batch(codec: Codec, encoder, batch: pa.RecordBatch, prepare=None, counts: Counts | None = None):
    """One Arrow batch of the writer (events with `out_topic`, `out_partition`), encoded:
    ((topic, partition), kind, event dict or None, its entry or the EncodeError) per event
    in order. The row events and watermarks `prepare` leaves alone (`prepare.unchanged`,
    decided without dicts) go to the extension straight from the batch; only the others, and
    those it declines, become dicts (`prepare` applied, as the Python path does); the extension encodes
    the prepared ones, Python what it declines. Counted in `counts` (`arrow`, `dicts`)."""
    for item in encode_batch_at(codec, encoder, batch, prepare, counts):
        yield item[1:]


def encode_batch_at(codec: Codec, encoder, batch: pa.RecordBatch, prepare=None, counts: Counts | None = None):
    """`encode_batch`'s items, each after the index of its event in `batch` (`prepare` may
    drop events: the items are not one per row)."""
    at, topics, partitions, kinds, events, entries = encoded_lists(codec, encoder, batch, prepare, counts)
    for i, event, entry in zip(at, events, entries, strict=True):
        yield i, (topics[i], partitions[i]), kinds[i], event, entry


def row_events(batch: pa.RecordBatch, *also: str) -> np.ndarray:
    """Per row of a writer batch: whether it is a row event, or an event of a kind in `also`
    (a null kind is none)."""
    import pyarrow.compute as pc

    from .contract import Kind

    kinds = pa.array([Kind.ROW, *also], batch.schema.field("kind").type)
    return pc.fill_null(pc.is_in(batch.column("kind"), value_set=kinds), False).to_numpy(zero_copy_only=False)


def encoded_lists(codec: Codec, encoder, batch: pa.RecordBatch, prepare=None, counts: Counts | None = None,
                  raw: bool = False) -> tuple:
    """`encode_batch_at`'s items as lists, for a writer that takes a batch's entries at once
    (no Python frame per event): (indexes in `batch` of the events kept, the batch's output
    topics, partitions and kinds (one per row), each kept event's dict or None, its entry or
    EncodeError). `raw` (only where `codec.compiled_values()`): a compiled event's entry is
    its message's value (bytes) in place of `[EncodedMessage(None, value)]`."""
    from cdc_codecs.errors import EncodeError

    from .contract import Kind
    from .schema import events_from_batch

    counts = counts if counts is not None else Counts()
    n = batch.num_rows
    if not n:
        return [], [], [], [], [], []
    topics, partitions, kinds = (batch.column(c).to_pylist() for c in ("out_topic", "out_partition", "kind"))
    # rows and watermarks go to the compiled encoder from the batch (canal-json's writes the
    # watermarks; the others decline them, as every compiled encoder declines DDL)
    candidates = row_events(batch, Kind.WATERMARK)
    fast = candidates.copy()
    labels = {"labels": True} if codec.encodes_labels else {}  # a label the hook fills is a change
    if prepare is not None:
        fast &= np.asarray(prepare.unchanged(batch, **labels), dtype=bool)
    values: list = [None] * n
    out_topics = batch.column("out_topic")
    idx = np.flatnonzero(fast)
    if len(idx):
        rows, row_topics = batch.select(_SCHEMA.names), out_topics
        if len(idx) < n and not np.array_equal(fast, candidates):
            rows, row_topics = rows.take(pa.array(idx)), out_topics.take(pa.array(idx))
        else:  # every row event and watermark: the whole batch, not a copy of its rows (DDL among
            idx = range(n)  # them: every compiled encoder declines it first)
        encoded = _compiled(codec, encoder, rows, row_topics, raw)
        if isinstance(idx, range):  # one entry per row, in order: the encoder's list is the batch's
            values = list(encoded)
        else:
            for i, value in zip(idx.tolist(), encoded, strict=True):
                values[i] = value
    project = getattr(prepare, "project", None)
    if project is not None:  # row events the hook changes, changed here without dicts where it can
        declined = [i for i in range(n) if kinds[i] == Kind.ROW and not fast[i]]
        index, projected = project(batch, declined, **labels)
        if index:
            counts.projected += len(index)
            encoded = _compiled(codec, encoder, projected.select(_SCHEMA.names), out_topics.take(pa.array(index)), raw)
            for i, value in zip(index, encoded, strict=True):
                values[i] = value
    slow = [i for i in range(n) if values[i] is None]
    events: dict[int, dict] = {}
    if slow:
        counts.dicts += len(slow)
        for i, event in zip(slow, events_from_batch(batch.take(pa.array(slow, pa.int64()))), strict=True):
            if prepare is not None and (event := prepare(event)) is None:
                continue
            del event["out_topic"], event["out_partition"]
            events[i] = event
        # prepared here: the extension has not seen them (it declines every event but rows)
        again = [i for i in events if not fast[i] and kinds[i] == Kind.ROW]
        for start in range(0, len(again), CHUNK):
            part = again[start:start + CHUNK]
            encoded = _compiled(codec, encoder, pa.RecordBatch.from_pylist([events[i] for i in part], _SCHEMA),
                                out_topics.take(pa.array(part, pa.int64())), raw)
            for i, value in zip(part, encoded, strict=True):
                values[i] = value
    if not slow:  # every event encoded from the batch
        counts.native += n
        counts.arrow += n
        return range(n), topics, partitions, kinds, [None] * n, values
    if len(events) == len(slow):  # none dropped by the hook: one entry per row, the dicts' encoded here
        kept = [None] * n
        for i, event in events.items():  # in the batch's order, as the loop below
            kept[i] = event
            if values[i] is not None:
                counts.native += 1
                continue
            counts.python += 1
            try:
                values[i] = _python(codec, event, topics[i], partitions[i])
            except EncodeError as e:
                values[i] = e
        counts.native += n - len(events)
        counts.arrow += n - len(events)
        return range(n), topics, partitions, kinds, kept, values
    at, kept, entries = [], [], []
    for i in range(n):
        value = values[i]
        if value is not None:
            counts.native += 1
            counts.arrow += i not in events
        elif i in events:
            counts.python += 1
            try:
                value = _python(codec, events[i], topics[i], partitions[i])
            except EncodeError as e:
                value = e
        else:
            continue
        at.append(i)
        kept.append(events.get(i))
        entries.append(value)
    return at, topics, partitions, kinds, kept, entries
