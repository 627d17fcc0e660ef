"""Engine v2, the core (issue 33, first step): the duplicate check, the statuses (cut,
window, scope, missing tables), the last change per key and the summary's counts from ONE
shuffle of the events, partitioned by (final table, real key).

v1 (spark_apps/stages/ and `outputs.OutputPlan.snapshot`) takes three passes over the events
after the decode: `duplicate_places` (a shuffle by identity), the summary (`_summarise`, a
group-by), and the last change per key (`latest_per_key`, a shuffle by key), the DDL history
being built on the driver between the second and the third. Here the history's key
information at the cut (`intervals`, `known`: outputs.table_frames of a `ddl.SchemaHistory`)
is an input, built before the shuffle from the DDL events (few; `applied_ddl` picks the ones
v1 applies), so every row event's final table and real key are known in the map stage:

1. every event is routed: a row event of a live table by each of its effects (an UPDATE that
   changes its key has two, a DELETE of the old key and an upsert of the new: exploded before
   the shuffle, the copy counted by the summary being the upsert), every other event
   (DDL, watermarks, out-of-scope rows, rows of a missing table, records that could not be
   read) by its identity;
2. one hash shuffle by (final database, final table, row key, route);
3. within the partitions, windows whose partitioning includes those columns (so Spark plans
   no other exchange: `shuffle_exchanges` counts them, tests/test_engine_v2.py asserts one):
   the first copy of each identity (`transforms.FIRST_SEEN`), the status exactly as
   `transforms.tag_status` + `mark_missing_tables` give it, and the last applied change per
   key in the replay order (`transforms.order_struct`) with `first_change` and the copies of
   a keyless table (`transforms.latest_per_key`'s fold).

Copies of one event meet in one partition because they share their identity, hence their
table, images and commit ts, hence (with the same interval of the history and the same key
columns) their keys. Two conditions break that, and the run must then use v1's passes:

* copies whose own `key_columns` differ (the identity does not hold them; a table the
  history does not key): detected in the same pass — `summary_counts` reports every table
  whose row events name more than one key-column list (`own_key_conflicts`);
* copies whose timelines differ and fall into different intervals of the history: only
  archives without commit ts and position (the timeline holds the copy's partition and
  offset). `fallback_reason` refuses that case before the shuffle.

Renames, key changes across the history and a keyless table's ADD COLUMN are not hard cases
here: the history at the cut gives each row its final table, key aliases and row columns
before the shuffle, as v1's `assign_tables` does after its summary. What the history cannot
know before the shuffle is a table whose schema v1 takes from the stream
(`SchemaHistory.use_stream_schemas`, from the summary's column sets): `fallback_reason` again.
docs/engine.md, "Engine v2 (thirteenth session)".
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdc_codecs.events import Op

from . import transforms as T
from .contract import Kind, Status
from .schema import QUARANTINE_KIND

# the one shuffle's columns: a keyed effect's (final table, key), every other event's identity
ROUTE = ("final_database", "final_table", "row_key", "_route")
# columns only the engine reads; `latest` and `summary_counts` leave them out
_INTERNAL = ("_identity", "_route", "_counted", "_live", "_last", "_missing", "_own_keys", "_time_bucket", "_effect",
             "_before", "_after", "_before_key", "_after_key", "_rn", "_n", "_copy_changes", "_moved", "_was_error",
             "_was_error_stage")


def fallback_reason(*, untimed: bool, intervals, inferred_schemas=(), require_schema: bool = False) -> str | None:
    """Why this run cannot take the one-shuffle path (None: it can). Checked on the driver
    before the shuffle; the caller runs v1's passes instead. `untimed`: the archive has
    neither commit ts nor producer positions (replay's `needs_event_time`)."""
    if untimed and intervals is not None:
        return ("no commit ts nor position, and a DDL history: copies of an event may fall into different "
                "intervals of a table (their timelines hold their own offsets)")
    if inferred_schemas:
        return "a table's schema is taken from its row events (known only after the summary)"
    if require_schema:
        return "--require-schema: tables without a known schema are quarantined after the summary"
    return None


def applied_ddl(ddl_events: list[dict], *, tables: list[str] | None, cut, since: int | None) -> list[dict]:
    """The DDL events v1 applies (its summary's `ddl`), picked on the driver from the decode's
    DDL events (stages.decode.first_pass, few) before any shuffle: in `tables`' scope, at or below the
    cut, above `since`, the first copy of each identity by `FIRST_SEEN`; in timeline order.
    Archives with commit ts or positions only (`fallback_reason` refuses the others: an
    untimed DDL's point is its partition's running event time, a window over every event)."""
    patterns = [_pattern(p) for p in (tables or [])]
    picked: dict = {}
    for d in ddl_events:
        if d.get("topic") is None:
            continue
        point = [d["commit_ts"]] if d.get("commit_ts") is not None else d.get("position")
        if point is None:
            raise ValueError("applied_ddl: a DDL event without commit ts or position")
        if patterns and not any(_matches(p, d.get("database"), d.get("table")) for p in patterns):
            continue
        identity = (d.get("database"), d.get("table"), d.get("commit_ts"), _tuple(d.get("position")),
                    d.get("ddl_query"))
        seen = tuple(_nulls_first(d.get(c)) for c in T.FIRST_SEEN)
        if identity not in picked or seen < picked[identity][0]:
            picked[identity] = (seen, {**d, "timeline": list(point)})
    rows = [d for _, d in picked.values()
            if (cut is None or list(d["timeline"]) <= [int(p) for p in cut])
            and (since is None or list(d["timeline"]) > [since])]
    return sorted(rows, key=lambda r: (list(r["timeline"]), _nulls_first(r.get("partition")),
                                       _nulls_first(r.get("offset")), _nulls_first(r.get("event_index"))))


def _tuple(value):
    return tuple(value) if value is not None else None


def _nulls_first(value):
    return (value is not None, value if value is not None else 0)


def _pattern(pattern: str) -> tuple:
    import fnmatch

    db, dot, table = pattern.strip().partition(".")
    return (re.compile(fnmatch.translate(db), re.I), re.compile(fnmatch.translate(table if dot else "*"), re.I))


def _matches(pattern: tuple, database, table) -> bool:
    """`transforms.table_filter` for one event on the driver (Java's regex on Spark's side: the
    patterns are shell wildcards, which both read alike)."""
    db_re, table_re = pattern
    return bool(db_re.match(database or "")) and (table is None or bool(table_re.match(table)))


def tag_effects(ready: DataFrame, *, tables: list[str] | None = None, cut=None, since: int | None = None,
                intervals: DataFrame | None = None, known=None, stretches: DataFrame | None = None,
                stretch_names=None, dictionary: T.SchemaDictionary | None = None,
                multiset: bool = True, bucket: Column | None = None, partitions: int | None = None,
                base: DataFrame | None = None, in_base: list[int] | None = None) -> DataFrame:
    """Every event of `ready` (replay's frame fed to duplicate_places/tag_status: lean or full
    rows, after `infer_commit_ts`/`partition_event_time`), one row per effect, after the one
    shuffle: `status`, `timeline`, `error`/`error_stage` (a missing table's quarantine), the
    keyed effect's `final_database`, `final_table`, `row_key`, `effect`, `rank`,
    `copy_change`, and `first_change`, `copies` on the key's last applied change (`_last`).
    `intervals`/`known`: the DDL history at the cut (outputs.table_frames; None: no DDL named a
    table); `stretches`/`stretch_names`: where each name the DDL named exists
    (`existence_frames`; None: no check). `dictionary`: the schema dictionary for lean rows. `bucket`: the summary's
    commit-time bucket (transforms.commit_bucket). `partitions`: of the shuffle (None: Spark's
    `spark.sql.shuffle.partitions`). `base`: the rows of a base snapshot or export (full
    images, their `timeline` set), applied events that enter only the last change per key
    (never counted, never duplicate-checked, never quarantined: v1 unions them with the
    applied rows after its summary); `in_base`: a base export's bound (tag_status's)."""
    df = T.with_timeline(ready)
    if base is not None:  # `_base` tells them apart; each side's missing columns are null
        df = df.withColumn("_base", F.lit(False)).unionByName(
            base.drop("status").withColumn("_base", F.lit(True)), allowMissingColumns=True)
    not_base = ~F.col("_base") if base is not None else F.lit(True)
    checked, redelivered_bad = T._checked(tables)
    in_scope = T.table_filter(tables) if tables else F.lit(True)
    df = df.withColumn("_identity", T.identity_of(ready))
    df = df.withColumn("_time_bucket", F.lit(None).cast("int") if bucket is None else bucket)
    # a row of a name the DDL named, at a point where no table of that name exists, is quarantined
    # if applied (transforms.mark_missing_tables over the history's existence stretches)
    if stretches is None:
        df = df.withColumn("_missing", F.lit(False))
    else:
        df = T._match_tables(df, stretches, stretch_names)
        missing = (F.col("kind") == Kind.ROW) & F.col("_final_tb").isNull() & F.col("_known").isNotNull()
        df = (df.withColumn("_missing", F.coalesce(missing, F.lit(False)) & not_base)
              .drop("_db", "_tb", "_final_db", "_final_tb", "_known", "key_aliases", "row_columns"))
    if intervals is None:
        df = (df.withColumn("_final_db", F.col("database")).withColumn("_final_tb", F.col("table"))
              .withColumn("key_aliases", F.lit(None).cast("array<array<string>>"))
              .withColumn("row_columns", F.lit(None).cast(T.ROW_COLUMNS_TYPE))
              .withColumn("_live_table", F.lit(True)))
    else:  # assign_tables' broadcast join: a row of no live table at the cut (dropped) has no effect
        df = T._match_tables(df, intervals, known)
        df = (df.withColumn("_live_table", F.col("_final_tb").isNotNull() | F.col("_known").isNull())
              .withColumn("_final_db", F.coalesce(F.col("_final_db"), F.col("database")))
              .withColumn("_final_tb", F.coalesce(F.col("_final_tb"), F.col("table")))
              .drop("_db", "_tb", "_known"))
    effectful = (F.col("kind") == Kind.ROW) & ((in_scope & ~F.col("_missing")) | ~not_base) & F.col("_live_table")
    df = _effects(df, effectful, dictionary, base is not None)
    df = df.withColumn("_counted", F.col("_counted") & not_base)
    keyed = F.col("effect").isNotNull()
    df = (df.withColumn("final_database", F.when(keyed, F.col("_final_db")))
          .withColumn("final_table", F.when(keyed, F.col("_final_tb")))
          .withColumn("_route", F.when(~keyed, F.col("_identity")))
          .drop("_final_db", "_final_tb", "_live_table"))
    shuffled = df.repartition(partitions, *ROUTE) if partitions else df.repartition(*ROUTE)

    # the first copy of each identity: every copy is in this partition (module doc)
    copies = (*ROUTE, "_identity") + (("_base",) if base is not None else ())
    first = F.row_number().over(Window.partitionBy(*copies).orderBy(*T.FIRST_SEEN)) == 1
    status = _status(F.when(checked, first), checked, redelivered_bad, in_scope, cut, since, in_base)
    tagged = shuffled.withColumn("status", F.when(~not_base, F.lit(Status.APPLIED)).otherwise(status))
    missing = F.col("_missing") & (F.col("status") == Status.APPLIED)
    # what v1's summary sees of a row it moves after it (stages/engine.py undoes the move for it)
    tagged = (tagged.withColumn("_moved", missing).withColumn("_was_error", F.col("error"))
              .withColumn("_was_error_stage", F.col("error_stage")))
    tagged = (tagged.withColumn("error_stage", F.when(missing, F.lit(T.MISSING_TABLE_STAGE))
                                .otherwise(F.col("error_stage")))
              .withColumn("error", F.when(missing, T.missing_table_reason()).otherwise(F.col("error")))
              .withColumn("status", F.when(missing, F.lit(Status.QUARANTINED)).otherwise(F.col("status"))))

    # the last applied change per key, in the replay order
    tagged = tagged.withColumn("_live", (F.col("status") == Status.APPLIED) & keyed)
    per_key = Window.partitionBy(*ROUTE, "_live")
    order = T.order_struct()
    ordered = per_key.orderBy(order)
    first_change = F.when(F.col("effect") == "delete", F.lit("delete")).otherwise(F.col("op"))
    tagged = (tagged.withColumn("_rn", F.row_number().over(ordered))
              .withColumn("_n", F.count(F.lit(1)).over(per_key))
              .withColumn("_last", F.col("_live") & (F.col("_rn") == F.col("_n")))
              .withColumn("first_change", F.when(F.col("_last"), F.first(first_change).over(ordered))))
    if multiset:
        changes = F.collect_list(F.when(F.col("copy_change").isNotNull(),
                                        F.struct(order.alias("o"), F.col("copy_change").alias("c")))).over(per_key)
        tagged = tagged.withColumn("_copy_changes", F.when(F.col("_last"), F.sort_array(changes)))
        copies = F.when(F.size("_copy_changes") > 0, F.aggregate("_copy_changes", F.lit(0), _fold))
    else:
        copies = F.lit(None).cast("int")
    tagged = tagged.withColumn("copies", F.when(F.col("_last"), copies))
    own_keys = F.when(keyed & F.col("key_aliases").isNull(),
                      F.to_json(F.coalesce(F.col("key_columns"), F.array().cast("array<string>"))))
    # the decode task's identity and place served the duplicate check (as in tag_status)
    return tagged.withColumn("_own_keys", own_keys).drop("_rn", "_n", "_copy_changes", "_effect", "identity", "place_id",
                                                         "_base")


def existence_frames(spark, history) -> tuple:
    """(stretches, names) of `SchemaHistory.existence` as the missing-table check joins them
    (stages.history._quarantine_missing_tables builds the same), or (None, None) without any."""
    from .local_data import local_frame

    stretches = history.existence()
    if not stretches:
        return None, None
    frame = local_frame(spark, [(d, t, list(after), None if until is None else list(until), d, t, None, None)
                                for d, t, after, until in stretches],
                        "database string, table string, after array<bigint>, until array<bigint>, "
                        "final_database string, final_table string, key_aliases array<array<string>>, "
                        f"row_columns {T.ROW_COLUMNS_TYPE}")
    names = sorted({(d, t) for d, t, _, _ in stretches})
    if len(names) > T.plan_literal_max():
        names = local_frame(spark, names, "database string, table string")
    return frame, names


def _fold(count, change):
    """latest_per_key's fold of a keyless table's copies: a DELETE of a row the archive never
    inserted removes nothing."""
    return (F.when(change["c"] == T.COPY_ADDED, count + 1)
            .when(change["c"] == T.COPY_REMOVED, F.greatest(count - 1, F.lit(0)))
            .otherwise(F.greatest(count, F.lit(1))))


def _effects(df: DataFrame, effectful: Column, dictionary, full_too: bool = False) -> DataFrame:
    """`transforms.row_effects`, exploded before the shuffle, for every event: a row event of a
    live table in scope gets its effects (`_counted` on the one the summary counts), every
    other event one row without a key (`effect` null). `full_too`: lean rows and rows with
    full images (a base's) side by side, each keyed by its own images."""
    lean = "after_values" in df.columns
    if lean:
        for image in T.IMAGES:
            df = T._with_entry(df, image, dictionary, f"_{image}", only=("lower_names",))
        for image in T.IMAGES:
            df = T.codegen_boundary(df).withColumn(f"_{image}_key", T.row_key_lean(image, F.col(f"_{image}")))
        df = T.codegen_boundary(df)
        before_key, after_key = F.col("_before_key"), F.col("_after_key")
        if full_too:
            before_key, after_key = [F.when(F.col("_base"), T.row_key(image, schema_keys=True)).otherwise(key)
                                     for image, key in zip(T.IMAGES, (before_key, after_key))]
    else:
        before_key, after_key = [T.row_key(image, schema_keys=True) for image in T.IMAGES]

    def effect(key, name, copies, counted=True):
        return F.struct(key.alias("row_key"), F.lit(name).alias("effect"), F.lit(copies).alias("copies"),
                        F.lit(counted).alias("counted"))

    no_key = F.array(effect(F.lit(None).cast("array<binary>"), None, None).cast(
        "struct<row_key: array<binary>, effect: string, copies: int, counted: boolean>"))
    effects = (
        F.when(~effectful, no_key)
        .when(F.col("op") == Op.DELETE, F.array(effect(before_key, "delete", T.COPY_REMOVED)))
        .when((F.col("op") == Op.UPDATE) & F.col("before_schema" if lean else "before").isNotNull()
              & (before_key != after_key),
              F.array(effect(before_key, "delete", T.COPY_REMOVED, counted=False),
                      effect(after_key, "upsert", T.COPY_ADDED)))
        .when(F.col("op") == Op.INSERT, F.array(effect(after_key, "upsert", T.COPY_ADDED)))
        .otherwise(F.array(effect(after_key, "upsert", T.COPY_KEPT))))
    no_keys = F.array().cast("array<string>")
    keyless = F.when(F.col("key_aliases").isNull(), F.size(F.coalesce(F.col("key_columns"), no_keys)) == 0
                     ).otherwise(F.size("key_aliases") == 0)
    return (df.withColumn("_effect", F.explode(effects))
            .withColumn("row_key", F.col("_effect.row_key"))
            .withColumn("effect", F.col("_effect.effect"))
            .withColumn("copy_change", F.when(keyless & F.col("effect").isNotNull(), F.col("_effect.copies")))
            .withColumn("_counted", F.col("_effect.counted"))
            .withColumn("rank", T.change_rank(F.col("effect") == "delete"))
            .drop("_effect", "_before", "_after", "_before_key", "_after_key"))


def _status(first: Column, checked: Column, redelivered_bad: Column, in_scope: Column, cut, since,
            in_base: list[int] | None = None) -> Column:
    """transforms.tag_status's status, `first` being the duplicate check's verdict."""
    if cut is None:
        above_cut = F.lit(False)
    else:
        cut_point = T.point_literal(cut)
        above_cut = F.when(F.col("kind") == Kind.WATERMARK, F.array(F.col("watermark_ts")) > cut_point).otherwise(
            F.col("timeline") > cut_point)
    before_window = F.lit(False) if since is None else (
        (F.col("kind") != Kind.WATERMARK) & (F.col("timeline") <= T.point_literal([since])))
    status = (F.when(redelivered_bad & ~first, Status.DUPLICATE)
              .when(F.col("kind") == QUARANTINE_KIND, Status.QUARANTINED)
              .when(F.col("kind") == Kind.EMPTY, Status.EMPTY)
              .when((F.col("kind") != Kind.WATERMARK) & ~in_scope, Status.FILTERED)
              .when(before_window, Status.FILTERED))
    if in_base is not None:  # in the export, whether or not also a later copy (as in tag_status)
        status = status.when((F.col("kind") != Kind.WATERMARK) & (F.col("timeline") < T.point_literal(in_base)),
                             Status.IN_BASE)
    return status.when(~first, Status.DUPLICATE).when(above_cut, Status.PENDING).otherwise(Status.APPLIED)


def latest(tagged: DataFrame) -> DataFrame:
    """The last applied change of every (final table, key): the rows and columns
    `transforms.unpacked(latest_per_key(...))` gives in v1 (no further shuffle)."""
    dropped = set(_INTERNAL) | {"key_aliases", "row_columns", "copy_change"}
    lead = ["final_database", "final_table", "row_key"]
    rest = [c for c in tagged.columns if c not in dropped and c not in lead and c not in ("first_change", "copies")]
    return tagged.where(F.col("_last")).select(*lead, *rest, "first_change", "copies")


COUNT_KEYS = ("status", "kind", "database", "table", "error_stage", "_time_bucket", "_own_keys")


def _partial_counts(batches):
    """Per task: the events, lowest and highest commit ts per COUNT_KEYS group (Arrow's hash
    group-by: no shuffle; the driver adds the tasks' rows up)."""
    import pyarrow as pa

    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    grouped = table.group_by(list(COUNT_KEYS), use_threads=False).aggregate(
        [([], "count_all"), ("commit_ts", "min"), ("commit_ts", "max")])
    grouped = grouped.rename_columns([{"count_all": "events", "commit_ts_min": "min_commit_ts",
                                       "commit_ts_max": "max_commit_ts"}.get(n, n) for n in grouped.column_names])
    yield from grouped.select(list(COUNT_KEYS) + ["events", "min_commit_ts", "max_commit_ts"]).to_batches()


def partial_counts(tagged: DataFrame) -> DataFrame:
    """The summary's counts per task, from the events' counted effect (one per event)."""
    from pyspark.sql.types import LongType, StructField, StructType

    narrow = tagged.where(F.col("_counted")).select(*COUNT_KEYS, "commit_ts")
    schema = StructType([narrow.schema[c] for c in COUNT_KEYS] + [
        StructField("events", LongType()), StructField("min_commit_ts", LongType()),
        StructField("max_commit_ts", LongType())])
    return narrow.mapInArrow(_partial_counts, schema)


def summary_counts(tagged: DataFrame) -> dict:
    """`counts` as v1's summary gives them (status, kind, database, table, error_stage, bucket,
    events, min/max commit ts), and `own_key_conflicts`: the (database, table) whose row
    events name more than one list of key columns while the history does not key the table
    (then copies of one event may have been routed apart: the caller recomputes with v1)."""
    counts: dict = {}
    own_keys: dict = {}
    for g in partial_counts(tagged).toArrow().to_pylist():
        key = (g["status"], g["kind"], g["database"], g["table"], g["error_stage"], g["_time_bucket"])
        c = counts.setdefault(key, {"status": key[0], "kind": key[1], "database": key[2], "table": key[3],
                                    "error_stage": key[4], "bucket": key[5], "events": 0, "min_commit_ts": None,
                                    "max_commit_ts": None})
        c["events"] += g["events"]
        for name, pick in (("min_commit_ts", min), ("max_commit_ts", max)):
            values = [v for v in (c[name], g[name]) if v is not None]
            c[name] = pick(values) if values else None
        if g["_own_keys"] is not None:
            own_keys.setdefault((g["database"], g["table"]), set()).add(g["_own_keys"])
    conflicts = sorted((k for k, v in own_keys.items() if len(v) > 1), key=lambda k: (k[0] or "", k[1] or ""))
    return {"counts": list(counts.values()), "own_key_conflicts": conflicts}


def shuffle_exchanges(df: DataFrame) -> int:
    """How many shuffle exchanges Spark plans for `df` (broadcasts not counted: they ship a
    small side table, not the events)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return len(re.findall(r"(?<![A-Za-z])Exchange (?:hashpartitioning|rangepartitioning|RoundRobinPartitioning|"
                          r"SinglePartition)", plan))
