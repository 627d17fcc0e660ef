"""Stage 3, dedupe and cut: the cut decided from the partition statistics, holes in the
source offsets found, commit ts inferred where a protocol lacks it, event time per partition
where there is neither ts nor position, duplicate places (a narrow shuffle), and every event's
status (`transforms.tag_status`: quarantined / filtered / duplicate / pending / applied).
In: the run context, `context.Decoded`. Out: `context.Tagged`."""

from __future__ import annotations

from spark_apps import gaps as gaps_mod
from spark_apps import manifest as manifest_mod
from spark_apps.paths import display
from spark_apps.stages.base import bound as base_bound
from spark_apps.stages.context import Decoded, ReplayError, RunContext, Tagged
from spark_apps.stages.decode import release

# protocols whose events carry the producer's position where they have no commit ts
# (docs/semantics.md): their order needs no running event time
POSITIONED_PROTOCOLS = ("canal-protobuf", "oceanbase-avro")


def cut_and_gaps(ctx: RunContext, decoded: Decoded) -> tuple[dict, list, int]:
    """The cut (manifest.compute_cut) and the holes in the source offsets (`gaps.gaps`); with
    --require-contiguous a hole fails the run."""
    args, partition_stats = ctx.args, decoded.partition_stats
    try:
        cut = manifest_mod.compute_cut(partition_stats, args.upper)
    except manifest_mod.CutError as e:
        raise ReplayError(str(e)) from e
    if args.since is not None and cut["kind"] != "commit_ts":
        raise ReplayError("--since needs commit ts, and this archive carries none")
    ctx.say("cut: %s", cut["description"])
    offset_gaps, gap_count = gaps_mod.gaps(decoded.events, partition_stats, layout=ctx.layout_plan)
    if gap_count:
        shown = ", ".join(f"{display(g['topic'])}/{g['partition']} offsets {g['from']}..{g['to']}" for g in offset_gaps[:5])
        ctx.say("%d holes in the source offsets: %s", gap_count, shown, warn=True)
        if args.require_contiguous:
            release(decoded.decoded, ctx.files)
            raise ReplayError(f"--require-contiguous: the archive misses offsets ({gap_count} holes: {shown}"
                              + (" ..." if gap_count > 5 else "") + "); a missing or truncated archive object?")
    return cut, offset_gaps, gap_count


def ordered_events(args, decoded: Decoded) -> tuple:
    """(ready, needs_inference, needs_event_time, inferred): the decoded events with commit ts
    inferred where a protocol lacks it, and a running event time per partition where there is
    neither ts nor position (the summary and the last change per key start from it; not persisted here). `inferred`: the
    tombstones' inferred commit ts (`transforms.inferred_commit_ts`, persisted: the caller
    unpersists it) or None."""
    from spark_apps import transforms as T

    partition_stats = decoded.partition_stats
    needs_inference = any(s["max_commit_ts"] is not None for s in partition_stats) and any(
        s["rows_without_commit_ts"] for s in partition_stats)
    # no commit ts and no producer position anywhere (Canal flat JSON, canal-json without the
    # TiDB extension): the partition offset orders, through a running event time
    needs_event_time = (not any(s["max_commit_ts"] is not None for s in partition_stats)
                        and args.protocol not in POSITIONED_PROTOCOLS)
    export = getattr(args, "_base_export", None)  # stages/validate.py reads it before the decode
    export_tso = export.position.tso if export is not None and export.position.kind == "tso" else None
    events, inferred = decoded.events, None
    if needs_inference:  # a narrow window per source partition, computed once (persisted), few rows
        from pyspark import StorageLevel

        tombstones = sum(s["rows_without_commit_ts"] for s in partition_stats)
        inferred = T.inferred_commit_ts(events, export_tso).persist(StorageLevel.DISK_ONLY)
        events = T.with_inferred_ts(events, inferred, broadcast=tombstones <= T.INFERRED_BROADCAST_MAX)
    else:
        events = T.infer_commit_ts(events, False)
    ready = T.partition_event_time(events, needs_event_time)
    return ready, needs_inference, needs_event_time, inferred


def dedupe_and_cut(ctx: RunContext, decoded: Decoded) -> Tagged:
    """Statuses: quarantined / filtered / duplicate / pending / applied."""
    from pyspark import StorageLevel

    from spark_apps import transforms as T
    from spark_apps.engine_v2 import find_duplicates

    cut, offset_gaps, gap_count = cut_and_gaps(ctx, decoded)
    args = ctx.args
    ctx.progress.phase("deduplicating and cutting")
    # the duplicate check is a narrow shuffle (identity and place of each event) that finds the
    # later copies, few; every event is then told apart from them by a join, so no event travels
    # through a shuffle whole and nothing but `decoded` is persisted (transforms.duplicate_places).
    # Rows stay lean; the images are rebuilt from the dictionary (one literal in the plan) where
    # the output needs them
    ready, _, needs_event_time, inferred = ordered_events(args, decoded)
    if needs_event_time:  # a window per source partition over whole events: computed once
        ready = ready.persist(StorageLevel.DISK_ONLY)
    marks = find_duplicates(ready, tables=args.table_patterns(),
                            records=sum(s["records"] for s in decoded.partition_stats))
    in_base = None if ctx.base_export is None else base_bound(ctx.base_export)
    tagged = T.tag_status(ready, tables=args.table_patterns(), cut=cut["point"], since=args.since,
                          duplicates=marks, in_base=in_base)
    dictionary = schema_dictionary(ctx, decoded)
    return Tagged(cut=cut, offset_gaps=offset_gaps, gap_count=gap_count, ready=ready, duplicates=marks.places,
                  tagged=tagged, dictionary=dictionary, marks=marks, inferred=inferred)


def schema_dictionary(ctx: RunContext, decoded: Decoded):
    """The schema dictionary as the plan holds it (transforms.plan_dictionary), logged."""
    from spark_apps import transforms as T

    dictionary = T.plan_dictionary(decoded.schema_dictionary, T.spark_lower(ctx.spark), spark=ctx.spark)
    ctx.say("schema dictionary: %d column lists (%s)", len(decoded.schema_dictionary),
            "a literal in the plan" if dictionary.frame is None else "a broadcast relation")
    return dictionary
