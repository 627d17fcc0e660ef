"""Stages 3 and 4 on the chosen engine (`--engine`, else $CDC_REPLAY_ENGINE, else v1):
v1's dedupe and cut (stages/dedupe.py) and schema history (stages/history.py), and on v2
(spark_apps/engine_v2.py) the last change per key from the DDL history at the cut, built on
the driver from the decode's DDL events before any event moves (v1 builds it after its summary
and assigns tables and keys only then, stages/output.py).

v2 runs only where it gives v1's output byte for byte (Delta/Iceberg: the same tables): a
snapshot or history to Parquet, Delta or Iceberg (a `--since` window merged into the tables
too), a snapshot or topics to Kafka-record archives, no `fallback_reason`, and v1's summary
confirming what v2 assumed before it (the same applied DDL, the same history, no schema taken
from the stream; topics read neither, `_topics`). Anything else runs v1, said in one log line and in
the manifest's `engine`. docs/engine.md, "Engine v2 wired", "Engine v2 reduced before its
shuffle" and "Engine v2 writes topics and histories".
In: the run context, `context.Decoded`. Out: `context.Tagged`, `context.History`."""

from __future__ import annotations

import os

from spark_apps import kafka_io
from spark_apps.stages import dedupe as dedupe_stage
from spark_apps.stages import history as history_stage
from spark_apps.stages.base import bound as base_bound
from spark_apps.stages.base import export_base_rows
from spark_apps.stages.context import Decoded, History, ReplayError, RunContext, Tagged
from spark_apps.stages.decode import UNREADABLE_ONLY

ENGINE_ENV = "CDC_REPLAY_ENGINE"
ENGINES = ("v1", "v2")


def requested(args) -> str:
    """--engine, else $CDC_REPLAY_ENGINE, else v1."""
    value = getattr(args, "engine", None) or os.environ.get(ENGINE_ENV) or "v1"
    if value not in ENGINES:
        raise ReplayError(f"${ENGINE_ENV}={value!r}: the engine is one of {', '.join(ENGINES)}")
    return value


def request_reason(ctx: RunContext) -> str | None:
    """Why the request alone keeps v1 (None: v2 may run)."""
    if kafka_io.is_kafka(ctx.output):
        return "a kafka:// output: v2 writes Parquet, Kafka-record archives and Delta/Iceberg tables only"
    return None


def tag_and_history(ctx: RunContext, decoded: Decoded) -> tuple[Tagged, History]:
    """Statuses, the DDL history, the summary, and on v2 the last changes, on the engine the
    run asks for where it can run; the manifest's `engine` says which ran and why."""
    engine = {"requested": requested(ctx.args), "ran": "v1", "fallback": None}
    cut_gaps = dedupe_stage.cut_and_gaps(ctx, decoded)
    done = None  # v1's statuses and history when v2 computed them before falling back
    if engine["requested"] == "v2":
        reason = request_reason(ctx)
        if reason is None:
            outcome = _v2(ctx, decoded, cut_gaps)
            if isinstance(outcome, str):
                reason = outcome
            else:
                tagged, hist, reason = outcome
                if reason is None:
                    hist.engine = {**engine, "ran": "v2"}
                    ctx.say("engine v2: the last change per key from the history at the cut")
                    return tagged, hist
                done = tagged, hist
        engine["fallback"] = reason
        ctx.say("engine v2 asked for, v1 runs: %s", reason)
    if done is None:
        tagged = dedupe_stage.dedupe_and_cut(ctx, decoded, cut_gaps)
        done = tagged, history_stage.schema_history(ctx, decoded, tagged)
    done[1].engine = engine
    return done


def _v2(ctx: RunContext, decoded: Decoded, cut_gaps: tuple):
    """(Tagged, History, None) with v2's last changes; (Tagged, History, why) when v1's summary
    contradicts what v2 assumed (both are v1's own: v1 goes on from them); or why v1 must run
    (a str, before any Spark job)."""
    from spark_apps import engine_v2 as V2
    from spark_apps import outputs

    args, spark = ctx.args, ctx.spark
    if args.emit == "topics":
        return _topics(ctx, decoded, cut_gaps)
    cut = cut_gaps[0]
    _, _, untimed, _ = dedupe_stage.ordered_events(args, decoded)
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
    # v1's statuses and summary (one narrow shuffle of identities, one action over the events)
    tagged = dedupe_stage.dedupe_and_cut(ctx, decoded, cut_gaps)
    hist = history_stage.schema_history(ctx, decoded, tagged)
    differs = _differs(before, applied, hist)
    if differs:  # what ran so far is v1's own dedupe and history: v1 goes on from there
        return tagged, hist, differs
    ctx.progress.phase("the SCD2 versions of every key, one window per key (engine v2)" if args.emit == "history"
                       else "the last change per key, reduced in each task before its shuffle (engine v2)")
    stretches, names = V2.existence_frames(spark, before, hist.summary["row_ranges"])
    base = _base_rows(ctx)
    effects = V2.tag_effects(tagged.ready, tables=args.table_patterns(), cut=cut["point"], since=args.since,
                             intervals=intervals, known=known, stretches=stretches, stretch_names=names,
                             dictionary=tagged.dictionary, duplicates=tagged.marks,
                             base=base,
                             in_base=None if ctx.base_export is None else base_bound(ctx.base_export),
                             live_only=True, left_out=UNREADABLE_ONLY)
    if args.emit == "history":
        hist.versions = _versions(effects, tagged.dictionary, with_base=base is not None)
        return tagged, hist, None
    # as in v1 (stages/output.py), what only an unreadable record carries is not aggregated (`left_out`)
    hist.latest = V2.latest(effects, multiset=history_stage.has_keyless(hist))
    if base is not None and "after_values" in effects.columns:  # the base rows' images are full: rebuild the lean
        hist.latest = _full_beside(hist.latest, tagged.dictionary)
    return tagged, hist, None


def _topics(ctx: RunContext, decoded: Decoded, cut_gaps: tuple):
    """--emit topics on v2: (Tagged, History, None) from the statuses and summary both engines
    share. A topic message reads nothing v2 computes before its shuffle: it keeps the event's
    own table and key (its partition comes from the dispatcher, Avro's missing old images from
    the event's own key's previous change, `transforms.fill_previous_images`), never the table
    and key at the cut; so no check of the history at the cut is needed either."""
    tagged = dedupe_stage.dedupe_and_cut(ctx, decoded, cut_gaps)
    return tagged, history_stage.schema_history(ctx, decoded, tagged), None


def _versions(effects, dictionary, with_base: bool):
    """The SCD2 versions (what `OutputPlan.history` writes) of `tag_effects`' applied keyed
    effects, whose final table and key the map stage gave: one window per key
    (`transforms.scd2_validity`) over the lean rows, their full images rebuilt after it (v1
    shuffles the full ones); `with_base`: base rows with full images beside the lean
    (`_full_beside`)."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.engine_v2 import _INTERNAL

    keyed = effects.where(F.col("_live"))
    versions = T.unpacked(T.scd2_validity(keyed.drop(*[c for c in _INTERNAL if c in keyed.columns])))
    if "after_values" in versions.columns:
        versions = (_full_beside(versions, dictionary) if with_base
                    else T.full_images(versions, dictionary, versions.columns))
    return T.scd2_images(versions)


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


def _differs(before, applied: list[dict], hist: History) -> str | None:
    """What v1's summary contradicts of v2's assumptions (None: nothing): the applied DDL, the
    history at the cut, schemas from the stream."""
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
    return None
