"""Stage 4, schema history (driver): the DDL applied in timeline order (`ddl.SchemaHistory`,
starting from --schema, a base snapshot's or the lake tables' schemas), tables inferred from
the stream where no DDL describes them, schema conflicts, and row events of tables missing at
their point (or unknown, with --require-schema) moved to quarantine, in the events and the
counts. In: the run context, `context.Decoded`, `context.Tagged`. Out: `context.History`."""

from __future__ import annotations

from spark_apps import manifest as manifest_mod
from spark_apps import schema_files, storage
from spark_apps.contract import QUARANTINE, Kind, Status
from spark_apps.ddl import DDLError, SchemaHistory
from spark_apps.stages.context import Decoded, History, ReplayError, RunContext, Tagged
from spark_apps.stages import summary as summary_mod


def starting_schemas(uri: str) -> schema_files.StartingSchemas:
    try:
        return schema_files.load(uri)
    except schema_files.SchemaFileError as e:
        raise ReplayError(f"--schema {e}") from e



def _stream_shapes(shapes: list[dict], dictionary: dict | None) -> list[dict]:
    """`summary.summarise`'s column sets as `SchemaHistory.use_stream_schemas` takes them: each with
    its columns (name, type, flags) in the order of the message (the schema dictionary's
    column list of its first event)."""
    out = []
    for shape in shapes:
        entry = (dictionary or {}).get(shape.get("schema"))
        if entry is not None:
            names, types, flags = entry
            columns = list(zip(names, types, flags))
        else:
            columns = [(c["name"], c["type"], 0) for c in shape["columns"]]
        out.append({"database": shape["database"], "table": shape["table"], "columns": columns,
                    "first": list(shape["first"] or []), "last": list(shape["last"] or []), "events": shape["events"]})
    return out


def _apply_ddl(history: SchemaHistory, rows: list[dict], protocol: str) -> tuple[list, list]:
    """Apply the applied DDL events (`summary.summarise`'s `ddl`, in timeline order) to the history."""
    applied, failures = [], []
    for row in rows:
        try:
            outcome = history.apply(row["ddl_query"], list(row["timeline"]), row["database"])
            applied.append({"commit_ts": row["commit_ts"], "query": row["ddl_query"], "applied": outcome})
        except DDLError as e:
            failures.append({**{k: row[k] for k in ("object", "line", "topic", "partition", "offset")},
                             "protocol": protocol, "error_stage": "ddl",
                             "error": f"{protocol}: DDL not applied ({e}): {row['ddl_query']}"})
    return applied, failures


def unknown_tables(counts: list[dict], history: SchemaHistory) -> list[tuple]:
    """--require-schema: the (database, table) of the applied row events in `counts`
    (`summary.summarise`'s) that neither the archive's DDL nor --schema (nor a base snapshot)
    describes, sorted."""
    tables = {(c["database"], c["table"]) for c in counts if c["status"] == Status.APPLIED and c["kind"] == Kind.ROW}
    return sorted(((d, t) for d, t in tables if not history.is_described(d, t or "")),
                  key=lambda k: (k[0] or "", k[1] or ""))


def _quarantine_unknown_tables(tagged, counts: list[dict], unknown: list[tuple]):
    """--require-schema: row events of the `unknown` tables (`unknown_tables`) are quarantined
    instead of read with their in-band schema (`transforms.mark_unknown_tables`). Returns the
    events and the counts (`summary.summarise`'s) with those rows moved to quarantined."""
    from spark_apps import transforms as T

    if not unknown:
        return tagged, counts
    tagged = T.mark_unknown_tables(tagged, unknown)
    # the same move in the counts (a null database or table matches no condition above)
    moved = {(d, t) for d, t in unknown if d is not None and t is not None}
    merged: dict = {}
    for c in counts:
        if c["status"] == Status.APPLIED and c["kind"] == Kind.ROW and (c["database"], c["table"]) in moved:
            c = {**c, "status": Status.QUARANTINED, "error_stage": T.UNKNOWN_TABLE_STAGE}
        key = (c["status"], c["kind"], c["database"], c["table"], c["error_stage"], c.get("bucket"))
        if key in merged:
            m = merged[key]
            m["events"] += c["events"]
            for name, pick in (("min_commit_ts", min), ("max_commit_ts", max)):
                values = [v for v in (m[name], c[name]) if v is not None]
                m[name] = pick(values) if values else None
        else:
            merged[key] = dict(c)
    return tagged, list(merged.values())



def _quarantine_missing_tables(spark, tagged, counts: list[dict], history: SchemaHistory, bucket,
                               row_ranges: dict):
    """Row events of a table that does not exist at their point (`SchemaHistory.existence`,
    `transforms.mark_missing_tables`) are quarantined, and the counts moved with them: one
    small aggregate over the marked events (grouped like `summary.summarise`'s counts). Nothing to do
    when the applied rows of every name lie within one stretch of it (`row_ranges`: per
    lower-case (database, table), the lowest and highest point, `summary.summarise`'s)."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.local_data import local_frame

    stretches = history.existence()
    if not _rows_may_lack_tables(stretches, row_ranges):
        return tagged, counts  # no row can be outside its table: no job, no join
    frame = local_frame(spark, [(d, t, list(after), None if until is None else list(until), d, t, None, None)
                                for d, t, after, until in stretches],
                        "database string, table string, after array<bigint>, until array<bigint>, "
                        "final_database string, final_table string, key_aliases array<array<string>>, "
                        f"row_columns {T.ROW_COLUMNS_TYPE}")
    names = sorted({(d, t) for d, t, _, _ in stretches})
    if len(names) > T.plan_literal_max():  # many tables: a broadcast join, not a search of a literal per row
        names = local_frame(spark, names, "database string, table string")
    tagged = T.mark_missing_tables(tagged, frame, names)
    bucket = F.lit(None).cast("int") if bucket is None else bucket
    moved = [r.asDict() for r in tagged.where(
        (F.col("status") == Status.QUARANTINED) & (F.col("error_stage") == T.MISSING_TABLE_STAGE)).groupBy(
        "database", "table", bucket.alias("bucket")).agg(
        F.count(F.lit(1)).alias("events"), F.min("commit_ts").alias("min_commit_ts"),
        F.max("commit_ts").alias("max_commit_ts")).collect()]
    return tagged, _moved_counts(counts, moved, T.MISSING_TABLE_STAGE)


def _rows_may_lack_tables(stretches: list[tuple], row_ranges: dict) -> bool:
    """Whether some name's applied row events reach outside every one stretch of it (the
    missing-table check is needed); False when each name's rows lie within one stretch."""
    from spark_apps.engine_v2 import may_lack_table

    return any(may_lack_table(d, t, stretches, row_ranges) for d, t, _, _ in stretches)


def _moved_counts(counts: list[dict], moved: list[dict], stage: str) -> list[dict]:
    """`counts` (`summary.summarise`'s) with the `moved` applied row events (per database, table,
    bucket: events, lowest and highest commit ts) counted as quarantined at `stage`."""
    result = [dict(c) for c in counts]
    for m in moved:
        for c in result:
            if (c["status"] == Status.APPLIED and c["kind"] == Kind.ROW and c["database"] == m["database"]
                    and c["table"] == m["table"] and c.get("bucket") == m["bucket"]):
                c["events"] -= m["events"]
                break
        result.append({"status": Status.QUARANTINED, "kind": Kind.ROW, "database": m["database"],
                       "table": m["table"], "error_stage": stage, "bucket": m["bucket"], "events": m["events"],
                       "min_commit_ts": m["min_commit_ts"], "max_commit_ts": m["max_commit_ts"]})
    return [c for c in result if c["events"]]


def _schema_conflicts(history: SchemaHistory, shapes: list[dict]) -> list[str]:
    """Distinct column sets the applied rows carry (`summary.summarise`'s `shapes`), compared with the
    DDL history."""
    from spark_apps.ddl import schema_conflicts

    shapes = sorted(shapes, key=lambda r: (r["database"] or "", r["table"] or "", list(r["first"] or []), str(r["columns"])))
    return schema_conflicts(history, [
        {"database": r["database"], "table": r["table"], "columns": [(c["name"], c["type"]) for c in r["columns"]],
         "first": r["first"], "last": r["last"], "events": r["events"]} for r in shapes])



def has_keyless(hist: History) -> bool:
    """Whether a table without a key takes part in the run (its applied rows name no key
    columns, or the history leaves a table keyless): the last change per key then folds the
    copies of identical rows (transforms.latest_per_key's `multiset`)."""
    return bool(hist.summary["keyless"]) or any(i.key_aliases == () for i in hist.history.intervals())


def initial_history(ctx: RunContext) -> tuple[SchemaHistory, schema_files.StartingSchemas | None]:
    """The DDL history before the archive's DDL: --schema, a base snapshot's and the lake
    tables' schemas; and the --schema files read."""
    args, base = ctx.args, ctx.base
    starting = starting_schemas(args.schema) if args.schema else None
    initial = "\n".join([ctx.base_export.initial_schemas() if ctx.base_export is not None else "",
                         starting.initial_sql() if starting else "",
                         ";\n".join(base.get("schemas", [])) if base else "",
                         ";\n".join(getattr(args, "lake_schemas", None) or [])])
    return SchemaHistory(initial), starting


def schema_history(ctx: RunContext, decoded: Decoded, tagged: Tagged) -> History:
    """The DDL history, applied on the driver in timeline order (DDL events are few), from one
    action over the tagged events (`history_over`)."""
    return history_over(ctx, decoded, tagged.tagged, tagged.dictionary)


def history_over(ctx: RunContext, decoded: Decoded, events, dictionary) -> History:
    """The DDL history from one action over `events` (every event once, with its status:
    `summary.summarise`: the counts, also per commit-time bucket for the manifest's timeline,
    the applied DDL events, and the column sets of the applied rows when a schema can be known
    to compare them with); `dictionary`: transforms.plan_dictionary."""
    from spark_apps import transforms as T

    args = ctx.args
    quarantine_base = storage.join(ctx.staging, QUARANTINE)
    history, starting = initial_history(ctx)
    frame = manifest_mod.timeline_frame(decoded.partition_stats, args.since, args.upper, T.TIMELINE_BUCKETS)
    bucket = T.commit_bucket(*frame) if frame else None
    summary = summary_mod.summarise(events, shapes=history.known or bool(decoded.ddl_statements),
                                    bucket=bucket, dictionary=decoded.schema_dictionary,
                                    sources=args.emit == "topics")
    # tables no DDL (nor --schema) describes get the schema their row events carry when a DDL
    # needs their columns (ddl.SchemaHistory.use_stream_schemas)
    history.use_stream_schemas(_stream_shapes(summary["shapes"], decoded.schema_dictionary))
    ddl_log, ddl_failures = _apply_ddl(history, summary["ddl"], args.protocol)
    for inferred in history.inferred:
        ctx.say("schema of %s taken from the stream: %s", inferred["table"], inferred["from"])
    if ddl_failures:
        manifest_mod.write_ddl_quarantine(quarantine_base, ddl_failures)
    conflicts = _schema_conflicts(history, summary["shapes"]) if history.known else []
    if starting and starting.versions:
        ctx.say("--schema: %d objects, %d TiCDC storage-sink table versions cross-checked", starting.sources,
                len(starting.versions))
        conflicts += schema_files.version_conflicts(history, starting.versions)
    for conflict in conflicts[:5]:
        ctx.say("schema conflict: %s", conflict, warn=True)
    counts = summary["counts"]
    if args.emit != "topics":  # a topic carries every applied event, whatever its table's fate
        events, counts = _quarantine_missing_tables(ctx.spark, events, counts, history, bucket,
                                                    summary["row_ranges"])
    unknown = unknown_tables(counts, history) if args.require_schema else []
    events, counts = _quarantine_unknown_tables(events, counts, unknown)
    return History(history=history, summary=summary, frame=frame, ddl_log=ddl_log, ddl_failures=ddl_failures,
                   conflicts=conflicts, counts=counts, lean=events, dictionary=dictionary, unknown=unknown)
