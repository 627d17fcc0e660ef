"""The scheduled DAG's plan for a data interval: the commit ts window, the objects window with
lateness, one output per interval, and the chain to the previous interval."""

from __future__ import annotations

import datetime as dt

import pytest

from cdc_replay_airflow.tasks import Refused, plan_interval

UTC = dt.timezone.utc
CONFIG = {"source": "s3://archive/tidb/shop", "protocol": "canal-json",
          "protocol_options": {"enable-tidb-extension": "true"}, "output": "s3://lake/shop", "emit": "topics"}
START = dt.datetime(2026, 1, 1, tzinfo=UTC)


def h(hour: int) -> dt.datetime:
    return START + dt.timedelta(hours=hour)


def tso(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000) << 18


def test_first_interval():
    plan = plan_interval(CONFIG, h(0), h(1), first_start=START)
    request = plan["request"]
    assert request["output"] == "s3://lake/shop/20260101T000000Z"
    assert request["since"] == tso(h(0)) - 1 and request["until"] == tso(h(1)) - 1
    assert plan["objects_window"] == [h(0).isoformat(), h(2).isoformat()]  # lateness: one interval
    assert plan["output_base"] == "s3://lake/shop" and plan["require_complete"]
    assert plan["schema_from"] is None and plan["chain_missing"] is None


def test_later_intervals_start_from_the_previous_output():
    seen = []

    def exists(uri):
        seen.append(uri)
        return True

    plan = plan_interval({**CONFIG, "lateness_minutes": 15}, h(1), h(2), first_start=START,
                         previous=(h(0), h(1)), exists=exists)
    assert seen == ["s3://lake/shop/20260101T000000Z/_manifest.json"]
    assert plan["schema_from"] == "s3://lake/shop/20260101T000000Z"
    assert plan["objects_window"] == [h(1).isoformat(), (h(2) + dt.timedelta(minutes=15)).isoformat()]
    snapshot = plan_interval({**CONFIG, "emit": "snapshot"}, h(1), h(2), first_start=START,
                             previous=(h(0), h(1)), exists=exists)["request"]
    assert snapshot["base_snapshot"] == "s3://lake/shop/20260101T000000Z" and snapshot["since"] == tso(h(1)) - 1
    first_snapshot = plan_interval({**CONFIG, "emit": "snapshot"}, h(0), h(1), first_start=START)["request"]
    assert first_snapshot["since"] is None and first_snapshot["base_snapshot"] is None


def test_a_base_export_starts_the_first_snapshot_interval_only():
    config = {**CONFIG, "emit": "snapshot", "base_export": "s3://exports/shop-dumpling"}
    first = plan_interval(config, h(0), h(1), first_start=START)["request"]
    assert first["base_export"] == "s3://exports/shop-dumpling" and first["since"] is None
    later = plan_interval(config, h(1), h(2), first_start=START, previous=(h(0), h(1)), exists=lambda uri: True)
    assert later["request"]["base_export"] is None
    assert later["request"]["base_snapshot"] == "s3://lake/shop/20260101T000000Z"


EXPORT = "s3://exports/shop-dumpling"


@pytest.mark.parametrize("change", [{"emit": "history"}, {"emit": "topics"},
                                    {"emit": "history", "target_format": "delta"},
                                    {"emit": "history", "target_format": "iceberg"}])
def test_a_base_export_starts_the_first_history_or_topics_interval(change):
    """The first interval holds the export's rows (an INSERT version or message each) and every
    archived change after its position (no --since: the export is the start); later intervals
    hold their window's changes on the table schemas the previous output records (which include
    the export's), and without that chain they are refused, even with a `schema` in the Variable
    (it lacks the export's tables)."""
    config = {**CONFIG, **change, "base_export": EXPORT}
    first = plan_interval(config, h(0), h(1), first_start=START)["request"]
    assert first["base_export"] == EXPORT and first["since"] is None and first["until"] == tso(h(1)) - 1
    later = plan_interval(config, h(1), h(2), first_start=START, previous=(h(0), h(1)), exists=lambda uri: True)
    assert later["request"]["base_export"] is None and later["request"]["since"] == tso(h(1)) - 1
    assert later["schema_from"] == "s3://lake/shop/20260101T000000Z"
    broken = plan_interval({**config, "schema": "s3://lake/schema.sql"}, h(1), h(2), first_start=START)
    assert "is missing: replay the intervals in order" in broken["chain_missing"]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_base_export_writes_the_lake_tables_in_the_first_interval_then_merges(fmt):
    """Delta/Iceberg snapshot tables: the first interval writes them in full from the export
    (no --since); later ones merge into them (--since last), and are refused while the tables
    are not there (a --since last over no tables would replay in full without the export)."""
    config = {**CONFIG, "emit": "snapshot", "target_format": fmt, "base_export": EXPORT}
    first = plan_interval(config, h(0), h(1), first_start=START)
    assert first["request"]["base_export"] == EXPORT and first["request"]["since"] is None
    assert first["request"]["output"] == "s3://lake/shop" and first["lake_window"]
    seen = []
    later = plan_interval(config, h(1), h(2), first_start=START, previous=(h(0), h(1)),
                          exists=lambda uri: seen.append(uri) or True)
    assert later["request"]["base_export"] is None and later["request"]["since"] == "last"
    assert later["chain_missing"] is None and seen == ["s3://lake/shop/_manifest.json"]
    missing = plan_interval(config, h(1), h(2), first_start=START, previous=(h(0), h(1)), exists=lambda uri: False)
    assert "the tables at s3://lake/shop start from base_export" in missing["chain_missing"]
    # without an export an interval over no tables replays its window in full, as before
    assert plan_interval({**config, "base_export": None}, h(1), h(2), first_start=START,
                         exists=lambda uri: False)["chain_missing"] is None


def test_a_base_export_with_a_kafka_source_is_refused():
    config = {**CONFIG, "source": "kafka://shop", "emit": "topics", "base_export": EXPORT}
    with pytest.raises(Refused, match="base_export: .*kafka://"):
        plan_interval(config, h(0), h(1), first_start=START)


def test_a_broken_chain_is_reported():
    plan = plan_interval(CONFIG, h(3), h(4), first_start=START, previous=(h(0), h(1)), exists=lambda uri: True)
    assert "the output of the interval ending at 2026-01-01T03:00:00+00:00" in plan["chain_missing"]
    # with starting schemas given, topics need no chain
    assert plan_interval({**CONFIG, "schema": "s3://lake/schema.sql"}, h(3), h(4), first_start=START)["chain_missing"] \
        is None


@pytest.mark.parametrize("change, words", [
    ({"since": 5}, "since: is set from the data interval"),
    ({"lateness_minutes": -1}, "lateness_minutes: -1 is not a whole number"),
    ({"protocol": "x"}, "Variable cdc_replay_scheduled: protocol: unknown protocol 'x'; valid protocols"),
])
def test_bad_configuration_is_refused(change, words):
    with pytest.raises(Refused, match="refused before any work started") as e:
        plan_interval({**CONFIG, **change}, h(0), h(1), first_start=START)
    assert words in str(e.value)
    with pytest.raises(Refused, match="Variable cdc_replay_scheduled is not set"):
        plan_interval(None, h(0), h(1))


def test_lakehouse_snapshots_merge_every_interval_into_one_set_of_tables():
    """Delta/Iceberg snapshots: the output is the tables (not one prefix per interval), and each
    interval is merged from the cut the tables hold (`--since last`), chained by the tables
    themselves; histories stay one output per interval."""
    config = {**CONFIG, "emit": "snapshot", "target_format": "delta"}
    for start, previous in ((h(0), None), (h(5), (h(3), h(4)))):
        plan = plan_interval(config, start, start + dt.timedelta(hours=1), first_start=START, previous=previous,
                             exists=lambda uri: False)
        request = plan["request"]
        assert request["output"] == "s3://lake/shop" and request["since"] == "last"
        assert request["until"] == tso(start + dt.timedelta(hours=1)) - 1 and request["base_snapshot"] is None
        assert plan["lake_window"] and plan["chain_missing"] is None
    history = plan_interval({**config, "emit": "history"}, h(1), h(2), first_start=START)
    assert history["request"]["output"] == "s3://lake/shop/20260101T010000Z" and not history["lake_window"]
