"""Base exports: a full dump (Dumpling, mysqldump) as the starting point of a replay.

`discover` (driver) reads the export's position, schemas and file list; `rows` (tasks)
reads a data file's rows as canonical values; `split` cuts a large file into byte ranges,
one task each. Not wired into the replay yet
(docs/base-exports.md says what is and is not built).
"""

from .discover import BaseExport, DataFile, ExportPosition, ExportRefused, discover
from .rows import Converter, CsvDialect, ExportFormatError, pieces_of, read_csv_rows_at, read_sql_rows
from .split import Part, part_rows, parts

__all__ = ["BaseExport", "Converter", "CsvDialect", "DataFile", "ExportFormatError", "ExportPosition",
           "ExportRefused", "Part", "discover", "part_rows", "parts", "pieces_of", "read_csv_rows_at",
           "read_sql_rows"]
