"""Generate a CDC history, its Kafka-record archive, and the expected table state.

The generator simulates a small TiDB database (its own dict of rows, no code shared with the
replay) and writes what TiCDC would have sent: row changes dispatched by key to partitions,
DDL on the partitions the protocol's producer uses, watermarks broadcast every few
transactions, at-least-once redeliveries, transactions above the last watermark (pending),
and, optionally, corrupt lines. `expected` is the state at the last watermark: the truth a
replay must reproduce. Used by the demo, the tests and the benchmark.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import json
import random
import re
import zlib
from collections import defaultdict
from typing import Callable, NamedTuple

from cdc_codecs import KafkaRecord, get_codec
from cdc_codecs.archive import format_record, object_name
from cdc_codecs.ddl_types import classify
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from cdc_codecs.mysql_types import enum_set_label, parse_type

from . import storage
from .paths import segment
from cdc_codecs.tso import compose, physical_ms

EPOCH_MS = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
U64_MAX = (1 << 64) - 1
PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)
# a column without NOT NULL: TiCDC flags it nullable from the table's definition (not from the
# row's value), so its Avro schema is one per table version, whatever the rows hold
N = int(ColumnFlag.NULLABLE)

TABLES = {
    "orders": [
        ("id", "bigint", PK),
        ("customer", "varchar(64)", N),
        ("amount", "decimal(12,2)", N),
        ("status", "enum('new','paid','shipped')", N),
        ("payload", "varbinary(16)", int(ColumnFlag.BINARY) | N),
        ("created", "datetime(3)", N),
        ("big", "bigint unsigned", int(ColumnFlag.UNSIGNED) | N),
    ],
    "customers": [
        ("id", "int", PK),
        ("name", "varchar(64)", N),
        ("note", "text", N),
    ],
}
# Opt-in tables (generate(keyless=True / year_bit=True)): a table without any key whose rows
# repeat (MySQL keeps identical rows of a keyless table: a multiset), and one with YEAR and BIT
# columns (TiDB flags both UNSIGNED; its storage sink writes `YEAR UNSIGNED` / `BIT UNSIGNED`).
KEYLESS_TABLE = ("ledger", [("item", "varchar(8)", N), ("qty", "int", N)])
YEAR_BIT_TABLE = ("devices", [
    ("id", "int", PK),
    ("built", "year", int(ColumnFlag.UNSIGNED) | N),
    ("mask", "bit(8)", int(ColumnFlag.UNSIGNED) | N),
])
NAMES = ["Zoë", "李雷", "O'Brien", "<b>&co</b>", "tab\there", "Ωmega", "line\nbreak", "plain"]


# Protocols that order by a source position instead of commit ts: the generator gives their
# events the position their producer would (Canal: binlog file + offset + row; OceanBase: id).
POSITION_STYLES = {"canal-protobuf": "binlog", "oceanbase-avro": "id"}


@dataclasses.dataclass
class Generated:
    records: list[KafkaRecord]
    expected: dict  # {(db, table): {key tuple: {column: canonical bytes}}} at the last watermark
    final: dict  # the same after every transaction, pending ones included
    cut_ts: int
    events: list[dict]  # every change in commit order, including pending ones
    stats: dict
    # CREATE TABLE statements of the tables as they were before the archive (for --schema)
    schema_sql: str = ""
    ddl_before: list[dict] = dataclasses.field(default_factory=list)  # the CREATE statements sent first
    # every row / DDL message of the archive (redeliveries too) with its partition and offset
    placements: list["Placement"] = dataclasses.field(default_factory=list)
    final_rows: dict = dataclasses.field(default_factory=dict)  # keyless tables: sorted rows, copies kept
    tables_before: dict = dataclasses.field(default_factory=dict)  # {table: [(name, type, flags)]}
    keyless_tables: list[str] = dataclasses.field(default_factory=list)
    database: str = "shop"
    # with base_export: every change before the archive (the rows that predate it as INSERTs,
    # then the transactions the export holds), for a reference over the full history
    history_before: list[dict] = dataclasses.field(default_factory=list)
    base: "BaseState | None" = None


@dataclasses.dataclass
class BaseState:
    """What a full export taken just before the archive's first event holds."""

    position: dict  # {"tso": n} (TiDB) or {"log_file": "mysql-bin.000001", "log_pos": n} (MySQL)
    tables: list  # base_export.write.Table, the tables as they were at the position
    resent: int  # copies of changes at or before the position sent again at the archive's start


class Placement(NamedTuple):
    """Where one canonical event of the archive sits (each redelivery is a placement too)."""

    partition: int
    offset: int
    index: int  # the event's index in its message
    event: dict


MAX_EXTRA_COLUMNS = 8  # columns added by generated DDL that a table holds at most


tso = compose  # the generator's name for it, used by its tests


class _Simulator:
    def __init__(self, seed: int, database: str, ddl_rate: float, split_key_updates: bool, *,
                 keyless: bool = False, year_bit: bool = False, same_second_ddl: bool = False,
                 backward_es_rate: float = 0.0, ddl_after_rows: bool = False):
        self.rng = random.Random(seed)
        self.ddl_rate = ddl_rate
        self.split_key_updates = split_key_updates
        self.db = database
        self.tables = dict(TABLES)
        if year_bit:
            self.tables[YEAR_BIT_TABLE[0]] = YEAR_BIT_TABLE[1]
        self.keyless = {KEYLESS_TABLE[0]} if keyless else set()
        if keyless:
            self.tables[KEYLESS_TABLE[0]] = KEYLESS_TABLE[1]
        self.columns = {name: list(cols) for name, cols in self.tables.items()}
        self.rows: dict[str, dict[tuple, dict]] = {name: {} for name in self.tables if name not in self.keyless}
        self.bags: dict[str, list[dict]] = {name: [] for name in self.keyless}  # keyless: a multiset
        self.next_id = defaultdict(lambda: 1)
        self.deleted: dict[str, list] = defaultdict(list)
        self.ms = EPOCH_MS
        self.logical = 0
        self.extra_columns = 0
        # same_second_ddl: transactions left that keep the clock's millisecond, the table they favour
        self.same_second_ddl = same_second_ddl
        self.hold, self.focus = 0, None
        # backward_es_rate: transactions whose event time (es) is earlier than the one before,
        # never earlier than the last DDL's (the commit ts stay in order)
        self.backward_es_rate = backward_es_rate
        self.es_floor = EPOCH_MS
        # ddl_after_rows: DDL only on tables some row event of the archive already touched
        # (a mid-stream archive whose table the reader knows only from its rows)
        self.ddl_after_rows = ddl_after_rows
        self.touched_tables: set[str] = set()
        self.keyless_sent: set = set()  # (op, before, after, second): never two identical events
        self.keyless_in_transaction: set = set()
        self.defaults: dict = {}  # {(table, column): default text} of the columns DDL added

    def seed_rows(self, count: int) -> list[dict]:
        """Rows that existed before the archive starts (no event of the archive for them): a
        mid-stream archive's first change of such a key is an UPDATE or a DELETE. Returned as
        the INSERTs that made them, one transaction per table before the clock's start (the
        full history a base export's reference replays)."""
        events = []
        for i, table in enumerate(self.tables):
            ts = tso(EPOCH_MS - 1000 + i)
            for _ in range(count):
                row_id = self.next_id[table]
                self.next_id[table] += 1
                values = {n: self.value(table, n, t, row_id) for n, t, _ in self.columns[table]}
                if table in self.keyless:
                    self.bags[table].append(values)
                else:
                    self.rows[table][(str(row_id).encode(),)] = values
                events.append(new_event(
                    Kind.ROW, op=Op.INSERT, commit_ts=ts, execute_ts_ms=physical_ms(ts), database=self.db,
                    table=table, key_columns=[] if table in self.keyless else ["id"], before=None,
                    after=self.image(table, values)))
        return events

    def export_tables(self) -> list:
        """The tables as a full export taken now holds them (rows in primary-key order, a
        keyless table's in the order they were written)."""
        from .base_export.write import Table

        tables = []
        for table, columns in self.columns.items():
            if table in self.keyless:
                rows = [dict(v) for v in self.bags[table]]
            else:
                rows = [dict(self.rows[table][k]) for k in sorted(self.rows[table], key=lambda k: int(k[0]))]
            tables.append(Table(self.db, table, [(n, t, bool(f & ColumnFlag.PRIMARY_KEY)) for n, t, f in columns],
                                rows, {n: d for (t, n), d in self.defaults.items() if t == table}))
        return tables

    def create_sql(self) -> str:
        return "".join(self.create_query(t, cols) + ";\n" for t, cols in self.tables.items())

    def commit_ts(self) -> int:
        if self.hold:  # same_second_ddl: one more transaction in the DDL's millisecond
            self.hold -= 1
            self.logical += self.rng.randint(1, 50)
            return tso(self.ms, self.logical)
        self.ms += self.rng.randint(1, 40)
        self.logical = self.rng.randint(0, 1000)
        return tso(self.ms, self.logical)

    def value(self, table: str, name: str, type_text: str, row_id: int) -> bytes | None:
        r = self.rng
        if table in self.keyless:  # a tiny domain: identical rows are frequent
            return r.choice([b"a", b"b"]) if name == "item" else str(r.randint(1, 2)).encode()
        if name == "id":
            return str(row_id).encode()
        if r.random() < 0.08:
            return None
        base = parse_type(type_text).base
        if name == "customer" or name == "name":
            return r.choice(NAMES).encode()
        if name == "note":
            return ("note " + r.choice(NAMES) * r.randint(0, 3)).encode()
        if base == "decimal":
            return f"{r.randint(0, 10**8)}.{r.randint(0, 99):02d}".encode()
        if base == "enum":
            return str(r.randint(1, 3)).encode()
        if base == "varbinary":
            return bytes(r.randrange(256) for _ in range(r.randint(0, 16)))
        if base == "datetime":
            moment = dt.datetime(2026, 1, 1) + dt.timedelta(milliseconds=self.ms - EPOCH_MS)
            return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3].encode()
        if base == "year":
            return str(r.choice([1901, 2155, r.randint(1901, 2155)])).encode()
        if base == "bit":
            return str(r.choice([0, 255, r.randint(0, 255)])).encode()
        if type_text == "bigint unsigned":
            return str(r.choice([U64_MAX, 0, r.randint(0, U64_MAX)])).encode()
        if base == "int":
            return str(r.randint(-(2**31), 2**31 - 1)).encode()
        return str(r.randint(0, 1000)).encode()

    def image(self, table: str, values: dict) -> list[dict]:
        image = []
        for name, type_text, flags in self.columns[table]:
            value = values.get(name)
            mysql_type = parse_type(type_text)
            image.append({"name": name, "mysql_type": type_text, "flags": flags, "value": value,
                          "label": enum_set_label(mysql_type, value) if mysql_type.labels else None})
        return image

    def row_event(self, table, op, before, after, ts) -> dict:
        self.touched_tables.add(table)
        return new_event(
            Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=physical_ms(ts), database=self.db, table=table,
            key_columns=[] if table in self.keyless else ["id"],
            before=self.image(table, before) if before is not None else None,
            after=self.image(table, after) if after is not None else None,
        )

    def ddl_event(self, query: str, table: str | None, ts: int) -> dict:
        self.es_floor = max(self.es_floor, physical_ms(ts))
        if self.same_second_ddl:  # the next transactions share the DDL's millisecond (and second)
            self.hold, self.focus = 3, table
        return new_event(Kind.DDL, commit_ts=ts, execute_ts_ms=physical_ms(ts), database=self.db, table=table,
                         ddl_query=query, ddl_type=classify(query))

    def create_statements(self, ts) -> list[dict]:
        events = [self.ddl_event(f"CREATE DATABASE IF NOT EXISTS `{self.db}`", None, ts)]
        for table, cols in self.tables.items():
            ts = self.commit_ts()
            events.append(self.ddl_event(self.create_query(table, cols), table, ts))
        self.focus = None
        return events

    def create_query(self, table: str, cols: list) -> str:
        # upper-case keywords; quoted ENUM labels keep their case, as in MySQL's own DDL
        upper = ("'".join(p if i % 2 else p.upper() for i, p in enumerate(t.split("'"))) for _, t, _ in cols)
        defs = ", ".join(f"`{n}` {u}{' NOT NULL' if f & ColumnFlag.PRIMARY_KEY else ''}"
                         for (n, _, f), u in zip(cols, upper))
        key = "" if table in self.keyless else ", PRIMARY KEY (`id`)"
        return f"CREATE TABLE `{self.db}`.`{table}` ({defs}{key})"

    def event_time(self, ts: int) -> int:
        """The transaction's event time (es): its commit time, or with backward_es_rate now and
        then up to 3 s earlier (a later binlog transaction carrying an earlier second)."""
        es = physical_ms(ts)
        if self.backward_es_rate and self.rng.random() < self.backward_es_rate:
            es = max(self.es_floor, es - self.rng.randint(1000, 3000))
        return es

    def transaction(self) -> list[dict]:
        """One transaction: 1-4 row changes, or a DDL now and then."""
        r = self.rng
        ts = self.commit_ts()
        es = self.event_time(ts) if self.backward_es_rate else physical_ms(ts)
        if r.random() < self.ddl_rate:
            ddl = self.ddl(ts)
            if ddl is not None:
                return [ddl]
        events = []
        touched = set()
        self.keyless_in_transaction = set()
        tables = list(self.tables)
        for _ in range(r.randint(1, 4)):
            table = r.choice(tables)
            if self.focus in self.tables and r.random() < 0.8:
                table = self.focus
            if table in self.keyless:
                events += self.keyless_change(table, ts, es)
                continue
            rows = self.rows[table]
            choice = r.random()
            if not rows or choice < 0.45:
                if self.deleted[table] and r.random() < 0.3:  # insert - delete - insert of one key
                    row_id = self.deleted[table].pop(r.randrange(len(self.deleted[table])))
                else:
                    row_id = self.next_id[table]
                    self.next_id[table] += 1
                key = (str(row_id).encode(),)
                if key in rows or (table, key) in touched:
                    continue
                values = {n: self.value(table, n, t, row_id) for n, t, _ in self.columns[table]}
                rows[key] = values
                events.append(self.row_event(table, Op.INSERT, None, values, ts))
            else:
                key = r.choice(list(rows))
                if (table, key) in touched:
                    continue
                old = rows[key]
                if choice < 0.85:
                    new = dict(old)
                    for n, t, f in self.columns[table][1:]:
                        if r.random() < 0.5:
                            new[n] = self.value(table, n, t, int(key[0]))
                    moved = r.random() < 0.05
                    if moved:  # the primary key changes: the row moves
                        new_id = self.next_id[table]
                        self.next_id[table] += 1
                        new["id"] = str(new_id).encode()
                        del rows[key]
                        self.deleted[table].append(int(key[0]))
                        key = (new["id"],)
                    rows[key] = new
                    if moved and self.split_key_updates:  # TiCDC's MQ sinks: DELETE + INSERT
                        events.append(self.row_event(table, Op.DELETE, old, None, ts))
                        events.append(self.row_event(table, Op.INSERT, None, new, ts))
                    else:
                        events.append(self.row_event(table, Op.UPDATE, old, new, ts))
                else:
                    del rows[key]
                    self.deleted[table].append(int(key[0]))
                    events.append(self.row_event(table, Op.DELETE, old, None, ts))
                touched.add((table, key))
            touched.add((table, key))
        if self.backward_es_rate:
            for event in events:
                event["execute_ts_ms"] = es
        return events

    def keyless_change(self, table: str, ts: int, es: int) -> list[dict]:
        """A change of the keyless table: INSERT a copy (often of a row it already holds),
        DELETE or UPDATE one copy (MySQL's `DELETE ... LIMIT 1` / `UPDATE ... LIMIT 1`). Two
        events that would be indistinguishable (same change in the same second: a replay
        without commit ts could only take the second for a redelivery) are not generated."""
        r = self.rng
        bag = self.bags[table]
        choice = r.random()
        if not bag or choice < 0.6:
            op, before = Op.INSERT, None
            after = dict(r.choice(bag)) if bag and r.random() < 0.5 else {
                n: self.value(table, n, t, 0) for n, t, _ in self.columns[table]}
        else:
            before = r.choice(bag)
            if choice < 0.8:
                op, after = Op.DELETE, None
            else:
                op, after = Op.UPDATE, {n: self.value(table, n, t, 0) for n, t, _ in self.columns[table]}
                if after == before:
                    return []
        signature = (op, tuple(sorted((before or {}).items())), tuple(sorted((after or {}).items())),
                     es // 1000)
        images = {tuple(sorted(v.items())) for v in (before, after) if v is not None}
        if signature in self.keyless_sent or images & self.keyless_in_transaction:
            return []  # (one transaction changes a row image at most once: no order within it)
        self.keyless_sent.add(signature)
        self.keyless_in_transaction |= images
        if before is not None:
            bag.remove(before)
        if after is not None:
            bag.append(after)
        return [self.row_event(table, op, before, after, ts)]

    def ddl(self, ts) -> dict | None:
        r = self.rng
        choices = [t for t in self.tables if t not in self.keyless
                   and (not self.ddl_after_rows or t in self.touched_tables)]
        if not choices:
            return None
        table = r.choice(choices)
        added = [c for c in self.columns[table] if c[0].startswith("extra")]
        kind = r.random()
        # ADD is likelier than DROP, so without a bound a long history widened the tables
        # without end (~600 columns at 100k transactions); at the bound the DDL drops instead.
        if added and (kind < 0.35 or len(added) >= MAX_EXTRA_COLUMNS):
            name = added[-1][0]
            self.columns[table] = [c for c in self.columns[table] if c[0] != name]
            for row in self.rows[table].values():
                row.pop(name, None)
            return self.ddl_event(f"ALTER TABLE `{self.db}`.`{table}` DROP COLUMN `{name}`", table, ts)
        if kind < 0.9:
            self.extra_columns += 1
            name = f"extra{self.extra_columns}"
            default = r.randint(0, 99)
            self.columns[table].append((name, "int", N))
            self.defaults[(table, name)] = str(default)
            for row in self.rows[table].values():
                row[name] = str(default).encode()
            return self.ddl_event(
                f"ALTER TABLE `{self.db}`.`{table}` ADD COLUMN `{name}` INT DEFAULT {default}", table, ts)
        self.rows[table].clear()
        return self.ddl_event(f"TRUNCATE TABLE `{self.db}`.`{table}`", table, ts)

    def state(self) -> dict:
        """{(db, table): {key: row}}; a keyless table's rows keyed by all their values (two
        identical rows show as one here: Generated.final_rows keeps the copies)."""
        out = {(self.db, t): {k: dict(v) for k, v in rows.items()} for t, rows in self.rows.items()}
        for t, bag in self.bags.items():
            out[(self.db, t)] = {tuple(v[n] for n, _, _ in self.columns[t]): dict(v) for v in bag}
        return out

    def bag_state(self) -> dict:
        """{(db, table): sorted list of the keyless tables' rows, copies included}."""
        return {(self.db, t): sorted((tuple(sorted(v.items())) for v in bag), key=repr) for t, bag in self.bags.items()}


def generate(
    *,
    transactions: int = 200,
    partitions: int = 3,
    topic: str = "shop",
    database: str = "shop",
    protocol: str = "canal-json",
    options: dict | None = None,
    seed: int = 7,
    duplicate_rate: float = 0.05,
    watermark_every: int = 10,
    pending_transactions: int = 5,
    bad_values: int = 0,
    ddl_rate: float | None = None,
    split_key_updates: bool | None = None,
    mid_stream: bool = False,
    mid_stream_ddl: bool = False,
    keyless: bool = False,
    year_bit: bool = False,
    same_second_ddl: bool = False,
    backward_es_rate: float = 0.0,
    base_export: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Generated:
    """A history and its archive. `split_key_updates`: send a primary-key-changing UPDATE as
    DELETE + INSERT at one commit ts, as TiCDC's MQ sinks do by default (default: only for
    avro, whose UPDATE has no old values; the others keep the UPDATE to exercise row moves).

    `mid_stream`: the archive starts after the tables exist, as most real ones do: no DDL at
    all, rows that predate the archive (their first change in it is an UPDATE or a DELETE),
    and partitions whose first offset is arbitrary. `expected`/`final` then hold only the
    keys the archive changed (all a replay without a base snapshot can know).
    `mid_stream_ddl`: with `mid_stream`, DDL at `ddl_rate` all the same (ALTER / TRUNCATE of
    tables the archive never created, each after the table's first row event).

    Shapes real captures have (issue 32), all off by default:
    * `keyless`: a table `ledger` (item, qty) without any key, whose rows repeat: INSERT of a
      copy, DELETE / UPDATE of one copy (MySQL keeps identical rows of a keyless table);
    * `year_bit`: a table `devices` with YEAR and BIT(8) columns (see write_schema_files);
    * `same_second_ddl`: the 3 transactions after each DDL (CREATE TABLE included) commit in
      the DDL's millisecond, so in its second too (Canal's `es`), and mostly change its table:
      rows using a column in the same second as the ADD COLUMN that made it;
    * `backward_es_rate`: that fraction of the row transactions carries an event time (`es`,
      `execute_ts_ms`) 1-3 s earlier than its commit time (never earlier than the last DDL's),
      as a later binlog transaction can; commit ts stay in order.
    With `options={"flat-message-flavor": "canal"}` canal-json writes Alibaba Canal's flat
    message (`es` in whole seconds, no commit ts, no watermarks).
    `ddl_rate`: the share of transactions that are a DDL (ADD/DROP COLUMN, TRUNCATE); default
    0.02, and 0 for a mid-stream archive unless `mid_stream_ddl` (a rate given with
    `mid_stream` gives ALTERs of tables the archive never created).

    `base_export` (with `mid_stream`): a full export is taken just before the archive, as
    TiCDC's and Canal's documented starts on existing data do. The history then starts with
    the rows that predate the archive as INSERTs and `transactions // 4` (at least 3)
    transactions the archive does not hold; `Generated.base` has the export's position (for
    protocols with commit ts a TSO, the last of those transactions' commit ts; for
    canal-protobuf the binlog position after them) and tables, `history_before` those changes.
    The archive starts with copies of a run of them sent again (a changefeed or Canal
    restarted from an older checkpoint), which a replay must not apply over the export; only
    the partitions holding such a copy start at an arbitrary offset, the others at 0 (nothing
    of them is missing between the export and the archive).
    `expected`/`final` are then whole tables. Protocols that carry neither a commit ts nor a
    binlog position are refused (`export_position_kind`).

    `progress(done, records)` is called every 5% of the transactions (a long history takes
    minutes)."""
    options = default_options(protocol) if options is None else options
    codec = get_codec(protocol, options)
    if split_key_updates is None:
        split_key_updates = protocol == "avro"
    if ddl_rate is None:
        ddl_rate = 0.0 if mid_stream and not mid_stream_ddl else 0.02
    position_kind = None
    if base_export:
        if not mid_stream:
            raise ValueError("a base export goes with a mid-stream archive (mid_stream=True): a full archive "
                             "creates its tables itself")
        position_kind = export_position_kind(protocol, options)
    sim = _Simulator(seed, database, ddl_rate, split_key_updates,
                     keyless=keyless, year_bit=year_bit, same_second_ddl=same_second_ddl,
                     backward_es_rate=backward_es_rate, ddl_after_rows=mid_stream)
    schema_sql = sim.create_sql()
    tables_before = {t: list(cols) for t, cols in sim.columns.items()}
    history_before = []
    if mid_stream:
        history_before = sim.seed_rows(12)
    # each partition's messages: (key, value, event or None, index of the event in its message)
    streams: dict[int, list[tuple]] = defaultdict(list)
    all_events = []

    position_style = POSITION_STYLES.get(protocol)
    watermark_messages: dict[int, list] = defaultdict(list)
    sequence = iter(range(1, 1 << 62))

    def place(events):
        """The source positions of new events, in the order they happened."""
        for event in events:
            if position_style == "binlog" and event["kind"] != Kind.WATERMARK:
                event["position"] = [1, 4 + 100 * next(sequence), 0]  # binlog file, offset, row
            elif position_style == "id" and event["kind"] != Kind.WATERMARK:
                event["position"] = [next(sequence)]

    def send(events, new=True):
        if new:
            place(events)
        for event in events:
            if event["kind"] == Kind.ROW:
                image = event["after"] or event["before"]
                if event["table"] in sim.keyless:  # TiCDC / Canal dispatch a keyless table's rows by table
                    row_partition = zlib.crc32(event["table"].encode()) % partitions
                else:
                    key = next(c["value"] for c in image if c["name"] == "id")
                    row_partition = zlib.crc32(f"{event['table']}:{key.decode()}".encode()) % partitions
            else:
                row_partition = 0
            for p in codec.partitions_for(event, partitions, row_partition):
                for message in codec.encode([event], topic=topic, partition=p):
                    placed = event if event["kind"] != Kind.WATERMARK else None
                    streams[p].append((message.key, message.value, placed, 0))
                    if event["kind"] == Kind.WATERMARK:
                        watermark_messages[p].append((message.key, message.value, None, 0))
                    if sim.rng.random() < duplicate_rate:
                        # at-least-once: the same message again, a little later
                        streams[p].append((message.key, message.value, placed, 0))

    ddl_before = []
    if not mid_stream:
        ddl_before = sim.create_statements(sim.commit_ts())
        send(ddl_before)
    base, running = None, set()
    if base_export:
        place(history_before)
        for _ in range(max(3, transactions // 4)):
            events = sim.transaction()
            place(events)
            history_before.extend(events)
        base = BaseState(_export_position(position_kind, history_before), sim.export_tables(), 0)
        rows_before = [e for e in history_before if e["kind"] == Kind.ROW]
        start = sim.rng.randrange(len(rows_before))
        resent = rows_before[start:start + sim.rng.randint(1, 10)]
        send(resent, new=False)  # a restart from an older checkpoint sends these again first
        base.resent = len(resent)
        running = {p for p, messages in streams.items() if messages}
    cut_ts = 0
    report_every = max(1, transactions // 20)
    for i in range(transactions):
        if progress is not None and i and i % report_every == 0:
            progress(i, sum(len(s) for s in streams.values()))
        events = sim.transaction()
        all_events.extend(events)
        send(events)
        if (i + 1) % watermark_every == 0 or i == transactions - 1:
            sim.hold = 0  # nothing after a watermark commits below it
            cut_ts = tso(sim.ms, 1 << 17)
            send([new_event(Kind.WATERMARK, watermark_ts=cut_ts, execute_ts_ms=physical_ms(cut_ts))])
            # a redelivered watermark that falls back must be tolerated
            if i > watermark_every and sim.rng.random() < 0.2:
                for p in range(partitions):
                    if watermark_messages[p]:
                        streams[p].append(sim.rng.choice(watermark_messages[p][:-1] or watermark_messages[p]))
    expected = sim.state()
    applied_events = len(all_events)
    sim.ms += 1
    sim.hold = 0
    for _ in range(pending_transactions):
        events = sim.transaction()
        all_events.extend(events)
        send(events)

    for _ in range(bad_values):  # records whose value is not the protocol
        p = sim.rng.randrange(partitions)
        streams[p].insert(sim.rng.randrange(len(streams[p]) + 1),
                          (None, b"\x00not a " + protocol.encode(), None, 0))
    records = []
    placements = []
    for p in range(partitions):
        first = sim.rng.randrange(1, 10**9) if mid_stream else 0
        if base_export and p not in running:
            first = 0  # a partition the changefeed began at the export: its topic's first offset
        for i, (key, value, event, index) in enumerate(streams[p]):
            records.append(KafkaRecord(topic, p, first + i, EPOCH_MS + i, key, value))
            if event is not None:
                placements.append(Placement(p, first + i, index, event))
    final = sim.state()
    if mid_stream and not base_export:
        expected = _changed_only(expected, all_events[:applied_events])
        final = _changed_only(final, all_events)
    stats = {
        "transactions": transactions + pending_transactions,
        "records": len(records),
        "row_events": sum(e["kind"] == Kind.ROW for e in all_events),
        "bad_values": bad_values,
    }
    return Generated(records, expected, final, cut_ts, all_events, stats, schema_sql,
                     ddl_before=ddl_before, placements=placements, final_rows=sim.bag_state(),
                     tables_before=tables_before, keyless_tables=sorted(sim.keyless), database=database,
                     history_before=history_before if base_export else [], base=base)


def default_options(protocol: str) -> dict:
    """The codec options when none are given: TiCDC's TiDB extension where the protocol has it."""
    from cdc_codecs import codec_class

    has = any(o.name == "enable-tidb-extension" for o in codec_class(protocol).options)
    return {"enable-tidb-extension": "true"} if has else {}


def export_position_kind(protocol: str, options: dict | None) -> str:
    """How a full export's position joins this protocol's archive: "tso" when its messages
    carry TiDB's commit ts (a Dumpling export of TiDB: `Pos:` is the snapshot TSO), "binlog"
    when they carry a MySQL binlog position (canal-protobuf: mysqldump or Dumpling of MySQL).
    Refused (ValueError) when they carry neither: Canal's flat JSON and TiCDC canal-json
    without its TiDB extension (an event time only), OceanBase (a record id no export states)."""
    style = POSITION_STYLES.get(protocol)
    if style == "binlog":
        return "binlog"
    if style is not None:
        raise ValueError(f"{protocol} orders by its own record ids, which no Dumpling or mysqldump position "
                         "states: no base export can join it")
    codec = get_codec(protocol, default_options(protocol) if options is None else options)
    probe = new_event(Kind.ROW, op=Op.INSERT, commit_ts=tso(EPOCH_MS), execute_ts_ms=EPOCH_MS, database="d",
                      table="t", key_columns=["id"], before=None,
                      after=[{"name": "id", "mysql_type": "int", "flags": PK, "value": b"1", "label": None}])
    messages = list(codec.encode([probe], topic="t", partition=0))
    decoded = [e for m in messages for e in codec.decode(KafkaRecord("t", 0, 0, 0, m.key, m.value))]
    if not any(e["commit_ts"] is not None for e in decoded):
        raise ValueError(f"{protocol} with these options carries neither a commit ts nor a binlog position "
                         "(an event time only), so nothing joins an export's position to it")
    return "tso"


def _export_position(kind: str, history: list[dict]) -> dict:
    """The position of an export that holds `history`: the commit ts of its last change (a
    TSO at or below which the archive holds only copies), or the binlog offset just past its
    last event (a MySQL position is where the next transaction starts; Canal's row entries
    carry their own, later, offsets)."""
    if kind == "tso":
        return {"tso": max(e["commit_ts"] for e in history)}
    last = max(e["position"] for e in history)
    return {"log_file": f"mysql-bin.{last[0]:06d}", "log_pos": last[1] + 50}


BASE_EXPORT_KINDS = ("dumpling-sql", "dumpling-csv", "mysqldump")


def write_base_export(generated: Generated, kind: str, prefix: str, *, compression: str | None = None,
                      rows_per_file: int = 10, statement_size: int = 600) -> list[str]:
    """Write `generated.base` under `prefix` as `kind` writes it (dumpling-sql, dumpling-csv:
    Dumpling's `--filetype sql|csv --rows N --statement-size S [--compress C]`, of TiDB for a
    TSO position, of MySQL for a binlog one; mysqldump: `--single-transaction --source-data=2
    --databases` of MySQL 8.0, one `{db}.sql[.gz]` file). mysqldump of TiDB is refused: TiDB
    directs full exports to Dumpling, and a mysqldump of it states no TSO."""
    from .base_export import write

    base = generated.base
    if base is None:
        raise ValueError("this history has no base export: generate it with base_export=True")
    if kind not in BASE_EXPORT_KINDS:
        raise ValueError(f"base export {kind!r} is not one of {', '.join(BASE_EXPORT_KINDS)}")
    if kind == "mysqldump":
        if "tso" in base.position:
            raise ValueError("mysqldump goes with a MySQL binlog position (canal-protobuf); an archive of TiCDC "
                             "starts from a Dumpling export's TSO: use dumpling-sql or dumpling-csv")
        if compression not in (None, "gzip"):
            raise ValueError("a mysqldump file is compressed by piping it to gzip here (--compress gzip), not "
                             f"{compression}")
        data = write.mysqldump_file(base.tables, base.position)
        files = {f"{generated.database}.sql" + write.SUFFIXES[compression]: write.compress(data, compression)}
    else:
        files = write.dumpling_files(base.tables, base.position, kind.split("-")[1], rows_per_file=rows_per_file,
                                     statement_size=statement_size, compression=compression,
                                     server="tidb" if "tso" in base.position else "mysql")
    written = []
    for name, data in sorted(files.items()):
        uri = storage.join(prefix, name)
        storage.write_bytes(uri, data)
        written.append(uri)
    return written


def _changed_only(state: dict, events: list[dict]) -> dict:
    """The rows of `state` whose key some row event of `events` wrote (a keyless table: the
    rows equal to an image some event wrote)."""
    written = set()
    for e in events:
        if e["kind"] == Kind.ROW and e["after"] is not None:
            key = next((c["value"] for c in e["after"] if c["name"] == "id"), None)
            written.add((e["database"], e["table"], key if key is not None else
                         tuple(c["value"] for c in e["after"])))
    return {(db, t): {k: v for k, v in rows.items() if (db, t, k[0] if len(k) == 1 else k) in written}
            for (db, t), rows in state.items()}


TIDB_COLUMN_TYPES = {"int": "INT", "bigint": "BIGINT", "varchar": "VARCHAR", "decimal": "DECIMAL",
                     "enum": "ENUM", "varbinary": "VARBINARY", "datetime": "DATETIME", "text": "TEXT",
                     "year": "YEAR", "bit": "BIT"}


def schema_file_columns(columns: list) -> list[dict]:
    """A table's columns as TiCDC's storage sink writes them in a table schema file
    (pingcap/tiflow pkg/sink/cloudstorage/table_definition.go): the type name upper-cased plus
    ` UNSIGNED` when the column has TiDB's unsigned flag, which YEAR and BIT columns always
    have (`YEAR UNSIGNED`, `BIT UNSIGNED`); the length / precision / scale apart."""
    out = []
    for name, type_text, flags in columns:
        t = parse_type(type_text)
        unsigned = t.unsigned or t.base in ("year", "bit")
        column = {"ColumnName": name, "ColumnType": TIDB_COLUMN_TYPES[t.base] + (" UNSIGNED" if unsigned else "")}
        params = re.findall(r"\d+", type_text.split("(", 1)[1]) if "(" in type_text and not t.labels else []
        if t.base in ("varchar", "varbinary") and params:
            column["ColumnLength"] = params[0]
        elif t.base == "decimal" and params:
            column["ColumnPrecision"], column["ColumnScale"] = params[0], params[1]
        elif t.base == "datetime" and params:
            column["ColumnScale"] = params[0]
        elif t.base == "bit" and params:
            column["ColumnPrecision"] = params[0]
        if flags & ColumnFlag.PRIMARY_KEY:
            column["ColumnNullable"], column["ColumnIsPk"] = "false", "true"
        out.append(column)
    return out


def write_schema_files(generated: Generated, prefix: str) -> list[str]:
    """Write the tables as they were before the archive as TiCDC storage-sink table schema
    files, `{db}/{table}/meta/schema_{version}_{crc32}.json` under `prefix` (usable as
    `--schema`): with `year_bit`, the `devices` table's YEAR / BIT columns read `YEAR UNSIGNED`
    / `BIT UNSIGNED` there, as TiDB writes them."""
    version = tso(EPOCH_MS - 1000)
    written = []
    for table, columns in generated.tables_before.items():
        cols = schema_file_columns(columns)
        doc = {"Table": table, "Schema": generated.database, "Version": 1, "TableVersion": version,
               "Query": "", "Type": 3, "TableColumns": cols, "TableColumnsTotal": str(len(cols))}
        data = json.dumps(doc, ensure_ascii=False).encode()
        uri = storage.join(prefix, f"{generated.database}/{table}/meta/schema_{version}_{zlib.crc32(data):010d}.json")
        storage.write_bytes(uri, data)
        written.append(uri)
    return written


def write_archive(records: list[KafkaRecord], prefix: str, *, records_per_object: int = 500,
                  bad_lines: int = 0, seed: int = 7) -> list[str]:
    """Write records as a Kafka-record archive (gzip JSON lines) under `prefix`; with
    `bad_lines`, that many lines that are not records are mixed into the first objects."""
    rng = random.Random(seed)
    by_partition = defaultdict(list)
    for record in records:
        by_partition[(record.topic, record.partition)].append(record)
    written = []
    bad_left = bad_lines
    for (topic, partition), recs in sorted(by_partition.items()):
        for start in range(0, len(recs), records_per_object):
            chunk = recs[start:start + records_per_object]
            lines = [format_record(r) for r in chunk]
            if bad_left:
                lines.insert(rng.randrange(len(lines) + 1), b'{"topic": "broken", "partition": ')
                bad_left -= 1
            uri = storage.join(prefix, object_name(segment(topic), partition, chunk[0].offset))
            storage.write_bytes(uri, gzip.compress(b"\n".join(lines) + b"\n"))
            written.append(uri)
    return written
