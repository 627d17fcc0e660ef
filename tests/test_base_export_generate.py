"""`generate --base-export` (issue 30 point 4): the export written beside a mid-stream archive,
read back with the product's readers (base_export.discover + rows), holds exactly what
tests/reference.py computes over the full history up to the export's position; the archive
holds after that position nothing but copies of changes at or before it. No Spark."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_apps import storage
from spark_apps.base_export import discover, read_csv_rows_at, read_sql_rows
from spark_apps.cli import main as cli_main
from spark_apps.generate import export_position_kind, generate, write_base_export
from tests.reference import reference_rows

# (protocol, options, kinds that go with it)
PROTOCOLS = [
    ("canal-json", None, ["dumpling-sql", "dumpling-csv"]),  # TiCDC canal-json with commit ts
    ("open-protocol", {}, ["dumpling-sql", "dumpling-csv"]),
    ("craft", {}, ["dumpling-sql", "dumpling-csv"]),
    ("canal-protobuf", None, ["mysqldump", "dumpling-sql", "dumpling-csv"]),  # binlog positions
]


def export_rows(uri: str) -> tuple:
    """(position, {(db, table): sorted rows as sorted (column, value) pairs}) as the product reads it."""
    export = discover(uri)
    converters = export.converters()
    tables: dict = {}
    for f in export.files:
        if f.format == "csv":
            converter = converters[(f.database.lower(), f.table.lower())]
            rows = ((f.database, f.table, r) for _, r in read_csv_rows_at(storage.iter_pieces(f.uri), converter))
        else:
            rows = read_sql_rows(storage.iter_pieces(f.uri), converters, f.database or None)
        for db, table, values in rows:
            tables.setdefault((db, table), []).append(tuple(sorted(values.items())))
    return export, {k: sorted(v, key=repr) for k, v in tables.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10 ** 6), transactions=st.integers(4, 120), case=st.integers(0, 7),
       compression=st.sampled_from([None, "gzip", "zstd", "snappy"]), ddl=st.booleans(),
       rows_per_file=st.integers(1, 20), statement_size=st.integers(1, 2000))
def test_generated_export_holds_the_reference_state_at_its_position(tmp_path_factory, seed, transactions, case,
                                                                     compression, ddl, rows_per_file,
                                                                     statement_size):
    protocol, options, kinds = PROTOCOLS[case % len(PROTOCOLS)]
    kind = kinds[case // len(PROTOCOLS) % len(kinds)]
    if kind == "mysqldump" and compression not in (None, "gzip"):
        compression = "gzip"
    generated = generate(transactions=transactions, protocol=protocol, options=options, seed=seed,
                         mid_stream=True, mid_stream_ddl=ddl, ddl_rate=0.1 if ddl else None, keyless=True,
                         year_bit=True, base_export=True)
    uri = str(tmp_path_factory.mktemp("export"))
    write_base_export(generated, kind, uri, compression=compression, rows_per_file=rows_per_file,
                      statement_size=statement_size)
    export, got = export_rows(uri)

    # the export's rows: the reference's state over everything before the archive
    history, schema = generated.history_before, generated.schema_sql
    assert got == reference_rows(history, None, schema)
    # ... which is the state at the export's position over the full history
    position = export.position
    if position.kind == "tso":
        assert got == reference_rows(history + generated.events, position.tso, schema)
        assert max(e["commit_ts"] for e in history) == position.tso
        assert min(e["commit_ts"] for e in generated.events) > position.tso
    else:
        assert (export.producer, position.log_file) == ("mysqldump" if kind == "mysqldump" else "dumpling",
                                                        "mysql-bin.000001")
        offset = (position.log_sequence(), position.log_pos)
        assert all(tuple(e["position"][:2]) < offset for e in history)
        assert all(tuple(e["position"][:2]) > offset for e in generated.events)
    # the archive's copies of older changes are changes the export holds
    archived = {id(p.event) for p in generated.placements}
    copies = [e for e in history if id(e) in archived]
    assert len(copies) == generated.base.resent > 0
    # no gap: a partition starts above offset 0 only when it holds such a copy
    firsts = {}
    for record in generated.records:
        firsts[record.partition] = min(firsts.get(record.partition, record.offset), record.offset)
    holding = {p.partition for p in generated.placements if any(p.event is e for e in copies)}
    assert {p for p, first in firsts.items() if first > 0} <= holding
    # a table split over several files when it has more rows than one file takes
    per_table = {}
    for f in export.files:
        per_table[f.table] = per_table.get(f.table, 0) + 1
    if kind != "mysqldump":
        for (_, table), rows in got.items():
            assert per_table[table] == -(-len(rows) // rows_per_file)


def test_the_whole_history_is_the_expected_state():
    """The generator's own state at the cut (`expected`, whole tables with a base export) is
    the reference's over the history before the archive plus the archive's changes."""
    from tests.reference import reference_state

    for protocol, options, _ in PROTOCOLS:
        generated = generate(transactions=80, protocol=protocol, options=options, seed=4, mid_stream=True,
                             base_export=True, mid_stream_ddl=True, ddl_rate=0.05)
        want = reference_state(generated.history_before + generated.events, generated.cut_ts, generated.schema_sql)
        assert want == {k: v for k, v in generated.expected.items() if v}
        assert sum(len(v) for v in want.values()) > sum(
            len(v) for v in reference_state(generated.events, generated.cut_ts, generated.schema_sql).values())


def test_values_of_every_kind_are_written_as_the_producer_writes_them(tmp_path):
    generated = generate(transactions=40, seed=2, mid_stream=True, base_export=True, year_bit=True)
    write_base_export(generated, "dumpling-sql", str(tmp_path / "sql"), rows_per_file=100, statement_size=10 ** 6)
    orders = (tmp_path / "sql" / "shop.orders.000000000.sql").read_bytes()
    assert orders.startswith(b"/*!40101 SET NAMES binary*/;\nINSERT INTO `orders` VALUES\n(1,")
    assert b"x'" in orders and b"NULL" in orders and (b"'new'" in orders or b"'paid'" in orders)
    schema = (tmp_path / "sql" / "shop.devices-schema.sql").read_text()
    assert "`built` year(4) DEFAULT NULL" in schema and "`id` int(11) NOT NULL" in schema
    assert "\tLog: tidb-binlog\n\tPos: " in (tmp_path / "sql" / "metadata").read_text()
    write_base_export(generated, "dumpling-csv", str(tmp_path / "csv"), rows_per_file=100)
    csv = (tmp_path / "csv" / "shop.devices.000000000.csv").read_bytes()
    assert csv.startswith(b'"id","built","mask"\r\n1,"')


def test_refused_combinations(tmp_path):
    tso = generate(transactions=10, mid_stream=True, base_export=True)
    with pytest.raises(ValueError, match="use dumpling-sql or dumpling-csv"):
        write_base_export(tso, "mysqldump", str(tmp_path))
    for protocol, options in (("canal-json", {"flat-message-flavor": "canal"}), ("canal-json", {}),
                              ("oceanbase-avro", {})):
        with pytest.raises(ValueError, match="no base export can join|neither a commit ts nor a binlog"):
            export_position_kind(protocol, options)
    with pytest.raises(ValueError, match="mid-stream"):
        generate(transactions=10, base_export=True)
    with pytest.raises(SystemExit):
        cli_main(["generate", "--output", str(tmp_path / "a"), "--mid-stream", "--base-export", "mysqldump"])
    assert not (tmp_path / "a").exists()


def test_cli_writes_the_export_beside_the_archive(tmp_path, capsys):
    assert cli_main(["generate", "--output", str(tmp_path / "archive"), "--protocol", "canal-protobuf",
                     "--mid-stream", "--transactions", "30", "--base-export", "mysqldump",
                     "--base-export-compress", "gzip"]) == 0
    assert [p.name for p in (tmp_path / "archive-export").iterdir()] == ["shop.sql.gz"]
    export = discover(str(tmp_path / "archive-export"))
    assert export.producer == "mysqldump" and export.position.log_file == "mysql-bin.000001"
    assert "wrote a mysqldump export (1 files, binlog mysql-bin.000001:" in capsys.readouterr().out
