"""A deliberately simple reference replayer, independent of the Spark code: apply canonical
events one by one, in commit order, to a dict. Tests compare the Spark replay with it.

It understands the DDL shapes the test histories use (CREATE/DROP/TRUNCATE TABLE, ADD/DROP
COLUMN with a literal default, RENAME TABLE); it is an oracle for those, not a SQL engine.
"""

from __future__ import annotations

import re

_TABLE = r"`?(?P<db>[\w-]+)`?\.`?(?P<table>[\w-]+)`?"


def _key(event, image):
    keys = event["key_columns"] or [c["name"] for c in image]
    values = {c["name"]: c["value"] for c in image}
    return tuple(values[k] for k in keys)


def reference_state(events: list[dict], as_of: int | None = None) -> dict:
    """{(db, table): {key: {column: value}}} after applying every event with commit ts <= as_of."""
    tables: dict = {}
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
        rows = tables.setdefault((event["database"], event["table"]), {})
        if event["op"] in ("update", "delete"):
            rows.pop(_key(event, event["before"]), None)
        if event["op"] in ("insert", "update"):
            rows[_key(event, event["after"])] = {c["name"]: c["value"] for c in event["after"]}
    return {k: v for k, v in tables.items() if v}


def _apply_ddl(tables: dict, query: str) -> None:
    q = query.strip()
    if m := re.match(rf"CREATE TABLE {_TABLE}", q, re.I):
        tables[(m["db"], m["table"])] = {}
    elif m := re.match(rf"(DROP|TRUNCATE) TABLE {_TABLE}", q, re.I):
        if m[1].upper() == "DROP":
            tables.pop((m["db"], m["table"]), None)
        else:
            tables[(m["db"], m["table"])] = {}
    elif m := re.match(rf"ALTER TABLE {_TABLE} ADD COLUMN `?(?P<col>\w+)`? \w+ DEFAULT (?P<default>\S+)", q, re.I):
        for row in tables.get((m["db"], m["table"]), {}).values():
            row[m["col"]] = None if m["default"].upper() == "NULL" else m["default"].strip("'").encode()
    elif m := re.match(rf"ALTER TABLE {_TABLE} DROP COLUMN `?(?P<col>\w+)`?", q, re.I):
        for row in tables.get((m["db"], m["table"]), {}).values():
            row.pop(m["col"], None)
    elif m := re.match(rf"RENAME TABLE {_TABLE} TO `?(?P<db2>[\w-]+)`?\.`?(?P<table2>[\w-]+)`?", q, re.I):
        tables[(m["db2"], m["table2"])] = tables.pop((m["db"], m["table"]), {})
