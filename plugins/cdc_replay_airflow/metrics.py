"""From the replay app's manifest (spark_apps/manifest.py) to the checks the validate task
makes and the metrics the monitoring page shows: pure functions (no Airflow, no storage).

Per run: objects and bytes read, events read = applied + deduplicated + pending + filtered +
quarantined (the manifest reconciles them), emitted records, commit ts range, the cut and its
watermark lag. Per table: the same counts and its commit ts range. Watermark lag is how far the
cut (the lowest partition watermark) trails the newest commit ts read: the events in between
are pending until a later run sees newer watermarks.
"""

from __future__ import annotations

import datetime as dt

from spark_apps.contract import Status
from cdc_codecs.tso import physical_ms, to_datetime

METRICS_KEY = "cdc_replay_metrics"
STATUSES = Status.COUNTED


def statuses(counts: dict) -> tuple:
    """The statuses a manifest's counts hold: `in_base` too in a run with --base-export."""
    return STATUSES + ((Status.IN_BASE,) if Status.IN_BASE in counts else ())


class ValidationError(RuntimeError):
    """The run's output cannot be trusted or breaks a limit; the message says why."""


def ts_time(ts: int | None) -> str | None:
    if ts is None or ts <= 0:
        return None
    return to_datetime(ts).isoformat(timespec="milliseconds")


def _lag_s(newer: int | None, older: int | None) -> float | None:
    if newer is None or older is None:
        return None
    return round(max(0, physical_ms(newer) - physical_ms(older)) / 1000, 3)


class Incomplete(ValidationError):
    """The archive's watermarks have not reached the end of the window yet: a later attempt may pass."""


def check_complete(manifest: dict, until: int | None) -> str:
    """Every change up to `until` is in the archive only once every source partition's watermark
    has passed it (the completeness cut). Raises Incomplete otherwise; returns a note."""
    cut = manifest["cut"]
    complete = cut.get("complete_commit_ts")
    if until is None:
        return "no window end to check"
    if manifest.get("carried_from", False) is not False and (complete is None or complete < until):
        raise Incomplete(
            f"no archive object was archived in this interval's objects window, so no watermark shows that every "
            f"change committed before its end ({until}, {ts_time(until)}) is in the archive (what is known: up to "
            f"{complete}, {ts_time(complete)}): the carried-forward output is committed but not published. An archive "
            "that sends watermarks has a gap here; for one that does not, where quiet intervals happen, set "
            "require_complete to false in the Variable")
    if cut["kind"] != "commit_ts" or complete is None or complete < until:
        raise Incomplete(
            f"the archive is not complete for this window yet: its watermarks reach commit ts {complete} "
            f"({ts_time(complete)}), the window ends at {until} ({ts_time(until)}); changes committed before the "
            "window's end may still be on their way to the archive, so the output is not published "
            "(a retry or a later rerun replaces it)")
    return f"the archive is complete for the window: watermarks reach {ts_time(complete)} >= its end {ts_time(until)}"


def check_manifest(manifest: dict, *, run_id: str, staged: dict, max_bad_records: int) -> list[str]:
    """Reconcile the manifest with itself and with what was staged. Raises ValidationError
    for anything that makes the output untrustworthy; returns notes for the log."""
    problems = []
    if manifest.get("run_id") != run_id:
        problems.append(f"the manifest is from run {manifest.get('run_id')!r}, not {run_id!r} (a stale output?)")
    counts = manifest["counts"]
    parts = sum(counts[s] for s in statuses(counts))
    if counts["read"] != parts or not counts.get("reconciled"):
        problems.append(f"counts do not reconcile: read {counts['read']:,} != "
                        + " + ".join(f"{s} {counts[s]:,}" for s in statuses(counts)) + f" = {parts:,}")
    source = manifest["source"]
    if source["objects"] != staged["objects"] or source["bytes"] != staged["bytes"]:
        problems.append(f"the replay read {source['objects']:,} objects ({source['bytes']:,} bytes) but "
                        f"{staged['objects']:,} objects ({staged['bytes']:,} bytes) were staged")
    out = manifest["output"]
    if sum(o["records"] for o in out["objects"]) != out["records"]:
        problems.append("the output's object list does not add up to its record count")
    table_sum = {s: sum(t[s] for t in manifest["tables"]) for s in (Status.APPLIED, Status.DUPLICATE, Status.QUARANTINED)}
    if table_sum["applied"] > counts["applied"] or table_sum["duplicate"] > counts["duplicate"]:
        problems.append(f"per-table counts exceed the run's: {table_sum}")
    if problems:
        raise ValidationError("the replay's manifest does not check out: " + "; ".join(problems))
    notes = [f"counts reconcile: read {counts['read']:,} = " + " + ".join(f"{s} {counts[s]:,}" for s in statuses(counts)),
             f"all {staged['objects']:,} staged objects ({staged['bytes'] / 1e6:.1f} MB) were read"]
    quarantined = counts["quarantined"]
    if quarantined > max_bad_records:
        raise ValidationError(
            f"{quarantined:,} records quarantined, more than the limit max_bad_records={max_bad_records}: "
            f"inspect {manifest['quarantine']['location']} (the output was committed so it can be inspected, "
            "but it is not published)")
    if quarantined:
        notes.append(f"{quarantined:,} records quarantined (limit {max_bad_records}) at "
                     f"{manifest['quarantine']['location']}")
    return notes


def produced(out: dict) -> list[dict]:
    """A Kafka output's partitions: first/last offset and records produced by this run, and
    those an earlier run of the same replay had produced (skipped, not produced again)."""
    kafka = out.get("kafka")
    if not kafka:
        return []
    rows = [{"topic": w["topic"], "partition": w["partition"], "first_offset": w["first_offset"],
             "last_offset": w["last_offset"], "records": w["records"], "skipped": skipped}
            for skipped, entries in ((False, out["objects"]), (True, kafka.get("skipped") or []))
            for w in entries]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def run_metrics(manifest: dict, *, dag_id: str, run_id: str, request: dict, staged: dict,
                data_interval: tuple[str | None, str | None] = (None, None)) -> dict:
    """What the monitoring page shows for one run (JSON: it travels as an XCom)."""
    counts = manifest["counts"]
    out = manifest["output"]
    cut = manifest["cut"]
    partitions = []
    newest = None
    for p in manifest.get("partitions", []):
        if p.get("max_commit_ts") is not None:
            newest = max(newest or 0, p["max_commit_ts"])
        partitions.append({
            "topic": p["topic"], "partition": p["partition"], "records": p["records"],
            "watermark": p.get("watermark"), "watermark_time": ts_time(p.get("watermark")),
            "max_commit_ts": p.get("max_commit_ts"),
            "lag_s": _lag_s(p.get("max_commit_ts"), p.get("watermark")),
        })
    tables = []
    for t in manifest["tables"]:
        read = sum(t[s] for s in statuses(t))
        emitted = t["rows"] if out["emit"] == "snapshot" and t.get("rows") is not None else t["applied"]
        tables.append({
            "table": f"{t['database'] or ''}.{t['table'] or ''}".strip("."),
            "read": read, "emitted": emitted, **{s: t[s] for s in statuses(t)},
            "min_commit_ts": t["min_commit_ts"], "max_commit_ts": t["max_commit_ts"],
            "min_time": ts_time(t["min_commit_ts"]), "max_time": ts_time(t["max_commit_ts"]),
        })
    lo, hi = manifest["commit_ts_range"]
    return {
        "dag_id": dag_id, "run_id": run_id, "replay_run_id": manifest["run_id"],
        "data_interval": list(data_interval),
        "started_at": manifest["started_at"], "finished_at": manifest["finished_at"],
        "duration_s": manifest["duration_s"],
        "source": request["source"], "read_from": manifest["source"]["uri"], "protocol": request["protocol"],
        "output": out["uri"], "emit": out["emit"], "target_protocol": out["protocol"],
        "objects": staged["objects"], "bytes": staged["bytes"], "staging": staged.get("mode"),
        "counts": {
            "read": counts["read"], **{s: counts[s] for s in statuses(counts)},
            "emitted": out["records"], "rows": out["rows"], "output_objects": len(out["objects"]),
        },
        "commit_ts_range": [lo, hi], "commit_time_range": [ts_time(lo), ts_time(hi)],
        "cut": {"kind": cut["kind"], "commit_ts": cut.get("commit_ts"), "time": ts_time(cut.get("commit_ts")),
                "complete_commit_ts": cut.get("complete_commit_ts"),
                "complete_time": ts_time(cut.get("complete_commit_ts")), "description": cut["description"]},
        "window": manifest.get("window") or {},
        "newest_commit_ts": newest, "newest_time": ts_time(newest),
        "watermark_lag_s": (_lag_s(newest, cut.get("complete_commit_ts") or cut.get("commit_ts"))
                            if cut["kind"] == "commit_ts" else None),
        "partitions": partitions,
        "tables": tables,
        # delta/iceberg outputs: each table's location, version and cut (docs/lakehouse.md)
        "lakehouse": [{k: t.get(k) for k in ("table", "location", "version", "cut_commit_ts", "rows", "unchanged",
                                              "dropped", "mode", "since")} for t in (out.get("lakehouse") or {}).values()],
        "quarantine": {"records": manifest["quarantine"]["records"], "location": manifest["quarantine"]["location"],
                       "reasons": manifest["quarantine"].get("reasons") or []},
        "produced": produced(out),
        # a scheduled interval's Kafka offset window: [from, to) per source partition
        "kafka_window": staged.get("kafka_window"),
        "warnings": manifest.get("warnings", []),
        # holes in the source partitions' Kafka offsets (manifests before issue 12 have none)
        "gaps": manifest.get("gaps") or {"count": 0, "missing_offsets": 0, "listed": []},
        "status": "validated",
    }
