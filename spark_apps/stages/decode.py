"""Stage 2, the decode pass (Spark tasks): the objects (or a Kafka source) read and decoded
into lean event rows, persisted (local mode: Parquet files the tasks write), with what the
tasks gathered on the way: per-partition statistics, the column-list dictionary, the DDL
events, the decoders they ran. In: the run context. Out: `context.Decoded`."""

from __future__ import annotations

import os

from cdc_codecs import parse_option_pairs

from spark_apps import ddl as ddl_mod
from spark_apps import gaps as gaps_mod
from spark_apps import kafka_io, spark_compat
from spark_apps import manifest as manifest_mod
from spark_apps.contract import ProtocolSpec
from spark_apps.stages.context import Decoded, ReplayError, RunContext


def choose_decoder(codec) -> dict:
    """Which decoder the driver chooses for the executors (the compiled one, or the Python
    codec and why); whether it loads there only the decode tasks can tell (manifest.decoder_observed)."""
    from spark_apps import native_decode

    try:
        path, reason = native_decode.choose(codec.name, codec.config)
    except (ValueError, RuntimeError) as e:  # a bad CDC_REPLAY_DECODER, or =native without the module
        raise ReplayError(f"{native_decode.ENV}: {e}") from None
    return {"path": path, "reason": reason}


DECODE_TASK_MB_ENV = "CDC_REPLAY_DECODE_TASK_MB"
# the decoded columns only records that could not be read or decoded fill (schema.py)
UNREADABLE_ONLY = ("line", "error", "error_stage", "raw_key", "raw_value", "raw_line")
DECODE_FILES_ENV = "CDC_REPLAY_DECODE_FILES"  # "off": Spark persists the decode in local mode too
DECODE_TASK_MB = 64


def decode_tasks(sizes: list[int], parallelism: int) -> int:
    """How many decode tasks read objects of these stored `sizes`: two per core, and more for
    a large archive, about `CDC_REPLAY_DECODE_TASK_MB` (default 64) stored MB each, so a
    task's decoded rows, its share of every later map-side sort and its Python worker's
    memory stay the same size whatever the archive's (with a fixed count, a 16M-event archive
    gave each of 4 tasks 5M records: sorts spilled and workers grew). Never more than the
    objects: an object is read by one task."""
    import os

    task_mb = float(os.environ.get(DECODE_TASK_MB_ENV) or DECODE_TASK_MB)
    by_size = -(-sum(sizes) // max(1, int(task_mb * (1 << 20))))
    return max(1, min(len(sizes), max(parallelism * 2, by_size)))


def decode_objects(spark, objects, codec: ProtocolSpec, counter=None, lean: bool = False,
                   files: str | None = None):
    """Objects (ObjectInfo: Kafka-record objects, or layout plan Items with their params) ->
    decoded rows, each object read and decoded in a Spark task; `counter` (an accumulator)
    counts the records decoded, for the progress lines. `lean`: the lean rows and `aux` rows
    of spark_apps/lean_decode.py; `files`: the lean rows go to Parquet files in this folder
    instead (`lean_decode.written_to`), only the `aux` rows come back."""
    from spark_apps.archive_io import decode_objects_fn
    from spark_apps.lean_decode import LEAN_STRUCT, leaned, written_to
    from spark_apps.local_data import balanced_slices, local_frame
    from spark_apps.progress import counting
    from spark_apps.schema import DECODED_STRUCT

    parallelism = decode_tasks([o.size for o in objects], spark.sparkContext.defaultParallelism)
    # slices of about equal bytes, the heaviest first, each biggest object first; built in the
    # JVM (local_data: no Python worker of its own)
    rows = [(o.uri, o.size, getattr(o, "params", None)) for o in objects]
    objects_df = local_frame(spark, rows, "uri string, size long, params string",
                             balanced_slices([o.size for o in objects], parallelism))
    decode = counting(decode_objects_fn(codec.protocol, codec.options), counter)
    if files:
        return objects_df.mapInArrow(written_to(leaned(decode), files), LEAN_STRUCT)
    return (objects_df.mapInArrow(leaned(decode), LEAN_STRUCT) if lean
            else objects_df.mapInArrow(decode, DECODED_STRUCT))


def first_pass(decoded, files: str | None = None):
    """(events, partition statistics, schema dictionary, DDL events, the tasks' decoder
    reports) of the persisted lean
    `decoded` rows (spark_apps/lean_decode.py): one action that collects only the decode tasks'
    `aux` rows (the statistics, dictionary, offset runs and DDL events each task gathered while
    decoding: no aggregate, no shuffle), plus one for the distinct offsets of partitions the
    runs do not prove (gaps.count_offsets). With `files` the tasks wrote their rows there
    (`decode_objects(files=...)`): `decoded` holds only the `aux` rows, and the events are read back
    from the files. ValueError on an id collision."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.lean_decode import EVENTS_STRUCT, merge_stats

    if files:
        auxes = [r["aux"] for r in collected(decoded.select("aux"))]
        events = decoded.sparkSession.read.schema(EVENTS_STRUCT).parquet(files)
    else:
        events = decoded.where(F.col("aux").isNull()).drop("aux")
        auxes = [r["aux"] for r in collected(decoded.where(F.col("aux").isNotNull()).select("aux"))]
    merged: dict[tuple, dict] = {}
    for a in auxes:
        for s in a["stats"]:
            key = (s.pop("topic"), s.pop("partition"))
            merged[key] = s if key not in merged else merge_stats(merged[key], s)
    # sorted here, not by Spark
    partition_stats = sorted(({"topic": t, "partition": p, **s} for (t, p), s in merged.items()),
                             key=lambda s: (s["topic"], s["partition"] is not None, s["partition"] or 0))
    schema_dictionary = T.schema_dictionary(e for a in auxes for e in a["entries"])
    ddl = [e for a in auxes for e in a["ddl_events"]]
    decoders = [d for a in auxes for d in a["decoders"]]
    # lines that are not records (stage "archive") may still name their place: not counted
    records = events.where(F.col("topic").isNotNull() & ~F.coalesce(F.col("error_stage") == "archive", F.lit(False)))
    gaps_mod.count_offsets(records, partition_stats, [r for a in auxes for r in a["runs"]])
    return events, partition_stats, schema_dictionary, ddl, decoders


def decode_files(spark, source: str) -> str | None:
    """A fresh folder for the decode tasks' Parquet files (`decode_objects(files=...)`) when every task
    runs where the driver runs (local mode) and the source is an archive; None otherwise: on a
    cluster an executor's disk is not another's, so Spark persists the rows itself
    (DISK_ONLY), and so it does for Kafka sources or with CDC_REPLAY_DECODE_FILES=off."""
    import tempfile

    if (kafka_io.is_kafka(source) or not spark.sparkContext.master.startswith("local")
            or os.environ.get(DECODE_FILES_ENV, "").lower() in ("off", "0", "false", "no")):
        return None
    # the live conf (one py4j call), not getConf()'s copy (one per setting)
    local_dir = (spark.sparkContext._conf.get("spark.local.dir") or "").split(",")[0] or None
    return tempfile.mkdtemp(prefix="cdc-replay-decoded-", dir=local_dir)


def collected(df) -> list[dict]:
    """A small result on the driver as plain dicts (structs as dicts, arrays as lists), through
    Arrow: many times cheaper than pickled Rows for the thousands of nested values of the
    decode tasks' `aux` rows or the summary's groups."""
    return spark_compat.collect_rows(df)  # DataFrame.toArrow on Spark 4, its 3.5 equivalent

def release(decoded, files: str | None) -> None:
    """Drop what Spark persisted of the decode (the files are removed when the run ends)."""
    if not files:
        decoded.unpersist()



def decode_pass(ctx: RunContext) -> Decoded:
    """The decode and the one pass over its `aux` rows; the decoders the tasks ran are logged
    (a fall-back to the Python codec is a warning)."""
    from pyspark import StorageLevel

    args, files = ctx.args, ctx.files
    codec = ProtocolSpec(args.protocol, parse_option_pairs(args.protocol_option))
    ctx.progress.phase(f"reading and decoding {len(ctx.objects)} objects" if ctx.objects else f"reading {ctx.source}")
    # intermediates reused by several actions are kept on local disk: their nested rows are
    # large, and disk keeps the heap free for sorting (measured: memory caching ran out of heap)
    if kafka_io.is_kafka(ctx.source):
        offsets = kafka_io.OffsetRange(args.starting_offsets, args.ending_offsets)
        decoded = kafka_io.read_decoded(ctx.spark, ctx.source, offsets, codec, kafka_io.client_config(), lean=True)
    else:
        decoded = decode_objects(ctx.spark, ctx.objects, codec, ctx.progress.records, lean=True, files=files)
    # the decode tasks write lean rows (spark_apps/lean_decode.py: each image's column list id,
    # values and labels) and end with one `aux` row each: the column lists they saw (the lean
    # rows' dictionary) and their runs of offsets (the distinct offset count without a shuffle).
    # In local mode the rows go to Parquet files (read back by the later jobs); elsewhere Spark
    # persists them
    if files:
        ctx.say("decoded rows: Parquet files in %s (local mode)", files)
    else:
        decoded = decoded.persist(StorageLevel.DISK_ONLY)
    # per source partition: records, commit ts range, highest watermark (the cut's input)
    try:
        events, partition_stats, schema_dictionary, ddl_events, decoder_reports = first_pass(decoded, files)
    except ValueError as e:
        release(decoded, files)
        raise ReplayError(f"lean rows: {e}") from None
    ddl_statements = {(d["database"], d["table"], d["ddl_query"]) for d in ddl_events if d["topic"] is not None}
    # parsed while the next Spark jobs run, about in the order they will be applied
    ddl_mod.parse_ahead(d["ddl_query"] for d in sorted(
        ddl_events, key=lambda d: (d["commit_ts"] is None, d["commit_ts"] or 0)))
    ctx.say("decoded %s records from %d partitions", f"{sum(s['records'] for s in partition_stats):,}",
            len(partition_stats))
    decoder = manifest_mod.decoder_observed(choose_decoder(ctx.source_codec), decoder_reports)
    for line in manifest_mod.decoder_lines(decoder):
        ctx.say("decoder on the executors: %s", line)
    if manifest_mod.decoder_fell_back(decoder):
        ctx.say("%s", manifest_mod.decoder_fell_back(decoder), warn=True)
    return Decoded(decoded=decoded, events=events, partition_stats=partition_stats,
                   schema_dictionary=schema_dictionary, ddl_events=ddl_events, ddl_statements=ddl_statements,
                   decoder=decoder)
