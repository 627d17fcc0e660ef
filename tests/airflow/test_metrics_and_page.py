"""The validate task's checks and the monitoring page's content, on manifests built by the
replay app's own manifest.build (the same shape a real run writes)."""

from __future__ import annotations

import re
import time

import pytest

from cdc_replay_airflow.metrics import ValidationError, check_manifest, run_metrics
from cdc_replay_airflow.ui.render import events_over_time_svg, render_page, table_colors
from spark_apps import manifest as manifest_mod
from spark_apps.options import ReplayArgs, parser
from spark_apps.storage import ObjectInfo

MS = 1767225600000  # 2026-01-01T00:00:00Z
REQUEST = {"source": "s3://archive/tidb/shop", "protocol": "canal-json", "max_bad_records": 0}


def tso(ms_after: int) -> int:
    return (MS + ms_after) << 18


def a_manifest(quarantined: int = 0, run_id: str = "dag.run") -> dict:
    args = ReplayArgs.from_namespace(parser().parse_args(
        ["--source", "s3://archive/tidb/shop", "--protocol", "canal-json", "--output", "s3://lake/out",
         "--emit", "topics"]))
    objects = [ObjectInfo("s3://archive/tidb/shop/shop/0/a.jsonl.gz", 1000),
               ObjectInfo("s3://archive/tidb/shop/shop/1/b.jsonl.gz", 500)]
    partitions = [{"topic": "shop", "partition": p, "records": 60, "watermark": tso(9000),
                   "min_commit_ts": tso(10), "max_commit_ts": tso(12000), "positioned": 0} for p in (0, 1)]
    cut = manifest_mod.compute_cut(partitions, None)
    counts = [
        {"status": "applied", "kind": "row", "database": "shop", "table": "orders", "error_stage": None,
         "events": 70, "min_commit_ts": tso(10), "max_commit_ts": tso(8000)},
        {"status": "duplicate", "kind": "row", "database": "shop", "table": "orders", "error_stage": None,
         "events": 5, "min_commit_ts": tso(100), "max_commit_ts": tso(200)},
        {"status": "pending", "kind": "row", "database": "shop", "table": "orders", "error_stage": None,
         "events": 8, "min_commit_ts": tso(9500), "max_commit_ts": tso(12000)},
        {"status": "applied", "kind": "row", "database": "shop", "table": "customers", "error_stage": None,
         "events": 30, "min_commit_ts": tso(50), "max_commit_ts": tso(8900)},
        {"status": "applied", "kind": "watermark", "database": None, "table": None, "error_stage": None,
         "events": 4, "min_commit_ts": None, "max_commit_ts": None},
    ]
    if quarantined:
        counts.append({"status": "quarantined", "kind": "quarantine", "database": None, "table": None,
                       "error_stage": "decode", "events": quarantined, "min_commit_ts": None, "max_commit_ts": None})
    written = [{"uri": "s3://lake/out/_staging/x/data/shop/0/a.jsonl.gz", "topic": "shop", "partition": 0,
                "first_offset": 0, "last_offset": 99, "records": 100, "events": 100, "rows": 100, "bytes": 900}]
    return manifest_mod.build(
        run_id=run_id, args=args, source="s3://archive/tidb/shop", output="s3://lake/out", started=time.time(),
        objects=objects, partition_stats=partitions, cut=cut, counts=counts, ddl_log=[], ddl_failures=[],
        written=written, quarantine_objects=[], source_options={}, target_protocol="canal-json", target_options={})


STAGED = {"objects": 2, "bytes": 1500, "mode": "listed"}


def test_a_good_manifest_checks_out():
    notes = check_manifest(a_manifest(), run_id="dag.run", staged=STAGED, max_bad_records=0)
    assert notes[0] == ("counts reconcile: read 117 = applied 104 + duplicate 5 + pending 8 + filtered 0 + "
                        "quarantined 0")


@pytest.mark.parametrize("kwargs, words", [
    ({"run_id": "other.run"}, "the manifest is from run 'dag.run', not 'other.run'"),
    ({"staged": {"objects": 3, "bytes": 1500}}, "read 2 objects (1,500 bytes) but 3 objects"),
])
def test_mismatches_fail(kwargs, words):
    with pytest.raises(ValidationError) as e:
        check_manifest(a_manifest(), **{"run_id": "dag.run", "staged": STAGED, "max_bad_records": 0, **kwargs})
    assert words in str(e.value)


def test_counts_that_do_not_reconcile_fail():
    manifest = a_manifest()
    manifest["counts"]["read"] += 1
    with pytest.raises(ValidationError, match="counts do not reconcile: read 118"):
        check_manifest(manifest, run_id="dag.run", staged=STAGED, max_bad_records=0)


def test_quarantine_beyond_the_limit_fails_loudly():
    with pytest.raises(ValidationError) as e:
        check_manifest(a_manifest(quarantined=3), run_id="dag.run", staged=STAGED, max_bad_records=2)
    assert "3 records quarantined, more than the limit max_bad_records=2" in str(e.value)
    assert "s3://lake/out/_quarantine" in str(e.value)
    notes = check_manifest(a_manifest(quarantined=2), run_id="dag.run", staged=STAGED, max_bad_records=2)
    assert "2 records quarantined (limit 2)" in notes[-1]


def test_run_metrics_per_run_and_table():
    m = run_metrics(a_manifest(), dag_id="cdc_replay_backfill", run_id="manual__1", request=REQUEST, staged=STAGED)
    assert m["counts"] == {"read": 117, "applied": 104, "duplicate": 5, "pending": 8, "filtered": 0,
                           "quarantined": 0, "emitted": 100, "rows": 100, "output_objects": 1}
    assert m["watermark_lag_s"] == 3.0  # newest commit 12 s, cut (lowest watermark) 9 s
    assert m["cut"]["time"] == "2026-01-01T00:00:09.000+00:00"
    orders = next(t for t in m["tables"] if t["table"] == "shop.orders")
    assert orders == {"table": "shop.orders", "read": 83, "emitted": 70, "applied": 70, "duplicate": 5,
                      "pending": 8, "filtered": 0, "quarantined": 0, "min_commit_ts": tso(10),
                      "max_commit_ts": tso(8000), "min_time": "2026-01-01T00:00:00.010+00:00",
                      "max_time": "2026-01-01T00:00:08.000+00:00"}
    assert m["partitions"][0]["lag_s"] == 3.0
    assert m["lakehouse"] == []


def test_lakehouse_tables_become_one_asset_each():
    from cdc_replay_airflow.tasks import table_assets

    manifest = a_manifest()
    manifest["output"]["lakehouse"] = {
        "shop.customers": {"source_database": "shop", "source_table": "customers", "table": "shop.customers",
                           "location": "s3://lake/out/shop/customers", "version": 3, "cut_commit_ts": tso(9000),
                           "rows": 40, "unchanged": False, "committed_by": "r", "dropped": False,
                           "mode": "merge", "since": tso(8000)},
        "shop.orders": {"source_database": "shop", "source_table": "orders", "table": "shop.orders",
                        "location": "/lake/out/shop/orders", "version": 2, "cut_commit_ts": tso(9000), "rows": 7,
                        "unchanged": True, "committed_by": "r0", "dropped": False},
    }
    m = run_metrics(manifest, dag_id="cdc_replay_backfill", run_id="manual__1", request=REQUEST, staged=STAGED)
    assert [t["version"] for t in m["lakehouse"]] == [3, 2]
    assert table_assets(m) == [("s3://lake/out/shop/customers", {
        "table": "shop.customers", "version": 3, "cut_commit_ts": tso(9000), "rows": 40, "dropped": False,
        "run_id": "manual__1"})]  # the unchanged table (a rerun of its cut) is no new event
    html = render_page([{"dag_id": "cdc_replay_backfill", "run_id": "manual__1", "state": "success",
                         "metrics": m}], prefix="/cdc-replay")
    for text in ("s3://lake/out/shop/customers", "/lake/out/shop/orders", f"{tso(9000):,}", "unchanged (same cut)",
                 "new version", f"(window merged after {tso(8000):,})"):
        assert text in html, text


def _runs():
    m = run_metrics(a_manifest(), dag_id="cdc_replay_backfill", run_id="manual__<1>", request=REQUEST, staged=STAGED)
    return [{"dag_id": "cdc_replay_backfill", "run_id": "manual__<1>", "state": "success", "metrics": m},
            {"dag_id": "cdc_replay_backfill", "run_id": "manual__2", "state": "failed", "metrics": None,
             "note": "check: protocol_options: expected true or false"}]


def test_the_page_shows_runs_tables_and_a_plot_without_fetching_anything():
    html = render_page(_runs(), prefix="/cdc-replay", user="admin")
    assert "<svg" in html and "events per table over commit time" in html
    for text in ("shop.orders", "shop.customers", "s3://lake/out", "watermark lag", "3.000 s", "manual__&lt;1&gt;",
                 "deduplicated", "quarantined", "2026-01-01 00:00:00.010"):
        assert text in html, text
    assert "manual__<1>" not in html  # escaped
    # nothing from the network: no script, no external stylesheet, font or image
    assert "<script" not in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html)


def test_the_plot_has_a_bar_per_table_and_run():
    runs = _runs()
    svg = events_over_time_svg([r for r in runs if r["metrics"]], table_colors(runs))
    assert svg.count("<rect") == 1 + 2  # background + one bar per table
    assert "shop.orders: 83 events read" in svg
    assert "No replayed events" in events_over_time_svg([], {})


def test_an_empty_page_says_what_to_do():
    assert "Trigger <b>cdc_replay_backfill</b>" in render_page([], prefix="/cdc-replay")


def test_timeline_counts_events_per_table_and_bucket(tmp_path):
    from cdc_replay_airflow.timeline import choose, profile
    from spark_apps import storage
    from spark_apps.generate import generate, write_archive

    generated = generate(transactions=120, partitions=2, seed=4, bad_values=1)
    write_archive(generated.records, str(tmp_path), records_per_object=50)
    objects = [(o.uri, o.size) for o in storage.list_objects(str(tmp_path))]
    read = lambda uri: open(uri, "rb").read()  # noqa: E731
    options = {"enable-tidb-extension": "true"}
    full = profile(objects, read, "canal-json", options, buckets=10)
    assert full["sampled"] == 1.0 and full["objects_read"] == len(objects) and len(full["tables"]) == 2
    assert all(len(v) == 10 for v in full["tables"].values())
    rows_and_ddl = sum(1 for r in generated.records if r.value and not r.value.startswith(b"\x00")
                       for e in __import__("cdc_codecs").get_codec("canal-json", options).decode(r)
                       if e["kind"] in ("row", "ddl") and e["commit_ts"] and e["table"])
    assert round(sum(sum(v) for v in full["tables"].values())) == rows_and_ddl  # duplicates are events read too
    # a window keeps its own changes and tiles the buckets over it
    lo = full["start_ms"] << 18
    windowed = profile(objects, read, "canal-json", options, window=(lo + (1000 << 18) - 1, lo + (3000 << 18) - 1), buckets=4)
    assert windowed["start_ms"] == full["start_ms"] + 1000 and windowed["bucket_ms"] == 500
    # bounded: a spread of objects, counts scaled
    assert 1 <= len(choose(sorted(objects), 4000)) < len(objects)
    sampled = profile(objects, read, "canal-json", options, max_bytes=4000)
    assert sampled["sampled"] < 1 and sampled["objects_read"] < len(objects)


def test_the_chart_uses_timelines():
    runs = _runs()
    runs[0]["metrics"]["timeline"] = {"start_ms": MS, "bucket_ms": 1000, "buckets": 3, "sampled": 1.0,
                                      "objects_read": 2, "objects": 2,
                                      "tables": {"shop.orders": [10, 0, 5], "shop.customers": [2, 2, 0]}}
    svg = events_over_time_svg([runs[0]], table_colors(runs))
    assert svg.count("<rect") == 1 + 4  # background + one bar per non-empty (table, bucket)
    assert "shop.orders: 10 events read with commit time 00:00:00.000 .. 00:00:01.000" in svg
    assert "events read per second" in svg
