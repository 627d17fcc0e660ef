"""A base export's rows in Spark: one task per part of a data file — the whole file, or a
byte range of a large one (split.py) — while the driver only lists the files and passes each
table's columns. Every row keeps its file and ordinal (its byte offset in the file), so
nothing is lost or counted twice and a rerun gives the same rows however the files split."""

from __future__ import annotations

from .discover import BaseExport
from .rows import Converter, CsvDialect
from .split import Part, part_rows, parts, split_bytes

ROW_SCHEMA = "database string, `table` string, file string, ordinal long, `values` map<string, binary>"


def _part_rows(task: tuple):
    """Rows of one part, read in the task: (database, table, file, ordinal, values)."""
    part, tables, csv_options = task
    dialect = CsvDialect(**csv_options) if part.file.format == "csv" else None
    converters = {key: Converter(columns, dialect.binary if dialect else "raw") for key, columns in tables.items()}
    for database, table, ordinal, values in part_rows(part, converters, dialect,
                                                      csv_options.get("escape_backslash", True)):
        yield database, table, part.file.uri, ordinal, values


def export_parts(export: BaseExport, csv_options: dict | None = None, split: int | None = None) -> list[Part]:
    """The tasks' parts of the export's data files (`split`: split.split_bytes)."""
    options = dict(csv_options or {})
    dialect = CsvDialect(**options) if any(f.format == "csv" for f in export.files) else None
    return parts(export.files, split_bytes(split), options.get("escape_backslash", True), dialect)


def export_rows(spark, export: BaseExport, csv_options: dict | None = None, *, split: int | None = None):
    """DataFrame(database, table, file, ordinal, values: column -> canonical bytes) of every
    row of the export's data files. `csv_options`: rows.CsvDialect's arguments (Dumpling's
    --csv-* flags when they were not the defaults; `escape_backslash` applies to SQL too).
    `split`: the byte size of the ranges a large uncompressed file is read in, one task each
    (default $CDC_REPLAY_EXPORT_SPLIT_BYTES or 128 MiB; 0: one task per file)."""
    history = export.schema_history()
    tables = {key: [(c.name, c.mysql_type) for c in schema.columns] for key, schema in history.tables.items()}
    options = dict(csv_options or {})
    tasks = [(part, tables, options) for part in export_parts(export, options, split)]
    rdd = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).flatMap(_part_rows)
    # the rows are built here with the schema's types (str, int, {str: bytes or None}): checking
    # each value again in Python cost the tasks about as much as reading it
    return spark.createDataFrame(rdd, ROW_SCHEMA, verifySchema=False)
