"""Generated columns in a Dumpling export (issue 30): Dumpling selects only the columns that
are not generated and then names them — `INSERT INTO `t` (`id`,`a`,`b`) VALUES` in SQL
(dumpling/export/sql.go `buildSelectField`: a column list whenever a STORED/VIRTUAL GENERATED
column exists, or under --complete-insert), the header in CSV. The values must land in their
named columns, never shifted by position, in the batch readers and the reference ones alike;
a headerless CSV of such a table (one value fewer than the CREATE TABLE's columns) fails
loudly. No Spark."""

from __future__ import annotations

import pytest

from spark_apps.base_export import Converter, CsvDialect, ExportFormatError
from spark_apps.base_export.rows import (read_csv_rows_at, read_csv_rows_at_reference, read_sql_rows_at,
                                         read_sql_rows_at_reference)

# CREATE TABLE t (id INT, a VARCHAR(8), g INT GENERATED ALWAYS AS (id * 2) VIRTUAL,
#                 b VARCHAR(8), s INT GENERATED ALWAYS AS (id + 1) STORED, c VARBINARY(4))
COLUMNS = [("id", "int"), ("a", "varchar(8)"), ("g", "int"), ("b", "varchar(8)"), ("s", "int"),
           ("c", "varbinary(4)")]

EXPECTED = [
    {"id": b"1", "a": b"x'1", "b": b"y", "c": b"\x00\xff"},
    {"id": b"2", "a": None, "b": b"", "c": None},
    {"id": b"3", "a": b"a,b", "b": b"line\nend", "c": b""},
]

# as Dumpling writes them (SQL: sql_type.go escapeBackslashSQL, binary as x'..'; CSV: strings
# and binary enclosed in ", numbers bare, NULL \N, CRLF, a header of the selected columns)
SQL = (b"/*!40101 SET NAMES binary*/;\n/*T![placement] SET PLACEMENT_CHECKS = 0*/;\n"
       b"INSERT INTO `t` (`id`,`a`,`b`,`c`) VALUES\n"
       b"(1,'x\\'1','y',x'00ff'),\n(2,NULL,'',NULL),\n(3,'a,b','line\\nend',x'');\n")
CSV = (b'"id","a","b","c"\r\n1,"x\'1","y","\x00\xff"\r\n'.replace(b"\x00", b"\\0")
       + b'2,\\N,"",\\N\r\n3,"a,b","line\\nend",""\r\n')


def pieces(data: bytes, size: int):
    return (data[i:i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("read", [read_sql_rows_at, read_sql_rows_at_reference])
@pytest.mark.parametrize("size", [1, 7, 1 << 20])
def test_sql_column_list_skips_generated_columns(read, size):
    tables = {("db", "t"): Converter(COLUMNS)}
    rows = [(db, table, values) for _, db, table, values in read(pieces(SQL, size), tables, "db")]
    assert rows == [("db", "t", row) for row in EXPECTED]
    assert all("g" not in values and "s" not in values for _, _, values in rows)


@pytest.mark.parametrize("read", [read_csv_rows_at, read_csv_rows_at_reference])
@pytest.mark.parametrize("size", [1, 7, 1 << 20])
def test_csv_header_skips_generated_columns(read, size):
    rows = [values for _, values in read(pieces(CSV, size), Converter(COLUMNS), CsvDialect())]
    assert rows == EXPECTED


@pytest.mark.parametrize("read", [read_csv_rows_at, read_csv_rows_at_reference])
def test_headerless_csv_with_generated_columns_fails_loudly(read):
    """--no-header: nothing names the columns, and the values are fewer than the table's."""
    body = CSV.split(b"\r\n", 1)[1]
    with pytest.raises(ExportFormatError, match="4 values for 6 columns"):
        list(read(pieces(body, 1 << 20), Converter(COLUMNS), CsvDialect(header=False)))
