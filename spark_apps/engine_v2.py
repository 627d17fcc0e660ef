"""Engine v2, the core (issue 33), the only engine since the twenty-fifth session: the last
change per key from the DDL history at the cut, built on the driver before the events' shuffle.

v1 (removed in the twenty-fifth session: docs/engine.md, "v1 removed") built the history after
its summary and only then assigned every applied row its final table and key in the output
stage. Here the history's key information at the cut (`intervals`, `known`:
outputs.table_frames of a `ddl.SchemaHistory`) is an input (in a run, the history the summary
built, stages/history.py), so `tag_effects` takes, in the map stage, the applied row events
(`tag_status`'s statuses, the later copies being the duplicate marks, `find_duplicates`: a
narrow shuffle of identities) that are neither in a missing table nor in a dropped one, and
gives each its final table and its effects (an UPDATE that changes its key has two: a DELETE
of the old key and an upsert of the new).
`latest` reduces the applied effects with `transforms.latest_per_key`, partially in each task
before its one shuffle.

Why not one shuffle of whole events (the thirteenth session's design, windows for the
duplicate check and the last change): measured 1.55x slower than v1 (bench/RESULTS.md,
fourteenth session): it moved every event with every column and sorted each partition three
times, where a partial aggregate sends at most one row per key and task and the duplicate
check only 40 bytes per event. docs/engine.md, "Engine v2 reduced before its shuffle".

The run (stages/engine.py) gives `tag_effects` the history the summary built (twenty-fourth
session), which also knows what the DDL events alone cannot: a table whose schema is taken from
the stream (`SchemaHistory.use_stream_schemas`) and, in archives without commit ts and
position, a DDL's point (a running event time); so v2 falls back nowhere.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_codecs.events import Op

from . import transforms as T
from .contract import Kind, Status

# columns only the engine reads; `latest` leaves them out
_INTERNAL = ("_missing", "_effect", "_before", "_after", "_before_key", "_after_key")


def find_duplicates(ready: DataFrame, tables: list[str] | None = None, records: int | None = None) -> T.Duplicates:
    """The duplicate check (`transforms.duplicate_places`: a narrow shuffle of
    each checked event's identity and place), persisted and counted, so that `tag_status` and
    `tag_effects` tell the later copies apart by a join (broadcast when few). `records`: how
    many records the decode read, if known; up to `T.DUPLICATES_COLLECT_MAX_RECORDS` the places
    are collected instead (`collected_duplicates`)."""
    from pyspark import StorageLevel

    places = T.duplicate_places(ready, tables=tables)
    if records is not None and records <= T.DUPLICATES_COLLECT_MAX_RECORDS and places.columns == ["place_id"]:
        return collected_duplicates(places)
    places = places.persist(StorageLevel.DISK_ONLY)
    found = persisted_rows(places)
    return T.Duplicates(places, found=found > 0, broadcast=found <= T.DUPLICATES_BROADCAST_MAX)


def collected_duplicates(places: DataFrame) -> T.Duplicates:
    """The duplicate places of a small run on the driver (at most one id per event): none,
    no join; up to `T.DUPLICATES_LITERAL_MAX`, a literal set in the plan; else a local relation
    joined by broadcast. A persisted frame instead cost a job to fill the cache and a job of
    every shuffle partition each time an action broadcast it (docs/engine.md "Jobs of a small
    run (twenty-seventh session)")."""
    from .local_data import local_frame
    from .spark_compat import collect_rows

    ids = sorted(row["place_id"] for row in collect_rows(places))
    if not ids:
        return T.Duplicates(None, found=False)
    if len(ids) <= T.DUPLICATES_LITERAL_MAX:
        return T.Duplicates(None, ids=ids)
    return T.Duplicates(local_frame(places.sparkSession, [(i,) for i in ids], "place_id bigint not null"),
                        broadcast=True)


def persisted_rows(df: DataFrame) -> int:
    """The rows of the persisted `df`, which this computes: a write to Spark's `noop` sink
    fills the cache (the same jobs `count()` runs for it) and the cache's statistics give its
    rows, where `count()` then ran a partial and a final aggregate over the cached rows (two
    more jobs; docs/engine.md "Jobs and gaps (twenty-sixth session)"). The statistics are an
    accumulator of the tasks that built the cache: a block built again (lost and recomputed)
    counts again, so the figure is exact for "none" and may only overstate "how many", which
    decides a broadcast, never a result. `count()` where Spark does not answer (an older
    CacheManager)."""
    from py4j.protocol import Py4JError

    df.write.format("noop").mode("overwrite").save()
    try:
        cached = df.sparkSession._jsparkSession.sharedState().cacheManager().lookupCachedData(df._jdf)
        relation = cached.get().cachedRepresentation() if cached.isDefined() else None
        # only a loaded cache's statistics are its tasks' counts (else they are the plan's guess)
        loaded = relation is not None and relation.cacheBuilder().isCachedColumnBuffersLoaded()
        rows = relation.computeStats().rowCount() if loaded else None
        if rows is not None and rows.isDefined():
            return int(str(rows.get()))  # a Scala BigInt: py4j gives an int, or its text
    except Py4JError:
        pass
    return df.count()


def tag_effects(ready: DataFrame, *, tables: list[str] | None = None, cut=None, since: int | None = None,
                intervals: DataFrame | None = None, known=None, stretches: DataFrame | None = None,
                stretch_names=None, dictionary: T.SchemaDictionary | None = None,
                duplicates: T.Duplicates, base: DataFrame | None = None,
                in_base: list[int] | None = None, unknown: list[tuple] = (),
                left_out: tuple[str, ...] = ()) -> DataFrame:
    """The applied row events of `ready` (replay's frame fed to duplicate_places/tag_status:
    lean or full rows, after `infer_commit_ts`/`partition_event_time`) that have effects, one
    row per effect, computed in the map stage (no shuffle of events): the statuses are
    `transforms.tag_status`'s (`duplicates` being `find_duplicates`' marks), and only the
    applied row events in scope of a table live at the cut are kept (the summary counts every
    event and its quarantines: stages/history.py); each keeps `timeline`, its effect's
    `final_database`, `final_table`, `row_key`, `effect`, `rank` and `copy_change` (what
    `latest` reduces and `stages.engine._versions` windows).
    `intervals`/`known`: the DDL history at the cut (outputs.table_frames; None: no DDL named a
    table); `stretches`/`stretch_names`: where each name the DDL named exists
    (`existence_frames`; None: no check). `dictionary`: the schema dictionary for lean rows.
    `base`: the rows of a base snapshot or export (full
    images, their `timeline` set), applied events that enter only the last change per key
    (never counted, never duplicate-checked, never quarantined: the summary never sees
    them); `in_base`: a base export's bound (tag_status's).
    `unknown`: --require-schema's (database, table) without a known schema, whose applied
    rows the summary quarantines (`transforms.mark_unknown_tables`), so they have no effect.
    The rows are filtered before the joins, without `left_out` (columns no consumer reads),
    and every column the joins, keys, last change and SCD2 window do not read is packed into
    one (`transforms.packed`, which `latest` and the caller's `unpacked` undo): the stage's
    generated method stays small and each operator copies one column for all of them.
    (Every event with its status, the form the summary could count, was a second path of
    this function, used by tests only: removed in the twenty-seventh session.)"""
    df = T.tag_status(ready, tables=tables, cut=cut, since=since, duplicates=duplicates, in_base=in_base)
    if base is not None:  # `_base` tells them apart; each side's missing columns are null
        df = df.withColumn("_base", F.lit(False)).unionByName(
            base.withColumns({"status": F.lit(Status.APPLIED), "_base": F.lit(True)}), allowMissingColumns=True)
    not_base = ~F.col("_base") if base is not None else F.lit(True)
    in_scope = T.table_filter(tables) if tables else F.lit(True)
    # before the joins: only applied row events can have effects
    if unknown:  # quarantined (the summary counts them), so never live
        df = T.mark_unknown_tables(df, list(unknown), where=not_base)
    df = df.where((F.col("kind") == Kind.ROW) & (F.col("status") == Status.APPLIED) & (in_scope | ~not_base))
    df = T.packed(df.drop(*left_out), keep=(*T.VALIDITY_INPUTS, "kind", "status", "_base"))
    # a row of a name the DDL named, at a point where no table of that name exists, is quarantined
    # by the summary (transforms.mark_missing_tables over the history's existence stretches): no effect
    if stretches is None:
        df = df.withColumn("_missing", F.lit(False))
    else:
        df = T._match_tables(df, stretches, stretch_names)
        missing = (F.col("kind") == Kind.ROW) & F.col("_final_tb").isNull() & F.col("_known").isNotNull()
        df = (df.withColumn("_missing", F.coalesce(missing, F.lit(False)) & not_base)
              .drop("_db", "_tb", "_final_db", "_final_tb", "_known", "key_aliases", "row_columns"))
    # each `withColumns` below is one step where a `withColumn` per column was one each: every
    # step is an analysis of the whole plan on the driver, and each expression of one step reads
    # the columns before it (docs/engine.md "The driver of a small run (twenty-eighth session)")
    if intervals is None:
        df = df.withColumns({"_final_db": F.col("database"), "_final_tb": F.col("table"),
                             "key_aliases": F.lit(None).cast("array<array<string>>"),
                             "row_columns": F.lit(None).cast(T.ROW_COLUMNS_TYPE), "_live_table": F.lit(True)})
    else:  # the intervals' broadcast join: a row of no live table at the cut (dropped) has no effect
        df = T._match_tables(df, intervals, known)
        df = df.withColumns({"_live_table": F.col("_final_tb").isNotNull() | F.col("_known").isNull(),
                             "_final_db": F.coalesce(F.col("_final_db"), F.col("database")),
                             "_final_tb": F.coalesce(F.col("_final_tb"), F.col("table"))}).drop("_db", "_tb", "_known")
    # the filter above kept applied row events in scope (or base rows, never `_missing`)
    df = _effects(df.where(~F.col("_missing") & F.col("_live_table")), dictionary, base is not None)
    return (df.withColumns({"final_database": F.col("_final_db"), "final_table": F.col("_final_tb")})
            .drop("_final_db", "_final_tb", "_live_table", "_base", "identity", "place_id"))


def existence_frames(spark, history, row_ranges: dict | None = None) -> tuple:
    """(stretches, names) of `SchemaHistory.existence` as the missing-table check joins them
    (stages.history._quarantine_missing_tables builds the same), or (None, None) without any.
    `row_ranges` (the summary's: per lower-case name, the lowest and highest point of its
    applied row events): only the names whose rows reach outside every one stretch of theirs
    are checked, decided on the driver; the others' rows all lie where their table exists
    (`_known` null: never missing), so a run whose every name is such has no join at all."""
    from .local_data import local_frame

    stretches = history.existence()
    if row_ranges is not None:
        stretches = [s for s in stretches if may_lack_table(s[0], s[1], stretches, row_ranges)]
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


def may_lack_table(database, table, stretches, row_ranges: dict) -> bool:
    """Whether the applied row events of one (lower-case) name reach outside every one stretch
    of it (`stages.history._rows_may_lack_tables` asks it of all names at once)."""
    if (database, table) not in row_ranges:
        return False
    lo, hi = row_ranges[(database, table)]
    return not any(list(after) < list(lo) and (until is None or list(hi) <= list(until))
                   for d, t, after, until in stretches if (d, t) == (database, table))


def _effects(df: DataFrame, dictionary, full_too: bool = False) -> DataFrame:
    """The effects of `tag_effects`' rows (applied row events of live tables in scope),
    exploded before the shuffle: a DELETE deletes the before-image's key, an INSERT or UPDATE
    upserts the after-image's, and an UPDATE that changes the key also deletes the old one.
    `full_too`: lean rows and rows with full images (a base's) side by side, each keyed by its
    own images."""
    lean = "after_values" in df.columns
    if lean:
        df = T.with_image_keys(df, dictionary)
        before_key, after_key = F.col("_before_key"), F.col("_after_key")
        if full_too:
            before_key, after_key = [F.when(F.col("_base"), T.row_key(image, schema_keys=True)).otherwise(key)
                                     for image, key in zip(T.IMAGES, (before_key, after_key))]
    else:
        before_key, after_key = [T.row_key(image, schema_keys=True) for image in T.IMAGES]

    def effect(key, name, copies):
        return F.struct(key.alias("row_key"), F.lit(name).alias("effect"), F.lit(copies).alias("copies"))

    effects = (
        F.when(F.col("op") == Op.DELETE, F.array(effect(before_key, "delete", T.COPY_REMOVED)))
        .when((F.col("op") == Op.UPDATE) & F.col("before_schema" if lean else "before").isNotNull()
              & (before_key != after_key),
              F.array(effect(before_key, "delete", T.COPY_REMOVED), effect(after_key, "upsert", T.COPY_ADDED)))
        .when(F.col("op") == Op.INSERT, F.array(effect(after_key, "upsert", T.COPY_ADDED)))
        .otherwise(F.array(effect(after_key, "upsert", T.COPY_KEPT))))
    no_keys = F.array().cast("array<string>")
    keyless = F.when(F.col("key_aliases").isNull(), F.size(F.coalesce(F.col("key_columns"), no_keys)) == 0
                     ).otherwise(F.size("key_aliases") == 0)
    # `rank` reads the effect where it was `effect` a step before: the optimiser merged the two
    return (df.withColumn("_effect", F.explode(effects))
            .withColumns({"row_key": F.col("_effect.row_key"), "effect": F.col("_effect.effect"),
                          "copy_change": F.when(keyless, F.col("_effect.copies")),
                          "rank": T.change_rank(F.col("_effect.effect") == "delete")})
            .drop("_effect", "_before", "_after", "_before_key", "_after_key"))


def latest(tagged: DataFrame, multiset: bool = True) -> DataFrame:
    """The last applied change of every (final table, key): the rows and columns
    `transforms.unpacked(latest_per_key(...))` gives, by that aggregate
    (`latest_per_key`: partial per task before its shuffle, so each task sends at most one row
    per key it holds). `multiset`: as OutputPlan.multiset (a table without a key in the run)."""
    dropped = set(_INTERNAL) | {"key_aliases", "row_columns", "copy_change"}
    lead = ["final_database", "final_table", "row_key"]
    rest = [c for c in tagged.columns if c not in dropped and c not in lead]
    effects = tagged.select(*lead, *rest, "key_aliases", "row_columns", "copy_change")
    last = T.latest_per_key(effects, multiset=multiset)
    return T.unpacked(last) if "_carried" in last.columns else last

