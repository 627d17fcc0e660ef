"""The generator's own contract: bounded table width, progress, documented options."""

from __future__ import annotations

import argparse
import re

from cdc_codecs.events import Kind
from spark_apps.cli import build_parser
from spark_apps.generate import MAX_EXTRA_COLUMNS, TABLES, generate


def test_long_ddl_history_keeps_tables_narrow():
    """A DDL-heavy history used to widen tables without bound (~600 columns at 100k
    transactions); now each table holds at most MAX_EXTRA_COLUMNS added columns."""
    generated = generate(transactions=3000, ddl_rate=0.5, seed=3)
    widest = {t: len(cols) for t, cols in TABLES.items()}
    added = {t: set() for t in TABLES}
    most_added = 0
    for event in generated.events:
        if event["kind"] != Kind.DDL or event["ddl_query"] is None:
            continue
        m = re.search(r"`(\w+)` (ADD|DROP) COLUMN `(\w+)`", event["ddl_query"])
        if not m:
            continue
        table, verb, column = m.groups()
        (added[table].add if verb == "ADD" else added[table].discard)(column)
        widest[table] = max(widest[table], len(TABLES[table]) + len(added[table]))
        most_added = max(most_added, len(added[table]))
    assert most_added == MAX_EXTRA_COLUMNS  # the history did reach the bound
    for table, width in widest.items():
        assert width <= len(TABLES[table]) + MAX_EXTRA_COLUMNS, (table, width)


def test_progress_is_reported_every_twentieth():
    calls = []
    generate(transactions=200, progress=lambda done, records: calls.append((done, records)))
    assert [done for done, _ in calls] == list(range(10, 200, 10))
    records = [r for _, r in calls]
    assert records == sorted(records) and records[0] > 0


def test_every_generate_option_is_documented():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    gen = sub.choices["generate"]
    for action in gen._actions:
        assert action.help, f"generate {action.option_strings} has no help"
    assert "example" in gen.format_help()


# ---------------------------------------------------------------- issue 32: shapes of real captures

def _canal_messages(generated):
    import orjson

    return [(r.partition, r.offset, orjson.loads(r.value)) for r in generated.records]


def test_canal_flavour_puts_ddl_and_rows_in_one_second():
    """--same-second-ddl with Canal flat messages: a CREATE TABLE and INSERTs of its table,
    an ADD COLUMN and rows carrying the new column, share one `es` (whole seconds)."""
    generated = generate(transactions=200, seed=5, ddl_rate=0.1, same_second_ddl=True,
                         options={"flat-message-flavor": "canal"})
    messages = _canal_messages(generated)
    assert all(m["es"] % 1000 == 0 for _, _, m in messages)
    ddl = [(m["table"], m["es"], m["sql"]) for _, _, m in messages if m["isDdl"]]
    created = {(t, es) for t, es, sql in ddl if sql.startswith("CREATE TABLE")}
    added = {(t, es, re.search(r"ADD COLUMN `(\w+)`", sql)[1]) for t, es, sql in ddl if "ADD COLUMN" in sql}
    rows = [(m["table"], m["es"], m["type"], set(m["data"][0])) for _, _, m in messages if not m["isDdl"]]
    assert any((t, es) in created for t, es, op, _ in rows if op == "INSERT")
    assert any((t, es, c) in added for t, es, _, columns in rows for c in columns)


def test_backward_es_stays_above_the_last_ddl():
    generated = generate(transactions=300, seed=2, ddl_rate=0.05, backward_es_rate=0.3)
    backwards = floor = 0
    highest = 0
    for event in generated.events:
        es = event["execute_ts_ms"]
        if event["kind"] == Kind.DDL:
            floor = es
        assert es >= floor
        backwards += es < highest
        highest = max(highest, es)
        assert event["commit_ts"] >> 18 >= es  # commit ts keep their order; only es moves back
    assert backwards > 10
    stamps = [e["commit_ts"] for e in generated.events]
    assert stamps == sorted(stamps)


def test_keyless_table_holds_identical_rows():
    generated = generate(transactions=300, seed=4, keyless=True, protocol="open-protocol", options={})
    ledger = [e for e in generated.events if e["table"] == "ledger"]
    assert {e["op"] for e in ledger} == {"insert", "update", "delete"}
    assert all(e["key_columns"] == [] for e in ledger)
    assert len({e["commit_ts"] for e in ledger}) >= 2
    # at some point the table held two identical rows (final_rows keeps the copies)
    from .reference import reference_rows
    assert reference_rows(generated.events)[("shop", "ledger")] == generated.final_rows[("shop", "ledger")]
    seen_copies = False
    bag: list = []
    for e in ledger:
        if e["before"] is not None:
            row = {c["name"]: c["value"] for c in e["before"]}
            bag.remove(row)
        if e["after"] is not None:
            row = {c["name"]: c["value"] for c in e["after"]}
            seen_copies |= row in bag
            bag.append(row)
    assert seen_copies


def test_schema_files_write_year_and_bit_unsigned(tmp_path):
    """TiDB flags YEAR and BIT columns UNSIGNED, and its storage sink writes them so
    (pingcap/tiflow pkg/sink/cloudstorage/table_definition.go)."""
    import orjson

    from spark_apps.generate import write_schema_files

    generated = generate(transactions=20, seed=1, year_bit=True, mid_stream=True)
    files = write_schema_files(generated, str(tmp_path))
    assert len(files) == 3
    [devices] = [f for f in files if "/devices/meta/schema_" in f]
    doc = orjson.loads(open(devices, "rb").read())
    types = {c["ColumnName"]: c["ColumnType"] for c in doc["TableColumns"]}
    assert types == {"id": "INT", "built": "YEAR UNSIGNED", "mask": "BIT UNSIGNED"}
    assert [c["ColumnName"] for c in doc["TableColumns"] if c.get("ColumnIsPk") == "true"] == ["id"]
    assert any(e["table"] == "devices" and e["kind"] == Kind.ROW for e in generated.events)


def test_mid_stream_ddl_alters_tables_the_archive_never_created():
    generated = generate(transactions=300, seed=8, mid_stream=True, mid_stream_ddl=True, ddl_rate=0.1)
    seen_rows: set = set()
    ddl = 0
    for event in generated.events:
        if event["kind"] == Kind.ROW:
            seen_rows.add(event["table"])
        elif event["kind"] == Kind.DDL:
            ddl += 1
            assert not event["ddl_query"].startswith("CREATE")
            assert event["table"] in seen_rows  # after the table's first row event
    assert ddl > 10
    # a mid-stream archive has no DDL unless asked for (--mid-stream-ddl or a --ddl-rate)
    assert not any(e["kind"] == Kind.DDL for e in generate(transactions=100, seed=8, mid_stream=True).events)


def test_placements_cover_every_message():
    generated = generate(transactions=100, seed=3, partitions=3, duplicate_rate=0.2, bad_values=2,
                         options={"flat-message-flavor": "canal"})
    records = {(r.partition, r.offset) for r in generated.records}
    placed = {(p.partition, p.offset) for p in generated.placements}
    assert placed <= records and len(records - placed) == 2  # the two bad values
    assert {id(p.event) for p in generated.placements} >= {id(e) for e in generated.events}


def test_help_examples_parse():
    """Every `cdc-replay ...` line of `generate --help`'s examples parses (the replay one used
    to lack --emit)."""
    import shlex

    from spark_apps.options import parser as replay_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    epilog = sub.choices["generate"].epilog.replace("\\\n", " ")
    commands = [shlex.split(line.strip())[1:] for line in epilog.splitlines() if line.strip().startswith("cdc-replay")]
    assert {c[0] for c in commands} == {"generate", "replay"}
    for argv in commands:
        if argv[0] == "generate":
            parser.parse_args(argv)
        else:
            replay_parser().parse_args(argv[1:])
