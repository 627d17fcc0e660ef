"""Which objects a data interval covers, where its output goes, and when the replay can read
the interval's objects in place: pure functions."""

from __future__ import annotations

import datetime as dt

import pytest

from cdc_replay_airflow.window import (
    ArchiveObject,
    direct_source,
    interval_output,
    is_archive_object,
    path_time,
    select_window,
)

UTC = dt.timezone.utc
SRC = "s3://archive/tidb/shop"


def t(hour, minute=0, day=1):
    return dt.datetime(2026, 1, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize("path, expected", [
    ("dt=2026-01-01/hour=03/shop/0/x.jsonl.gz", t(3)),
    ("shop/0/dt=2026-01-01/hr=07/x.jsonl.gz", t(7)),
    ("year=2026/month=01/day=02/hour=05/x.jsonl", t(5, day=2)),
    ("year=2026/month=01/day=02/hour=05/minute=30/x.jsonl", t(5, 30, day=2)),
    ("date=2026-01-02/x.jsonl", t(0, day=2)),
    ("shop/0/shop+0+00000000000000000000.jsonl.gz", None),
    ("dt=garbage/x.jsonl", None),
    ("hour=99/dt=2026-01-01/x.jsonl", None),
])
def test_time_partitions_in_keys(path, expected):
    assert path_time(path) == expected


def test_archive_object_rule_is_the_codecs_rule():
    from cdc_codecs.archive import is_archive_object as codecs_rule

    for path in ["a/b.jsonl", "a/b.jsonl.gz", "_manifest.json", "a/_quarantine/x.jsonl.gz", "a/.hidden/x.jsonl",
                 "a/b.json", "x.jsonl.gz.tmp", "dt=2026-01-01/b.jsonl"]:
        assert is_archive_object(path) == codecs_rule(path), path


def test_every_object_falls_in_exactly_one_interval():
    lm = t(1, 30)
    objects = [
        ArchiveObject(f"{SRC}/shop/0/dt=2026-01-01/hour=00/a.jsonl.gz", 10),
        ArchiveObject(f"{SRC}/shop/1/dt=2026-01-01/hour=00/b.jsonl.gz", 20),
        ArchiveObject(f"{SRC}/shop/0/dt=2026-01-01/hour=01/c.jsonl.gz", 30),
        ArchiveObject(f"{SRC}/shop/0/d.jsonl.gz", 40, last_modified=lm),  # no partition: LastModified
        ArchiveObject(f"{SRC}/_manifest.json", 5, last_modified=lm),
        ArchiveObject(f"{SRC}/shop/0/e.jsonl.gz", 40, last_modified=None),  # no time at all: never chosen
    ]
    hour0, how0 = select_window(objects, SRC, t(0), t(1))
    hour1, how1 = select_window(objects, SRC, t(1), t(2))
    assert [o.uri[-10:] for o in hour0] == ["a.jsonl.gz", "b.jsonl.gz"]
    assert [o.uri[-10:] for o in hour1] == ["c.jsonl.gz", "d.jsonl.gz"]
    assert how0 == {"path": 2, "last-modified": 0, "outside": 3, "not-archive": 1}
    assert how1 == {"path": 1, "last-modified": 1, "outside": 3, "not-archive": 1}
    assert select_window(objects, SRC, t(2), t(3))[0] == []


def test_direct_source_only_when_one_folder_holds_exactly_the_window():
    hourly = [ArchiveObject(f"{SRC}/dt=2026-01-01/hour={h:02d}/shop/{p}/x{p}.jsonl.gz", 1) for h in (0, 1) for p in (0, 1)]
    chosen, _ = select_window(hourly, SRC, t(0), t(1))
    assert direct_source(chosen, hourly, SRC) == f"{SRC}/dt=2026-01-01/hour=00/shop"
    # partition folders first: the window's objects share no folder of their own -> copies
    by_partition = [ArchiveObject(f"{SRC}/shop/{p}/dt=2026-01-01/hour={h:02d}/x{h}.jsonl.gz", 1)
                    for h in (0, 1) for p in (0, 1)]
    chosen, _ = select_window(by_partition, SRC, t(0), t(1))
    assert len(chosen) == 2 and direct_source(chosen, by_partition, SRC) is None
    # non-archive objects next to the window's do not matter
    extra = hourly + [ArchiveObject(f"{SRC}/dt=2026-01-01/hour=00/_SUCCESS.jsonl", 1)]
    assert direct_source(select_window(extra, SRC, t(0), t(1))[0], extra, SRC) == f"{SRC}/dt=2026-01-01/hour=00/shop"


def test_one_output_per_interval():
    assert interval_output("s3://lake/replay/shop/", t(5)) == "s3://lake/replay/shop/20260101T050000Z"
    assert interval_output("/data/out", dt.datetime(2026, 1, 1, 6, tzinfo=dt.timezone(dt.timedelta(hours=1)))) \
        == "/data/out/20260101T050000Z"
