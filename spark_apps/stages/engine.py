"""Stages 3 and 4 on the chosen engine (`--engine`, else $CDC_REPLAY_ENGINE, else v1):
v1's dedupe and cut (stages/dedupe.py) and schema history (stages/history.py), or engine v2
(spark_apps/engine_v2.py): the DDL history at the cut built first from the decode's DDL
events, then ONE shuffle tagging every event and giving the last change per key, persisted as
the run's one cache, which the summary, the quarantine and the snapshot then read.

v2 runs only where it gives v1's output byte for byte: a snapshot to Parquet or Kafka-record
archives, no `fallback_reason`, no table whose copies name different key columns, and v1's
summary over the cache confirming what v2 assumed before the shuffle (the same applied DDL,
the same history, no schema taken from the stream, the same counts). Anything else runs v1,
said in one log line and in the manifest's `engine`. docs/engine.md, "Engine v2 wired".
In: the run context, `context.Decoded`. Out: `context.Tagged`, `context.History`."""

from __future__ import annotations

import os

from spark_apps import kafka_io
from spark_apps.contract import Status
from spark_apps.stages import dedupe as dedupe_stage
from spark_apps.stages import history as history_stage
from spark_apps.stages.base import bound as base_bound
from spark_apps.stages.base import export_base_rows
from spark_apps.stages.context import Decoded, History, ReplayError, RunContext, Tagged

ENGINE_ENV = "CDC_REPLAY_ENGINE"
ENGINES = ("v1", "v2")
COUNTED = ("status", "kind", "database", "table", "error_stage", "bucket", "events", "min_commit_ts", "max_commit_ts")


def requested(args) -> str:
    """--engine, else $CDC_REPLAY_ENGINE, else v1."""
    value = getattr(args, "engine", None) or os.environ.get(ENGINE_ENV) or "v1"
    if value not in ENGINES:
        raise ReplayError(f"${ENGINE_ENV}={value!r}: the engine is one of {', '.join(ENGINES)}")
    return value


def request_reason(ctx: RunContext) -> str | None:
    """Why the request alone keeps v1 (None: v2 may run)."""
    args = ctx.args
    if args.emit != "snapshot":
        return f"--emit {args.emit}: v2 replays snapshots only (topics and histories are not wired yet)"
    if args.output_format not in ("parquet", "kafka") or kafka_io.is_kafka(ctx.output):
        return f"a {args.output_format if not kafka_io.is_kafka(ctx.output) else 'kafka://'} output: v2 writes " \
               "Parquet and Kafka-record archives only"
    return None


def tag_and_history(ctx: RunContext, decoded: Decoded) -> tuple[Tagged, History]:
    """Statuses, the DDL history, the summary, and on v2 the last changes, on the engine the
    run asks for where it can run; the manifest's `engine` says which ran and why."""
    engine = {"requested": requested(ctx.args), "ran": "v1", "fallback": None}
    cut_gaps = dedupe_stage.cut_and_gaps(ctx, decoded)
    if engine["requested"] == "v2":
        reason = request_reason(ctx)
        if reason is None:
            outcome = _v2(ctx, decoded, cut_gaps)
            if not isinstance(outcome, str):
                tagged, hist = outcome
                hist.engine = {**engine, "ran": "v2"}
                ctx.say("engine v2: one shuffle, one cache")
                return tagged, hist
            reason = outcome
        engine["fallback"] = reason
        ctx.say("engine v2 asked for, v1 runs: %s", reason)
    tagged = dedupe_stage.dedupe_and_cut(ctx, decoded, cut_gaps)
    hist = history_stage.schema_history(ctx, decoded, tagged)
    hist.engine = engine
    return tagged, hist


def _v2(ctx: RunContext, decoded: Decoded, cut_gaps: tuple):
    """(Tagged, History) from v2's one shuffle, or why v1 must run instead (a str)."""
    from pyspark import StorageLevel

    from spark_apps import engine_v2 as V2
    from spark_apps import manifest as manifest_mod
    from spark_apps import outputs
    from spark_apps import transforms as T

    args, spark = ctx.args, ctx.spark
    cut, offset_gaps, gap_count = cut_gaps
    ready, _, untimed = dedupe_stage.ordered_events(args, decoded)
    if untimed and decoded.ddl_events:  # an untimed DDL's point is a running event time: intervals
        return V2.fallback_reason(untimed=True, intervals=decoded.ddl_events)
    before, _ = history_stage.initial_history(ctx)
    try:
        applied = V2.applied_ddl(decoded.ddl_events, tables=args.table_patterns(), cut=cut["point"], since=args.since)
    except ValueError as e:
        return str(e)
    history_stage._apply_ddl(before, applied, args.protocol)
    intervals, known = outputs.table_frames(spark, before)
    reason = V2.fallback_reason(untimed=untimed, intervals=intervals, inferred_schemas=before.inferred,
                                require_schema=args.require_schema)
    if reason:
        return reason
    ctx.progress.phase("tagging every event in one shuffle (engine v2)")
    dictionary = dedupe_stage.schema_dictionary(ctx, decoded)
    stretches, names = V2.existence_frames(spark, before)
    frame = manifest_mod.timeline_frame(decoded.partition_stats, args.since, args.upper, T.TIMELINE_BUCKETS)
    base = _base_rows(ctx)
    cache = V2.tag_effects(ready, tables=args.table_patterns(), cut=cut["point"], since=args.since,
                           intervals=intervals, known=known, stretches=stretches, stretch_names=names,
                           dictionary=dictionary, bucket=T.commit_bucket(*frame) if frame else None,
                           base=base, in_base=None if ctx.base_export is None else base_bound(ctx.base_export)
                           ).persist(StorageLevel.DISK_ONLY)
    counts = V2.summary_counts(cache)
    if counts["own_key_conflicts"]:
        cache.unpersist()
        return ("row events of " + ", ".join(f"{d}.{t}" for d, t in counts["own_key_conflicts"][:3])
                + " name different key columns and no DDL keys the table: copies may have been routed apart")
    events = _as_v1_saw(cache, T.with_timeline(ready).columns)
    tagged = Tagged(cut=cut, offset_gaps=offset_gaps, gap_count=gap_count, ready=None, duplicates=None,
                    tagged=events, dictionary=dictionary)
    hist = history_stage.history_over(ctx, decoded, events, dictionary)
    differs = _differs(before, applied, hist, counts["counts"])
    if differs:
        cache.unpersist()
        return differs
    hist.latest, hist.cache = V2.latest(cache), cache
    if base is not None and "after_values" in cache.columns:  # the base rows' images are full: rebuild the lean
        hist.latest = _full_beside(hist.latest, dictionary)
    return tagged, hist


def _base_rows(ctx: RunContext):
    """The rows of --base-snapshot or --base-export as applied events with full images (what
    v1's stages/output.py unions with the applied rows), or None."""
    from spark_apps import outputs
    from spark_apps.schema import DECODED_FIELD_NAMES
    from spark_apps.stages.decode import decode_objects

    columns = [*DECODED_FIELD_NAMES, "inferred_ts", "event_time", "timeline", "status"]
    if ctx.base_export is not None:
        return export_base_rows(ctx, columns)
    if ctx.base is not None:
        try:
            return outputs.base_rows(ctx.spark, ctx.base, ctx.args, columns, decode_objects)
        except outputs.OutputError as e:
            raise ReplayError(str(e)) from None
    return None


def _full_beside(latest, dictionary):
    """`latest` with the lean rows' images rebuilt (transforms.full_images) and the base rows'
    full images kept."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T

    kept = latest.withColumnRenamed("before", "_base_before").withColumnRenamed("after", "_base_after")
    full = T.full_images(kept, dictionary, latest.columns)
    for image in T.IMAGES:
        full = full.withColumn(image, F.coalesce(F.col(image), F.col(f"_base_{image}")))
    return full.drop("_base_before", "_base_after")


def _as_v1_saw(cache, columns: list[str]):
    """The cache's events, one row each (the counted effect), with the columns and statuses
    v1's tagging gives before its summary: a row v2 quarantined as of a missing table is
    applied there (v1's history stage moves it after the summary, as it does here)."""
    from pyspark.sql import functions as F

    moved = F.col("_moved")
    events = (cache.where(F.col("_counted"))
              .withColumn("status", F.when(moved, F.lit(Status.APPLIED)).otherwise(F.col("status")))
              .withColumn("error", F.when(moved, F.col("_was_error")).otherwise(F.col("error")))
              .withColumn("error_stage", F.when(moved, F.col("_was_error_stage")).otherwise(F.col("error_stage"))))
    return events.select(*[c for c in columns if c not in ("identity", "place_id")], "status")


def _differs(before, applied: list[dict], hist: History, counts: list[dict]) -> str | None:
    """What v1's summary over the cache contradicts of v2's assumptions (None: nothing): the
    applied DDL, the history at the cut, schemas from the stream, the statuses' counts (their
    commit-ts ranges aside where v1 moved rows of missing tables, `_moved_counts` keeping them
    in the applied group's range)."""
    def ddl_of(rows):
        return [(d["ddl_query"], list(d["timeline"]), d.get("database"), d.get("table")) for d in rows]

    def shape(history):
        return ([(i.database, i.table, i.after, i.until, i.final_database, i.final_table, i.key_aliases,
                  i.row_columns) for i in history.intervals()], history.existence(), sorted(history.known))

    if ddl_of(applied) != ddl_of(hist.summary["ddl"]):
        return "the applied DDL v2 picked differs from v1's summary"
    if hist.history.inferred:
        return "a table's schema is taken from its row events (known only after the summary)"
    if shape(before) != shape(hist.history):
        return "the DDL history at the cut differs from the one v1 builds after its summary"
    moved = {(c["database"], c["table"]) for c in hist.counts if c["error_stage"] == "table"}
    if _comparable(counts, moved) != _comparable(hist.counts, moved):
        return "the statuses' counts differ from v1's summary"
    return None


def _comparable(counts: list[dict], moved: set) -> list:
    return sorted((tuple(None if k.endswith("commit_ts") and (c["database"], c["table"]) in moved else c.get(k)
                         for k in COUNTED) for c in counts if c["events"]), key=repr)

