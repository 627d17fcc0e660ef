"""Replays of hand-written histories that exercise every DDL kind and every key rule,
compared with the scenario simulator's own state (tests/scenario.py)."""

from __future__ import annotations

import zlib

import pytest

from cdc_codecs import encode_records, get_codec
from cdc_codecs.events import Kind, new_event
from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.generate import write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .scenario import Scenario

pytestmark = pytest.mark.spark
OPTIONS = {"enable-tidb-extension": "true", "content-compatible": "true"}


def archive(scenario: Scenario, path: str, partitions: int = 2, duplicate_every: int = 7) -> int:
    """Encode the scenario as TiCDC would (rows by key hash, DDL on partition 0, a final
    watermark everywhere), redeliver every n-th message, and write the archive."""
    codec = get_codec("canal-json", OPTIONS)

    def dispatch(event):
        image = event["after"] or event["before"]
        return zlib.crc32(repr([c["value"] for c in image][:1]).encode()) % partitions

    cut = scenario.ms << 18 | 1
    events = scenario.events + [new_event(Kind.WATERMARK, watermark_ts=cut)]
    records = encode_records(codec, events, topic="cdc", partitions=partitions, dispatch=dispatch)
    with_duplicates = []
    for i, record in enumerate(records):
        with_duplicates.append(record)
        if i % duplicate_every == 3:
            with_duplicates.append(record)
    # offsets again dense per partition after the redeliveries
    renumbered, next_offset = [], {}
    for record in with_duplicates:
        offset = next_offset.get(record.partition, 0)
        next_offset[record.partition] = offset + 1
        renumbered.append(type(record)(record.topic, record.partition, offset, None, record.key, record.value))
    write_archive(renumbered, path, records_per_object=10)
    return cut


def replay(spark, source, output, *extra):
    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", "snapshot"]
    for key, value in OPTIONS.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return run(ReplayArgs.from_namespace(parser().parse_args([*argv, *extra])), spark=spark)


def check(spark, scenario: Scenario, tmp_path, *extra):
    archive(scenario, str(tmp_path / "archive"))
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "out"), *extra)
    assert manifest["quarantine"]["records"] == 0, manifest["quarantine"]
    assert manifest["counts"]["duplicate"] > 0 and manifest["counts"]["reconciled"]
    assert read_snapshot(str(tmp_path / "out"), "canal-json", OPTIONS) == scenario.state()
    return manifest


def test_columns_added_dropped_renamed_changed_and_modified(spark, tmp_path):
    s = Scenario()
    s.create_database("d")
    s.create_table("t", [("id", "int"), ("a", "varchar(10)"), ("b", "int")], key=["id"])
    s.insert("t", id=1, a="one", b=10)
    s.insert("t", id=2, a="two", b=20)
    s.add_column("t", "c", "int", default="5")      # old rows read the default
    s.insert("t", id=3, a="three", b=30, c=33)
    s.update("t", (1,), a="uno")                    # carries c = 5 now
    s.drop_column("t", "b")
    s.rename_column("t", "a", "a2")                 # old images say `a`
    s.insert("t", id=4, a2="four", c=44)
    s.change_column("t", "a2", "a3", "varchar(20)")
    s.modify_column("t", "c", "bigint")
    s.add_column("t", "b", "int", default="7")      # a new `b`: old values of the dropped `b` must not return
    s.insert("t", id=5, a3="five", c=55, b=1)
    check(spark, s, tmp_path)


def test_table_lifecycle_like_rename_truncate_drop_and_databases(spark, tmp_path):
    s = Scenario()
    s.create_table("t", [("id", "int"), ("v", "varchar(8)")], key=["id"])
    s.insert("t", id=1, v="a")
    s.create_table_like("u", "t")
    s.insert("u", id=1, v="u1")
    s.insert("u", id=2, v="u2")
    s.rename_table(("t", "t2"))
    s.insert("t2", id=2, v="b")
    s.rename_table(("t2", "x"), ("u", "t2"), ("x", "u"))   # swap t2 and u
    s.update("u", (1,), v="a!")
    s.insert("t2", id=3, v="u3")
    s.truncate("t2")
    s.insert("t2", id=9, v="after truncate")
    s.create_table("gone", [("id", "int")], key=["id"])
    s.insert("gone", id=1)
    s.drop_table("gone")
    s.create_table("gone", [("id", "int"), ("w", "int")], key=["id"])   # a new incarnation
    s.insert("gone", id=2, w=2)
    s.create_database("e")
    s.create_table("z", [("id", "int")], key=["id"], db="e")
    s.insert("z", db="e", id=1)
    s.drop_database("e")
    check(spark, s, tmp_path)


def test_keys_split_updates_key_changes_and_reinserts(spark, tmp_path):
    s = Scenario()
    s.create_table("k", [("id", "int"), ("v", "varchar(8)")], key=["id"])
    s.insert("k", id=1, v="a")
    s.insert("k", id=2, v="b")
    s.update("k", (1,), id=10, v="moved")             # an UPDATE whose key changes moves the row
    ts = s._ts()                                       # a split key update: DELETE + INSERT, one ts
    s.delete("k", (2,), ts=ts)
    s.insert("k", id=20, v="b moved", ts=ts)
    s.insert("k", id=2, v="b again")                   # insert - delete - insert of one key
    s.delete("k", (2,))
    s.insert("k", id=2, v="b third")
    s.create_table("nopk", [("a", "int"), ("b", "varchar(4)")], key=[])
    s.insert("nopk", a=1, b="x")
    s.insert("nopk", a=2, b="y")
    s.delete("nopk", (b"1", b"x"))
    s.set_primary_key("nopk", ["a"])                   # keys change with the DDL
    s.update("nopk", (2,), b="z")
    s.create_table("pk2", [("a", "int"), ("b", "int")], key=["a"])
    s.insert("pk2", a=1, b=1)
    s.drop_primary_key("pk2")
    s.insert("pk2", a=1, b=2)
    check(spark, s, tmp_path)


def test_schema_option_gives_tables_created_before_the_archive(spark, tmp_path):
    s = Scenario()
    s.tables[("d", "old")] = {"columns": [("id", "int"), ("v", "int")], "key": ["id"], "rows": {}}
    s.insert("old", id=1, v=1)
    s.add_column("old", "w", "int", default="3")
    s.insert("old", id=2, v=2, w=4)
    schema = tmp_path / "schema.sql"
    schema.write_text("USE d;\nCREATE TABLE old (id INT PRIMARY KEY, v INT);\n")
    check(spark, s, tmp_path, "--schema", str(schema))
    # without it, the ALTER applies to the schema the table's rows carry (tests/test_inferred_schemas.py)
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "out2"))
    assert manifest["quarantine"]["ddl"] == [] and manifest["counts"]["quarantined"] == 0
    assert [t["table"] for t in manifest["inferred_schemas"]] == ["d.old"]
    assert read_snapshot(str(tmp_path / "out2"), "canal-json", OPTIONS) == s.state()


def test_columns_the_ddl_history_does_not_know_are_reported(spark, tmp_path):
    s = Scenario()
    s.create_table("t", [("id", "int"), ("a", "int")], key=["id"])
    s.insert("t", id=1, a=1)
    s.tables[("d", "t")]["columns"].append(("sneaky", "int"))  # a column added without DDL in the archive
    s.insert("t", id=2, a=2, sneaky=3)
    archive(s, str(tmp_path / "archive"))
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "out"))
    [conflict] = manifest["schema_conflicts"]
    assert "d.t: 1 row events" in conflict and "unexpected sneaky" in conflict
    assert any("schema conflict" in w for w in manifest["warnings"])
    # the DDL schema still decides what the snapshot holds
    assert read_snapshot(str(tmp_path / "out"), "canal-json", OPTIONS)[("d", "t")][(b"2",)] == {"id": b"2", "a": b"2"}


def test_require_schema_quarantines_rows_of_undescribed_tables(spark, tmp_path):
    s = Scenario()
    s.tables[("d", "old")] = {"columns": [("id", "int")], "key": ["id"], "rows": {}}
    s.insert("old", id=1)
    s.create_table("new", [("id", "int")], key=["id"])
    s.insert("new", id=1)
    archive(s, str(tmp_path / "archive"))
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "out"), "--require-schema",
                      "--max-bad-records", "5")
    assert set(read_snapshot(str(tmp_path / "out"), "canal-json", OPTIONS)) == {("d", "new")}
    assert manifest["counts"]["quarantined"] >= 1 and manifest["counts"]["reconciled"]
    lines = []
    import gzip

    import orjson
    for info in storage.list_objects(str(tmp_path / "out" / "_quarantine")):
        lines += [orjson.loads(x) for x in gzip.decompress(storage.read_bytes(info.uri)).splitlines()]
    assert lines and all("no known schema for d.old" in q["error"] for q in lines)


def test_storage_sink_schema_files_start_tables_and_are_cross_checked(spark, tmp_path):
    import orjson

    def schema_file(version, columns):
        cols = [{"ColumnName": name, "ColumnType": kind.upper(), "ColumnIsPk": str(name == "id").lower()}
                for name, kind in columns]
        name = f"d/old/meta/schema_{version}_{version % 10**10:010d}.json"
        storage.write_bytes(str(tmp_path / "sink" / name), orjson.dumps(
            {"Table": "old", "Schema": "d", "Version": 1, "TableVersion": version, "Query": "", "Type": 5,
             "TableColumns": cols, "TableColumnsTotal": len(cols)}))

    s = Scenario()
    s.tables[("d", "old")] = {"columns": [("id", "int"), ("v", "int")], "key": ["id"], "rows": {}}
    s.insert("old", id=1, v=1)
    altered = s.add_column("old", "w", "int", default="3")
    s.insert("old", id=2, v=2, w=4)
    schema_file(altered - (10 << 18), [("id", "int"), ("v", "int")])  # the table before the archive
    schema_file(altered, [("id", "int"), ("v", "int"), ("w", "int")])  # what the ALTER made
    manifest = check(spark, s, tmp_path, "--schema", str(tmp_path / "sink"), "--require-schema")
    assert manifest["schema_conflicts"] == []
    # a schema file the archive's DDL does not explain is reported, not applied
    schema_file(altered + 1, [("id", "int"), ("v", "bigint"), ("w", "int"), ("z", "int")])
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "out2"), "--schema", str(tmp_path / "sink"))
    [conflict] = manifest["schema_conflicts"]
    assert f"d.old at table version {altered + 1}" in conflict and "unexpected z" in conflict
    assert "types differ for v (bigint vs int)" in conflict
    assert read_snapshot(str(tmp_path / "out2"), "canal-json", OPTIONS) == s.state()


def test_schema_option_errors_name_the_source(tmp_path):
    from spark_apps.replay import ReplayError, validate

    (tmp_path / "sink" / "d").mkdir(parents=True)
    (tmp_path / "sink" / "d" / "readme.txt").write_text("no schemas")
    (tmp_path / "src").mkdir()
    argv = ["--source", str(tmp_path / "src"), "--protocol", "canal-json", "--output", str(tmp_path / "o"),
            "--emit", "snapshot", "--schema"]
    with pytest.raises(ReplayError, match="--schema .*sink: no \\*.sql or TiCDC schema_\\*.json files below it"):
        validate(ReplayArgs.from_namespace(parser().parse_args([*argv, str(tmp_path / "sink")])))
    (tmp_path / "sink" / "d" / "meta").mkdir()
    (tmp_path / "sink" / "d" / "meta" / "schema_1_0000000001.json").write_text('{"Table": "t"}')
    with pytest.raises(ReplayError, match="schema_1_0000000001.json: not a TiCDC storage-sink table schema file"):
        validate(ReplayArgs.from_namespace(parser().parse_args([*argv, str(tmp_path / "sink")])))


def test_unique_key_and_keyless_tables_keep_one_row_through_column_changes(spark, tmp_path):
    """Identity as the database defines it: a table with no primary key but a NOT NULL UNIQUE
    key is keyed by it (its events name no key columns: only the DDL says so); a table with
    neither is keyed by its whole row, and ADD/DROP COLUMN reach the stored images, so later
    UPDATE/DELETE images still find their rows. The expected state is the reference
    replayer's (tests/reference.py), and the scenario's own state agrees."""
    from .reference import reference_state

    s = Scenario()
    s.create_table("u", [("id", "int"), ("email", "varchar(20)"), ("v", "int")], key=[], unique=["email"])
    s.create_table("n", [("a", "int"), ("b", "varchar(8)")], key=[])
    s.insert("u", id=1, email="a@x", v=1)
    s.insert("u", id=2, email="b@x", v=2)
    s.insert("n", a=1, b="one")
    s.insert("n", a=2, b="two")
    s.insert("n", a=3, b="three")
    s.add_column("u", "w", "int", default="4")
    s.add_column("n", "c", "int", default="9")
    s.update("u", ("a@x",), id=10, v=11)            # images now carry w; the row is the same
    s.update("n", (1, "one", 9), b="uno")           # the insert's image had no c
    s.delete("n", (2, "two", 9))
    s.drop_column("n", "b")
    s.update("n", (1, 9), c=10)                     # the stored image still had b
    s.delete("n", (3, 9))
    s.drop_column("u", "v")
    s.delete("u", ("b@x",))
    s.update("u", ("a@x",), email="c@x")            # the unique key itself changes: the row moves
    expected = reference_state(s.events)
    assert expected == s.state() == {("d", "u"): {(b"c@x",): {"id": b"10", "email": b"c@x", "w": b"4"}},
                                     ("d", "n"): {(b"1", b"10"): {"a": b"1", "c": b"10"}}}
    check(spark, s, tmp_path)
