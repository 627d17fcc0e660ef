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


# ----------------------------------------------------------------------------- in the replay's driver

SCHEMA = (b"/*!40101 SET NAMES binary*/;\nCREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n"
          b"  `a` varchar(8) DEFAULT NULL,\n  `g` int(11) GENERATED ALWAYS AS (`id` * 2) VIRTUAL,\n"
          b"  `b` varchar(8) DEFAULT NULL,\n  `s` int(11) GENERATED ALWAYS AS (`id` + 1) STORED NOT NULL,\n"
          b"  `c` varbinary(4) DEFAULT NULL,\n  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */\n"
          b") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;\n")
ONLY_GENERATED = (b"/*!40101 SET NAMES binary*/;\nCREATE TABLE `k` (\n"
                  b"  `x` int(11) GENERATED ALWAYS AS (1) VIRTUAL,\n  `y` int(11) GENERATED ALWAYS AS (2) STORED\n"
                  b") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;\n")


def dumpling_export(root, tables: dict, data: dict):
    """A Dumpling export of TiDB as it lays it out: metadata, schema files, data files."""
    (root / "metadata").write_text("Started dump at: 2026-11-20 10:15:02\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
                                   "\tPos: 453817264815718401\n\tGTID:\n\nFinished dump at: 2026-11-20 10:15:04\n")
    (root / "db-schema-create.sql").write_bytes(b"/*!40101 SET NAMES binary*/;\nCREATE DATABASE `db` "
                                                b"/*!40100 DEFAULT CHARACTER SET utf8mb4 */;\n")
    for name, text in tables.items():
        (root / f"db.{name}-schema.sql").write_bytes(text)
    for name, text in data.items():
        (root / name).write_bytes(text)
    return str(root)


@pytest.mark.parametrize("fmt, data", [("sql", SQL), ("csv", CSV)])
def test_export_with_generated_columns_is_read_and_named(tmp_path, caplog, fmt, data):
    from types import SimpleNamespace

    from spark_apps.base_export import discover, read_csv_rows_at, read_sql_rows
    from spark_apps.stages.base import read_export

    uri = dumpling_export(tmp_path, {"t": SCHEMA}, {f"db.t.000000000.{fmt}": data})
    export = discover(uri)
    assert export.generated_columns() == {("db", "t"): [("g", "virtual"), ("s", "stored")]}
    converter = export.converters()[("db", "t")]
    rows = (list(read_sql_rows(pieces(data, 5), {("db", "t"): converter}, "db")) if fmt == "sql"
            else [("db", "t", r) for _, r in read_csv_rows_at(pieces(data, 5), converter)])
    assert rows == [("db", "t", row) for row in EXPECTED]
    with caplog.at_level("WARNING", logger="cdc_replay"):
        assert read_export(SimpleNamespace(base_export=uri, protocol="open-protocol", protocol_option=[])) is not None
    [line] = [r.getMessage() for r in caplog.records if "generated columns" in r.getMessage()]
    assert "db.t (g virtual, s stored)" in line and "NULL" in line


def test_table_of_only_generated_columns_is_refused_in_one_line(tmp_path):
    """Dumpling writes such a table's rows as empty lines (CSV), which hold nothing to read."""
    from types import SimpleNamespace

    from spark_apps.stages.base import read_export
    from spark_apps.stages.context import ReplayError

    uri = dumpling_export(tmp_path, {"t": SCHEMA, "k": ONLY_GENERATED},
                          {"db.t.000000000.csv": CSV, "db.k.000000000.csv": b"\r\n\r\n\r\n\r\n"})
    with pytest.raises(ReplayError, match=r"db\.k has only generated columns \(x, y\)") as e:
        read_export(SimpleNamespace(base_export=uri, protocol="canal-json", protocol_option=[]))
    assert "\n" not in str(e.value)
