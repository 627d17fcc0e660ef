"""What the replay writes, built from its applied events, and handed to the chosen target
(spark_apps.outputs.base.Target): the snapshot (the last change per key), the SCD2 history
(stages/engine.py `_versions`) or the topics (every applied change, with watermarks).

Imports nothing of the replay driver: the driver gives the plan its inputs (spark_apps.replay,
step "output") and reads back `lake_tables` and `kafka` for the manifest."""

from __future__ import annotations

import logging

from cdc_codecs import Op, parse_option_pairs
from cdc_codecs.events import EVENT_FIELD_NAMES

from .. import manifest as manifest_mod
from .. import masking
from ..contract import Kind, ProtocolSpec, Status
from .base import HISTORY, SNAPSHOT, TOPICS, WINDOW, OutputError, TargetSpec, target_for
from .kafka import prepared
from .parquet import WINDOW_COPY_COLUMNS

log = logging.getLogger("cdc_replay")


def table_frames(spark, history):
    """(intervals, known) of the DDL history (ddl.SchemaHistory) for `engine_v2.tag_effects`'
    table assignment and `transforms.mark_missing_tables`; (None, None) when no DDL mentioned a table."""
    if not history.known:
        return None, None
    from .. import transforms as T
    from ..local_data import local_frame

    rows = [(i.database, i.table, list(i.after), list(i.until) if i.until is not None else None,
             i.final_database, i.final_table, None if i.key_aliases is None else [list(k) for k in i.key_aliases],
             None if i.row_columns is None else [(list(names), default, list(added))
                                                for names, default, added in i.row_columns])
            for i in history.intervals()]
    intervals = local_frame(
        spark, rows, "database string, table string, after array<bigint>, until array<bigint>, "
        "final_database string, final_table string, key_aliases array<array<string>>, "
        f"row_columns {T.ROW_COLUMNS_TYPE}")
    known = sorted(history.known)
    if len(known) > T.plan_literal_max():  # many tables: a broadcast join, not a search of a literal per row
        return intervals, local_frame(spark, known, "database string, table string")
    return intervals, known  # held in the plan: no broadcast job


def base_rows(spark, base: dict, args, columns: list[str], decode):
    """The base snapshot's rows (--base-snapshot, a Kafka-record archive this app wrote) as
    applied row events placed at the window's start; `decode(spark, objects, ProtocolSpec)` is
    the replay's decode of archive objects. OutputError when a credential its
    manifest masks is not given again."""
    from pyspark.sql import functions as F

    objects = manifest_mod.current_objects(base)  # the manifest's list, never a listing (a commit may be under way)
    options = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in base["output"]["options"].items()}
    # credentials are masked in the manifest: this run's options of the same name supply them
    given = {**parse_option_pairs(args.protocol_option), **parse_option_pairs(args.target_option)}
    for name, value in options.items():
        if masking.MASK in value:
            if name not in given:
                raise OutputError(f"--base-snapshot {args.base_snapshot}: its option {name} holds a credential "
                                  f"(masked in its manifest); give it again as --target-option {name}=...")
            options[name] = given[name]
    decoded = decode(spark, objects, ProtocolSpec(base["output"]["protocol"], options))
    rows = (decoded.where(F.col("kind") == Kind.ROW)
            .withColumns({"inferred_ts": F.lit(None).cast("bigint"), "event_time": F.lit(None).cast("bigint"),
                          "timeline": F.array(F.lit(int(args.since)).cast("bigint")),
                          "status": F.lit(Status.APPLIED)}))
    return rows.select(*columns)


class OutputPlan:
    """Turns applied events into the requested output; each method returns (objects
    written, rows per table or None)."""

    def __init__(self, spark, args, history, cut, target: TargetSpec, staging: str):
        self.spark, self.args, self.schema_history, self.cut = spark, args, history, cut
        # what the targets read (spark_apps.outputs.base.Target)
        self.target, self.target_protocol, self.target_options = target.codec, target.protocol, target.options
        self.partitions, self.staging = target.partitions, staging
        self.fill_images = False
        self.multiset = True  # a table without a key may hold identical rows: count them
        self.run: dict = {}
        self.lake_tables: dict | None = None  # delta/iceberg: what was committed, per table
        self.kafka = None  # a kafka:// output: where and what is already produced
        self.dictionary = None  # the schema dictionary (transforms.plan_dictionary) when the rows are lean
        self.schema_entries: dict | None = None  # the same as {id: (names, types, flags)}: lean topics' writer

    def kafka_target(self, home: str, fingerprint: str) -> None:
        self.kafka = prepared(self.args.output, home, fingerprint)

    # ----------------------------------------------------------------- helpers
    def _full(self, df):
        """Full images from lean rows (a no-op for rows that are not lean)."""
        from .. import transforms as T

        return T.full_images(df, self.dictionary, list(EVENT_FIELD_NAMES)) if "after_values" in df.columns else df

    def schemas(self) -> dict:
        """The tables whose columns the DDL history knows, by lower-case (database, table)."""
        return {(s.database.lower(), s.name.lower()): s for s in self.schema_history.tables.values() if s.columns_known}

    def _write(self, df, kind: str, prepare=None, table_rows=None) -> list[dict]:
        """Hand the frame to the chosen target (spark_apps.outputs.base.target_for)."""
        target = target_for(self.args)(self)
        written = target.write(df, kind, prepare=prepare, table_rows=table_rows)
        if target.committed is not None:
            self.lake_tables = target.committed
        return written

    def _event_columns(self, df, extra=()):
        """The writer's columns; lean images (`<image>_schema/_values/_labels`) in place of the images where `df` has them."""
        from ..transforms import IMAGES, LEAN_COLUMNS

        fields = ([n for n in EVENT_FIELD_NAMES if n not in IMAGES] + list(LEAN_COLUMNS)
                  if "after_values" in df.columns else EVENT_FIELD_NAMES)
        return df.select(*fields, "out_topic", "out_partition", "sort_point", "sort_rank", *extra)

    def _topics_frame(self, out_topics):
        """The output topics the driver named (held in the plan: no job) as a frame of `out_topic`."""
        from ..local_data import local_frame

        return local_frame(self.spark, [(t,) for t in sorted(out_topics)], "out_topic string not null")

    def _watermark_rows(self, topics_df, marks, lean=None):
        """Watermark events for every partition of every output topic; `marks`: a DataFrame of
        watermarks (`wm`), or one watermark (held in the plan: no join, no broadcast job);
        `lean`: the schema of lean events, whose (null) lean images they then carry."""
        from pyspark.sql import functions as F

        from ..schema import EVENT_STRUCT
        from ..transforms import IMAGES, LEAN_COLUMNS

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
            elif lean is not None and field.name in IMAGES:
                if field.name == "after":
                    columns.extend(F.lit(None).cast(lean[c].dataType).alias(c) for c in LEAN_COLUMNS)
            else:
                columns.append(F.lit(None).cast(field.dataType).alias(field.name))
        return base.select(*columns, "out_topic", "out_partition",
                           F.array(F.col("wm")).alias("sort_point"), F.lit(3).alias("sort_rank"))

    def _window_changes(self, latest):
        """A --since window's last change per key, merged into Delta/Iceberg tables: the new
        row, or the deleted row's image with `_op` delete."""
        from pyspark.sql import functions as F

        from .. import transforms as T

        latest = self._full(latest)
        deleted = F.col("effect") == "delete"
        # one step (each expression reads `latest`'s columns): a step per column was an analysis each
        changes = {"after": F.when(~deleted, F.col("after")), "before": F.when(deleted, F.col("before")),
                   "_op": F.when(deleted, F.lit("delete")).otherwise(F.lit("upsert")),
                   "database": F.col("final_database"), "table": F.col("final_table")}
        for name in ("_valid_from_ts", "_valid_to_ts", "_valid_from_ms", "_valid_to_ms"):
            changes[name] = F.lit(None).cast("bigint")
        # a table without a key: how the window moves its count of each identical row (the
        # merge reads the table's count, transforms.copy_steps)
        for name, part in zip(WINDOW_COPY_COLUMNS, ("add", "floor")):
            changes[name] = F.col("copy_steps")[part] if "copy_steps" in latest.columns else F.lit(None).cast("int")
        changes["_current"] = F.lit(None).cast("boolean")
        return latest.withColumns(changes).select(*EVENT_FIELD_NAMES, "timeline", *T.SCD2_COLUMNS, *WINDOW_COPY_COLUMNS)

    # ----------------------------------------------------------------- outputs
    def snapshot(self, latest):
        """The last change per key (`latest`, a frame still to compute: stages/engine.py's),
        written. Persisted: the per-table counts and the write both read it."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from .. import transforms as T
        from ..snapshot import projector

        latest = latest.persist(StorageLevel.DISK_ONLY)
        target = target_for(self.args)
        watermarks = target.records and self.cut["point"] is not None and self.cut["kind"] == "commit_ts"
        # per table: live rows, and keys the archive first touched with an UPDATE / a DELETE;
        # for watermarks also the source topics of its live rows, whose output topics
        # (`topic_name_of`, as the rows' `topic_name`) get them: no job of their own
        topics = ([F.collect_set(F.when(T.live_copies() > 0, F.coalesce(F.col("topic"), F.lit("")))).alias("_topics")]
                  if watermarks else [])
        table_rows = [r.asDict() for r in latest.groupBy(
            F.col("final_database").alias("database"), F.col("final_table").alias("table")).agg(
            F.sum(T.live_copies()).alias("rows"),
            F.count(F.when(F.col("first_change") == Op.UPDATE, 1)).alias("keys_first_updated"),
            F.count(F.when(F.col("first_change") == Op.DELETE, 1)).alias("keys_first_deleted"), *topics).collect()]
        out_topics: set[str] = set()
        for r in table_rows:
            out_topics.update(T.topic_name_of(self.args.target_topic, topic, r["database"], r["table"])
                              for topic in r.pop("_topics", None) or ())
        live = self._full(T.live_rows(latest, multiset=self.multiset))
        if not target.records and target.merges_windows and self.args.since is not None:
            written = self._write(self._window_changes(latest), WINDOW, table_rows=table_rows)
        elif not target.records:
            written = self._write(live.select(*EVENT_FIELD_NAMES, "timeline"), SNAPSHOT, table_rows=table_rows)
        else:
            live = T.with_partition(live.withColumn("out_topic", T.topic_name(self.args.target_topic)),
                                    self.args.dispatcher, self.partitions)
            live = live.withColumns({"sort_point": F.col("timeline"), "sort_rank": F.lit(1)})
            out = self._event_columns(live, extra=("timeline",))
            if watermarks:
                out = out.unionByName(self._watermark_rows(self._topics_frame(out_topics), int(self.cut["point"][0]))
                                      .withColumn("timeline", F.col("sort_point")))
            written = self._write(out, SNAPSHOT, prepare=projector(self.schemas()), table_rows=table_rows)
        latest.unpersist()
        return written, table_rows

    def history(self, versions):
        """SCD type 2: one version per change of every key, valid until the key's next change
        (`versions`, a frame still to compute: stages/engine.py `_versions`'s), written.
        Persisted: the per-table counts and the write both read it."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from .. import transforms as T

        versions = versions.persist(StorageLevel.DISK_ONLY)
        table_rows = [r.asDict() for r in versions.groupBy("database", "table").agg(
            F.count(F.lit(1)).alias("rows")).collect()]
        columns = versions.select(*EVENT_FIELD_NAMES, "timeline", *T.SCD2_COLUMNS)
        written = self._write(columns, HISTORY, table_rows=table_rows)
        versions.unpersist()
        return written, table_rows

    def topics(self, applied, out_topics=None, marks=None):
        """Every applied change, placed in its output topic partition, with watermarks. `applied`
        may be lean (`self.dictionary` and `schema_entries` set, no `fill_images`): the rows are
        placed from their lean form (transforms.with_partition_lean), shuffled and sorted lean,
        and the writer rebuilds their images (kafka_records.full_images_batch). `out_topics`: the
        output topics of `applied`'s row and DDL events as the driver named them (stages/output.py
        `output_topics`), which get the watermarks; None: Spark finds them (a distinct over the
        events, a job of its own). `marks`: the distinct watermark ts of `applied`'s watermark
        events as the driver holds them (stages/summary.py); None: Spark's distinct of them."""
        from pyspark.sql import functions as F

        from .. import transforms as T
        from ..snapshot import precision_from_history

        lean = applied.schema if "after_values" in applied.columns else None
        changes = applied.where(F.col("kind").isin(Kind.ROW, Kind.DDL))
        if self.fill_images:
            changes = T.fill_previous_images(changes.where(F.col("kind") == Kind.ROW)).unionByName(
                changes.where(F.col("kind") == Kind.DDL))
        changes = changes.withColumns({
            "out_topic": T.topic_name(self.args.target_topic), "sort_point": F.col("timeline"),
            "sort_rank": F.when(F.col("kind") == Kind.DDL, 2).otherwise(T.change_rank(F.col("op") == "delete"))})
        rows = changes.where(F.col("kind") == Kind.ROW)
        if lean is None:
            rows = T.with_partition(rows, self.args.dispatcher, self.partitions)
        else:  # placed from the lean rows (index-value: the key columns by position)
            rows = T.with_partition_lean(rows, self.args.dispatcher, self.partitions, self.dictionary)
        ddl = changes.where(F.col("kind") == Kind.DDL)
        if self.target.ddl_placement == "first":
            ddl = ddl.withColumn("out_partition", F.lit(0))
        else:
            ddl = ddl.withColumn("out_partition", F.explode(F.sequence(F.lit(0), F.lit(self.partitions - 1))))
        out = self._event_columns(rows).unionByName(self._event_columns(ddl))
        if self.cut["kind"] == "commit_ts":
            from ..local_data import local_frame

            since, point = self.args.since, self.cut["point"]
            if marks is not None:  # held in the plan: no job, no broadcast of a distinct
                held = {m for m in marks if since is None or (m is not None and m > since)}
                held |= {point[0]} if point is not None else set()
                marks = local_frame(self.spark, [(m,) for m in sorted(held, key=lambda m: (m is not None, m or 0))],
                                    "wm bigint")
            else:
                marks = applied.where(F.col("kind") == Kind.WATERMARK).select(F.col("watermark_ts").alias("wm"))
                if since is not None:
                    marks = marks.where(F.col("wm") > since)
                if point is not None:
                    marks = marks.unionByName(local_frame(self.spark, [(point[0],)], "wm bigint"))
                marks = marks.distinct()
            topics_df = out.select("out_topic").distinct() if out_topics is None else self._topics_frame(out_topics)
            out = out.unionByName(self._watermark_rows(topics_df, marks, lean))
        return self._write(out, TOPICS, prepare=precision_from_history(self.schema_history))
