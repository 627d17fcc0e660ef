"""Base exports: a full dump (Dumpling, mysqldump) as the starting point of a replay.

`discover` (driver) reads the export's position, schemas and file list; `rows` (tasks)
reads one data file's rows as canonical values. Not wired into the replay yet
(docs/base-exports.md says what is and is not built).
"""

from .discover import BaseExport, DataFile, ExportPosition, ExportRefused, discover
from .rows import Converter, CsvDialect, ExportFormatError, pieces_of, read_csv_rows, read_sql_rows

__all__ = ["BaseExport", "Converter", "CsvDialect", "DataFile", "ExportFormatError", "ExportPosition",
           "ExportRefused", "discover", "pieces_of", "read_csv_rows", "read_sql_rows"]
