"""Starting schemas for `--schema`: SQL files of CREATE TABLE statements and the table schema
files TiCDC's cloud storage sink writes (`{db}/{table}/meta/schema_{version}_{crc}.json`, older
`{db}/{table}/{version}/schema.json`).

A storage-sink schema file is the table's schema as of its `TableVersion` (the commit ts of the
DDL that made it). The earliest file of a table describes it before the archive starts, like a
CREATE TABLE in a SQL file; every file is also a point at which the replay's DDL history must
agree with it, and disagreements are reported (`version_conflicts`), never resolved: the
archive's DDL events stay the authority, as for schemas carried in-band. The files' `Query`
is not applied: in a Kafka archive the same DDL arrives as a DDL event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from . import storage
from .ddl import column_differences

# meta/schema_<table version>_<crc32, 10 digits>.json, or the older <version>/schema.json
_SCHEMA_FILE = re.compile(r"(?:^|/)meta/schema_(\d+)_\d+\.json$|(?:^|/)(\d+)/schema\.json$")
# What TiDB's types.TypeToStr names (upper case in the files) that MySQL spells otherwise
_SINK_BASES = {"var_string": "varchar"}
_LENGTH_TYPES = ("char", "varchar", "binary", "varbinary")  # (n), n >= 0
_FRACTION_TYPES = ("time", "datetime", "timestamp")
# TiDB flags every BIT and YEAR column UNSIGNED (and ZEROFILL columns too), and the sink appends
# " UNSIGNED" whenever the flag is set: MySQL has no BIT/YEAR UNSIGNED. FLOAT UNSIGNED is read
# as FLOAT by the DDL history (spark_apps.ddl), so a schema file says the same.
_NEVER_UNSIGNED = ("bit", "year", "float")
_NOW = re.compile(r"^(?:current_timestamp|now)(?:\((\d?)\))?$", re.IGNORECASE)


class SchemaFileError(ValueError):
    """A --schema source that cannot be read or understood; names the object."""


@dataclass(frozen=True)
class TableVersion:
    """One storage-sink table schema file."""

    uri: str
    database: str
    table: str
    version: int
    columns: tuple[tuple[str, str], ...]  # (name, MySQL type text)
    not_null: frozenset[str]
    keys: tuple[str, ...]
    defaults: tuple[tuple[str, str], ...] = ()  # (name, DEFAULT clause SQL) of the columns that have one

    def create_statement(self) -> str:
        def q(name: str) -> str:
            return "`" + name.replace("`", "``") + "`"

        defaults = dict(self.defaults)
        parts = [f"{q(name)} {type_text}{' NOT NULL' if name in self.not_null else ''}"
                 + (f" DEFAULT {defaults[name]}" if name in defaults else "")
                 for name, type_text in self.columns]
        if self.keys:
            parts.append(f"PRIMARY KEY ({', '.join(q(k) for k in self.keys)})")
        return f"CREATE TABLE {q(self.database)}.{q(self.table)} ({', '.join(parts)})"


@dataclass(frozen=True)
class StartingSchemas:
    """What `--schema` gave: SQL text for SchemaHistory, and the storage-sink versions."""

    sql: str
    versions: tuple[TableVersion, ...]
    sources: int  # objects read

    def initial_sql(self) -> str:
        """The earliest storage-sink version of each table, then the SQL files (a SQL file's
        CREATE TABLE of the same table wins: it is applied last)."""
        earliest: dict[tuple[str, str], TableVersion] = {}
        for v in sorted(self.versions, key=lambda v: v.version):
            earliest.setdefault((v.database.lower(), v.table.lower()), v)
        creates = [v.create_statement() + ";" for _, v in sorted(earliest.items())]
        return "\n".join(creates + [self.sql])


def _flag(value) -> bool:
    return str(value).strip().lower() == "true"


def _number(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _positive(value) -> int | None:
    number = _number(value)
    return number if number is not None and number > 0 else None


def column_type(column: dict) -> str:
    """MySQL type text of a storage-sink column (tiflow/ticdc pkg/sink/cloudstorage
    table_definition.go, TableCol.FromTiColumnInfo): `ColumnType` is TiDB's type name upper
    case (types.TypeToStr: TEXT/CHAR/VARCHAR of the binary charset are BLOB/BINARY/VARBINARY)
    plus " UNSIGNED" when the column's unsigned flag is set; `ColumnPrecision` is the length of
    CHAR/VARCHAR/BINARY/VARBINARY/BIT (and the display width of integers and YEAR, the length of
    TEXT/BLOB: not part of the type here), FLOAT/DOUBLE/DECIMAL's precision with `ColumnScale` its
    scale; `ColumnScale` alone is TIME/DATETIME/TIMESTAMP's fraction digits. ENUM/SET labels,
    charset and collation are not in the files (the messages carry the labels). An older
    `ColumnLength` is read as the length too."""
    words = str(column.get("ColumnType") or "").strip().lower().split()
    if not words:
        raise SchemaFileError(f"column {column.get('ColumnName')!r} has no ColumnType")
    base = _SINK_BASES.get(words[0], words[0])
    unsigned = "unsigned" in words[1:] and base not in _NEVER_UNSIGNED
    params = ""
    if base in _LENGTH_TYPES:
        length = _number(column.get("ColumnLength"))
        if length is None or length < 0:
            length = _number(column.get("ColumnPrecision"))
        params = f"({length})" if length is not None and length >= 0 else ""
    elif base == "bit":
        length = _positive(column.get("ColumnLength")) or _positive(column.get("ColumnPrecision"))
        params = f"({length})" if length else ""
    elif base in ("decimal", "numeric"):
        precision, scale = _positive(column.get("ColumnPrecision")), _positive(column.get("ColumnScale")) or 0
        params = f"({precision},{scale})" if precision else ""
    elif base in ("float", "double"):  # (M,D) only when the scale was given: DOUBLE(M) is no MySQL type
        precision, scale = _positive(column.get("ColumnPrecision")), _positive(column.get("ColumnScale"))
        params = f"({precision},{scale})" if precision and scale else ""
    elif base in _FRACTION_TYPES:
        fraction = _positive(column.get("ColumnScale"))
        params = f"({fraction})" if fraction else ""
    return f"{base}{params}{' unsigned' if unsigned else ''}"


def default_clause(column: dict, type_text: str) -> str | None:
    """The DEFAULT of a storage-sink column as SQL, or None: `ColumnDefault` is TiDB's default
    (model.GetColumnDefaultValue: a string for most types, CURRENT_TIMESTAMP[(n)] for a time
    default, the value's raw bytes for BIT), left out when there is none."""
    value = column.get("ColumnDefault")
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        value = int(value)
    text = str(value)
    base = type_text.split("(")[0].split()[0]
    if base in ("bit",) and isinstance(value, str):
        if any(ord(c) > 0xFF for c in text):  # not the raw bytes (replaced while encoding): unknown
            return None
        return str(int.from_bytes(text.encode("latin-1"), "big")) if text else "0"
    if base in _FRACTION_TYPES + ("date",) and (now := _NOW.match(text.strip())):
        return f"CURRENT_TIMESTAMP({now[1]})" if now[1] else "CURRENT_TIMESTAMP"
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def parse_schema_file(data: bytes, uri: str) -> TableVersion | None:
    """A table schema file as a TableVersion; None for a database schema file (no table)."""
    try:
        doc = orjson.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        table, database = doc.get("Table") or "", doc.get("Schema") or ""
        if not table:
            return None
        if not database:
            raise ValueError("no Schema (database) name")
        version = int(doc["TableVersion"])
        columns = doc.get("TableColumns") or []
        parsed = tuple((str(c["ColumnName"]), column_type(c)) for c in columns)
        total = doc.get("TableColumnsTotal")
        if total is not None and _number(total) not in (None, len(columns)):
            raise ValueError(f"TableColumnsTotal {total} but {len(columns)} TableColumns")
        defaults = tuple((name, clause) for (name, type_text), c in zip(parsed, columns)
                         if (clause := default_clause(c, type_text)) is not None)
    except SchemaFileError as e:
        raise SchemaFileError(f"{uri}: {e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise SchemaFileError(f"{uri}: not a TiCDC storage-sink table schema file ({type(e).__name__}: {e})") from None
    if not parsed:
        raise SchemaFileError(f"{uri}: table schema file of {database}.{table} lists no TableColumns")
    return TableVersion(
        uri, database, table, version, parsed,
        frozenset(str(c["ColumnName"]) for c in columns if "ColumnNullable" in c and not _flag(c["ColumnNullable"])),
        tuple(str(c["ColumnName"]) for c in columns if _flag(c.get("ColumnIsPk"))), defaults)


def load(uri: str, list_objects=storage.list_objects, read_bytes=storage.read_bytes) -> StartingSchemas:
    """Read `--schema`: one SQL file, one storage-sink schema file, or a prefix holding any
    number of both (`*.sql`, and schema files anywhere below it, e.g. a storage-sink root;
    other objects are ignored). `list_objects`/`read_bytes`: how to reach storage (the
    Airflow tasks pass their hook's, which use the Airflow connection's credentials)."""
    prefix = storage.normalize(uri)
    try:
        found = [o.uri for o in list_objects(prefix)]
    except Exception as e:  # S3 error, permission
        raise SchemaFileError(f"{uri}: cannot list it ({type(e).__name__}: {e})") from e
    single = not found or found == [prefix]  # a file, or an S3 key (listed as a prefix it has nothing below)
    sql, versions, sources = [], [], 0
    for object_uri in [prefix] if single else found:
        name = object_uri if single else "/" + storage.relative(object_uri, prefix)
        is_schema_file = bool(_SCHEMA_FILE.search(name)) or (single and name.endswith(".json"))
        if not (single or is_schema_file or name.endswith(".sql")):
            continue
        try:
            data = read_bytes(object_uri)
        except Exception as e:  # missing file, S3 error
            raise SchemaFileError(f"{object_uri}: cannot read it ({type(e).__name__}: {e})") from e
        sources += 1
        if is_schema_file:
            version = parse_schema_file(data, object_uri)
            if version is not None:
                versions.append(version)
        else:
            try:
                sql.append(data.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise SchemaFileError(f"{object_uri}: not UTF-8 text ({e})") from None
    if not sources:
        raise SchemaFileError(f"{uri}: no *.sql or TiCDC schema_*.json files below it")
    return StartingSchemas("\n".join(sql), tuple(versions), sources)


def version_conflicts(history, versions, limit: int = 50) -> list[str]:
    """Each storage-sink version compared with the DDL history just after its TableVersion:
    the same column names, and the same base type and signedness for each."""
    conflicts = []
    for v in sorted(versions, key=lambda v: (v.database.lower(), v.table.lower(), v.version)):
        where = f"{v.database}.{v.table} at table version {v.version} ({v.uri})"
        expected = history.columns_at(v.database, v.table, [v.version, 0])
        if expected is None:
            conflicts.append(f"{where}: the schema file describes the table, the DDL history has no such table then")
            continue
        parts = column_differences(dict(expected), {name.lower(): t for name, t in v.columns})
        if parts:
            conflicts.append(f"{where}: the schema file disagrees with the DDL history: " + "; ".join(parts))
        if len(conflicts) >= limit:
            conflicts.append("... (more conflicts not listed)")
            break
    return conflicts

