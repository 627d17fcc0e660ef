"""Driver-side discovery of a base export: its producer, its position, its schemas and the
list of its data files. Only small files are read here (Dumpling's `metadata` and schema
files); rows are read in tasks (spark_apps.base_export.rows).

Dumpling (pingcap/tidb dumpling/export; docs/base-exports.md):

* `metadata`: `Started dump at: ...`, then `SHOW MASTER STATUS:` (or `SHOW BINARY LOG
  STATUS:` for newer servers) with tab-indented `Log: <file>`, `Pos: <pos>`, `GTID:<set>`
  lines. From TiDB, `Log` is `tidb-binlog` and `Pos` is the snapshot TSO; from MySQL it is the
  binlog file and offset. A `SHOW SLAVE STATUS:` section (the dumped server's own source)
  is not the export's position and is ignored. Never compressed.
* `{db}-schema-create.sql`, `{db}.{table}-schema.sql`: `/*!40101 SET NAMES binary*/;` and the
  CREATE statement; views, sequences, triggers and routines (`-schema-view.sql`,
  `-schema-sequence.sql`, `-schema-triggers.sql`, `-schema-post.sql`) hold no rows and are
  listed as skipped.
* data `{db}.{table}.{index}.sql|csv`: index `%09d` (chunk), or `%09d%04d` with `--rows` and
  `--filesize` together. In names, control characters and `%"*./:<>?\\|` are written `%XX`
  (and `-schema` as `%2Dschema`), so the dots split a name unambiguously.
* `--compress gzip|snappy|zstd` adds `.gz`, `.snappy` (framed), `.zst` to every file but
  `metadata`.

mysqldump (MySQL's client/mysqldump.cc): one file (or one per database): a `-- MySQL dump`
header, with `--source-data=2` (`--master-data=2` before 8.0.26) the comment
`-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000002', SOURCE_LOG_POS=157;`
(`-- CHANGE MASTER TO MASTER_LOG_FILE='...', MASTER_LOG_POS=...;` in the older form, and
without `-- ` with `=1`), then per database `CREATE DATABASE`, `USE`, and per table
`CREATE TABLE` followed by its INSERTs. Every INSERT is one line (newlines in values are
escaped), so the schema statements are found by reading every line that is not an INSERT.
That read is a streaming pass over the whole file on the driver (an INSERT line is passed
over from its first bytes); it also notes each `USE`'s byte offset, for the tasks that read
the file in byte ranges (split.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from spark_apps import storage

from .rows import Converter, ExportFormatError


class ExportRefused(ValueError):
    """A base export that cannot be used: the one-line reason."""


@dataclasses.dataclass(frozen=True)
class ExportPosition:
    """Where the export's snapshot sits: a TiDB TSO, or a MySQL binlog file and offset."""

    kind: str  # "tso" | "binlog"
    tso: int | None = None
    log_file: str | None = None
    log_pos: int | None = None
    gtid: str | None = None

    def describe(self) -> str:
        if self.kind == "tso":
            return f"TSO {self.tso}"
        return f"binlog {self.log_file}:{self.log_pos}" + (f" (GTID {self.gtid})" if self.gtid else "")

    def log_sequence(self) -> int:
        """The binlog file's sequence number (`mysql-bin.000003` -> 3), as Canal positions use it."""
        m = re.search(r"\.(\d+)$", self.log_file or "")
        if not m:
            raise ExportRefused(f"binlog file name {self.log_file!r} has no .NNNNNN sequence number")
        return int(m.group(1))


@dataclasses.dataclass(frozen=True)
class DataFile:
    uri: str
    database: str  # mysqldump: the database its header names (before any USE), or ""
    table: str  # "" for a mysqldump file (its INSERTs name the tables)
    format: str  # "sql" | "csv" | "mysqldump"
    index: str  # Dumpling's file index text ("" for mysqldump)
    size: int
    # mysqldump: (byte offset, database) of each USE, in file order: a task reading part of
    # the file starts in the database of the last USE before its first statement
    uses: tuple = ()


@dataclasses.dataclass
class BaseExport:
    producer: str  # "dumpling" | "mysqldump"
    uri: str
    position: ExportPosition
    # (database, statement) in the export's order: CREATE DATABASE / CREATE TABLE
    statements: list
    files: list  # DataFile, sorted by URI
    skipped: list  # (uri, why) of files that hold no rows of a base table
    # the session zone TIMESTAMP values are written in, when the export states it: mysqldump's
    # `/*!40103 SET TIME_ZONE='+00:00' */` (--tz-utc, its default); Dumpling writes none (its
    # session's time_zone: the server's default unless --params time_zone=...)
    time_zone: str | None = None

    def initial_schemas(self) -> str:
        """The schemas as SQL text for spark_apps.ddl.SchemaHistory (the replay's `--schema`)."""
        parts, current = [], None
        for database, statement in self.statements:
            if database and database != current:
                parts.append(f"USE `{database.replace('`', '``')}`;")
                current = database
            parts.append(statement.rstrip().rstrip(";") + ";")
        return "\n".join(parts) + "\n"

    def schema_history(self):
        from spark_apps.ddl import SchemaHistory

        return SchemaHistory(self.initial_schemas())

    def generated_columns(self) -> dict:
        """{(database, table) lower-cased: [(column, "stored" | "virtual")]} of the tables with
        generated columns. No export holds their values: Dumpling selects only the other
        columns and names them (dumpling/export/sql.go `buildSelectField`), so the base rows
        lack them, while TiCDC's row events carry the STORED ones (tiflow cdc/model
        `IsColCDCVisible`: only virtual generated columns are left out)."""
        import sqlglot
        from sqlglot import exp

        found = {}
        for database, statement in self.statements:
            try:
                tree = sqlglot.parse_one(statement, read="mysql")
            except sqlglot.errors.ParseError:
                continue  # schema_history() refuses what does not parse
            if not isinstance(tree, exp.Create) or (tree.args.get("kind") or "").upper() != "TABLE":
                continue
            table = tree.find(exp.Table)
            columns = [(c.name, "stored" if k.kind.args.get("persisted") else "virtual")
                       for c in tree.find_all(exp.ColumnDef) for k in c.constraints
                       if isinstance(k.kind, exp.ComputedColumnConstraint)]
            if columns and table is not None:
                found[((table.db or database or "").lower(), table.name.lower())] = columns
        return found

    def converters(self, binary: str = "raw") -> dict:
        """{(database, table) lower-cased: rows.Converter} for every table of the export."""
        history = self.schema_history()
        return {key: Converter([(c.name, c.mysql_type) for c in schema.columns], binary)
                for key, schema in history.tables.items()}


_ESCAPED = re.compile(r"%([0-9A-Fa-f]{2})")
_COMPRESSION = r"(\.gz|\.snappy|\.zst)?"
_DATA = re.compile(r"^([^.]+)\.([^.]+)\.(\d+)\.(sql|csv)" + _COMPRESSION + "$")
_TABLE_SCHEMA = re.compile(r"^([^.]+)\.([^.]+)-schema\.sql" + _COMPRESSION + "$")
_DB_SCHEMA = re.compile(r"^([^.]+)-schema-create\.sql" + _COMPRESSION + "$")
_VIEW = re.compile(r"^([^.]+)\.([^.]+)-schema-view\.sql" + _COMPRESSION + "$")
_NO_ROWS = re.compile(r"-schema-(?:view|sequence|triggers|post)\.sql" + _COMPRESSION + "$|-placement-policy-create\\.sql")


def unescape_name(text: str) -> str:
    """A database or table name from a Dumpling file name (`%XX` back to the byte)."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text)


def discover(uri: str) -> BaseExport:
    """The export at `uri` (a local path or s3://): Dumpling if it holds a `metadata` file,
    else mysqldump file(s)."""
    objects = storage.list_objects(uri)
    if not objects:
        raise ExportRefused(f"--base-export {uri}: no files there")
    root = storage.normalize(uri)
    names = {storage.relative(o.uri, root) if o.uri != root else o.uri.rsplit("/", 1)[-1]: o for o in objects}
    if "metadata" in names:
        return _dumpling(root, names)
    return _mysqldump(root, objects)


def _read_text(uri: str) -> str:
    return b"".join(storage.iter_pieces(uri)).decode("utf-8")


# ----------------------------------------------------------------------------- Dumpling

def parse_dumpling_metadata(text: str) -> ExportPosition:
    """The export's position from Dumpling's `metadata` text (the first `SHOW MASTER STATUS:`
    or `SHOW BINARY LOG STATUS:` section; a section marked AFTER CONNECTION POOL ESTABLISHED
    is Dumpling's second reading and must agree with the first)."""
    sections, current = [], None
    for line in text.splitlines():
        if line.startswith(("SHOW MASTER STATUS:", "SHOW BINARY LOG STATUS:", "SHOW SLAVE STATUS:")):
            current = {"header": line, "fields": {}}
            sections.append(current)
        elif current is not None and line.startswith("\t") and ":" in line:
            name, _, value = line.strip().partition(":")
            current["fields"][name.strip()] = value.strip()
        elif not line.strip():
            current = None
    own = [s for s in sections if not s["header"].startswith("SHOW SLAVE STATUS:")]
    if not own:
        raise ExportRefused("Dumpling metadata has no SHOW MASTER STATUS section: the export has no position "
                            "(was it dumped with --consistency none from a server without a binlog?)")
    fields = own[0]["fields"]
    log, pos, gtid = fields.get("Log", ""), fields.get("Pos", ""), fields.get("GTID") or None
    if not pos.isdigit():
        raise ExportRefused(f"Dumpling metadata Pos {pos!r} is not a number")
    if log == "tidb-binlog":
        return ExportPosition("tso", tso=int(pos))
    return ExportPosition("binlog", log_file=log, log_pos=int(pos), gtid=gtid)


def _statement_of(text: str) -> str:
    """The CREATE statement of a Dumpling schema file (after its `SET NAMES` line)."""
    body = re.sub(r"^\s*/\*!40101 SET NAMES \w+\s*\*/;\s*", "", text)
    return body.strip()


def _dumpling(root: str, names: dict) -> BaseExport:
    position = parse_dumpling_metadata(_read_text(names["metadata"].uri))
    db_statements, table_statements, files, skipped = [], [], [], []
    for name in sorted(names):
        obj = names[name]
        base = name.rsplit("/", 1)[-1]
        if name == "metadata":
            continue
        if m := _DB_SCHEMA.match(base):
            db_statements.append((None, _statement_of(_read_text(obj.uri))))
        elif m := _TABLE_SCHEMA.match(base):
            table_statements.append((unescape_name(m.group(1)), _statement_of(_read_text(obj.uri))))
        elif m := _DATA.match(base):
            files.append(DataFile(obj.uri, unescape_name(m.group(1)), unescape_name(m.group(2)), m.group(4),
                                  m.group(3), obj.size))
        elif _NO_ROWS.search(base):
            skipped.append((obj.uri, "holds no rows of a base table"))
        else:
            skipped.append((obj.uri, "not a file Dumpling writes"))
    views = {(unescape_name(m.group(1)).lower(), unescape_name(m.group(2)).lower())
             for n in names if (m := _VIEW.match(n.rsplit("/", 1)[-1]))}
    # a view's -schema.sql holds a placeholder CREATE TABLE (writer.go WriteViewMeta)
    table_statements = [(db, stmt) for db, stmt in table_statements if (db.lower(), _created_table(stmt)) not in views]
    described = {(db.lower(), _created_table(stmt)) for db, stmt in table_statements}
    for f in files:
        if (f.database.lower(), f.table.lower()) not in described:
            raise ExportRefused(f"{f.uri}: rows of {f.database}.{f.table} but no {f.database}.{f.table}-schema.sql "
                                "(dumped with --no-schemas?)")
    formats = {f.format for f in files}
    if len(formats) > 1:
        raise ExportRefused("the export mixes .sql and .csv data files")
    return BaseExport("dumpling", root, position, db_statements + table_statements, files, skipped)


def _created_table(statement: str) -> str:
    m = re.search(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:`(?:[^`]|``)*`\s*\.\s*)?`((?:[^`]|``)*)`",
                  statement, re.I)
    return m.group(1).replace("``", "`").lower() if m else ""


# ----------------------------------------------------------------------------- mysqldump

_SOURCE = re.compile(
    r"^(?:--\s*)?CHANGE\s+(?:REPLICATION\s+SOURCE|MASTER)\s+TO\s+(?:SOURCE|MASTER)_LOG_FILE\s*=\s*'([^']*)'\s*,"
    r"\s*(?:SOURCE|MASTER)_LOG_POS\s*=\s*(\d+)", re.I)
_GTID_PURGED = re.compile(r"SET\s+@@GLOBAL\.GTID_PURGED\s*=\s*(?:/\*!80000\s*'\+'\s*\*/\s*)?'([^']*)'", re.I)


def scan_mysqldump(lines, uses: list | None = None) -> tuple[ExportPosition | None, list, str]:
    """(position or None, [(database, statement)], the header's database or "") from a
    mysqldump's lines (bytes, without terminators): the CHANGE ... TO comment and the CREATE
    DATABASE / USE / CREATE TABLE statements; INSERT lines are passed over. Lines from
    `lines_at` carry their offsets: each USE's (offset, database) is appended to `uses`."""
    position, gtid = None, None
    statements, current, database = [], [], None
    header, header_db = True, ""
    for raw in lines:
        if raw.startswith((b"INSERT INTO ", b"REPLACE INTO ", b"INSERT IGNORE INTO ")):
            continue
        line = raw.decode("utf-8")
        if header:  # `-- Host: ...    Database: shop` names the database a dump without --databases holds
            if m := re.match(r"-- Host: .*\bDatabase: (.+)$", line):
                database = header_db = m.group(1).strip()
            header = line.startswith("--")
        if position is None and (m := _SOURCE.match(line)):
            position = (m.group(1), int(m.group(2)))
            continue
        if m := _GTID_PURGED.search(line):
            gtid = m.group(1)
        if not current and (not line.strip() or line.startswith("--")):
            continue
        if not current:
            first = getattr(raw, "offset", None)
        current.append(line)
        if line.rstrip().endswith(";"):
            statement = "\n".join(current).strip()
            current = []
            kind = _kind(statement)
            if kind == "use":
                database = re.match(r"USE\s+`((?:[^`]|``)*)`", statement, re.I).group(1).replace("``", "`")
                if uses is not None and first is not None:
                    uses.append((first, database))
            elif kind == "create database":
                m = re.search(r"`((?:[^`]|``)*)`", statement)
                database = m.group(1).replace("``", "`") if m else database
                statements.append((None, statement))
            elif kind == "create table":
                statements.append((database, statement))
    pos = None if position is None else ExportPosition("binlog", log_file=position[0], log_pos=position[1], gtid=gtid)
    return pos, statements, header_db


class _Line(bytes):
    offset = 0  # the line's first byte in the file


_INSERT_HEADS = (b"INSERT INTO ", b"REPLACE INTO ", b"INSERT IGNORE INTO ")


def lines_at(pieces) -> Iterator[_Line]:
    """The lines of a stream (without LF, a trailing CR dropped, as storage.iter_lines gives
    them), each with its byte offset. An INSERT line comes as its head only (its rows are
    read in tasks), so a huge extended INSERT is never held; another line is held up to
    --max-line-bytes, then cut."""
    limit = storage.settings().max_line_bytes
    base, offset, pending, skipping = 0, 0, b"", False  # base: the piece's first byte in the file

    def line():
        out = _Line(pending.rstrip(b"\r"))
        out.offset = offset
        return out

    for piece in pieces:
        at = 0
        while True:
            end = piece.find(b"\n", at)
            if not skipping:
                pending += piece[at:] if end < 0 else piece[at:end]
                if len(pending) > limit or (len(pending) >= 32 and pending.startswith(_INSERT_HEADS)):
                    pending, skipping = pending[:256], True
            if end < 0:
                break
            yield line()
            at = end + 1
            offset, pending, skipping = base + at, b"", False
        base += len(piece)
    if pending:
        yield line()


def _kind(statement: str) -> str:
    s = re.sub(r"^/\*!\d*\s*", "", statement).lstrip().upper()
    if s.startswith("USE "):
        return "use"
    if s.startswith("CREATE DATABASE") or s.startswith("CREATE SCHEMA"):
        return "create database"
    if s.startswith("CREATE TABLE"):
        return "create table"
    return "other"


def _mysqldump(root: str, objects: list) -> BaseExport:
    files, positions, statements, skipped, zones = [], set(), [], [], set()
    for obj in objects:
        first = next(storage.iter_pieces(obj.uri), b"")
        head = first[:200]
        if not head.startswith((b"-- MySQL dump", b"-- MariaDB dump")):
            skipped.append((obj.uri, "neither Dumpling's metadata nor a mysqldump header"))
            continue
        uses = []
        position, found, header_db = scan_mysqldump(lines_at(storage.iter_pieces(obj.uri)), uses)
        if position is None:
            raise ExportRefused(f"{obj.uri}: no CHANGE REPLICATION SOURCE TO / CHANGE MASTER TO line: dump it with "
                                "--source-data=2 (--master-data=2 before MySQL 8.0.26) so the export has a position")
        positions.add(position)
        zone = _MYSQLDUMP_ZONE.search(first[:_HEADER_BYTES])
        zones.add(zone.group(1).decode("ascii", "replace") if zone else None)
        statements.extend(found)
        files.append(DataFile(obj.uri, header_db, "", "mysqldump", "", obj.size, tuple(uses)))
    if not files:
        raise ExportRefused(f"--base-export {root}: no Dumpling metadata file and no mysqldump file")
    if len({(p.log_file, p.log_pos) for p in positions}) > 1:
        raise ExportRefused("the mysqldump files state different binlog positions: "
                            + ", ".join(sorted(p.describe() for p in positions)))
    zone = next(iter(zones)) if len(zones) == 1 else None
    return BaseExport("mysqldump", root, next(iter(positions)), statements, files, skipped, zone)


# mysqldump's header (client/mysqldump.cc write_header): with --tz-utc (the default)
# `/*!40103 SET TIME_ZONE='+00:00' */;`, before any table; --skip-tz-utc leaves it out
_MYSQLDUMP_ZONE = re.compile(rb"^/\*!40103 SET TIME_ZONE='([^']*)' \*/;", re.M)
_HEADER_BYTES = 4096


__all__ = ["BaseExport", "DataFile", "ExportFormatError", "ExportPosition", "ExportRefused", "discover",
           "lines_at", "parse_dumpling_metadata", "scan_mysqldump", "unescape_name"]
