"""The replay Spark app: read an archive, decode, deduplicate, order, apply DDL, and emit a
snapshot, re-encoded topics or an SCD2 history, with a manifest.

Run by `cdc-replay replay` (which calls spark-submit on this file) or by Airflow's
SparkSubmitOperator with the same arguments. `run()` is the driver: it validates, takes the
output's lease, and runs the stages of spark_apps/stages/ in order over one run context, each
handing the next a small result (docs/architecture.md); then the output and the commit. Only
small aggregates reach the driver: per-partition watermarks, per-table counts, the DDL
statements, object lists.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import sys
import time
import uuid

if __package__ in (None, ""):  # run as a file by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # pyspark from the installed package, where its compiled bytecode is cached, not from
    # spark-submit's copy in pyspark.zip (spark_apps/pyspark_path.py)
    from spark_apps.pyspark_path import prefer_installed

    prefer_installed()

from cdc_codecs import Op, codec_class, parse_option_pairs  # noqa: E402

from spark_apps import manifest as manifest_mod  # noqa: E402
from spark_apps import kafka_io, masking, spark_compat, storage  # noqa: E402
from spark_apps.ddl import SchemaHistory  # noqa: E402
from spark_apps import contract  # noqa: E402
from spark_apps.contract import QUARANTINE, Kind, Status  # noqa: E402
from spark_apps.options import ReplayArgs, parser  # noqa: E402,F401  (parser: tests build args with it)
from spark_apps.stages import decode as decode_stage  # noqa: E402
from spark_apps.stages import dedupe as dedupe_stage  # noqa: E402
from spark_apps.stages import history as history_stage  # noqa: E402
from spark_apps.stages import summary as summary_stage  # noqa: E402
from spark_apps.stages.context import Decoded, History, ReplayError, RunContext, Tagged, Written, log  # noqa: E402
from spark_apps.stages.decode import (  # noqa: E402,F401  (the names tests and bench/ import from here)
    DECODE_FILES_ENV, DECODE_TASK_MB, DECODE_TASK_MB_ENV, UNREADABLE_ONLY, decode_tasks)
from spark_apps.stages.decode import choose_decoder as _decoder  # noqa: E402
from spark_apps.stages.decode import decode_files as _decode_files  # noqa: E402  (tests patch it here)
from spark_apps.stages.decode import decode_objects as _decode  # noqa: E402
from spark_apps.stages.decode import first_pass as _first_pass  # noqa: E402,F401
from spark_apps.stages.decode import release as _release  # noqa: E402
from spark_apps.stages.session import build_session, stop_session  # noqa: E402
from spark_apps.stages.summary import shape_columns as _shape_columns  # noqa: E402,F401
from spark_apps.stages.validate import check, list_source, parse_args, validate  # noqa: E402,F401
from spark_apps.stages.validate import home_of as _home  # noqa: E402


def run(args: ReplayArgs, spark=None) -> dict:
    """Run one replay; returns the manifest (also written to <output>/_manifest.json)."""
    started = time.time()
    spark_compat.install()  # Spark 3.5: what the app calls as Spark 4 takes it
    source_codec, target_protocol, target_options, base = validate(args)
    run_id = args.run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]
    source = args.source if kafka_io.is_kafka(args.source) else storage.normalize(args.source)
    output = args.output if kafka_io.is_kafka(args.output) else storage.normalize(args.output)
    home = _home(args, output)
    ctx = RunContext(args=args, run_id=run_id, started=started, source=source, output=output, home=home,
                     staging=contract.staging_prefix(home, run_id), source_codec=source_codec,
                     target_protocol=target_protocol, target_options=target_options, base=base)
    from spark_apps import faults, lease as lease_mod

    try:  # one run at a time per output (spark_apps.lease): taken before the output is touched
        lease = lease_mod.Lease(home, run_id, lease_mod.timeout_seconds(args.lease_timeout)).acquire()
    except lease_mod.LeaseHeld as e:
        raise ReplayError(str(e)) from None
    lease_mod.hold(lease)
    try:
        return _leased(ctx, spark)
    except BaseException:
        # what this run staged goes, unless its commit switched to it (the next run finishes it)
        faults.clean_staging(home, ctx.staging)
        raise
    finally:
        lease.release()
        lease_mod.hold(None)


def _leased(ctx: RunContext, spark) -> dict:
    """The run, once it holds its output's lease: the source listed, the session and the
    decode tasks' folder set up around the stages."""
    # a commit killed after its manifest switched to its staging area is finished first (a
    # retry with the same run id stages in the same place); what else a killed run with this
    # id staged is not part of this run
    if manifest_mod.finish_interrupted(ctx.home):
        ctx.say("finished the commit an earlier run left interrupted in %s", ctx.home)
    storage.delete_prefix(ctx.staging)
    list_source(ctx)
    decoder = _decoder(ctx.source_codec)
    ctx.say("decoder chosen: %s (%s); the decode tasks report what they ran", decoder["path"], decoder["reason"])

    own_session = spark is None
    if own_session:
        ui = ["spark.ui.enabled=true"] if ctx.args.spark_ui else []
        spark = build_session(ctx.args.master, f"cdc-replay {ctx.run_id}", ui + ctx.args.spark_conf)
    from spark_apps.progress import Progress

    ctx.spark = spark
    try:
        with Progress(spark, ctx.run_id) as progress:
            ctx.progress = progress
            ctx.files = _decode_files(spark, ctx.source)
            try:
                return _stages(ctx)
            finally:
                if ctx.files:
                    shutil.rmtree(ctx.files, ignore_errors=True)
    finally:
        if own_session:
            stop_session(spark)


def _stages(ctx: RunContext) -> dict:
    """The stages in order, each handing the next its result (docs/architecture.md), then the
    commit, the only step that makes the output visible."""
    decoded = decode_stage.decode_pass(ctx)  # 2. objects -> persisted lean rows, partition stats
    tagged = dedupe_stage.dedupe_and_cut(ctx, decoded)  # 3. the cut, and every event's status
    hist = history_stage.schema_history(ctx, decoded, tagged)  # 4. DDL history, quarantine moves
    quarantine = summary_stage.write_quarantine(ctx, hist)  # 5. quarantine objects and reasons
    written = _output_stage(ctx, decoded, tagged, hist)  # 6. the output, staged
    manifest = summary_stage.build_manifest(ctx, decoded, tagged, hist, written, quarantine)
    if written.kafka is not None:
        _kafka_manifest(manifest, written.kafka, ctx.home)
    ctx.progress.phase(f"committing {ctx.home}")
    # lakehouse tables are committed already, table by table; the rest of the output stays
    manifest_mod.commit(ctx.home, ctx.staging, manifest, replace=written.lake_tables is None)
    ctx.say("committed %s", ctx.home)
    return manifest


def _output_stage(ctx: RunContext, decoded: Decoded, tagged: Tagged, hist: History) -> Written:
    """The output (`_OutputPlan`): the applied events in the requested form, written below the
    staging area; what Spark persisted of the earlier stages is released after it."""
    from pyspark.sql import functions as F

    args, spark, history = ctx.args, ctx.spark, hist.history
    ctx.progress.phase(f"writing the {args.emit} ({args.output_format})")
    applied = hist.tagged.where(F.col("status") == Status.APPLIED)
    base_rows = _base_rows(spark, ctx.base, args, hist.tagged.columns) if ctx.base else None
    target = codec_class(ctx.target_protocol)
    partitions = args.target_partitions or max(1, max((s["partition"] for s in decoded.partition_stats),
                                                      default=0) + 1)
    output_plan = _OutputPlan(spark, args, history, tagged.cut, target, ctx.target_protocol, ctx.target_options,
                              partitions, ctx.staging)
    # old values some protocols leave out (Avro), taken from the key's previous change
    # identical rows of a table without a key are counted (transforms.latest_per_key)
    output_plan.multiset = bool(hist.summary["keyless"]) or any(
        i.key_aliases == () for i in history.intervals())
    output_plan.fill_images = any(s["updates_without_before"] or s["rows_without_commit_ts"]
                                  for s in decoded.partition_stats)
    output_plan.run = {"run_id": ctx.run_id, "source": ctx.source, "output": ctx.output, "protocol": args.protocol}
    if kafka_io.is_kafka(ctx.output):
        output_plan.kafka_target(ctx.home, kafka_io.fingerprint(args, decoded.partition_stats, tagged.cut))
    try:
        if args.emit == "topics":
            written, table_rows = output_plan.topics(applied), None
        else:
            rows = applied.where(F.col("kind") == Kind.ROW)
            if base_rows is not None:
                rows = rows.unionByName(base_rows)
            elif args.emit == "snapshot":  # lean up to the last change per key, rebuilt after it
                # what only a record that could not be read carries is not carried through the
                # last change per key (every column there is sorted and aggregated)
                rows = hist.lean.where((F.col("status") == Status.APPLIED) & (F.col("kind") == Kind.ROW)).drop(
                    *UNREADABLE_ONLY)
                output_plan.dictionary = tagged.dictionary
            written, table_rows = (output_plan.snapshot(rows) if args.emit == "snapshot" else output_plan.history(rows))
    except Exception as e:  # an event the target protocol cannot carry fails the run, naming it
        text = str(e)
        if "UNENCODABLE " not in text:
            raise
        reason = text[text.index("UNENCODABLE ") + len("UNENCODABLE "):].splitlines()[0]
        raise ReplayError(f"the output was not written: {reason}. Choose a target protocol that carries it "
                          "(docs/protocols/README.md)") from None
    finally:
        for persisted in (tagged.duplicates, tagged.ready):
            persisted.unpersist()
        _release(decoded.decoded, ctx.files)
    return Written(objects=written, table_rows=table_rows, lake_tables=output_plan.lake_tables,
                   kafka=output_plan.kafka)


def _kafka_manifest(manifest: dict, kafka: dict, home: str) -> None:
    """What a Kafka output produced now and what an earlier run with the same fingerprint had
    already produced (skipped, not produced again)."""
    done = kafka["done"]
    out = manifest["output"]
    skipped = [w for w in out["objects"] if (w["topic"], w["partition"]) in done]
    out["objects"] = [w for w in out["objects"] if (w["topic"], w["partition"]) not in done]
    out["records"] = sum(w["records"] for w in out["objects"])
    out["rows"] = sum(w["rows"] for w in out["objects"])
    out["kafka"] = {"bootstrap_servers": kafka["servers"], "fingerprint": kafka["fingerprint"],
                    "producer": {k: v for k, v in kafka_io.PRODUCER_CONF.items()},
                    "client": kafka_io.described(kafka["config"]),
                    "skipped": skipped, "skipped_records": sum(w["records"] for w in skipped),
                    "markers": kafka["markers"], "manifest_uri": home}
    manifest["quarantine"]["location"] = storage.join(home, QUARANTINE)



def _table_frames(spark, history: SchemaHistory):
    """(intervals, known) of the DDL history for `transforms.assign_tables` and
    `mark_missing_tables`; (None, None) when no DDL mentioned a table."""
    if not history.known:
        return None, None
    from spark_apps import transforms as T
    from spark_apps.local_data import local_frame

    rows = [(i.database, i.table, list(i.after), list(i.until) if i.until is not None else None,
             i.final_database, i.final_table, None if i.key_aliases is None else [list(k) for k in i.key_aliases],
             None if i.row_columns is None else [(list(names), default) for names, default in i.row_columns])
            for i in history.intervals()]
    intervals = local_frame(
        spark, rows, "database string, table string, after array<bigint>, until array<bigint>, "
        "final_database string, final_table string, key_aliases array<array<string>>, "
        "row_columns array<struct<names: array<string>, default: binary>>")
    known = sorted(history.known)
    if len(known) > T.plan_literal_max():  # many tables: a broadcast join, not a search of a literal per row
        return intervals, local_frame(spark, known, "database string, table string")
    return intervals, known  # held in the plan: no broadcast job



def _base_rows(spark, base: dict, args: ReplayArgs, columns: list[str]):
    """The base snapshot's rows as applied row events placed at the window's start."""
    from pyspark.sql import functions as F

    objects = manifest_mod.current_objects(base)  # the manifest's list, never a listing (a commit may be under way)
    options = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in base["output"]["options"].items()}
    # credentials are masked in the manifest: this run's options of the same name supply them
    given = {**parse_option_pairs(args.protocol_option), **parse_option_pairs(args.target_option)}
    for name, value in options.items():
        if masking.MASK in value:
            if name not in given:
                raise ReplayError(f"--base-snapshot {args.base_snapshot}: its option {name} holds a credential "
                                  f"(masked in its manifest); give it again as --target-option {name}=...")
            options[name] = given[name]
    decoded = _decode(spark, objects, base["output"]["protocol"], options)
    rows = (decoded.where(F.col("kind") == Kind.ROW)
            .withColumn("inferred_ts", F.lit(None).cast("bigint"))
            .withColumn("event_time", F.lit(None).cast("bigint"))
            .withColumn("timeline", F.array(F.lit(int(args.since)).cast("bigint")))
            .withColumn("status", F.lit(Status.APPLIED)))
    return rows.select(*columns)


class _OutputPlan:
    """Turns applied events into the requested output; each method returns (objects
    written, rows per table or None)."""

    def __init__(self, spark, args, history, cut, target, target_protocol, target_options, partitions, staging):
        self.spark, self.args, self.schema_history, self.cut = spark, args, history, cut
        self.target, self.target_protocol, self.target_options = target, target_protocol, target_options
        self.partitions, self.staging = partitions, staging
        self.fill_images = False
        self.multiset = True  # a table without a key may hold identical rows: count them
        self.run: dict = {}
        self.lake_tables: dict | None = None  # delta/iceberg: what was committed, per table
        self.kafka = None  # a kafka:// output: where and what is already produced
        self.dictionary = None  # the schema dictionary (transforms.plan_dictionary) when the rows are lean

    def kafka_target(self, home: str, fingerprint: str) -> None:
        servers, _ = kafka_io.parse_uri(self.args.output, topics_required=False)
        markers = kafka_io.markers_base(home, fingerprint)
        done = kafka_io.finished_partitions(markers)
        if done:
            log.info("%d output partitions already produced by an earlier run of this replay (fingerprint %s): "
                     "skipped", len(done), fingerprint)
        self.kafka = {"servers": servers, "fingerprint": fingerprint, "markers": markers, "done": done,
                      "config": kafka_io.client_config()}

    # ----------------------------------------------------------------- helpers
    def _tables(self):
        return _table_frames(self.spark, self.schema_history)

    def _effects(self, rows):
        from spark_apps import transforms as T

        intervals, known = self._tables()
        return T.row_effects(T.assign_tables(rows, intervals, known), self.dictionary)

    def _full(self, df):
        """Full images from lean rows (a no-op for rows that are not lean)."""
        from spark_apps import transforms as T

        return T.full_images(df, self.dictionary, list(_event_names())) if "after_values" in df.columns else df

    def _schemas(self):
        return {(s.database.lower(), s.name.lower()): s for s in self.schema_history.tables.values() if s.columns_known}

    def _write_kafka(self, df, prepare=None):
        from spark_apps.archive_io import write_topics_fn
        from spark_apps.schema import WRITTEN_STRUCT

        if self.args.target_layout == "ticdc-storage":
            return self._write_storage_sink(df, prepare)

        tasks = max(1, min(self.partitions * 4, self.spark.sparkContext.defaultParallelism * 2))
        ordered = df.repartition(tasks, "out_topic", "out_partition").sortWithinPartitions(
            "out_topic", "out_partition", "sort_point", "sort_rank", "partition", "offset", "event_index")
        writer = None
        if self.kafka is not None:
            from spark_apps.kafka_io import writer_factory

            writer = writer_factory(self.kafka["servers"], self.partitions, self.kafka["markers"], self.kafka["done"],
                                    self.kafka["config"])
        fn = write_topics_fn(self.target_protocol, self.target_options, storage.join(self.staging, "data"),
                             self.args.max_records_per_object, prepare, writer)
        return [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]

    def _write_storage_sink(self, df, prepare=None):
        """--target-layout ticdc-storage: row events per table as TiCDC's storage sink writes
        them, and the root `metadata` whose checkpoint-ts is the cut."""
        from pyspark.sql import functions as F

        from spark_apps.layouts.ticdc_storage import write_tables_fn
        from spark_apps.schema import WRITTEN_STRUCT

        tasks = max(1, self.spark.sparkContext.defaultParallelism * 2)
        rows = df.where(F.col("kind") == Kind.ROW)
        ordered = rows.repartition(tasks, "database", "table").sortWithinPartitions(
            "database", "table", "sort_point", "sort_rank", "partition", "offset", "event_index")
        base = storage.join(self.staging, "data")
        fn = write_tables_fn(self.target_protocol, self.target_options, base, self.args.max_records_per_object, prepare)
        written = [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]
        if self.cut["kind"] == "commit_ts" and self.cut["commit_ts"] is not None:
            data = b'{"checkpoint-ts":%d}' % self.cut["commit_ts"]
            storage.write_bytes(storage.join(base, "metadata"), data)
        return written

    def _write_parquet(self, df, history: bool):
        from spark_apps.parquet_out import write_parquet_fn
        from spark_apps.schema import WRITTEN_STRUCT
        from spark_apps.snapshot import projector

        tasks = max(1, self.spark.sparkContext.defaultParallelism * 2)
        ordered = df.repartition(tasks, "database", "table").sortWithinPartitions("database", "table")
        fn = write_parquet_fn(storage.join(self.staging, "data"), history, projector(self._schemas(), schema_types=True))
        return [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]

    def _write_lake(self, df, history: bool, table_rows: list[dict]):
        """Delta/Iceberg: tasks write the data files into the tables, then one commit per table
        (spark_apps.lakehouse)."""
        from spark_apps import lakehouse
        from spark_apps.parquet_out import write_parquet_fn
        from spark_apps.schema import WRITTEN_STRUCT
        from spark_apps.snapshot import projector

        plan = lakehouse.plan_tables(self.args, self.run, self.cut, self._schemas(), table_rows)
        df = lakehouse.without_tables(df, plan.skip)  # a rerun's tables already at this cut
        tasks = max(1, self.spark.sparkContext.defaultParallelism * 2)
        ordered = df.repartition(tasks, "database", "table").sortWithinPartitions("database", "table")
        fn = write_parquet_fn("", history, projector(self._schemas(), schema_types=True),
                              uri_fn=lakehouse.data_uri_fn(self.run["output"], self.args.target_table, self.run["run_id"]),
                              type_fn=lakehouse.arrow_type, time_unit="us")
        written = [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]
        self.lake_tables = plan.commit(written, history)
        return written

    def _merge_lake(self, latest, table_rows: list[dict]):
        """Delta/Iceberg with --since: tasks write each key's last change in the window (the
        new row, or the deleted row's image with `_op` delete) to staging files; the driver
        merges them into each table, one version per table (spark_apps.lakehouse)."""
        from pyspark.sql import functions as F

        from spark_apps import lakehouse
        from spark_apps.parquet_out import write_parquet_fn
        from spark_apps.schema import WRITTEN_STRUCT
        from spark_apps.snapshot import projector

        plan = lakehouse.plan_tables(self.args, self.run, self.cut, self._schemas(), table_rows)
        latest = self._full(latest)
        deleted = F.col("effect") == "delete"
        changes = (latest.withColumn("after", F.when(~deleted, F.col("after")))
                   .withColumn("before", F.when(deleted, F.col("before")))
                   .withColumn("_op", F.when(deleted, F.lit("delete")).otherwise(F.lit("upsert")))
                   .withColumn("database", F.col("final_database")).withColumn("table", F.col("final_table")))
        for name in ("_valid_from_ts", "_valid_to_ts", "_valid_from_ms", "_valid_to_ms"):
            changes = changes.withColumn(name, F.lit(None).cast("bigint"))
        changes = changes.withColumn("_current", F.lit(None).cast("boolean")).select(
            *_event_names(), "timeline", "_op", "_valid_from_ts", "_valid_to_ts", "_valid_from_ms", "_valid_to_ms",
            "_current")
        base = storage.join(self.staging, "_window")
        tasks = max(1, self.spark.sparkContext.defaultParallelism * 2)
        ordered = changes.repartition(tasks, "database", "table").sortWithinPartitions("database", "table")
        fn = write_parquet_fn(base, True, projector(self._schemas(), schema_types=True),
                              type_fn=lakehouse.arrow_type, time_unit="us")
        written = [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]
        try:
            self.lake_tables = plan.commit_window(written, int(self.args.since))
        except lakehouse.LakehouseError as e:
            raise ReplayError(str(e)) from e
        finally:
            storage.delete_prefix(base)
        return []  # the window's files were merged (and removed): the tables hold the rows

    def _event_columns(self, df, extra=()):
        from cdc_codecs.events import EVENT_FIELD_NAMES

        return df.select(*EVENT_FIELD_NAMES, "out_topic", "out_partition", "sort_point", "sort_rank", *extra)

    def _watermark_rows(self, topics_df, marks):
        """Watermark events for every partition of every output topic; `marks`: a DataFrame of
        watermarks (`wm`), or one watermark (held in the plan: no join, no broadcast job)."""
        from pyspark.sql import functions as F

        from spark_apps.schema import EVENT_STRUCT

        base = topics_df.withColumn("out_partition", F.explode(F.sequence(F.lit(0), F.lit(self.partitions - 1))))
        if isinstance(marks, int):
            base = base.withColumn("wm", F.lit(marks).cast("bigint"))
        else:
            base = base.crossJoin(marks)
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

    # ----------------------------------------------------------------- outputs
    def snapshot(self, rows):
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from spark_apps import transforms as T
        from spark_apps.snapshot import projector

        latest = T.unpacked(T.latest_per_key(self._effects(T.packed(rows)), multiset=self.multiset)).persist(
            StorageLevel.DISK_ONLY)
        # per table: live rows, and keys the archive first touched with an UPDATE / a DELETE
        table_rows = [r.asDict() for r in latest.groupBy(
            F.col("final_database").alias("database"), F.col("final_table").alias("table")).agg(
            F.sum(T.live_copies()).alias("rows"),
            F.count(F.when(F.col("first_change") == Op.UPDATE, 1)).alias("keys_first_updated"),
            F.count(F.when(F.col("first_change") == Op.DELETE, 1)).alias("keys_first_deleted")).collect()]
        live = self._full(T.live_rows(latest, multiset=self.multiset))
        if self.args.output_format == "parquet":
            written = self._write_parquet(live.select(*_event_names(), "timeline"), history=False)
            latest.unpersist()
            return written, table_rows
        if self.args.output_format in ("delta", "iceberg") and self.args.since is not None:
            written = self._merge_lake(latest, table_rows)
            latest.unpersist()
            return written, table_rows
        if self.args.output_format in ("delta", "iceberg"):
            written = self._write_lake(live.select(*_event_names(), "timeline"), False, table_rows)
            latest.unpersist()
            return written, table_rows
        live = T.with_partition(live.withColumn("out_topic", T.topic_name(self.args.target_topic)),
                                self.args.dispatcher, self.partitions)
        live = live.withColumn("sort_point", F.col("timeline")).withColumn("sort_rank", F.lit(1))
        out = self._event_columns(live, extra=("timeline",))
        if self.cut["point"] is not None and self.cut["kind"] == "commit_ts":
            out = out.unionByName(self._watermark_rows(out.select("out_topic").distinct(), int(self.cut["point"][0])).withColumn(
                "timeline", F.col("sort_point")))
        written = self._write_kafka(out, projector(self._schemas()))
        latest.unpersist()
        return written, table_rows

    def history(self, rows):
        """SCD type 2: one version per change of every key, valid until the key's next change."""
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        from spark_apps import transforms as T

        effects = self._effects(rows)
        per_key = Window.partitionBy("final_database", "final_table", "row_key").orderBy(T.order_struct())
        valid_from = F.coalesce(F.col("commit_ts"), F.col("inferred_ts"))
        versions = (
            effects.withColumn("_op", F.when(F.col("effect") == "delete", F.lit("delete")).otherwise(F.col("op")))
            .withColumn("_valid_from_ts", valid_from)
            .withColumn("_valid_from_ms", F.col("execute_ts_ms"))
            .withColumn("_valid_to_ts", F.lead(valid_from).over(per_key))
            .withColumn("_valid_to_ms", F.lead("execute_ts_ms").over(per_key))
            .withColumn("_next", F.lead("effect").over(per_key))
            .withColumn("_current", F.col("_next").isNull() & (F.col("effect") == "upsert"))
            # the image of the version: the new row, or for a deletion the row that was deleted
            .withColumn("after", F.when(F.col("effect") == "upsert", F.col("after")))
            .withColumn("before", F.when(F.col("effect") == "delete", F.col("before")))
            .withColumn("database", F.col("final_database")).withColumn("table", F.col("final_table"))
            .persist(StorageLevel.DISK_ONLY)
        )
        table_rows = [r.asDict() for r in versions.groupBy("database", "table").agg(
            F.count(F.lit(1)).alias("rows")).collect()]
        columns = versions.select(*_event_names(), "timeline", "_op", "_valid_from_ts", "_valid_to_ts",
                                  "_valid_from_ms", "_valid_to_ms", "_current")
        if self.args.output_format == "parquet":
            written = self._write_parquet(columns, history=True)
        else:
            written = self._write_lake(columns, True, table_rows)
        versions.unpersist()
        return written, table_rows

    def topics(self, applied):
        from pyspark.sql import functions as F

        from spark_apps import transforms as T

        changes = applied.where(F.col("kind").isin(Kind.ROW, Kind.DDL))
        if self.fill_images:
            changes = T.fill_previous_images(changes.where(F.col("kind") == Kind.ROW)).unionByName(
                changes.where(F.col("kind") == Kind.DDL))
        changes = changes.withColumn("out_topic", T.topic_name(self.args.target_topic)).withColumn(
            "sort_point", F.col("timeline")).withColumn(
            "sort_rank", F.when(F.col("kind") == Kind.DDL, 2).otherwise(T.change_rank(F.col("op") == "delete")))
        rows = T.with_partition(changes.where(F.col("kind") == Kind.ROW), self.args.dispatcher, self.partitions)
        ddl = changes.where(F.col("kind") == Kind.DDL)
        if self.target.ddl_placement == "first":
            ddl = ddl.withColumn("out_partition", F.lit(0))
        else:
            ddl = ddl.withColumn("out_partition", F.explode(F.sequence(F.lit(0), F.lit(self.partitions - 1))))
        out = self._event_columns(rows).unionByName(self._event_columns(ddl))
        if self.cut["kind"] == "commit_ts":
            marks = applied.where(F.col("kind") == Kind.WATERMARK).select(F.col("watermark_ts").alias("wm"))
            if self.args.since is not None:
                marks = marks.where(F.col("wm") > self.args.since)
            if self.cut["point"] is not None:
                from spark_apps.local_data import local_frame

                marks = marks.unionByName(local_frame(self.spark, [(self.cut["point"][0],)], "wm bigint"))
            out = out.unionByName(self._watermark_rows(out.select("out_topic").distinct(), marks.distinct()))
        from spark_apps.snapshot import precision_from_history

        return self._write_kafka(out, precision_from_history(self.schema_history))


def _event_names():
    from cdc_codecs.events import EVENT_FIELD_NAMES

    return EVENT_FIELD_NAMES


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark", "botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    args = None
    try:
        args = parse_args(masking.argv_from_environment(argv))
        manifest = run(args)
    except ReplayError as e:
        print(f"cdc-replay: error: {masking.mask_text(str(e))}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a fault during the run: one line, the trace in a file
        from spark_apps import faults

        trace = faults.record_trace(e, faults.trace_file())
        print(f"cdc-replay: error: the run failed: {masking.mask_text(faults.cause_of(e))}"
              + (f" (full trace: {trace})" if trace else ""), file=sys.stderr)
        return 1
    summary = manifest_mod.summary(manifest)
    from spark_apps.launch import SUMMARY_ENV

    if os.environ.get(SUMMARY_ENV):  # `cdc-replay replay` prints it on its stdout, apart from the log
        with open(os.environ[SUMMARY_ENV], "w", encoding="utf-8") as f:
            f.write(summary + "\n")
    else:
        print(summary)
    quarantined = manifest["counts"]["quarantined"]
    if quarantined > args.max_bad_records:
        print(f"cdc-replay: error: {quarantined} records quarantined (more than --max-bad-records "
              f"{args.max_bad_records}); see {manifest['quarantine']['location']}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
