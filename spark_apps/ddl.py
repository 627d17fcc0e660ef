"""DDL history: table schemas through time, rebuilt by applying DDL statements in order.

DDL events are few (thousands at most), so the driver applies them in timeline order with
sqlglot's MySQL parser (no regexes) and hands the Spark job two small things:

* `TableInterval`s: which events belong to which live table at the cut. Events of a table
  before its last CREATE/TRUNCATE, of a dropped table, or of a dropped database belong to no
  interval and are dead; events under an old name before a RENAME belong to the renamed table.
* `TableSchema`s: the columns of each live table at the cut, with, per column, the point it
  was added (rows from before take its default) and the names it had (RENAME COLUMN).

A point is the event's timeline (spark_apps.transforms.timeline): `[commit_ts]` for TiCDC,
the position for Canal/OceanBase; lists compare element by element, `[]` is before everything.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import functools
import threading
import time

import numpy as np
import sqlglot
from sqlglot import exp

from cdc_codecs.events import ColumnFlag
from cdc_codecs.mysql_types import INTEGER_BASES, declared_fsp, enum_set_label, enum_set_value, parse_type
from cdc_codecs.tso import to_datetime

Point = list  # list[int]
UNKNOWN_COLUMNS = ("?",)  # the columns of a table renamed/truncated but never described


class StreamType(str):
    """A column type as a row event carried it (a table no DDL describes): the parameters the
    message leaves out are unknown, not MySQL's defaults — a bare `datetime` from open-protocol
    or craft is a DATETIME of unknown fractional precision, whose values the producer already
    rendered at the column's precision (snapshot.declared_precision leaves them as they are).
    Compares and hashes as its text."""

    __slots__ = ()


class DDLError(ValueError):
    """A DDL statement that cannot be understood (the event is quarantined)."""


@dataclasses.dataclass
class ColumnDef:
    name: str
    mysql_type: str
    flags: int = 0
    default: bytes | None = None  # canonical bytes of the value rows from before it get
    default_label: str | None = None
    added: Point = dataclasses.field(default_factory=list)  # rows at points <= added: default
    aliases: list = dataclasses.field(default_factory=list)  # [(from_point, name)] for RENAME

    def name_at(self, point: Point) -> str:
        name = self.aliases[0][1] if self.aliases else self.name
        for start, alias in self.aliases:
            if start < point:
                name = alias
        return name


@dataclasses.dataclass
class TableSchema:
    database: str
    name: str
    columns: list[ColumnDef]
    key_columns: list[str]
    start: Point  # the CREATE or TRUNCATE that began the current incarnation ([] = unknown)
    names: list  # [(from_point, database, name)]: the table's names through time
    # UNIQUE indexes in creation order: [(index name, [column names])]
    unique_keys: list = dataclasses.field(default_factory=list)
    # False for a table the archive renamed or truncated without ever describing it: rows
    # keep the columns and key their messages carry
    columns_known: bool = True
    # a table no DDL described whose columns were taken from its row events
    # (SchemaHistory.use_stream_schemas): the first point of the column set they came from
    inferred_from: Point | None = None
    # the table had no identity at some point of its known history (set by `_mark_keys`)
    keyless_once: bool = False

    def row_identity(self) -> list[str]:
        """The columns the replay keys this table's changes by: `identity_columns()`, but none
        (all its columns: a multiset) for a table that had no identity at some point, as one
        given a primary key by a later ALTER TABLE. Before the key existed two rows could share
        its values ((e, 1) and (e, 2), then DELETE (e, 1)); keyed by it, such a table's changes
        fold into one row per key and the row left was lost. After the key exists MySQL keeps
        its values unique, so whole rows name the same rows the key does."""
        return [] if self.keyless_once else self.identity_columns()

    def identity_columns(self) -> list[str]:
        """What identifies a row, as TiDB's handle (and InnoDB's clustered index) has it: the
        primary key, else the first UNIQUE index whose columns are all NOT NULL, else nothing
        (the row is identified by all its values)."""
        if self.key_columns:
            return list(self.key_columns)
        for _, columns in self.unique_keys:
            cols = [self.column(c) for c in columns]
            if cols and all(c is not None and not c.flags & ColumnFlag.NULLABLE for c in cols):
                return [c.name for c in cols]
        return []

    def column(self, name: str) -> ColumnDef | None:
        lower = name.lower()
        return next((c for c in self.columns if c.name.lower() == lower), None)

    def create_statement(self) -> str:
        """The table as a CREATE TABLE statement (recorded in snapshot manifests, so a later
        window replay starting from the snapshot knows the schemas)."""
        parts = []
        for col in self.columns:
            text = f"`{col.name}` {col.mysql_type or 'text'}"
            if not col.flags & ColumnFlag.NULLABLE:
                text += " NOT NULL"
            if col.default is not None:
                default = col.default_label.encode() if col.default_label is not None else col.default
                literal = default.decode("utf-8", "replace").replace("\\", "\\\\").replace("'", "''")
                text += f" DEFAULT '{literal}'"
            parts.append(text)
        if self.key_columns:
            parts.append("PRIMARY KEY (" + ", ".join(f"`{k}`" for k in self.key_columns) + ")")
        for index, columns in self.unique_keys:
            parts.append(f"UNIQUE KEY `{index}` (" + ", ".join(f"`{c}`" for c in columns) + ")")
        return f"CREATE TABLE `{self.database}`.`{self.name}` (" + ", ".join(parts) + ")"


@dataclasses.dataclass(frozen=True)
class TableInterval:
    """Events named (database, table) at points in (after, until] belong to live table
    (final_database, final_table). until None = no end."""

    database: str
    table: str
    after: tuple
    until: tuple | None
    final_database: str
    final_table: str
    key_aliases: tuple | None = ()  # per final key column: every name it had (lower case); None: unknown
    # a table with no key: per final column, (every name it had, lower case; its default; the
    # point it was added), so images written before an ADD/DROP COLUMN still identify the same row
    row_columns: tuple | None = None


def _key(database: str | None, table: str) -> tuple[str, str]:
    return ((database or "").lower(), table.lower())


def _name(identifier) -> str:
    return identifier.name if hasattr(identifier, "name") else str(identifier)


class SchemaHistory:
    """Apply DDL in order; ask for live tables, intervals and schemas at the end."""

    def __init__(self, initial_schemas: str = "", default_database: str | None = None):
        """`initial_schemas`: SQL text (CREATE TABLE ...; USE db; ...) describing tables as
        they were before the archive starts (the replay's --schema)."""
        self.tables: dict[tuple[str, str], TableSchema] = {}
        self.known: set[tuple[str, str]] = set()  # every table name any DDL mentioned
        self.undescribed: set[tuple[str, str]] = set()  # names of tables whose columns no DDL gave
        # per table name: [(point, ((column, type), ...) or None when it does not exist)]
        self.versions: dict[tuple[str, str], list] = {}
        self._starts_cache: dict[tuple[str, str], tuple] = {}  # table -> (versions' length, starts or None)
        self._firsts_cache: dict[tuple[str, str], tuple] = {}  # table -> (versions' length, `_firsts`)
        self._use: str | None = None
        # per table name: the column sets its row events carry (use_stream_schemas), and the
        # tables whose schema was built from them (the manifest's `inferred_schemas`)
        self.stream_shapes: dict[tuple[str, str], list[dict]] = {}
        self.inferred: list[dict] = []
        if initial_schemas.strip():
            self.apply(initial_schemas, [], default_database)
        self._use = None

    # ------------------------------------------------------------------ applying
    def apply(self, query: str, point: Point, database: str | None = None) -> str:
        """Apply one DDL at `point`; returns what it did. Raises DDLError if unparsable."""
        statements = _parse(_executable_comments(query))
        if not statements:
            raise DDLError("empty DDL")
        outcomes, touched = [], set()
        try:
            for statement in statements:
                if isinstance(statement, exp.Use):
                    self._use = _name(statement.this)
                    outcomes.append(f"use {self._use}")
                    continue
                named = self._touched(statement, self._use or database)
                touched = None if named is None or touched is None else touched | named
                outcomes.append(self._apply_one(statement, list(point), self._use or database, query))
        finally:  # what the statements before a failing one changed is versioned at this point too
            self._record_versions(list(point), touched)
        return "; ".join(outcomes)

    def _touched(self, stmt, database: str | None) -> set[tuple[str, str]] | None:
        """The tables a statement can change: those it names (a RENAME both names, CREATE ...
        LIKE its source too), every table of a dropped database; None (every table) for a statement
        sqlglot keeps as text. Only their versions are
        compared after it: comparing every table after every statement made the history
        quadratic (107k statements over 480 tables at 16M bench events)."""
        if isinstance(stmt, exp.Command):  # what sqlglot cannot parse (RENAME TABLE): its text is read later
            return None
        if isinstance(stmt, exp.Drop) and (stmt.args.get("kind") or "").upper() in ("DATABASE", "SCHEMA"):
            db = _name((stmt.args.get("tables") or [stmt.this])[0]).lower()
            return {k for k in (*self.versions, *self.tables) if k[0] == db}
        return {_key(t.db or database, t.name) for t in stmt.find_all(exp.Table)}

    def _record_versions(self, point: Point, keys=None) -> None:
        """Append a version to each table of `keys` (None: every table) whose columns differ
        from its last version."""
        for key in (set(self.versions) | set(self.tables)) if keys is None else keys:
            if key not in self.versions and key not in self.tables:
                continue
            schema = self.tables.get(key)
            signature = None if schema is None else tuple((c.name.lower(), c.mysql_type) for c in schema.columns) \
                if schema.columns_known else UNKNOWN_COLUMNS
            history = self.versions.setdefault(key, [])
            if not history or history[-1][1] != signature:
                history.append((point, signature))

    def columns_at(self, database: str | None, table: str, point: Point):
        """((column, type), ...) of the table for an event at `point` (DDL at a point applies
        to events after it); None when the table did not exist or is unknown. The last version
        that starts before `point` (or at the start): by bisection where the versions are in
        start order (they are appended in timeline order; the schema cross-check asks once or
        twice per column set, and a table can have thousands of versions), else by a scan."""
        key = _key(database, table)
        versions = self.versions.get(key, ())
        starts = self._starts(key, versions) if point else None
        if starts is not None:
            found = bisect.bisect_left(starts, point)
            return versions[found - 1][1] if found else None
        signature = None
        for start, sig in versions:
            if start < point or not start:
                signature = sig
        return signature

    def columns_at_each(self, database: str | None, table: str, points) -> list:
        """`columns_at` of one table at each of `points`: a list of points, or an int64 array of
        one-element points (commit ts: a batch's rows of the table), then found by one numpy
        bisection where the versions' starts are in order and of at most one element."""
        if isinstance(points, np.ndarray):
            key = _key(database, table)
            versions = self.versions.get(key, ())
            found = self._firsts(key, versions)
            if found is not None:
                empty, firsts = found  # starts `[]` come first: below every point
                at = empty + np.searchsorted(firsts, points, side="left")
                return [versions[f - 1][1] if f else None for f in at.tolist()]
            points = [[p] for p in points.tolist()]
        return [self.columns_at(database, table, list(p or [])) for p in points]

    def _firsts(self, key, versions: list) -> tuple | None:
        """(how many starts are `[]`, the other starts' only elements as an int64 array) when the
        starts are in order and none has more than one element; None otherwise."""
        length, found = self._firsts_cache.get(key, (-1, None))
        if length != len(versions):
            starts = self._starts(key, versions)
            found = None
            if starts is not None and all(not s or len(s) == 1 for s in starts):
                empty = sum(1 for s in starts if not s)
                found = (empty, np.array([s[0] for s in starts[empty:]], dtype=np.int64))
            self._firsts_cache[key] = (len(versions), found)
        return found

    def _starts(self, key, versions: list) -> list | None:
        """The versions' starts when they never decrease (None otherwise), kept until the list
        grows (versions are only ever appended)."""
        length, starts = self._starts_cache.get(key, (-1, None))
        if length != len(versions):
            starts = [start for start, _ in versions]
            if any(a > b for a, b in zip(starts, starts[1:])):
                starts = None
            self._starts_cache[key] = (len(versions), starts)
        return starts

    def _table_ref(self, table: exp.Table, database: str | None) -> tuple[str, str]:
        db = table.db or database
        if not db:
            raise DDLError(f"table {table.name} has no database and the DDL event names none")
        return db, table.name

    def _apply_one(self, stmt, point: Point, database: str | None, query: str) -> str:
        if isinstance(stmt, exp.Create):
            kind = (stmt.args.get("kind") or "").upper()
            if kind in ("DATABASE", "SCHEMA"):
                return "create database"
            if kind == "TABLE":
                return self._create_table(stmt, point, database)
            if kind == "INDEX" and stmt.args.get("unique") and isinstance(stmt.this, exp.Index):
                return self._create_unique_index(stmt.this, database, point)
            return f"ignored create {kind.lower()}"
        if isinstance(stmt, exp.Drop):
            kind = (stmt.args.get("kind") or "").upper()
            if kind in ("DATABASE", "SCHEMA"):
                db = _name((stmt.args.get("tables") or [stmt.this])[0])
                for key in [k for k in self.tables if k[0] == db.lower()]:
                    del self.tables[key]
                return f"drop database {db}"
            if kind == "TABLE":
                tables = stmt.args.get("tables") or [stmt.this]
                for table in tables:
                    db, name = self._table_ref(table, database)
                    self.known.add(_key(db, name))
                    if _key(db, name) not in self.versions and _key(db, name) not in self.tables:
                        # dropped before the archive described it: it existed until now
                        self.versions[_key(db, name)] = [([], UNKNOWN_COLUMNS)]
                    self.tables.pop(_key(db, name), None)
                return "drop table"
            if kind == "INDEX" and isinstance(stmt.args.get("cluster"), exp.OnProperty):
                db, name = self._table_ref(stmt.args["cluster"].this, database)
                schema = self.tables.get(_key(db, name))
                if schema is not None:
                    index = _name((stmt.args.get("tables") or [stmt.this])[0]).lower()
                    schema.unique_keys = [(i, cols) for i, cols in schema.unique_keys if i.lower() != index]
                    self._mark_keys(schema)
                return "drop index"
            return f"ignored drop {kind.lower()}"
        if isinstance(stmt, exp.TruncateTable):
            for table in stmt.expressions:
                db, name = self._table_ref(table, database)
                self.known.add(_key(db, name))
                schema = self.tables.get(_key(db, name))
                if schema is not None:
                    schema.start = point
                    schema.names = [(point, schema.database, schema.name)]
                    for col in schema.columns:
                        col.added, col.aliases = list(point), []
                else:
                    schema = self._placeholder(db, name, point)
                    schema.start = point
                    schema.names = [(point, schema.database, schema.name)]
                    for col in schema.columns:
                        col.added, col.aliases = list(point), []
            return "truncate table"
        if isinstance(stmt, exp.Alter):
            return self._alter(stmt, point, database)
        if isinstance(stmt, exp.Command) and str(stmt.this).upper() == "RENAME":
            return self._rename_tables(str(stmt.expression.this), point, database)
        if isinstance(stmt, exp.Command) and str(stmt.this).upper() == "ALTER":
            rest = stmt.expression if isinstance(stmt.expression, str) else stmt.expression.this
            kept = _alter_without_options("ALTER " + str(rest))
            if kept is None:
                raise DDLError(f"unsupported DDL statement: {query[:120]}")
            if not kept:
                return "ignored alter (table options)"
            return self._alter(kept, point, database)
        if isinstance(stmt, exp.Command):
            raise DDLError(f"unsupported DDL statement: {query[:120]}")
        return f"ignored {type(stmt).__name__.lower()}"

    def _placeholder(self, db: str, name: str, point: Point) -> TableSchema:
        """A table from before the archive that a RENAME/TRUNCATE names but no DDL described:
        its schema as its row events carry it (`_from_stream`), else unknown columns: its rows
        keep the columns and key their messages carry."""
        inferred = self._from_stream(db, name, point)
        if inferred is not None:
            return inferred
        schema = TableSchema(db, name, [], [], [], [([], db, name)], columns_known=False)
        self.tables[_key(db, name)] = schema
        self.undescribed.add(_key(db, name))
        self.versions.setdefault(_key(db, name), []).append(([], UNKNOWN_COLUMNS))
        return schema

    # ------------------------------------------------------------------ schemas from the stream
    def use_stream_schemas(self, shapes: list[dict]) -> None:
        """The column sets the archive's row events carry, for tables no DDL describes: a DDL
        that needs such a table's columns (ALTER, RENAME, TRUNCATE, CREATE UNIQUE INDEX) finds
        its schema built from them (`_from_stream`), as if a CREATE TABLE had come before the
        archive. `shapes`: one dict per distinct column set of a table's new images, with
        `database`, `table`, `columns` [(name, type, flags)] in the message's order, `first`
        and `last` points and `events`."""
        for shape in shapes:
            if shape.get("database") is None or shape.get("table") is None or not shape.get("columns"):
                continue
            self.stream_shapes.setdefault(_key(shape["database"], shape["table"]), []).append(shape)
        for found in self.stream_shapes.values():
            found.sort(key=lambda s: (list(s["first"] or []), list(s["last"] or [])))

    def _from_stream(self, db: str, name: str, point: Point, placeholder: TableSchema | None = None):
        """The schema of a table no DDL described, from the column sets its row events carry:
        the last set that began before `point` (the DDL about to be applied), else the first
        one after it. Column names, order, types as the message gives them (as precise as the
        protocol is: see docs/semantics.md, "Tables no DDL describes") and the key columns it
        flags (primary key, else TiDB's handle key); nullability, defaults and other indexes
        are not in row events (columns are taken as nullable, without default). Fills
        `placeholder` (a table renamed or truncated earlier with unknown columns) or registers
        a new table, as if created before the archive; None when no row event shows the table,
        or when the table is one an earlier DDL already created, dropped or renamed."""
        key = _key(db, name)
        if placeholder is None and (key in self.tables or key in self.versions):
            return None
        names = [(d, n) for _, d, n in placeholder.names] if placeholder is not None else [(db, name)]
        shapes = [s for d, n in dict.fromkeys(_key(d, n) for d, n in names) for s in self.stream_shapes.get((d, n), ())]
        if not shapes:
            return None
        before = [s for s in shapes if point and list(s["first"] or []) < point]
        shape = max(before, key=lambda s: list(s["first"] or [])) if before else min(
            shapes, key=lambda s: list(s["first"] or []))
        columns, primary, handle = [], [], []
        for col_name, type_text, flags in shape["columns"]:
            flags = int(flags or 0)
            if flags & ColumnFlag.PRIMARY_KEY:
                primary.append(col_name)
            if flags & ColumnFlag.HANDLE_KEY:
                handle.append(col_name)
            keep = flags & (ColumnFlag.BINARY | ColumnFlag.UNSIGNED | ColumnFlag.GENERATED)
            if parse_type(type_text or "").unsigned:
                keep |= ColumnFlag.UNSIGNED
            columns.append(ColumnDef(col_name, StreamType(type_text or ""), keep | ColumnFlag.NULLABLE, None, None, [], []))
        keys = primary or handle
        if placeholder is not None:
            schema = placeholder
            schema.columns, schema.key_columns, schema.columns_known = columns, keys, True
            for col in columns:
                col.added = list(schema.start)
        else:
            schema = TableSchema(db, name, columns, keys, [], [([], db, name)])
            self.tables[key] = schema
            self.versions.setdefault(key, []).append(
                ([], tuple((c.name.lower(), c.mysql_type) for c in columns)))
        schema.inferred_from = list(shape["first"] or []) if not before else None
        self._mark_keys(schema)
        for d, n in names:  # no DDL gave its columns (--require-schema still refuses its rows)
            self.undescribed.add(_key(d, n))
        self.undescribed.add(_key(schema.database, schema.name))
        coarse = [c.name for c in columns if _coarse(c.mysql_type)]
        self.inferred.append({
            "table": f"{schema.database}.{schema.name}",
            "from": f"{shape['events']} row events at points {list(shape['first'] or [])}.."
                    f"{list(shape['last'] or [])} (their in-band columns), for the DDL at point {list(point)}",
            "columns": [[c.name, c.mysql_type] for c in columns],
            "key": list(keys),
            "unknown": ["nullability", "defaults", "indexes other than the key"]
                       + ([f"type parameters (length, precision, labels) of {', '.join(coarse)}"] if coarse else []),
        })
        return schema

    def _rows_before(self, key: tuple[str, str], point: Point) -> bool:
        """Whether row events of the table name were seen before `point` (use_stream_schemas)."""
        return bool(point) and any(list(s["first"] or []) < point for s in self.stream_shapes.get(key, ()))

    def _create_unique_index(self, index: exp.Index, database: str | None, point: Point) -> str:
        db, name = self._table_ref(index.args["table"], database)
        schema = self.tables.get(_key(db, name))
        if schema is None or not schema.columns_known:
            schema = self._from_stream(db, name, point, schema)
            if schema is not None:
                self.known.add(_key(db, name))
        if schema is None:
            return "create unique index (table without known schema)"
        columns = [_name(o.this) for o in index.args["params"].args.get("columns") or []]
        _add_unique(schema.unique_keys, _name(index.this) if index.this else None, columns)
        self._mark_keys(schema)
        return "create unique index"

    def _create_table(self, stmt: exp.Create, point: Point, database: str | None) -> str:
        target = stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this
        db, name = self._table_ref(target, database)
        key = _key(db, name)
        self.known.add(key)
        if stmt.args.get("exists") and key in self.tables:
            return "create table (exists)"
        if stmt.args.get("exists") and key not in self.versions and self._rows_before(key, point):
            # MySQL logs CREATE TABLE IF NOT EXISTS even when the table exists (Canal delivers
            # it): rows of it before the statement, and no DDL before it, show that it did
            self._from_stream(db, name, point)
            return "create table (exists before the archive)"
        like = None
        props = stmt.args.get("properties")
        if props is not None:
            like = next((p for p in props.expressions if isinstance(p, exp.LikeProperty)), None)
        if like is not None:
            src_db, src_name = self._table_ref(like.this, db)
            source = self.tables.get(_key(src_db, src_name))
            if source is None or not source.columns_known:  # a table from before the archive
                source = self._from_stream(src_db, src_name, point, source) or source
                if source is not None:
                    self.known.add(_key(src_db, src_name))
            if source is None or not source.columns_known:
                raise DDLError(f"CREATE TABLE {name} LIKE {src_name}: {src_name} has no known schema")
            columns = [dataclasses.replace(c, added=list(point), aliases=[]) for c in source.columns]
            keys = list(source.key_columns)
            uniques = [(i, list(c)) for i, c in source.unique_keys]
        elif isinstance(stmt.this, exp.Schema):
            columns, keys, uniques = [], [], []
            for item in stmt.this.expressions:
                if isinstance(item, exp.ColumnDef):
                    col = self._column_def(item, point)
                    columns.append(col)
                    if any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in item.constraints):
                        keys.append(col.name)
                    if any(isinstance(c.kind, exp.UniqueColumnConstraint) for c in item.constraints):
                        _add_unique(uniques, None, [col.name])
                elif isinstance(item, exp.PrimaryKey):
                    keys = [_name(e) for e in item.expressions]
                else:
                    _add_unique_constraint(uniques, item)
        else:
            raise DDLError(f"CREATE TABLE {name} without columns (CREATE ... SELECT is not supported)")
        schema = TableSchema(db, name, columns, keys, point, [(point, db, name)], uniques)
        self._mark_keys(schema)
        self.tables[key] = schema
        self.undescribed.discard(key)
        return "create table"

    def _mark_keys(self, schema: TableSchema) -> None:
        keys = {k.lower() for k in schema.key_columns}
        unique = {c.lower() for _, cols in schema.unique_keys for c in cols}
        for col in schema.columns:
            flag = ColumnFlag.PRIMARY_KEY
            col.flags = (col.flags | flag) if col.name.lower() in keys else (col.flags & ~flag)
            if col.name.lower() in keys:
                col.flags &= ~ColumnFlag.NULLABLE
            col.flags = (col.flags | ColumnFlag.UNIQUE_KEY) if col.name.lower() in unique else (
                col.flags & ~ColumnFlag.UNIQUE_KEY)
        handle = {k.lower() for k in schema.identity_columns()}
        schema.keyless_once = schema.keyless_once or (schema.columns_known and not handle)
        for col in schema.columns:
            col.flags = (col.flags | ColumnFlag.HANDLE_KEY) if col.name.lower() in handle else (
                col.flags & ~ColumnFlag.HANDLE_KEY)

    def _column_def(self, item: exp.ColumnDef, point: Point) -> ColumnDef:
        name = item.name
        type_text = _type_text(item.args["kind"]) if item.args.get("kind") else ""
        mysql_type = parse_type(type_text)
        flags = 0
        if mysql_type.unsigned:
            flags |= ColumnFlag.UNSIGNED
        if mysql_type.is_binary:
            flags |= ColumnFlag.BINARY
        not_null = False
        default_expr = None
        for constraint in item.constraints:
            kind = constraint.kind
            if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
                not_null = True
            elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                not_null = True
            elif isinstance(kind, exp.DefaultColumnConstraint):
                default_expr = kind.this
        if not not_null:
            flags |= ColumnFlag.NULLABLE
        default = _default_value(default_expr, mysql_type, not_null, point)
        label = enum_set_label(mysql_type, default) if mysql_type.labels else None
        return ColumnDef(name, type_text, flags, default, label, list(point), [])

    def _alter(self, stmt: exp.Alter, point: Point, database: str | None) -> str:
        if (stmt.args.get("kind") or "").upper() != "TABLE":
            return "ignored alter"
        db, name = self._table_ref(stmt.this, database)
        key = _key(db, name)
        schema = self.tables.get(key)
        actions = stmt.args.get("actions") or []
        if actions and all(isinstance(a, exp.AlterRename) for a in actions) and (
                schema is None or not schema.columns_known):
            # a table from before the archive renamed: its rows move to the new name
            if schema is None:
                schema = self._placeholder(db, name, point)
            self.known.add(key)
            new_db, new_name = self._table_ref(actions[-1].this, db)
            self._rename_table(schema, new_db, new_name, point)
            return f"rename table to {new_name}"
        if schema is None or not schema.columns_known:
            schema = self._from_stream(db, name, point, schema)
        if schema is None:
            # not marked known: its rows keep the columns their messages carry
            raise DDLError(f"ALTER TABLE {db}.{name}: the table has no known schema (give it with --schema)")
        self.known.add(key)
        # a schema taken from row events written after this statement already shows what it
        # does: adding a column it has redefines it, dropping one it lacks is done
        lenient = schema.inferred_from is not None and (not point or point < schema.inferred_from)
        done = []
        for action in stmt.args.get("actions") or []:
            if isinstance(action, exp.ColumnDef):
                col = self._column_def(action, point)
                existing = schema.column(col.name)
                if existing is not None and lenient:
                    schema.columns[schema.columns.index(existing)] = col
                    done.append(f"add column {col.name} (in the rows' schema already)")
                    continue
                if existing is not None:
                    raise DDLError(f"ADD COLUMN {col.name}: {db}.{name} already has it")
                position = action.args.get("position")
                self._insert_column(schema, col, position)
                done.append(f"add column {col.name}")
            elif isinstance(action, exp.Drop) and (action.args.get("kind") or "COLUMN").upper() == "COLUMN":
                targets = action.args.get("tables") or [action.this]
                for target in targets:
                    col_name = _name(target)
                    col = schema.column(col_name)
                    if col is None:
                        if action.args.get("exists") or lenient:
                            continue
                        raise DDLError(f"DROP COLUMN {col_name}: {db}.{name} has no such column")
                    schema.columns.remove(col)
                    schema.key_columns = [k for k in schema.key_columns if k.lower() != col_name.lower()]
                    # MySQL drops the column from its indexes, and an index left with none
                    schema.unique_keys = [(i, [c for c in cols if c.lower() != col_name.lower()])
                                          for i, cols in schema.unique_keys]
                    schema.unique_keys = [(i, cols) for i, cols in schema.unique_keys if cols]
                    done.append(f"drop column {col_name}")
            elif isinstance(action, exp.ModifyColumn):
                new_def = action.this
                old_name = _name(action.args["rename_from"]) if action.args.get("rename_from") else new_def.name
                col = schema.column(old_name)
                if col is None and lenient:
                    col = schema.column(new_def.name)
                    if col is None:
                        continue
                if col is None:
                    raise DDLError(f"MODIFY/CHANGE COLUMN {old_name}: {db}.{name} has no such column")
                replacement = self._column_def(new_def, point)
                if replacement.name != col.name:
                    self._rename_column(schema, col, replacement.name, point)
                col.mysql_type = replacement.mysql_type
                col.flags = replacement.flags
                position = new_def.args.get("position")
                if position is not None:  # MODIFY/CHANGE ... FIRST | AFTER c moves the column too
                    self._move_column(schema, col, position)
                done.append(f"modify column {col.name}")
            elif isinstance(action, exp.RenameColumn):
                old_name, new_name = _name(action.this), _name(action.args["to"])
                col = schema.column(old_name)
                if col is None and lenient and schema.column(new_name) is not None:
                    continue
                if col is None:
                    raise DDLError(f"RENAME COLUMN {old_name}: {db}.{name} has no such column")
                self._rename_column(schema, col, new_name, point)
                done.append(f"rename column {old_name} to {new_name}")
            elif isinstance(action, exp.AlterRename):
                new_db, new_name = self._table_ref(action.this, db)
                self._rename_table(schema, new_db, new_name, point)
                done.append(f"rename table to {new_name}")
            elif isinstance(action, exp.AddConstraint):
                for constraint in action.expressions:
                    if isinstance(constraint, exp.PrimaryKey):
                        schema.key_columns = [_name(e) for e in constraint.expressions]
                        done.append("add primary key")
                    elif _add_unique_constraint(schema.unique_keys, constraint):
                        done.append("add unique key")
            elif isinstance(action, exp.Drop) and (action.args.get("kind") or "").upper() in ("INDEX", "KEY"):
                for target in action.args.get("tables") or [action.this]:
                    index = _name(target).lower()
                    schema.unique_keys = [(i, cols) for i, cols in schema.unique_keys if i.lower() != index]
                done.append("drop index")
            elif isinstance(action, exp.DropPrimaryKey):
                schema.key_columns = []
                done.append("drop primary key")
            else:
                done.append(f"ignored {type(action).__name__.lower()}")
        self._mark_keys(schema)
        return ", ".join(done) or "ignored alter"

    @staticmethod
    def _insert_column(schema: TableSchema, col: ColumnDef, position) -> None:
        if position is not None:
            where = str(position.args.get("position") or "").upper()
            if where == "FIRST":
                schema.columns.insert(0, col)
                return
            after = position.this
            if after is not None:
                ref = schema.column(_name(after))
                if ref is not None:
                    schema.columns.insert(schema.columns.index(ref) + 1, col)
                    return
        schema.columns.append(col)

    @staticmethod
    def _move_column(schema: TableSchema, col: ColumnDef, position) -> None:
        """Where MODIFY/CHANGE COLUMN ... FIRST | AFTER c puts the column (MySQL refuses an AFTER
        naming an unknown column, so a statement it ran always names a known one; the column
        stays where it was otherwise)."""
        after = position.this
        if str(position.args.get("position") or "").upper() != "FIRST" and (
                after is None or schema.column(_name(after)) is None or schema.column(_name(after)) is col):
            return
        schema.columns.remove(col)
        SchemaHistory._insert_column(schema, col, position)

    @staticmethod
    def _rename_column(schema: TableSchema, col: ColumnDef, new_name: str, point: Point) -> None:
        if not col.aliases:
            col.aliases = [([], col.name)]
        col.aliases.append((list(point), new_name))
        schema.key_columns = [new_name if k.lower() == col.name.lower() else k for k in schema.key_columns]
        schema.unique_keys = [(i, [new_name if c.lower() == col.name.lower() else c for c in cols])
                              for i, cols in schema.unique_keys]
        col.name = new_name

    def _rename_table(self, schema: TableSchema, new_db: str, new_name: str, point: Point) -> None:
        old_key = _key(schema.database, schema.name)
        new_key = _key(new_db, new_name)
        if new_key in self.tables and new_key != old_key:
            raise DDLError(f"RENAME to {new_db}.{new_name}: that table exists")
        del self.tables[old_key]
        schema.database, schema.name = new_db, new_name
        schema.names.append((list(point), new_db, new_name))
        self.tables[new_key] = schema
        self.known.add(new_key)
        if schema.columns_known:
            self.undescribed.discard(new_key)
        else:
            self.undescribed.add(new_key)

    def _rename_tables(self, text: str, point: Point, database: str | None) -> str:
        body = text.strip()
        if body.upper().startswith("TABLE"):
            body = body[5:]
        pairs = []
        for part in body.split(","):
            words = part.strip().split()
            if len(words) != 3 or words[1].upper() != "TO":
                raise DDLError(f"cannot read RENAME TABLE clause {part.strip()!r}")
            pairs.append((exp.to_table(words[0], dialect="mysql"), exp.to_table(words[2], dialect="mysql")))
        for old, new in pairs:  # MySQL applies the pairs left to right
            old_db, old_name = self._table_ref(old, database)
            new_db, new_name = self._table_ref(new, old_db)
            schema = self.tables.get(_key(old_db, old_name))
            self.known.update({_key(old_db, old_name), _key(new_db, new_name)})
            if schema is None:
                # a table from before the archive: its rows move to the new name, with the
                # columns and key their messages carry
                schema = self._placeholder(old_db, old_name, point)
            self._rename_table(schema, new_db, new_name, point)
        return "rename table"

    # ------------------------------------------------------------------ results
    def intervals(self) -> list[TableInterval]:
        """Which (name, point range) of events feeds each live table."""
        result = []
        for schema in self.tables.values():
            names = schema.names or [(schema.start, schema.database, schema.name)]
            keys, row_columns = [], None
            for key in schema.row_identity():
                col = schema.column(key)
                aliases = {key.lower()} | {alias.lower() for _, alias in (col.aliases if col else [])}
                keys.append(tuple(sorted(aliases)))
            if not schema.columns_known:
                keys = None
            elif not keys:
                row_columns = tuple((tuple(sorted({c.name.lower()} | {a.lower() for _, a in c.aliases})), c.default,
                                     tuple(c.added)) for c in schema.columns)
            for i, (start, db, name) in enumerate(names):
                after = tuple(schema.start) if i == 0 else tuple(start)
                until = tuple(names[i + 1][0]) if i + 1 < len(names) else None
                result.append(TableInterval(db.lower(), name.lower(), after, until, schema.database, schema.name,
                                            None if keys is None else tuple(keys), row_columns))
        return result

    def existence(self) -> list[tuple]:
        """(database, table, after, until) per stretch of points (after, until] at which a
        table of that name exists (until None: to the end), lower case, for every name a DDL
        mentioned; a name with no versions exists throughout (its rows keep their own
        schema). Rows of a name outside all its stretches have no table at their point."""
        result = []
        for key in sorted(self.known | set(self.versions)):
            versions = self.versions.get(key) or [([], UNKNOWN_COLUMNS)]
            start = None
            for i, (point, signature) in enumerate(versions):
                if signature is not None and start is None:
                    start = tuple(point)
                elif signature is None and start is not None:
                    result.append((*key, start, tuple(point)))
                    start = None
            if start is not None:
                result.append((*key, start, None))
        return result

    def create_statements(self) -> list[str]:
        return [t.create_statement() for _, t in sorted(self.tables.items()) if t.columns_known]

    def is_known(self, database: str | None, table: str) -> bool:
        return _key(database, table) in self.known

    def is_described(self, database: str | None, table: str) -> bool:
        """Known with its columns (not only renamed or truncated by the archive)."""
        key = _key(database, table)
        return key in self.known and key not in self.undescribed


def _add_unique(uniques: list, name: str | None, columns: list[str]) -> None:
    """Add a UNIQUE index; an unnamed one is named after its first column, as MySQL does."""
    if not name:
        name, n = columns[0], 2
        while any(i.lower() == name.lower() for i, _ in uniques):
            name, n = f"{columns[0]}_{n}", n + 1
    uniques.append((name, list(columns)))


def _add_unique_constraint(uniques: list, item) -> bool:
    """A table-level UNIQUE [KEY|INDEX] [name] (cols) or CONSTRAINT name UNIQUE (cols)."""
    name = None
    if isinstance(item, exp.Constraint):
        name = _name(item.this)
        item = next((e for e in item.expressions if isinstance(e, exp.UniqueColumnConstraint)), None)
    if not isinstance(item, exp.UniqueColumnConstraint) or not isinstance(item.this, exp.Schema):
        return False
    schema = item.this
    if schema.this is not None:
        name = _name(schema.this)
    _add_unique(uniques, name, [_name(e) for e in schema.expressions])
    return True


@functools.lru_cache(maxsize=65536)  # a statement is asked about once per run, per event copy
def statement_table(query: str) -> tuple[str, str] | None:
    """(database, table) a one-table DDL statement names with its database, e.g. the
    ``CREATE TABLE `xj_`.`user02` `` of a Canal message whose `database` is the session's
    `inventory`; None when it names no database, several tables, or cannot be read."""
    try:
        statements = _parse(_executable_comments(query))
    except DDLError:
        return None
    if len(statements) != 1:
        return None
    stmt = statements[0]
    if isinstance(stmt, exp.Command) and str(stmt.this).upper() == "ALTER":
        rest = stmt.expression if isinstance(stmt.expression, str) else stmt.expression.this
        try:
            stmt = _alter_without_options("ALTER " + str(rest))
        except DDLError:
            return None
        if not stmt:
            return None
    tables = []
    if isinstance(stmt, exp.Create) and (stmt.args.get("kind") or "").upper() == "TABLE":
        tables = [stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this]
    elif isinstance(stmt, exp.Alter) and (stmt.args.get("kind") or "").upper() == "TABLE":
        # (a rename names two tables; the event may carry either, leave it as it is)
        if not any(isinstance(a, exp.AlterRename) for a in stmt.args.get("actions") or []):
            tables = [stmt.this]
    elif isinstance(stmt, exp.Drop) and (stmt.args.get("kind") or "").upper() == "TABLE":
        tables = stmt.args.get("tables") or [stmt.this]
    elif isinstance(stmt, exp.TruncateTable):
        tables = stmt.expressions
    if len(tables) != 1 or not isinstance(tables[0], exp.Table) or not tables[0].db:
        return None
    return tables[0].db, tables[0].name


# ------------------------------------------------------------------ MySQL-isms of real binlogs

_TOKENIZER = sqlglot.Dialect.get_or_raise("mysql").tokenizer
# first words of ALTER TABLE clauses that change no column, key or name: table options,
# partitioning, algorithm hints (MySQL's alter_table_option / partition_options)
_TABLE_OPTION_WORDS = {
    "ENGINE", "COMMENT", "CHARSET", "CHARACTER", "COLLATE", "CONVERT", "AUTO_INCREMENT", "ROW_FORMAT",
    "KEY_BLOCK_SIZE", "AVG_ROW_LENGTH", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "CHECKSUM", "COMPRESSION",
    "ENCRYPTION", "STATS_PERSISTENT", "STATS_AUTO_RECALC", "STATS_SAMPLE_PAGES", "TABLESPACE", "ALGORITHM",
    "LOCK", "FORCE", "ORDER", "ENABLE", "DISABLE", "DISCARD", "IMPORT", "PARTITION", "PARTITIONS",
    "REMOVE", "COALESCE", "REORGANIZE", "EXCHANGE", "ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR",
    "TRUNCATE", "SHARD_ROW_ID_BITS", "PRE_SPLIT_REGIONS", "AUTO_ID_CACHE", "AUTO_RANDOM_BASE", "CACHE",
    "NOCACHE", "SECONDARY_ENGINE", "SECONDARY_LOAD", "SECONDARY_UNLOAD", "UNION", "INSERT_METHOD",
    "DATA", "INDEX", "DELAY_KEY_WRITE", "PASSWORD", "START", "STORAGE", "TTL", "TTL_ENABLE", "TTL_JOB_INTERVAL",
    "PLACEMENT", "SET",
}
_PARTITION_OPERATIONS = {"PARTITION", "PARTITIONING"}  # ADD / DROP / DISCARD ... PARTITION


def _executable_comments(query: str) -> str:
    """MySQL runs the text of `/*!NNNNN ... */` comments (mysqldump and binlogs carry them):
    they become plain text. Other comments, TiDB's `/*T![feature] ... */` included, stay."""
    if "/*!" not in query:
        return query
    out, i, n, quote = [], 0, len(query), None
    while i < n:
        c = query[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(query[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
            out.append(c)
        elif query.startswith("/*!", i):
            i += 3
            while i < n and query[i].isdigit():
                i += 1
            end = query.find("*/", i)
            end = n if end < 0 else end
            out.append(" " + query[i:end] + " ")
            i = end + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


_AHEAD_LIMIT = 8192  # parsed statements held ahead of `apply`: ~8 KB each
_ahead: dict[str, list | DDLError] = {}  # parsed by the thread, not yet taken by `_parse`
_taken: set[str] = set()  # texts `_parse` took or parsed since `parse_ahead` started
_ahead_run: list = [None]  # the current parse_ahead's token: an older thread stops
_ahead_room = threading.Condition()


def parse_ahead(queries) -> threading.Thread:
    """Parse DDL statements in a background thread, so that applying them later on the driver
    (between Spark jobs, on the run's critical path) finds them parsed: the driver's Python
    thread mostly waits for the Spark jobs that run meanwhile. An archive with thousands of
    DDL events spends seconds in sqlglot otherwise. `queries` in the order they will be
    applied: the thread stays at most _AHEAD_LIMIT statements ahead of `apply`, which takes
    each parse (so the driver's memory does not grow with the archive's DDL count; a 16M-event
    bench archive has 107k statements). Replaces what an earlier call parsed."""
    texts = list(dict.fromkeys(_executable_comments(q) for q in queries if q))
    token = object()
    with _ahead_room:
        _ahead.clear()
        _taken.clear()
        _ahead_run[0] = token
        _ahead_room.notify_all()

    def work():
        for text in texts:
            # the GIL back to the driver's thread between statements: it holds it only briefly
            # (planning, Py4J calls) and would otherwise wait out a switch interval each time
            time.sleep(0)
            with _ahead_room:
                while len(_ahead) >= _AHEAD_LIMIT and _ahead_run[0] is token:
                    _ahead_room.wait(1.0)
                if _ahead_run[0] is not token:
                    return
                if text in _taken or text in _ahead:  # the main thread was first
                    continue
            try:
                parsed = _parse_now(text)
            except DDLError as e:
                parsed = e
            with _ahead_room:
                if _ahead_run[0] is not token:
                    return
                if text not in _taken:
                    _ahead[text] = parsed

    thread = threading.Thread(target=work, name="ddl-parse-ahead", daemon=True)
    thread.start()
    return thread


def _parse(text: str) -> list:
    """`_parse_now`, or what `parse_ahead` parsed, taken: each parse is used once and then
    dropped (no statement is kept: an executor's decode tasks read every DDL statement of their
    objects, `statement_table`)."""
    with _ahead_room:
        parsed = _ahead.pop(text, None)
        if _ahead_run[0] is not None:
            _taken.add(text)
            _ahead_room.notify()
    if parsed is None:
        try:
            parsed = _parse_now(text)
        except DDLError as e:
            parsed = e
    if isinstance(parsed, DDLError):
        raise DDLError(str(parsed))
    return parsed


def _parse_now(text: str) -> list:
    """sqlglot's MySQL statements; a statement sqlglot cannot read is read again without what
    changes no column: a CREATE TABLE's trailing PARTITION BY clause, UNSIGNED after FLOAT
    (deprecated in MySQL 8.0.17; sqlglot refuses it)."""
    try:
        statements = [s for s in sqlglot.parse(text, read="mysql") if s is not None]
    except sqlglot.errors.SqlglotError as e:
        simpler = _without_unreadable_parts(text)
        statements = None
        if simpler != text:
            try:
                statements = [s for s in sqlglot.parse(simpler, read="mysql") if s is not None]
            except sqlglot.errors.SqlglotError:
                pass
        if statements is None:
            # an ALTER TABLE sqlglot cannot read (e.g. ADD COLUMN (a ..., b ...)): clause by clause
            tokens = _tokens(simpler.strip().rstrip(";"))
            if len(tokens) > 2 and tokens[0].token_type.name == "ALTER" and not any(
                    t.token_type.name == "SEMICOLON" for t in tokens):
                rest = simpler.strip().rstrip(";")[tokens[1].start:]
                return [exp.Command(this="ALTER", expression=exp.Literal.string(rest))]
            raise DDLError(f"cannot parse DDL: {e}".splitlines()[0]) from None
    if not statements:
        raise DDLError("empty DDL")
    return statements


def _tokens(text: str) -> list:
    try:
        return _TOKENIZER().tokenize(text)
    except sqlglot.errors.SqlglotError as e:
        raise DDLError(f"cannot parse DDL: {e}".splitlines()[0]) from None


def _without_unreadable_parts(text: str) -> str:
    tokens = _tokens(text)
    cut = []  # (start, end) character ranges to remove
    depth = 0
    for i, tok in enumerate(tokens):
        kind = tok.token_type.name
        if kind == "L_PAREN":
            depth += 1
        elif kind == "R_PAREN":
            depth -= 1
        elif kind == "SEMICOLON":
            depth = 0
        word = tok.text.upper()
        if word == "UNSIGNED" and i and _float_before(tokens, i):
            cut.append((tok.start, tok.end + 1))
        elif depth == 0 and (" ".join(word.split()) == "PARTITION BY" or (
                word == "PARTITION" and i + 1 < len(tokens) and tokens[i + 1].text.upper() == "BY")) \
                and any(t.token_type.name == "CREATE" for t in tokens[:i]):
            end = next((t.start for t in tokens[i:] if t.token_type.name == "SEMICOLON"), len(text))
            cut.append((tok.start, end))
    for start, end in sorted(cut, reverse=True):
        text = text[:start] + " " + text[end:]
    return text


def _float_before(tokens: list, i: int) -> bool:
    """Whether tokens[i] (UNSIGNED) follows FLOAT or FLOAT(p[,s])."""
    j = i - 1
    if tokens[j].token_type.name == "R_PAREN":
        while j > 0 and tokens[j].token_type.name != "L_PAREN":
            j -= 1
        j -= 1
    return j >= 0 and tokens[j].text.upper() == "FLOAT"


def _alter_without_options(text: str):
    """An ALTER TABLE sqlglot reads only as a command: its clauses that change no column are
    dropped (table options, partitioning, CONVERT TO CHARACTER SET), `ADD [COLUMN] (a ..., b ...)`
    becomes one ADD COLUMN per column, and the rest is parsed again. Returns the parsed ALTER,
    [] when nothing is left, or None when it is not an ALTER TABLE or still unreadable."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[1].token_type.name != "TABLE":
        return None
    i = 3
    while i + 1 < len(tokens) and tokens[i].token_type.name == "DOT":
        i += 2
    if i >= len(tokens):
        return None
    head = text[:tokens[i - 1].end + 1]
    clauses, depth, start = [], 0, i
    for j in range(i, len(tokens) + 1):
        if j == len(tokens) or (tokens[j].token_type.name == "COMMA" and depth == 0):
            clauses.append(tokens[start:j])
            start = j + 1
            continue
        depth += {"L_PAREN": 1, "R_PAREN": -1}.get(tokens[j].token_type.name, 0)
    kept = []
    for clause in clauses:
        if not clause:
            continue
        words = [w for t in clause[:3] for w in t.text.upper().split()]  # ("PARTITION BY" is one token)
        if words[0] == "DEFAULT" and len(words) > 1:
            words = words[1:]
        if words[0] in _TABLE_OPTION_WORDS or (words[0] in ("ADD", "DROP") and len(words) > 1
                                               and words[1] in _PARTITION_OPERATIONS):
            continue
        body = text[clause[0].start:clause[-1].end + 1]
        column_list = 2 if len(words) > 1 and words[1] == "COLUMN" else 1
        if words[0] == "ADD" and len(clause) > column_list and clause[column_list].token_type.name == "L_PAREN" \
                and clause[-1].token_type.name == "R_PAREN":
            inner = text[clause[column_list].end + 1:clause[-1].start]
            kept.extend(f"ADD COLUMN {part}" for part in _top_level_split(inner))
        else:
            kept.append(body)
    if not kept:
        return []
    try:
        parsed = sqlglot.parse_one(head + " " + ", ".join(kept), read="mysql")
    except sqlglot.errors.SqlglotError:
        return None
    return parsed if isinstance(parsed, exp.Alter) else None


def _top_level_split(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for tok in _tokens(text):
        kind = tok.token_type.name
        depth += {"L_PAREN": 1, "R_PAREN": -1}.get(kind, 0)
        if kind == "COMMA" and depth == 0:
            parts.append(text[start:tok.start])
            start = tok.end + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _type_text(kind) -> str:
    """A column type as the canonical mysql_type: lower case but for quoted ENUM/SET labels,
    no space after the commas (`decimal(10,2)`, `enum('A','b')`), as protocols write it."""
    text = kind.sql(dialect="mysql")
    out, quote = [], None
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            out.append(c)
            if c == quote:
                if i + 1 < len(text) and text[i + 1] == quote:
                    out.append(quote)
                    i += 1
                else:
                    quote = None
        elif c in "'\"":
            quote = c
            out.append(c)
        elif c == "," and text[i + 1:i + 2] == " ":
            out.append(",")
            i += 1
        else:
            out.append(c.lower())
        i += 1
    return "".join(out)


def _bit_or_hex_default(expr, mysql_type) -> bytes:
    """b'101' / x'0A' / 0x0A defaults: a number for BIT and integer columns (canonical BIT is
    its unsigned decimal), else the bytes they spell."""
    digits = expr.this or ""
    bits = isinstance(expr, exp.BitString)
    number = int(digits, 2 if bits else 16) if digits else 0
    if mysql_type.base == "bit" or mysql_type.base in INTEGER_BASES:
        return str(number).encode()
    width = (len(digits) + 7) // 8 if bits else (len(digits) + 1) // 2
    return number.to_bytes(width, "big")


def _default_value(expr, mysql_type, not_null: bool, point: Point) -> bytes | None:
    """Canonical value a row that predates the column gets (MySQL's rule for ADD COLUMN)."""
    if expr is not None:
        if isinstance(expr, exp.Null):
            return None
        if isinstance(expr, (exp.BitString, exp.HexString)):
            return _bit_or_hex_default(expr, mysql_type)
        if isinstance(expr, exp.Literal):
            text = expr.this
        elif isinstance(expr, exp.Neg) and isinstance(expr.this, exp.Literal):
            text = "-" + expr.this.this
        elif isinstance(expr, (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime)) or (
            isinstance(expr, exp.Anonymous) and expr.name.upper() in ("NOW", "CURRENT_TIMESTAMP")
        ):
            # existing rows get the time the ALTER ran: its commit time (UTC)
            if point and point[0] > 1 << 40:
                moment = to_datetime(point[0])
                fsp = declared_fsp(mysql_type) or 0
                fraction = "." + f"{moment.microsecond:06d}"[:fsp] if fsp else ""
                return (moment.strftime("%Y-%m-%d %H:%M:%S") + fraction).encode()
            return None
        elif isinstance(expr, exp.Boolean):
            text = "1" if expr.this else "0"
        else:
            text = expr.sql(dialect="mysql")
        if mysql_type.base in ("enum", "set"):
            value = enum_set_value(mysql_type, text)
            return value if value is not None else text.encode()
        if mysql_type.is_binary:
            return text.encode("latin-1", "replace")
        return text.encode()
    if not not_null:
        return None
    # NOT NULL without a default: MySQL's implicit default for the type
    base = mysql_type.base
    if base in INTEGER_BASES or base in ("decimal", "float", "double", "bit", "year"):
        if base == "decimal" and len(mysql_type.params) == 2 and mysql_type.params[1] != "0":
            return ("0." + "0" * int(mysql_type.params[1])).encode()
        return b"0"
    if base == "date":
        return b"0000-00-00"
    if base in ("datetime", "timestamp"):
        return b"0000-00-00 00:00:00"
    if base == "time":
        return b"00:00:00"
    if base == "enum":
        return b"1" if mysql_type.labels else b"0"
    if base == "set":
        return b"0"
    return b""


def schema_conflicts(history: SchemaHistory, shapes: list[dict], limit: int = 50) -> list[str]:
    """Cross-check the columns row events carry (their in-band schema) with the DDL history.

    `shapes`: one dict per distinct (database, table, columns) of after-images with `columns`
    [(name, type)], `first`/`last` points, `events`. A conflict is reported, never resolved:
    the replay still reads every row with the DDL schema of its time."""
    conflicts = []
    for shape in shapes:
        database, table = shape["database"], shape["table"]
        if not history.is_known(database, table):
            continue
        carried = {name.lower(): type_text for name, type_text in shape["columns"]}
        for point in (shape["first"], shape["last"]):
            expected = history.columns_at(database, table, list(point))
            if expected == UNKNOWN_COLUMNS:
                continue
            if expected is None:
                conflicts.append(f"{database}.{table}: {shape['events']} row events near point {list(point)} "
                                 "but the DDL history has no such table then")
                break
            parts = column_differences(dict(expected), carried)
            if parts:
                conflicts.append(f"{database}.{table}: {shape['events']} row events at points {list(shape['first'])}"
                                 f"..{list(shape['last'])} carry columns that disagree with the DDL history: "
                                 + "; ".join(parts))
                break
        if len(conflicts) >= limit:
            conflicts.append("... (more conflicts not listed)")
            break
    return conflicts


def column_differences(want: dict[str, str], carried: dict[str, str]) -> list[str]:
    """What a carried column set (lower-case name -> type text) lacks, adds or types
    differently (base type and signedness) compared with the DDL history's; empty if it agrees."""
    missing, extra = sorted(set(want) - set(carried)), sorted(set(carried) - set(want))
    retyped = sorted(name for name in set(want) & set(carried)
                     if carried[name] and want[name] and _type_key(carried[name]) != _type_key(want[name]))
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if extra:
        parts.append(f"unexpected {', '.join(extra)}")
    if retyped:
        parts.append("types differ for " + ", ".join(f"{n} ({carried[n]} vs {want[n]})" for n in retyped))
    return parts


def _type_key(type_text: str) -> tuple:
    parsed = parse_type(type_text)
    return parsed.base, parsed.unsigned


# types whose parameters shape or bound their values: a message that gives the bare name
# (TiCDC canal-json without content-compatible, open-protocol / craft type codes) leaves them unknown
_PARAMETRISED = {"decimal", "numeric", "char", "varchar", "binary", "varbinary", "enum", "set", "bit"}


def _coarse(type_text: str) -> bool:
    """Whether a column type from a message lacks the parameters its DDL type has."""
    parsed = parse_type(type_text or "")
    return not type_text or (parsed.base in _PARAMETRISED and not parsed.params)
