"""A base export's rows in Spark: one task per data file (the driver only lists the files and
passes each table's columns); every row keeps its file and ordinal, so nothing is lost or
counted twice. Splitting one large file across tasks is a later step."""

from __future__ import annotations

from .discover import BaseExport
from .rows import Converter, CsvDialect, ExportFormatError, read_csv_rows, read_sql_rows

ROW_SCHEMA = "database string, `table` string, file string, ordinal long, `values` map<string, binary>"


def _file_rows(task: tuple):
    """Rows of one data file, read in the task: (database, table, file, ordinal, values)."""
    from spark_apps import storage

    data_file, tables, csv_options = task
    dialect = CsvDialect(**csv_options) if data_file.format == "csv" else None
    converters = {key: Converter(columns, dialect.binary if dialect else "raw") for key, columns in tables.items()}
    pieces = storage.iter_pieces(data_file.uri)
    if data_file.format == "csv":
        converter = converters.get((data_file.database.lower(), data_file.table.lower()))
        if converter is None:
            raise ExportFormatError(f"{data_file.uri}: no schema for {data_file.database}.{data_file.table}")
        rows = ((data_file.database, data_file.table, values) for values in read_csv_rows(pieces, converter, dialect))
    else:
        rows = read_sql_rows(pieces, converters, data_file.database or None,
                             csv_options.get("escape_backslash", True))
    for ordinal, (database, table, values) in enumerate(rows):
        yield database, table, data_file.uri, ordinal, values


def export_rows(spark, export: BaseExport, csv_options: dict | None = None):
    """DataFrame(database, table, file, ordinal, values: column -> canonical bytes) of every
    row of the export's data files. `csv_options`: rows.CsvDialect's arguments (Dumpling's
    --csv-* flags when they were not the defaults; `escape_backslash` applies to SQL too)."""
    history = export.schema_history()
    tables = {key: [(c.name, c.mysql_type) for c in schema.columns] for key, schema in history.tables.items()}
    tasks = [(f, tables, dict(csv_options or {})) for f in export.files]
    rdd = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).flatMap(_file_rows)
    return spark.createDataFrame(rdd, ROW_SCHEMA)
