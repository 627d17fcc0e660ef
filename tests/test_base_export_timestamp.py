"""TIMESTAMP values of a base export against the archive's (issue 30). mysqldump writes them
in UTC under its default --tz-utc (`/*!40103 SET TIME_ZONE='+00:00' */;` in its header,
client/mysqldump.cc) — the zone canal-protobuf decodes TIMESTAMP to (`source-timezone`
converts): they agree and nothing is said. --skip-tz-utc drops that line: the zone is the
server's and unrecorded. Dumpling writes them in its session's time_zone (its DefaultConfig
sets no session variable; --params time_zone=... does) and records none, while TiCDC's
messages carry them in the TiCDC server's --tz as written: the replay says so in one line
naming the tables and columns, and --base-export-time-zone (with the archive's zone: UTC for
canal-protobuf, `--protocol-option tz=ZONE` for TiCDC's protocols) brings the export's values to
the archive's zone (checked against zoneinfo, in a real replay too)."""

from __future__ import annotations

import datetime as dt

import pytest

import zoneinfo

from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdc_codecs import encode_records, get_codec
from cdc_codecs.canal_common import canonical_bytes, time_zone, timestamp_between
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from spark_apps.base_export import Converter, discover, read_sql_rows
from spark_apps.contract import RequestError, check
from spark_apps.options import ReplayArgs, parser
from spark_apps.stages.base import read_export, time_zone_record, timestamp_warning
from spark_apps.stages.context import ReplayError

def args_for(export, *extra, protocol="canal-protobuf", output="/tmp/tz-out", source="/tmp/tz-archive"):
    return ReplayArgs.from_namespace(parser().parse_args(
        ["--source", str(source), "--protocol", protocol, "--output", output, "--emit", "snapshot",
         "--base-export", str(export),
         *extra]))


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
    assert timestamp_warning(export, args_for(tmp_path)) is None
    assert time_zone_record(export, args_for(tmp_path)) == {
        "base_time_zone": "+00:00", "archive_time_zone": "UTC", "base_timestamps_converted": False}
    [(_, _, row)] = read_sql_rows([mysqldump(True)], {("shop", "ev"): export.converters()[("shop", "ev")]}, "shop")
    # canal-protobuf from a Canal JVM in +08:00 (source-timezone=+08:00) decodes the same instant alike
    decoded = canonical_bytes("2026-11-20 18:00:00", "timestamp", time_zone("+08:00"))
    assert decoded == row["at"] == b"2026-11-20 10:00:00"


def test_mysqldump_skip_tz_utc_is_named(tmp_path):
    (tmp_path / "shop.sql").write_bytes(mysqldump(False))
    export = discover(str(tmp_path))
    assert export.time_zone is None
    warning = timestamp_warning(export, args_for(tmp_path))
    assert "--skip-tz-utc" in warning and warning.endswith("shop.ev (at)")
    assert "--base-export-time-zone ZONE" in warning
    # the server's zone stated: converted to canal-protobuf's UTC, no warning
    args = args_for(tmp_path, "--base-export-time-zone", "Asia/Shanghai")
    assert timestamp_warning(read_export(args), args) is None
    assert time_zone_record(export, args)["base_timestamps_converted"]


def test_mysqldump_zone_and_option_must_agree(tmp_path):
    """The dump states UTC (--tz-utc): the same zone in other words is fine, another is refused."""
    (tmp_path / "shop.sql").write_bytes(mysqldump(True))
    for same in ("UTC", "+00:00"):
        assert read_export(args_for(tmp_path, "--base-export-time-zone", same)).time_zone == "+00:00"
    with pytest.raises(ReplayError, match=r"^--base-export-time-zone \+08:00 differs from the zone the dump states "
                                          r"\(SET TIME_ZONE='\+00:00'"):
        read_export(args_for(tmp_path, "--base-export-time-zone", "+08:00"))
    # a zone line no zone database knows (a hand-edited dump) is refused, not guessed
    (tmp_path / "shop.sql").write_bytes(mysqldump(True).replace(b"TIME_ZONE='+00:00'", b"TIME_ZONE='Nowhere/Zone'"))
    with pytest.raises(ReplayError, match=r"SET TIME_ZONE='Nowhere/Zone': unknown time zone"):
        read_export(args_for(tmp_path))


@pytest.mark.parametrize("zone, words", [("SYSTEM", "SYSTEM is the server host's zone"),
                                          ("Mars/Olympus", "unknown time zone 'Mars/Olympus'")])
def test_a_zone_no_file_can_tell_is_refused(tmp_path, zone, words):
    with pytest.raises(RequestError, match=words):
        check(args_for(tmp_path / "export", "--base-export-time-zone", zone, output=str(tmp_path / "out")))
    with pytest.raises(RequestError, match="give it with --base-export"):
        check(ReplayArgs.from_namespace(parser().parse_args(
            ["--source", str(tmp_path), "--protocol", "canal-json", "--output", str(tmp_path / "out"), "--emit", "snapshot",
             "--base-export-time-zone", "+08:00"])))
    with pytest.raises(Exception, match="SYSTEM is the producer host's zone"):
        get_codec("canal-json", {"tz": "system"})


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
    warning = timestamp_warning(export, args_for(tmp_path, protocol="canal-json"))
    assert "--params time_zone" in warning and "--tz" in warning and warning.endswith("shop.ev (at)")
    assert "--base-export-time-zone ZONE and --protocol-option tz=ZONE" in warning
    # one zone known is not enough: the warning names the other's option
    args = args_for(tmp_path, "--base-export-time-zone", params or "UTC", protocol="canal-json")
    assert "(--protocol-option tz=ZONE states it" in timestamp_warning(export, args)
    args = args_for(tmp_path, "--base-export-time-zone", params or "UTC", "--protocol-option", "tz=UTC",
                    protocol="canal-json")
    assert timestamp_warning(export, args) is None
    assert time_zone_record(export, args)["base_timestamps_converted"] == (params is not None)
    # the value is kept as written: as TiCDC's messages would carry it from a server whose --tz is that zone
    [(_, _, row)] = read_sql_rows([data], {("shop", "ev"): Converter([("id", "int"), ("at", "timestamp"),
                                                                     ("d", "datetime")])}, "shop")
    assert row["at"] == local.strftime("%Y-%m-%d %H:%M:%S").encode()


# ----------------------------------------------------------------------------- the conversion

ZONES = ["UTC", "+08:00", "-03:30", "Asia/Shanghai", "America/New_York", "Europe/London", "Australia/Lord_Howe",
         "America/Sao_Paulo"]


def render(moment: dt.datetime, zone: str, fraction: str) -> str:
    return moment.astimezone(time_zone(zone)).strftime("%Y-%m-%d %H:%M:%S") + fraction


@settings(max_examples=400, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2038, 1, 18)),
       st.sampled_from(ZONES), st.sampled_from(ZONES), st.sampled_from(["", ".5", ".000", ".123456", ".010"]))
# the second 01:30 of New York's fall-back night (read back as the first), the first, Lord Howe's half-hour fold
@example(dt.datetime(2026, 11, 1, 6, 30), "America/New_York", "UTC", ".25")
@example(dt.datetime(2026, 11, 1, 5, 30), "America/New_York", "+08:00", "")
@example(dt.datetime(2026, 4, 4, 15, 15), "Australia/Lord_Howe", "Asia/Shanghai", ".000001")
def test_conversion_is_the_instant_in_the_other_zone(moment, source, target, fraction):
    """A TIMESTAMP's text in `source` becomes the same instant's text in `target`, its fraction
    digit for digit. A local time `source` shows twice (a DST fold) stands for two instants:
    the earlier one is taken."""
    instant = moment.replace(microsecond=0, tzinfo=dt.timezone.utc)
    text = render(instant, source, fraction)
    local = dt.datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S")
    zone = zoneinfo.ZoneInfo(source) if "/" in source else time_zone(source)
    earlier = min(local.replace(tzinfo=zone, fold=0), local.replace(tzinfo=zone, fold=1),
                  key=lambda d: d.astimezone(dt.timezone.utc))
    expected = earlier if earlier.utcoffset() != instant.astimezone(zone).utcoffset() else instant
    assert timestamp_between(text, time_zone(source), time_zone(target)) == render(expected, target, fraction)
    if moment == dt.datetime(2026, 11, 1, 6, 30):
        assert expected.astimezone(dt.timezone.utc).hour == 5  # the fold was taken as the earlier instant


def test_the_zero_date_and_same_zone_are_kept():
    assert timestamp_between("0000-00-00 00:00:00", time_zone("+08:00"), time_zone("UTC")) == "0000-00-00 00:00:00"
    assert timestamp_between("2026-03-08 02:30:00.5", time_zone("+08:00"), time_zone("+08:00")) == \
        "2026-03-08 02:30:00.5"
    # New York's fall-back hour: 05:30 UTC is the second 01:30 there, rendered once
    assert timestamp_between("2026-11-01 13:30:00.125", time_zone("+08:00"), time_zone("America/New_York")) == \
        "2026-11-01 01:30:00.125"


# ----------------------------------------------------------------------------- in a replay

TSO = 453817264815718401
EV = [("id", "int(11)"), ("at", "timestamp(3)"), ("d", "datetime(3)")]
# instants of the export's rows (UTC), around New York's DST changes; None: NULL
INSTANTS = {1: dt.datetime(2026, 11, 1, 5, 30, 0, 125000), 2: dt.datetime(2026, 3, 8, 6, 59, 59, 999000),
            3: dt.datetime(2026, 3, 8, 7, 0, 0), 4: None, 6: dt.datetime(2026, 11, 20, 10, 0)}


def dumpling_export(path, zone: str):
    """A Dumpling export from TiDB whose session time_zone was `zone` (--params time_zone=...):
    TIMESTAMP(3) text in that zone, DATETIME as is; row 5 holds the zero date."""
    path.mkdir()
    (path / "metadata").write_text(f"Started dump at: 2026-11-20 10:15:02\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
                                   f"\tPos: {TSO}\n\tGTID:\n\nFinished dump at: 2026-11-20 10:15:04\n")
    (path / "shop-schema-create.sql").write_bytes(b"/*!40101 SET NAMES binary*/;\nCREATE DATABASE `shop`;\n")
    (path / "shop.ev-schema.sql").write_bytes(
        b"/*!40101 SET NAMES binary*/;\nCREATE TABLE `ev` (\n  `id` int(11) NOT NULL,\n  `at` timestamp(3) NULL "
        b"DEFAULT NULL,\n  `d` datetime(3) DEFAULT NULL,\n  PRIMARY KEY (`id`)\n);\n")
    values = []
    for key, moment in INSTANTS.items():
        at = "NULL" if moment is None else f"'{render(moment.replace(tzinfo=dt.timezone.utc), zone, '')}" \
                                           f".{moment.microsecond // 1000:03d}'"
        values.append(f"({key},{at},'2026-11-01 01:30:00.250')")
    values.append("(5,'0000-00-00 00:00:00.000','2026-11-01 01:30:00.250')")
    (path / "shop.ev.000000000.sql").write_text("/*!40101 SET NAMES binary*/;\nINSERT INTO `ev` VALUES\n"
                                                + ",\n".join(values) + ";\n")


def ev_image(values: dict):
    return [{"name": n, "mysql_type": t, "flags": int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) if n == "id"
             else 0, "value": values.get(n), "label": None} for n, t in EV]


@pytest.mark.spark
def test_dumpling_values_are_brought_to_the_ticdc_zone(spark, tmp_path):
    """Dumpling in +08:00, TiCDC with --tz America/New_York: the snapshot's TIMESTAMPs of rows
    only in the export read as TiCDC would have written them (zoneinfo), DATETIME, NULL and the
    zero date as written; the row the archive rewrote holds the archive's text."""
    from spark_apps.demo import read_snapshot
    from spark_apps.generate import write_archive
    from spark_apps.manifest import summary
    from spark_apps.replay import run

    options = {"enable-tidb-extension": "true", "tz": "America/New_York"}
    dumpling_export(tmp_path / "export", "+08:00")
    ny = dt.datetime(2026, 11, 21, 9, 0, 0, 500000)  # row 6 rewritten after the export, New York text
    events = [new_event(Kind.ROW, op=Op.UPDATE, database="shop", table="ev", key_columns=["id"], commit_ts=(
                  (TSO >> 18) + 1) << 18,
                        before=ev_image({"id": b"6", "at": b"2026-11-20 05:00:00.000"}),
                        after=ev_image({"id": b"6", "at": ny.strftime("%Y-%m-%d %H:%M:%S.500").encode()})),
              new_event(Kind.WATERMARK, watermark_ts=((TSO >> 18) + 10) << 18)]
    write_archive(encode_records(get_codec("canal-json", options), events, topic="cdc", partitions=1),
                  str(tmp_path / "archive"), records_per_object=3)
    argv = ["--base-export-time-zone", "+08:00"]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    manifest = run(args_for(tmp_path / "export", *argv, protocol="canal-json", output=str(tmp_path / "out"),
                             source=tmp_path / "archive"),
                   spark=spark)
    snapshot = read_snapshot(str(tmp_path / "out"), "canal-json", options)[("shop", "ev")]
    new_york = zoneinfo.ZoneInfo("America/New_York")
    expected = {key: None if m is None else (m.replace(tzinfo=dt.timezone.utc).astimezone(new_york)
                                             .strftime("%Y-%m-%d %H:%M:%S.%f")[:23].encode())
                for key, m in INSTANTS.items() if key != 6}
    expected |= {5: b"0000-00-00 00:00:00.000", 6: b"2026-11-21 09:00:00.500"}
    assert {int(k[0]): row["at"] for k, row in snapshot.items()} == expected
    assert expected[1] == b"2026-11-01 01:30:00.125" and expected[3] == b"2026-03-08 03:00:00.000"
    assert {row["d"] for k, row in snapshot.items() if k != (b"6",)} == {b"2026-11-01 01:30:00.250"}
    assert manifest["window"]["base_time_zone"] == "+08:00"
    assert manifest["window"]["archive_time_zone"] == "America/New_York"
    assert manifest["window"]["base_timestamps_converted"] is True
    assert not [w for w in manifest["warnings"] if "TIMESTAMP" in w]
    assert "base TIMESTAMPs  converted from +08:00 to the archive's America/New_York" in summary(manifest)
