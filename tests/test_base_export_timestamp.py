"""TIMESTAMP values of a base export against the archive's (issue 30). mysqldump writes them
in UTC under its default --tz-utc (`/*!40103 SET TIME_ZONE='+00:00' */;` in its header,
client/mysqldump.cc) — the zone canal-protobuf decodes TIMESTAMP to (`source-timezone`
converts): they agree and nothing is said. --skip-tz-utc drops that line: the zone is the
server's and unrecorded. Dumpling writes them in its session's time_zone (its DefaultConfig
sets no session variable; --params time_zone=... does) and records none, while TiCDC's
messages carry them in the TiCDC server's --tz as written: the replay says so in one line
naming the tables and columns. No Spark."""

from __future__ import annotations

import datetime as dt

import pytest

from cdc_codecs.canal_common import canonical_bytes, time_zone
from spark_apps.base_export import Converter, discover, read_sql_rows
from spark_apps.stages.base import timestamp_warning

TABLE = (b"CREATE TABLE `ev` (\n  `id` int(11) NOT NULL,\n  `at` timestamp NULL DEFAULT NULL,\n"
         b"  `d` datetime DEFAULT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;\n")


def mysqldump(tz_utc: bool) -> bytes:
    """A `mysqldump --single-transaction --source-data=2 shop` of MySQL 8.0 as its header
    writes it; the row holds 2026-11-20 10:00:00 UTC, written in UTC (--tz-utc) or, with
    --skip-tz-utc, in a server zone of +08:00."""
    zone = b"/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */;\n/*!40103 SET TIME_ZONE='+00:00' */;\n" if tz_utc else b""
    at = b"2026-11-20 10:00:00" if tz_utc else b"2026-11-20 18:00:00"
    return (b"-- MySQL dump 10.13  Distrib 8.0.36, for Linux (x86_64)\n--\n-- Host: localhost    Database: shop\n"
            b"-- ------------------------------------------------------\n-- Server version\t8.0.36\n\n"
            b"/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;\n/*!50503 SET NAMES utf8mb4 */;\n"
            + zone +
            b"/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;\n\n"
            b"--\n-- Position to start replication or point-in-time recovery from\n--\n\n"
            b"-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000003', SOURCE_LOG_POS=4711;\n\n"
            b"DROP TABLE IF EXISTS `ev`;\n" + TABLE +
            b"LOCK TABLES `ev` WRITE;\nINSERT INTO `ev` VALUES (1,'" + at + b"','2026-11-20 10:00:00');\n"
            b"UNLOCK TABLES;\n" + (b"/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;\n" if tz_utc else b"")
            + b"\n-- Dump completed on 2026-11-20 10:15:04\n")


def test_mysqldump_tz_utc_agrees_with_canal_protobuf(tmp_path):
    (tmp_path / "shop.sql").write_bytes(mysqldump(True))
    export = discover(str(tmp_path))
    assert export.time_zone == "+00:00"
    assert timestamp_warning(export) is None
    [(_, _, row)] = read_sql_rows([mysqldump(True)], {("shop", "ev"): export.converters()[("shop", "ev")]}, "shop")
    # canal-protobuf from a Canal JVM in +08:00 (source-timezone=+08:00) decodes the same instant alike
    decoded = canonical_bytes("2026-11-20 18:00:00", "timestamp", time_zone("+08:00"))
    assert decoded == row["at"] == b"2026-11-20 10:00:00"


def test_mysqldump_skip_tz_utc_is_named(tmp_path):
    (tmp_path / "shop.sql").write_bytes(mysqldump(False))
    export = discover(str(tmp_path))
    assert export.time_zone is None
    warning = timestamp_warning(export)
    assert "--skip-tz-utc" in warning and warning.endswith("shop.ev (at)")


@pytest.mark.parametrize("params", [None, "+08:00"])
def test_dumpling_timestamps_are_named(tmp_path, params):
    """Dumpling's data file holds no zone whatever --params said; the line names the columns."""
    (tmp_path / "metadata").write_text("Started dump at: 2026-11-20 10:15:02\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
                                       "\tPos: 453817264815718401\n\tGTID:\n\nFinished dump at: 2026-11-20 10:15:04\n")
    (tmp_path / "shop-schema-create.sql").write_bytes(b"/*!40101 SET NAMES binary*/;\nCREATE DATABASE `shop`;\n")
    (tmp_path / "shop.ev-schema.sql").write_bytes(b"/*!40101 SET NAMES binary*/;\n" + TABLE)
    local = dt.datetime(2026, 11, 20, 10, tzinfo=dt.timezone.utc).astimezone(time_zone(params or "UTC"))
    data = (b"/*!40101 SET NAMES binary*/;\nINSERT INTO `ev` VALUES\n(1,'"
            + local.strftime("%Y-%m-%d %H:%M:%S").encode() + b"','2026-11-20 10:00:00');\n")
    (tmp_path / "shop.ev.000000000.sql").write_bytes(data)
    export = discover(str(tmp_path))
    assert export.time_zone is None
    warning = timestamp_warning(export)
    assert "--params time_zone" in warning and "--tz" in warning and warning.endswith("shop.ev (at)")
    # the value is kept as written: as TiCDC's messages would carry it from a server whose --tz is that zone
    [(_, _, row)] = read_sql_rows([data], {("shop", "ev"): Converter([("id", "int"), ("at", "timestamp"),
                                                                     ("d", "datetime")])}, "shop")
    assert row["at"] == local.strftime("%Y-%m-%d %H:%M:%S").encode()
