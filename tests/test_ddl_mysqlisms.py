"""DDL as real binlogs carry it (issue 12, point 6).

Statements written the way MySQL's SHOW CREATE TABLE, mysqldump, Navicat/DBeaver and TiDB
write them (display widths, `int(0)`, CHARACTER SET / COLLATE, COMMENT, backquoted names with
dots, IF NOT EXISTS, executable comments, partitioning, table options), applied to the schema
history; the expected schemas are written out by hand. The end-to-end test replays a Canal flat
message archive (JSON lines written here by hand, shaped as Canal writes them) whose DDL
messages say `"database":"inventory"` while their SQL names `xj_`: the DDL lands in `xj_`.
"""

from __future__ import annotations

import gzip
import logging

import orjson
import pytest

from cdc_codecs import KafkaRecord
from cdc_codecs.archive import format_record, object_name
from spark_apps import storage
from spark_apps.ddl import DDLError, SchemaHistory
from spark_apps.demo import read_snapshot
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

logging.getLogger("sqlglot").setLevel(logging.ERROR)

USER02 = ("CREATE TABLE `xj_`.`user02` (\n"
          "  `id` int(0) NOT NULL AUTO_INCREMENT COMMENT 'primary key',\n"
          "  `name` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL DEFAULT NULL COMMENT 'user''s name',\n"
          "  `flag` bit(1) NOT NULL DEFAULT b'1',\n"
          "  `price` decimal(10, 2) NOT NULL DEFAULT 0.00,\n"
          "  `kind` enum('A','b') CHARACTER SET utf8mb4 NULL DEFAULT 'A',\n"
          "  PRIMARY KEY (`id`) USING BTREE,\n"
          "  INDEX `idx_name`(`name`) USING BTREE COMMENT 'by name'\n"
          ") ENGINE = InnoDB AUTO_INCREMENT = 3 CHARACTER SET = utf8mb4 COLLATE = utf8mb4_general_ci "
          "COMMENT = 'users' ROW_FORMAT = Dynamic")


def columns(history: SchemaHistory, db: str, table: str) -> list[tuple]:
    schema = history.tables[(db, table)]
    return [(c.name, c.mysql_type, c.default) for c in schema.columns]


def test_a_navicat_create_table_lands_in_the_database_its_sql_names():
    h = SchemaHistory()
    h.apply(USER02, [1], "inventory")  # the message's database is the session's, not the table's
    assert set(h.tables) == {("xj_", "user02")}
    assert columns(h, "xj_", "user02") == [
        ("id", "int(0)", b"0"), ("name", "varchar(255)", None), ("flag", "bit(1)", b"1"),
        ("price", "decimal(10,2)", b"0.00"), ("kind", "enum('A','b')", b"1")]
    assert h.tables[("xj_", "user02")].key_columns == ["id"]


@pytest.mark.parametrize("statement, want", [
    # mysqldump: executable comments run, the SET inside changes nothing
    ("/*!40101 SET character_set_client = utf8mb4 */", "ignored set"),
    ("ALTER TABLE `xj_`.`user02` COMMENT = 'renamed users', ENGINE = InnoDB", "ignored alter"),
    ("ALTER TABLE `xj_`.`user02` CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
     "ignored alter (table options)"),
    ("ALTER TABLE `xj_`.`user02` DEFAULT CHARSET = utf8mb4, ALGORITHM = INPLACE, LOCK = NONE", "ignored alter"),
    ("ALTER TABLE `xj_`.`user02` PARTITION BY HASH (`id`) PARTITIONS 4", "ignored alter (table options)"),
    ("ALTER TABLE `xj_`.`user02` ADD INDEX `idx_kind` (`kind`), ALGORITHM=INPLACE, LOCK=NONE", "ignored alter"),
])
def test_statements_that_change_no_column_are_recorded_not_quarantined(statement, want):
    h = SchemaHistory()
    h.apply(USER02, [1], "inventory")
    before = columns(h, "xj_", "user02")
    assert h.apply(statement, [2], "inventory") == want
    assert columns(h, "xj_", "user02") == before


def test_column_changes_with_mysql_isms():
    h = SchemaHistory()
    h.apply(USER02, [1], "inventory")
    h.apply("ALTER TABLE `xj_`.`user02` ADD COLUMN `age` int(11) NOT NULL DEFAULT '18' COMMENT 'age' AFTER `name`",
            [2], "inventory")
    # a parenthesised column list, and table options in the same statement
    h.apply("ALTER TABLE `xj_`.`user02` ADD COLUMN (`score` float(7,4) UNSIGNED DEFAULT NULL, "
            "`tag` varbinary(4) DEFAULT 0x0A0B), CONVERT TO CHARACTER SET utf8mb4", [3], "inventory")
    h.apply("ALTER TABLE `xj_`.`user02` CHANGE COLUMN `name` `full.name` varchar(300) CHARACTER SET utf8mb4 "
            "COLLATE utf8mb4_bin NOT NULL DEFAULT '' COMMENT 'a name with a dot'", [4], "inventory")
    h.apply("ALTER TABLE `xj_`.`user02` DROP `flag`", [5], "inventory")
    assert columns(h, "xj_", "user02") == [
        ("id", "int(0)", b"0"), ("full.name", "varchar(300)", None), ("age", "int(11)", b"18"),
        ("price", "decimal(10,2)", b"0.00"), ("kind", "enum('A','b')", b"1"), ("score", "float(7,4)", None),
        ("tag", "varbinary(4)", b"\x0a\x0b")]


def test_create_table_forms_of_real_binlogs():
    h = SchemaHistory()
    # TiDB's SHOW CREATE TABLE: clustered-index and shard comments, partitions
    h.apply("CREATE TABLE IF NOT EXISTS `shop.eu`.`orders.2024` (\n"
            "  `id` bigint(20) unsigned NOT NULL /*T![auto_rand] AUTO_RANDOM(5) */,\n"
            "  `at` datetime(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),\n"
            "  `amount` double(16,4) DEFAULT NULL,\n"
            "  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */\n"
            ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin /*T! SHARD_ROW_ID_BITS=4 */\n"
            "PARTITION BY RANGE (`id`)\n"
            "(PARTITION `p0` VALUES LESS THAN (1000),\n"
            " PARTITION `p1` VALUES LESS THAN (MAXVALUE))", [1], None)
    assert columns(h, "shop.eu", "orders.2024") == [
        ("id", "bigint(20) unsigned", b"0"), ("at", "datetime(3)", None), ("amount", "double(16,4)", None)]
    # IF NOT EXISTS of an existing table changes nothing
    assert h.apply("CREATE TABLE IF NOT EXISTS `shop.eu`.`orders.2024` (`x` int)", [2], None) == "create table (exists)"
    assert [c[0] for c in columns(h, "shop.eu", "orders.2024")] == ["id", "at", "amount"]


def test_a_column_added_with_current_timestamp_fsp_gets_the_alter_time_at_that_precision():
    h = SchemaHistory()
    h.apply(USER02, [1], "inventory")
    ts = (1_700_000_000_123 << 18) + 5  # 2023-11-14 22:13:20.123 UTC
    h.apply("ALTER TABLE `xj_`.`user02` ADD COLUMN `seen` datetime(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)",
            [ts], "inventory")
    assert columns(h, "xj_", "user02")[-1] == ("seen", "datetime(3)", b"2023-11-14 22:13:20.123")


@pytest.mark.parametrize("statement, want", [
    ("CREATE TABLE `xj_`.`user02` (`id` int)", ("xj_", "user02")),
    ("/* DBeaver */ ALTER TABLE `xj_`.`user02` ADD COLUMN `a` int, CONVERT TO CHARACTER SET utf8mb4", ("xj_", "user02")),
    ("TRUNCATE TABLE `db.x`.`t.y`", ("db.x", "t.y")),
    ("DROP TABLE IF EXISTS `xj_`.`user02`", ("xj_", "user02")),
    ("CREATE TABLE `user02` (`id` int)", None),  # no database named: the message's applies
    ("DROP TABLE `a`.`b`, `c`.`d`", None),
    ("RENAME TABLE `a`.`b` TO `c`.`d`", None),
    ("ALTER TABLE `a`.`b` RENAME TO `c`.`d`", None),
    ("CREATE DATABASE `xj_`", None),
])
def test_the_table_a_statement_names(statement, want):
    from spark_apps.ddl import statement_table

    assert statement_table(statement) == want


def test_what_still_cannot_be_read_is_a_ddl_error():
    with pytest.raises(DDLError):
        SchemaHistory().apply("ALTER TABLE `xj_`.`user02` FROBNICATE everything", [1], "inventory")


# ------------------------------------------------------------------------------ end to end

ES = 1_700_000_000_000


def canal_ddl(message_id: int, sql: str, table: str, kind: str) -> dict:
    return {"data": None, "database": "inventory", "es": ES + message_id * 1000, "id": message_id, "isDdl": True,
            "mysqlType": None, "old": None, "pkNames": None, "sql": sql, "sqlType": None, "table": table,
            "ts": ES + message_id * 1000 + 7, "type": kind}


def canal_insert(message_id: int, rows: list[dict], with_age: bool) -> dict:
    mysql_type = {"id": "int(0)", "name": "varchar(255)", "flag": "bit(1)", "price": "decimal(10,2)",
                  "kind": "enum('A','b')"}
    sql_type = {"id": 4, "name": 12, "flag": -7, "price": 3, "kind": 4}
    if with_age:
        mysql_type["age"], sql_type["age"] = "int(11)", 4
    return {"data": rows, "database": "xj_", "es": ES + message_id * 1000, "id": message_id, "isDdl": False,
            "mysqlType": mysql_type, "old": None, "pkNames": ["id"], "sql": "", "sqlType": sql_type,
            "table": "user02", "ts": ES + message_id * 1000 + 7, "type": "INSERT"}


@pytest.mark.spark
def test_canal_ddl_applies_to_the_database_its_sql_names(spark, tmp_path):
    messages = [
        canal_ddl(1, USER02, "user02", "CREATE"),
        canal_insert(2, [{"id": "1", "name": "ann", "flag": "1", "price": "9.50", "kind": "1"}], False),
        canal_ddl(3, "ALTER TABLE `xj_`.`user02` ADD COLUMN `age` int(11) NOT NULL DEFAULT '18' COMMENT 'age' "
                     "AFTER `name`, CONVERT TO CHARACTER SET utf8mb4", "user02", "ALTER"),
        canal_insert(4, [{"id": "2", "name": "bob", "age": "40", "flag": "0", "price": "0.00", "kind": "2"}], True),
    ]
    lines = [format_record(KafkaRecord("canal", 0, i, ES + i, None, orjson.dumps(m))) for i, m in enumerate(messages)]
    source = str(tmp_path / "archive")
    storage.write_bytes(storage.join(source, object_name("canal", 0, 0)), gzip.compress(b"\n".join(lines) + b"\n"))
    flavor = "flat-message-flavor=canal"
    argv = ["--source", source, "--protocol", "canal-json", "--protocol-option", flavor, "--target-option", flavor,
            "--output", str(tmp_path / "out"), "--emit", "snapshot", "--tables", "xj_.*"]
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    assert manifest["quarantine"]["records"] == 0, manifest["quarantine"]
    assert [d["applied"] for d in manifest["ddl"]] == ["create table", "add column age"]
    # the DDL counts as xj_.user02's (not inventory's) and --tables xj_.* keeps it
    assert [(t["database"], t["table"], t["applied"], t["filtered"]) for t in manifest["tables"]] == [
        ("xj_", "user02", 4, 0)]
    assert read_snapshot(str(tmp_path / "out"), "canal-json", {"flat-message-flavor": "canal"}) == {
        ("xj_", "user02"): {
            (b"1",): {"id": b"1", "name": b"ann", "age": b"18", "flag": b"1", "price": b"9.50", "kind": b"1"},
            (b"2",): {"id": b"2", "name": b"bob", "age": b"40", "flag": b"0", "price": b"0.00", "kind": b"2"},
        }}


def test_a_parenthesised_add_column_list_alone():
    h = SchemaHistory()
    h.apply(USER02, [1], "inventory")
    assert h.apply("ALTER TABLE `xj_`.`user02` ADD COLUMN (`a` int, `b` varchar(3) DEFAULT 'x')", [2], None) == \
        "add column a, add column b"
    assert columns(h, "xj_", "user02")[-2:] == [("a", "int", None), ("b", "varchar(3)", b"x")]
