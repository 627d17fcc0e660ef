"""Stage 6, the output: what stages/engine.py computed (the last change per key, the SCD2
versions), or the applied events for the topics, handed to spark_apps.outputs and written
below the staging area by the chosen target."""

from __future__ import annotations

from cdc_codecs import codec_class

from spark_apps import kafka_io
from spark_apps.contract import Status
from spark_apps.stages.base import export_base_rows
from spark_apps.stages.context import Decoded, History, ReplayError, RunContext, Tagged, Written
from spark_apps.stages.decode import release
from spark_apps.stages.decode import decode_objects as _decode
from spark_apps.stages.history import has_keyless


def output_topics(template: str, hist: History) -> set[str] | None:
    """The output topics of the applied row and DDL events (--emit topics' watermarks go to
    each), named on the driver from the summary's (kind, database, table, source topic) of
    those events (`summary.summarise`'s `sources`) as `transforms.topic_name` names them in the
    tasks, less the row events --require-schema quarantined (`History.unknown`, as
    `transforms.mark_unknown_tables` matches them). None when the summary has no sources."""
    from spark_apps import transforms as T
    from spark_apps.contract import Kind

    sources = hist.summary.get("sources")
    if sources is None:
        return None
    moved = {(d, t) for d, t in hist.unknown if d is not None and t is not None}
    return {T.topic_name_of(template, topic, database, table) for kind, database, table, topic in sources
            if not (kind == Kind.ROW and (database, table) in moved)}


def write_output(ctx: RunContext, decoded: Decoded, tagged: Tagged, hist: History) -> Written:
    """The output (`spark_apps.outputs.OutputPlan`): the applied events in the requested form, written below the
    staging area; what Spark persisted of the earlier stages is released after it."""
    from pyspark.sql import functions as F

    from spark_apps import outputs

    args, spark, history = ctx.args, ctx.spark, hist.history
    ctx.progress.phase(f"writing the {args.emit} ({args.output_format})")
    base_rows = None
    if args.emit == "topics":  # a snapshot's or history's took the base rows in (stages/engine.py)
        try:
            base_rows = outputs.base_rows(spark, ctx.base, args, hist.tagged.columns, _decode) if ctx.base else None
        except outputs.OutputError as e:
            raise ReplayError(str(e)) from None
        if ctx.base_export is not None:  # the export's rows, read in tasks, as the state at its position
            base_rows = export_base_rows(ctx, hist.tagged.columns)
    partitions = args.target_partitions or max(1, max((s["partition"] for s in decoded.partition_stats),
                                                      default=0) + 1)
    target = outputs.TargetSpec(codec_class(ctx.target_protocol), ctx.target_protocol, ctx.target_options, partitions)
    output_plan = outputs.OutputPlan(spark, args, history, tagged.cut, target, ctx.staging)
    # old values some protocols leave out (Avro), taken from the key's previous change
    # identical rows of a table without a key are counted (transforms.latest_per_key)
    output_plan.multiset = has_keyless(hist)
    output_plan.fill_images = any(s["updates_without_before"] or s["rows_without_commit_ts"]
                                  for s in decoded.partition_stats)
    output_plan.run = {"run_id": ctx.run_id, "source": ctx.source, "output": ctx.output, "protocol": args.protocol}
    if ctx.base_export is not None:  # Delta/Iceberg commits name the export their rows started from
        output_plan.run.update(base_export=args.base_export, base_position=ctx.base_export.position.describe())
    if kafka_io.is_kafka(ctx.output):
        output_plan.kafka_target(ctx.home, outputs.fingerprint(args, decoded.partition_stats, tagged.cut))
    try:
        if args.emit == "topics":  # the export's rows: an INSERT each at its position, before the archive's
            if base_rows is None and not output_plan.fill_images and getattr(
                    outputs.target_for(args), "lean_images", False):  # lean through the shuffle (OutputPlan.topics)
                applied = hist.lean.where(F.col("status") == Status.APPLIED)
                output_plan.dictionary, output_plan.schema_entries = hist.dictionary, decoded.schema_dictionary
            else:
                applied = hist.tagged.where(F.col("status") == Status.APPLIED)
            # the driver's output topics and watermarks (the summary's); a base's rows are not
            # in the summary (their topics: Spark's), and are never watermarks
            written, table_rows = output_plan.topics(
                applied if base_rows is None else applied.unionByName(base_rows),
                output_topics(args.target_topic, hist) if base_rows is None else None,
                hist.summary.get("marks")), None
        else:  # the last changes or versions of stages/engine.py, lean where the archive's rows are
            output_plan.dictionary = tagged.dictionary
            if args.emit == "snapshot":
                written, table_rows = output_plan.snapshot(hist.latest)
            else:
                written, table_rows = output_plan.history(hist.versions)
    except outputs.OutputError as e:
        raise ReplayError(str(e)) from e
    except Exception as e:  # an event the target protocol cannot carry fails the run, naming it
        text = str(e)
        if "UNENCODABLE " not in text:
            raise
        reason = text[text.index("UNENCODABLE ") + len("UNENCODABLE "):].splitlines()[0]
        raise ReplayError(f"the output was not written: {reason}. Choose a target protocol that carries it "
                          "(docs/protocols/README.md)") from None
    finally:
        for persisted in (tagged.duplicates, tagged.ready, tagged.inferred):
            if persisted is not None:
                persisted.unpersist()
        release(decoded.decoded, ctx.files)
    return Written(objects=written, table_rows=table_rows, lake_tables=output_plan.lake_tables,
                   kafka=output_plan.kafka)
