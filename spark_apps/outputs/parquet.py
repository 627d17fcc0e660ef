"""The Parquet target (`--target-format parquet`), snapshot and history, for analytics: one dataset per table, `<output>/<db>/<table>/part-*.parquet`
(the names as spark_apps.paths.segment makes them path segments), with typed columns.

Written by pyarrow inside the Spark tasks (mapInArrow) and stored through spark_apps.storage,
because Spark's own Parquet writer cannot reach S3 here (no hadoop-aws jar). Canonical values
are turned into typed Arrow columns with pyarrow casts, vectorised per column; a value the
type cannot hold (a zero date '0000-00-00') becomes null and is counted in the manifest
(`nulled`), never dropped silently.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_codecs.mysql_types import MySQLType, parse_type

from cdc_codecs.tso import to_datetime

from .. import storage
from ..paths import segment
from ..schema import WRITTEN_ARROW_SCHEMA, events_from_batch
from .base import HISTORY, SNAPSHOT, Target, tasks, written_rows

class ParquetTables(Target):
    """Rows per table as typed Parquet files under the staging area (the manifest commit puts them in place)."""

    records = False

    @classmethod
    def chosen(cls, args) -> bool:
        return args.output_format == "parquet"

    def write(self, df, kind, prepare=None, table_rows=None) -> list[dict]:
        from ..snapshot import projector

        fn = write_parquet_fn(storage.join(self.plan.staging, "data"), kind == HISTORY,
                              projector(self.plan.schemas(), schema_types=True))
        return written_rows(per_table(df, ordered=kind == SNAPSHOT), fn)


# a snapshot's rows in a file: by the replay order of each row's last change (ties: identical
# rows of a table without a key), not the order the last change per key left them in, so the
# bytes do not depend on how the last change per key partitioned the keys; a
# base export's rows share one point and differ by (offset, object): their byte offset and file
SNAPSHOT_ORDER = ("timeline", "topic", "partition", "offset", "event_index", "object")


def per_table(df, ordered: bool = False):
    """The frame with each table's rows together in a task (the files are written per table);
    `ordered`: within a table in `SNAPSHOT_ORDER`."""
    order = SNAPSHOT_ORDER if ordered else ()
    return df.repartition(tasks(df.sparkSession), "database", "table").sortWithinPartitions("database", "table",
                                                                                             *order)


def history_columns(time_unit: str) -> list[tuple[str, pa.DataType]]:
    """The SCD2 columns of a history file, validity times in `time_unit` (Parquet ms, lakehouse us)."""
    return [
        ("_op", pa.string()),
        ("_valid_from_ts", pa.int64()),
        ("_valid_to_ts", pa.int64()),
        ("_valid_from", pa.timestamp(time_unit, tz="UTC")),
        ("_valid_to", pa.timestamp(time_unit, tz="UTC")),
        ("_current", pa.bool_()),
    ]


HISTORY_COLUMNS = history_columns("ms")
# a --since window's files (outputs.lake): after the SCD2 columns, how the window moves the
# count of each identical row of a table without a key (transforms.copy_steps; null when keyed)
WINDOW_COPY_COLUMNS = ("_copy_add", "_copy_floor")


# a DECIMAL whose type text states no precision: TiCDC canal-json (without content-compatible),
# open-protocol and craft give every DECIMAL(p,s) so, Canal a column declared without one (MySQL's
# DECIMAL(10,0)); the widest decimal with room for a fraction, as Apache Paimon types it
UNSTATED_DECIMAL = pa.decimal128(38, 18)


def arrow_type(mysql_type: MySQLType) -> pa.DataType:
    base = mysql_type.base
    if base in ("tinyint", "smallint", "mediumint", "int"):
        return pa.int64()
    if base == "bigint":
        return pa.uint64() if mysql_type.unsigned else pa.int64()
    if base == "bit":
        return pa.uint64()
    if base == "year":
        return pa.int32()
    if base == "float":
        return pa.float32()
    if base == "double":
        return pa.float64()
    if base == "decimal":
        if not mysql_type.params:
            return UNSTATED_DECIMAL
        precision = int(mysql_type.params[0])
        scale = int(mysql_type.params[1]) if len(mysql_type.params) > 1 else 0
        return pa.decimal128(precision, scale) if precision <= 38 else pa.string()
    if base == "date":
        return pa.date32()
    if base in ("datetime", "timestamp"):
        return pa.timestamp("us")
    if mysql_type.is_binary or base == "geometry":
        return pa.binary()
    return pa.string()  # char, varchar, text, time, json, enum/set (labels)


def typed_column(values: list, mysql_type: MySQLType, labels: list,
                 type_fn: Callable[[MySQLType], pa.DataType] = arrow_type) -> tuple[pa.Array, int]:
    """An Arrow array of the column's type (`type_fn`: Parquet's or the lakehouse mapping) from
    canonical bytes; returns (array, nulled)."""
    target = type_fn(mysql_type)
    if pa.types.is_binary(target):
        return pa.array(values, pa.binary()), 0
    if mysql_type.base in ("enum", "set"):
        texts = [lab if lab is not None else (v.decode() if v is not None else None) for v, lab in zip(values, labels)]
        return pa.array(texts, pa.string()), 0
    texts = pa.array([None if v is None else v.decode("utf-8", "replace") for v in values], pa.string())
    if pa.types.is_string(target):
        return texts, 0
    try:
        return pc.cast(texts, target), 0
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if type_fn is arrow_type and target == UNSTATED_DECIMAL and not mysql_type.params:
            # a value of unknown precision beyond it (more than 20 integer or 18 fraction digits):
            # this file's column keeps the values as text (a Parquet file carries its own schema)
            return texts, 0
    # some values do not fit (zero dates, out of range): convert one by one, null those
    out, nulled = [], 0
    for text in texts.to_pylist():
        if text is None:
            out.append(None)
            continue
        try:
            out.append(pc.cast(pa.array([text]), target)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
            nulled += 1
    return pa.array(out, target), nulled


def _tso_time(ts: int | None):
    if ts is None:
        return None
    return to_datetime(ts)


ROWS_PER_FILE = 500_000  # a table's rows in one task beyond this go on in the next part file


def write_parquet_fn(base: str, history: bool, prepare: Callable[[dict], dict | None] | None,
                     uri_fn: Callable[[str, str, int, int], str] | None = None,
                     type_fn: Callable[[MySQLType], pa.DataType] = arrow_type, time_unit: str = "ms") -> Callable:
    """mapInArrow function: events sorted by (database, table) -> Parquet files, one
    WRITTEN row each (`events` holds the count of values nulled because the type could not
    hold them). `uri_fn(database, table, task, part)` places files elsewhere than
    <base>/<db>/<table>/ (lakehouse tables); `type_fn` and `time_unit` choose the column types.
    A --since window's changes (events carrying `WINDOW_COPY_COLUMNS`) have those after the SCD2 ones."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context else 0

        def stream():
            for batch in batches:
                for event in events_from_batch(batch):
                    if prepare is not None:
                        event = prepare(event)
                    if event is not None:
                        yield event

        written = []
        for (database, table), group in itertools.groupby(stream(), key=lambda e: (e["database"], e["table"])):
            for part, chunk in enumerate(_chunks(group, ROWS_PER_FILE)):
                data, rows, nulled = _table_bytes(chunk, history, type_fn, time_unit)
                uri = (uri_fn(database, table, task, part) if uri_fn is not None else
                       storage.join(base, segment(database), segment(table), f"part-{task:05d}-{part:04d}.parquet"))
                storage.write_bytes(uri, data)
                written.append({"uri": uri, "topic": f"{database}.{table}", "partition": task, "first_offset": 0,
                                "last_offset": rows - 1, "records": rows, "events": nulled, "rows": rows,
                                "bytes": len(data)})
        if written:
            yield pa.RecordBatch.from_pylist(written, schema=WRITTEN_ARROW_SCHEMA)

    return run


def _chunks(iterable, size):
    iterator = iter(iterable)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _table_bytes(events: list[dict], history: bool, type_fn=arrow_type, time_unit: str = "ms") -> tuple[bytes, int, int]:
    columns: dict[str, list] = {}
    labels: dict[str, list] = defaultdict(list)
    types: dict[str, str] = {}
    order: list[str] = []
    spelled: dict[str, str] = {}  # MySQL column names are case-insensitive: one column per name
    for i, event in enumerate(events):
        image = event["after"] if event["after"] is not None else event["before"]
        seen = set()
        for col in image or ():
            name = spelled.setdefault(col["name"].lower(), col["name"])
            if name not in columns:
                columns[name] = [None] * i
                labels[name] = [None] * i
                types[name] = col["mysql_type"] or ""
                order.append(name)
            columns[name].append(col["value"])
            labels[name].append(col["label"])
            seen.add(name)
        for name in order:
            if name not in seen:
                columns[name].append(None)
                labels[name].append(None)
    arrays, names, nulled = [], [], 0
    if history:
        arrays += [
            pa.array([e["_op"] for e in events], pa.string()),
            pa.array([e["_valid_from_ts"] for e in events], pa.int64()),
            pa.array([e["_valid_to_ts"] for e in events], pa.int64()),
            pa.array([_time(e, "_valid_from_ts", "_valid_from_ms") for e in events], pa.timestamp(time_unit, tz="UTC")),
            pa.array([_time(e, "_valid_to_ts", "_valid_to_ms") for e in events], pa.timestamp(time_unit, tz="UTC")),
            pa.array([e["_current"] for e in events], pa.bool_()),
        ]
        names += [n for n, _ in HISTORY_COLUMNS]
    if history and events and WINDOW_COPY_COLUMNS[0] in events[0]:
        arrays += [pa.array([e[name] for e in events], pa.int32()) for name in WINDOW_COPY_COLUMNS]
        names += list(WINDOW_COPY_COLUMNS)
    for name in order:
        array, n = typed_column(columns[name], parse_type(types[name]), labels[name], type_fn)
        arrays.append(array)
        names.append(name)
        nulled += n
    table = pa.Table.from_arrays(arrays, names=names)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue(), table.num_rows, nulled


def _time(event: dict, ts_key: str, ms_key: str):
    if event.get(ts_key) is not None:
        return _tso_time(event[ts_key])
    ms = event.get(ms_key)
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
