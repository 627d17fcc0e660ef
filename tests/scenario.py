"""Hand-written histories for replay tests: a tiny database simulator that emits the
canonical events TiCDC would send and keeps the true state itself, independently of the
replay code. Every DDL kind the replay claims to handle has a method here.

    s = Scenario()
    s.ddl_create("t", [("id", "int"), ("a", "varchar(10)")], key=["id"])
    s.insert("t", id=1, a="x")
    s.add_column("t", "b", "int", default="5")
    s.state()   # {("d", "t"): {(b"1",): {"id": b"1", "a": b"x", "b": b"5"}}}
"""

from __future__ import annotations

import copy

from cdc_codecs.ddl_types import classify
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from cdc_codecs.mysql_types import parse_type

EPOCH_MS = 1_767_225_600_000


class Scenario:
    def __init__(self, database: str = "d"):
        self.db = database
        self.tables: dict[tuple[str, str], dict] = {}  # key -> {"columns": [(name, type)], "key": [...], "rows": {}}
        self.events: list[dict] = []
        self.ms = EPOCH_MS
        self.snapshots: list[tuple[int, dict]] = []

    # ------------------------------------------------------------------ helpers
    def _ts(self) -> int:
        self.ms += 5
        return self.ms << 18

    def _table(self, table: str, db: str | None = None) -> dict:
        return self.tables[(db or self.db, table)]

    def _image(self, t: dict, values: dict) -> list[dict]:
        image = []
        for name, type_text in t["columns"]:
            flags = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) if name in t["key"] else 0
            if parse_type(type_text).is_binary:
                flags |= ColumnFlag.BINARY
            image.append({"name": name, "mysql_type": type_text, "flags": flags, "value": values.get(name), "label": None})
        return image

    def _key(self, t: dict, values: dict) -> tuple:
        names = t["key"] or t.get("unique") or [n for n, _ in t["columns"]]
        return tuple(values.get(n) for n in names)

    def ddl(self, query: str, table: str | None = None, db: str | None = None) -> int:
        ts = self._ts()
        self.events.append(new_event(Kind.DDL, commit_ts=ts, execute_ts_ms=ts >> 18, database=db or self.db,
                                     table=table, ddl_query=query, ddl_type=classify(query)))
        self._mark(ts)
        return ts

    def _row(self, table: str, op: str, before: dict | None, after: dict | None, db=None, ts=None) -> int:
        t = self._table(table, db)
        ts = ts or self._ts()
        self.events.append(new_event(
            Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=ts >> 18, database=db or self.db, table=table,
            key_columns=list(t["key"]), before=self._image(t, before) if before is not None else None,
            after=self._image(t, after) if after is not None else None))
        self._mark(ts)
        return ts

    def _mark(self, ts: int) -> None:
        self.snapshots.append((ts, self.state()))

    # ------------------------------------------------------------------ DML
    def insert(self, table: str, db: str | None = None, ts: int | None = None, **values) -> int:
        t = self._table(table, db)
        row = {n: _b(values.get(n)) for n, _ in t["columns"]}
        t["rows"][self._key(t, row)] = row
        return self._row(table, Op.INSERT, None, row, db, ts)

    def update(self, table: str, key: tuple, db: str | None = None, ts: int | None = None, **changes) -> int:
        t = self._table(table, db)
        old = t["rows"].pop(tuple(_b(k) for k in key))
        new = {**old, **{n: _b(v) for n, v in changes.items()}}
        t["rows"][self._key(t, new)] = new
        return self._row(table, Op.UPDATE, old, new, db, ts)

    def delete(self, table: str, key: tuple, db: str | None = None, ts: int | None = None) -> int:
        t = self._table(table, db)
        old = t["rows"].pop(tuple(_b(k) for k in key))
        return self._row(table, Op.DELETE, old, None, db, ts)

    # ------------------------------------------------------------------ DDL
    def create_database(self, db: str) -> int:
        return self.ddl(f"CREATE DATABASE `{db}`", None, db)

    def drop_database(self, db: str) -> int:
        for key in [k for k in self.tables if k[0] == db]:
            del self.tables[key]
        return self.ddl(f"DROP DATABASE `{db}`", None, db)

    def create_table(self, table: str, columns: list[tuple[str, str]], key: list[str], db: str | None = None,
                     unique: list[str] | None = None) -> int:
        """`unique`: without `key`, a NOT NULL UNIQUE key (the table's row identity; its events
        name no key columns, so only the DDL says what identifies a row)."""
        db = db or self.db
        self.tables[(db, table)] = {"columns": list(columns), "key": list(key), "rows": {}, "unique": list(unique or [])}
        defs = ", ".join(f"`{n}` {t}{' NOT NULL' if n in (unique or ()) else ''}" for n, t in columns)
        pk = f", PRIMARY KEY ({', '.join(f'`{k}`' for k in key)})" if key else ""
        if unique:
            pk += f", UNIQUE KEY `uk` ({', '.join(f'`{k}`' for k in unique)})"
        return self.ddl(f"CREATE TABLE `{db}`.`{table}` ({defs}{pk})", table, db)

    def create_table_like(self, table: str, source: str) -> int:
        src = self._table(source)
        self.tables[(self.db, table)] = {"columns": list(src["columns"]), "key": list(src["key"]), "rows": {}}
        return self.ddl(f"CREATE TABLE `{self.db}`.`{table}` LIKE `{self.db}`.`{source}`", table)

    def drop_table(self, table: str) -> int:
        del self.tables[(self.db, table)]
        return self.ddl(f"DROP TABLE `{self.db}`.`{table}`", table)

    def truncate(self, table: str) -> int:
        self._table(table)["rows"].clear()
        return self.ddl(f"TRUNCATE TABLE `{self.db}`.`{table}`", table)

    def rename_table(self, *pairs: tuple[str, str]) -> int:
        for old, new in pairs:  # MySQL applies the pairs left to right
            self.tables[(self.db, new)] = self.tables.pop((self.db, old))
        clause = ", ".join(f"`{self.db}`.`{o}` TO `{self.db}`.`{n}`" for o, n in pairs)
        return self.ddl(f"RENAME TABLE {clause}", pairs[0][0])

    def add_column(self, table: str, name: str, type_text: str, default: str | None = None) -> int:
        t = self._table(table)
        t["columns"].append((name, type_text))
        for row in t["rows"].values():
            row[name] = _b(default)
        t["rows"] = {self._key(t, row): row for row in t["rows"].values()}
        suffix = f" DEFAULT '{default}'" if default is not None else ""
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` ADD COLUMN `{name}` {type_text}{suffix}", table)

    def drop_column(self, table: str, name: str) -> int:
        t = self._table(table)
        t["columns"] = [c for c in t["columns"] if c[0] != name]
        for row in t["rows"].values():
            row.pop(name, None)
        t["rows"] = {self._key(t, row): row for row in t["rows"].values()}
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` DROP COLUMN `{name}`", table)

    def _rename_column(self, t: dict, old: str, new: str, type_text: str | None) -> None:
        t["columns"] = [(new if n == old else n, (type_text or ty) if n == old else ty) for n, ty in t["columns"]]
        t["key"] = [new if k == old else k for k in t["key"]]
        for row in t["rows"].values():
            row[new] = row.pop(old)
        # keep the row dicts in column order
        for key, row in list(t["rows"].items()):
            t["rows"][key] = {n: row.get(n) for n, _ in t["columns"]}

    def rename_column(self, table: str, old: str, new: str) -> int:
        self._rename_column(self._table(table), old, new, None)
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` RENAME COLUMN `{old}` TO `{new}`", table)

    def change_column(self, table: str, old: str, new: str, type_text: str) -> int:
        self._rename_column(self._table(table), old, new, type_text)
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` CHANGE `{old}` `{new}` {type_text}", table)

    def modify_column(self, table: str, name: str, type_text: str) -> int:
        t = self._table(table)
        t["columns"] = [(n, type_text if n == name else ty) for n, ty in t["columns"]]
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` MODIFY COLUMN `{name}` {type_text}", table)

    def set_primary_key(self, table: str, key: list[str]) -> int:
        t = self._table(table)
        t["key"] = list(key)
        t["rows"] = {self._key(t, row): row for row in t["rows"].values()}
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` ADD PRIMARY KEY ({', '.join(key)})", table)

    def drop_primary_key(self, table: str) -> int:
        t = self._table(table)
        t["key"] = []
        t["rows"] = {self._key(t, row): row for row in t["rows"].values()}
        return self.ddl(f"ALTER TABLE `{self.db}`.`{table}` DROP PRIMARY KEY", table)

    # ------------------------------------------------------------------ truth
    def state(self) -> dict:
        """{(db, table): {key: row}} with rows keyed by their current key values."""
        return {k: {key: dict(row) for key, row in t["rows"].items()}
                for k, t in copy.deepcopy(self.tables).items() if t["rows"]}

    def state_at(self, ts: int) -> dict:
        result = {}
        for at, state in self.snapshots:
            if at > ts:
                break
            result = state
        return result


def _b(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()
