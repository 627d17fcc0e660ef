"""The run's manifest (counts, cut, options, objects) and the commit of a staged output.

Counts reconcile: every decoded event (and every record that could not be decoded) has
exactly one status, so `read = applied + duplicate + pending + filtered + quarantined`.
The commit replaces the output as a whole and atomically for readers: `_manifest.json` is a
small pointer, written in one PUT, that lists the output's objects; readers follow it (see
`commit`). Stale objects of earlier runs (those their manifest lists) are deleted, anything
else is left and reported.
"""

from __future__ import annotations

import datetime as dt
import gzip
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson

from . import masking, storage
from .contract import (  # noqa: F401  (the names and the document are the contract's)
    AIRFLOW_STAGING,
    COMMIT_LOG,
    MANIFEST,
    MANIFEST_VERSION,
    QUARANTINE,
    STAGING,
    Kind,
    ManifestError,
    Status,
    read_manifest_doc,
)
from .paths import display
from cdc_codecs.tso import physical_ms, to_datetime


class CutError(ValueError):
    pass


def tso_time(ts: int | None) -> str | None:
    if ts is None or ts <= 0:
        return None
    moment = to_datetime(ts)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def compute_cut(partition_stats: list[dict], as_of: int | None) -> dict:
    """The completeness cut: per partition the highest watermark, globally the lowest of
    those. Without watermarks, the archive's end (highest commit ts); without commit ts
    (Canal, OceanBase), everything read."""
    warnings = []
    watermarks = {(s["topic"], s["partition"]): s["watermark"] for s in partition_stats}
    has_commit_ts = any(s["max_commit_ts"] is not None for s in partition_stats)
    if any(w is not None for w in watermarks.values()):
        missing = sorted(f"{display(t)}/{p}" for (t, p), w in watermarks.items() if w is None)
        if missing:
            warnings.append(
                f"partitions without any watermark: {', '.join(missing[:10])}"
                + (" ..." if len(missing) > 10 else "")
                + "; nothing on them is known complete, so the cut is 0")
        cut_ts = 0 if missing else min(watermarks.values())
        lowest = min(((w or 0, f"{display(t)}/{p}") for (t, p), w in watermarks.items()))
        description = f"commit ts {cut_ts} ({tso_time(cut_ts)}), the lowest of {len(watermarks)} partition watermarks (at {lowest[1]})"
        kind = "commit_ts"
    elif has_commit_ts:
        cut_ts = max(s["max_commit_ts"] for s in partition_stats if s["max_commit_ts"] is not None)
        description = f"commit ts {cut_ts} ({tso_time(cut_ts)}), the archive's end (the archive has no watermarks)"
        kind = "commit_ts"
    else:
        cut_ts = None
        description = "the archive's end (the protocol carries no commit ts or watermarks)"
        kind = "archive_end"
    complete_ts = cut_ts
    if as_of is not None:
        if kind != "commit_ts":
            raise CutError("--as-of needs commit ts, and this archive carries none")
        if cut_ts is not None and as_of > cut_ts:
            warnings.append(f"--as-of {as_of} is above the completeness cut {cut_ts}: events between may be missing")
        cut_ts = as_of
        description = f"commit ts {as_of} ({tso_time(as_of)}), from --as-of; complete up to {complete_ts}"
    return {
        "kind": kind,
        "commit_ts": cut_ts,
        "time": tso_time(cut_ts),
        "complete_commit_ts": complete_ts,
        "point": [cut_ts] if cut_ts is not None else None,
        "description": description,
        "warnings": warnings,
    }


def _table_name(database, table) -> str:
    return f"{database or ''}.{table or ''}".strip(".") or "(none)"


@dataclass(frozen=True)
class RunFacts:
    """What the run was asked: its id and request (`args`: ReplayArgs, or what the carry-forward
    renders), the source and output (normalized), when it started (epoch s), the protocols'
    options (the codecs' configs; masked in the manifest) and the --since window."""

    run_id: str
    args: Any
    source: str
    output: str
    started: float
    source_options: dict
    target_protocol: str | None
    target_options: dict
    window: dict | None = None


@dataclass(frozen=True)
class ReadFacts:
    """What the run read: the objects (ObjectInfo; none for Kafka), per-partition statistics,
    the cut (compute_cut), every event's count by status, kind and table, and the holes in the
    source offsets ((listed gaps, count))."""

    objects: list
    partition_stats: list[dict]
    cut: dict
    counts: list[dict]
    gaps: tuple = ((), 0)


@dataclass(frozen=True)
class Outcome:
    """What came of it: the WRITTEN rows of the output and of the quarantine, the DDL applied
    and failed, the rows per table, the tables' CREATE statements, the schema conflicts,
    coverage and inferred schemas."""

    written: list[dict]
    quarantine_objects: list[dict]
    ddl_log: list[dict]
    ddl_failures: list[dict]
    table_rows: list[dict] | None = None
    schemas: Any = ()
    schema_conflicts: Any = ()
    coverage: dict | None = None
    inferred_schemas: Any = ()


def build(run: RunFacts, read: ReadFacts, outcome: Outcome) -> dict:
    """The manifest document (its keys in the order readers and the tests see them)."""
    run_id, args, source, output, started = run.run_id, run.args, run.source, run.output, run.started
    source_options, target_protocol, target_options, window = (run.source_options, run.target_protocol,
                                                                run.target_options, run.window)
    objects, partition_stats, cut, counts, gaps = read.objects, read.partition_stats, read.cut, read.counts, read.gaps
    written, quarantine_objects, ddl_log, ddl_failures = (outcome.written, outcome.quarantine_objects,
                                                          outcome.ddl_log, outcome.ddl_failures)
    table_rows, schemas, schema_conflicts, coverage, inferred_schemas = (
        outcome.table_rows, outcome.schemas, outcome.schema_conflicts, outcome.coverage, outcome.inferred_schemas)
    by_status = defaultdict(int)
    applied_by_kind = defaultdict(int)
    tables = defaultdict(lambda: defaultdict(int))
    ranges: dict = {}
    for row in counts:
        status, kind = row["status"], row["kind"]
        if status != Status.EMPTY:
            by_status[status] += row["events"]
        if status == Status.APPLIED:
            applied_by_kind[kind] += row["events"]
        if kind in (Kind.ROW, Kind.DDL) and row["table"] is not None:
            entry = tables[(row["database"], row["table"])]
            entry[status] += row["events"]
            if status == Status.APPLIED and row["min_commit_ts"] is not None:
                lo, hi = ranges.get((row["database"], row["table"]), (row["min_commit_ts"], row["max_commit_ts"]))
                ranges[(row["database"], row["table"])] = (min(lo, row["min_commit_ts"]), max(hi, row["max_commit_ts"]))
    # DDL that could not be applied moves from applied to quarantined
    by_status[Status.APPLIED] -= len(ddl_failures)
    by_status[Status.QUARANTINED] += len(ddl_failures)
    applied_by_kind[Kind.DDL] -= len(ddl_failures)
    read = sum(by_status.values())
    parts = Status.COUNTED + ((Status.IN_BASE,) if (window or {}).get("base_export") else ())
    data_objects = sorted(written, key=lambda w: w["uri"])  # collected in task order: sorted for reruns
    rows_by_table = {(r["database"], r["table"]): r["rows"] for r in (table_rows or [])}
    first_touch = {(r["database"], r["table"]): {k: r[k] for k in ("keys_first_updated", "keys_first_deleted") if k in r}
                   for r in (table_rows or [])}
    table_list = []
    for key in sorted(set(tables) | set(rows_by_table), key=lambda k: (k[0] or "", k[1] or "")):
        entry = tables.get(key, {})
        lo_hi = ranges.get(key, (None, None))
        table_list.append({
            "database": key[0], "table": key[1],
            **{p: entry.get(p, 0) for p in parts},
            "min_commit_ts": lo_hi[0], "max_commit_ts": lo_hi[1],
            "rows": rows_by_table.get(key),
            **first_touch.get(key, {}),
        })
    all_min = [t["min_commit_ts"] for t in table_list if t["min_commit_ts"] is not None]
    all_max = [t["max_commit_ts"] for t in table_list if t["max_commit_ts"] is not None]
    finished = time.time()
    gap_list, gap_count = gaps
    gap_warnings = [] if not gap_count else [
        f"{gap_count} holes in the source offsets ({sum(_missing(p) for p in partition_stats):,} offsets missing), "
        "first " + ", ".join(f"{display(g['topic'])}/{g['partition']} {g['from']}..{g['to']}" for g in list(gap_list)[:3])
        + ": a missing or truncated archive object? (gaps in the manifest)"]
    return {
        "version": MANIFEST_VERSION,
        "run_id": run_id,
        "started_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
        "finished_at": dt.datetime.fromtimestamp(finished, dt.timezone.utc).isoformat(),
        "duration_s": round(finished - started, 1),
        "source": {"uri": source, "protocol": args.protocol, "options": masking.mask_options(source_options),
                   "objects": len(objects), "bytes": sum(o.size for o in objects),
                   **({"starting_offsets": args.starting_offsets, "ending_offsets": args.ending_offsets}
                      if source.startswith("kafka://") else {})},
        "output": {
            "uri": output, "emit": args.emit, "format": args.output_format,
            "protocol": target_protocol if args.output_format == "kafka" else None,
            "options": masking.mask_options(target_options) if args.output_format == "kafka" else {},
            "topic_template": args.target_topic, "dispatcher": args.dispatcher,
            "tables_filter": args.table_patterns(),
            "objects": data_objects,
            "records": sum(w["records"] for w in data_objects),
            "rows": sum(w["rows"] for w in data_objects),
            "topics": sorted({w["topic"] for w in data_objects}) if args.output_format == "kafka" else [],
            # Parquet: values a typed column could not hold (zero dates), written as null
            "nulled": sum(w["events"] for w in data_objects) if args.output_format != "kafka" else 0,
        },
        "window": window or {},
        "schemas": list(schemas),
        "cut": {k: v for k, v in cut.items() if k != "point"},
        "partitions": partition_stats,
        "counts": {
            # records with Kafka coordinates, plus archive lines that were not records at all
            "records": sum(p["records"] for p in partition_stats) + sum(
                r["events"] for r in counts if r["status"] == Status.QUARANTINED and r.get("error_stage") == "archive"),
            "read": read,
            **{p: by_status.get(p, 0) for p in parts},
            "reconciled": read == sum(by_status.get(p, 0) for p in parts),
            # applied events by kind: DDL and watermarks are applied (to the schema, to the
            # cut) but are not table rows
            "applied_by_kind": {k: applied_by_kind.get(k, 0) for k in Kind.DECODED},
            # distinct (topic, partition, offset): a record read twice (overlapping archive
            # objects) is one offset; its second copy's events are counted as duplicate
            "offsets": sum(p.get("offsets") or 0 for p in partition_stats),
        },
        "gaps": {
            "count": gap_count,
            "missing_offsets": sum(_missing(p) for p in partition_stats),
            "listed": [{"topic": g["topic"], "partition": g["partition"], "from": g["from"], "to": g["to"],
                        **({"object": g["object"]} if g.get("object") else {})}  # a layout's missing object
                       for g in gap_list],
        },
        "commit_ts_range": [min(all_min) if all_min else None, max(all_max) if all_max else None],
        "tables": table_list,
        "ddl": ddl_log,
        "quarantine": {
            "location": storage.join(output, QUARANTINE),
            "records": by_status.get(Status.QUARANTINED, 0),
            "objects": sorted(quarantine_objects, key=lambda w: w["uri"]),
            "ddl": ddl_failures,
        },
        "schema_conflicts": list(schema_conflicts),
        # tables no DDL nor --schema described whose schema was taken from their row events
        "inferred_schemas": list(inferred_schemas),
        # snapshot/history: tables whose rows the archive did not all carry (it began after them)
        "coverage": coverage,
        "timeline": None,  # the run adds it (timeline())
        "warnings": list(cut.get("warnings", [])) + gap_warnings + ([
            "the output holds only the rows the archive changed for " + ", ".join(coverage["changed_rows_only"])
            + " (created before the archive began; give --base-snapshot for every row)"]
            if coverage and coverage["changed_rows_only"] else []) + [f"schema conflict: {c}" for c in list(schema_conflicts)[:5]]
        + ([f"{len(schema_conflicts) - 5} more schema conflicts in the manifest"] if len(schema_conflicts) > 5 else []),
    }


def timeline_frame(partition_stats: list[dict], since: int | None, upper: int | None,
                   buckets: int) -> tuple[int, int] | None:
    """(first ms, bucket width ms) of the timeline: the window when the run has one, else the
    commit times read; None when nothing carries a commit ts."""
    lows = [p["min_commit_ts"] for p in partition_stats if p.get("min_commit_ts")]
    highs = [p["max_commit_ts"] for p in partition_stats if p.get("max_commit_ts")]
    if since is not None and upper is not None:
        lo, hi = physical_ms(since + 1), physical_ms(upper) + 1
    elif lows and highs:
        lo, hi = physical_ms(min(lows)), physical_ms(max(highs)) + 1
    else:
        return None
    return lo, max(1, -(-(hi - lo) // buckets))


def timeline(counts: list[dict], frame: tuple[int, int] | None, buckets: int) -> dict | None:
    """Events read per table and commit-time bucket, from the counts (rows carry `bucket`), for
    the monitoring page's chart: computed by the run itself, never by reading the archive again."""
    if frame is None:
        return None
    tables: dict[str, list[int]] = {}
    for row in counts:
        if row.get("bucket") is None:
            continue
        name = _table_name(row["database"], row["table"])
        tables.setdefault(name, [0] * buckets)[row["bucket"]] += row["events"]
    if not tables:
        return None
    return {"start_ms": frame[0], "bucket_ms": frame[1], "buckets": buckets, "tables": dict(sorted(tables.items())),
            "sampled": 1.0}


def _missing(stats: dict) -> int:
    """Offsets between a partition's lowest and highest that no record holds."""
    from .gaps import missing_offsets

    return missing_offsets(stats)


def write_ddl_quarantine(base: str, failures: list[dict]) -> None:
    data = gzip.compress(b"".join(orjson.dumps(f) + b"\n" for f in failures), mtime=0)
    storage.write_bytes(storage.join(base, "ddl.jsonl.gz"), data)


# names below _staging/ that are not a run's staging (the contract's AIRFLOW_STAGING; the
# produced-partition markers start with _)
_RESERVED_STAGING = (AIRFLOW_STAGING.split("/", 1)[1],)
KILL_ENV = "CDC_REPLAY_TEST_KILL_AT"
COMMIT_STEPS = ("logged", "switched", "copying", "copied", "final", "cleaning", "cleaned")


def _step(name: str) -> None:
    """Test hook: SIGKILL this process at a named commit step (tests/test_reliability_matrix.py
    shows a reader sees the old or the new complete output whatever step a run dies at)."""
    import os

    if os.environ.get(KILL_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def owned_objects(output: str) -> set[str]:
    """Paths (relative to `output`) that earlier runs of ours committed there: listed in the
    last manifest, plus, after a commit that was interrupted, in its commit log."""
    owned: set[str] = set()
    for name in (MANIFEST, COMMIT_LOG):
        uri = storage.join(output, name)
        if not storage.exists(uri):
            continue
        try:
            doc = orjson.loads(storage.read_bytes(uri))
        except (orjson.JSONDecodeError, OSError):
            continue
        if "committed" in doc:
            owned.update(doc["committed"])
            continue
        # manifests written before the list existed: the objects they name
        entries = doc.get("output", {}).get("objects", []) + doc.get("quarantine", {}).get("objects", [])
        for entry in entries:
            try:
                owned.add(storage.relative(entry["uri"], output))
            except (KeyError, ValueError):
                pass
        if doc.get("quarantine", {}).get("ddl"):
            owned.add("_quarantine/ddl.jsonl.gz")
    return owned


def _write_manifest(output: str, manifest: dict) -> None:
    storage.write_bytes(storage.join(output, MANIFEST), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def commit(output: str, staging: str, manifest: dict, replace: bool = True) -> None:
    """Make the staged objects the output. `_manifest.json` is the pointer readers follow (it
    lists every object of the output); it is switched in one PUT, so a reader that follows it
    sees the previous complete output or the new one, never a mix (docs/reliability.md):

    1. `_commit.json` lists every object of ours (the previous ones and the new ones), so a
       kill from here on still lets the next run clean them;
    2. the manifest switches to the new output where it is staged (`_staging/<run>/`);
    3. the staged objects are copied to their final names (server-side on S3, hard links
       locally) — readers still follow the manifest to the staging copies;
    4. the manifest switches to the final names;
    5. the previous run's objects no longer produced, the commit log, this run's staging
       and what killed runs left in `_staging/` are deleted.

    Only objects an earlier run of ours wrote are deleted; anything else under the output is
    left alone and reported in the manifest's `foreign_objects` and warnings. `replace=False`
    (lakehouse tables, committed by their own format beside our objects) deletes only the
    previous quarantine of ours and reports nothing else. A run that finds the manifest still
    pointing at a staging area (killed between 2 and 4) finishes that commit first
    (`finish_interrupted`)."""
    from . import lease

    lease.assert_held(output)  # one run at a time: this run still holds the output (spark_apps.lease)
    run_staging = storage.relative(staging, output)
    previous = owned_objects(output)
    targets = {}
    for info in storage.list_objects(staging):
        rel = storage.relative(info.uri, staging)
        targets[info.uri] = rel[len("data/"):] if rel.startswith("data/") else rel
    committed = sorted(targets.values())
    storage.write_bytes(storage.join(output, COMMIT_LOG), orjson.dumps(
        {"run_id": manifest["run_id"], "staging": run_staging, "committed": sorted(previous | set(committed))}))
    _step("logged")
    entries = manifest["output"]["objects"] + manifest["quarantine"]["objects"]
    manifest["committed"] = sorted(previous | set(committed))
    manifest["commit"] = {"staging": run_staging, "replace": replace}
    manifest.setdefault("foreign_objects", [])
    _write_manifest(output, manifest)  # the switch: the new output, where it is staged
    _step("switched")
    final = {}
    for i, (uri, rel) in enumerate(sorted(targets.items())):
        final[uri] = storage.join(output, rel)
        storage.copy(uri, final[uri])
        if i == 0:
            _step("copying")
    _step("copied")
    keep = set(committed) | {MANIFEST, COMMIT_LOG, lease.LEASE}
    stale, foreign = [], []
    for info in storage.list_objects(output):
        rel = storage.relative(info.uri, output)
        if rel in keep or rel.startswith(STAGING + "/"):
            continue
        if not replace:
            if rel in previous and rel.startswith("_quarantine/"):
                stale.append(info.uri)
        elif rel in previous:
            stale.append(info.uri)
        else:
            foreign.append(rel)
    for entry in entries:
        entry["uri"] = final.get(entry["uri"], entry["uri"])
    manifest["committed"] = committed
    del manifest["commit"]
    manifest["foreign_objects"] = foreign
    manifest["warnings"] = [w for w in manifest["warnings"] if not w.startswith(_FOREIGN_WARNING)]
    if foreign:
        manifest["warnings"].append(
            f"{len(foreign)}{_FOREIGN_WARNING}" + ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else ""))
    _write_manifest(output, manifest)  # the switch to the final names
    _step("final")
    for i, uri in enumerate(stale):
        storage.delete(uri)
        if i == 0:
            _step("cleaning")
    storage.delete(storage.join(output, COMMIT_LOG))
    storage.delete_prefix(staging)
    _delete_leftover_staging(output)
    _step("cleaned")


_FOREIGN_WARNING = " objects under the output were not written by cdc-replay and were left in place: "


def _delete_leftover_staging(output: str) -> None:
    """What killed runs left in `<output>/_staging/<run>/` (the manifest no longer names it).
    `_staging/` is cdc-replay's own: the Airflow DAGs' `_staging/airflow/` and names starting
    with `_` (Kafka markers) are kept."""
    root = storage.join(output, STAGING)
    for info in storage.list_objects(root):
        name = storage.relative(info.uri, root).split("/", 1)[0]
        if name not in _RESERVED_STAGING and not name.startswith("_") and "/" in storage.relative(info.uri, root):
            storage.delete(info.uri)
    if not storage.is_s3(root):
        import os
        import shutil

        for name in os.listdir(root) if os.path.isdir(root) else ():
            path = os.path.join(root, name)
            if name not in _RESERVED_STAGING and not name.startswith("_") and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
        try:
            os.rmdir(root)
        except OSError:
            pass


def finish_interrupted(output: str) -> bool:
    """A commit killed after the manifest switched to its staging area (steps 2-4 of `commit`)
    is finished: its staged objects get their final names and the manifest follows. Run before
    a run writes its own staging (a retry with the same run id stages in the same place)."""
    uri = storage.join(output, MANIFEST)
    if not storage.exists(uri):
        return False
    try:
        manifest = orjson.loads(storage.read_bytes(uri))
    except (orjson.JSONDecodeError, OSError):
        return False
    pending = manifest.get("commit")
    if not pending:
        return False
    commit(output, storage.join(output, pending["staging"]), manifest, replace=pending.get("replace", True))
    return True


def current_objects(manifest: dict) -> list:
    """The output's data objects as the manifest lists them (readers follow this list, never
    a listing of the prefix, which may hold a commit in progress or leftovers)."""
    return [storage.ObjectInfo(e["uri"], e.get("bytes") or 0) for e in manifest["output"]["objects"]]


def read_manifest(output: str) -> dict:
    """The output's manifest, of this version or an older one (contract.read_manifest_doc)."""
    return read_manifest_doc(orjson.loads(storage.read_bytes(storage.join(storage.normalize(output), MANIFEST))))


def _n(value) -> str:
    return "-" if value is None else f"{value:,}"


def read_twice(manifest: dict) -> int:
    """Records read more than once (overlapping archive objects): per partition, its records
    with an offset less its distinct offsets. Not `counts.records - counts.offsets`: the
    records count also holds archive lines that are not records (no topic, partition or
    offset: quarantined at stage `archive`), which overlap nothing."""
    return sum(max(0, (p.get("records") or 0) - p["offsets"]) for p in manifest.get("partitions") or ()
               if p.get("offsets") is not None and p.get("min_offset") is not None and p.get("topic") is not None)


def summary(manifest: dict) -> str:
    """A readable account of the run."""
    c = manifest["counts"]
    src, out, cut = manifest["source"], manifest["output"], manifest["cut"]
    lines = [
        f"cdc-replay run {manifest['run_id']} ({manifest['duration_s']} s): {out['emit']} of {src['uri']} "
        f"[{src['protocol']}] -> {out['uri']} [{out.get('protocol') or out.get('format') or '-'}]",
        f"  objects read     {src['objects']:,} ({src['bytes'] / 1e6:.1f} MB), {c['records']:,} records"
        + (f" ({read_twice(manifest):,} of them read twice from overlapping objects)"
           if read_twice(manifest) else ""),
        f"  events read      {c['read']:,} = applied {c['applied']:,} + deduplicated {c['duplicate']:,} "
        f"+ pending {c['pending']:,} + filtered {c['filtered']:,} + quarantined {c['quarantined']:,}"
        + (f" + in the base export {c['in_base']:,}" if Status.IN_BASE in c else "")
        + f"   [{'reconciled' if c['reconciled'] else 'DOES NOT RECONCILE'}]",
        f"  cut              {cut['description']}",
    ]
    by_kind = c.get("applied_by_kind")
    if by_kind and (by_kind["ddl"] or by_kind["watermark"]):
        lines.insert(3, f"  applied          {c['applied']:,} = {by_kind['row']:,} row changes + {by_kind['ddl']:,} DDL "
                        f"+ {by_kind['watermark']:,} watermarks (DDL and watermarks shape the schema and the cut; "
                        "they are not table rows)")
    lo, hi = manifest["commit_ts_range"]
    if lo is not None:
        lines.append(f"  commit ts range  {lo} .. {hi}  ({tso_time(lo)} .. {tso_time(hi)})")
    # a table whose every event --tables filtered out is not part of the output: named once, apart
    excluded = [t for t in manifest["tables"] if t.get("filtered") and t.get("rows") is None
                and not any(t.get(k) for k in (Status.APPLIED, Status.DUPLICATE, Status.PENDING, Status.QUARANTINED))]
    replayed = [t for t in manifest["tables"] if t not in excluded]
    if replayed:
        lines.append("  tables")
        width = max(len(_shown_table(t)) for t in replayed)
        for t in replayed:
            rows = f"{_n(t['rows'])} rows, " if out["emit"] == "snapshot" else ""
            lines.append(
                f"    {_shown_table(t).ljust(width)}  {rows}{t['applied']:,} events applied, "
                f"{t['duplicate']:,} duplicate, {t['pending']:,} pending")
    if excluded:
        names = ", ".join(_shown_table(t) for t in excluded)
        lines.append(f"  filtered out     {len(excluded)} tables (--tables), {sum(t['filtered'] for t in excluded):,} "
                     f"events: {names}")
    if src["uri"].startswith("kafka://"):
        lines[1] = f"  read from Kafka  {c['records']:,} records in {len(manifest['partitions'])} partitions"
    if out.get("kafka"):
        k = out["kafka"]
        skipped = f"; {k['skipped_records']:,} records in {len(k['skipped'])} partitions already produced by an " \
                  f"earlier run of this replay (skipped)" if k["skipped"] else ""
        lines.append(f"  produced         {out['records']:,} records ({out['rows']:,} rows) into {len(out['objects'])} "
                     f"partitions, topics {_topics(out['topics'])}, at {out['uri']}{skipped}; manifest at "
                     f"{k['manifest_uri']}")
    elif out.get("format") in ("delta", "iceberg"):
        lake = sorted((out.get("lakehouse") or {}).items())
        name = {"delta": "Delta", "iceberg": "Iceberg"}[out["format"]]
        lines.append(f"  output           {out.get('rows', 0):,} rows in {len(lake)} {name} tables under {out['uri']}")
        width = max((len(str(t.get("table") or key)) for key, t in lake), default=0)
        for key, t in lake:
            rows = f", {t['rows']:,} rows" if isinstance(t.get("rows"), int) else ""
            lines.append(f"    {str(t.get('table') or key).ljust(width)}  version {t.get('version', '-')}{rows} "
                         f"at {t.get('location') or '-'}")
    elif out.get("format", "kafka") == "parquet":
        nulled = f"; {out['nulled']:,} values nulled (the type could not hold them)" if out.get("nulled") else ""
        lines.append(f"  output           {out['rows']:,} rows in {len(out['objects'])} Parquet files, one dataset per "
                     f"table under {out['uri']}{nulled}")
    else:
        lines.append(
            f"  output           {out['records']:,} records ({out['rows']:,} rows) in {len(out['objects'])} objects, "
            f"topics {_topics(out['topics'])}, at {out['uri']}")
    window = manifest.get("window") or {}
    if window.get("since") is not None:
        base = f" on top of {window['base_snapshot']}" if window.get("base_snapshot") else ""
        lines.append(f"  window           commit ts ({window['since']}, {cut['commit_ts']}]  "
                     f"({tso_time(window['since'])} .. {tso_time(cut['commit_ts'])}){base}")
    if window.get("base_export"):
        lines.append(f"  base export      {window['base_export']} ({window.get('base_position')}): its rows start the "
                     f"snapshot, {c.get('in_base', 0):,} archive events it already holds skipped")
        if window.get("base_timestamps_converted"):
            lines.append(f"  base TIMESTAMPs  converted from {window['base_time_zone']} to the archive's "
                         f"{window['archive_time_zone']}")
        if (window.get("base_start") or {}).get("sink_table_version"):
            lines.append(f"  base start       {window['base_start']['sink_table_version']} storage-sink table(s) shown "
                         "to continue the export by their table version and first date directories")
    gaps = manifest.get("gaps") or {}
    if gaps.get("count"):
        listed = gaps["listed"]
        lines.append(f"  offset gaps      {gaps['count']:,} holes, {gaps['missing_offsets']:,} offsets missing"
                     + ("" if len(listed) == gaps["count"] else f" (first {len(listed):,} listed in the manifest)"))
        for g in listed[:10]:
            lines.append(f"    {display(g['topic'])}/{g['partition']}  offsets {g['from']:,} .. {g['to']:,}")
        if len(listed) > 10:
            lines.append(f"    ... {gaps['count'] - 10:,} more")
    q = manifest["quarantine"]
    if q["records"]:
        lines.append(f"  quarantine       {q['records']:,} records at {q['location']}")
        for r in (q.get("reasons") or [])[:5]:
            where = r["sample"]
            lines.append(f"    {r['records']:,} x [{r['stage']}] {r['reason']} (first: {where.get('object') or '-'}"
                         + (f" line {where['line']}" if where.get("line") is not None else "")
                         + (f", offset {where['offset']}" if where.get("offset") is not None else "") + ")")
    decoder = manifest.get("decoder") or {}
    if decoder.get("executors"):  # what the decode tasks ran, as they reported it
        lines.append(f"  decoder          {decoder['path']} ({src['protocol']}), as the decode tasks reported:")
        lines.extend(f"    {line}" for line in decoder_lines(decoder))
    for warning in manifest["warnings"]:
        lines.append(f"  WARNING          {warning}")
    return "\n".join(map(one_line, lines))


def _shown_table(t: dict) -> str:
    return f"{display(t['database'] or '')}.{display(t['table'] or '')}".strip(".") or "(none)"


def _topics(topics: list) -> str:
    return ", ".join(display(t) for t in topics) or "-"


def one_line(text: str) -> str:
    """A line of the summary as one line, whatever a name or message in it holds (control and
    line-breaking characters as escapes)."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else display(ch) for ch in text)


def decoder_observed(expected: dict, reports: list[dict]) -> dict:
    """The manifest's `decoder`: the driver's `expected` path (kept as `expected`) and reason, replaced by what the
    decode tasks reported (native_decode.task_report) when they did otherwise ("mixed" when tasks
    differed), with `executors`: the reports grouped by path, reason and origin, each with
    its tasks and records. The driver cannot know what loads on an executor; the tasks can."""
    groups: dict[tuple, dict] = {}
    for report in reports:
        key = (report["path"], report["reason"], report["loaded_from"])
        group = groups.setdefault(key, {"path": key[0], "reason": key[1], "loaded_from": key[2], "tasks": 0,
                                        "compiled_records": 0, "python_records": 0})
        group["tasks"] += 1
        group["compiled_records"] += report["compiled_records"] or 0
        group["python_records"] += report["python_records"] or 0
    executors = sorted(groups.values(), key=lambda g: (g["path"], g["reason"], g["loaded_from"] or ""))
    out = {**expected, "expected": expected["path"]}
    if executors:
        paths = {g["path"] for g in executors}
        out["path"] = paths.pop() if len(paths) == 1 else "mixed"
        if out["path"] != expected["path"]:
            out["reason"] = "; ".join(dict.fromkeys(g["reason"] for g in executors if g["path"] != expected["path"]))
    out["executors"] = executors
    return out


_ORIGINS = {"shipped": "the copy shipped with the job", "installed": "the executor's installed copy"}


def decoder_lines(decoder: dict) -> list[str]:
    """One line per group of decode tasks: which decoder, how many records each way, and why."""
    lines = []
    for g in decoder.get("executors") or []:
        tasks = f"{g['tasks']} task{'s' if g['tasks'] != 1 else ''}"
        if g["path"] == "native":
            lines.append(f"compiled ({_ORIGINS.get(g['loaded_from'], g['loaded_from'])}) in {tasks}: "
                         f"{g['compiled_records']:,} records compiled, {g['python_records']:,} left to the Python codec")
        else:
            lines.append(f"Python codec in {tasks}: {g['python_records']:,} records ({g['reason']})")
    return lines


def decoder_fell_back(decoder: dict) -> str | None:
    """The warning when decode tasks that were to run the compiled decoder (the driver chose
    it) ran the Python codec because it does not load there; else None."""
    slow = [g for g in decoder.get("executors") or [] if g["path"] == "python"]
    if decoder.get("expected") != "native" or not slow:
        return None
    tasks, records = sum(g["tasks"] for g in slow), sum(g["python_records"] for g in slow)
    return (f"{tasks} of {sum(g['tasks'] for g in decoder['executors'])} decode tasks ran the Python codec instead of "
            f"the compiled decoder ({records:,} records, several times slower per record): "
            + "; ".join(dict.fromkeys(g["reason"] for g in slow))
            + " (docs/cluster.md; CDC_REPLAY_DECODER=native makes this an error)")
