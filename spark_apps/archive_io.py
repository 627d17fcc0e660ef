"""The thin I/O shell around the transforms: read-and-decode archive objects, and write the
quarantine beside the output, both as Arrow batch functions for `mapInArrow`.

Decoding happens in executors, object by object, batch by batch: the driver only lists
object names. The outputs are written by spark_apps.outputs.
"""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from cdc_codecs import get_codec
from cdc_codecs.base import KafkaRecord, decode_record
from cdc_codecs.errors import DecodeError
from cdc_codecs.events import Op

from . import layouts, limits, masking, native_decode, storage
from .contract import Kind
from .layouts.base import long_line_row, quarantine_row
from .schema import DECODED_ARROW_SCHEMA, WRITTEN_ARROW_SCHEMA

log = logging.getLogger("cdc_replay")

# records per compiled call and per Arrow batch: fewer, larger batches cut the per-batch Python
# work (lean rows, statistics, runs); 16,384 measured ~6% less decode CPU than 4,096
BATCH_ROWS = 16384


_quarantine_row = quarantine_row


def _is_name(value) -> bool:
    return isinstance(value, str) and value != ""


def event_problem(event: dict) -> str | None:
    """Why a decoded event cannot be replayed (it decodes, but makes no sense), or None.
    Checked per record in the executor, so one such message is quarantined instead of
    failing a later stage of the whole run."""
    kind = event.get("kind")
    for name in ("database", "table", "ddl_query", "op"):
        if event.get(name) is not None and not isinstance(event[name], str):
            return f"{name} is not a string ({type(event[name]).__name__})"
    if kind == Kind.ROW:
        if not _is_name(event.get("database")) or not _is_name(event.get("table")):
            return "a row change without its database and table names"
        op = event.get("op")
        if op not in (Op.INSERT, Op.UPDATE, Op.DELETE):
            return f"unknown row operation {op!r}"
        image_name = "before" if op == Op.DELETE else "after"
        image = event.get(image_name)
        if not image:
            return f"{op} without the row ({image_name} image is empty)"
        try:  # one pass over the image that carries the key (events are many: keep this cheap)
            names = {c["name"].lower() for c in image}
        except (TypeError, AttributeError, KeyError):
            return f"{image_name} image has a column without a name"
        keys = event.get("key_columns")
        if keys is not None:
            if not isinstance(keys, list | tuple) or not all(_is_name(k) for k in keys):
                return "key column names are not strings"
            missing = [k for k in keys if k.lower() not in names]
            if missing:
                return f"key column {missing[0]!r} is not in the row (columns: {', '.join(sorted(names))})"
    elif kind == Kind.DDL:
        if not _is_name(event.get("ddl_query")) or not event["ddl_query"].strip():
            return "a DDL event without its statement"
    elif kind == Kind.WATERMARK:
        if not isinstance(event.get("watermark_ts"), int):
            return "a watermark without its commit ts"
    else:
        return f"unknown event kind {kind!r}"
    return None


def decode_one(codec, record: KafkaRecord, line_no: int | None) -> list[dict]:
    """Rows for one record: its events, a quarantine row, or an `empty` marker for a record
    that carries no change (e.g. a heartbeat), so records are always counted."""
    problem = limits.message_problem(record.value, codec.name)
    if problem is not None:  # over a limit: not decoded (spark_apps.limits)
        return [_quarantine_row(record.object, line_no, limits.STAGE, problem, coordinates={
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "record_timestamp": record.timestamp})]
    try:
        events = decode_record(codec, record)
    except DecodeError as e:
        return [_quarantine_row(record.object, line_no, "decode", str(e), record)]
    except Exception as e:  # noqa: BLE001 - never fatal: the record is quarantined, named
        return [_quarantine_row(record.object, line_no, "decode", f"{codec.name}: {type(e).__name__}: {e}", record)]
    if not events:
        return [{"kind": Kind.EMPTY, "object": record.object, "line": line_no, "event_index": 0,
                 "topic": record.topic, "partition": record.partition, "offset": record.offset}]
    for event in events:
        problem = event_problem(event)
        if problem is not None:
            return [_quarantine_row(record.object, line_no, "decode", f"{codec.name}: {problem} at object "
                                    f"{record.object}, topic {record.topic}, partition {record.partition}, "
                                    f"offset {record.offset}", record)]
        event["line"] = line_no
    return events


def decode_object(codec, uri: str, params: str | None = None,
                  defer: bool = False) -> Iterator[tuple[KafkaRecord | None, list[dict]]]:
    """(record, rows of DECODED_ARROW_SCHEMA) for one planned archive object (`params`: its
    layout plan item, default a Kafka-record object): its events, a quarantine row for every
    record the layout could not read or whose value is not the protocol, and for damage (a
    corrupt or truncated object: every complete record before it is kept). `defer`: records
    come with their line number instead of rows, for the compiled decoder to take in batches."""
    line_no = 0
    last = None
    try:
        for entry in layouts.read(uri, params or _KAFKA_RECORDS):
            if isinstance(entry, dict):  # a row the layout made itself (quarantine, watermark)
                line_no = entry.get("line") or line_no
                yield None, [entry]
                continue
            record, line_no = entry
            last = record
            yield record, (line_no if defer else decode_one(codec, record, line_no))
    except Exception as e:  # noqa: BLE001 - damaged or unreadable: one quarantine row says where
        yield None, [_broken_object_row(uri, e, line_no, last)]


def _broken_object_row(uri: str, e: Exception, line_no: int, last) -> dict:
    """The quarantine row of an object that breaks after line `line_no` (`last`: the last good
    record, anything with topic, partition and offset): damage (a corrupt or truncated `.gz`,
    with the incomplete line), or unreadable (a malformed container, an I/O error)."""
    if isinstance(e, storage.DamagedObject):
        after = (f"; last good record {last.topic}/{last.partition} offset {last.offset}" if last
                 else "; no complete record before it")
        over = isinstance(e, storage.OverLimit)
        return _quarantine_row(
            uri, line_no + 1, limits.STAGE if over else "archive",
            f"object {'stopped' if over else 'damaged'} at byte {e.byte_offset} after line {line_no}: {e.reason}{after}",
            raw_line=e.partial or None,
            coordinates={"topic": last.topic, "partition": last.partition} if last else None,
            details={"byte_offset": e.byte_offset, "last_good_offset": last.offset if last else None})
    return _quarantine_row(uri, line_no + 1, "archive", f"object unreadable after line {line_no}: {type(e).__name__}: {e}")


_KAFKA_RECORDS = '{"layout":"kafka-records"}'


def _batches(groups: Iterable[tuple[KafkaRecord | None, list[dict]]], schema: pa.Schema,
             size: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the rows; a record whose rows Arrow refuses (a value of the wrong
    type) becomes a quarantine row instead of failing the task."""
    chunk: list = []
    rows = 0
    for group in groups:
        chunk.append(group)
        rows += len(group[1])
        if rows >= size:
            yield _to_batch(chunk, schema)
            chunk, rows = [], 0
    if chunk:
        yield _to_batch(chunk, schema)


def _to_batch(chunk: list, schema: pa.Schema) -> pa.RecordBatch:
    try:
        return pa.RecordBatch.from_pylist([row for _, rows in chunk for row in rows], schema=schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    good = []
    for record, rows in chunk:
        try:
            pa.RecordBatch.from_pylist(rows, schema=schema)
            good.extend(rows)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            first = rows[0] if rows else {}
            where = (f"topic {record.topic}, partition {record.partition}, offset {record.offset}" if record
                     else f"line {first.get('line')}")
            good.append(_quarantine_row(first.get("object"), first.get("line"), "decode",
                                        f"a field has a value of the wrong type ({type(e).__name__}: {e}) at object "
                                        f"{first.get('object')}, {where}", record,
                                        raw_line=first.get("raw_line") if record is None else None))
    return pa.RecordBatch.from_pylist(good, schema=schema)


def read_object(uri: str) -> bytes:
    """How codecs read objects their messages point to (claim-check): our storage layer."""
    return storage.read_bytes(storage.normalize(uri))


def decode_objects_fn(protocol: str, options: dict[str, str]) -> Callable:
    """mapInArrow function: batches of (uri, size[, params]) -> batches of DECODED_ARROW_SCHEMA
    (`params`: the layout plan item's JSON; without it, Kafka-record objects). The driver's
    S3 read settings (chunk size, attempts) travel with the function to the tasks."""
    read_settings = storage.settings()

    mode = native_decode.requested_mode()  # the driver's choice reaches the executors

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(read_settings)
        codec = get_codec(protocol, options, read_object=read_object)
        native = native_decode.decoder_for(codec, mode)
        for batch in batches:
            uris = batch.column("uri").to_pylist()
            params = batch.column("params").to_pylist() if "params" in batch.schema.names else [None] * len(uris)
            for uri, item_params in zip(uris, params):
                started = time.monotonic()
                count = 0

                def counted(groups):
                    nonlocal count
                    for group in groups:
                        count += len(group[1])
                        yield group

                if native is not None:
                    before = native.native_records, native.python_records
                    lines = _native_lines(native, item_params)
                    outs = (_native_lines_object(native, codec, uri, *lines) if lines
                            else _native_object(native, codec, uri, item_params))
                    for out in outs:
                        out = limits.within_limits(out, codec.name)
                        count += out.num_rows
                        yield out
                    log.info("decoded %s: %d rows in %.1fs (records: %d by the compiled decoder, %d by the "
                             "Python codec)", uri, count, time.monotonic() - started,
                             native.native_records - before[0], native.python_records - before[1])
                    continue
                for out in _batches(counted(decode_object(codec, uri, item_params)), DECODED_ARROW_SCHEMA):
                    yield limits.within_limits(out, codec.name)
                log.info("decoded %s: %d rows in %.1fs", uri, count, time.monotonic() - started)

    return run


def _native_object(native, codec, uri: str, params: str | None) -> Iterator[pa.RecordBatch]:
    """One archive object through the compiled decoder, BATCH_ROWS records at a time; rows the
    layout makes itself (quarantine, damage) keep their place between the records."""
    pending: list[tuple[KafkaRecord, int | None]] = []
    made: list = []
    for record, rows in decode_object(codec, uri, params, defer=True):
        if record is None:
            if pending:
                yield _native_records(native, codec, pending)
                pending = []
            made.append((None, rows))
            continue
        if made:
            yield _to_batch(made, DECODED_ARROW_SCHEMA)
            made = []
        pending.append((record, rows))
        if len(pending) >= BATCH_ROWS:
            yield _native_records(native, codec, pending)
            pending = []
    if pending:
        yield _native_records(native, codec, pending)
    if made:
        yield _to_batch(made, DECODED_ARROW_SCHEMA)


def _native_lines(native, params: str | None):
    """(plain, read_line) when the compiled decoder reads this item's lines itself: a
    Kafka-record archive object (every compiled protocol), or a TiCDC storage-sink canal-json
    data file; else None."""
    if not hasattr(native, "decode_lines"):
        return None
    decoded = orjson.loads(params) if params else {"layout": "kafka-records"}
    if decoded["layout"] == "kafka-records":
        return None, layouts.kafka_records.read_line
    if (decoded["layout"] == "ticdc-storage" and "topic" in decoded and "columns" not in decoded
            and native.codec.name == "canal-json"):
        ticdc = layouts.ticdc_storage
        return ((decoded["topic"], ticdc.base_offset(decoded), ticdc.MAX_LINE),
                lambda uri, line_no, line: ticdc.line_record(uri, decoded, line_no, line))
    return None


class _Last(NamedTuple):
    """The last good record's coordinates, for a damage row."""

    line: int
    topic: str
    partition: int
    offset: int


def _native_lines_object(native, codec, uri: str, plain, read_line) -> Iterator[pa.RecordBatch]:
    """One object whose lines the compiled decoder reads and decodes in one pass (a few
    thousand records per call); the lines it leaves go through `read_line` and the Python
    codec exactly as `decode_object` reads them, and damage ends the object the same way."""
    counted = 0  # lines counted (blank ones too): the line numbers
    line_no = 0  # the line of the last record or quarantine row
    last = None

    def lines(data):
        nonlocal counted, line_no, last
        start = 0
        while start < len(data):
            events, idx, out = native.decode_lines(data, start, counted, BATCH_ROWS, uri, plain)
            start, counted = out["consumed"], out["line_no"]
            native_last = _Last(*out["last"]) if out["last"] is not None else None
            groups, python_idx = [], []
            for ordinal, n, first, stop in out["fallback"]:
                try:
                    entry = read_line(uri, n, bytes(data[first:stop]))
                    group = (None, [entry]) if isinstance(entry, dict) else (entry, decode_one(codec, entry, n))
                except Exception:  # as the record path: the rows before it, then the object ends
                    before = pc.less(idx, ordinal)
                    kept = events.filter(before)
                    line_no = max(line_no, pc.max(kept.column("line")).as_py() or 0)
                    yield native_decode.merge(kept, idx.filter(before),
                                              _to_batch(groups, DECODED_ARROW_SCHEMA) if groups else None, python_idx)
                    raise
                groups.append(group)
                if group[0] is not None and (last is None or n > last.line):
                    last = _Last(n, entry.topic, entry.partition, entry.offset)
                python_idx.extend([ordinal] * len(group[1]))
                line_no = n
            if native_last is not None:
                line_no = max(line_no, native_last.line)
                if last is None or native_last.line > last.line:
                    last = native_last
            python = _to_batch(groups, DECODED_ARROW_SCHEMA) if groups else None
            yield native_decode.merge(events, idx, python, python_idx)

    max_line = storage.settings().max_line_bytes
    big = limits.big_value_bytes()

    def one_line(line, length: int):
        """A line the compiled decoder is not given: over --max-line-bytes (quarantined, only
        its head was kept), or big (the Python path counts its columns and rows first)."""
        nonlocal counted, line_no, last
        counted += 1
        n = counted
        native.python_records += 1  # a record the compiled decoder did not take (the decoder report counts it)
        if length > max_line:
            head = storage.LongLine(bytes(line[:storage.LongLine.KEPT]))
            head.length = length
            entry = long_line_row(uri, n, head, None if plain is None else {
                "topic": plain[0], "partition": 0, "offset": plain[1] + min(n, plain[2])})
        else:
            entry = read_line(uri, n, bytes(line).rstrip(b"\r"))
        if isinstance(entry, dict):
            group = (None, [entry])
        else:
            group = (entry, decode_one(codec, entry, n))
            last = _Last(n, entry.topic, entry.partition, entry.offset)
        line_no = n
        yield _to_batch([group], DECODED_ARROW_SCHEMA)

    def runs(data):
        """Lines to the compiled decoder, except the big or over-long ones (rare: found with
        one vectorised pass over the newlines, only in a piece longer than such a line)."""
        if len(data) <= big:
            yield from lines(data)
            return
        import numpy as np

        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
        if not len(ends) or ends[-1] != len(data) - 1:
            ends = np.append(ends, len(data))  # the last line of the object, without its newline
        starts = np.concatenate(([0], ends[:-1] + 1))
        start = 0
        for i in np.flatnonzero(ends - starts > big):
            first, stop = int(starts[i]), int(ends[i])
            if first > start:
                yield from lines(data[start:first])
            yield from one_line(data[first:stop], stop - first)
            start = stop + 1
        if start < len(data):
            yield from lines(data[start:])

    pending = b""
    skipping = 0  # inside a line over --max-line-bytes: its length so far (`pending` keeps its head)
    try:
        for piece in storage.iter_pieces(uri):
            if skipping:
                end = piece.find(b"\n")
                if end < 0:
                    skipping += len(piece)
                    continue
                yield from one_line(pending, skipping + end)
                pending, skipping, piece = b"", 0, piece[end + 1:]
            data = pending + piece if pending else piece
            cut = data.rfind(b"\n") + 1
            pending = data[cut:]
            if cut:
                yield from runs(memoryview(data)[:cut])
            if len(pending) > max_line:
                skipping, pending = len(pending), bytes(pending[:storage.LongLine.KEPT])
        if skipping:
            yield from one_line(pending, skipping)
        elif pending:
            yield from runs(pending)
    except Exception as e:  # noqa: BLE001 - damaged or unreadable: one quarantine row says where
        if isinstance(e, storage.DamagedObject):
            e.partial = pending
        yield _to_batch([(None, [_broken_object_row(uri, e, line_no, last)])], DECODED_ARROW_SCHEMA)


def decode_records_fn(protocol: str, options: dict[str, str]) -> Callable:
    """mapInArrow function for records already in a DataFrame (topic, partition, offset,
    timestamp, key, value[, object, line]) -> batches of DECODED_ARROW_SCHEMA."""
    mode = native_decode.requested_mode()  # the driver's choice reaches the executors
    read_settings = storage.settings()  # the limits (and claim-check reads) as the driver was told

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(read_settings)
        codec = get_codec(protocol, options, read_object=read_object)
        native = native_decode.decoder_for(codec, mode)
        for batch in batches:
            if native is not None:
                yield limits.within_limits(_native_batch(native, codec, batch), codec.name)
                continue
            columns = batch.to_pydict()
            n = batch.num_rows
            objects = columns.get("object", [None] * n)
            lines = columns.get("line", [None] * n)
            headers = columns.get("headers", [None] * n)  # Spark's Kafka source: [{key, value}, ...]
            groups = []
            for i in range(n):
                record = KafkaRecord(columns["topic"][i], columns["partition"][i], columns["offset"][i],
                                     columns["timestamp"][i], columns["key"][i], columns["value"][i],
                                     tuple((h["key"], h["value"]) for h in headers[i] or ()), objects[i])
                groups.append((record, decode_one(codec, record, lines[i])))
            for out in _batches(groups, DECODED_ARROW_SCHEMA):
                yield limits.within_limits(out, codec.name)
        if native is not None:
            log.info("%s decoded: %d records by the compiled decoder, %d by the Python codec",
                     protocol, native.native_records, native.python_records)

    return run


def _python_rows(codec, records: list[tuple[KafkaRecord, int | None]], indices) -> tuple[pa.RecordBatch | None, list[int]]:
    """The Python codec's rows (quarantine rows included) for the records the compiled
    decoder left, with each row's record index."""
    groups = [(record, decode_one(codec, record, line)) for record, line in records]
    if not groups:
        return None, []
    index = [i for i, (_, rows) in zip(indices, groups) for _ in rows]
    return _to_batch(groups, DECODED_ARROW_SCHEMA), index


def _native_batch(native, codec, batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of records decoded by the compiled decoder, the records it cannot take by
    the Python codec, in record order."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name, typ):
        return batch.column(name) if name in names else pa.nulls(n, typ)

    source = {"topic": batch.column("topic"), "partition": batch.column("partition"),
              "offset": batch.column("offset"), "record_timestamp": batch.column("timestamp"),
              "object": column("object", pa.string()), "line": column("line", pa.int64())}
    values = batch.column("value")
    big = pc.greater(pc.fill_null(pc.binary_length(values), 0),
                     max(limits.BIG_VALUE, 64 * storage.settings().max_columns))
    if pc.any(big).as_py():  # to the Python codec (and its count), not the compiled decoder
        values = pc.if_else(big, pa.scalar(b"", values.type), values)
    events, idx, fallback = native.decode(values, source, batch.column("key"))
    if pc.any(big).as_py():
        import numpy as np

        keep = ~np.asarray(big.to_numpy(zero_copy_only=False))[np.asarray(idx)]
        events, idx = events.filter(pa.array(keep)), idx.filter(pa.array(keep))
        fallback = fallback | np.asarray(big.to_numpy(zero_copy_only=False))
    indices = [int(i) for i in fallback.nonzero()[0]]
    if not indices:
        return events
    sub = batch.take(pa.array(indices, pa.int64())).to_pydict()
    m = len(indices)
    objects = sub.get("object", [None] * m)
    lines = sub.get("line", [None] * m)
    headers = sub.get("headers", [None] * m)
    records = [(KafkaRecord(sub["topic"][j], sub["partition"][j], sub["offset"][j], sub["timestamp"][j],
                            sub["key"][j], sub["value"][j], tuple((h["key"], h["value"]) for h in headers[j] or ()),
                            objects[j]), lines[j]) for j in range(m)]
    python, python_idx = _python_rows(codec, records, indices)
    return native_decode.merge(events, idx, python, python_idx)


def _native_records(native, codec, records: list[tuple[KafkaRecord, int | None]]) -> pa.RecordBatch:
    """Records read from an archive object (record, line) through the compiled decoder."""
    source = {
        "topic": pa.array([r.topic for r, _ in records], pa.string()),
        "partition": pa.array([r.partition for r, _ in records], pa.int32()),
        "offset": pa.array([r.offset for r, _ in records], pa.int64()),
        "record_timestamp": pa.array([r.timestamp for r, _ in records], pa.int64()),
        "object": pa.array([r.object for r, _ in records], pa.string()),
        "line": pa.array([line for _, line in records], pa.int64()),
    }
    big_bytes = limits.big_value_bytes()  # longer values go to the Python codec, not the compiled decoder
    big = [r.value is not None and len(r.value) > big_bytes for r, _ in records]
    events, idx, fallback = native.decode(pa.array([b"" if b else r.value for b, (r, _) in zip(big, records)],
                                                   pa.binary()), source,
                                          pa.array([r.key for r, _ in records], pa.binary()))
    if any(big):
        import numpy as np

        flags = np.array(big)
        keep = ~flags[np.asarray(idx)]
        events, idx = events.filter(pa.array(keep)), idx.filter(pa.array(keep))
        fallback = fallback | flags
    indices = [int(i) for i in fallback.nonzero()[0]]
    if not indices:
        return events
    python, python_idx = _python_rows(codec, [records[i] for i in indices], indices)
    return native_decode.merge(events, idx, python, python_idx)


# ------------------------------------------------------------------------------- quarantine

QUARANTINE_FIELDS = ("object", "line", "topic", "partition", "offset", "error_stage", "error")


def write_quarantine_fn(protocol: str, base: str) -> Callable:
    """mapInArrow function: quarantine rows -> `_quarantine/part-<task>.jsonl.gz` objects of
    JSON lines naming object, line, offset, protocol and reason, with the raw record."""
    import base64

    def b64(value):
        return None if value is None else base64.b64encode(value).decode()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        lines = []
        for batch in batches:
            for row in batch.to_pylist():
                doc = {k: row[k] for k in QUARANTINE_FIELDS}
                doc["error"] = masking.mask_text(doc["error"])  # a codec may quote a registry URL
                doc["protocol"] = protocol
                doc["key"] = b64(row["raw_key"])
                doc["value"] = b64(row["raw_value"])
                if row["raw_line"] is not None:
                    try:  # the line as text when it is UTF-8, else its exact bytes in base64
                        doc["raw_line"] = row["raw_line"].decode("utf-8")
                    except UnicodeDecodeError:
                        doc["raw_line_base64"] = b64(row["raw_line"])
                for name, value in (row.get("extras") or ()):
                    doc[name] = int(value) if value.lstrip("-").isdigit() else value
                lines.append(orjson.dumps(doc))
        if not lines:
            return
        context = TaskContext.get()
        part = context.partitionId() if context else 0
        uri = storage.join(base, f"part-{part:05d}.jsonl.gz")
        data = gzip.compress(b"\n".join(lines) + b"\n", mtime=0)
        storage.write_bytes(uri, data)
        yield pa.RecordBatch.from_pylist(
            [{"uri": uri, "topic": None, "partition": None, "first_offset": 0,
              "last_offset": len(lines) - 1, "records": len(lines), "events": 0, "rows": 0,
              "bytes": len(data)}],
            schema=WRITTEN_ARROW_SCHEMA,
        )

    return run
