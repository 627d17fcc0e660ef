"""`--schema` sources: SQL files and TiCDC storage-sink table schema files (local and on the
S3 server), the starting schemas they give and their cross-check with the DDL history."""

from __future__ import annotations

import orjson
import pytest

from spark_apps import schema_files, storage
from spark_apps.ddl import SchemaHistory


def table_file(version: int, columns: list[dict], table: str = "orders", database: str = "shop",
               query: str = "") -> bytes:
    return orjson.dumps({"Table": table, "Schema": database, "Version": 1, "TableVersion": version,
                         "Query": query, "Type": 3, "TableColumns": columns,
                         "TableColumnsTotal": str(len(columns))})


V1_COLUMNS = [
    {"ColumnName": "id", "ColumnType": "BIGINT UNSIGNED", "ColumnPrecision": "20", "ColumnNullable": "false",
     "ColumnIsPk": "true"},
    {"ColumnName": "code", "ColumnType": "VARCHAR", "ColumnLength": "16"},
    {"ColumnName": "amount", "ColumnType": "DECIMAL", "ColumnPrecision": "12", "ColumnScale": "2"},
    {"ColumnName": "flags", "ColumnType": "BIT", "ColumnPrecision": "3"},
    {"ColumnName": "at", "ColumnType": "DATETIME", "ColumnScale": "3"},
    {"ColumnName": "state", "ColumnType": "ENUM"},
    {"ColumnName": "raw", "ColumnType": "BLOB", "ColumnLength": "65535"},
]
V2_COLUMNS = V1_COLUMNS + [{"ColumnName": "note", "ColumnType": "TEXT"}]
V1, V2 = 441349361156227074, 441349361156300000


def sink_root(root) -> None:
    """A storage-sink layout: database and table schema files, data files, metadata."""
    files = {
        "metadata": b'{"checkpoint-ts": 441349361156400000}',
        "shop/meta/schema_441349361156227000_0000000001.json": orjson.dumps(
            {"Table": "", "Schema": "shop", "Version": 1, "TableVersion": 441349361156227000,
             "Query": "CREATE DATABASE `shop`", "Type": 1, "TableColumns": None, "TableColumnsTotal": 0}),
        f"shop/orders/meta/schema_{V2}_3131721815.json": table_file(V2, V2_COLUMNS),
        f"shop/orders/meta/schema_{V1}_0123456789.json": table_file(V1, V1_COLUMNS),
        f"shop/orders/{V1}/CDC000001.json": b'{"not": "a schema"}\r\n',
        f"shop/orders/{V1}/meta/CDC.index": b"CDC000001.json",
        "shop/legacy/12345/schema.json": table_file(12345, [{"ColumnName": "k", "ColumnType": "INT",
                                                             "ColumnIsPk": "true"}], table="legacy"),
    }
    for name, data in files.items():
        storage.write_bytes(storage.join(str(root), name), data)


def test_a_table_schema_file_reads_as_a_create_table():
    version = schema_files.parse_schema_file(table_file(V1, V1_COLUMNS), "mem://x.json")
    assert (version.database, version.table, version.version, version.keys) == ("shop", "orders", V1, ("id",))
    assert dict(version.columns) == {"id": "bigint unsigned", "code": "varchar(16)", "amount": "decimal(12,2)",
                                     "flags": "bit(3)", "at": "datetime(3)", "state": "enum", "raw": "blob"}
    history = SchemaHistory(version.create_statement())
    table = history.tables[("shop", "orders")]
    assert table.key_columns == ["id"]
    assert [c.name for c in table.columns] == [c["ColumnName"] for c in V1_COLUMNS]
    assert history.columns_at("shop", "orders", [V1, 0])[3] == ("flags", "bit(3)")


def test_database_files_are_skipped_and_bad_files_named():
    assert schema_files.parse_schema_file(orjson.dumps({"Table": "", "Schema": "shop", "TableVersion": 1}),
                                          "a.json") is None
    with pytest.raises(schema_files.SchemaFileError, match=r"s3://b/shop/t/meta/schema_1_2\.json: not a TiCDC"):
        schema_files.parse_schema_file(b"[1, 2]", "s3://b/shop/t/meta/schema_1_2.json")
    with pytest.raises(schema_files.SchemaFileError, match="no ColumnType"):
        schema_files.parse_schema_file(table_file(1, [{"ColumnName": "x"}]), "b.json")


def test_a_storage_sink_root_gives_each_table_its_earliest_version(tmp_path):
    sink_root(tmp_path / "sink")
    (tmp_path / "sink" / "extra.sql").write_text("CREATE TABLE shop.other (id INT PRIMARY KEY);\n")
    loaded = schema_files.load(str(tmp_path / "sink"))
    assert loaded.sources == 5  # 3 table files, 1 database file, 1 SQL file; data files ignored
    assert sorted((v.table, v.version) for v in loaded.versions) == [("legacy", 12345), ("orders", V1),
                                                                    ("orders", V2)]
    history = SchemaHistory(loaded.initial_sql())
    assert sorted(history.tables) == [("shop", "legacy"), ("shop", "orders"), ("shop", "other")]
    assert "note" not in dict(history.columns_at("shop", "orders", [V1, 0]))  # the earliest version


def test_versions_are_cross_checked_with_the_ddl_history(tmp_path):
    sink_root(tmp_path / "sink")
    loaded = schema_files.load(str(tmp_path / "sink"))
    history = SchemaHistory(loaded.initial_sql())
    # the archive's DDL made version 2: the files agree with the history
    history.apply("ALTER TABLE shop.orders ADD COLUMN note TEXT", [V2])
    assert schema_files.version_conflicts(history, loaded.versions) == []
    # without that DDL, version 2 disagrees, and says where and how
    [conflict] = schema_files.version_conflicts(SchemaHistory(loaded.initial_sql()), loaded.versions)
    assert f"shop.orders at table version {V2}" in conflict and "unexpected note" in conflict
    assert f"schema_{V2}_3131721815.json" in conflict
    # a type the DDL history has differently is named with both types
    history.apply("ALTER TABLE shop.orders MODIFY COLUMN code INT", [V2 + 1])
    late = schema_files.TableVersion("late.json", "shop", "orders", V2 + 2, (("id", "bigint unsigned"),
                                     ("code", "varchar(16)")), frozenset(), ("id",))
    [conflict] = schema_files.version_conflicts(history, [late])
    assert "types differ for code (varchar(16) vs int)" in conflict and "missing amount" in conflict
    # a file of a table the history dropped
    history.apply("DROP TABLE shop.orders", [V2 + 3])
    gone = schema_files.TableVersion("gone.json", "shop", "orders", V2 + 4, (("id", "int"),), frozenset(), ())
    [conflict] = schema_files.version_conflicts(history, [gone])
    assert "no such table then" in conflict


def test_sources_on_the_s3_server_single_files_and_clear_errors(bucket, tmp_path):
    sink_root(f"{bucket}/sink")
    loaded = schema_files.load(f"{bucket}/sink")
    assert sorted(v.version for v in loaded.versions) == [12345, V1, V2]
    one = schema_files.load(f"{bucket}/sink/shop/orders/meta/schema_{V1}_0123456789.json")
    assert [v.version for v in one.versions] == [V1] and one.sql == ""
    storage.write_bytes(f"{bucket}/schema.sql", b"USE shop; CREATE TABLE t (id INT PRIMARY KEY);")
    assert "CREATE TABLE t" in schema_files.load(f"{bucket}/schema.sql").sql
    with pytest.raises(schema_files.SchemaFileError, match=f"{bucket}/missing.sql: cannot read it"):
        schema_files.load(f"{bucket}/missing.sql")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing here")
    with pytest.raises(schema_files.SchemaFileError, match="no \\*.sql or TiCDC schema_\\*.json files below it"):
        schema_files.load(str(tmp_path / "empty"))
