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
import random
import zlib
from collections import defaultdict
from typing import Callable

from cdc_codecs import KafkaRecord, get_codec
from cdc_codecs.archive import format_record, object_name
from cdc_codecs.ddl_types import classify
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from cdc_codecs.mysql_types import enum_set_label, parse_type

from . import storage
from .paths import segment

EPOCH_MS = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
U64_MAX = (1 << 64) - 1
PK = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY)

TABLES = {
    "orders": [
        ("id", "bigint", PK),
        ("customer", "varchar(64)", 0),
        ("amount", "decimal(12,2)", 0),
        ("status", "enum('new','paid','shipped')", 0),
        ("payload", "varbinary(16)", int(ColumnFlag.BINARY)),
        ("created", "datetime(3)", 0),
        ("big", "bigint unsigned", int(ColumnFlag.UNSIGNED)),
    ],
    "customers": [
        ("id", "int", PK),
        ("name", "varchar(64)", 0),
        ("note", "text", 0),
    ],
}
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


MAX_EXTRA_COLUMNS = 8  # columns added by generated DDL that a table holds at most


def tso(ms: int, logical: int = 0) -> int:
    return (ms << 18) | logical


class _Simulator:
    def __init__(self, seed: int, database: str, ddl_rate: float, split_key_updates: bool):
        self.rng = random.Random(seed)
        self.ddl_rate = ddl_rate
        self.split_key_updates = split_key_updates
        self.db = database
        self.columns = {name: list(cols) for name, cols in TABLES.items()}
        self.rows: dict[str, dict[tuple, dict]] = {name: {} for name in TABLES}
        self.next_id = defaultdict(lambda: 1)
        self.deleted: dict[str, list] = defaultdict(list)
        self.ms = EPOCH_MS
        self.extra_columns = 0

    def seed_rows(self, count: int) -> None:
        """Rows that existed before the archive starts (no event for them): a mid-stream
        archive's first change of such a key is an UPDATE or a DELETE."""
        for table in TABLES:
            for _ in range(count):
                row_id = self.next_id[table]
                self.next_id[table] += 1
                self.rows[table][(str(row_id).encode(),)] = {
                    n: self.value(table, n, t, row_id) for n, t, _ in self.columns[table]}

    def create_sql(self) -> str:
        return "".join(self.create_query(t, cols) + ";\n" for t, cols in TABLES.items())

    def commit_ts(self) -> int:
        self.ms += self.rng.randint(1, 40)
        return tso(self.ms, self.rng.randint(0, 1000))

    def value(self, table: str, name: str, type_text: str, row_id: int) -> bytes | None:
        r = self.rng
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
        return new_event(
            Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=ts >> 18, database=self.db, table=table,
            key_columns=["id"], before=self.image(table, before) if before is not None else None,
            after=self.image(table, after) if after is not None else None,
        )

    def ddl_event(self, query: str, table: str | None, ts: int) -> dict:
        return new_event(Kind.DDL, commit_ts=ts, execute_ts_ms=ts >> 18, database=self.db, table=table,
                         ddl_query=query, ddl_type=classify(query))

    def create_statements(self, ts) -> list[dict]:
        events = [self.ddl_event(f"CREATE DATABASE IF NOT EXISTS `{self.db}`", None, ts)]
        for table, cols in TABLES.items():
            ts = self.commit_ts()
            events.append(self.ddl_event(self.create_query(table, cols), table, ts))
        return events

    def create_query(self, table: str, cols: list) -> str:
        # upper-case keywords; quoted ENUM labels keep their case, as in MySQL's own DDL
        upper = ("'".join(p if i % 2 else p.upper() for i, p in enumerate(t.split("'"))) for _, t, _ in cols)
        defs = ", ".join(f"`{n}` {u}{' NOT NULL' if f & ColumnFlag.PRIMARY_KEY else ''}"
                         for (n, _, f), u in zip(cols, upper))
        return f"CREATE TABLE `{self.db}`.`{table}` ({defs}, PRIMARY KEY (`id`))"

    def transaction(self) -> list[dict]:
        """One transaction: 1-4 row changes, or a DDL now and then."""
        r = self.rng
        ts = self.commit_ts()
        if r.random() < self.ddl_rate:
            return [self.ddl(ts)]
        events = []
        touched = set()
        for _ in range(r.randint(1, 4)):
            table = r.choice(list(TABLES))
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
        return events

    def ddl(self, ts) -> dict:
        r = self.rng
        table = r.choice(list(TABLES))
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
            self.columns[table].append((name, "int", 0))
            for row in self.rows[table].values():
                row[name] = str(default).encode()
            return self.ddl_event(
                f"ALTER TABLE `{self.db}`.`{table}` ADD COLUMN `{name}` INT DEFAULT {default}", table, ts)
        self.rows[table].clear()
        return self.ddl_event(f"TRUNCATE TABLE `{self.db}`.`{table}`", table, ts)

    def state(self) -> dict:
        return {(self.db, t): {k: dict(v) for k, v in rows.items()} for t, rows in self.rows.items()}


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
    ddl_rate: float = 0.02,
    split_key_updates: bool | None = None,
    mid_stream: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Generated:
    """A history and its archive. `split_key_updates`: send a primary-key-changing UPDATE as
    DELETE + INSERT at one commit ts, as TiCDC's MQ sinks do by default (default: only for
    avro, whose UPDATE has no old values; the others keep the UPDATE to exercise row moves).

    `mid_stream`: the archive starts after the tables exist, as most real ones do: no DDL at
    all, rows that predate the archive (their first change in it is an UPDATE or a DELETE),
    and partitions whose first offset is arbitrary. `expected`/`final` then hold only the
    keys the archive changed (all a replay without a base snapshot can know).

    `progress(done, records)` is called every 5% of the transactions (a long history takes
    minutes)."""
    options = {"enable-tidb-extension": "true"} if options is None else options
    codec = get_codec(protocol, options)
    if split_key_updates is None:
        split_key_updates = protocol == "avro"
    sim = _Simulator(seed, database, 0.0 if mid_stream else ddl_rate, split_key_updates)
    schema_sql = sim.create_sql()
    if mid_stream:
        sim.seed_rows(12)
    streams: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    all_events = []

    position_style = POSITION_STYLES.get(protocol)
    watermark_messages: dict[int, list] = defaultdict(list)
    sequence = iter(range(1, 1 << 62))

    def send(events):
        for event in events:
            if position_style == "binlog" and event["kind"] != Kind.WATERMARK:
                event["position"] = [1, 4 + 100 * next(sequence), 0]  # binlog file, offset, row
            elif position_style == "id" and event["kind"] != Kind.WATERMARK:
                event["position"] = [next(sequence)]
            if event["kind"] == Kind.ROW:
                image = event["after"] or event["before"]
                key = next(c["value"] for c in image if c["name"] == "id")
                row_partition = zlib.crc32(f"{event['table']}:{key.decode()}".encode()) % partitions
            else:
                row_partition = 0
            for p in codec.partitions_for(event, partitions, row_partition):
                for message in codec.encode([event], topic=topic, partition=p):
                    streams[p].append((message.key, message.value))
                    if event["kind"] == Kind.WATERMARK:
                        watermark_messages[p].append((message.key, message.value))
                    if sim.rng.random() < duplicate_rate:
                        # at-least-once: the same message again, a little later
                        streams[p].append((message.key, message.value))

    if not mid_stream:
        send(sim.create_statements(sim.commit_ts()))
    cut_ts = 0
    report_every = max(1, transactions // 20)
    for i in range(transactions):
        if progress is not None and i and i % report_every == 0:
            progress(i, sum(len(s) for s in streams.values()))
        events = sim.transaction()
        all_events.extend(events)
        send(events)
        if (i + 1) % watermark_every == 0 or i == transactions - 1:
            cut_ts = tso(sim.ms, 1 << 17)
            send([new_event(Kind.WATERMARK, watermark_ts=cut_ts, execute_ts_ms=cut_ts >> 18)])
            # a redelivered watermark that falls back must be tolerated
            if i > watermark_every and sim.rng.random() < 0.2:
                for p in range(partitions):
                    if watermark_messages[p]:
                        streams[p].append(sim.rng.choice(watermark_messages[p][:-1] or watermark_messages[p]))
    expected = sim.state()
    applied_events = len(all_events)
    sim.ms += 1
    for _ in range(pending_transactions):
        events = sim.transaction()
        all_events.extend(events)
        send(events)

    for _ in range(bad_values):  # records whose value is not the protocol
        p = sim.rng.randrange(partitions)
        streams[p].insert(sim.rng.randrange(len(streams[p]) + 1), (None, b"\x00not a " + protocol.encode()))
    records = []
    for p in range(partitions):
        first = sim.rng.randrange(1, 10**9) if mid_stream else 0
        for i, (key, value) in enumerate(streams[p]):
            records.append(KafkaRecord(topic, p, first + i, EPOCH_MS + i, key, value))
    final = sim.state()
    if mid_stream:
        expected = _changed_only(expected, all_events[:applied_events])
        final = _changed_only(final, all_events)
    stats = {
        "transactions": transactions + pending_transactions,
        "records": len(records),
        "row_events": sum(e["kind"] == Kind.ROW for e in all_events),
        "bad_values": bad_values,
    }
    return Generated(records, expected, final, cut_ts, all_events, stats, schema_sql)


def _changed_only(state: dict, events: list[dict]) -> dict:
    """The rows of `state` whose key some row event of `events` wrote."""
    written = set()
    for e in events:
        if e["kind"] == Kind.ROW and e["after"] is not None:
            written.add((e["database"], e["table"], next(c["value"] for c in e["after"] if c["name"] == "id")))
    return {(db, t): {k: v for k, v in rows.items() if (db, t, k[0]) in written} for (db, t), rows in state.items()}


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
