"""--base-export with Delta and Iceberg outputs (issue 30 point 2): a generated full export plus
the mid-stream archive that continues it (`generate(mid_stream=True, base_export=True)`, its
first records re-sending changes the export holds), replayed into lakehouse tables. The
tables, read back with deltalake / pyiceberg, must equal what tests/reference.py (sharing no
code with the replay) computes over the full history — the rows that predate the archive, the
changes the export holds, then the archive's; re-sent events are counted `in_base`. A history
table read at any point from the export's TSO on must give the reference state there. A table a
run without the export wrote at the same cut is rewritten, not kept; later windows merge into
the tables with `--since` and no export."""

from __future__ import annotations

import pytest

from spark_apps.generate import generate, write_archive, write_base_export
from spark_apps.options import ReplayArgs, parser
from spark_apps.outputs.delta import delta_storage_options
from spark_apps.outputs.iceberg import load_catalog
from spark_apps.replay import run

from .reference import reference_state
from .test_lakehouse import as_state

pytestmark = pytest.mark.spark

TIDB = {"enable-tidb-extension": "true"}
TABLES = (("shop", "orders"), ("shop", "customers"))
SCD2 = ("_op", "_valid_from_ts", "_valid_to_ts", "_valid_from", "_valid_to", "_current")


def history_and_export(tmp_path, protocol: str, kind: str, seed: int):
    """(generated, archive path, export path): the archive and the export beside it."""
    options = TIDB if protocol == "canal-json" else {}
    generated = generate(transactions=60, partitions=2, seed=seed, duplicate_rate=0.2, protocol=protocol,
                         options=options, mid_stream=True, base_export=True, keyless=False)
    archive, export = str(tmp_path / "archive"), str(tmp_path / "export")
    write_archive(generated.records, archive, records_per_object=40)
    write_base_export(generated, kind, export, rows_per_file=7, statement_size=300)
    return generated, archive, export


def replay(spark, source, output, fmt, protocol, *extra, export=None, emit="snapshot"):
    argv = ["--source", source, "--protocol", protocol, "--output", output, "--emit", emit,
            "--target-format", fmt, *extra]
    if export:
        argv += ["--base-export", export]
    if protocol == "canal-json":
        argv += ["--protocol-option", "enable-tidb-extension=true"]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def lake_rows(fmt: str, output: str) -> dict:
    """{(db, table): [row]} of the tables' current versions, read by the format's library."""
    out = {}
    if fmt == "delta":
        from deltalake import DeltaTable

        for db, table in TABLES:
            out[(db, table)] = DeltaTable(f"{output}/{db}/{table}", storage_options=delta_storage_options()
                                          ).to_pyarrow_table().to_pylist()
    else:
        catalog = load_catalog(output, {})
        for db, table in TABLES:
            out[(db, table)] = catalog.load_table((db, table)).scan().to_arrow().to_pylist()
    return out


def lake_state(fmt: str, output: str) -> dict:
    return {k: as_state(rows) for k, rows in lake_rows(fmt, output).items() if rows}


def expected(generated, as_of=None) -> dict:
    """The reference over the full history (before the archive, then the archive)."""
    state = reference_state(generated.history_before + generated.events, as_of, generated.schema_sql)
    return {k: v for k, v in state.items() if v}


def cut_in_the_middle(generated) -> int:
    stamps = sorted({e["commit_ts"] for e in generated.events
                     if e["kind"] == "row" and generated.base.position["tso"] < e["commit_ts"] <= generated.cut_ts})
    return stamps[len(stamps) // 2]


def check_counts(manifest, generated):
    counts = manifest["counts"]
    copies = sum(1 for p in generated.placements if any(p.event is e for e in generated.history_before))
    assert counts["reconciled"] and 1 <= counts["in_base"] <= copies
    assert counts["read"] == sum(counts[s] for s in ("applied", "duplicate", "pending", "filtered", "quarantined",
                                                     "in_base"))


@pytest.mark.parametrize("fmt, kind, seed", [("delta", "dumpling-sql", 11), ("iceberg", "dumpling-csv", 12)])
def test_dumpling_snapshot_tables_equal_the_reference(spark, tmp_path, fmt, kind, seed):
    generated, archive, export = history_and_export(tmp_path, "canal-json", kind, seed)
    as_of = cut_in_the_middle(generated)
    output = str(tmp_path / "out")
    manifest = replay(spark, archive, output, fmt, "canal-json", "--as-of", str(as_of), export=export)
    want = expected(generated, as_of)
    assert lake_state(fmt, output) == want
    check_counts(manifest, generated)
    for (db, table), rows in want.items():
        entry = manifest["output"]["lakehouse"][f"{db}.{table}"]
        assert entry["rows"] == len(rows) and entry["cut_commit_ts"] == as_of
    assert manifest["window"]["base_position"] == f"TSO {generated.base.position['tso']}"
    assert manifest["coverage"]["complete"]


@pytest.mark.parametrize("fmt", ["iceberg"])
def test_mysqldump_snapshot_with_canal_protobuf(spark, tmp_path, fmt):
    """A binlog position (Canal's per-event position joins it; no commit ts, so no cut ts)."""
    generated, archive, export = history_and_export(tmp_path, "canal-protobuf", "mysqldump", 13)
    output = str(tmp_path / "out")
    manifest = replay(spark, archive, output, fmt, "canal-protobuf", export=export)
    assert lake_state(fmt, output) == expected(generated)
    check_counts(manifest, generated)
    assert manifest["window"]["base_position"].startswith("binlog mysql-bin.000001:")


def state_at(rows: list[dict], point: int) -> dict:
    """The rows of an SCD2 table valid at commit ts `point` (valid from <= point < valid to)."""
    live = [r for r in rows if r["_op"] != "delete" and r["_valid_from_ts"] is not None
            and r["_valid_from_ts"] <= point and (r["_valid_to_ts"] is None or point < r["_valid_to_ts"])]
    return as_state(live, skip=SCD2)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_dumpling_history_tables_read_as_the_reference_at_every_point(spark, tmp_path, fmt):
    """Every exported row is a version from the TSO; re-sent older events are no version; read
    at the TSO, at each later commit ts and at the cut, the versions give the reference state."""
    generated, archive, export = history_and_export(tmp_path, "canal-json", "dumpling-sql", 14)
    tso = generated.base.position["tso"]
    output = str(tmp_path / "out")
    manifest = replay(spark, archive, output, fmt, "canal-json", export=export, emit="history")
    check_counts(manifest, generated)
    tables = lake_rows(fmt, output)
    assert min(r["_valid_from_ts"] for rows in tables.values() for r in rows) == tso
    cut = manifest["cut"]["commit_ts"]
    points = sorted({tso, cut, *(e["commit_ts"] for e in generated.events if tso < e["commit_ts"] <= cut)})
    for point in points[::3] + [cut]:
        got = {k: state_at(rows, point) for k, rows in tables.items()}
        assert {k: v for k, v in got.items() if v} == expected(generated, point), point
    for (db, table), rows in tables.items():
        assert manifest["output"]["lakehouse"][f"{db}.{table}"]["rows"] == len(rows)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_an_export_rewrites_tables_at_the_same_cut_and_windows_merge_after_it(spark, tmp_path, fmt):
    """A run without the export at cut A holds only the rows the archive touched; the same cut
    from the export is another content, so it is a new version (not `unchanged`), and a rerun
    from the export adds none. A window A..end (--since, no export) then merges into the tables
    and they read as the reference at the end."""
    generated, archive, export = history_and_export(tmp_path, "canal-json", "dumpling-sql", 15)
    middle = cut_in_the_middle(generated)
    output = str(tmp_path / "out")
    # the export's CREATE statements as --schema: the same column types in both runs (canal-json
    # states DECIMAL without its precision, and an Iceberg column's type cannot narrow in place)
    schema = tmp_path / "schema.sql"
    schema.write_text(generated.schema_sql)
    touched = replay(spark, archive, output, fmt, "canal-json", "--as-of", str(middle), "--schema", str(schema))
    assert lake_state(fmt, output) != expected(generated, middle)  # the rows the archive never touched are not there
    assert "in_base" not in touched["counts"]
    first = replay(spark, archive, output, fmt, "canal-json", "--as-of", str(middle), export=export)
    assert not any(t["unchanged"] for t in first["output"]["lakehouse"].values())
    assert lake_state(fmt, output) == expected(generated, middle)
    again = replay(spark, archive, output, fmt, "canal-json", "--as-of", str(middle), export=export)
    assert all(t["unchanged"] for t in again["output"]["lakehouse"].values())
    window = replay(spark, archive, output, fmt, "canal-json", "--since", "last")
    assert window["window"]["since"] == middle
    assert lake_state(fmt, output) == expected(generated, window["cut"]["commit_ts"])


def test_an_export_rewrites_an_iceberg_table_whose_decimal_it_narrows(spark, tmp_path):
    """canal-json without --schema states DECIMAL without its precision, so an export-less run
    creates `amount` as decimal(38,18); the export's DECIMAL(12,2) is no widening of it, which
    Iceberg cannot apply in place. A full rewrite replaces every data file, so the column is
    dropped and added again with the export's type: the rewrite commits and reads as the
    reference; a later window merges into the narrowed column."""
    from decimal import Decimal

    from pyiceberg.types import DecimalType

    generated, archive, export = history_and_export(tmp_path, "canal-json", "dumpling-sql", 16)
    middle = cut_in_the_middle(generated)
    output = str(tmp_path / "out")
    replay(spark, archive, output, "iceberg", "canal-json", "--as-of", str(middle))

    def amount_type():
        return load_catalog(output, {}).load_table(("shop", "orders")).schema().find_field("amount").field_type

    assert amount_type() == DecimalType(38, 18)
    first = replay(spark, archive, output, "iceberg", "canal-json", "--as-of", str(middle), export=export)
    assert amount_type() == DecimalType(12, 2) and not first["output"]["lakehouse"]["shop.orders"]["unchanged"]
    assert lake_state("iceberg", output) == expected(generated, middle)
    amounts = [r["amount"] for r in lake_rows("iceberg", output)[("shop", "orders")] if r["amount"] is not None]
    assert amounts and all(a == a.quantize(Decimal("0.01")) for a in amounts)
    window = replay(spark, archive, output, "iceberg", "canal-json", "--since", "last")
    assert amount_type() == DecimalType(12, 2)
    assert lake_state("iceberg", output) == expected(generated, window["cut"]["commit_ts"])
