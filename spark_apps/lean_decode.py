"""The decode's output made lean in the decode task itself (issue 13 points 3 and 4): each
image becomes its column list id, its values and its labels, and each task ends with one
`aux` row carrying what the driver needs from the whole pass besides the events:

* `entries`: the distinct column lists (id, names, types, flags) the task saw: the lean rows'
  dictionary, so the `decoded` cache never holds names and types per event;
* `runs`: per source partition, the strictly increasing runs of record offsets the task read
  (lowest, highest, count), from which the driver proves the distinct offset count without a
  shuffle (`gaps.count_offsets`);
* `stats`: per source partition, the statistics the cut and the manifest need (records,
  highest watermark, commit ts range, rows without commit ts, updates without old values,
  offset range): the driver merges the tasks' rows, so the first pass needs no aggregate job;
* `ddl`: the task's DDL events, whole (lean rows without images): few, and the driver needs
  them before any shuffle (the DDL history decides each row's table and key at the cut);
* `decoders`: which decoder the task ran (compiled or the Python codec, why, where the
  extension came from) and the records each decoded: the manifest says what the executors
  did, not what the driver expected (native_decode.task_report).

DDL events already name the table their statement names (`where_sql_says`).

Columnar: Arrow compute kernels and NumPy over the batch; Python touches only the distinct
column lists of a batch (a few) and the runs (about one per archive object). The id is the
first 8 bytes of BLAKE2b over an escaped (injective) encoding of names, types and flags, so
every decoder path (compiled, Python codec, Kafka source) gives a column list the same id.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema

from .contract import Kind
from . import identity as identity_mod
from . import native_decode
from .identity import identities
from .schema import DECODED_ARROW_SCHEMA

IMAGES = ("before", "after")
ENTRY_TYPE = pa.struct([pa.field("id", pa.int64()), pa.field("names", pa.list_(pa.string())),
                        pa.field("types", pa.list_(pa.string())), pa.field("flags", pa.list_(pa.int32()))])
RUN_TYPE = pa.struct([pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
                      pa.field("lo", pa.int64()), pa.field("hi", pa.int64()), pa.field("n", pa.int64())])
# each statistic and how partial ones combine (over batches, and over tasks on the driver)
STATS_AGGREGATES = dict(records="sum", watermark="max", min_commit_ts="min", max_commit_ts="max",
                        rows_without_commit_ts="sum", updates_without_before="sum", min_offset="min",
                        max_offset="max")
STATS_FIELDS = tuple(STATS_AGGREGATES)
STATS_TYPE = pa.struct([pa.field("topic", pa.string()), pa.field("partition", pa.int32())]
                       + [pa.field(name, pa.int64()) for name in STATS_FIELDS])
MAX_RUNS = 512  # per partition and task; beyond, the partition's offsets are counted exactly (n = -1)

_image_fields = [f for f in DECODED_ARROW_SCHEMA if f.name not in IMAGES]
LEAN_ARROW_SCHEMA = pa.schema(
    _image_fields
    + [pa.field(f"{i}_schema", pa.int64()) for i in IMAGES]
    + [f for i in IMAGES for f in (pa.field(f"{i}_values", pa.list_(pa.binary())),
                                   pa.field(f"{i}_labels", pa.list_(pa.string())))]
    # the duplicate check's identity of the row (spark_apps/identity.py), and the row's place
    # in this run's decode: unique per row, the key the later copies are marked by (`leaned`)
    + [pa.field("identity", pa.binary()), pa.field("place_id", pa.int64())]
)
DDL_EVENT_TYPE = pa.struct(list(LEAN_ARROW_SCHEMA))  # a lean row (a DDL event) as a struct
AUX_TYPE = pa.struct([pa.field("entries", pa.list_(ENTRY_TYPE)), pa.field("runs", pa.list_(RUN_TYPE)),
                      pa.field("stats", pa.list_(STATS_TYPE)), pa.field("ddl_events", pa.list_(DDL_EVENT_TYPE)),
                      pa.field("decoders", pa.list_(native_decode.REPORT_TYPE))])
LEAN_ARROW_SCHEMA = LEAN_ARROW_SCHEMA.append(pa.field("aux", AUX_TYPE))
LEAN_STRUCT = from_arrow_schema(LEAN_ARROW_SCHEMA)


def _escaped(strings: pa.Array, null: str) -> pa.Array:
    """`\\x00` -> `\\x00\\x01`, null -> `null`: after this a `\\x00\\x02` join is injective."""
    return pc.fill_null(pc.replace_substring(strings, "\x00", "\x00\x01"), null)


def _parts(image: pa.ListArray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(the column structs, list offsets into them, null mask): what lists of one of their
    fields are built from (the offsets copied: Arrow refuses a sliced offsets array with a mask)."""
    return image.values, pa.array(image.offsets.to_numpy(), pa.int32()), image.is_null()


def _canonical(image: pa.ListArray) -> pa.Array:
    """Per event, one string naming the image's column list unambiguously (null image: null)."""
    items, offsets, mask = _parts(image)

    def joined(child: pa.Array) -> pa.Array:
        return pc.binary_join(pa.ListArray.from_arrays(offsets, child, mask=mask), "\x00\x02")

    names = joined(_escaped(items.field("name"), "\x00\x03"))
    types = joined(_escaped(items.field("mysql_type"), "\x00\x03"))
    flags = joined(pc.cast(items.field("flags"), pa.string()))
    return pc.binary_join_element_wise(names, types, flags, "\x00\x04")


def canonical_text(names: list, types: list, flags: list) -> str:
    """`_canonical` of one column list, in Python (the few distinct lists of a batch)."""
    def joined(values):
        return "\x00\x02".join("\x00\x03" if v is None else v.replace("\x00", "\x00\x01") for v in values)

    return "\x00\x04".join((joined(names), joined(types), "\x00\x02".join(str(f) for f in flags)))


def _id(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little", signed=True)


def _lists(image: pa.ListArray) -> pa.Array:
    """Per event, a value that tells its column list (names, types, flags) apart: 16 bytes by
    the extension (`identity.hashed`, no text per event), else the canonical text."""
    if identity_mod._native_identities is None:
        return _canonical(image)
    items, offsets, mask = _parts(image)
    parts = [items.field("name"), items.field("mysql_type"), pc.cast(items.field("flags"), pa.int64())]
    return identity_mod.hashed([pa.ListArray.from_arrays(offsets, p, mask=mask) for p in parts], len(image))


def schema_ids(image: pa.ListArray, entries: dict, known: dict | None = None) -> pa.Array:
    """Each event's column list id (null for a null image); adds the batch's new column lists
    to `entries` ({id: (names, types, flags)}). Events are grouped by `_lists`; each group's id
    is the hash of the canonical text (`canonical_text`) of its first event. `known` (the
    task's, beside `entries`): `_lists` value -> id, so a column list met in an earlier batch
    is not read and hashed again (TiCDC Avro's image shapes are thousands per task); the new
    groups' first events are taken in one `take`, not one Arrow slice each."""
    known = {} if known is None else known
    groups = pc.dictionary_encode(_lists(image))
    valid = ~np.asarray(image.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    codes = np.where(valid, pc.fill_null(groups.indices, -1).to_numpy(zero_copy_only=False), -1)
    ids = np.zeros(len(groups.dictionary), dtype=np.int64)
    seen, first = np.unique(codes, return_index=True)
    seen, first = seen[seen >= 0], first[seen >= 0]
    new = []
    for code, row, tag in zip(seen.tolist(), first.tolist(), groups.dictionary.take(pa.array(seen)).to_pylist()):
        found = known.get(tag)
        if found is None:
            new.append((code, row, tag))
        else:
            ids[code] = found
    if new:
        firsts = image.take(pa.array([row for _, row, _ in new], pa.int64()))
        cols = firsts.flatten()
        names, types, flags = (cols.field("name").to_pylist(), cols.field("mysql_type").to_pylist(),
                               cols.field("flags").to_pylist())
        bounds = np.concatenate([[0], np.cumsum(firsts.value_lengths().to_numpy(zero_copy_only=False))]).tolist()
        for (code, _, tag), lo, hi in zip(new, bounds, bounds[1:]):
            n, t, f = names[lo:hi], types[lo:hi], flags[lo:hi]
            ids[code] = known[tag] = _id(canonical_text(n, t, f))
            entries.setdefault(int(ids[code]), (n, t, f))
    out = ids[np.where(codes >= 0, codes, 0)] if len(ids) else np.zeros(len(image), dtype=np.int64)
    return pa.array(out, pa.int64(), mask=~valid)


def _values_labels(image: pa.ListArray) -> tuple[pa.Array, pa.Array]:
    """The image's values, and its labels (null when no column of the event has one)."""
    items, offsets, mask = _parts(image)
    labels = items.field("label")
    counted = np.concatenate([[0], np.cumsum(labels.is_valid().to_numpy(zero_copy_only=False))])
    bounds = offsets.to_numpy()
    none = counted[bounds[1:]] == counted[bounds[:-1]]
    no_labels = pc.or_(mask, pa.array(none))
    return (pa.ListArray.from_arrays(offsets, items.field("value"), mask=mask),
            pa.ListArray.from_arrays(offsets, labels, mask=no_labels))


class _Runs:
    """Strictly increasing runs of record offsets per (topic, partition), across a task's batches."""

    def __init__(self):
        self.runs: dict[tuple, list[list[int]]] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        stage = batch.column("error_stage")
        keep = pc.and_(pc.and_(pc.is_valid(batch.column("topic")), pc.equal(batch.column("event_index"), 0)),
                       pc.is_valid(batch.column("offset")))
        keep = pc.and_(keep, pc.invert(pc.fill_null(pc.equal(stage, "archive"), False)))
        records = batch.select(["topic", "partition", "offset"]).filter(keep)  # not the wide images
        if records.num_rows == 0:
            return
        topics = pc.dictionary_encode(records.column("topic"))
        t = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        p = pc.fill_null(records.column("partition"), -(2 ** 31)).to_numpy().astype(np.int64)
        o = records.column("offset").to_numpy()
        order = np.lexsort((np.arange(len(o)), p, t))  # by partition, in reading order
        t, p, o = t[order], p[order], o[order]
        # a new run where the partition changes or the offset does not increase
        starts = np.flatnonzero(np.concatenate([[True], (t[1:] != t[:-1]) | (p[1:] != p[:-1]) | (o[1:] <= o[:-1])]))
        ends = np.append(starts[1:], len(o)) - 1
        names = topics.dictionary.to_pylist()
        for s, e in zip(starts.tolist(), ends.tolist()):
            part = None if p[s] == -(2 ** 31) else int(p[s])
            runs = self.runs.setdefault((names[t[s]], part), [])
            lo, hi, n = int(o[s]), int(o[e]), e - s + 1
            if runs and runs[0][2] < 0:  # too scattered to prove: only the range is kept
                runs[0][0], runs[0][1] = min(runs[0][0], lo), max(runs[0][1], hi)
            elif runs and runs[-1][1] < lo and (runs[-1][1] + 1 == lo or _holed(runs[-1]) or hi - lo + 1 != n):
                # continues the previous run: adjacent, or one of them has holes anyway. Two hole-free
                # runs apart stay apart: another task may read what lies between (gaps.proven_offsets)
                runs[-1][1], runs[-1][2] = hi, runs[-1][2] + n
            elif len(runs) >= MAX_RUNS:  # counted exactly by Spark (gaps.count_offsets)
                runs[:] = [[min(lo, min(r[0] for r in runs)), max(hi, max(r[1] for r in runs)), -1]]
            else:
                runs.append([lo, hi, n])

    def rows(self) -> list[dict]:
        return [{"topic": topic, "partition": part, "lo": lo, "hi": hi, "n": n}
                for (topic, part), runs in self.runs.items() for lo, hi, n in runs]


def _holed(run: list[int]) -> bool:
    return run[1] - run[0] + 1 != run[2]


def _records(batch: pa.RecordBatch) -> pa.Array:
    """The events of records read from the archive (a topic, and not a line that is not a
    record): what the partition statistics count."""
    stage = pc.fill_null(pc.equal(batch.column("error_stage"), "archive"), False)
    return pc.and_(pc.is_valid(batch.column("topic")), pc.invert(stage))


class _Stats:
    """The partition statistics of a task's events (merged over batches; the driver merges the
    tasks'): the same figures the replay used to aggregate with a Spark job."""

    def __init__(self):
        self.parts: dict[tuple, dict] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        # only the columns the figures read are filtered (copied), not the wide images
        names = ["topic", "partition", "kind", "event_index", "op", "commit_ts", "offset", "watermark_ts"]
        narrow = pa.RecordBatch.from_arrays([batch.column(n) for n in names] + [pc.is_null(batch.column("before"))],
                                            names=names + ["no_before"])
        records = narrow.filter(_records(batch))
        if records.num_rows == 0:
            return
        kind, index, op = records.column("kind"), records.column("event_index"), records.column("op")
        commit = records.column("commit_ts")
        is_record = pc.and_(pc.equal(index, 0), pc.is_valid(records.column("offset")))
        offset = pc.if_else(is_record, records.column("offset"), None)
        table = pa.table({
            "topic": records.column("topic"), "partition": records.column("partition"),
            # records with an offset: not the rows a layout adds itself (a storage sink's
            # checkpoint and schema files: layouts.base.watermark_row, ddl_row)
            "records": pc.cast(pc.fill_null(is_record, False), pa.int64()),
            "watermark": pc.if_else(pc.equal(kind, Kind.WATERMARK), records.column("watermark_ts"), None),
            "min_commit_ts": commit, "max_commit_ts": commit,
            "rows_without_commit_ts": pc.cast(pc.and_(pc.equal(kind, Kind.ROW), pc.is_null(commit)), pa.int64()),
            "updates_without_before": pc.cast(pc.fill_null(pc.and_(
                pc.equal(op, "update"), records.column("no_before")), False), pa.int64()),
            "min_offset": offset, "max_offset": offset,
        })
        grouped = table.group_by(["topic", "partition"], use_threads=False).aggregate(
            list(STATS_AGGREGATES.items()))
        names = {f"{name}_{how}": name for name, how in STATS_AGGREGATES.items()}
        for row in grouped.rename_columns([names.get(n, n) for n in grouped.column_names]).to_pylist():
            key = (row.pop("topic"), row.pop("partition"))
            seen = self.parts.get(key)
            self.parts[key] = row if seen is None else merge_stats(seen, row)

    def rows(self) -> list[dict]:
        return [{"topic": topic, "partition": part, **figures} for (topic, part), figures in self.parts.items()]


def merge_stats(a: dict, b: dict) -> dict:
    """Two partial statistics of one partition as one (sums add; nulls are no value)."""
    out = {}
    for name, how in STATS_AGGREGATES.items():
        x, y = a.get(name), b.get(name)
        if how == "sum":
            out[name] = (x or 0) + (y or 0)
        elif x is None or y is None:
            out[name] = y if x is None else x
        else:
            out[name] = min(x, y) if how == "min" else max(x, y)
    return out


def lean(batch: pa.RecordBatch, entries: dict, known: dict | None = None) -> pa.RecordBatch:
    """A DECODED_ARROW_SCHEMA batch as a LEAN_ARROW_SCHEMA batch (its `aux` null; `known`:
    `schema_ids`')."""
    columns = {f.name: batch.column(f.name) for f in _image_fields}
    for image in IMAGES:
        column = batch.column(image)
        columns[f"{image}_schema"] = schema_ids(column, entries, known)
        columns[f"{image}_values"], columns[f"{image}_labels"] = _values_labels(column)
    columns["identity"] = pa.nulls(batch.num_rows, pa.binary())
    columns["place_id"] = pa.nulls(batch.num_rows, pa.int64())  # numbered by `leaned`
    columns["aux"] = pa.nulls(batch.num_rows, AUX_TYPE)
    out = pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in LEAN_ARROW_SCHEMA],
                                     schema=LEAN_ARROW_SCHEMA)
    return out.set_column(out.schema.get_field_index("identity"), "identity", identities(out))


def where_sql_says(batch: pa.RecordBatch) -> pa.RecordBatch:
    """DDL events whose statement names another database than the message (Canal: the
    session's `"database":"inventory"` with ``CREATE TABLE `xj_`.`user02` ``) take the
    database and table the statement names, so --tables, per-table counts, the duplicate check
    and the output see the table the DDL changes. Done here, where each statement is read once
    by the task that decoded it, not on the driver between Spark jobs."""
    is_ddl = pc.fill_null(pc.equal(batch.column("kind"), Kind.DDL), False)
    if not pc.any(is_ddl).as_py():
        return batch
    from .ddl import statement_table

    rows = pc.indices_nonzero(is_ddl)
    databases, tables = batch.column("database").to_pylist(), batch.column("table").to_pylist()
    changed = False
    for i, query in zip(rows.to_pylist(), batch.column("ddl_query").take(rows).to_pylist()):
        target = statement_table(query or "")
        if target is not None and target[0].lower() != (databases[i] or "").lower():
            databases[i], tables[i] = target
            changed = True
    if not changed:
        return batch
    names = batch.schema.names
    columns = [pa.array(databases, pa.string()) if n == "database" else pa.array(tables, pa.string()) if n == "table"
               else batch.column(n) for n in names]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def ddl_events(batch: pa.RecordBatch) -> pa.Array:
    """The DDL events of a lean batch as DDL_EVENT_TYPE structs."""
    ddl = batch.filter(pc.fill_null(pc.equal(batch.column("kind"), Kind.DDL), False))
    return pa.StructArray.from_arrays([ddl.column(f.name) for f in DDL_EVENT_TYPE], fields=list(DDL_EVENT_TYPE))


def aux_batch(entries: dict, runs: _Runs, stats: _Stats | None = None, ddl: list | None = None,
              decoders: list | None = None) -> pa.RecordBatch:
    """The task's one `aux` row (every other column null, or "aux" / -1 where it cannot be)."""
    events = pa.concat_arrays(ddl) if ddl else pa.array([], DDL_EVENT_TYPE)
    value = pa.StructArray.from_arrays([
        pa.array([[{"id": i, "names": n, "types": t, "flags": f} for i, (n, t, f) in entries.items()]],
                 pa.list_(ENTRY_TYPE)),
        pa.array([runs.rows()], pa.list_(RUN_TYPE)),
        pa.array([stats.rows() if stats else []], pa.list_(STATS_TYPE)),
        pa.ListArray.from_arrays(pa.array([0, len(events)], pa.int32()), events),
        pa.array([decoders or []], pa.list_(native_decode.REPORT_TYPE))], fields=list(AUX_TYPE))
    placeholder = {"kind": "aux", "event_index": -1}
    arrays = [value if f.name == "aux" else pa.array([placeholder[f.name]], f.type)
              if not f.nullable else pa.nulls(1, f.type) for f in LEAN_ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=LEAN_ARROW_SCHEMA)


PLACE_BITS = 40  # a task numbers its rows below 2**40; the task's partition index is above
# rows gathered from the decoder's batches (one or more per archive object) before they are made
# lean and written: each lean step is a few dozen Arrow calls per batch, whatever its size, and
# each written batch is one Parquet row group the later scans read; an object of 500 records
# made both cost more than its rows (docs/engine.md, "Lean rows in larger batches")
LEAN_BATCH_ROWS = 32768


def leaned(fn):
    """The mapInArrow function `fn` (batches of DECODED_ARROW_SCHEMA out) made lean, its task's
    `aux` row last. Each row's `place_id` is its task's partition index and its number in the
    task (`PLACE_BITS`): one 64-bit key per row instead of its six place columns (two of them
    long strings), so the duplicate check's marks stay small enough to broadcast. A retried
    task decodes the same records in the same order, so it gives the same numbers.

    The offset runs are taken per decoder batch (an object's runs must not join another
    object's across a hole: `_Runs`); the rest per `LEAN_BATCH_ROWS` rows gathered in order,
    which numbers, keys and counts the rows as one batch at a time would."""

    def run(batches):
        from pyspark import TaskContext

        context = TaskContext.get()
        next_place = (context.partitionId() if context else 0) << PLACE_BITS
        entries: dict = {}
        known: dict = {}  # schema_ids' column lists already met by this task
        runs, stats, ddl = _Runs(), _Stats(), []
        pending: list = []

        def made_lean():
            nonlocal next_place
            batch = pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending.clear()
            stats.add(batch)
            out = lean(batch, entries, known)
            places = pa.array(np.arange(next_place, next_place + out.num_rows, dtype=np.int64))
            next_place += out.num_rows
            out = out.set_column(out.schema.get_field_index("place_id"), "place_id", places)
            events = ddl_events(out)
            if len(events):
                ddl.append(events)
            return out

        gathered = 0
        for batch in fn(batches):
            if batch.num_rows:
                batch = where_sql_says(batch)
                runs.add(batch)
                pending.append(batch)
                gathered += batch.num_rows
                if gathered >= LEAN_BATCH_ROWS:
                    yield made_lean()
                    gathered = 0
        if pending:
            yield made_lean()
        records = sum(row["records"] or 0 for row in stats.parts.values())
        yield aux_batch(entries, runs, stats, ddl, native_decode.task_report(records))

    return run


# the lean rows without the `aux` column: what the decode tasks write as Parquet in local mode
EVENTS_ARROW_SCHEMA = pa.schema([f for f in LEAN_ARROW_SCHEMA if f.name != "aux"])
EVENTS_STRUCT = from_arrow_schema(EVENTS_ARROW_SCHEMA)


def written_to(fn, directory: str):
    """The lean mapInArrow function `fn` writing its event rows to one Parquet file per task
    (`part-NNNNN.parquet`, the task's partition) under `directory`, yielding only its `aux` row.

    Why: the rows then never enter the JVM during the decode: Spark's own persistence turned
    each Arrow batch into rows and those into its compressed cache batches (about a third of
    the decode's CPU, measured), and its later readers read only the columns they need with
    the vectorized Parquet reader. A retried or speculative task writes the same rows under
    the same name (written to a hidden file first, renamed when whole; Spark's file listing
    skips hidden files)."""

    def run(batches):
        import os

        import pyarrow.parquet as pq
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context else 0
        attempt = context.taskAttemptId() if context else os.getpid()
        final = os.path.join(directory, f"part-{part:05d}.parquet")
        temp = os.path.join(directory, f".part-{part:05d}.{attempt}.tmp")
        writer = None
        try:
            for batch in fn(batches):
                if batch.num_rows == 1 and batch.column("aux").null_count == 0:  # the task's last row
                    if writer is not None:
                        writer.close()
                        writer = None
                        os.replace(temp, final)
                    yield batch
                    continue
                if writer is None:
                    writer = pq.ParquetWriter(temp, EVENTS_ARROW_SCHEMA, compression="lz4", use_dictionary=False,
                                              write_statistics=False)
                writer.write_batch(pa.RecordBatch.from_arrays(batch.columns[:-1], schema=EVENTS_ARROW_SCHEMA))
        finally:
            if writer is not None:  # the task failed: its partial file stays hidden
                writer.close()

    return run
