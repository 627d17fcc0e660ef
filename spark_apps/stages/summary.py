"""Stage 5, summary: the small aggregates of the tagged events from one Spark action (counts,
DDL, column sets, quarantine reasons: `summarise`, which the schema history stage runs), the
quarantine objects written beside the output (`write_quarantine`), and the manifest
(`build_manifest`). In: the run context and the earlier stages' results. Out: the manifest."""

from __future__ import annotations

import functools

from spark_apps import masking, storage
from spark_apps import manifest as manifest_mod
from spark_apps.contract import QUARANTINE, Kind, Status
from spark_apps.ddl import SchemaHistory
from spark_apps.options import ReplayArgs
from spark_apps.stages import base as base_stage
from spark_apps.stages.context import Decoded, History, RunContext, Tagged, Written
from spark_apps.stages.decode import collected


def quarantine_reasons(summary_reasons: list[dict], counts: list[dict], ddl_failures: list[dict]) -> list[dict]:
    """Why records were quarantined, a sample each (the monitoring page and the summary show
    them): the summary's reason classes, plus what the driver moved (--require-schema) or
    refused (DDL) after it, masked like the quarantine objects."""
    reasons = [{**r, "reason": masking.mask_text(r["reason"]),
                "sample": {**r["sample"], "error": masking.mask_text(r["sample"]["error"])}} for r in summary_reasons]
    moved = sum(c["events"] for c in counts if c["status"] == Status.QUARANTINED and c["error_stage"] == "schema")
    if moved and not any(r["stage"] == "schema" for r in reasons):
        reasons.append({"stage": "schema", "reason": "no schema is known for the table (--require-schema)",
                        "records": moved, "sample": {}})
    missing = sum(c["events"] for c in counts if c["status"] == Status.QUARANTINED and c["error_stage"] == "table")
    if missing:
        reasons.append({"stage": "table", "reason": "row events of a table that does not exist at their point in the "
                        "DDL history (dropped, truncated, renamed or not yet created)", "records": missing,
                        "sample": {}})
    if ddl_failures:
        first = ddl_failures[0]
        reasons.append({"stage": "ddl", "reason": "DDL not applied", "records": len(ddl_failures),
                        "sample": {k: first.get(k) for k in ("object", "line", "topic", "partition", "offset", "error")}})
    return reasons



def _export_tables(export) -> set | None:
    """The (database, table) a base export holds, lower case; None without one."""
    return None if export is None else set(export.schema_history().tables)


def base_export_window(export, args) -> dict:
    """What the manifest's window says of a base export: where it is, its producer and position."""
    return {"base_export": args.base_export, "base_producer": export.producer,
            "base_position": export.position.describe(), "base_files": len(export.files),
            **base_stage.time_zone_record(export, args)}


def coverage(args: ReplayArgs, history: SchemaHistory, table_rows, base) -> dict | None:
    """Whether a snapshot holds every row of its tables, or only the rows the archive
    changed: a table whose CREATE (or TRUNCATE) is not in the archive existed before it, and
    its rows the archive never touched are not known (unless a base snapshot holds them)."""
    if table_rows is None or args.emit != "snapshot":  # history and topics are changes by definition
        return None
    partial = []
    if base is None or isinstance(base, set):  # a base export (`base`: its tables) holds every row of its tables
        for r in table_rows:
            key = ((r["database"] or "").lower(), (r["table"] or "").lower())
            schema = history.tables.get(key)
            if (schema is None or not schema.start) and key not in (base or set()):
                partial.append(f"{r['database']}.{r['table']}")
    return {"complete": not partial, "changed_rows_only": sorted(partial)}


SUMMARY_GROUPS_IN_MEMORY = 65536  # per task; each group's buffers are a few counters and rows


def summarise(tagged, shapes: bool, bucket=None, dictionary: dict | None = None, sources: bool = False) -> dict:
    """The small aggregates the run needs from the tagged events, from one Spark action:

    * `counts`: events, lowest and highest commit ts per (status, kind, database, table,
      error_stage, bucket), `bucket` being the commit-time bucket of the timeline (a column,
      transforms.commit_bucket; null without one);
    * `ddl`: the applied DDL events, in timeline order (DDL events are few);
    * `keyless`: the (database, table) of applied row events whose message names no key
      columns (a table without a key, or one the messages do not say: the DDL history may);
    * `shapes` (when `shapes`): the distinct column sets (lower-case name, type) of the applied
      rows' new images per table, with the first and last timeline point and events of each;
    * `sources` and `marks` (when `sources`, else None): the (kind, database, table, source
      topic) of the applied row and DDL events, from which the driver names the topics' output
      topics, and the distinct watermark ts of the applied watermark events (None for one
      without): the topics' watermarks, with no job of their own (`stages/output.py`).

    One group-by whose key also holds the row's column set (applied rows only; null for every
    other event, so the groups stay few); the applied DDL events are collected per group. The
    column set is the image's names and types as they come (field extraction, no per-row
    lambda); lower-casing, sorting and merging the sets is done here on the driver. Collecting
    the DDL (a typed aggregate) lets Spark aggregate in a hash map (ObjectHashAggregate) instead
    of sorting every event by the group key, which the array and struct buffers (`first`,
    `last`, the sample) would force (SortAggregate): docs/engine.md, Part 2."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T

    applied = F.col("status") == Status.APPLIED
    ddl = F.when(applied & (F.col("kind") == Kind.DDL), F.struct(
        "ddl_query", "commit_ts", "timeline", "object", "line", "topic", "partition", "offset", "event_index"))
    # the column set: the new image's schema id (lean rows: names and types are in `dictionary`)
    lean = dictionary is not None
    shape = F.lit(None) if not shapes else F.when(
        applied & (F.col("kind") == Kind.ROW) & F.col("after_schema" if lean else "after").isNotNull(),
        F.col("after_schema") if lean else
        F.struct(F.col("after.name").alias("names"), F.col("after.mysql_type").alias("types")))
    bucket = F.lit(None).cast("int") if bucket is None else bucket
    # quarantined records: their reason class is a key, their first record (by place) a sample
    quarantined = F.col("status") == Status.QUARANTINED
    reason = F.when(quarantined, T.reason_class(F.col("error")))
    sample = F.min_by(F.when(quarantined, F.struct("object", "line", "topic", "partition", "offset", "error")),
                      F.when(quarantined, F.struct("object", "line", "offset")))
    # the source topic of the applied row and DDL events: a key (a table's events come from a
    # topic or few, so the groups stay about as many), null for every other event
    changed = applied & F.col("kind").isin(Kind.ROW, Kind.DDL)
    source = [F.when(changed, F.col("topic")).alias("_source")] if sources else []
    # the watermarks (a set per group: only the applied watermarks' group holds any; the
    # distinct set is what a distinct over them gave, which the driver held to broadcast it)
    watermark = applied & (F.col("kind") == Kind.WATERMARK)
    marks = [F.collect_set(F.when(watermark, F.col("watermark_ts"))).alias("_marks"),
             F.count(F.when(watermark & F.col("watermark_ts").isNull(), 1)).alias("_unmarked")] if sources else []
    aggregated = tagged.groupBy("status", "kind", "database", "table", "error_stage", bucket.alias("_bucket"),
                                shape.alias("_shape"), reason.alias("_reason"), *source).agg(
        F.count(F.lit(1)).alias("events"), F.collect_list(ddl).alias("_ddl"),
        F.min("commit_ts").alias("min_commit_ts"), F.max("commit_ts").alias("max_commit_ts"),
        F.min("timeline").alias("first"), F.max("timeline").alias("last"), sample.alias("_sample"),
        F.count(F.when(applied & (F.col("kind") == Kind.ROW)
                       & (F.size(F.coalesce("key_columns", F.array().cast("array<string>"))) == 0), 1)
                ).alias("_keyless"), *marks,
    )
    # the groups (tables x timeline buckets x column sets) can be thousands per task: past
    # this many (Spark's default is 128) the hash map would fall back to sorting the events;
    # a value given with --spark-conf is kept
    conf = tagged.sparkSession.conf
    threshold = "spark.sql.objectHashAggregate.sortBased.fallbackThreshold"
    given = conf.get(threshold, None) is not None
    if not given:
        conf.set(threshold, str(SUMMARY_GROUPS_IN_MEMORY))
    try:
        groups = collected(aggregated)
    finally:
        if not given:
            conf.unset(threshold)

    def lowest(a, b):
        return b if a is None else a if b is None else min(a, b)

    def highest(a, b):
        return b if a is None else a if b is None else max(a, b)

    counts, by_shape, ddl_rows, reasons = {}, {}, [], {}
    keyless = {(g["database"], g["table"]) for g in groups if g["_keyless"]}
    # per table, the lowest and highest point of its applied row events
    row_ranges: dict = {}
    for g in groups:
        if g["status"] == Status.APPLIED and g["kind"] == Kind.ROW and g["first"] is not None:
            key = ((g["database"] or "").lower(), (g["table"] or "").lower())
            lo, hi = row_ranges.get(key, (g["first"], g["last"]))
            row_ranges[key] = (min(lo, g["first"]), max(hi, g["last"]))
    for g in groups:
        if g["status"] == Status.QUARANTINED and g["_sample"] is not None:
            r = reasons.setdefault((g["error_stage"], g["_reason"]), {"stage": g["error_stage"], "reason": g["_reason"],
                                                                     "records": 0, "sample": g["_sample"]})
            r["records"] += g["events"]
            place = g["_sample"]
            if (place["object"] or "", place["line"] or 0, place["offset"] or 0) < (
                    r["sample"]["object"] or "", r["sample"]["line"] or 0, r["sample"]["offset"] or 0):
                r["sample"] = place
        key = (g["status"], g["kind"], g["database"], g["table"], g["error_stage"], g["_bucket"])
        c = counts.setdefault(key, {"status": key[0], "kind": key[1], "database": key[2], "table": key[3],
                                    "error_stage": key[4], "bucket": key[5], "events": 0, "min_commit_ts": None,
                                    "max_commit_ts": None})
        c["events"] += g["events"]
        c["min_commit_ts"] = lowest(c["min_commit_ts"], g["min_commit_ts"])
        c["max_commit_ts"] = highest(c["max_commit_ts"], g["max_commit_ts"])
        ddl_rows += [{**d, "database": g["database"], "table": g["table"]} for d in g["_ddl"]]
        if g["_shape"] is not None:
            columns = _shape_of(*dictionary[g["_shape"]][:2]) if lean else shape_columns(g["_shape"])
            skey = (g["database"], g["table"], tuple((col["name"], col["type"]) for col in columns))
            s = by_shape.setdefault(skey, {"database": g["database"], "table": g["table"], "columns": columns,
                                           "first": g["first"], "last": g["last"], "events": 0,
                                           "schema": g["_shape"] if lean else None})
            if lean and g["first"] < s["first"]:  # the column list (order, flags) of its first event
                s["schema"] = g["_shape"]
            s["first"], s["last"] = min(s["first"], g["first"]), max(s["last"], g["last"])
            s["events"] += g["events"]

    def nulls_first(value):
        return (value is not None, value if value is not None else 0)

    ddl_rows.sort(key=lambda r: (list(r["timeline"]), nulls_first(r["partition"]), nulls_first(r["offset"]),
                                 nulls_first(r["event_index"])))
    listed = sorted(reasons.values(), key=lambda r: (-r["records"], r["stage"] or "", r["reason"] or ""))
    found = ({(g["kind"], g["database"], g["table"], g["_source"]) for g in groups
              if g["status"] == Status.APPLIED and g["kind"] in (Kind.ROW, Kind.DDL)} if sources else None)
    watermarks = ({m for g in groups for m in g["_marks"]} | ({None} if any(g["_unmarked"] for g in groups) else set())
                  if sources else None)
    return {"counts": list(counts.values()), "ddl": ddl_rows, "shapes": list(by_shape.values()),
            "reasons": listed[:T.REASONS_LISTED], "keyless": keyless, "row_ranges": row_ranges, "sources": found,
            "marks": watermarks}


@functools.lru_cache(maxsize=65536)
def _shape_of(names: tuple, types: tuple) -> list:
    """`shape_columns` of one column list of the dictionary (many summary groups share one)."""
    return shape_columns({"names": names, "types": types})


def shape_columns(shape) -> list:
    """An image's column set as (lower-case name, type) rows in the order Spark's `array_sort`
    of those structs gives (by name, then type; a null field first)."""

    def nulls_first(value):
        return (value is not None, value or "")

    pairs = [((n.lower() if n is not None else None), t) for n, t in zip(shape["names"], shape["types"])]
    return [_column_row(n, t) for n, t in sorted(pairs, key=lambda p: (nulls_first(p[0]), nulls_first(p[1])))]


@functools.lru_cache(maxsize=65536)
def _column_row(name: str | None, mysql_type: str | None):
    """One (name, type) row, shared by every column set that has it (thousands of sets share
    most columns; a Row is an immutable tuple)."""
    from pyspark.sql import Row

    return Row("name", "type")(name, mysql_type)



def write_quarantine(ctx: RunContext, hist: History) -> tuple[list[dict], list[dict]]:
    """The quarantine (records that could not be read or decoded) next to the output, laid
    out by object and line, so a rerun writes byte-identical quarantine objects (no Spark job
    when the counts say nothing is quarantined); and why records were quarantined. Returns
    (quarantine objects, reasons)."""
    from pyspark.sql import functions as F

    from spark_apps.archive_io import write_quarantine_fn
    from spark_apps.schema import WRITTEN_STRUCT

    spark, counts = ctx.spark, hist.counts
    quarantine_base = storage.join(ctx.staging, QUARANTINE)
    objects = [r.asDict() for r in hist.tagged.where(F.col("status") == Status.QUARANTINED)
               .repartition(spark.sparkContext.defaultParallelism, "object")
               .sortWithinPartitions("object", "line", "event_index", "topic", "partition", "offset")
               .mapInArrow(write_quarantine_fn(ctx.args.protocol, quarantine_base), WRITTEN_STRUCT).collect()
               ] if any(c["status"] == Status.QUARANTINED and c["events"] for c in counts) else []
    return objects, quarantine_reasons(hist.summary["reasons"], counts, hist.ddl_failures)


def build_manifest(ctx: RunContext, decoded: Decoded, tagged: Tagged, hist: History, written: Written,
                   quarantine: tuple[list[dict], list[dict]]) -> dict:
    """The run's manifest (manifest.build) with the layout, the decoders observed, the lake
    tables committed, the quarantine reasons and the timeline; committed by the driver."""
    from cdc_codecs import get_codec

    from spark_apps import transforms as T

    args, base, history = ctx.args, ctx.base, hist.history
    quarantine_objects, reasons = quarantine
    manifest = manifest_mod.build(
        manifest_mod.RunFacts(
            run_id=ctx.run_id, args=args, source=ctx.source, output=ctx.output, started=ctx.started,
            source_options=dict(ctx.source_codec.config), target_protocol=ctx.target_protocol,
            target_options=dict(get_codec(ctx.target_protocol, ctx.target_options).config),
            window={"since": args.since, "until": args.upper, "base_snapshot": args.base_snapshot,
                    "base_cut": base["cut"]["commit_ts"] if base else None,
                    **(base_export_window(ctx.base_export, args) if ctx.base_export is not None else {}),
                    **({"base_start": ctx.base_start} if ctx.base_start is not None else {})}),
        manifest_mod.ReadFacts(objects=ctx.objects, partition_stats=decoded.partition_stats, cut=tagged.cut,
                               counts=hist.counts, gaps=(tagged.offset_gaps, tagged.gap_count)),
        manifest_mod.Outcome(
            written=written.objects, quarantine_objects=quarantine_objects, ddl_log=hist.ddl_log,
            ddl_failures=hist.ddl_failures, table_rows=written.table_rows, schemas=history.create_statements(),
            schema_conflicts=hist.conflicts,
            coverage=coverage(args, history, written.table_rows, base or _export_tables(ctx.base_export)),
            inferred_schemas=history.inferred),
    )
    if ctx.layout_plan is not None:
        manifest["layout"] = ctx.layout_plan.manifest()
    manifest["decoder"] = decoded.decoder
    if ctx.base_export is not None:
        manifest["warnings"].extend(w for w in (base_stage.generated_warning(ctx.base_export),
                                                base_stage.timestamp_warning(ctx.base_export, args)) if w)
    if manifest_mod.decoder_fell_back(decoded.decoder):
        manifest["warnings"].append(manifest_mod.decoder_fell_back(decoded.decoder))
    if written.lake_tables is not None:
        manifest["output"]["lakehouse"] = written.lake_tables
    manifest["quarantine"]["reasons"] = reasons
    manifest["timeline"] = manifest_mod.timeline(hist.counts, hist.frame, T.TIMELINE_BUCKETS)
    # v2 is the only engine (stages/engine.py); the object keeps its keys for the readers of older manifests
    manifest["engine"] = {"requested": "v2", "ran": "v2", "fallback": None}
    return manifest
