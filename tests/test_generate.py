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
