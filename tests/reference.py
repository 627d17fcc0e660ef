"""A deliberately simple reference replayer, independent of the Spark code (it shares no code
with spark_apps/ or cdc_codecs/): apply canonical events one by one, in the archive's order, to
lists of rows. Tests compare the Spark replay with it. It models the intended semantics
(docs/semantics.md):

* order: commit ts where the protocol carries one (a split key update's DELETE first); the
  source position (canal-protobuf's binlog position, OceanBase's record id) where it carries
  that instead; otherwise (Canal flat JSON, TiCDC canal-json without the TiDB extension) the
  point (t, partition, offset, index in message), t the highest `es` of the partition up to and
  including the message (event_points). A DDL at point P applies to the rows after P: a row in
  another partition at the DDL's t counts as after it (the DDL is on partition 0).
* identity: a table its DDL (or `schema_sql`) describes is keyed by its primary key, else by
  its first UNIQUE key whose columns are all NOT NULL, else it is keyless; a table nothing
  describes takes the columns and key columns of its first row event as its schema, and later
  DDL applies to it (a column added after a row was written shows its default).
* a keyless table is a multiset: INSERT adds a copy, DELETE removes one identical copy (none
  when the archive never wrote it), UPDATE removes one copy of the old image and adds the new.
* a row event for a table that does not exist at its point (dropped, created later, renamed
  away) is not part of the state.

It understands the DDL shapes the test histories use (CREATE TABLE with PRIMARY KEY / UNIQUE
KEY, CREATE TABLE LIKE, DROP/TRUNCATE TABLE, DROP DATABASE, ADD/DROP COLUMN with a literal
default, MODIFY COLUMN, ADD PRIMARY KEY, RENAME TABLE); it is an oracle for those, not a SQL
engine. `reference_history` gives the SCD2 versions of docs/replay.md §6 from the same replay.
"""

from __future__ import annotations

import copy
import re

_NAME = r"`?(?P<{0}>[\w-]+)`?"
_TABLE = rf"{_NAME.format('db')}\.{_NAME.format('table')}"


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes."""
    parts, depth, quote, current = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _names(text: str) -> list[str]:
    return [n.strip().strip("`") for n in text.split(",")]


def _column(text: str) -> dict:
    m = re.match(r"`?(\w+)`?\s+(.*)$", text, re.S)
    rest = m[2]
    default = re.search(r"\bDEFAULT\s+('(?:[^']|'')*'|\S+)", rest, re.I)
    value = None
    if default and default[1].upper() != "NULL":
        value = default[1][1:-1].replace("''", "'").encode() if default[1].startswith("'") else default[1].encode()
    not_null = bool(re.search(r"\bNOT\s+NULL\b|\bPRIMARY\s+KEY\b", rest, re.I))
    return {"name": m[1], "default": value, "not_null": not_null,
            "primary": bool(re.search(r"\bPRIMARY\s+KEY\b", rest, re.I)),
            "unique": bool(re.search(r"\bUNIQUE\b", rest, re.I))}


def _parse_create(body: str) -> dict:
    columns, primary, uniques = [], [], []
    for part in _split_top(body):
        if m := re.match(r"PRIMARY\s+KEY\s*\((.*)\)", part, re.I):
            primary = _names(m[1])
        elif m := re.match(r"(?:CONSTRAINT\s+`?\w+`?\s+)?UNIQUE(?:\s+(?:KEY|INDEX))?(?:\s+`?\w+`?)?\s*\((.*)\)", part, re.I):
            uniques.append(_names(m[1]))
        elif re.match(r"(KEY|INDEX)\b", part, re.I):
            continue
        else:
            col = _column(part)
            columns.append(col)
            if col["primary"]:
                primary.append(col["name"])
            if col["unique"]:
                uniques.append([col["name"]])
    return {"columns": columns, "primary": primary, "uniques": uniques}


def _identity(schema: dict) -> list[str]:
    if schema["primary"]:
        return schema["primary"]
    not_null = {c["name"] for c in schema["columns"] if c["not_null"] or c["name"] in schema["primary"]}
    for unique in schema["uniques"]:
        if all(n in not_null for n in unique):
            return unique
    return []


def _schema_of_event(event: dict, image: list[dict]) -> dict:
    """The schema of a table no DDL describes: the columns its first row event carries, keyed by
    the key columns the event names (pkNames / isKey / handle-key flags)."""
    keys = list(event["key_columns"] or [])
    return {"columns": [{"name": c["name"], "default": None, "not_null": c["name"] in keys,
                         "primary": c["name"] in keys, "unique": False} for c in image],
            "primary": keys, "uniques": []}


class _Table:
    def __init__(self, schema: dict | None):
        self.schema = schema  # None: nothing describes it yet (its first row event will)
        self.rows: list[dict] = []  # each {column: value}, in the table's current columns
        # no identity at some point: its rows are named by all their columns even after a key is
        # added (before it, two rows could share the key's values)
        self.keyless_once = schema is not None and not _identity(schema)

    def identity(self) -> list[str]:
        """The columns that identify a row; [] for a keyless table (a multiset)."""
        return _identity(self.schema)

    def value(self, image_values: dict, name: str):
        if name in image_values:
            return image_values[name]
        return next((c["default"] for c in self.schema["columns"] if c["name"] == name), None)

    def project(self, image, written: int | None = None) -> dict:
        """An image as the table has it now: its columns, a missing one at its default.
        `written`: the ADD COLUMN count when the image was written (`_ADDED`); a column added
        after it takes its default even if the image carries a column of that name (one
        dropped and added again: MySQL does not bring the old values back)."""
        values = {c["name"]: c["value"] for c in image}
        return {c["name"]: c["default"] if written is not None and c.get("added", 0) > written
                else self.value(values, c["name"]) for c in self.schema["columns"]}

    def find(self, values: dict) -> int | None:
        names = self.identity() or list(values)
        want = [values[n] for n in names]
        for i, row in enumerate(self.rows):
            if [row.get(n) for n in names] == want:
                return i
        return None

    def apply(self, event) -> None:
        if self.schema is None:
            self.schema = _schema_of_event(event, event["after"] or event["before"])
            self.keyless_once = not self.identity()
        op = event["op"]
        keyless = not self.identity()
        if op in ("update", "delete"):  # one copy (keyless) / the row with the key, if present
            found = self.find(self.project(event["before"]))
            if found is not None:
                del self.rows[found]
        if op in ("insert", "update"):
            after = self.project(event["after"])
            if not keyless:  # a key holds one row: the new image replaces what it held
                found = self.find(after)
                if found is not None:
                    del self.rows[found]
            self.rows.append(after)

    def state(self) -> dict:
        names = self.identity()
        return {tuple(row[n] for n in (names or list(row))): dict(row) for row in self.rows}

    def multiset(self) -> list[tuple]:
        return sorted((tuple(sorted(row.items())) for row in self.rows), key=repr)


def event_points(placements, es_unit_ms: int = 1) -> dict:
    """{id(event): point} for archives without commit ts or position (Canal flat JSON, TiCDC
    canal-json without the TiDB extension): the point of a message is (t, partition, offset,
    index in message), t the highest event time `es` (in units of `es_unit_ms`: Canal's are
    whole seconds) of its partition up to and including it in offset order. A redelivered
    event counts at its first placement."""
    points: dict = {}
    by_partition: dict = {}
    for placement in placements:
        by_partition.setdefault(placement[0], []).append(placement)
    for partition, messages in by_partition.items():
        highest = None
        for _, offset, index, event in sorted(messages, key=lambda m: (m[1], m[2])):
            es = event["execute_ts_ms"] // es_unit_ms * es_unit_ms
            highest = es if highest is None else max(highest, es)
            point = (highest, partition, offset, index)
            if id(event) not in points or point < points[id(event)][0]:
                points[id(event)] = (point, event)
    return points


def _ordered(events, placements, es_unit_ms) -> list[dict]:
    if placements is not None:
        points = event_points(placements, es_unit_ms)
        return [e for _, e in sorted(points.values(), key=lambda pe: pe[0]) if e["kind"] in ("row", "ddl")]
    rows_and_ddl = [e for e in events if e["kind"] in ("row", "ddl")]
    if rows_and_ddl and all(e["commit_ts"] is None for e in rows_and_ddl):  # canal-protobuf, OceanBase
        return sorted(rows_and_ddl, key=lambda e: tuple(e["position"]))
    # a split key update (DELETE + INSERT at one commit ts): the DELETE first
    return sorted(rows_and_ddl, key=lambda e: (e["commit_ts"], 0 if e["op"] == "delete" else 1))


# ADD COLUMNs applied so far (a clock: a column's `added` and a change's point compare by it)
_ADDED = [0]


def _replay(events, as_of, schema_sql, placements, es_unit_ms, changes: list | None = None) -> dict:
    """Apply the events; `changes`, when given, receives (table object, event, the ADD COLUMN
    clock `_ADDED` then) for every row event applied to a table (the object follows the table
    through RENAMEs)."""
    tables: dict = {}
    for statement in schema_sql.split(";"):
        if statement.strip():
            _apply_ddl(tables, set(), statement)
    ordered = _ordered(events, placements, es_unit_ms)
    if as_of is not None:
        ordered = [e for e in ordered if e["commit_ts"] is None or e["commit_ts"] <= as_of]
    absent = _created_later(ordered) - set(tables)
    for event in ordered:
        if event["kind"] == "ddl":
            _apply_ddl(tables, absent, event["ddl_query"])
            continue
        name = (event["database"], event["table"])
        if name in absent:
            continue  # no such table at its point (dropped, not created yet, renamed away): quarantined
        table = tables.setdefault(name, _Table(None))
        table.apply(event)
        if changes is not None:
            changes.append((table, event, _ADDED[0]))
    return tables


def reference_state(events: list[dict], as_of: int | None = None, schema_sql: str = "", *,
                    placements=None, es_unit_ms: int = 1) -> dict:
    """{(db, table): {key: {column: value}}} after applying every event with commit ts <= as_of
    (a keyless table's identical rows show once here: reference_rows keeps the copies).
    `schema_sql`: CREATE TABLE statements describing tables before the events (--schema).
    `placements`: [(partition, offset, index in message, event)] of an archive without commit
    ts (order by event time and offset, see event_points; `events` is then not used)."""
    tables = _replay(events, as_of, schema_sql, placements, es_unit_ms)
    return {k: t.state() for k, t in tables.items() if t.rows}


def reference_rows(events: list[dict], as_of: int | None = None, schema_sql: str = "", *,
                   placements=None, es_unit_ms: int = 1) -> dict:
    """{(db, table): sorted [row as sorted (column, value) pairs]}: the tables as multisets,
    identical rows of a keyless table as many times as the table holds them."""
    tables = _replay(events, as_of, schema_sql, placements, es_unit_ms)
    return {k: t.multiset() for k, t in tables.items() if t.rows}


def reference_history(events: list[dict], as_of: int | None = None, schema_sql: str = "") -> dict:
    """{(db, table) at the end: sorted [(op, valid_from, valid_to, current, row as sorted (column,
    value) pairs)]}: SCD type 2 as docs/replay.md §6 states it, from events with commit ts. Every
    row change is a version of the row it names, named as the table names it at the end: by its
    key there, or, for a table without one (or without one at some point: a key added later),
    by all its columns there (an image written before an ADD COLUMN takes the column's default;
    a dropped column is left out). A DELETE is a version
    `delete` holding the deleted row; an UPDATE whose old and new rows differ by that name is a
    `delete` of the old one and an `update` of the new one. Each version is valid from its commit
    ts to the next version of the same row (None: the last); `current` marks a last version that
    is not a deletion. Changes of a table that does not exist at their point make no version."""
    changes: list = []
    tables = _replay(events, as_of, schema_sql, None, 1, changes)
    final = {id(t): name for name, t in tables.items()}
    versions: dict = {}
    for table, event, written in changes:
        if id(table) not in final:
            continue  # dropped later: not in the output
        names = (not table.keyless_once and table.identity()) or [c["name"] for c in table.schema["columns"]]

        def version(image, op):
            row = table.project(image, written)
            versions.setdefault((final[id(table)], tuple(row[n] for n in names)), []).append(
                (op, event["commit_ts"], tuple(sorted(row.items()))))

        before = event["before"] and table.project(event["before"], written)
        after = event["after"] and table.project(event["after"], written)
        if event["op"] == "delete":
            version(event["before"], "delete")
        elif event["op"] == "update" and before and [before[n] for n in names] != [after[n] for n in names]:
            version(event["before"], "delete")
            version(event["after"], "update")
        else:
            version(event["after"], event["op"])
    out: dict = {}
    for (name, _), found in versions.items():
        for i, (op, valid_from, row) in enumerate(found):
            last = i == len(found) - 1
            out.setdefault(name, []).append(
                (op, valid_from, None if last else found[i + 1][1], last and op != "delete", row))
    return {name: sorted(rows, key=repr) for name, rows in out.items()}


_CREATE = rf"CREATE TABLE (?:IF NOT EXISTS )?{_TABLE}"
_RENAME_PAIR = rf"{_TABLE}\s+TO\s+`?(?P<db2>[\w-]+)`?\.`?(?P<table2>[\w-]+)`?"


def _rename_pairs(query: str) -> list[tuple]:
    m = re.match(r"RENAME TABLES? (.*)$", query.strip(), re.I | re.S)
    if not m:
        return []
    return [((p["db"], p["table"]), (p["db2"], p["table2"]))
            for part in _split_top(m[1]) if (p := re.match(_RENAME_PAIR, part, re.I))]


def _created_later(ordered) -> set:
    """Tables whose first existence-changing DDL creates them (CREATE TABLE, RENAME ... TO):
    they do not exist before it. A CREATE TABLE IF NOT EXISTS after rows of its table (MySQL
    logs it when the table exists) creates nothing: the table was there before the archive."""
    seen, later, rows = set(), set(), set()
    for event in ordered:
        if event["kind"] != "ddl":
            rows.add((event["database"], event["table"]))
            continue
        q = event["ddl_query"].strip()
        if m := re.match(_CREATE, q, re.I):
            name = (m["db"], m["table"])
            existed = re.match(r"CREATE TABLE IF NOT EXISTS", q, re.I) and name in rows
            if name not in seen and not existed:
                later.add(name)
            seen.add(name)
        elif m := re.match(rf"DROP TABLE (?:IF EXISTS )?{_TABLE}", q, re.I):
            seen.add((m["db"], m["table"]))
        for old, new in _rename_pairs(q):
            seen.add(old)
            if new not in seen:
                later.add(new)
            seen.add(new)
    return later


def _apply_ddl(tables: dict, absent: set, query: str) -> None:
    q = query.strip()
    if (m := re.match(r"CREATE TABLE IF NOT EXISTS " + _TABLE, q, re.I)) and (m["db"], m["table"]) in tables:
        return  # the table exists: nothing happens
    if m := re.match(rf"{_CREATE}\s+LIKE\s+{_TABLE.replace('db', 'sdb').replace('table', 'stable')}", q, re.I):
        source = tables.get((m["sdb"], m["stable"]))
        schema = copy.deepcopy(source.schema) if source is not None else None
        tables[(m["db"], m["table"])] = _Table(schema)
        absent.discard((m["db"], m["table"]))
    elif m := re.match(rf"{_CREATE}\s*\((?P<body>.*)\)", q, re.I | re.S):
        tables[(m["db"], m["table"])] = _Table(_parse_create(m["body"]))
        absent.discard((m["db"], m["table"]))
    elif m := re.match(r"DROP (?:DATABASE|SCHEMA) (?:IF EXISTS )?`?(?P<db>[\w-]+)`?", q, re.I):
        for name in [n for n in tables if n[0] == m["db"]]:
            del tables[name]
            absent.add(name)
    elif m := re.match(rf"(DROP|TRUNCATE) TABLE (?:IF EXISTS )?{_TABLE}", q, re.I):
        if m[1].upper() == "DROP":
            tables.pop((m["db"], m["table"]), None)
            absent.add((m["db"], m["table"]))
        elif (m["db"], m["table"]) in tables:
            tables[(m["db"], m["table"])].rows.clear()
    elif m := re.match(rf"ALTER TABLE {_TABLE} ADD COLUMN (?P<def>.*)$", q, re.I | re.S):
        col = _column(m["def"])
        table = tables.get((m["db"], m["table"]))
        if table is not None and table.schema is not None:
            _ADDED[0] += 1
            table.schema["columns"].append({**col, "added": _ADDED[0]})
            for row in table.rows:  # rows written before it and never re-sent: the default
                row[col["name"]] = col["default"]
    elif m := re.match(rf"ALTER TABLE {_TABLE} DROP COLUMN `?(?P<col>\w+)`?", q, re.I):
        table = tables.get((m["db"], m["table"]))
        if table is not None and table.schema is not None:
            schema = table.schema
            schema["columns"] = [c for c in schema["columns"] if c["name"] != m["col"]]
            schema["primary"] = [n for n in schema["primary"] if n != m["col"]]
            for unique in schema["uniques"]:
                unique[:] = [n for n in unique if n != m["col"]]
            schema["uniques"] = [u for u in schema["uniques"] if u]
            for row in table.rows:
                row.pop(m["col"], None)
    elif m := re.match(rf"ALTER TABLE {_TABLE} MODIFY (?:COLUMN )?(?P<def>.*)$", q, re.I | re.S):
        col = _column(m["def"])  # the values stay as they are; the column's definition changes
        table = tables.get((m["db"], m["table"]))
        if table is not None and table.schema is not None:
            table.schema["columns"] = [col if c["name"] == col["name"] else c for c in table.schema["columns"]]
    elif m := re.match(rf"ALTER TABLE {_TABLE} ADD PRIMARY KEY\s*\((?P<cols>.*)\)", q, re.I):
        table = tables.get((m["db"], m["table"]))
        if table is not None and table.schema is not None:
            table.schema["primary"] = _names(m["cols"])
            for c in table.schema["columns"]:
                c["not_null"] = c["not_null"] or c["name"] in table.schema["primary"]
    elif pairs := _rename_pairs(q):
        for old, new in pairs:  # MySQL applies the pairs left to right
            tables[new] = tables.pop(old, None) or _Table(None)
            absent.add(old)
            absent.discard(new)
