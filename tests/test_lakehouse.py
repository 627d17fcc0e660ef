"""Snapshots and histories as Delta Lake and Iceberg tables (docs/lakehouse.md): every table is
read back by the format's own library (deltalake / pyiceberg) and by an independent reader
written from the format's spec (tests/support/lake_readers.py), at the version whose cut is a
given commit ts, and compared row by row with the reference replayer's state at that ts."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from collections import defaultdict

import pyarrow as pa
import pytest

from cdc_codecs.mysql_types import parse_type
from spark_apps import storage
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.outputs import lake
from spark_apps.outputs.delta import delta_storage_options
from spark_apps.outputs.iceberg import load_catalog
from spark_apps.replay import ReplayError, run

from .reference import reference_state
from .support import lake_readers

TIDB = ["--protocol-option", "enable-tidb-extension=true"]
STATUS = ["new", "paid", "shipped"]


def replay(spark, source, output, fmt, *extra, emit="snapshot"):
    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", emit,
            "--target-format", fmt, *TIDB, *extra]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Two tables, DDL on the way (ADD/DROP COLUMN, TRUNCATE), watermarks; a commit ts in the
    middle to cut at."""
    generated = generate(transactions=160, partitions=2, seed=31, ddl_rate=0.03)
    path = str(tmp_path_factory.mktemp("archive"))
    write_archive(generated.records, path)
    ts = sorted({e["commit_ts"] for e in generated.events if e["kind"] == "row" and e["commit_ts"] <= generated.cut_ts})
    return generated, path, ts[len(ts) // 2]


def canonical(value) -> bytes | None:
    """A lakehouse value as the canonical text the reference replayer holds."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3].encode()
    if isinstance(value, str) and value in STATUS:
        return str(STATUS.index(value) + 1).encode()
    return str(value).encode()


def as_state(rows: list[dict], skip=()) -> dict:
    return {(canonical(r["id"]),): {k: canonical(v) for k, v in r.items() if k not in skip} for r in rows}


def expected_at(generated, ts) -> dict:
    return {k: v for k, v in reference_state(generated.events, ts).items() if v}


# -------------------------------------------------------------- version by commit ts
def delta_version_at(location: str, commit_ts: int) -> int:
    """The newest version whose cut is at or below `commit_ts` (from the commit metadata)."""
    versions = [(int(c["commitInfo"]["cdc-replay.cut_commit_ts"]), c["version"])
                for c in lake_readers.delta_commits(location)]
    return max((v for cut, v in versions if cut <= commit_ts), default=None)  # None: no table yet


def iceberg_snapshot_at(metadata_location: str, commit_ts: int) -> int:
    snapshots = lake_readers.iceberg_metadata(metadata_location)["snapshots"]
    at = [(int(s["summary"]["cdc-replay.cut_commit_ts"]), s["sequence-number"], s["snapshot-id"])
          for s in snapshots if int(s["summary"]["cdc-replay.cut_commit_ts"]) <= commit_ts]
    return max(at)[2] if at else None


def delta_tables(output: str, commit_ts: int) -> dict:
    """{(db, table): state} read twice, by deltalake and by the spec reader, which must agree."""
    from deltalake import DeltaTable

    tables = {}
    for db in ("shop",):
        for table in ("orders", "customers"):
            location = storage.join(output, db, table)
            version = delta_version_at(location, commit_ts)
            _, spec_rows = lake_readers.delta_read(location, version)
            lib_rows = DeltaTable(location, version=version, storage_options=delta_storage_options()
                                  ).to_pyarrow_table().to_pylist()
            assert as_state(lib_rows) == as_state(spec_rows)
            if spec_rows:
                tables[(db, table)] = as_state(spec_rows)
    return tables


def iceberg_tables(output: str, catalog: dict, catalog_db: str, commit_ts: int) -> dict:
    tables = {}
    cat = load_catalog(output, catalog)
    for db in ("shop",):
        for table in ("orders", "customers"):
            metadata = lake_readers.iceberg_metadata_location(catalog_db, db, table)
            snapshot = iceberg_snapshot_at(metadata, commit_ts)
            _, spec_rows = lake_readers.iceberg_read(metadata, snapshot)
            lib_rows = cat.load_table((db, table)).scan(snapshot_id=snapshot).to_arrow().to_pylist()
            assert as_state(lib_rows) == as_state(spec_rows)
            if spec_rows:
                tables[(db, table)] = as_state(spec_rows)
    return tables


# -------------------------------------------------------------- tests
def test_a_decimal_whose_type_states_no_precision_keeps_its_values():
    """A bare `decimal` in a message (TiCDC canal-json, open-protocol and craft give every
    DECIMAL(p,s) so; Canal a column declared without one; Apache Paimon's test capture holds
    1.2 in one): DECIMAL(38,18), not MySQL's DECIMAL(10,0) that would null 1.2. A Parquet file
    whose values do not fit it keeps them as text; a stated precision is kept as stated."""
    from spark_apps.outputs import parquet as parquet_out

    bare = parse_type("decimal")
    assert lake.arrow_type(bare) == parquet_out.arrow_type(bare) == pa.decimal128(38, 18)
    array, nulled = parquet_out.typed_column([b"1.2", b"-7", None], bare, [None] * 3)
    assert nulled == 0 and array.to_pylist() == [decimal.Decimal("1.2"), decimal.Decimal(-7), None]
    wide = [b"1.2", b"0.1234567890123456789", b"123456789012345678901234567890"]
    array, nulled = parquet_out.typed_column(wide, bare, [None] * 3)
    assert nulled == 0 and array.to_pylist() == [v.decode() for v in wide]
    array, nulled = parquet_out.typed_column([b"1.2"], parse_type("decimal(10,0)"), [None])
    assert array.type == pa.decimal128(10, 0) and nulled == 1  # a stated DECIMAL(10,0) cannot hold it


def test_type_mapping():
    t = lambda text: lake.arrow_type(parse_type(text))  # noqa: E731
    assert t("decimal(12,2)") == pa.decimal128(12, 2) and t("decimal(65,30)") == pa.string()
    assert t("bigint unsigned") == pa.decimal128(20, 0) and t("bigint") == pa.int64()
    assert t("int unsigned") == pa.int64() and t("int") == pa.int32() and t("tinyint(1)") == pa.int32()
    assert t("bit(1)") == pa.int64() and t("bit(64)") == pa.decimal128(20, 0) and t("year") == pa.int32()
    assert t("datetime(6)") == pa.timestamp("us") and t("timestamp(3)") == pa.timestamp("us")
    assert t("date") == pa.date32() and t("time(3)") == pa.string() and t("json") == pa.string()
    assert t("enum('a','b')") == pa.string() and t("set('a','b')") == pa.string()
    assert t("varbinary(16)") == pa.binary() and t("blob") == pa.binary() and t("float") == pa.float32()
    assert lake.table_parts("lake_{schema}.{table}_v", "shop", "orders") == ["lake_shop", "orders_v"]
    with pytest.raises(lake.LakehouseError):
        lake.table_parts("{table}", "shop", "orders")


def test_a_modified_column_reads_as_a_full_replay_gives_it():
    """A window's MODIFY COLUMN: old values cast to the cut's type as a full replay decodes them
    from their text (FLOAT -> DOUBLE: 1.1, not 1.100000023841858); an impossible one is refused."""
    modified = lambda values, text: lake._modified(values, pa.field("c", lake.arrow_type(parse_type(text))), "d.t")  # noqa: E731
    assert modified(pa.array([1.1, None], pa.float32()), "double").to_pylist() == [1.1, None]
    assert modified(pa.array([7, 2**31 - 1], pa.int32()), "bigint").to_pylist() == [7, 2**31 - 1]
    assert modified(pa.array([5], pa.int32()), "varchar(10)").to_pylist() == ["5"]
    assert modified(pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)), "decimal(12,3)").to_pylist() == [
        decimal.Decimal("1.250")]
    with pytest.raises(lake.LakehouseError, match="column c cannot be converted"):
        modified(pa.array(["abc"]), "int")


@pytest.mark.spark
def test_delta_snapshots_are_versions_by_commit_ts(spark, archive, tmp_path):
    generated, source, middle = archive
    output = str(tmp_path / "delta")
    first = replay(spark, source, output, "delta", "--as-of", str(middle))
    second = replay(spark, source, output, "delta")
    cut = second["cut"]["commit_ts"]
    orders = storage.join(output, "shop", "orders")
    assert [c["version"] for c in lake_readers.delta_commits(orders)] == [0, 1]  # one version per run
    info = lake_readers.delta_commits(orders)[1]["commitInfo"]
    assert info["cdc-replay.run_id"] == second["run_id"] and info["cdc-replay.cut_commit_ts"] == str(cut)
    assert info["cdc-replay.source"] == second["source"]["uri"] and info["operation"] == "WRITE"
    assert int(info["cdc-replay.rows"]) == second["output"]["lakehouse"]["shop.orders"]["rows"]
    assert first["output"]["lakehouse"]["shop.orders"]["version"] == 0

    assert delta_tables(output, middle) == expected_at(generated, middle)
    assert delta_tables(output, cut) == expected_at(generated, cut)
    assert delta_tables(output, cut + 10**6) == delta_tables(output, cut)

    # a rerun of the same cut adds no version and no rows
    again = replay(spark, source, output, "delta")
    assert all(t["unchanged"] for t in again["output"]["lakehouse"].values())
    assert [c["version"] for c in lake_readers.delta_commits(orders)] == [0, 1]
    assert delta_tables(output, cut) == expected_at(generated, cut)

    # files a killed run wrote but never committed are not part of any version
    os.makedirs(os.path.join(orders, "data"), exist_ok=True)
    names, rows = lake_readers.delta_read(orders)
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows[:3]), os.path.join(orders, "data", "killed-run-00000-0000.parquet"))
    assert delta_tables(output, cut) == expected_at(generated, cut)


@pytest.mark.spark
def test_iceberg_snapshots_on_s3_with_a_sqlite_catalog(spark, archive, bucket, tmp_path):
    generated, source, middle = archive
    output = f"{bucket}/lake"
    catalog_db = str(tmp_path / "catalog.sqlite")
    catalog = {"uri": f"sqlite:///{catalog_db}"}
    first = replay(spark, source, output, "iceberg", "--catalog", f"uri={catalog['uri']}", "--as-of", str(middle))
    second = replay(spark, source, output, "iceberg", "--catalog", f"uri={catalog['uri']}")
    cut = second["cut"]["commit_ts"]
    metadata = lake_readers.iceberg_metadata(lake_readers.iceberg_metadata_location(catalog_db, "shop", "orders"))
    assert metadata["location"] == f"{output}/shop/orders"
    summaries = [s["summary"] for s in metadata["snapshots"]]
    assert [s["cdc-replay.run_id"] for s in summaries] == [first["run_id"], second["run_id"]]
    assert [s["operation"] for s in summaries] == ["append", "overwrite"]  # the first run adds only
    assert [int(s["cdc-replay.cut_commit_ts"]) for s in summaries] == [first["cut"]["commit_ts"], cut]

    assert iceberg_tables(output, catalog, catalog_db, middle) == expected_at(generated, middle)
    assert iceberg_tables(output, catalog, catalog_db, cut) == expected_at(generated, cut)

    again = replay(spark, source, output, "iceberg", "--catalog", f"uri={catalog['uri']}")
    assert all(t["unchanged"] for t in again["output"]["lakehouse"].values())
    metadata = lake_readers.iceberg_metadata(lake_readers.iceberg_metadata_location(catalog_db, "shop", "orders"))
    assert len(metadata["snapshots"]) == 2


def history_rows(rows: list[dict]) -> dict:
    versions = defaultdict(list)
    for r in rows:
        versions[r["id"]].append((r["_valid_from_ts"], r["_valid_to_ts"], r["_op"], r["_current"]))
    return {k: sorted(v) for k, v in versions.items()}


def expected_history(generated, table: str) -> dict:
    """Per key: [(valid from, valid to, op, current)] from the generator's events (a key
    change ends the old key with a delete)."""
    changes = defaultdict(list)
    for e in generated.events:
        if e["kind"] != "row" or e["table"] != table or e["commit_ts"] > generated.cut_ts:
            continue
        value = lambda image: int(next(c["value"] for c in image if c["name"] == "id"))  # noqa: E731
        before, after = e["before"] and value(e["before"]), e["after"] and value(e["after"])
        if e["op"] == "delete" or (e["op"] == "update" and before != after):
            changes[before].append((e["commit_ts"], "delete"))
        if e["op"] != "delete":
            changes[after].append((e["commit_ts"], e["op"]))
    out = {}
    for key, items in changes.items():
        items.sort()
        out[key] = [(ts, items[i + 1][0] if i + 1 < len(items) else None, op,
                     i + 1 == len(items) and op != "delete") for i, (ts, op) in enumerate(items)]
    return out


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_history_tables(spark, bucket, tmp_path, fmt):
    generated = generate(transactions=120, partitions=2, seed=37, ddl_rate=0)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    if fmt == "delta":  # Delta on the S3 server, through the command line; Iceberg on a local path
        # delta-rs holds the GIL while it waits for S3, and the test's S3 server is a thread of
        # this process: the run goes through `cdc-replay replay` (spark-submit), the path users take
        import subprocess
        import sys

        from spark_apps import manifest as manifest_mod

        output = f"{bucket}/history"
        subprocess.run([sys.executable, "-m", "spark_apps.cli", "replay", "--source", source, "--protocol",
                        "canal-json", *TIDB, "--output", output, "--emit", "history", "--target-format", fmt,
                        "--master", "local[2]"], check=True, capture_output=True, timeout=900)
        manifest = manifest_mod.read_manifest(output)
        names, rows = lake_readers.delta_read(storage.join(output, "shop", "orders"))
    else:
        output = str(tmp_path / "history")
        manifest = replay(spark, source, output, fmt, emit="history")
        names, rows = lake_readers.iceberg_read(
            lake_readers.iceberg_metadata_location(os.path.join(output, "_catalog.sqlite"), "shop", "orders"))
    assert names[:6] == ["_op", "_valid_from_ts", "_valid_to_ts", "_valid_from", "_valid_to", "_current"]
    assert history_rows(rows) == expected_history(generated, "orders")
    assert manifest["output"]["lakehouse"]["shop.orders"]["rows"] == len(rows)
    row = next(r for r in rows if r["_valid_to_ts"] is not None)
    assert row["_valid_from"] == dt.datetime.fromtimestamp((row["_valid_from_ts"] >> 18) / 1000, dt.timezone.utc)
    assert isinstance(row["amount"], (decimal.Decimal, type(None)))


def test_lakehouse_arguments_are_checked(tmp_path):
    argv = ["--source", str(tmp_path), "--protocol", "canal-json", "--output", "s3://b/x", "--emit", "snapshot",
            "--target-format", "iceberg"]
    with pytest.raises(ReplayError, match="needs a catalog"):
        run(ReplayArgs.from_namespace(parser().parse_args(argv)))
    argv[argv.index("snapshot")] = "topics"
    with pytest.raises(ReplayError, match="--emit topics is written as a Kafka-record archive"):
        run(ReplayArgs.from_namespace(parser().parse_args(argv)))
    argv[argv.index("topics")] = "snapshot"
    with pytest.raises(ReplayError, match="namespace.table"):
        run(ReplayArgs.from_namespace(parser().parse_args([*argv[:-1], "delta", "--target-table", "{table}"])))
    local = ["--source", str(tmp_path), "--protocol", "canal-json", "--output", str(tmp_path.parent / "out")]
    with pytest.raises(ReplayError, match="--since last applies to --emit snapshot with --target-format delta"):
        run(ReplayArgs.from_namespace(parser().parse_args([*local, "--emit", "topics", "--since", "last"])))
    with pytest.raises(ReplayError, match="--base-snapshot is not used with --target-format delta/iceberg"):
        run(ReplayArgs.from_namespace(parser().parse_args(
            [*local, "--emit", "snapshot", "--target-format", "delta", "--since", "5", "--base-snapshot", "/x"])))


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_schema_changes_and_table_lifecycle_between_versions(spark, tmp_path, fmt):
    """ADD/DROP/RENAME/MODIFY COLUMN, RENAME TABLE, TRUNCATE, DROP TABLE between two runs: the
    version of each cut reads as the scenario's state at that cut (tables/columns included).
    The same DDL in an incremental window (--since the first cut) gives the tables a full
    replay gives, row by row and column type by column type (spec reader), one version each."""
    from .scenario import Scenario
    from .test_ddl_replay import archive as scenario_archive

    s = Scenario()
    s.create_database("d")
    s.create_table("t", [("id", "int"), ("a", "varchar(10)"), ("b", "int")], key=["id"])
    s.create_table("g", [("id", "int"), ("v", "int")], key=["id"])
    s.create_table("gone", [("id", "int")], key=["id"])
    s.create_table("tr", [("id", "int")], key=["id"])
    s.insert("t", id=1, a="one", b=10)
    s.insert("g", id=1, v=1)
    s.insert("gone", id=1)
    first_cut = s.insert("tr", id=1)
    s.add_column("t", "c", "int", default="5")
    s.drop_column("t", "b")
    s.rename_column("t", "a", "a2")
    s.modify_column("t", "c", "bigint")
    s.add_column("t", "n", "varchar(8)")  # no default: NULL for the rows from before
    s.insert("t", id=2, a2="two", c=2**40, n="x")
    s.rename_table(("g", "g2"))
    s.insert("g2", id=2, v=2)
    s.drop_table("gone")
    s.truncate("tr")
    s.insert("tr", id=2)
    source = str(tmp_path / "archive")
    scenario_archive(s, source)

    output, windowed = str(tmp_path / fmt), str(tmp_path / f"{fmt}-window")
    argv = ["--protocol-option", "content-compatible=true"]
    replay(spark, source, output, fmt, *argv, "--as-of", str(first_cut))
    replay(spark, source, windowed, fmt, *argv, "--as-of", str(first_cut))
    window = replay(spark, source, windowed, fmt, *argv, "--since", str(first_cut))
    manifest = replay(spark, source, output, fmt, *argv)
    final_cut = manifest["cut"]["commit_ts"]
    tables = manifest["output"]["lakehouse"]
    assert tables["d.gone"]["dropped"] and tables["d.g"]["dropped"] and tables["d.tr"]["rows"] == 1
    merged = window["output"]["lakehouse"]
    assert window["cut"]["commit_ts"] == final_cut and sorted(merged) == sorted(tables)
    assert {n: (e["mode"], e["dropped"]) for n, e in merged.items()} == {
        "d.t": ("rebuild", False), "d.g2": ("rebuild", False), "d.g": ("replace", True),
        "d.gone": ("replace", True), "d.tr": ("replace", False)}

    def read(cut, at=output, types=False):
        state = {}
        for name, entry in tables.items():
            db, table = name.split(".")
            if fmt == "delta":
                location = storage.join(at, db, table)
                version = delta_version_at(location, cut)
                rows = lake_readers.delta_read(location, version)[1] if version is not None else []
                schema = lake_readers.delta_schema(location, version) if version is not None else None
            else:
                metadata = lake_readers.iceberg_metadata_location(os.path.join(at, "_catalog.sqlite"), db, table)
                snapshot = iceberg_snapshot_at(metadata, cut)
                rows = lake_readers.iceberg_read(metadata, snapshot)[1] if snapshot is not None else []
                schema = lake_readers.iceberg_schema(metadata, snapshot) if snapshot is not None else None
            if types:
                state[(db, table)] = schema
            elif rows:
                state[(db, table)] = {(canonical(r["id"]),): {k: canonical(v) for k, v in r.items()} for r in rows}
        return state

    assert read(first_cut) == s.state_at(first_cut)
    assert read(final_cut) == s.state()
    # the window: equal to the full replay, and one version per table per run (a rerun: none)
    assert read(final_cut, windowed) == s.state() and read(first_cut, windowed) == s.state_at(first_cut)
    assert read(final_cut, windowed, types=True) == read(final_cut, types=True)
    assert dict(read(final_cut, windowed, types=True)[("d", "t")])["c"] == '"long"'  # MODIFY int -> bigint
    assert s.state()[("d", "t")][(b"1",)] == {"id": b"1", "a2": b"one", "c": b"5", "n": None}
    again = replay(spark, source, windowed, fmt, *argv, "--since", str(first_cut))
    assert all(e["unchanged"] for e in again["output"]["lakehouse"].values())
    if fmt == "delta":
        assert [len(lake_readers.delta_commits(storage.join(windowed, "d", t))) for t in ("t", "g", "g2")] == [2, 2, 1]
    else:
        for at in (windowed, output):
            metadata = lake_readers.iceberg_metadata(
                lake_readers.iceberg_metadata_location(os.path.join(at, "_catalog.sqlite"), "d", "t"))
            assert len(metadata["snapshots"]) == 2
            ids = {f["name"]: f["id"] for schema in metadata["schemas"] for f in schema["fields"]}
            assert ids["a"] == ids["a2"]  # RENAME COLUMN is Iceberg's rename: the field id is kept
    if fmt == "iceberg":  # pyiceberg reads the first version's files through the table's name mapping
        catalog = load_catalog(output, {})
        metadata = lake_readers.iceberg_metadata_location(os.path.join(output, "_catalog.sqlite"), "d", "t")
        old = catalog.load_table(("d", "t")).scan(snapshot_id=iceberg_snapshot_at(metadata, first_cut)).to_arrow()
        assert old.to_pylist() == [{"id": 1, "a": "one", "b": 10}]
    if fmt == "delta":
        from deltalake import DeltaTable

        assert [f.name for f in DeltaTable(tables["d.t"]["location"]).schema().fields] == ["id", "a2", "c", "n"]


@pytest.mark.spark
def test_a_run_killed_while_writing_leaves_the_previous_version(spark, archive, tmp_path):
    """A real `cdc-replay replay` (spark-submit) killed with SIGKILL as soon as its first data
    file exists: no version is added, and the table reads as at the previous run's cut."""
    import glob
    import signal
    import subprocess
    import sys
    import time

    generated, source, middle = archive
    output = str(tmp_path / "delta")
    replay(spark, source, output, "delta", "--as-of", str(middle))
    command = [sys.executable, "-m", "spark_apps.cli", "replay", "--source", source, "--protocol", "canal-json",
               *TIDB, "--output", output, "--emit", "snapshot", "--target-format", "delta", "--run-id", "killed",
               "--master", "local[1]"]
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    written = []
    while time.time() < deadline and proc.poll() is None and not written:
        written = glob.glob(os.path.join(output, "*", "*", "data", "killed-*.parquet"))
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert written, "the run ended before writing a data file"
    for table in ("orders", "customers"):
        assert [c["version"] for c in lake_readers.delta_commits(os.path.join(output, "shop", table))] == [0]
    assert delta_tables(output, 2**63) == expected_at(generated, middle)


# -------------------------------------------------------------- incremental windows (--since)
@pytest.fixture(scope="module")
def window_archive(tmp_path_factory):
    """No DDL (a window MERGE applies row changes); deletes and key-changing updates in both
    halves; a commit ts in the middle that splits them."""
    generated = generate(transactions=140, partitions=2, seed=41, ddl_rate=0)
    path = str(tmp_path_factory.mktemp("window-archive"))
    write_archive(generated.records, path)
    ts = sorted({e["commit_ts"] for e in generated.events if e["kind"] == "row" and e["commit_ts"] <= generated.cut_ts})
    middle = ts[len(ts) // 2]
    later = [e for e in generated.events if e["kind"] == "row" and middle < e["commit_ts"] <= generated.cut_ts]
    value = lambda image: next(c["value"] for c in image if c["name"] == "id")  # noqa: E731
    assert any(e["op"] == "delete" for e in later)
    assert any(e["op"] == "update" and e["before"] and value(e["before"]) != value(e["after"]) for e in later)
    return generated, path, middle


def lake_state(fmt: str, output: str, commit_ts: int) -> dict:
    if fmt == "delta":
        return delta_tables(output, commit_ts)
    return iceberg_tables(output, {}, os.path.join(output, "_catalog.sqlite"), commit_ts)


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_window_merged_into_the_tables_equals_a_full_replay(spark, window_archive, tmp_path, fmt):
    """Full replay to cut A, then the window A..B merged (MERGE: upserts, deletes, key
    changes): the tables read as a full replay to B, and as the reference replayer at A and B;
    the window's version is a MERGE / an overwrite of only the files it touched; a rerun of
    the window adds no version; `--since last` finds A in the tables' metadata."""
    generated, source, middle = window_archive
    incremental, full = str(tmp_path / "incremental"), str(tmp_path / "full")
    first = replay(spark, source, incremental, fmt, "--as-of", str(middle))
    assert first["cut"]["commit_ts"] == middle
    window = replay(spark, source, incremental, fmt, "--since", "last" if fmt == "iceberg" else str(middle))
    cut = window["cut"]["commit_ts"]
    assert window["window"]["since"] == middle and cut > middle
    whole = replay(spark, source, full, fmt)
    assert whole["cut"]["commit_ts"] == cut

    assert lake_state(fmt, incremental, cut) == lake_state(fmt, full, cut) == expected_at(generated, cut)
    assert lake_state(fmt, incremental, middle) == expected_at(generated, middle)
    orders = window["output"]["lakehouse"]["shop.orders"]
    assert orders["mode"] == "merge" and orders["since"] == middle and not orders["unchanged"]
    assert orders["rows"] == len(expected_at(generated, cut)[("shop", "orders")])
    if fmt == "delta":
        commits = lake_readers.delta_commits(orders["location"])
        assert len(commits) == 2 and commits[1]["commitInfo"]["operation"] == "MERGE"
        assert commits[1]["commitInfo"]["cdc-replay.cut_commit_ts"] == str(cut)
        assert commits[1]["commitInfo"]["cdc-replay.since"] == str(middle)
    else:
        metadata = lake_readers.iceberg_metadata(
            lake_readers.iceberg_metadata_location(os.path.join(incremental, "_catalog.sqlite"), "shop", "orders"))
        summaries = [s["summary"] for s in metadata["snapshots"]]
        assert [s["operation"] for s in summaries] == ["append", "overwrite"]
        assert summaries[1]["cdc-replay.mode"] == "merge" and summaries[1]["cdc-replay.since"] == str(middle)

    again = replay(spark, source, incremental, fmt, "--since", str(middle))  # starts at the tables' cut instead
    assert all(t["unchanged"] for t in again["output"]["lakehouse"].values())
    assert again["output"]["lakehouse"]["shop.orders"]["rows"] == orders["rows"]
    assert lake_state(fmt, incremental, 2**63) == expected_at(generated, cut)
    if fmt == "delta":
        assert len(lake_readers.delta_commits(orders["location"])) == 2
    with pytest.raises(ReplayError, match="must be at that cut or later"):  # a gap: changes would be missed
        replay(spark, source, incremental, fmt, "--since", str(cut + 1))


@pytest.fixture(scope="module")
def postgres():
    from .support.postgres import PostgresServer

    with PostgresServer() as server:
        yield server


@pytest.mark.spark
@pytest.mark.parametrize("catalog", ["postgresql", "filesystem"])
def test_iceberg_catalogs_postgresql_and_filesystem(spark, window_archive, tmp_path, catalog, request):
    """A SQL catalog on PostgreSQL and the filesystem (Hadoop layout) catalog: a full run, then
    a window merged with `--since last`; every version read back through the catalog's own
    pointer by the spec reader, and by pyiceberg (the catalog / StaticTable from the folder)."""
    from pyiceberg.table import StaticTable

    generated, source, middle = window_archive
    output = str(tmp_path / "lake")
    if catalog == "postgresql":
        dsn = request.getfixturevalue("postgres").create_database("iceberg_catalog")
        options = ["--catalog", f"uri={dsn}"]
        locate = lambda table: lake_readers.iceberg_metadata_location_postgres(  # noqa: E731
            dsn.replace("postgresql+psycopg2", "postgresql"), "shop", table)
    else:
        options = ["--catalog", "type=filesystem"]
        locate = lambda table: lake_readers.iceberg_hadoop_metadata_location(f"{output}/shop/{table}")  # noqa: E731
    replay(spark, source, output, "iceberg", *options, "--as-of", str(middle))
    window = replay(spark, source, output, "iceberg", *options, "--since", "last")
    cut = window["cut"]["commit_ts"]
    assert window["window"]["since"] == middle and window["output"]["lakehouse"]["shop.orders"]["mode"] == "merge"
    for at in (middle, cut):
        state = {}
        for table in ("orders", "customers"):
            metadata = locate(table)
            snapshot = iceberg_snapshot_at(metadata, at)
            _, spec_rows = lake_readers.iceberg_read(metadata, snapshot)
            if catalog == "filesystem":
                lib = StaticTable.from_metadata(f"{output}/shop/{table}")
            else:
                lib = load_catalog(output, {"uri": dsn}).load_table(("shop", table))
            assert as_state(lib.scan(snapshot_id=snapshot).to_arrow().to_pylist()) == as_state(spec_rows)
            if spec_rows:
                state[("shop", table)] = as_state(spec_rows)
        assert state == expected_at(generated, at)
    if catalog == "filesystem":
        assert sorted(os.listdir(f"{output}/shop/orders/metadata"))[-3:] == ["v1.metadata.json", "v2.metadata.json",
                                                                           "version-hint.text"]


def _merged(fmt: str, output: str, rows: pa.Table, changes: pa.Table, keys: list[str]) -> list[dict]:
    """A table `shop.t` committed with `rows`, then `changes` (`_op` upsert/delete) merged on
    `keys` by the format's own merge; its rows read back at the merged version."""
    import io

    import pyarrow.parquet as pq

    target = lake.open_format(fmt, output, "{schema}.{table}")
    uri = storage.join(target.location("shop", "t"), "data", "base.parquet")
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    storage.write_bytes(uri, sink.getvalue())
    target.commit("shop", "t", rows.schema, [{"uri": uri, "bytes": len(sink.getvalue()), "rows": rows.num_rows}],
                  {"cut_commit_ts": "1"})
    done = target.merge("shop", "t", changes, keys, {"cut_commit_ts": "2"})
    read = [r for b in target.batches_at("shop", "t", done["version"]) for r in b.to_pylist()]
    assert done["rows"] == len(read)
    return sorted(read, key=repr)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_window_merges_on_a_key_of_several_columns(tmp_path, fmt):
    """A key of two or more columns — a keyless table's (every column), or a composite primary
    key. Delta's merge condition once joined the columns' `IS NOT DISTINCT FROM` with bare AND,
    which delta-rs's SQL parser reads as `a IS NOT DISTINCT FROM (b AND ...)`: a planning error
    ("Utf8 AND Boolean") for the keyless (string, int) table of the generated archive, and for
    two boolean key columns a plan that matched the wrong rows (delete (false, false) also
    removed (false, true))."""
    int32 = lambda values: pa.array(values, pa.int32())  # noqa: E731
    keyless = _merged(fmt, str(tmp_path / "keyless"),
                      pa.table({"item": ["a", "b", "a"], "qty": int32([1, 2, 2])}),
                      pa.table({"_op": ["upsert", "upsert", "delete", "upsert"], "item": ["a", "b", "a", "c"],
                                "qty": int32([1, 2, 2, 3])}), ["item", "qty"])
    assert keyless == [{"item": "a", "qty": 1}, {"item": "b", "qty": 2}, {"item": "c", "qty": 3}]
    flags = _merged(fmt, str(tmp_path / "flags"),
                    pa.table({"x": [False, False, True, None], "y": [True, False, False, False],
                              "order": int32([1, 2, 3, 4])}),
                    pa.table({"_op": ["delete", "upsert"], "x": [False, None], "y": [False, False],
                              "order": int32([2, 40])}), ["x", "y"])
    assert flags == sorted([{"x": False, "y": True, "order": 1}, {"x": True, "y": False, "order": 3},
                            {"x": None, "y": False, "order": 40}], key=repr)


def _all_tables(fmt: str, output: str, manifest: dict) -> dict:
    """{table: (columns, sorted rows)} of every table the run's manifest names, read back by
    deltalake / pyiceberg."""
    from .support.outputs import lake_tables

    return {name: (columns, sorted((tuple(sorted(r.items())) for r in rows), key=repr))
            for name, (columns, rows) in lake_tables(fmt, output, manifest).items()}


@pytest.fixture(scope="module", params=["delta", "iceberg"])
def keyless_window(request, spark, tmp_path_factory):
    """A generated canal-json archive with DDL and a keyless table (`ledger`, whose window adds
    a second copy of a row) written at its middle, then `--since last`; and a full replay to
    the same cut. Returns (format, generated, {"window"/"whole": tables read back}, window manifest)."""
    fmt, tmp_path = request.param, tmp_path_factory.mktemp(f"keyless-window-{request.param}")
    options = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]
    generated = generate(transactions=60, partitions=2, seed=41, protocol="canal-json",
                         options={"enable-tidb-extension": "true"}, ddl_rate=0.05, keyless=True,
                         split_key_updates=False)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source, records_per_object=50)
    row_ts = sorted(e["commit_ts"] for e in generated.events if e["kind"] == "row" and e.get("commit_ts"))
    argv = lambda out, *extra: ["--source", source, "--output", out, "--target-format", fmt,  # noqa: E731
                                "--protocol", "canal-json", *options, "--emit", "snapshot", *extra]
    at = lambda argv: run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)  # noqa: E731
    incremental, full = str(tmp_path / "incremental"), str(tmp_path / "full")
    at(argv(incremental, "--as-of", str(row_ts[len(row_ts) // 2])))
    window = at(argv(incremental, "--since", "last"))
    whole = at(argv(full))
    assert window["cut"]["commit_ts"] == whole["cut"]["commit_ts"] == generated.cut_ts
    tables = {"window": _all_tables(fmt, incremental, window), "whole": _all_tables(fmt, full, whole)}
    return fmt, generated, tables, window


@pytest.mark.spark
def test_a_window_merges_after_ddl_and_a_keyless_table(keyless_window):
    """The window merges into every table — the keyless one on all its columns
    (test_a_window_merges_on_a_key_of_several_columns; Delta's merge failed on it) — and the
    keyed tables read as a full replay's to the same cut."""
    fmt, generated, tables, window = keyless_window
    modes = {e["source_table"]: e["mode"] for e in window["output"]["lakehouse"].values()}
    assert modes["ledger"] == "merge" and modes["orders"] == "merge", modes
    keyed = lambda found: {k: v for k, v in found.items() if k != "shop.ledger"}  # noqa: E731
    assert keyed(tables["window"]) == keyed(tables["whole"]) and len(keyed(tables["whole"])) >= 2
    distinct = {tuple((k, str(v)) for k, v in row) for row in tables["window"]["shop.ledger"][1]}
    assert distinct == {tuple((k, v.decode()) for k, v in r) for r in generated.final_rows[("shop", "ledger")]}


@pytest.mark.spark
def test_a_window_keeps_the_copies_of_a_keyless_table(keyless_window):
    """The keyless table (a multiset, docs/semantics.md) after the window: as many identical
    rows as the full replay and the generator hold ((a, 1) twice). The window once wrote one
    row per identical row, losing the copy it added to one already in the table."""
    fmt, generated, tables, window = keyless_window
    assert tables["whole"]["shop.ledger"] == tables["window"]["shop.ledger"]


def _keyless_events(case: str = "rows") -> tuple[list[dict], int]:
    """A keyless table `shop.k` (item, qty) with identical rows, as TiCDC writes its changes
    (one row per transaction, distinct commit ts, every row with the table's columns at its
    commit ts): before the cut (a,1) x3, (b,2) x2, (c,3); after it, by `case`:
    rows: a DELETE of one (a,1), an INSERT of one more (b,2), an UPDATE of one (b,2) to (b,5),
    an INSERT then a DELETE of (c,3); add-column: ADD COLUMN note with a default, a DELETE of
    one (a,1,'x'), an INSERT of (b,2,'x') and of (a,1,'y'); truncate: TRUNCATE, then (a,1)
    twice; recreate: DROP, CREATE again with other columns, then (q) twice.
    Returns (events, the cut's commit ts)."""
    from cdc_codecs.ddl_types import classify
    from cdc_codecs.events import Kind, Op, new_event
    from cdc_codecs.tso import compose, physical_ms

    ms = 1_700_000_000_000
    clock = iter(range(1, 1000))

    def ts():
        return compose(ms + 10 * next(clock), 0)

    def image(values, columns):
        return [{"name": n, "mysql_type": t, "flags": 0, "value": None if v is None else str(v).encode(),
                 "label": None} for (n, t), v in zip(columns, values)]

    def ddl(query):
        t = ts()
        return new_event(Kind.DDL, commit_ts=t, execute_ts_ms=physical_ms(t), database="shop", table="k",
                         ddl_query=query, ddl_type=classify(query))

    def row(op, columns, before=None, after=None):
        t = ts()
        return new_event(Kind.ROW, op=op, commit_ts=t, execute_ts_ms=physical_ms(t), database="shop", table="k",
                         key_columns=[], before=image(before, columns) if before else None,
                         after=image(after, columns) if after else None)

    two = [("item", "varchar(8)"), ("qty", "int(11)")]
    events = [ddl("CREATE TABLE `shop`.`k` (`item` VARCHAR(8), `qty` INT(11))")]
    events += [row(Op.INSERT, two, after=r) for r in [("a", 1), ("a", 1), ("b", 2), ("a", 1), ("b", 2), ("c", 3)]]
    cut = events[-1]["commit_ts"]
    if case == "rows":
        events += [row(Op.DELETE, two, before=("a", 1)), row(Op.INSERT, two, after=("b", 2)),
                   row(Op.UPDATE, two, before=("b", 2), after=("b", 5)), row(Op.INSERT, two, after=("c", 3)),
                   row(Op.DELETE, two, before=("c", 3))]
    elif case == "add-column":
        three = two + [("note", "varchar(8)")]
        events += [ddl("ALTER TABLE `shop`.`k` ADD COLUMN `note` VARCHAR(8) DEFAULT 'x'"),
                   row(Op.DELETE, three, before=("a", 1, "x")), row(Op.INSERT, three, after=("b", 2, "x")),
                   row(Op.INSERT, three, after=("a", 1, "y"))]
    elif case == "truncate":
        events += [ddl("TRUNCATE TABLE `shop`.`k`"), row(Op.INSERT, two, after=("a", 1)),
                   row(Op.INSERT, two, after=("a", 1))]
    else:
        one = [("z", "varchar(8)")]
        events += [ddl("DROP TABLE `shop`.`k`"), ddl("CREATE TABLE `shop`.`k` (`z` VARCHAR(8))"),
                   row(Op.INSERT, one, after=("q",)), row(Op.INSERT, one, after=("q",))]
    last = ts()
    events.append(new_event(Kind.WATERMARK, watermark_ts=last, execute_ts_ms=physical_ms(last)))
    return events, cut


def _keyless_replay(spark, tmp_path, events, fmt):
    """The events as one canal-json partition archive, and a function replaying it to a
    snapshot in `fmt` at an output with extra options (the later --target-format wins)."""
    from cdc_codecs import KafkaRecord, get_codec

    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    records = [KafkaRecord("cdc", 0, offset, 0, m.key, m.value)
               for offset, m in enumerate(m for e in events for m in codec.encode([e], topic="cdc", partition=0))]
    source = str(tmp_path / "archive")
    write_archive(records, source, records_per_object=4)

    def at(out, *extra):
        argv = ["--source", source, "--output", out, "--target-format", fmt, "--protocol", "canal-json",
                "--protocol-option", "enable-tidb-extension=true", "--emit", "snapshot", *extra]
        return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)

    return at


def _keyless_expected(events) -> list[tuple]:
    """tests/reference.py's rows of `shop.k` at the end, each as sorted (column, value) pairs."""
    from .reference import reference_rows

    return sorted(tuple(sorted(row)) for row in
                  reference_rows([e for e in events if e["kind"] != "watermark"])[("shop", "k")])


def _lake_window(spark, tmp_path, fmt, events, middle):
    """The table at the cut, then `--since last` merged into it, and a full replay: (the merge's
    manifest, the merged table, the replayed table)."""
    at = _keyless_replay(spark, tmp_path, events, fmt)
    incremental, full = str(tmp_path / "incremental"), str(tmp_path / "full")
    at(incremental, "--as-of", str(middle))
    window = at(incremental, "--since", "last")
    whole = at(full)
    return window, _all_tables(fmt, incremental, window)["shop.k"], _all_tables(fmt, full, whole)["shop.k"]


def _pairs(rows) -> list[tuple]:
    return sorted(tuple(sorted((k, canonical(v)) for k, v in row)) for row in rows)


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_window_deletes_and_adds_copies_of_identical_rows(spark, tmp_path, fmt):
    """A window over a keyless table that already holds identical rows: a DELETE removes one
    of three copies (not all), an INSERT adds a third copy and an UPDATE changes one of them,
    an INSERT and DELETE of the same row leave its one copy. The merged table equals a full
    replay to the same cut and the independent reference (tests/reference.py)."""
    events, middle = _keyless_events()
    window, merged, replayed = _lake_window(spark, tmp_path, fmt, events, middle)
    assert window["output"]["lakehouse"]["shop.k"]["mode"] == "merge"
    assert merged == replayed
    assert _pairs(merged[1]) == _keyless_expected(events)
    assert sorted((dict(r)["item"], dict(r)["qty"]) for r in merged[1]) == [
        ("a", 1), ("a", 1), ("b", 2), ("b", 2), ("b", 5), ("c", 3)]


@pytest.mark.spark
@pytest.mark.parametrize("case", ["add-column", "truncate", "recreate"])
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_window_with_ddl_on_a_keyless_table_with_copies(spark, tmp_path, fmt, case):
    """DDL inside the window of a keyless table holding identical rows (ADD COLUMN with a
    default, TRUNCATE, DROP and CREATE again): the merged table equals a full replay to the same
    cut and the independent reference (tests/reference.py), copies included."""
    events, middle = _keyless_events(case)
    _, merged, replayed = _lake_window(spark, tmp_path, fmt, events, middle)
    assert merged == replayed
    assert _pairs(merged[1]) == _keyless_expected(events)


@pytest.mark.spark
@pytest.mark.parametrize("case", ["add-column", "truncate", "recreate"])
def test_a_parquet_window_with_ddl_on_a_keyless_table_with_copies(spark, tmp_path, case):
    """The same DDL inside a Parquet snapshot window (`--base-snapshot`, the Kafka-record
    snapshot at the window's start): the keyless table's rows, copies included, equal a full
    replay's and the reference's."""
    from .test_outputs import read_parquet

    events, middle = _keyless_events(case)
    at = _keyless_replay(spark, tmp_path, events, "parquet")
    base, window, full = str(tmp_path / "base"), str(tmp_path / "window"), str(tmp_path / "full")
    # the base is a Kafka-record snapshot (what --base-snapshot reads); the window and the full
    # replay are written as Parquet, which keeps every copy of an identical row as a row
    at(base, "--as-of", str(middle), "--target-format", "kafka", "--target-option", "enable-tidb-extension=true")
    at(window, "--base-snapshot", base)
    at(full)
    rows = lambda out: _pairs(r.items() for r in read_parquet(out)[("shop", "k")].to_pylist())  # noqa: E731
    assert rows(window) == rows(full) == _keyless_expected(events)
