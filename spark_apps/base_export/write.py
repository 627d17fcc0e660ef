"""Writing base exports as their producers write them, from tables of canonical values
(cdc_codecs.events): used by `cdc-replay generate --base-export` to put a Dumpling export or a
mysqldump file beside a generated mid-stream archive.

The shapes follow the producers' sources, the same facts tests/fixtures/base_exports spell out
byte by byte (its README.md names the lines; docs/base-exports.md the formats):

* Dumpling (pingcap/tidb dumpling/export, pkg/dumpformat): `metadata`, `{db}-schema-create.sql`,
  `{db}.{table}-schema.sql` (`/*!40101 SET NAMES binary*/;` and SHOW CREATE), data files
  `{db}.{table}.{%09d}.sql|.csv`, names `%XX`-escaped, `--compress` suffixes. SQL: every file
  starts with the SET NAMES line, `INSERT INTO `t` VALUES\\n` rows joined by `,\\n`, a new
  statement once the statement reaches `--statement-size` bytes; numbers bare, BINARY/VARBINARY/
  BLOB/BIT as `x'..'`, the rest (YEAR, temporal, ENUM/SET labels, JSON) quoted with backslash
  escapes. CSV: a quoted header, numbers bare, NULL `\\N`, everything else in `"` (binary raw),
  NUL/CR/LF/backslash/`"` backslash-escaped, lines ended by `\\r\\n`.
* mysqldump (client/mysqldump.cc `dump_table`): header, the commented `CHANGE REPLICATION
  SOURCE TO` position, CREATE DATABASE / USE, per table DROP / CREATE / LOCK TABLES, extended
  INSERTs cut at `--net-buffer-length` (one line each), numbers (YEAR too) bare, binary and BIT
  `_binary '..'` with mysql_real_escape_string's escapes, an empty value `''`.

Nothing here is read back by this module's readers' code: rows.py and discover.py share no
code with it, so a generated export read back equal checks both sides.
"""

from __future__ import annotations

import dataclasses
import gzip
import re

from cdc_codecs.mysql_types import parse_type

SET_NAMES = b"/*!40101 SET NAMES binary*/;\n"
# MySQL's string-literal escapes (Dumpling escapeBackslashSQL, mysql_real_escape_string)
SQL_ESCAPES = {0: b"\\0", 10: b"\\n", 13: b"\\r", 92: b"\\\\", 39: b"\\'", 34: b'\\"', 26: b"\\Z"}
# Dumpling's CSV escapes (escapeBackslashCSV): not \x1a, not the single quote
CSV_ESCAPES = {0: b"\\0", 13: b"\\r", 10: b"\\n", 92: b"\\\\", 34: b'\\"'}
_NUMBER = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "float", "double", "real",
           "decimal", "numeric", "bool", "boolean"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"}
SUFFIXES = {None: "", "gzip": ".gz", "zstd": ".zst", "snappy": ".snappy"}
KINDS = ("dumpling-sql", "dumpling-csv", "mysqldump")


@dataclasses.dataclass
class Table:
    """One table of an export: its columns and rows as canonical values."""

    database: str
    name: str
    columns: list  # [(name, mysql type text, is primary key)]
    rows: list  # [{column: canonical bytes or None}]
    defaults: dict = dataclasses.field(default_factory=dict)  # {column: default text}


def _escape(value: bytes, table: dict) -> bytes:
    if not any(b in table for b in value):
        return value
    return b"".join(table.get(b, bytes([b])) for b in value)


def _literal(type_text: str, value: bytes) -> tuple[str, bytes]:
    """(kind, bytes as the producer holds them): kind number | binary | string; ENUM/SET
    indexes become their labels, BIT its bytes."""
    t = parse_type(type_text)
    if t.base in _NUMBER:
        return "number", value
    if t.base == "year":
        return "year", value
    if t.base == "bit":
        width = int(t.params[0]) if t.params else 1
        return "binary", int(value).to_bytes((width + 7) // 8, "big")
    if t.base in _BINARY:
        return "binary", value
    if t.base == "enum" and t.labels:
        index = int(value)
        return "string", (t.labels[index - 1] if index else "").encode()
    if t.base == "set" and t.labels:
        mask = int(value)
        return "string", ",".join(label for i, label in enumerate(t.labels) if mask >> i & 1).encode()
    return "string", value


def dumpling_sql_value(type_text: str, value: bytes | None) -> bytes:
    if value is None:
        return b"NULL"
    kind, data = _literal(type_text, value)
    if kind == "number":
        return data
    if kind == "binary":
        return b"x'" + data.hex().encode() + b"'"
    return b"'" + _escape(data, SQL_ESCAPES) + b"'"


def dumpling_csv_value(type_text: str, value: bytes | None) -> bytes:
    if value is None:
        return b"\\N"
    kind, data = _literal(type_text, value)
    if kind == "number":
        return data
    return b'"' + _escape(data, CSV_ESCAPES) + b'"'


def mysqldump_value(type_text: str, value: bytes | None) -> bytes:
    if value is None:
        return b"NULL"
    kind, data = _literal(type_text, value)
    if not data:
        return b"''"
    if kind in ("number", "year"):
        return data
    return (b"_binary '" if kind == "binary" else b"'") + _escape(data, SQL_ESCAPES) + b"'"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def show_create_table(table: Table, server: str) -> str:
    """SHOW CREATE TABLE as TiDB (`server="tidb"`: display widths, `DEFAULT NULL` on every
    nullable column, the clustered-index comment) or MySQL 8.0 prints it."""
    lines = []
    for name, type_text, pk in table.columns:
        t = parse_type(type_text)
        shown = type_text.lower()
        if server == "tidb":
            width = {"int": "11", "bigint": "20", "year": "4"}.get(t.base)
            if width and not t.params:
                shown = re.sub(rf"^{t.base}\b", f"{t.base}({'20' if t.base == 'bigint' else width})", shown)
        if pk:
            attrs = " NOT NULL"
        elif name in table.defaults:
            attrs = f" DEFAULT '{table.defaults[name]}'"
        elif server == "mysql" and t.base in ("text", "blob", "json"):
            attrs = ""
        else:
            attrs = " DEFAULT NULL"
        lines.append(f"  {_quote(name)} {shown}{attrs}")
    keys = [name for name, _, pk in table.columns if pk]
    if keys:
        clustered = " /*T![clustered_index] CLUSTERED */" if server == "tidb" else ""
        lines.append(f"  PRIMARY KEY ({','.join(_quote(k) for k in keys)}){clustered}")
    collation = "utf8mb4_bin" if server == "tidb" else "utf8mb4_0900_ai_ci"
    return (f"CREATE TABLE {_quote(table.name)} (\n" + ",\n".join(lines)
            + f"\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation}")


# ----------------------------------------------------------------------------- Dumpling

def dumpling_name(name: str) -> str:
    """A database or table name as Dumpling's file names write it (control characters and
    `%"*./:<>?\\|` as %XX)."""
    return "".join(f"%{ord(c):02X}" if ord(c) < 32 or c in '%"*./:<>?\\|' else c for c in name)


def compress(data: bytes, method: str | None) -> bytes:
    if method is None:
        return data
    if method == "gzip":
        return gzip.compress(data, mtime=0)
    if method == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    if method == "snappy":  # the framed format (snappy.NewBufferedWriter)
        import snappy

        return snappy.StreamCompressor().compress(data)
    raise ValueError(f"compression {method!r} is not gzip, zstd or snappy")


def dumpling_metadata(position: dict) -> bytes:
    """`metadata` (dumpling/export/metadata.go): `{"tso": n}` from TiDB (Log `tidb-binlog`),
    `{"log_file": f, "log_pos": n}` from MySQL (then also the reading after the connection
    pool was established)."""
    if "tso" in position:
        status = f"SHOW MASTER STATUS:\n\tLog: tidb-binlog\n\tPos: {position['tso']}\n\tGTID:\n\n"
    else:
        one = f"\tLog: {position['log_file']}\n\tPos: {position['log_pos']}\n\tGTID:{position.get('gtid', '')}\n\n"
        status = "SHOW MASTER STATUS:\n" + one + "SHOW MASTER STATUS: /* AFTER CONNECTION POOL ESTABLISHED */\n" + one
    return (f"Started dump at: {position.get('started', '2026-01-01 00:00:00')}\n{status}"
            f"Finished dump at: {position.get('finished', '2026-01-01 00:00:01')}\n").encode()


def dumpling_sql_file(table: Table, rows: list, statement_size: int) -> bytes:
    """One `.sql` data file: SET NAMES, then INSERTs cut once a statement holds
    `statement_size` bytes of rows (pkg/dumpformat/sqlfile WriteInsert)."""
    types = [t for _, t, _ in table.columns]
    out = [SET_NAMES]
    head = f"INSERT INTO {_quote(table.name)} VALUES\n".encode()
    size = 0
    for i, row in enumerate(rows):
        if size == 0:
            out.append(head)
        text = b"(" + b",".join(dumpling_sql_value(t, row.get(n)) for (n, _, _), t in zip(table.columns, types)) + b")"
        out.append(text)
        size += len(text) + 2
        switch = size >= statement_size
        out.append(b",\n" if i + 1 < len(rows) and not switch else b";\n")
        if switch:
            size = 0
    return b"".join(out)


def dumpling_csv_file(table: Table, rows: list) -> bytes:
    """One `.csv` data file with Dumpling's default dialect and its header."""
    lines = [b",".join(b'"' + _escape(n.encode(), CSV_ESCAPES) + b'"' for n, _, _ in table.columns)]
    for row in rows:
        lines.append(b",".join(dumpling_csv_value(t, row.get(n)) for n, t, _ in table.columns))
    return b"".join(line + b"\r\n" for line in lines)


def dumpling_files(tables: list, position: dict, file_type: str, *, rows_per_file: int = 50,
                   statement_size: int = 1000, compression: str | None = None,
                   server: str = "tidb") -> dict:
    """{file name: bytes} of a Dumpling export (`--filetype sql|csv --rows N
    --statement-size S --compress C`): a table is split into chunk files of `rows_per_file`
    rows; a table without rows has no data file, as Dumpling writes none."""
    suffix = SUFFIXES[compression]
    files = {"metadata": dumpling_metadata(position)}
    databases = sorted({t.database for t in tables})
    for db in databases:
        files[f"{dumpling_name(db)}-schema-create.sql{suffix}"] = compress(
            SET_NAMES + f"CREATE DATABASE {_quote(db)} /*!40100 DEFAULT CHARACTER SET utf8mb4 */;\n".encode(),
            compression)
    for table in tables:
        base = f"{dumpling_name(table.database)}.{dumpling_name(table.name)}"
        files[f"{base}-schema.sql{suffix}"] = compress(
            SET_NAMES + (show_create_table(table, server) + ";\n").encode(), compression)
        for chunk, start in enumerate(range(0, len(table.rows), max(1, rows_per_file))):
            rows = table.rows[start:start + rows_per_file]
            data = (dumpling_sql_file(table, rows, statement_size) if file_type == "sql"
                    else dumpling_csv_file(table, rows))
            files[f"{base}.{chunk:09d}.{file_type}{suffix}"] = compress(data, compression)
    return files


# ----------------------------------------------------------------------------- mysqldump

_MYSQLDUMP_HEAD = """-- MySQL dump 10.13  Distrib 8.0.36, for Linux (x86_64)
--
-- Host: 127.0.0.1    Database: {db}
-- ------------------------------------------------------
-- Server version\t8.0.36

/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET @OLD_CHARACTER_SET_RESULTS=@@CHARACTER_SET_RESULTS */;
/*!40101 SET @OLD_COLLATION_CONNECTION=@@COLLATION_CONNECTION */;
/*!50503 SET NAMES utf8mb4 */;
/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */;
/*!40103 SET TIME_ZONE='+00:00' */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;

--
-- Position to start replication or point-in-time recovery from
--

-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='{log_file}', SOURCE_LOG_POS={log_pos};

--
-- Current Database: {qdb}
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ {qdb} /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_ai_ci */ /*!80016 DEFAULT ENCRYPTION='N' */;

USE {qdb};
"""
_MYSQLDUMP_TABLE = """
--
-- Table structure for table {qt}
--

DROP TABLE IF EXISTS {qt};
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!50503 SET character_set_client = utf8mb4 */;
{create};
/*!40101 SET character_set_client = @saved_cs_client */;

--
-- Dumping data for table {qt}
--

LOCK TABLES {qt} WRITE;
/*!40000 ALTER TABLE {qt} DISABLE KEYS */;
"""
_MYSQLDUMP_TABLE_END = """/*!40000 ALTER TABLE {qt} ENABLE KEYS */;
UNLOCK TABLES;
"""
_MYSQLDUMP_FOOT = """/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;

/*!40101 SET SQL_MODE=@OLD_SQL_MODE */;
/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */;
/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
/*!40101 SET CHARACTER_SET_CLIENT=@OLD_CHARACTER_SET_CLIENT */;
/*!40101 SET CHARACTER_SET_RESULTS=@OLD_CHARACTER_SET_RESULTS */;
/*!40101 SET COLLATION_CONNECTION=@OLD_COLLATION_CONNECTION */;
/*!40111 SET SQL_NOTES=@OLD_SQL_NOTES */;

-- Dump completed on 2026-01-01  0:00:01
"""


def mysqldump_inserts(table: Table, net_buffer_length: int) -> bytes:
    """The extended INSERT lines of one table (mysqldump.cc dump_table: a row joins the
    current line while the line stays below --net-buffer-length)."""
    pattern = f"INSERT INTO {_quote(table.name)} VALUES ".encode()
    out, total, started = [], 0, False
    for row in table.rows:
        text = b"(" + b",".join(mysqldump_value(t, row.get(n)) for n, t, _ in table.columns) + b")"
        length = 2 + len(text)
        if started and total + length < net_buffer_length:
            total += length
            out.append(b"," + text)
        else:
            if started:
                out.append(b";\n")
            started = True
            out.append(pattern + text)
            total = length + len(pattern) + 2
    if started:
        out.append(b";\n")
    return b"".join(out)


def mysqldump_file(tables: list, position: dict, *, net_buffer_length: int = 1024 * 1024 - 1025) -> bytes:
    """One file of `mysqldump --single-transaction --source-data=2 --databases db` (MySQL
    8.0.36) for tables of one database; `position`: {"log_file", "log_pos"}."""
    databases = {t.database for t in tables}
    if len(databases) != 1:
        raise ValueError(f"one mysqldump file holds one database here, not {sorted(databases)}")
    db = databases.pop()
    out = [_MYSQLDUMP_HEAD.format(db=db, qdb=_quote(db), **position).encode()]
    for table in tables:
        qt = _quote(table.name)
        out.append(_MYSQLDUMP_TABLE.format(qt=qt, create=show_create_table(table, "mysql")).encode())
        out.append(mysqldump_inserts(table, net_buffer_length))
        out.append(_MYSQLDUMP_TABLE_END.format(qt=qt).encode())
    out.append(_MYSQLDUMP_FOOT.encode())
    return b"".join(out)
