"""The monitoring page as HTML with inline SVG charts: pure functions of the runs (no Airflow,
no network: no script, font or stylesheet is fetched from anywhere).

A run is {"dag_id", "run_id", "state", "run_type", "logical_date", "metrics": <metrics.run_metrics
result or None>, "note": <text or None>}.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from urllib.parse import quote, urlencode

from spark_apps.contract import Status
from cdc_codecs.tso import physical_ms

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac"]
STATUS_COLORS = {Status.APPLIED: "#59a14f", Status.DUPLICATE: "#4e79a7", Status.PENDING: "#edc948",
                 Status.FILTERED: "#bab0ac", Status.QUARANTINED: "#e15759"}
STATE_COLORS = {"success": "#2e7d32", "failed": "#c62828", "running": "#1565c0", "queued": "#6d6d6d",
                "upstream_failed": "#ef6c00"}

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;padding:20px 24px;
color:#1f2933;background:#fff;font-size:14px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}h3{font-size:14px;margin:18px 0 6px}
.sub{color:#52606d;margin-bottom:16px}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}
th,td{border-bottom:1px solid #e4e7eb;padding:5px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f5f7fa;font-weight:600;color:#3e4c59;white-space:normal}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.state{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px}
.card{border:1px solid #e4e7eb;border-radius:8px;padding:12px 16px;margin:14px 0}
.kv{display:grid;grid-template-columns:max-content auto;gap:3px 16px}
.kv div:nth-child(odd){color:#52606d}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;background:#f5f7fa;padding:1px 4px;
border-radius:3px}
.warn{color:#b44d12}.err{color:#c62828}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:10px;height:10px;
margin-right:5px;border-radius:2px}
a{color:#1565c0;text-decoration:none}a:hover{text-decoration:underline}
td.wrap{white-space:normal;overflow-wrap:anywhere;min-width:8em}td.wrap code{overflow-wrap:anywhere}
.kv div{overflow-wrap:anywhere}
.scroll{overflow-x:auto}
.empty{color:#52606d;padding:24px;border:1px dashed #cbd2d9;border-radius:8px;text-align:center}
"""


def _n(value) -> str:
    return "–" if value is None else f"{value:,}"


def _time(iso: str | None, with_date: bool = True) -> str:
    if not iso:
        return "–"
    moment = dt.datetime.fromisoformat(iso)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f" if with_date else "%H:%M:%S.%f")[:-3]


def _lag(seconds) -> str:
    if seconds is None:
        return "–"
    if seconds < 120:
        return f"{seconds:.3f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _ms(ts: int) -> int:
    return physical_ms(ts)


# where an s3:// table location links to: the AWS S3 console's folder view; a MinIO or other
# store's console by the Airflow option [cdc_replay] s3_console_url ("" = no link, text only)
S3_CONSOLE = "https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={prefix}&showversions=false"


def location_href(location: str, s3_console: str | None = S3_CONSOLE) -> str | None:
    """A link a browser can follow to a table's location: a local path as a file:// URL, an
    s3:// location as the console's view of its folder; None for anything else."""
    if location.startswith("s3://"):
        if not s3_console:
            return None
        bucket, _, key = location[len("s3://"):].partition("/")
        return s3_console.format(bucket=quote(bucket, safe=""), prefix=quote(key.rstrip("/") + "/", safe="/"))
    if location.startswith("file://"):
        return location
    if location.startswith("/"):
        return "file://" + quote(location)
    return None


def _location(location: str, s3_console: str | None) -> str:
    href = location_href(location, s3_console)
    text = f"<code>{escape(location)}</code>"
    if href is None:
        return text
    return f'<a class="location" href="{escape(href)}" target="_blank" rel="noopener noreferrer">{text}</a>'


def _cut_time(ts) -> str:
    if not ts or ts <= 0:
        return ""
    return "<br>" + _time(dt.datetime.fromtimestamp(_ms(ts) / 1000, dt.timezone.utc).isoformat())


def table_colors(runs: list[dict]) -> dict[str, str]:
    names = sorted({t["table"] for r in runs if r.get("metrics") for t in r["metrics"]["tables"]})
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (count - 1) for i in range(count)]


def _segments(m: dict) -> list[dict]:
    """The chart's bars for one run: per table and commit-time bucket (the run's timeline), or,
    without one, a bar per table spanning its commit range. Heights are events per second."""
    out = []
    timeline = m.get("timeline")
    if timeline:
        width = timeline["bucket_ms"]
        sampled = "" if timeline.get("sampled", 1) >= 1 else f" (estimated from {100 * timeline['sampled']:.0f}% of the bytes)"
        for table, values in timeline["tables"].items():
            for i, value in enumerate(values):
                if value:
                    start = timeline["start_ms"] + i * width
                    out.append({"key": (m["output"], start), "x0": start, "x1": start + width, "table": table,
                                "rate": value / (width / 1000), "title": f"{table}: {value:,.0f} events read with "
                                f"commit time {_clock(start)} .. {_clock(start + width)}{sampled}; run {m['run_id']}"})
        return out
    for t in m["tables"]:
        if t["min_commit_ts"] is None or not t["read"]:
            continue
        x0, x1 = _ms(t["min_commit_ts"]), _ms(t["max_commit_ts"])
        out.append({"key": (m["output"], None), "x0": x0, "x1": max(x1, x0 + 1), "table": t["table"],
                    "rate": t["read"] / max((x1 - x0) / 1000, 0.001),
                    "title": f'{t["table"]}: {t["read"]:,} events read ({t["emitted"]:,} emitted, {t["duplicate"]:,} '
                             f'deduplicated, {t["quarantined"]:,} quarantined), commit time {_time(t["min_time"])} .. '
                             f'{_time(t["max_time"])}; run {m["run_id"]}'})
    return out


def _clock(ms: float) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def events_over_time_svg(runs: list[dict], colors: dict[str, str], width: int = 960, height: int = 280) -> str:
    """Events per table over commit time, stacked by table: for each output (its latest run), the
    events read per second of commit time in each bucket of the run's timeline. A scheduled DAG's
    intervals line up into one series."""
    latest: dict[str, dict] = {}
    for run in runs:
        m = run.get("metrics")
        if m and m["output"] not in latest:
            latest[m["output"]] = m
    bars = [b for m in latest.values() for b in _segments(m)]
    if not bars:
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="60" role="img" aria-label="no data">'
                '<text x="10" y="35" fill="#52606d" font-size="13">No replayed events to plot yet.</text></svg>'
                % width)
    left, right, top, bottom = 64, 16, 14, 46
    lo = min(b["x0"] for b in bars)
    hi = max(b["x1"] for b in bars)
    data_lo, data_hi = lo, hi
    if hi - lo < 1000:
        lo, hi = lo - 500, hi + 500
    pad = (hi - lo) * 0.02
    lo, hi = lo - pad, hi + pad
    stacks: dict = {}
    for b in sorted(bars, key=lambda b: (b["key"][0], b["x0"], b["table"])):
        b["base"] = stacks.get(b["key"], 0.0)
        stacks[b["key"]] = b["base"] + b["rate"]
    ymax = max(stacks.values()) or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(ms: float) -> float:
        return left + (ms - lo) / (hi - lo) * plot_w

    def y(v: float) -> float:
        return top + plot_h - v / ymax * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="events per table over commit time" font-size="11" '
             f'font-family="system-ui,sans-serif">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafbfc" stroke="#e4e7eb"/>']
    for v in _ticks(0, ymax):
        label = f"{v:,.0f}" if ymax >= 10 else f"{v:,.1f}"
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e4e7eb"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#52606d">{label}</text>')
    span_days = (hi - lo) / 86_400_000
    ticks = _ticks(data_lo, data_hi)
    for i, ms in enumerate(ticks):
        moment = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
        label = moment.strftime("%Y-%m-%d %H:%M" if span_days > 1 else "%H:%M:%S.%f")
        label = label if span_days > 1 else label[:-3]
        anchor = "start" if i == 0 and len(ticks) > 1 else ("end" if i == len(ticks) - 1 and len(ticks) > 1 else "middle")
        parts.append(f'<line x1="{x(ms):.1f}" x2="{x(ms):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
                     f'stroke="#9aa5b1"/><text x="{x(ms):.1f}" y="{top + plot_h + 17}" text-anchor="{anchor}" '
                     f'fill="#52606d">{label}</text>')
    day = dt.datetime.fromtimestamp(data_lo / 1000, dt.timezone.utc).strftime("%Y-%m-%d")
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle" fill="#3e4c59">commit time '
                 f'(UTC{", " + day if span_days <= 1 else ""})</text>'
                 f'<text transform="translate(14,{top + plot_h / 2}) rotate(-90)" text-anchor="middle" '
                 f'fill="#3e4c59">events read per second</text>')
    for b in bars:
        x0, x1 = x(b["x0"]), max(x(b["x1"]), x(b["x0"]) + 2)
        y0, y1 = y(b["base"]), y(b["base"] + b["rate"])
        parts.append(f'<rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{max(y0 - y1, 0.5):.1f}" '
                     f'fill="{colors[b["table"]]}" fill-opacity="0.9" stroke="#fff" stroke-width="0.3">'
                     f'<title>{escape(b["title"])}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def status_bar_svg(counts: dict, width: int = 180, height: int = 12) -> str:
    total = sum(counts[s] for s in STATUS_COLORS) or 1
    x, parts = 0.0, []
    for status, color in STATUS_COLORS.items():
        w = counts[status] / total * width
        if w > 0:
            parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{color}">'
                         f'<title>{status} {counts[status]:,}</title></rect>')
            x += w
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="event statuses">{"".join(parts)}</svg>')


def _state(state: str | None) -> str:
    state = state or "unknown"
    return f'<span class="state" style="background:{STATE_COLORS.get(state, "#6d6d6d")}">{escape(state)}</span>'


def _run_link(prefix: str, run: dict) -> str:
    query = urlencode({"dag_id": run["dag_id"], "run_id": run["run_id"]})
    return f'<a href="{escape(prefix)}/?{escape(query)}">{escape(run["run_id"])}</a>'


def _run_detail(run: dict, colors: dict[str, str], s3_console: str | None = S3_CONSOLE) -> str:
    m = run["metrics"]
    c = m["counts"]
    rows = []
    for t in m["tables"]:
        rows.append(
            f'<tr><td><i style="display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;'
            f'background:{colors[t["table"]]}"></i>{escape(t["table"])}</td><td class="n">{_n(t["read"])}</td>'
            f'<td class="n">{_n(t["emitted"])}</td><td class="n">{_n(t["applied"])}</td>'
            f'<td class="n">{_n(t["duplicate"])}</td><td class="n">{_n(t["pending"])}</td>'
            f'<td class="n">{_n(t["filtered"])}</td><td class="n">{_n(t["quarantined"])}</td>'
            f'<td>{_time(t["min_time"])} ..<br>{_time(t["max_time"], with_date=False)}</td>'
            f'<td><code>{_n(t["min_commit_ts"])}</code> ..<br><code>{_n(t["max_commit_ts"])}</code></td></tr>')
    parts_rows = "".join(
        f'<tr><td>{escape(p["topic"])}/{p["partition"]}</td><td class="n">{_n(p["records"])}</td>'
        f'<td>{_time(p["watermark_time"])}</td><td class="n">{_lag(p["lag_s"])}</td></tr>' for p in m["partitions"])
    lake_rows = "".join(
        f'<tr><td>{escape(t["table"])}</td><td class="wrap">{_location(t["location"], s3_console)}</td>'
        f'<td class="n"><code>{escape(str(t["version"]))}</code></td><td><code>{_n(t["cut_commit_ts"])}</code>'
        f'{_cut_time(t["cut_commit_ts"])}</td><td class="n">{_n(t["rows"])}</td>'
        f'<td>{"dropped" if t.get("dropped") else "unchanged (same cut)" if t.get("unchanged") else "new version"}'
        f'{" (window merged after " + _n(t["since"]) + ")" if t.get("mode") == "merge" and not t.get("unchanged") else ""}'
        f'{" (window after " + _n(t["since"]) + " with schema changes: rewritten)" if t.get("mode") == "rebuild" and not t.get("unchanged") else ""}'
        '</td></tr>'
        for t in m.get("lakehouse") or [])
    lake = (f'<table style="width:auto"><tr><th>lakehouse table</th><th>location</th><th class="n">version</th>'
            f'<th>cut commit ts</th><th class="n">rows</th><th></th></tr>{lake_rows}</table>' if lake_rows else "")
    reasons = "".join(
        f'<tr><td>{escape(str(r["stage"]))}</td><td class="wrap">{escape(r["reason"])}</td><td class="n">{_n(r["records"])}</td>'
        f'<td class="wrap"><code>{escape(str(r["sample"].get("object")))}</code>'
        f'{" line " + _n(r["sample"]["line"]) if r["sample"].get("line") is not None else ""}'
        f'{", offset " + _n(r["sample"]["offset"]) if r["sample"].get("offset") is not None else ""}</td>'
        f'<td class="wrap">{escape(str(r["sample"].get("error")))}</td></tr>'
        for r in m["quarantine"].get("reasons") or [])
    reasons = (f'<table><tr><th>quarantine stage</th><th>reason</th><th class="n">records</th><th>first record</th>'
               f'<th>its error</th></tr>{reasons}</table>' if reasons else "")
    produced_rows = "".join(
        f'<tr><td>{escape(p["topic"])}/{p["partition"]}</td><td class="n"><code>{_n(p["first_offset"])}</code></td>'
        f'<td class="n"><code>{_n(p["last_offset"])}</code></td><td class="n">{_n(p["records"])}</td>'
        f'<td>{"produced by an earlier run (skipped)" if p["skipped"] else "produced"}</td></tr>'
        for p in m.get("produced") or [])
    produced = (f'<table style="width:auto"><tr><th>produced to Kafka</th><th class="n">first offset</th>'
                f'<th class="n">last offset</th><th class="n">records</th><th></th></tr>{produced_rows}</table>'
                if produced_rows else "")
    read_rows = "".join(
        f'<tr><td>{escape(w["topic"])}/{w["partition"]}</td><td class="n"><code>{_n(w["from"])}</code></td>'
        f'<td class="n"><code>{_n(w["to"])}</code></td><td class="n">{_n(w["records"])}</td>'
        f'<td>end by {escape(w["end_by"])}</td></tr>'
        for w in m.get("kafka_window") or [])
    produced += (f'<table style="width:auto"><tr><th>read from Kafka</th><th class="n">from offset</th>'
                 f'<th class="n">to offset (excl.)</th><th class="n">records</th><th></th></tr>{read_rows}</table>'
                 if read_rows else "")
    interval = m.get("data_interval") or [None, None]
    warnings = "".join(f'<div class="warn">⚠ {escape(w)}</div>' for w in m.get("warnings", []))
    error = f'<div class="err">✖ {escape(m["error"])}</div>' if m.get("error") else ""
    return f"""
<div class="card" id="{escape(run['dag_id'] + '/' + run['run_id'])}">
<h3>{escape(run['dag_id'])} · {escape(run['run_id'])} {_state(run.get('state'))}
 <span style="font-weight:400;color:#52606d">{escape(m.get('status', ''))}</span></h3>
{error}{warnings}
<div class="kv">
<div>source</div><div><code>{escape(m['source'])}</code> [{escape(m['protocol'])}], {_n(m['objects'])} objects,
 {m['bytes'] / 1e6:.1f} MB{(' (' + escape(m['staging']) + ')') if m.get('staging') else ''}</div>
<div>output</div><div><code>{escape(m['output'])}</code> — {escape(m['emit'])} in {escape(m['target_protocol'])},
 {_n(c['emitted'])} records ({_n(c['rows'])} rows) in {_n(c['output_objects'])} objects</div>
{f"<div>data interval</div><div>{_time(interval[0])} .. {_time(interval[1])}</div>" if interval[0] else ""}
<div>events read</div><div>{_n(c['read'])} = applied {_n(c['applied'])} + deduplicated {_n(c['duplicate'])}
 + pending {_n(c['pending'])} + filtered {_n(c['filtered'])} + quarantined {_n(c['quarantined'])}</div>
<div>commit time</div><div>{_time(m['commit_time_range'][0])} .. {_time(m['commit_time_range'][1])}</div>
<div>cut</div><div>{escape(m['cut']['description'])}</div>
<div>watermark lag</div><div>{_lag(m['watermark_lag_s'])} (newest commit read {_time(m.get('newest_time'))})</div>
<div>quarantine</div><div>{_n(m['quarantine']['records'])} records at <code>{escape(m['quarantine']['location'])}</code></div>
<div>replay</div><div>{escape(m['replay_run_id'])}, {m['duration_s']} s</div>
</div>
<div class="scroll"><table><tr><th>table</th><th class="n">read</th><th class="n">emitted</th><th class="n">applied</th>
<th class="n">deduplicated</th><th class="n">pending</th><th class="n">filtered</th><th class="n">quarantined</th>
<th>commit time range</th><th>commit ts range</th></tr>{''.join(rows)}</table></div>
{reasons}
<table style="width:auto"><tr><th>source partition</th><th class="n">records</th><th>watermark</th>
<th class="n">watermark lag</th></tr>{parts_rows}</table>
{produced}{lake}
</div>"""


def render_page(runs: list[dict], *, prefix: str, dag_id: str | None = None, run_id: str | None = None,
                user: str | None = None, generated_at: dt.datetime | None = None,
                s3_console: str | None = S3_CONSOLE) -> str:
    colors = table_colors(runs)
    generated_at = generated_at or dt.datetime.now(dt.timezone.utc)
    with_metrics = [r for r in runs if r.get("metrics")]
    legend = "".join(f'<span><i style="background:{color}"></i>{escape(name)}</span>' for name, color in colors.items())
    run_rows = []
    for run in runs:
        m = run.get("metrics")
        if m:
            c = m["counts"]
            cells = (f'<td class="n">{_n(c["read"])}</td><td class="n">{_n(c["emitted"])}</td>'
                     f'<td class="n">{_n(c["duplicate"])}</td><td class="n">{_n(c["quarantined"])}</td>'
                     f'<td>{status_bar_svg(c, width=120)}</td><td>{_time(m["commit_time_range"][0])} ..<br>'
                     f'{_time(m["commit_time_range"][1], with_date=False)}</td>'
                     f'<td class="n">{_lag(m["watermark_lag_s"])}</td><td class="wrap"><code>{escape(m["output"])}</code></td>')
        else:
            note = escape(run.get("note") or "no metrics (the run has not reached validate)")
            cells = f'<td colspan="8" style="color:#52606d;white-space:normal">{note}</td>'
        run_rows.append(f'<tr><td>{escape(run["dag_id"])}</td><td class="wrap">{_run_link(prefix, run)}</td>'
                        f'<td>{_state(run.get("state"))}</td>{cells}</tr>')
    scope = ""
    if dag_id or run_id:
        scope = (f' — {escape(dag_id or "")}{" · " + escape(run_id) if run_id else ""} '
                 f'(<a href="{escape(prefix)}/">all runs</a>)')
    body = (
        f"""<h2>Events per table over commit time</h2>
<div class="legend">{legend}</div>{events_over_time_svg(with_metrics, colors)}
<h2>Runs</h2>
<div class="scroll"><table><tr><th>DAG</th><th>run</th><th>state</th><th class="n">events read</th><th class="n">emitted</th>
<th class="n">deduplicated</th><th class="n">quarantined</th><th>statuses</th>
<th>commit time range</th><th class="n">watermark lag</th><th>output</th></tr>{''.join(run_rows)}</table></div>
<h2>Per run and table</h2>{''.join(_run_detail(r, colors, s3_console) for r in with_metrics)}"""
        if runs else '<div class="empty">No runs of the cdc-replay DAGs yet. Trigger <b>cdc_replay_manual</b> '
                     'or unpause <b>cdc_replay_scheduled</b>.</div>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>CDC replay</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>
<body><h1>CDC replay{scope}</h1>
<div class="sub">{len(runs)} runs · page for {escape(user or "?")} · {generated_at.strftime("%Y-%m-%d %H:%M:%S UTC")}</div>
{body}
</body></html>"""
