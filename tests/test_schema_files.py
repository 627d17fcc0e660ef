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


# Every column type TiDB can put in a storage-sink schema file, as TableCol.FromTiColumnInfo
# writes it (tiflow/ticdc pkg/sink/cloudstorage/table_definition.go; types.TypeToStr for the
# names; TiDB flags BIT, YEAR and ZEROFILL columns UNSIGNED), and the MySQL type it reads as.
EVERY_TYPE = [
    # (TableCol, MySQL type text, the DDL history's type text)
    (dict(name="id", column_type="INT", precision=11, pk=True), "int", "int"),
    (dict(name="ti", column_type="TINYINT", precision=4, default="0"), "tinyint", "tinyint"),
    (dict(name="si", column_type="SMALLINT UNSIGNED", precision=5), "smallint unsigned", "smallint unsigned"),
    # MEDIUMINT ZEROFILL: TiDB adds the unsigned flag; the sink writes no ZEROFILL
    (dict(name="mi", column_type="MEDIUMINT UNSIGNED", precision=8), "mediumint unsigned", "mediumint unsigned"),
    (dict(name="bi", column_type="BIGINT UNSIGNED", precision=20, not_null=True), "bigint unsigned",
     "bigint unsigned"),
    (dict(name="b1", column_type="BIT UNSIGNED", precision=1), "bit(1)", "bit(1)"),
    (dict(name="b5", column_type="BIT UNSIGNED", precision=5, default="\x05"), "bit(5)", "bit(5)"),
    (dict(name="y", column_type="YEAR UNSIGNED", precision=4, default="2024"), "year", "year"),
    (dict(name="f", column_type="FLOAT", precision=12), "float", "float"),
    (dict(name="f73", column_type="FLOAT", precision=7, scale=3), "float(7,3)", "float(7,3)"),
    (dict(name="fu", column_type="FLOAT UNSIGNED", precision=12), "float", "float"),
    (dict(name="d", column_type="DOUBLE", precision=22), "double", "double"),
    (dict(name="d123", column_type="DOUBLE UNSIGNED", precision=12, scale=3), "double(12,3) unsigned",
     "double(12,3) unsigned"),
    (dict(name="amount", column_type="DECIMAL", precision=12, scale=2, default="0.00"), "decimal(12,2)",
     "decimal(12,2)"),
    (dict(name="whole", column_type="DECIMAL UNSIGNED", precision=10, scale=0), "decimal(10,0) unsigned",
     "decimal(10,0) unsigned"),
    (dict(name="day", column_type="DATE", default="2026-01-01"), "date", "date"),
    (dict(name="at", column_type="DATETIME", scale=3, default="CURRENT_TIMESTAMP(3)"), "datetime(3)",
     "datetime(3)"),
    (dict(name="ts", column_type="TIMESTAMP", default="CURRENT_TIMESTAMP", not_null=True), "timestamp",
     "timestamp"),
    (dict(name="dur", column_type="TIME", scale=5), "time(5)", "time(5)"),
    (dict(name="c", column_type="CHAR", precision=4, default="ab'c"), "char(4)", "char(4)"),
    (dict(name="c0", column_type="CHAR", precision=0), "char(0)", "char(0)"),
    (dict(name="vc", column_type="VARCHAR", precision=64, default="x\\y"), "varchar(64)", "varchar(64)"),
    (dict(name="vs", column_type="VAR_STRING", precision=64), "varchar(64)", "varchar(64)"),
    (dict(name="bin", column_type="BINARY", precision=8), "binary(8)", "binary(8)"),
    (dict(name="vb", column_type="VARBINARY", precision=16), "varbinary(16)", "varbinary(16)"),
    (dict(name="tt", column_type="TINYTEXT", precision=255), "tinytext", "tinytext"),
    (dict(name="tx", column_type="TEXT", precision=65535), "text", "text"),
    (dict(name="mt", column_type="MEDIUMTEXT", precision=16777215), "mediumtext", "mediumtext"),
    (dict(name="lt", column_type="LONGTEXT", precision=4294967295), "longtext", "longtext"),
    (dict(name="tb", column_type="TINYBLOB", precision=255), "tinyblob", "tinyblob"),
    (dict(name="bl", column_type="BLOB", precision=65535), "blob", "blob"),
    (dict(name="mb", column_type="MEDIUMBLOB", precision=16777215), "mediumblob", "mediumblob"),
    (dict(name="lb", column_type="LONGBLOB", precision=4294967295), "longblob", "longblob"),
    (dict(name="e", column_type="ENUM", default="a"), "enum", "enum"),
    (dict(name="s", column_type="SET"), "set", "set"),
    (dict(name="j", column_type="JSON"), "json", "json"),
    (dict(name="g", column_type="GEOMETRY"), "geometry", "geometry"),
    (dict(name="v", column_type="VECTOR"), "vector", "vector"),
]


def test_every_type_tidb_writes_in_a_schema_file_reads_as_its_mysql_type():
    """The schema file as the sink writes it (tests/storage_sink_files.py, after tiflow/ticdc
    pkg/sink/cloudstorage/table_definition.go) with every type TiDB can write: YEAR and BIT
    UNSIGNED (the flag TiDB sets on every such column) read as YEAR and BIT(n), lengths,
    precision/scale and fraction digits kept, display widths and TEXT/BLOB lengths dropped."""
    from .storage_sink_files import schema_path, table_col, table_definition

    columns = [table_col(**c, column_id=i) for i, (c, _, _) in enumerate(EVERY_TYPE, 1)]
    data = table_definition("shop", "every", V1, columns)
    assert data.startswith(b'{\n    "Table": "every",\n    "Schema": "shop",\n    "Version": 1,\n')
    version = schema_files.parse_schema_file(data, schema_path("shop", "every", V1, data))
    assert version.columns == tuple((c["name"], t) for c, t, _ in EVERY_TYPE)
    assert version.keys == ("id",) and version.not_null == {"id", "bi", "ts"}
    assert dict(version.defaults) == {"ti": "'0'", "b5": "5", "y": "'2024'", "amount": "'0.00'",
                                      "day": "'2026-01-01'", "at": "CURRENT_TIMESTAMP(3)",
                                      "ts": "CURRENT_TIMESTAMP", "c": "'ab''c'", "vc": "'x\\\\y'", "e": "'a'"}
    history = SchemaHistory(version.create_statement())
    assert history.columns_at("shop", "every", [V1, 0]) == tuple((c["name"], t) for c, _, t in EVERY_TYPE)
    table = history.tables[("shop", "every")]
    defaults = {c.name: c.default for c in table.columns if c.default is not None}
    assert defaults == {"id": b"0", "bi": b"0", "ti": b"0", "b5": b"5", "y": b"2024", "amount": b"0.00", "day": b"2026-01-01",
                        "c": b"ab'c", "vc": b"x\\y", "e": b"a"}
    assert schema_files.version_conflicts(history, [version]) == []


def test_table_columns_total_must_match_and_older_fields_still_read():
    from .storage_sink_files import table_col

    doc = orjson.loads(table_file(1, [table_col("id", "INT", precision=11, pk=True)]))
    doc["TableColumnsTotal"] = 2
    with pytest.raises(schema_files.SchemaFileError, match="TableColumnsTotal 2 but 1 TableColumns"):
        schema_files.parse_schema_file(orjson.dumps(doc), "x.json")
    # a BIT default whose bytes did not survive the JSON encoding (not UTF-8): left out
    col = table_col("b", "BIT UNSIGNED", precision=16, default="\ufffd\x01")
    assert schema_files.default_clause(col, schema_files.column_type(col)) is None
