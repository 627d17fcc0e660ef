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
        manifest_mod.RunFacts(run_id=run_id, args=args, source="s3://archive/tidb/shop", output="s3://lake/out",
                              started=time.time(), source_options={}, target_protocol="canal-json", target_options={}),
        manifest_mod.ReadFacts(objects=objects, partition_stats=partitions, cut=cut, counts=counts),
        manifest_mod.Outcome(written=written, quarantine_objects=[], ddl_log=[], ddl_failures=[]))


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
    m = run_metrics(a_manifest(), dag_id="cdc_replay_manual", run_id="manual__1", request=REQUEST, staged=STAGED)
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
    m = run_metrics(manifest, dag_id="cdc_replay_manual", run_id="manual__1", request=REQUEST, staged=STAGED)
    assert [t["version"] for t in m["lakehouse"]] == [3, 2]
    assert table_assets(m) == [("s3://lake/out/shop/customers", {
        "table": "shop.customers", "version": 3, "cut_commit_ts": tso(9000), "rows": 40, "dropped": False,
        "run_id": "manual__1"})]  # the unchanged table (a rerun of its cut) is no new event
    # both DAGs' publish: the output (and, for a scheduled interval, its series first), then the tables
    from cdc_replay_airflow.tasks import asset_extra, output_assets

    local = {**m, "output": "/lake/out"}
    assert output_assets(local) == [("file:///lake/out", asset_extra(local))] + table_assets(m)
    interval = ["2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00"]
    scheduled = output_assets(local, series="s3://lake/series", interval=interval)
    assert [uri for uri, _ in scheduled] == ["s3://lake/series", "file:///lake/out", "s3://lake/out/shop/customers"]
    assert scheduled[0][1] == scheduled[1][1] == {**asset_extra(local), "interval": interval}
    kafka = {**m, "output": "kafka://k1:9092", "produced": [{"topic": "b"}, {"topic": "a"}, {"topic": "b"}]}
    assert [uri for uri, _ in output_assets(kafka, series="ignored")] == [
        "kafka://k1:9092/a", "kafka://k1:9092/b", "s3://lake/out/shop/customers"]
    html = render_page([{"dag_id": "cdc_replay_manual", "run_id": "manual__1", "state": "success",
                         "metrics": m}], prefix="/cdc-replay")
    for text in ("s3://lake/out/shop/customers", "/lake/out/shop/orders", f"{tso(9000):,}", "unchanged (same cut)",
                 "new version", f"(window merged after {tso(8000):,})", "2026-01-01 00:00:09.000"):
        assert text in html, text
    # each location is a link: s3:// to the S3 console's folder view, a local path as file://
    assert ('<a class="location" href="https://s3.console.aws.amazon.com/s3/buckets/lake?prefix=out/shop/customers/'
            '&amp;showversions=false"') in html
    assert '<a class="location" href="file:///lake/out/shop/orders"' in html
    plain = render_page([{"dag_id": "cdc_replay_manual", "run_id": "manual__1", "state": "success", "metrics": m}],
                        prefix="/cdc-replay", s3_console="https://minio.local/browser/{bucket}/{prefix}")
    assert 'href="https://minio.local/browser/lake/out/shop/customers/"' in plain
    assert "s3.console" not in render_page([{"dag_id": "d", "run_id": "r", "state": "success", "metrics": m}],
                                           prefix="/cdc-replay", s3_console="")


def _runs():
    m = run_metrics(a_manifest(), dag_id="cdc_replay_manual", run_id="manual__<1>", request=REQUEST, staged=STAGED)
    return [{"dag_id": "cdc_replay_manual", "run_id": "manual__<1>", "state": "success", "metrics": m},
            {"dag_id": "cdc_replay_manual", "run_id": "manual__2", "state": "failed", "metrics": None,
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
    assert "Trigger <b>cdc_replay_manual</b>" in render_page([], prefix="/cdc-replay")


def test_the_timeline_comes_from_the_run_counts():
    """The app's counts carry a commit-time bucket; the manifest's timeline sums them per table
    and bucket, within the frame (the window when there is one)."""
    stats = [{"min_commit_ts": tso(0), "max_commit_ts": tso(5999)}, {"min_commit_ts": tso(10), "max_commit_ts": None}]
    frame = manifest_mod.timeline_frame(stats, None, None, 3)
    assert frame == (MS, 2000)
    assert manifest_mod.timeline_frame(stats, tso(1000) - 1, tso(3000) - 1, 4) == (MS + 1000, 500)
    assert manifest_mod.timeline_frame([{"min_commit_ts": None, "max_commit_ts": None}], None, None, 3) is None
    counts = [{"status": "applied", "database": "shop", "table": "orders", "bucket": 0, "events": 4},
              {"status": "duplicate", "database": "shop", "table": "orders", "bucket": 0, "events": 1},
              {"status": "applied", "database": "shop", "table": "orders", "bucket": 2, "events": 3},
              {"status": "applied", "database": None, "table": None, "bucket": None, "events": 9}]
    assert manifest_mod.timeline(counts, frame, 3) == {
        "start_ms": MS, "bucket_ms": 2000, "buckets": 3, "tables": {"shop.orders": [5, 0, 3]}, "sampled": 1.0}


def test_the_chart_uses_timelines():
    runs = _runs()
    runs[0]["metrics"]["timeline"] = {"start_ms": MS, "bucket_ms": 1000, "buckets": 3, "sampled": 1.0,
                                      "objects_read": 2, "objects": 2,
                                      "tables": {"shop.orders": [10, 0, 5], "shop.customers": [2, 2, 0]}}
    svg = events_over_time_svg([runs[0]], table_colors(runs))
    assert svg.count("<rect") == 1 + 4  # background + one bar per non-empty (table, bucket)
    assert "shop.orders: 10 events read with commit time 00:00:00.000 .. 00:00:01.000" in svg
    assert "events read per second" in svg


OVERFLOW = """JSON.stringify({page: document.documentElement.scrollWidth, viewport: window.innerWidth,
  links: [...document.querySelectorAll('a.location')].map(a => [a.innerText, a.href]),
  wide: [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right > window.innerWidth + 1)
        .map(t => t.rows[0].innerText.slice(0, 60) + ': ' + Math.round(t.getBoundingClientRect().right))})"""


def test_quarantine_reasons_and_every_table_fit_at_1400_px(tmp_path):
    """A busy page (long URIs, scheduled run ids, lakehouse tables, quarantine reasons with long
    errors) fits a 1400 px window: no table reaches past the right edge."""
    import json
    import os

    from tests.airflow.tools import CHROMIUM, Chromium, require_tool

    long_uri = "s3://company-data-lake-production-eu-west-1/cdc/replays/tidb-cluster-main/shop/snapshots/hourly"
    manifest = a_manifest(quarantined=3)
    manifest["output"]["uri"] = long_uri
    manifest["quarantine"]["reasons"] = [
        {"stage": "decode", "reason": "canal-json: value is not JSON: unexpected character", "records": 2,
         "sample": {"object": long_uri + "/shop/0/00000000000000000042.jsonl.gz", "line": 17, "topic": "shop",
                    "partition": 0, "offset": 4242, "error": "canal-json: value is not JSON: " + "x" * 300}},
        {"stage": "archive", "reason": "line is not a Kafka record", "records": 1,
         "sample": {"object": long_uri + "/shop/1/b.jsonl.gz", "line": 3, "topic": None, "partition": None,
                    "offset": None, "error": "line 3 is not a Kafka record"}},
    ]
    runs = []
    for i in range(3):
        m = run_metrics(manifest, dag_id="cdc_replay_scheduled", run_id=f"scheduled__2026-01-0{i + 1}T00:00:00+00:00",
                        request=REQUEST, staged=STAGED)
        m["lakehouse"] = [{"table": "shop.order_line_items_archive", "location": long_uri + "/shop/order_line_items",
                           "version": 12, "cut_commit_ts": tso(9000), "rows": 123456, "unchanged": False},
                          {"table": "shop.order notes", "location": "/data/lake/shop/order notes", "version": 3,
                           "cut_commit_ts": tso(9000), "rows": 5, "unchanged": False, "mode": "rebuild",
                           "since": tso(8000)}]
        runs.append({"dag_id": "cdc_replay_scheduled", "run_id": f"scheduled__2026-01-0{i + 1}T00:00:00+00:00",
                     "state": "success", "metrics": m})
    html = render_page(runs, prefix="/cdc-replay", user="admin")
    for text in ("value is not JSON", "line 17, offset 4,242", "line is not a Kafka record", "quarantine stage"):
        assert text in html, text
    page = tmp_path / "page.html"
    page.write_text(html)
    browser = Chromium(require_tool(CHROMIUM, "chromium"))
    try:
        result = json.loads(browser.screenshot(f"file://{page}", os.path.join(tmp_path, "page.png"), cookies={},
                                               width=1400, evaluate=OVERFLOW))
    finally:
        browser.close()
    assert result["viewport"] == 1400 and result["wide"] == [] and result["page"] <= 1400, result
    # the table locations are links the browser resolves: the S3 console, and file:// for a local path
    assert result["links"][:2] == [
        [long_uri + "/shop/order_line_items", "https://s3.console.aws.amazon.com/s3/buckets/company-data-lake-"
         "production-eu-west-1?prefix=cdc/replays/tidb-cluster-main/shop/snapshots/hourly/shop/order_line_items/"
         "&showversions=false"],
        ["/data/lake/shop/order notes", "file:///data/lake/shop/order%20notes"]], result["links"]
