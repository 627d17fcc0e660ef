"""The replay Spark app: read an archive, decode, deduplicate, order, apply DDL, and emit a
snapshot or re-encoded topics as a new Kafka-record archive with a manifest.

Run by `cdc-replay replay ...` (which calls spark-submit on this file) or by Airflow's
SparkSubmitOperator with the same arguments. `main()` is the thin shell: parse, build the
session, read, transform (spark_apps.transforms), write, commit. Only small aggregates reach
the driver: per-partition watermarks, per-table counts, the DDL statements, object lists.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
import time
import uuid

if __package__ in (None, ""):  # run as a file by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cdc_codecs import Kind, codec_class, get_codec, parse_option_pairs  # noqa: E402
from cdc_codecs.archive import is_archive_object  # noqa: E402
from cdc_codecs.errors import CodecError  # noqa: E402

from spark_apps import manifest as manifest_mod  # noqa: E402
from spark_apps import storage  # noqa: E402
from spark_apps.ddl import DDLError, SchemaHistory  # noqa: E402
from spark_apps.options import ReplayArgs, parser, validate_table_patterns  # noqa: E402

log = logging.getLogger("cdc_replay")


class ReplayError(RuntimeError):
    """A run that cannot proceed or must fail; the message says why and what to do."""


def build_session(master: str, app_name: str, conf: list[str]):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8" if master.startswith("local") else "200",
        "spark.sql.adaptive.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.log.level": "WARN",
        "spark.sql.debug.maxToStringFields": "500",
    }
    # executors (also in a cluster) reach S3 with the driver's settings
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_DEFAULT_REGION", "AWS_REGION"):
        if os.environ.get(name):
            defaults[f"spark.executorEnv.{name}"] = os.environ[name]
    for key, value in parse_option_pairs(conf).items():
        defaults[key] = value
    for key, value in defaults.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def validate(args: ReplayArgs) -> tuple:
    """Check everything that can be checked before Spark starts."""
    try:
        source_codec = get_codec(args.protocol, parse_option_pairs(args.protocol_option))
        target_protocol = args.target_protocol or args.protocol
        target_options = parse_option_pairs(args.target_option)
        get_codec(target_protocol, target_options)
    except CodecError as e:
        raise ReplayError(str(e)) from e
    try:
        validate_table_patterns(args.table_patterns())
    except ValueError as e:
        raise ReplayError(str(e)) from e
    if args.target_partitions is not None and args.target_partitions < 1:
        raise ReplayError("--target-partitions must be at least 1")
    if args.max_bad_records < 0:
        raise ReplayError("--max-bad-records must be 0 or more")
    if args.as_of is not None and args.as_of < 0:
        raise ReplayError("--as-of must be a commit ts (a non-negative TSO)")
    if args.schema:
        try:
            SchemaHistory(_read_schema(args.schema))
        except DDLError as e:
            raise ReplayError(f"--schema {args.schema}: {e}") from e
    return source_codec, target_protocol, target_options


def _read_schema(uri: str | None) -> str:
    if not uri:
        return ""
    try:
        return storage.read_bytes(storage.normalize(uri)).decode("utf-8")
    except (OSError, Exception) as e:  # missing file, S3 error
        raise ReplayError(f"--schema {uri}: cannot read it ({type(e).__name__}: {e})") from e


def run(args: ReplayArgs, spark=None) -> dict:
    """Run one replay; returns the manifest (also written to <output>/_manifest.json)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.archive_io import decode_objects_fn, write_quarantine_fn
    from spark_apps.schema import DECODED_STRUCT, WRITTEN_STRUCT

    started = time.time()
    source_codec, target_protocol, target_options = validate(args)
    source_options = dict(source_codec.config)
    run_id = args.run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]
    source = storage.normalize(args.source)
    output = storage.normalize(args.output)
    staging = storage.join(output, "_staging", run_id)

    objects = [o for o in storage.list_objects(source) if is_archive_object(storage.relative(o.uri, source))]
    if not objects:
        raise ReplayError(f"no archive objects (*.jsonl, *.jsonl.gz) under {source}")
    total_bytes = sum(o.size for o in objects)
    log.info("[replay %s] %d objects, %.1f MB under %s; protocol %s", run_id, len(objects),
                total_bytes / 1e6, source, args.protocol)

    own_session = spark is None
    if own_session:
        spark = build_session(args.master, f"cdc-replay {run_id}", args.spark_conf)
    try:
        parallelism = max(1, min(len(objects), spark.sparkContext.defaultParallelism * 2))
        # biggest objects first, spread round-robin over the slices
        rows = [(o.uri, o.size) for o in sorted(objects, key=lambda o: -o.size)]
        objects_df = spark.sparkContext.parallelize(rows, parallelism).toDF("uri string, size long")
        decoded = objects_df.mapInArrow(decode_objects_fn(args.protocol, parse_option_pairs(args.protocol_option)),
                                        DECODED_STRUCT).persist(StorageLevel.MEMORY_AND_DISK)

        # 1. per source partition: records, commit ts range, highest watermark -> the cut
        partition_stats = [r.asDict() for r in decoded.where(F.col("topic").isNotNull()).groupBy("topic", "partition").agg(
            F.count(F.when(F.col("event_index") == 0, 1)).alias("records"),
            F.max(F.when(F.col("kind") == Kind.WATERMARK, F.col("watermark_ts"))).alias("watermark"),
            F.min("commit_ts").alias("min_commit_ts"), F.max("commit_ts").alias("max_commit_ts"),
            F.count(F.when(F.col("position").isNotNull(), 1)).alias("positioned"),
            F.count(F.when((F.col("kind") == Kind.ROW) & F.col("commit_ts").isNull(), 1)).alias("rows_without_commit_ts"),
        ).orderBy("topic", "partition").collect()]
        try:
            cut = manifest_mod.compute_cut(partition_stats, args.as_of)
        except manifest_mod.CutError as e:
            raise ReplayError(str(e)) from e
        log.info("[replay %s] cut: %s", run_id, cut["description"])

        # 2. statuses: quarantined / filtered / duplicate / pending / applied
        needs_inference = any(s["max_commit_ts"] is not None for s in partition_stats) and any(
            s["rows_without_commit_ts"] for s in partition_stats)
        tagged = T.tag_status(T.infer_commit_ts(decoded, needs_inference), tables=args.table_patterns(), cut=cut["point"]).persist(StorageLevel.MEMORY_AND_DISK)
        counts = [r.asDict() for r in tagged.groupBy("status", "kind", "database", "table", "error_stage").agg(
            F.count(F.lit(1)).alias("events"),
            F.min("commit_ts").alias("min_commit_ts"), F.max("commit_ts").alias("max_commit_ts"),
        ).collect()]
        decoded.unpersist()

        # 3. quarantine (decoded records that failed), written next to the output
        quarantine_base = storage.join(staging, "_quarantine")
        quarantine_objects = [r.asDict() for r in tagged.where(F.col("status") == "quarantined")
                              .mapInArrow(write_quarantine_fn(args.protocol, quarantine_base), WRITTEN_STRUCT).collect()]

        # 4. DDL history, applied on the driver in timeline order (DDL events are few)
        ddl_rows = (tagged.where((F.col("status") == "applied") & (F.col("kind") == Kind.DDL))
                    .select("database", "table", "ddl_query", "commit_ts", "timeline", "object", "line",
                            "topic", "partition", "offset")
                    .orderBy("timeline", "partition", "offset").collect())
        history = SchemaHistory(_read_schema(args.schema))
        ddl_log, ddl_failures = [], []
        for row in ddl_rows:
            try:
                outcome = history.apply(row["ddl_query"], list(row["timeline"]), row["database"])
                ddl_log.append({"commit_ts": row["commit_ts"], "query": row["ddl_query"], "applied": outcome})
            except DDLError as e:
                ddl_failures.append({**{k: row[k] for k in ("object", "line", "topic", "partition", "offset")},
                                     "protocol": args.protocol, "error_stage": "ddl",
                                     "error": f"{args.protocol}: DDL not applied ({e}): {row['ddl_query']}"})
        if ddl_failures:
            manifest_mod.write_ddl_quarantine(quarantine_base, ddl_failures)

        # 5. the output
        target = codec_class(target_protocol)
        partitions = args.target_partitions or max(1, max((s["partition"] for s in partition_stats), default=0) + 1)
        applied = tagged.where(F.col("status") == "applied")
        if args.emit == "snapshot":
            written, table_rows = _emit_snapshot(spark, applied, history, cut, args, target, target_protocol, target_options,
                                     partitions, staging)
        else:
            table_rows = None
            written = _emit_topics(spark, applied, cut, args, target, target_protocol, target_options,
                                   partitions, staging)
        tagged.unpersist()

        manifest = manifest_mod.build(
            run_id=run_id, args=args, source=source, output=output, started=started,
            objects=objects, partition_stats=partition_stats, cut=cut, counts=counts,
            ddl_log=ddl_log, ddl_failures=ddl_failures, written=written,
            quarantine_objects=quarantine_objects, source_options=source_options,
            target_protocol=target_protocol, target_options=dict(get_codec(target_protocol, target_options).config),
            table_rows=table_rows,
        )
        manifest_mod.commit(output, staging, manifest)
        return manifest
    finally:
        if own_session:
            spark.stop()


def _write(df, target_protocol, target_options, staging, args, partitions_total: int, prepare=None):
    from pyspark.sql import functions as F

    from spark_apps.archive_io import write_topics_fn
    from spark_apps.schema import WRITTEN_STRUCT

    tasks = max(1, min(partitions_total, df.sparkSession.sparkContext.defaultParallelism * 2))
    ordered = df.repartition(tasks, "out_topic", "out_partition").sortWithinPartitions(
        "out_topic", "out_partition", "sort_point", "sort_rank", "partition", "offset", "event_index")
    fn = write_topics_fn(target_protocol, target_options, storage.join(staging, "data"),
                         args.max_records_per_object, prepare)
    return [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]


def _event_columns(df, extra=()):
    from cdc_codecs.events import EVENT_FIELD_NAMES

    return df.select(*EVENT_FIELD_NAMES, "out_topic", "out_partition", "sort_point", "sort_rank", *extra)


def _watermark_rows(spark, topics_df, watermarks_df, partitions: int):
    """Watermark events for every partition of every output topic."""
    from pyspark.sql import functions as F

    from cdc_codecs.events import EVENT_FIELDS
    from spark_apps.schema import EVENT_STRUCT

    parts = spark.range(partitions).select(F.col("id").cast("int").alias("out_partition"))
    base = topics_df.crossJoin(parts).crossJoin(watermarks_df)
    columns = []
    for field in EVENT_STRUCT.fields:
        if field.name == "kind":
            columns.append(F.lit(Kind.WATERMARK).alias("kind"))
        elif field.name == "watermark_ts":
            columns.append(F.col("wm").alias("watermark_ts"))
        elif field.name == "event_index":
            columns.append(F.lit(0).alias("event_index"))
        else:
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
    return base.select(*columns, "out_topic", "out_partition",
                       F.array(F.col("wm")).alias("sort_point"), F.lit(3).alias("sort_rank"))


def _emit_snapshot(spark, applied, history, cut, args, target, target_protocol, target_options, partitions, staging):
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.snapshot import projector

    rows = applied.where(F.col("kind") == Kind.ROW)
    intervals = known = None
    if history.known:
        intervals = spark.createDataFrame(
            [(i.database, i.table, list(i.after), list(i.until) if i.until is not None else None,
              i.final_database, i.final_table, [list(k) for k in i.key_aliases]) for i in history.intervals()],
            "database string, table string, after array<bigint>, until array<bigint>, "
            "final_database string, final_table string, key_aliases array<array<string>>")
        known = spark.createDataFrame(sorted(history.known), "database string, table string")
    effects = T.row_effects(T.assign_tables(rows, intervals, known))
    live = T.live_rows(T.latest_per_key(effects))
    live = (live.withColumn("out_topic", T.topic_name(args.target_topic))
            .withColumn("out_partition", T.dispatch_partition(args.dispatcher, partitions))
            .withColumn("sort_point", F.col("timeline")).withColumn("sort_rank", F.lit(1)))
    out = _event_columns(live, extra=("timeline",)).persist(StorageLevel.MEMORY_AND_DISK)
    if cut["point"] is not None and cut["kind"] == "commit_ts":
        topics = out.select("out_topic").distinct()
        marks = spark.createDataFrame([(cut["point"][0],)], "wm bigint")
        out = out.unionByName(_watermark_rows(spark, topics, marks, partitions).withColumn(
            "timeline", F.col("sort_point")))
    table_rows = [r.asDict() for r in out.where(F.col("kind") == Kind.ROW)
                  .groupBy("database", "table").agg(F.count(F.lit(1)).alias("rows")).collect()]
    schemas = {(s.database.lower(), s.name.lower()): s for s in history.tables.values()}
    written = _write(out, target_protocol, target_options, staging, args, partitions * 4, projector(schemas))
    out.unpersist()
    return written, table_rows


def _emit_topics(spark, applied, cut, args, target, target_protocol, target_options, partitions, staging):
    from pyspark.sql import functions as F

    from spark_apps import transforms as T

    changes = applied.where(F.col("kind").isin(Kind.ROW, Kind.DDL))
    changes = changes.withColumn("out_topic", T.topic_name(args.target_topic)).withColumn(
        "sort_point", F.col("timeline")).withColumn(
        "sort_rank", F.when(F.col("kind") == Kind.DDL, 2).otherwise(T.change_rank(F.col("op") == "delete")))
    rows = changes.where(F.col("kind") == Kind.ROW).withColumn(
        "out_partition", T.dispatch_partition(args.dispatcher, partitions))
    ddl = changes.where(F.col("kind") == Kind.DDL)
    if target.ddl_placement == "first":
        ddl = ddl.withColumn("out_partition", F.lit(0))
    else:
        ddl = ddl.withColumn("out_partition", F.explode(F.sequence(F.lit(0), F.lit(partitions - 1))))
    out = _event_columns(rows).unionByName(_event_columns(ddl))
    if cut["kind"] == "commit_ts":
        marks = applied.where(F.col("kind") == Kind.WATERMARK).select(F.col("watermark_ts").alias("wm")).distinct()
        if cut["point"] is not None:
            marks = marks.unionByName(spark.createDataFrame([(cut["point"][0],)], "wm bigint")).distinct()
        topics = out.select("out_topic").distinct()
        out = out.unionByName(_watermark_rows(spark, topics, marks, partitions))
    return _write(out, target_protocol, target_options, staging, args, partitions * 4)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark", "botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = ReplayArgs.from_namespace(parser().parse_args(argv))
    try:
        manifest = run(args)
    except ReplayError as e:
        print(f"cdc-replay: error: {e}", file=sys.stderr)
        return 2
    print(manifest_mod.summary(manifest))
    quarantined = manifest["counts"]["quarantined"]
    if quarantined > args.max_bad_records:
        print(f"cdc-replay: error: {quarantined} records quarantined (more than --max-bad-records "
              f"{args.max_bad_records}); see {manifest['quarantine']['location']}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
