"""A deliberately simple reference replayer, independent of the Spark code: apply canonical
events one by one, in commit order, to a dict. Tests compare the Spark replay with it.

It understands the DDL shapes the test histories use (CREATE TABLE with PRIMARY KEY / UNIQUE
KEY, DROP/TRUNCATE TABLE, ADD/DROP COLUMN with a literal default, RENAME TABLE); it is an
oracle for those, not a SQL engine.

Row identity is the database's: a table its DDL describes is keyed by its primary key, else by
its first UNIQUE key whose columns are all NOT NULL, else by all its current columns (stored
rows follow ADD/DROP COLUMN, so later images still find them). A table no DDL describes (the
archive began after it) is keyed by the key columns its events name, else by all values. An
UPDATE or DELETE of a row the archive never inserted replaces / removes nothing.
"""

from __future__ import annotations

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


class _Table:
    def __init__(self, schema: dict | None):
        self.schema = schema
        self.rows: list[dict] = []  # each {"values": {column: value}, "keys": key column names or None}

    def names(self, event, image) -> list[str]:
        """The columns that identify a row for this table."""
        if self.schema is not None:
            return _identity(self.schema) or [c["name"] for c in self.schema["columns"]]
        return list(event["key_columns"] or [c["name"] for c in image])

    def value(self, image_values: dict, name: str):
        if name in image_values or self.schema is None:
            return image_values.get(name)
        return next((c["default"] for c in self.schema["columns"] if c["name"] == name), None)

    def find(self, event, image) -> int | None:
        values = {c["name"]: c["value"] for c in image}
        names = self.names(event, image)
        want = [self.value(values, n) for n in names]
        for i, row in enumerate(self.rows):
            if [row["values"].get(n) for n in names] == want:
                return i
        return None

    def put(self, event, image) -> None:
        values = {c["name"]: c["value"] for c in image}
        if self.schema is not None:  # the row as the table has it now
            values = {c["name"]: self.value(values, c["name"]) for c in self.schema["columns"]}
        self.rows.append({"values": values, "keys": list(event["key_columns"] or []) or None})

    def state(self) -> dict:
        out = {}
        for row in self.rows:
            if self.schema is not None:
                names = _identity(self.schema) or list(row["values"])
            else:
                names = row["keys"] or list(row["values"])
            out[tuple(row["values"][n] for n in names)] = dict(row["values"])
        return out


def reference_state(events: list[dict], as_of: int | None = None, schema_sql: str = "") -> dict:
    """{(db, table): {key: {column: value}}} after applying every event with commit ts <= as_of.
    `schema_sql`: CREATE TABLE statements describing tables before the events (--schema)."""
    tables: dict = {}
    for statement in schema_sql.split(";"):
        if statement.strip():
            _apply_ddl(tables, statement)
    ordered = sorted(
        (e for e in events if e["kind"] in ("row", "ddl")),
        key=lambda e: (e["commit_ts"], 0 if e["op"] == "delete" else 1),
    )
    for event in ordered:
        if as_of is not None and event["commit_ts"] > as_of:
            break
        if event["kind"] == "ddl":
            _apply_ddl(tables, event["ddl_query"])
            continue
        table = tables.setdefault((event["database"], event["table"]), _Table(None))
        if event["op"] in ("update", "delete"):
            found = table.find(event, event["before"])
            if found is not None:
                del table.rows[found]
        if event["op"] in ("insert", "update"):
            found = table.find(event, event["after"])
            if found is not None:
                del table.rows[found]
            table.put(event, event["after"])
    return {k: t.state() for k, t in tables.items() if t.rows}


def _apply_ddl(tables: dict, query: str) -> None:
    q = query.strip()
    if m := re.match(rf"CREATE TABLE (?:IF NOT EXISTS )?{_TABLE}\s*\((?P<body>.*)\)", q, re.I | re.S):
        tables[(m["db"], m["table"])] = _Table(_parse_create(m["body"]))
    elif m := re.match(rf"(DROP|TRUNCATE) TABLE {_TABLE}", q, re.I):
        if m[1].upper() == "DROP":
            tables.pop((m["db"], m["table"]), None)
        elif (m["db"], m["table"]) in tables:
            tables[(m["db"], m["table"])].rows.clear()
    elif m := re.match(rf"ALTER TABLE {_TABLE} ADD COLUMN (?P<def>.*)$", q, re.I | re.S):
        col = _column(m["def"])
        table = tables.get((m["db"], m["table"]))
        if table is not None:
            if table.schema is not None:
                table.schema["columns"].append(col)
            for row in table.rows:
                row["values"][col["name"]] = col["default"]
    elif m := re.match(rf"ALTER TABLE {_TABLE} DROP COLUMN `?(?P<col>\w+)`?", q, re.I):
        table = tables.get((m["db"], m["table"]))
        if table is not None:
            if table.schema is not None:
                table.schema["columns"] = [c for c in table.schema["columns"] if c["name"] != m["col"]]
                for unique in table.schema["uniques"]:
                    unique[:] = [n for n in unique if n != m["col"]]
                table.schema["uniques"] = [u for u in table.schema["uniques"] if u]
            for row in table.rows:
                row["values"].pop(m["col"], None)
    elif m := re.match(rf"RENAME TABLE {_TABLE} TO `?(?P<db2>[\w-]+)`?\.`?(?P<table2>[\w-]+)`?", q, re.I):
        tables[(m["db2"], m["table2"])] = tables.pop((m["db"], m["table"]), _Table(None))
