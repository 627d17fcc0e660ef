"""--target-layout ticdc-storage: row events per table as TiCDC's cloud storage sink writes them
(the layout spark_apps.layouts.ticdc_storage reads), and the root `metadata` whose checkpoint-ts is
the cut."""

from __future__ import annotations

import itertools

import pyarrow as pa

from cdc_codecs import get_codec

from .. import storage
from ..contract import Kind
from ..paths import segment
from ..schema import WRITTEN_ARROW_SCHEMA, events_from_batch
from ..ticdc_offsets import offset
from .base import Target, written_rows
from .base import tasks as write_tasks


class TiCDCStorageSink(Target):
    """Row events as TiCDC storage-sink data files, per table (DDL and watermarks are no lines there)."""

    records = True

    @classmethod
    def chosen(cls, args) -> bool:
        return args.output_format == "kafka" and args.target_layout == "ticdc-storage"

    def write(self, df, kind, prepare=None, table_rows=None) -> list[dict]:
        from pyspark.sql import functions as F

        plan = self.plan
        rows = df.where(F.col("kind") == Kind.ROW)
        ordered = rows.repartition(write_tasks(plan.spark), "database", "table").sortWithinPartitions(
            "database", "table", "sort_point", "sort_rank", "partition", "offset", "event_index")
        base = storage.join(plan.staging, "data")
        written = written_rows(ordered, write_tables_fn(plan.target_protocol, plan.target_options, base,
                                                        plan.args.max_records_per_object, prepare))
        if plan.cut["kind"] == "commit_ts" and plan.cut["commit_ts"] is not None:
            storage.write_bytes(storage.join(base, "metadata"), b'{"checkpoint-ts":%d}' % plan.cut["commit_ts"])
        return written


def write_tables_fn(protocol: str, options: dict, base: str, max_records: int, prepare=None):
    """mapInArrow function writing row events, sorted by (database, table, order), as TiCDC's
    storage sink lays them out: `{schema}/{table}/{version}/CDC{index:06d}.json`, canal-json
    lines ended by `\\r\\n` (schema and table names as spark_apps.paths.segment makes them path
    segments), a file every `max_records` rows and `meta/CDC.index` naming the
    last one. The version directory is the table's first written commit ts (like TiCDC's
    version for a table that existed before the changefeed: a point the table's schema holds
    at). DDL and watermarks are not lines in this layout (the target writes the root
    `metadata`); table schema files are not written. Returns WRITTEN_ARROW_SCHEMA rows."""

    def run(batches):
        codec = get_codec(protocol, options)

        def rows():
            for batch in batches:
                for event in events_from_batch(batch):
                    if event["kind"] != Kind.ROW:
                        continue
                    if prepare is not None:
                        event = prepare(event)
                        if event is None:
                            continue
                    yield (event["database"], event["table"]), event

        written = []
        for (database, table), group in itertools.groupby(rows(), key=lambda item: item[0]):
            directory = lines = None
            index = 0

            def flush():
                nonlocal lines, index
                if not lines:
                    return
                index += 1
                name = f"CDC{index:06d}.json"
                data = b"".join(line + b"\r\n" for line in lines)
                storage.write_bytes(storage.join(base, directory, name), data)
                storage.write_bytes(storage.join(base, directory, "meta/CDC.index"), f"{name}\n".encode())
                written.append({"uri": storage.join(base, directory, name), "topic": f"{database}.{table}",
                                "partition": 0, "first_offset": offset(index - 1, 1),
                                "last_offset": offset(index - 1, len(lines)), "records": len(lines),
                                "events": len(lines), "rows": len(lines), "bytes": len(data)})
                lines = []

            for _, event in group:
                if directory is None:
                    version = max(1, (event["commit_ts"] or 1) - 1)
                    directory, lines = f"{segment(database)}/{segment(table)}/{version}", []
                for message in codec.encode([event], topic=f"{database}.{table}", partition=0):
                    lines.append(message.value)
                if len(lines) >= max_records:
                    flush()
            flush()
        if written:
            yield pa.RecordBatch.from_pylist(written, schema=WRITTEN_ARROW_SCHEMA)

    return run
