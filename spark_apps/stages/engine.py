"""Stages 3 and 4: the dedupe and cut (stages/dedupe.py) and the schema history
(stages/history.py), then the last change per key, or the SCD2 versions
(spark_apps/engine_v2.py), with every row's final table and key from the DDL history at the
cut found in the map stage before the one shuffle.

Engine v2 is the only engine since the twenty-fifth session: v1's own last change per key and
SCD2 window (the output stage's, on tables and keys it assigned there) were removed, v2 being
as fast at 1M and falling back nowhere (docs/engine.md, "v1 removed"). `--engine v2` and
$CDC_REPLAY_ENGINE=v2 are still accepted (a no-op, for scripts that pass them); v1 is refused
(`check`). Its history at the cut is the summary's (`hist.history`), so tables whose schema is
taken from the stream, --require-schema's quarantine and archives without commit ts nor
position need nothing of their own. docs/engine.md, "Engine v2 wired", "Engine v2 reduced
before its shuffle", "Engine v2 writes topics and histories" and "v2 without fallbacks".
In: the run context, `context.Decoded`. Out: `context.Tagged`, `context.History`."""

from __future__ import annotations

import os

from spark_apps.stages import dedupe as dedupe_stage
from spark_apps.stages import history as history_stage
from spark_apps.stages.base import bound as base_bound
from spark_apps.stages.base import export_base_rows
from spark_apps.stages.context import Decoded, History, ReplayError, RunContext, Tagged
from spark_apps.stages.decode import UNREADABLE_ONLY

ENGINE_ENV = "CDC_REPLAY_ENGINE"
ENGINE = "v2"


def check(args) -> None:
    """--engine, else $CDC_REPLAY_ENGINE, if given, must name v2 (kept for the scripts that
    pass it): v1 was removed in the twenty-fifth session. ReplayError before Spark starts."""
    given = getattr(args, "engine", None)
    source = "--engine " if given else f"${ENGINE_ENV}="
    value = given or os.environ.get(ENGINE_ENV) or ENGINE
    if value == "v1":
        raise ReplayError(f"{source}v1: engine v1 was removed (twenty-fifth session); v2 is the engine, "
                          f"give --engine v2 or nothing (docs/engine.md)")
    if value != ENGINE:
        raise ReplayError(f"{source}{value}: the engine is v2 (docs/engine.md)")


def tag_and_history(ctx: RunContext, decoded: Decoded) -> tuple[Tagged, History]:
    """Statuses, the DDL history and the summary, then the last changes or SCD2 versions from
    that history (`_v2`)."""
    tagged = dedupe_stage.dedupe_and_cut(ctx, decoded)
    hist = history_stage.schema_history(ctx, decoded, tagged)
    _v2(ctx, tagged, hist)
    return tagged, hist


def _v2(ctx: RunContext, tagged: Tagged, hist: History) -> None:
    """The last changes (`hist.latest`) or SCD2 versions (`hist.versions`) from the statuses
    (`tagged`) and the DDL history the summary built (`hist.history`: tables whose schema is
    taken from the stream included; in an archive without commit ts nor position, DDL at
    their running event time, the rows' timelines being the same `tagged.ready`'s), with the
    summary's quarantines (missing tables, --require-schema's unknown ones) in the same map
    stage. --emit topics: nothing to compute, the statuses, the summary and the writer are
    enough. A topic message keeps the event's own table and key (its partition comes from
    the dispatcher, Avro's missing old images from the event's own key's previous change,
    `transforms.fill_previous_images`), never the table and key at the cut."""
    from spark_apps import engine_v2 as V2
    from spark_apps import outputs

    args, spark = ctx.args, ctx.spark
    if args.emit == "topics":
        return
    ctx.progress.phase("the SCD2 versions of every key, one window per key (engine v2)" if args.emit == "history"
                       else "the last change per key, reduced in each task before its shuffle (engine v2)")
    intervals, known = outputs.table_frames(spark, hist.history)
    stretches, names = V2.existence_frames(spark, hist.history, hist.summary["row_ranges"])
    base = _base_rows(ctx)
    effects = V2.tag_effects(tagged.ready, tables=args.table_patterns(), cut=tagged.cut["point"], since=args.since,
                             intervals=intervals, known=known, stretches=stretches, stretch_names=names,
                             dictionary=tagged.dictionary, duplicates=tagged.marks,
                             base=base,
                             in_base=None if ctx.base_export is None else base_bound(ctx.base_export),
                             unknown=hist.unknown, left_out=UNREADABLE_ONLY)
    if args.emit == "history":
        hist.versions = _versions(effects, tagged.dictionary, with_base=base is not None)
        return
    # what only an unreadable record carries is not aggregated (`left_out`)
    hist.latest = V2.latest(effects, multiset=history_stage.has_keyless(hist))
    if base is not None and "after_values" in effects.columns:  # the base rows' images are full: rebuild the lean
        hist.latest = _full_beside(hist.latest, tagged.dictionary)


def _versions(effects, dictionary, with_base: bool):
    """The SCD2 versions (what `OutputPlan.history` writes) of `tag_effects`' applied keyed
    effects, whose final table and key the map stage gave: one window per key
    (`transforms.scd2_validity`) over the lean rows, their full images rebuilt after it;
    `with_base`: base rows with full images beside the lean
    (`_full_beside`)."""
    from spark_apps import transforms as T
    from spark_apps.engine_v2 import _INTERNAL

    versions = T.unpacked(T.scd2_validity(effects.drop(*[c for c in _INTERNAL if c in effects.columns])))
    if "after_values" in versions.columns:
        versions = (_full_beside(versions, dictionary) if with_base
                    else T.full_images(versions, dictionary, versions.columns))
    return T.scd2_images(versions)


def _base_rows(ctx: RunContext):
    """The rows of --base-snapshot or --base-export as applied events with full images, which
    enter the one shuffle beside the archive's lean ones, or None."""
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
