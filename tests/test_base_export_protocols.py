"""--base-export beside the TiCDC archives the other base-export tests do not cover (issue 30
point 3: every TiCDC protocol and layout with a Dumpling export): TiCDC Avro in Kafka records,
and TiCDC's cloud storage sink, with canal-json (the TiDB extension) and with TiCDC's csv. The
snapshot must equal tests/reference.py's state over the full history (the changes the export
holds, then the archive's)."""

from __future__ import annotations

import pytest

from cdc_codecs.tso import to_datetime
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive, write_base_export
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import ReplayError, run

from .reference import reference_state
from .test_layouts_e2e import write_storage_sink
from .test_protocols_e2e import options_for

pytestmark = pytest.mark.spark

CANAL = {"enable-tidb-extension": "true"}


def replay(spark, source, output, protocol, options, export, *extra):
    argv = ["--source", source, "--protocol", protocol, "--output", output, "--emit", "snapshot",
            "--base-export", export, *extra]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def expected(generated, cut=None) -> dict:
    state = reference_state(generated.history_before + generated.events, cut, generated.schema_sql)
    return {k: v for k, v in state.items() if v}


def test_avro_archive_with_a_dumpling_export(spark, tmp_path):
    """TiCDC Avro messages carry the commit ts (`_tidb_commit_ts`), but a DELETE is a bare
    tombstone with none: re-sent copies of what the export holds are in_base, the rest applied
    on top of the export's rows — among them a tombstone right after the re-sent run (customer
    8, inserted before the TSO and deleted after it), whose inferred commit ts would otherwise
    be the re-sent change's (at or below the TSO: in_base, the row kept)."""
    options = options_for("avro", tmp_path)
    generated = generate(transactions=60, partitions=2, seed=41, duplicate_rate=0.2, protocol="avro", options=options,
                         mid_stream=True, base_export=True, keyless=False)
    archive, export, out = str(tmp_path / "archive"), str(tmp_path / "export"), str(tmp_path / "out")
    write_archive(generated.records, archive, records_per_object=40)
    write_base_export(generated, "dumpling-sql", export, rows_per_file=7, statement_size=300)
    manifest = replay(spark, archive, out, "avro", options, export)
    counts = manifest["counts"]
    assert counts["reconciled"] and counts["in_base"] >= 1
    assert read_snapshot(out, "avro", options) == expected(generated, manifest["cut"]["commit_ts"])


def test_storage_sink_archive_with_a_dumpling_export(spark, tmp_path):
    """The storage sink's files of a changefeed started a little before the export's TSO (its
    first changes are older than the TSO: in_base): the snapshot at the sink's checkpoint is the
    export's rows with the sink's later changes applied. A sink whose first change is after the
    TSO, with a table version at or before it but first files dated 2026-01-01 in an unknown
    zone (a day that may have begun at 12:00 UTC, after the TSO: earlier days may have been
    expired) is refused as a possible gap (docs/base-exports.md, "A gap")."""
    generated = generate(transactions=50, partitions=2, seed=43, protocol="canal-json", options=CANAL, ddl_rate=0.0,
                         mid_stream=True, base_export=True, keyless=False)
    tso = generated.base.position["tso"]
    export, out = str(tmp_path / "export"), str(tmp_path / "out")
    write_base_export(generated, "dumpling-csv", export, rows_per_file=7)
    after = [e for e in generated.events if e.get("commit_ts") is None or e["commit_ts"] > tso]
    older = [e for e in generated.history_before if e["kind"] == "row"]
    sinks = {"at": str(tmp_path / "sink-at"), "before": str(tmp_path / "sink-before")}
    write_storage_sink(sinks["at"], after, generated.cut_ts)
    # every table's sink output starts with changes the export holds
    firsts = {(e["database"], e["table"]): e for e in reversed(older)}
    write_storage_sink(sinks["before"], sorted(firsts.values(), key=lambda e: e["commit_ts"]) + after,
                       generated.cut_ts)
    # the sink's topics are its tables: the export's rows need a topic named without {topic}
    extra = ("--layout", "ticdc-storage", "--target-topic", "{schema}_{table}")
    manifest = replay(spark, sinks["before"], out, "canal-json", CANAL, export, *extra)
    assert manifest["layout"]["layout"] == "ticdc-storage"
    counts = manifest["counts"]
    assert counts["reconciled"] and counts["in_base"] >= len(firsts)
    assert read_snapshot(out, "canal-json", CANAL) == expected(generated, generated.cut_ts)
    with pytest.raises(ReplayError, match="the archive may start after it \\(a gap\\).*earliest date directory "
                                          "2026-01-01, so complete only after ts"):
        replay(spark, sinks["at"], str(tmp_path / "out-at"), "canal-json", CANAL, export, *extra)


def test_storage_sink_of_a_changefeed_started_at_the_export_tso(spark, tmp_path):
    """TiCDC's procedure: Dumpling, then a changefeed with --start-ts the export's TSO. Its sink
    names each table's directory by a table version at or above the table sink's start ts
    (here the TSO itself: the tables existed) and its date directories by the server's local
    date; none of its changes is at or before the TSO. It passes when the first date directory
    cannot have begun after the TSO: dated the day before in New York (UTC-5) with no zone
    given, or dated 2026-01-01 by a server in UTC with `--layout-option time-zone=UTC`; the
    snapshot is the export's rows with the sink's changes applied. A sink whose table version
    is after the TSO (a changefeed started later), or whose first date may have begun after it
    (the UTC sink, zone not given), is refused."""
    generated = generate(transactions=50, partitions=2, seed=43, protocol="canal-json", options=CANAL, ddl_rate=0.0,
                         mid_stream=True, base_export=True, keyless=False)
    tso = generated.base.position["tso"]
    assert str(to_datetime(tso).date()) == "2026-01-01"
    export = str(tmp_path / "export")
    write_base_export(generated, "dumpling-csv", export, rows_per_file=7)
    after = [e for e in generated.events if e.get("commit_ts") is None or e["commit_ts"] > tso]
    tables = {(e["database"], e["table"]) for e in after if e["kind"] == "row"}
    sinks = {name: str(tmp_path / name) for name in ("new-york", "utc", "later")}
    write_storage_sink(sinks["new-york"], after, generated.cut_ts, version=tso, days=("2025-12-31", "2026-01-01"))
    write_storage_sink(sinks["utc"], after, generated.cut_ts, version=tso)
    later = min(e["commit_ts"] for e in after if e.get("commit_ts")) - 1  # started after the TSO
    write_storage_sink(sinks["later"], after, generated.cut_ts, version=later, days=("2025-12-31", "2026-01-01"))
    extra = ("--layout", "ticdc-storage", "--target-topic", "{schema}_{table}")
    for name, zone in (("new-york", ()), ("utc", ("--layout-option", "time-zone=UTC"))):
        out = str(tmp_path / f"out-{name}")
        manifest = replay(spark, sinks[name], out, "canal-json", CANAL, export, *extra, *zone)
        assert manifest["window"]["base_start"] == {"first_offset": 0, "event_at_or_before": 0,
                                                    "sink_table_version": len(tables)}
        assert manifest["counts"]["reconciled"]
        assert read_snapshot(out, "canal-json", CANAL) == expected(generated, generated.cut_ts)
    with pytest.raises(ReplayError, match=f"table version {tso}, earliest date directory 2026-01-01"):
        replay(spark, sinks["utc"], str(tmp_path / "out-utc-unknown"), "canal-json", CANAL, export, *extra)
    with pytest.raises(ReplayError, match=f"a gap.*table version {later},"):
        replay(spark, sinks["later"], str(tmp_path / "out-later"), "canal-json", CANAL, export, *extra,
               "--layout-option", "time-zone=-05:00")


def test_storage_sink_csv_archive_with_a_dumpling_export(spark, tmp_path):
    """TiCDC's csv protocol (storage sink only; include-commit-ts, output-old-value: an UPDATE
    is a D row and an I row) beside a Dumpling export: the changefeed started a little before
    the TSO, so its first rows are changes the export holds (in_base); the snapshot of
    `shop.customers` is the export's rows with the sink's later changes applied."""
    from .test_layouts_e2e import write_customers_csv_sink

    generated = generate(transactions=50, partitions=2, seed=47, protocol="canal-json", options=CANAL, ddl_rate=0.0,
                         mid_stream=True, base_export=True, keyless=False)
    tso = generated.base.position["tso"]
    export, sink, out = str(tmp_path / "export"), str(tmp_path / "sink"), str(tmp_path / "out")
    write_base_export(generated, "dumpling-sql", export, rows_per_file=7)
    customers = [e for e in generated.history_before + generated.events
                 if e["kind"] == "row" and e["table"] == "customers"]
    older = [e for e in customers if e["commit_ts"] <= tso][-3:]
    write_customers_csv_sink(sink, older + [e for e in customers if e["commit_ts"] > tso], generated.cut_ts)
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", sink, "--protocol", "csv", "--protocol-option", "include-commit-ts=true",
         "--protocol-option", "output-old-value=true", "--target-protocol", "canal-json",
         "--target-option", "enable-tidb-extension=true", "--output", out, "--emit", "snapshot",
         "--tables", "shop.customers", "--base-export", export])), spark=spark)
    counts = manifest["counts"]
    assert manifest["layout"]["layout"] == "ticdc-storage"
    assert counts["reconciled"] and counts["in_base"] >= len(older) >= 1
    want = {k: v for k, v in expected(generated, generated.cut_ts).items() if k == ("shop", "customers")}
    assert want and read_snapshot(out, "canal-json", CANAL) == want
