"""The Kafka-record archive target (`--target-format kafka`, an object-store output): each output
topic partition's records, re-encoded by the target codec, as gzip JSON-lines objects exactly as
a Kafka-record archive holds them (cdc_codecs.archive), the layout the replay reads back."""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from zlib_ng import zlib_ng

from cdc_codecs import get_codec
from cdc_codecs.archive import line_former, object_name
from cdc_codecs.base import Codec
from cdc_codecs.errors import EncodeError
from cdc_codecs.events import EVENT_FIELD_NAMES

from .. import native_decode, native_encode, storage
from ..contract import Kind
from ..paths import display, segment
from ..schema import WRITTEN_ARROW_SCHEMA, events_from_batch
from .base import Target, written_rows

log = logging.getLogger("cdc_replay")


class KafkaRecordArchive(Target):
    """Events placed in output topic partitions, each partition written in order by one task."""

    records = True

    @classmethod
    def chosen(cls, args) -> bool:
        from ..kafka_io import is_kafka

        return args.output_format == "kafka" and args.target_layout != "ticdc-storage" and not is_kafka(args.output)

    def writer(self) -> Callable | None:
        """What writes one output partition (None: ObjectWriter, objects under the staging area)."""
        return None

    lean_images = True  # takes events with lean images (`write`)

    def write(self, df, kind, prepare=None, table_rows=None) -> list[dict]:
        """`df`'s events, each output partition in order; events with lean images (the topics:
        `<image>_schema/_values/_labels`, spark_apps/transforms.py) are shuffled and sorted so
        and get their images back in the writer (`full_images_batch`, from `plan.schema_entries`).
        A codec that `registers_schemas` has them registered first, in reading order
        (`register_in_order`)."""
        plan = self.plan
        tasks = max(1, min(plan.partitions * 4, plan.spark.sparkContext.defaultParallelism * 2))
        entries = plan.schema_entries if "after_values" in df.columns else None
        kept = registered = None
        several = plan.partitions > 1 or "{" in (plan.args.target_topic or "")  # writer tasks with rows
        registers = several and get_codec(plan.target_protocol, plan.target_options).registers_schemas
        if registers and one_writer(table_rows) and self.writer() is None:
            # few rows: one writer task meets them in reading order and registers as it goes,
            # which is the order the pass would register them in (`register_in_order`)
            tasks, registers = 1, False
        if registers:
            from pyspark import StorageLevel

            # computed once for both passes (recomputing the topics' frame took +20% of a run)
            kept = df = df.persist(StorageLevel.DISK_ONLY)
            registered = register_in_order(df, plan.target_protocol, plan.target_options, prepare, entries)
        ordered = df.repartition(tasks, "out_topic", "out_partition").sortWithinPartitions(*WRITER_ORDER)
        fn = write_topics_fn(plan.target_protocol, plan.target_options, storage.join(plan.staging, "data"),
                             plan.args.max_records_per_object, prepare, self.writer())
        if entries is not None:
            fn = fed_lean(fn, entries)
        if registered:
            fn = with_registered(fn, plan.target_protocol, plan.target_options, registered)
        try:
            return written_rows(ordered, fn)
        finally:
            if kept is not None:
                kept.unpersist()


# at most this many rows (`table_rows`: a snapshot's live rows), a TiCDC Avro archive is written
# by one task instead of registering its schemas by a pass first (`one_writer`)
ONE_WRITER_ROWS = 200_000


def one_writer(table_rows: list[dict] | None) -> bool:
    """Whether the writer's rows (the `table_rows` counts of a snapshot; its few watermarks
    aside) are few enough for one writer task. Why: a codec that registers schemas needs, with
    several writer tasks, the registration pass before them (`register_in_order`: its own Spark
    job, its planning, the frame persisted: ~2 s at 90,000 rows whatever the size), where one
    task writes 200,000 Avro rows in about a second. One task meets the rows in WRITER_ORDER,
    so it registers each new schema where the pass would put it (its first place; a message's
    key before its value, as the pass's tie-break by subject): the same ids, the same objects.
    None (the counts unknown: topics, history) keeps the pass."""
    return table_rows is not None and sum(r["rows"] or 0 for r in table_rows) <= ONE_WRITER_ROWS


# the order of the events of an output topic partition, in which its writer task encodes them
WRITER_ORDER = ("out_topic", "out_partition", "sort_point", "sort_rank", "partition", "offset", "event_index",
                "topic", "object")


def register_in_order(df, protocol: str, options: dict, prepare=None,
                      entries: dict | None = None) -> dict[tuple[str, str], int]:
    """For a target codec that `registers_schemas` (TiCDC Avro): register every schema the
    writer of `df` will ask for, in the order a reader meets them (WRITER_ORDER: the output
    topic partitions one after the other, each in offset order), before the writer tasks
    start; {(subject, schema): id} of them, for the writers (`with_registered`). Why: writer
    tasks run concurrently, and a registry numbers new schemas as they come, so into a fresh
    registry the ids in the messages' headers would follow the tasks' timing; registered here,
    each writer only finds its schemas (the same id on every run). The schemas are found by a
    pass over `df` that encodes as the writer does (`schemas_asked_fn`: the same code decides,
    nothing is predicted: a schema depends on the values too, a NULL makes its column
    nullable) and writes nothing, in as many tasks as the writer's (each task plans every
    shape it meets again). `KafkaRecordArchive.write` calls it when more than one writer task
    has rows (one task registers in this order itself), with `df` persisted for both passes."""
    import json
    import time

    started = time.monotonic()
    first: dict[tuple[str, str], tuple] = {}
    tasks = max(1, df.sparkSession.sparkContext.defaultParallelism * 2)
    for row in df.coalesce(tasks).mapInArrow(schemas_asked_fn(protocol, options, prepare, entries),
                             "place string, subject string, schema string").collect():
        place, asked = _place_order(json.loads(row.place)), (row.subject, row.schema)
        if asked not in first or place < first[asked]:
            first[asked] = place
    codec = get_codec(protocol, options)
    ids = {asked: codec.register_schema(*asked) for asked in sorted(first, key=lambda asked: (first[asked], asked))}
    log.info("%s: %d schemas registered in reading order before the writers (%.1f s)", protocol, len(first),
             time.monotonic() - started)
    return ids


def with_registered(fn: Callable, protocol: str, options: dict, ids: dict) -> Callable:
    """The writer function `fn` with the codec's ids of the schemas `register_in_order`
    registered (`Codec.registered`): its tasks take them instead of asking the registry
    again (a directory registry's first lookup reads every id it holds)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with get_codec(protocol, options).registered(ids):
            yield from fn(batches)

    return run


def _place_order(place) -> tuple:
    """A WRITER_ORDER place as Python compares it the way Spark sorts it (nulls first)."""
    return tuple((value is not None, value) for value in place)


def schemas_asked_fn(protocol: str, options: dict, prepare=None, entries: dict | None = None) -> Callable:
    """mapInArrow function of `register_in_order`'s pass: the writer's events, in any order ->
    each schema their messages would carry, with its first place (WRITER_ORDER's values, as
    JSON), one row per schema and task. Encodes as `write_topics_fn` does (compiled from Arrow
    where it would, `prepare` applied, lean images rebuilt), frames each event's messages with
    the codec `noting_registrations` and writes nothing; an event the codec cannot encode is
    left to the writer, which says so."""
    compiled = native_encode.requested()
    columnar = prepare is None or hasattr(prepare, "unchanged")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import json

        codec = get_codec(protocol, options)
        codec.noting_registrations()
        encoder = native_encode.compiled_encoder(codec, compiled) if columnar else None
        dictionary = image_dictionary(entries) if entries is not None else None
        first: dict[tuple[str, str], tuple] = {}  # asked -> (order, place)
        for batch in batches:
            if dictionary is not None:
                batch = full_images_batch(batch, dictionary)
            places = list(zip(*(batch.column(c).to_pylist() for c in WRITER_ORDER)))
            for i, entry in _entries_at(codec, encoder, batch, prepare):
                try:
                    collections.deque(codec.frame([entry]), maxlen=0)
                except EncodeError:
                    codec.noted()
                    continue
                for asked in codec.noted():
                    known = first.get(asked)
                    if known is None or places[i] != known[1] and _place_order(places[i]) < known[0]:
                        first[asked] = (_place_order(places[i]), places[i])
        if first:
            yield pa.RecordBatch.from_pylist(
                [{"place": json.dumps(place), "subject": subject, "schema": schema}
                 for (subject, schema), (_, place) in first.items()],
                schema=pa.schema([("place", pa.string()), ("subject", pa.string()), ("schema", pa.string())]))

    return run


def _entries_at(codec, encoder, batch: pa.RecordBatch, prepare) -> Iterator[tuple[int, object]]:
    """(index in `batch`, entry) of each event the writer would encode, as it would (the
    compiled encoder from Arrow, else the Python codec); events it cannot encode are left out."""
    if encoder is not None:
        for i, _, _, _, entry in native_encode.encode_batch_at(codec, encoder, batch, prepare):
            if not isinstance(entry, EncodeError):
                yield i, entry
        return
    for i, event in enumerate(events_from_batch(batch)):
        if prepare is not None and (event := prepare(event)) is None:
            continue
        topic, partition = event.pop("out_topic"), event.pop("out_partition")
        try:
            entry = codec.entry(event, topic=topic, partition=partition)
        except EncodeError:
            codec.noted()
            continue
        yield i, entry


# the event fields and images as the writer reads them (Spark's Arrow form of EVENT_STRUCT)
_IMAGE_ARROW_TYPE = pa.list_(pa.field("element", pa.struct([
    pa.field("name", pa.string()), pa.field("mysql_type", pa.string()), pa.field("flags", pa.int32()),
    pa.field("value", pa.binary()), pa.field("label", pa.string())])))


def image_dictionary(entries: dict) -> tuple:
    """The schema dictionary {id: (names, types, flags)} as Arrow arrays, built once per writer
    task for `full_images_batch`: (ids, names, types, flags), in id order."""
    ids = sorted(entries)
    return (pa.array(ids, pa.int64()), *(pa.array([entries[sid][k] for sid in ids], pa.list_(t))
                                         for k, t in ((0, pa.string()), (1, pa.string()), (2, pa.int32()))))


def full_images_batch(batch: pa.RecordBatch, entries: dict | tuple) -> pa.RecordBatch:
    """A writer batch with lean images (`<image>_schema`, `_values`, `_labels`) as the one with
    full images Spark would have sent (transforms.full_images' rule: the column list's names,
    types and flags from the schema dictionary `entries` {id: (names, types, flags)}, or its
    `image_dictionary`, the row's values and labels; a null id is a null image), the images
    where `before`/`after` stand in EVENT_FIELD_NAMES. Columnar: no Python object per row but
    for rows with labels."""
    import numpy as np
    import pyarrow.compute as pc

    ids, lists, types, flags = image_dictionary(entries) if isinstance(entries, dict) else entries
    images = {}
    for side in ("before", "after"):
        sids = batch.column(f"{side}_schema")
        values = batch.column(f"{side}_values")
        valid = sids.is_valid()
        at = pc.index_in(sids, value_set=ids) if len(ids) else pa.nulls(len(sids), pa.int32())
        if at.null_count != sids.null_count:
            missing = pc.filter(sids, pc.and_(valid, at.is_null()))[0].as_py()
            raise ValueError(f"no column list for schema id {missing}")
        lengths = pc.fill_null(pc.list_value_length(pc.take(lists, at)), 0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        have = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
        if not np.array_equal(lengths, have):
            raise ValueError(f"{side} image: values do not match their column list")
        flat_values = pc.list_flatten(pc.if_else(valid, values, pa.scalar(None, values.type)))
        labels = batch.column(f"{side}_labels")
        if labels.null_count == len(labels):
            flat_labels = pa.nulls(int(offsets[-1]), pa.string())
        else:  # each labelled row's labels at its cells, every other cell null (no Python per row)
            labelled = np.repeat(labels.is_valid().to_numpy(zero_copy_only=False), lengths)
            at_cell = np.full(int(offsets[-1]), -1, dtype=np.int64)
            at_cell[labelled] = np.arange(int(labelled.sum()))
            flat_labels = pc.take(pc.list_flatten(labels), pa.array(at_cell, mask=at_cell < 0))
        items = pa.StructArray.from_arrays(
            [pc.list_flatten(pc.take(lists, at)), pc.list_flatten(pc.take(types, at)),
             pc.list_flatten(pc.take(flags, at)), flat_values, flat_labels],
            fields=list(_IMAGE_ARROW_TYPE.value_type))
        images[side] = pa.ListArray.from_arrays(pa.array(offsets), items, type=_IMAGE_ARROW_TYPE,
                                                mask=pc.invert(valid))
    lean = {f"{side}_{part}" for side in ("before", "after") for part in ("schema", "values", "labels")}
    columns, fields = [], []
    for name in EVENT_FIELD_NAMES:
        if name in images:
            columns.append(images[name])
            fields.append(pa.field(name, _IMAGE_ARROW_TYPE))
        else:
            columns.append(batch.column(name))
            fields.append(batch.schema.field(name))
    for name in batch.schema.names:
        if name not in lean and name not in EVENT_FIELD_NAMES:
            columns.append(batch.column(name))
            fields.append(batch.schema.field(name))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def fed_lean(fn: Callable, entries: dict) -> Callable:
    """The writer function `fn` (`write_topics_fn`) fed events with lean images: each batch's
    images rebuilt from the schema dictionary `entries` (`full_images_batch`) before `fn` reads
    it. The dictionary's Arrow arrays are built here, once (on the driver: 0.19 s for the 1M
    bench's 3,110 column lists, which every writer task paid before; unpickled in 1 ms)."""
    dictionary = image_dictionary(entries)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return fn(full_images_batch(batch, dictionary) for batch in batches)

    return run


def compiled_value_lines() -> Callable | None:
    """The extension's `value_lines` (native/cdc_replay_native/src/archive.rs: a run of value-only
    records' archive lines as one buffer, the bytes of `line_former`'s `value_line`), or None
    (Python forms each line): with the compiled encoders ($CDC_REPLAY_NATIVE_ENCODE) and an
    extension that has it."""
    if not native_encode.requested():
        return None
    return getattr(native_decode.cdc_replay_native, "value_lines", None)


class ObjectWriter:
    """Gzip objects of one output topic partition, rolled every `max_records` records.

    The lines are compressed as they come, in chunks of `CHUNK_LINES`, by one background thread
    (zlib-ng leaves Python's lock while it deflates): the encoding goes on meanwhile, a lone
    writer task uses a second core, and no object's lines are held whole. Deflate is zlib-ng's,
    level 6, gzip without mtime: ~2.4x less CPU than the stdlib's zlib for the same ratio (it was
    the lone writer task's critical path, docs/engine.md "--emit topics at 1M"). Its bytes differ
    from zlib's and depend on the cut, which is fixed (every `CHUNK_LINES` lines from the
    object's first, however the messages come), so a rerun writes the same bytes with the same
    zlib-ng (the lock pins it). The thread's work is in order; `written` waits for it (and raises
    what it raised). `add_messages` forms a run of value-only records' lines (canal-json's
    compiled values) as one buffer in the extension (`compiled_value_lines`), the same bytes."""

    CHUNK_LINES = 1000  # the cut of every object's deflate: another value gives other bytes
    PENDING = 8  # chunks queued for the thread at most; then the writer waits for the oldest

    def __init__(self, base: str, topic: str, partition: int, max_records: int):
        self.base, self.topic, self.partition, self.max_records = base, topic, partition, max_records
        self.offset = 0
        self._written: list[dict] = []
        self._pieces: list[bytes] = []  # the chunk's lines so far, each piece ending in a newline
        self._count = 0  # lines in `_pieces`
        self._first = 0
        self.fed_events = 0  # events handed to the codec (counted by the caller)
        self.fed_rows = 0
        self._events_at_flush = 0
        self._rows_at_flush = 0
        self._pool = None
        self._pending: collections.deque = collections.deque()
        self._object: dict | None = None  # the object being compressed: its compressor and parts
        self._line = line_former(topic, partition)  # format_record's line, no timestamp
        self._value_lines = compiled_value_lines()

    def add(self, key, value, headers) -> None:
        self._pieces += (self._line(self.offset, key, value, headers), b"\n")
        self._count += 1
        self.offset += 1
        if self.offset - self._first >= self.max_records:
            self.flush()
        elif self._count >= self.CHUNK_LINES:
            self._compress()

    def add_messages(self, messages: list, events: Sequence[int], rows: Sequence[int]) -> None:
        """`add` of each message (EncodedMessage, or bytes: the value of a message with no key
        and no headers) in order, the lines formatted a chunk at a time; `events` / `rows`: per
        message, the events / row events fed so far in this call (an object counts the events
        fed until its last message, as `add` after each message)."""
        line, value_line, compiled, done = self._line, self._line.value_line, self._value_lines, 0
        fed_events, fed_rows = self.fed_events, self.fed_rows
        while done < len(messages):
            room = min(self.max_records - (self.offset - self._first), self.CHUNK_LINES - self._count)
            part, offset = messages[done:done + room], self.offset
            if compiled is not None:  # runs of values as one buffer each, the other messages' lines between
                at = 0
                for j in [j for j, m in enumerate(part) if m.__class__ is not bytes] + [len(part)]:
                    if j > at:
                        self._pieces.append(compiled(line.head, offset + at, part[at:j]))
                    if j < len(part):
                        m = part[j]
                        self._pieces += (line(offset + j, m.key, m.value, m.headers), b"\n")
                    at = j + 1
            else:
                lines = [value_line(offset + j, m) if m.__class__ is bytes else line(offset + j, m.key, m.value, m.headers)
                         for j, m in enumerate(part)]
                lines.append(b"")
                self._pieces.append(b"\n".join(lines))
            self._count += len(part)
            self.offset += len(part)
            done += len(part)
            self.fed_events, self.fed_rows = fed_events + events[done - 1], fed_rows + rows[done - 1]
            if self.offset - self._first >= self.max_records:
                self.flush()
            elif self._count >= self.CHUNK_LINES:
                self._compress()

    def _submit(self, work: Callable) -> None:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gzip")
        self._pending.append(self._pool.submit(work))
        while len(self._pending) > self.PENDING:
            self._pending.popleft().result()

    def _compress(self) -> None:
        """The lines so far, handed to the thread for the current object's compressor."""
        if not self._count:
            return
        if self._object is None:
            self._object = {"zlib": zlib_ng.compressobj(6, zlib_ng.DEFLATED, 31), "parts": []}  # gzip, no mtime
        data = self._pieces[0] if len(self._pieces) == 1 else b"".join(self._pieces)
        target = self._object
        self._pieces, self._count = [], 0
        self._submit(lambda: target["parts"].append(target["zlib"].compress(data)))

    def flush(self) -> None:
        """Ends the current object (written by the thread, after its last chunk)."""
        self._compress()
        if self._object is None:
            return
        target = self._object
        uri = storage.join(self.base, object_name(segment(self.topic), self.partition, self._first))
        row = {
            "uri": uri, "topic": self.topic, "partition": self.partition, "first_offset": self._first,
            "last_offset": self.offset - 1, "records": self.offset - self._first,
            "events": self.fed_events - self._events_at_flush, "rows": self.fed_rows - self._rows_at_flush,
        }

        def finish():
            data = b"".join(target["parts"]) + target["zlib"].flush()
            storage.write_bytes(uri, data)
            self._written.append({**row, "bytes": len(data)})

        self._submit(finish)
        self._object = None
        self._first = self.offset
        self._events_at_flush, self._rows_at_flush = self.fed_events, self.fed_rows

    @property
    def written(self) -> list[dict]:
        """The objects written, once the thread has finished them."""
        while self._pending:
            self._pending.popleft().result()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        return self._written


def write_topics_fn(
    protocol: str,
    options: dict[str, str],
    base: str,
    max_records: int = 100_000,
    prepare: Callable[[dict], dict | None] | None = None,
    writer: Callable | None = None,
) -> Callable:
    """mapInArrow function: events sorted by (out_topic, out_partition, order) -> the
    objects written, one WRITTEN_ARROW_SCHEMA row each. A whole output partition must be in
    one Spark partition (offsets are assigned here, from 0). `writer(base, topic, partition,
    max_records)` replaces the object writer (spark_apps.outputs.kafka produces to a broker).
    With the compiled encoder and a `prepare` that says which rows it leaves alone
    (`prepare.unchanged`, spark_apps.snapshot), those rows go from the Arrow batch to the
    encoder with no dict (native_encode.encode_batch). The function's `counts` attribute holds
    its last call's counts, which the log reports (in-process callers: tests, the bench).
    Events with lean images go through `fed_lean`."""

    make_writer = writer
    compiled = native_encode.requested()  # the driver's switch, captured for the executors
    columnar = prepare is None or hasattr(prepare, "unchanged")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        codec = get_codec(protocol, options)
        encoder = native_encode.compiled_encoder(codec, compiled)
        counts = run.counts = native_encode.Counts()

        def stream():
            for batch in batches:
                counts.dicts += batch.num_rows
                for event in events_from_batch(batch):
                    if prepare is not None:
                        event = prepare(event)
                        if event is None:
                            continue
                    yield (event.pop("out_topic"), event.pop("out_partition")), event

        if encoder is not None and columnar and type(codec).frame is Codec.frame:
            written = by_batch(codec, encoder, batches, counts)
        elif encoder is not None and columnar:
            items = (item for batch in batches
                     for item in native_encode.encode_batch(codec, encoder, batch, prepare, counts))
            written = by_event(codec, encoder, items, counts)
        else:
            written = by_event(codec, encoder, stream(), counts)
        if encoder is not None:
            log.info("%s encoded: %d events compiled, %d by the Python codec; %d events encoded from the "
                     "Arrow batch, %d turned into dicts", protocol, counts.native, counts.python, counts.arrow, counts.dicts)
        if written:
            yield pa.RecordBatch.from_pylist(written, schema=WRITTEN_ARROW_SCHEMA)

    def finished(writer, written: list) -> None:
        writer.flush()
        written.extend(writer.written)
        log.info("wrote %s/%d: %d records", display(writer.topic), writer.partition, writer.offset)

    def by_batch(codec, encoder, batches, counts) -> list[dict]:
        """A codec whose entries are each one event's messages (`Codec.frame` flattens them:
        canal-json): each batch's entries go to the writer a run of one output partition at a
        time (`native_encode.encoded_lists`, `add_messages`), with no Python frame per event."""
        written, writer = [], None
        raw = codec.compiled_values() and hasattr(make_writer or ObjectWriter, "add_messages")
        for batch in batches:
            at, topics, partitions, kinds, events, entries = native_encode.encoded_lists(
                codec, encoder, batch, prepare, counts, raw)
            row_event = native_encode.row_events(batch) if len(at) else None
            start = 0
            while start < len(at):
                key = (topics[at[start]], partitions[at[start]])
                last = (topics[at[-1]], partitions[at[-1]])
                end = len(at) if last == key else start + 1  # sorted: all of one partition when the last is
                while end < len(at) and (topics[at[end]], partitions[at[end]]) == key:
                    end += 1
                if writer is None or (writer.topic, writer.partition) != key:
                    if writer is not None:
                        finished(writer, written)
                    writer = (make_writer or ObjectWriter)(base, key[0], key[1], max_records)
                run, kept = entries[start:end], at[start:end]
                is_row = row_event[kept.start:kept.stop] if isinstance(kept, range) else row_event[kept]
                # raw: each compiled entry is its message's value; the others (DDL, watermarks, errors) are
                odd = [j for j, entry in enumerate(run) if entry.__class__ is not bytes] if raw else range(len(run))
                for j in odd:
                    if isinstance(run[j], EncodeError):
                        raise _unencodable(protocol, run[j], getattr(run[j], "event", None) or events[start + j]) from run[j]
                if raw and all(len(run[j]) == 1 for j in odd):  # one message each, put in its event's place
                    messages = list(run)
                    for j in odd:
                        messages[j] = run[j][0]
                else:
                    if raw:  # Python-encoded events of several messages among compiled values
                        run = [(entry,) if entry.__class__ is bytes else entry for entry in run]
                    messages = [message for entry in run for message in entry]
                # per message, the run's events and row events fed when the codec's frame yields it
                if len(messages) == len(run):  # one message per event: the counts run along
                    events_at, rows_at = range(1, len(run) + 1), is_row.cumsum().tolist()
                else:
                    events_at, rows_at, fed, fed_rows = [], [], 0, 0
                    for entry, row in zip(run, is_row.tolist(), strict=True):
                        fed, fed_rows = fed + 1, fed_rows + row
                        events_at += [fed] * len(entry)
                        rows_at += [fed_rows] * len(entry)
                before = writer.fed_events, writer.fed_rows
                if hasattr(writer, "add_messages"):
                    writer.add_messages(messages, events_at, rows_at)
                else:
                    for message, e, r in zip(messages, events_at, rows_at, strict=True):
                        writer.fed_events, writer.fed_rows = before[0] + e, before[1] + r
                        writer.add(message.key, message.value, message.headers)
                writer.fed_events, writer.fed_rows = before[0] + len(run), before[1] + int(is_row.sum())
                start = end
        if writer is not None:
            finished(writer, written)
        return written

    def by_event(codec, encoder, items, counts) -> list[dict]:
        written = []
        for (topic, partition), group in itertools.groupby(items, key=lambda item: item[0]):
            writer = (make_writer or ObjectWriter)(base, topic, partition, max_records)

            last = {}

            def fed(group=group, writer=writer):
                for _, event in group:
                    writer.fed_events += 1
                    writer.fed_rows += event["kind"] == Kind.ROW
                    counts.python += 1
                    last["event"] = event
                    yield event

            try:
                if encoder is None:
                    for message in codec.encode(fed(), topic=topic, partition=partition):
                        writer.add(message.key, message.value, message.headers)
                else:  # entries, compiled or not, framed by the codec and counted as it takes them
                    if columnar:  # encoded per batch (native_encode.encode_batch)
                        pairs = ((event, kind, entry) for _, kind, event, entry in group)
                    else:
                        pairs = ((event, event["kind"], entry) for event, entry in native_encode.encode_each(
                            codec, (event for _, event in group), topic=topic, partition=partition, encoder=encoder,
                            counts=counts))

                    def entries(pairs=pairs, writer=writer):
                        for event, kind, entry in pairs:
                            if event is not None:
                                last["event"] = event
                            if isinstance(entry, EncodeError):
                                raise entry
                            writer.fed_events += 1
                            writer.fed_rows += kind == Kind.ROW
                            yield entry

                    for message in codec.frame(entries()):
                        writer.add(message.key, message.value, message.headers)
            except EncodeError as e:
                raise _unencodable(protocol, e, getattr(e, "event", None) or last.get("event")) from e
            finished(writer, written)
        return written

    return run


def _unencodable(protocol: str, e: Exception, event: dict | None) -> EncodeError:
    """The writer's error for an event its codec cannot encode, naming the event."""
    event = event or {}
    return EncodeError(
        f"UNENCODABLE {protocol} cannot encode the {event.get('op') or event.get('kind')} event of "
        f"{display(event.get('database'))}.{display(event.get('table'))} read at {display(event.get('topic'))}/"
        f"{event.get('partition')} offset {event.get('offset')} (object {event.get('object')}): {e}")
