"""Replay as pure DataFrame -> DataFrame transforms (no actions inside: the shell in
replay.py decides what to collect, and only ever collects small aggregates).

Ordering. Every event gets a `timeline` point, compared element by element as integers:
`[commit_ts]` when the protocol carries one, else its position (Canal binlog file, offset,
row; OceanBase id), else `[execute_ts_ms]`. Per row key, changes are ordered by
(timeline, rank, source partition, offset, index in message), where rank puts a DELETE
before an INSERT/UPDATE of the same key at the same commit ts (a split primary-key update
is a DELETE + INSERT pair; they are never duplicates of each other).

Statuses. Each decoded row ends with exactly one status, so counts reconcile:
`quarantined` (could not be read/decoded), `filtered` (outside --tables), `duplicate`
(at-least-once redelivery of an event already seen), `pending` (above the cut: a later run
picks it up), `applied`; records that carry no change are `empty`.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdc_codecs.events import ColumnFlag, Op
from cdc_codecs.tso import LOGICAL_BITS

from .contract import Kind, Status
from .schema import QUARANTINE_KIND

ROW_COLUMNS_TYPE = "array<struct<names: array<string>, default: binary, added: array<bigint>>>"
STATUSES = (Status.QUARANTINED, Status.EMPTY, Status.FILTERED, Status.IN_BASE, Status.DUPLICATE, Status.PENDING,
            Status.APPLIED)


# the place of an event in its source partition: copies of one record (overlapping archive
# objects, redeliveries of one offset) share it
PARTITION_PLACE = ("topic", "partition", "offset", "event_index")
# how many tombstones (rows without commit ts) the inferred commit ts may be broadcast for
# (about 40 bytes each); beyond, the events are joined with them by a shuffle
INFERRED_BROADCAST_MAX = 4_000_000


def inferred_commit_ts(events: DataFrame, export_tso: int | None = None) -> DataFrame:
    """The inferred commit ts of the row events without one (TiCDC Avro sends DELETE as a bare
    tombstone), one row per `PARTITION_PLACE` (columns: those and `inferred_ts`): a commit ts
    the event can have given its partition, whose events TiCDC writes in commit-ts order:

    * the lower bound, when anything precedes it in its partition: the highest earlier row
      commit ts, one above the highest earlier DDL commit ts or watermark;
    * else (the first event of its partition, e.g. of a renamed table's new topic) the upper
      bound: the lowest later commit ts or watermark in the partition. Every change of its key
      on other partitions/topics before the partition began (the old name's, before the
      RENAME) is then still before it, and it falls in the table's interval under its new name;
    * else (alone in its partition) none: it is ordered by event time (0), i.e. first.

    `export_tso` (a base export's TSO): a tombstone whose bounds straddle it — the lower bound
    at or below it (a re-sent change the export holds precedes it), the upper bound above it or
    none — gets TSO + 1: it is after the export (were it at or below the TSO, the partition's
    commit-ts order would put the rest of the re-sent run, up to the TSO, after it), so it is
    neither counted `in_base` nor ordered before the export's rows.

    Two windows per source partition, over a narrow projection (each event's place and what
    it bounds: 8 bytes of the events' 250 an Avro event carries through a shuffle of whole
    events). Rows that tie on (offset, event index) are copies of one record: alike in what
    is aggregated, and given one value (the frame keeps one row per place)."""
    is_row, is_ddl = F.col("kind") == Kind.ROW, F.col("kind") == Kind.DDL
    # what each event bounds: a later tombstone from below, an earlier one from above
    narrow = events.select(
        *PARTITION_PLACE,
        F.greatest(F.when(is_row, F.col("commit_ts")), F.when(is_ddl, F.col("commit_ts") + 1),
                   F.col("watermark_ts") + 1).alias("_low"),
        F.least(F.when(is_row | is_ddl, F.col("commit_ts")), F.col("watermark_ts")).alias("_high"),
        (is_row & F.col("commit_ts").isNull()).alias("_tombstone"),
    ).where(F.col("_tombstone") | F.col("_low").isNotNull() | F.col("_high").isNotNull())
    order = Window.partitionBy("topic", "partition").orderBy("offset", "event_index")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    # the rows after: the rows before in the reverse order. Spark computes a frame that starts
    # at the partition's start incrementally, but one that ends at its end again for every row
    # (quadratic: a 90k-event Avro replay in three partitions took 161 s, 28 s after)
    reverse = Window.partitionBy("topic", "partition").orderBy(F.col("offset").desc(), F.col("event_index").desc())
    after = reverse.rowsBetween(Window.unboundedPreceding, -1)
    lower, upper = F.max("_low").over(before), F.min("_high").over(after)
    inferred = F.coalesce(lower, upper)
    if export_tso is not None:
        inferred = F.when((inferred <= F.lit(export_tso)) & (upper.isNull() | (upper > F.lit(export_tso))),
                          F.lit(export_tso + 1)).otherwise(inferred)
    return (narrow.withColumn("inferred_ts", F.when(F.col("_tombstone"), inferred))
            .where(F.col("_tombstone")).select(*PARTITION_PLACE, "inferred_ts")
            .dropDuplicates(list(PARTITION_PLACE)))


def with_inferred_ts(events: DataFrame, inferred: DataFrame, broadcast: bool = False) -> DataFrame:
    """Add `inferred_ts` to `events` from `inferred_commit_ts`' frame (one row per place: the
    join adds no row), by a broadcast join when `broadcast` (else Spark decides by the
    estimated size). The decode task's `identity` lacks the inferred commit ts: a tombstone
    given one has its identity extended by it (the 16 bytes, then the ts's digits: never equal
    to another event's 16 bytes, equal for copies of one tombstone, which share the ts); every
    other event's identity holds no inferred ts (it is null for them) and stays."""
    marks = inferred.select(*[F.col(c).alias(f"_inf_{c}") for c in PARTITION_PLACE],
                            F.col("inferred_ts").alias("_inferred_ts"))
    if broadcast:
        marks = F.broadcast(marks)
    same = [events[c].eqNullSafe(marks[f"_inf_{c}"]) for c in PARTITION_PLACE]
    is_tombstone = (F.col("kind") == Kind.ROW) & F.col("commit_ts").isNull()
    out = (events.join(marks, same, "left").drop(*[f"_inf_{c}" for c in PARTITION_PLACE])
           .withColumn("inferred_ts", F.when(is_tombstone, F.col("_inferred_ts"))).drop("_inferred_ts"))
    if "identity" in out.columns:
        out = out.withColumn("identity", F.when(
            F.col("inferred_ts").isNotNull(),
            F.concat(F.col("identity"), F.col("inferred_ts").cast("string").cast("binary"))).otherwise(F.col("identity")))
    return out.select(*events.columns, "inferred_ts")


def infer_commit_ts(events: DataFrame, needed: bool, export_tso: int | None = None,
                    broadcast: bool = False) -> DataFrame:
    """Add `inferred_ts` (`inferred_commit_ts`, joined by `with_inferred_ts`); computed only
    when `needed`. Its change rank stays "message order", so among equal timestamps the
    partition offset decides."""
    if not needed:
        return events.withColumn("inferred_ts", F.lit(None).cast("bigint"))
    return with_inferred_ts(events, inferred_commit_ts(events, export_tso), broadcast)


def partition_event_time(events: DataFrame, needed: bool) -> DataFrame:
    """Add `event_time`: for an event with neither commit ts nor producer position (Canal flat
    JSON, TiCDC canal-json without the TiDB extension), the highest event time (`es`) of its
    source partition up to and including it, in offset order. Why: a binlog's event times
    are not monotonic across transactions (a later transaction can carry an earlier second),
    while the partition offset is the producer's order; a running maximum is never lower than
    an earlier event's, so within a partition the offset decides and across partitions time
    still orders. Computed only when `needed` (a window per source partition)."""
    if not needed:
        return events.withColumn("event_time", F.lit(None).cast("bigint"))
    order = (Window.partitionBy("topic", "partition").orderBy("offset", "event_index")
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    untimed = F.col("commit_ts").isNull() & F.col("position").isNull()
    return events.withColumn("event_time", F.when(untimed, F.max("execute_ts_ms").over(order)))


def with_timeline(events: DataFrame) -> DataFrame:
    """Add `timeline` (see the module doc). Without commit ts or position, the point is
    (event time, source partition, offset, index in message): within a partition the
    producer's order, so a DDL and the rows after it in the same second (Canal's `es` has whole
    seconds) fall on the right sides; DDL messages go to partition 0 (Canal, TiCDC canal-json),
    so a row of another partition at the DDL's event time counts as after it."""
    absent = [name for name in ("inferred_ts", "event_time") if name not in events.columns]
    if absent:
        events = events.withColumns({name: F.lit(None).cast("bigint") for name in absent})
    return events.withColumn(
        "timeline",
        F.when(F.col("commit_ts").isNotNull(), F.array(F.col("commit_ts")))
        .when(F.col("inferred_ts").isNotNull(), F.array(F.col("inferred_ts")))
        .when(F.col("position").isNotNull(), F.col("position"))
        .otherwise(F.array(
            F.coalesce(F.col("event_time"), F.col("execute_ts_ms"), F.lit(0).cast("bigint")),
            F.coalesce(F.col("partition").cast("bigint"), F.lit(-1).cast("bigint")),
            F.coalesce(F.col("offset"), F.lit(-1).cast("bigint")),
            F.coalesce(F.col("event_index").cast("bigint"), F.lit(0).cast("bigint")),
        )),
    )


def point_literal(point) -> Column:
    return F.array(*[F.lit(int(p)).cast("bigint") for p in point]) if point else F.array().cast("array<bigint>")


def table_filter(patterns: list[str]) -> Column:
    """`--tables` patterns (`db.table`, shell wildcards, case-insensitive) as a condition.
    Events without a table (database DDL) match a pattern whose database part matches."""
    condition = F.lit(False)
    for pattern in patterns:
        db_pattern, dot, table_pattern = pattern.strip().partition(".")
        if not dot:
            table_pattern = "*"
        db_regex = "(?i)" + fnmatch.translate(db_pattern)
        table_regex = "(?i)" + fnmatch.translate(table_pattern)
        condition = condition | (
            F.coalesce(F.col("database"), F.lit("")).rlike(db_regex)
            & (F.col("table").isNull() | F.col("table").rlike(table_regex))
        )
    return condition


def identity(lean: bool = False) -> Column:
    """What makes two decoded events the same change (a redelivery, not a new change), as the
    32 bytes of a SHA-256 of its fields (binary, not the 64 hex characters `sha2` returns:
    the duplicate check's shuffle carries 30% fewer bytes per event): the check then partitions
    and sorts by them instead of whole row images (a collision, 2^-128 per pair, is not a
    practical concern). `lean`: the images are lean (schema id, `<image>_values`, `<image>_labels`)."""
    fields = F.struct(*[c.alias(f"f{i}") for i, c in enumerate(_identity_columns(lean))])
    return F.unhex(F.sha2(F.to_json(fields), 256))


def identity_of(df: DataFrame) -> Column:
    """The identity of `df`'s events: the `identity` column the decode tasks computed (lean
    rows: spark_apps/identity.py; the same fields, hashed once where the rows are in Arrow),
    else `identity` in Spark (rows without it). A tombstone's inferred commit ts, which the
    decode task cannot know, `with_inferred_ts` adds to the decode task's identity."""
    return F.col("identity") if "identity" in df.columns else identity(lean="after_values" in df.columns)


def _identity_columns(lean: bool = False) -> list[Column]:
    images = ([F.col(f"{image}{part}") for image in IMAGES for part in ("_schema", "_values", "_labels")] if lean
              else [F.col("before"), F.col("after")])
    return [
        F.col("kind"), F.col("database"), F.col("table"), F.col("op"), F.col("commit_ts"),
        F.col("inferred_ts"), F.col("position"),
        # without commit ts or position, the event time is part of the identity
        F.when(F.col("commit_ts").isNull() & F.col("position").isNull(), F.col("execute_ts_ms")),
        F.when(F.col("commit_ts").isNull() & F.col("position").isNull(), F.col("event_index").cast("bigint")),
        *images, F.col("ddl_query"),
        # a watermark is per partition
        F.when(F.col("kind") == Kind.WATERMARK, F.col("topic")),
        F.when(F.col("kind") == Kind.WATERMARK, F.col("partition")),
        F.col("watermark_ts"),
        # a record that cannot be decoded is itself twice when overlapping archive objects hold it
        F.when(F.col("kind") == QUARANTINE_KIND, F.struct("topic", "partition", "offset", "raw_value")),
    ]


FIRST_SEEN = ("partition", "offset", "event_index", "object", "line")  # which copy of an event counts
PLACE = ("topic", "partition", "offset", "event_index", "object", "line")  # one event of the archive
# how many later copies the marks may hold and still be broadcast (64-bit place ids: 8 bytes
# each; beyond, the events are joined with them by a shuffle)
DUPLICATES_BROADCAST_MAX = 4_000_000
# up to this many records read (Kafka records: one or a few events each), the later copies'
# place ids are collected to the driver instead of cached: no job to fill the cache, none of
# every shuffle partition to read it in each action that joins them
DUPLICATES_COLLECT_MAX_RECORDS = 100_000
# up to this many collected place ids are a literal `IN` set in the plan (a hash set; no join, no
# broadcast job); more go back as a local relation, joined by broadcast
DUPLICATES_LITERAL_MAX = 4096


def _place(df: DataFrame) -> tuple[str, ...]:
    """The columns that name one event of `df`: the decode's `place_id` (lean rows,
    spark_apps/lean_decode.py) where it has one, else PLACE."""
    return ("place_id",) if "place_id" in df.columns else PLACE


def _checked(tables: list[str] | None) -> tuple[Column, Column]:
    """(what the duplicate check ranks, records that could not be decoded but have Kafka
    coordinates): events in scope (watermarks always), and such records (the same offset read
    from two objects)."""
    is_event = F.col("kind").isin(Kind.ROW, Kind.DDL, Kind.WATERMARK)
    in_scope = table_filter(tables) if tables else F.lit(True)
    redelivered_bad = (F.col("kind") == QUARANTINE_KIND) & F.col("offset").isNotNull()
    return (is_event & (in_scope | (F.col("kind") == Kind.WATERMARK))) | redelivered_bad, redelivered_bad


def duplicate_places(decoded: DataFrame, *, tables: list[str] | None = None) -> DataFrame:
    """The places (`_place`) of the events that are later copies of an earlier one: the
    duplicate check as a narrow shuffle, each checked event reduced to its identity and its
    place, ranked by `FIRST_SEEN` within its identity. Few rows (redeliveries), so the events
    are told apart from them by a join (`tag_status(duplicates=Duplicates(...))`, broadcast when small)
    instead of every event travelling through the shuffle whole."""
    checked, _ = _checked(tables)
    place = _place(decoded)
    first_seen = Window.partitionBy("_identity").orderBy(*FIRST_SEEN)
    ranked = (with_timeline(decoded).where(checked)
              .select(identity_of(decoded).alias("_identity"), *dict.fromkeys(FIRST_SEEN + place))
              .withColumn("_copy", F.row_number().over(first_seen)))
    return ranked.where(F.col("_copy") > 1).select(*place)


class Duplicates(NamedTuple):
    """The places `duplicate_places` found, as `tag_status` joins them: `found` False when
    there are none (no event is a duplicate, no join), `broadcast` when they are few enough
    to send to every task (else Spark decides by their estimated size: a sort-merge join
    moves every event through a shuffle), `ids` when they were collected and are few enough to
    be a literal set in the plan (no join, no broadcast job; `places` None then)."""

    places: DataFrame | None
    found: bool = True
    broadcast: bool = False
    ids: list[int] | None = None


def in_id_set(column: Column, ids: list[int]) -> Column:
    """Whether `column` (a bigint, never null) is one of `ids`, by one literal in the plan: a
    hash table of buckets (`plan_dictionary`'s way), parsed from JSON once and constant-folded,
    a row comparing the few ids of its bucket. An `IN` of each id as a literal is built by the
    driver's parser and walked by every analysis of the plans built on it (0.2-0.5 s of a 10k
    run's driver at 680 ids, docs/engine.md "Jobs of a small run (twenty-seventh session)")."""
    size = max(1, len(ids))
    table, _ = bucket_literal([(i, i) for i in map(int, ids)], size, "bigint")
    return F.array_contains(bucket_of(table, size, column), column)


def bucket_literal(entries, size: int, entry_type: str) -> tuple[Column, int]:
    """(`in_id_set`'s and `plan_dictionary`'s hash table as one JSON literal, the most entries a
    bucket holds): each (id, entry) of `entries` in bucket pmod(id, size), as `bucket_of` finds it."""
    buckets: list[list] = [[] for _ in range(size)]
    for key, entry in entries:
        buckets[key % size].append(entry)  # Python's % is Spark's pmod for a positive size
    return F.from_json(F.lit(json.dumps(buckets)), f"array<array<{entry_type}>>"), max(len(b) for b in buckets)


def bucket_of(buckets: Column, size: int, key: Column) -> Column:
    """The bucket of `bucket_literal`'s table that holds `key`'s entries, if any (an array index)."""
    return F.element_at(buckets, (F.pmod(key, F.lit(size)) + 1).cast("int"))


def tag_status(decoded: DataFrame, *, tables: list[str] | None = None, cut=None, since: int | None = None,
               duplicates: Duplicates | None = None, in_base: list[int] | None = None) -> DataFrame:
    """Add `status` (see module doc) and `timeline`. `cut` is a point or None (no cut);
    changes at or below `since` are outside the window (status `filtered`). `duplicates`:
    the later copies found beforehand (None: the duplicate check runs here, as a window over
    every event's identity). `in_base`: a base export's bound (stages/base_export.py): changes
    and DDL whose timeline is below it are in the export already (status `in_base`, whether or
    not they are also a later copy)."""
    df = with_timeline(decoded)
    checked, redelivered_bad = _checked(tables)
    in_scope = table_filter(tables) if tables else F.lit(True)
    if duplicates is not None and not duplicates.found:
        first = F.lit(True)
    elif duplicates is not None and duplicates.ids is not None:  # a literal set: no join
        first = ~in_id_set(F.col("place_id"), duplicates.ids)
    elif duplicates is None:
        df = df.withColumn("_identity", identity_of(decoded))
        first = F.row_number().over(Window.partitionBy("_identity").orderBy(*FIRST_SEEN)) == 1
    else:
        place = _place(df)
        marks = duplicates.places.select(*[F.col(c).alias(f"_dup_{c}") for c in place]).withColumn("_dup", F.lit(True))
        if duplicates.broadcast:
            marks = F.broadcast(marks)
        # a place id is never null: plain equality keeps the join key one long
        same = ([df["place_id"] == marks["_dup_place_id"]] if place == ("place_id",)
                else [df[c].eqNullSafe(marks[f"_dup_{c}"]) for c in place])
        df = df.join(marks, same, "left").drop(*[f"_dup_{c}" for c in place])
        first = F.col("_dup").isNull()
    df = df.withColumn("_first", F.when(checked, first))
    if cut is None:
        above_cut = F.lit(False)
    else:
        cut_point = point_literal(cut)
        above_cut = F.when(F.col("kind") == Kind.WATERMARK, F.array(F.col("watermark_ts")) > cut_point).otherwise(
            F.col("timeline") > cut_point
        )
    before_window = F.lit(False) if since is None else (
        (F.col("kind") != Kind.WATERMARK) & (F.col("timeline") <= point_literal([since])))
    status = (
        F.when(redelivered_bad & ~F.col("_first"), Status.DUPLICATE)
        .when(F.col("kind") == QUARANTINE_KIND, Status.QUARANTINED)
        .when(F.col("kind") == Kind.EMPTY, Status.EMPTY)
        .when((F.col("kind") != Kind.WATERMARK) & ~in_scope, Status.FILTERED)
        .when(before_window, Status.FILTERED)
    )
    if in_base is not None:
        status = status.when((F.col("kind") != Kind.WATERMARK) & (F.col("timeline") < point_literal(in_base)),
                             Status.IN_BASE)
    status = (
        status.when(~F.col("_first"), Status.DUPLICATE)
        .when(above_cut, Status.PENDING)
        .otherwise(Status.APPLIED)
    )
    # the decode task's identity served the duplicate check: no later step reads it
    return df.withColumn("status", status).drop("_first", "_identity", "_dup", "identity", "place_id")


IMAGES = ("before", "after")
LEAN_COLUMNS = tuple(f"{image}{part}" for image in IMAGES for part in ("_schema", "_values", "_labels"))
# an image as the codecs give it, its fields nullable (it is rebuilt by position)
IMAGE_TYPE = "array<struct<name: string, mysql_type: string, flags: int, value: binary, label: string>>"
BUCKET_ENTRY_TYPE = ("struct<id: bigint, names: array<string>, types: array<string>, flags: array<int>, "
                     "lower_names: array<string>, handle: array<int>>")


def with_schema_ids(decoded: DataFrame) -> DataFrame:
    """Add `before_schema` / `after_schema`: a 64-bit id of each image's column list (names,
    MySQL types and flags in order; null when the image is null), the same in every task
    without coordination (xxhash64). The driver checks that no two column lists of a run share
    an id (`schema_dictionary`). The replay makes rows lean in its decode tasks instead
    (spark_apps/lean_decode.py: measured cheaper); this and `schema_entries` (with
    tests/support/lean_rows.py's `lean_images`) are the Spark-expression form, the oracle
    tests/test_transforms.py compares those with."""
    for image in IMAGES:
        img = F.col(image)
        decoded = decoded.withColumn(f"{image}_schema", F.when(img.isNotNull(), F.xxhash64(
            img["name"], F.array_join(img["mysql_type"], "\x1f", "\x00"), img["flags"])))
    return decoded


def schema_entries(df: DataFrame) -> DataFrame:
    """The distinct column lists of the images: (id, names, types, flags), few per table
    version. A hash aggregate keyed by the lists themselves, partial on the map side, so only
    the distinct lists are shuffled (collected per record inside the statistics' distinct
    offset count, every record's lists went through that shuffle)."""
    entries = F.explode(F.array(*[F.struct(
        F.col(f"{image}_schema").alias("id"), F.col(f"{image}.name").alias("names"),
        F.col(f"{image}.mysql_type").alias("types"), F.col(f"{image}.flags").alias("flags")) for image in IMAGES]))
    return (df.where(F.col("kind") == Kind.ROW).select(entries.alias("e")).select("e.*")
            .where(F.col("id").isNotNull()).distinct())


def schema_dictionary(entries) -> dict:
    """{id: (names, types, flags)} from `schema_entries` rows; ValueError if two column lists
    share an id (a 64-bit hash collision: never seen, but never silent)."""
    dictionary: dict = {}
    for e in entries:
        value = (tuple(e["names"]), tuple(e["types"]), tuple(e["flags"]))
        if dictionary.setdefault(e["id"], value) != value:
            raise ValueError(f"two column lists share the schema id {e['id']}: {dictionary[e['id']]} and {value}")
    return dictionary


class SchemaDictionary(NamedTuple):
    """The schema dictionary as the plan holds it (`plan_dictionary`): a literal, or a broadcast `frame`."""

    buckets: Column | None  # array<array<struct<id, names, types, flags>>>: entry `id` in bucket pmod(id, size)
    size: int
    slots: int  # the most entries one bucket holds
    frame: DataFrame | None = None  # the entries as a small DataFrame, joined by broadcast


# beyond this many column lists the dictionary is a broadcast DataFrame, not a literal: a literal
# is copied into every task of every stage that reads it (at 16M bench events the lists made a
# 95 MB task binary and failed a 2 GB driver; at 4M the replay took 170.9 s with the literal and
# 124.3 s with the broadcast); below it a small run saves the broadcast jobs
DICTIONARY_LITERAL_MAX = 256


def plan_literal_max() -> int:
    """How many entries a side table (the schema dictionary, the DDL's table names) may have and
    still be a literal in the plan: DICTIONARY_LITERAL_MAX, or env CDC_REPLAY_DICTIONARY_LITERAL_MAX."""
    return int(os.environ.get("CDC_REPLAY_DICTIONARY_LITERAL_MAX", DICTIONARY_LITERAL_MAX))


def plan_dictionary(dictionary: dict, lower=None, spark=None, literal_max: int | None = None) -> SchemaDictionary:
    """The schema dictionary as the plan holds it. Up to `literal_max` entries, one literal (no
    broadcast job): a hash table of buckets, parsed from JSON once and constant-folded by Spark, so a lookup is an array index
    and a compare or two, however many table versions the archive has (a literal map would be
    searched entry by entry, and built of literals it makes every plan analysis walk them).
    Each entry also holds its names lower-cased (`lower`: Spark's own `lower`, spark_lower, so
    the lean row keys compare names as `row_key` does; Python's for tests without a JVM) and
    its handle-key columns' positions (`handle_positions`: the lean index-value placement).
    With `spark` and more than `literal_max` entries (`DICTIONARY_LITERAL_MAX`, env
    CDC_REPLAY_DICTIONARY_LITERAL_MAX) the entries become a local relation joined by broadcast
    instead, so the plan and the tasks stay the same size whatever the DDL count."""
    lower = lower or str.lower
    if literal_max is None:
        literal_max = plan_literal_max()
    if spark is not None and len(dictionary) > literal_max:
        from spark_apps.local_data import local_frame

        rows = [(sid, list(names), list(types), list(flags), [lower(n) for n in names], handle_positions(flags))
                for sid, (names, types, flags) in sorted(dictionary.items())]
        frame = local_frame(spark, rows, BUCKET_ENTRY_TYPE)
        return SchemaDictionary(None, 0, 0, frame)
    size = max(1, 2 * len(dictionary))
    buckets, slots = bucket_literal(
        [(sid, {"id": sid, "names": list(names), "types": list(types), "flags": list(flags),
                "lower_names": [lower(n) for n in names], "handle": handle_positions(flags)})
         for sid, (names, types, flags) in sorted(dictionary.items())], size, BUCKET_ENTRY_TYPE)
    return SchemaDictionary(buckets, size, slots)


def handle_positions(flags) -> list[int]:
    """The 1-based positions of a column list's handle-key columns (ColumnFlag.HANDLE_KEY), as
    the dictionary entry's `handle` holds them for the lean index-value placement."""
    return [i + 1 for i, f in enumerate(flags) if f is not None and f & int(ColumnFlag.HANDLE_KEY)]


def spark_lower(spark):
    """Lower-casing as Spark's `lower` does it (the JVM's own function for names that are not
    ASCII, where Java's and Python's rules can differ; Python's for ASCII, where they agree)."""
    cache: dict[str, str] = {}

    def lower(name: str) -> str:
        if name is None or name.isascii():
            return name.lower() if name is not None else None
        if name not in cache:
            utf8 = spark.sparkContext._jvm.org.apache.spark.unsafe.types.UTF8String
            cache[name] = utf8.fromString(name).toLowerCase().toString()
        return cache[name]

    return lower


def _with_entry(df: DataFrame, image: str, dictionary: SchemaDictionary, target: str,
                only: tuple[str, ...] | None = None) -> DataFrame:
    """`df` with column `target`: the dictionary entry of the image's column list (null for a
    null image; an id the dictionary lacks fails the task). The bucket is a column of its own,
    so the literal appears once in the plan (an expression repeating it would copy it into
    every task); a `frame` dictionary is a broadcast left join on the id, its entries holding
    `only` these fields when given (every row copies what its entry holds: the keys need only
    the lower-case names)."""
    sid = F.col(f"{image}_schema")
    if dictionary.frame is not None:
        fields = list(only) if only else [f.name for f in dictionary.frame.schema.fields]
        entries = dictionary.frame.select(F.col("id").alias("_entry_id"),
                                          F.struct(*[F.col(c) for c in fields]).alias(target))
        df = df.join(F.broadcast(entries), sid == F.col("_entry_id"), "left").drop("_entry_id")
    else:
        df = df.withColumn("_bucket", F.when(sid.isNotNull(), bucket_of(dictionary.buckets, dictionary.size, sid)))
        entry = F.lit(None).cast(BUCKET_ENTRY_TYPE)
        for slot in reversed(range(dictionary.slots)):
            candidate = F.try_element_at(F.col("_bucket"), F.lit(slot + 1))
            entry = F.when(candidate["id"] == sid, candidate).otherwise(entry)
        df = df.withColumn(target, entry).drop("_bucket")
    missing = F.raise_error(F.concat(F.lit("no column list for schema id "), sid.cast("string"))).cast(
        df.schema[target].dataType)
    return df.withColumn(target, F.when(sid.isNotNull() & F.col(target).isNull(), missing).otherwise(F.col(target)))


def _rebuild(df: DataFrame, image: str, dictionary: SchemaDictionary, target: str) -> DataFrame:
    """`df` with column `target`: the image rebuilt from its lean columns and the dictionary,
    `{name, mysql_type, flags, value, label}` per column, as decoded."""
    sid = F.col(f"{image}_schema")
    df = _with_entry(df, image, dictionary, "_entry")
    entry = F.col("_entry")
    values = F.col(f"{image}_values")
    labels = F.coalesce(F.col(f"{image}_labels"), F.array_repeat(F.lit(None).cast("string"), F.size(values)))
    zipped = F.arrays_zip(entry["names"], entry["types"], entry["flags"], values, labels).cast(IMAGE_TYPE)
    return df.withColumn(target, F.when(sid.isNull(), F.lit(None).cast(IMAGE_TYPE)).otherwise(zipped)).drop("_entry")


def rebuilt_image(df: DataFrame, image: str, dictionary: SchemaDictionary) -> DataFrame:
    """`df` with column `image` rebuilt (`_rebuild`), its lean columns kept."""
    return _rebuild(df, image, dictionary, image)


def full_images(df: DataFrame, dictionary: SchemaDictionary, columns: list[str] | None = None) -> DataFrame:
    """`df` with `before`/`after` rebuilt (`_rebuild`) in place of the lean columns, its
    columns in the order `columns` gives (the rest after)."""
    for image in IMAGES:
        df = _rebuild(df, image, dictionary, image)
    kept = [c for c in df.columns if c not in LEAN_COLUMNS]  # the select drops them: one step, not two
    order = [c for c in (columns or []) if c in kept]
    return df.select(*order, *[c for c in kept if c not in order])


def row_key(image: str, schema_keys: bool = False) -> Column:
    """The row's key: the values of its key columns. The key columns are the table's at the
    cut when the DDL history knows the table (`key_aliases`: every name each key column had,
    so RENAME COLUMN and primary-key changes keep one key per row), else the event's own
    `key_columns`; a table without a key is keyed by all its values: for a table the DDL history
    knows, by its columns at the cut (`row_columns`: names each had, default, the point it was
    added), a column the image lacks, or that was added after the image's point (a column
    dropped and added again holds none of its old values), taking its default, so an image
    written before an ADD/DROP COLUMN still names the same row, the one its table holds. Values only, in key order (lean rows: `row_key_lean`)."""
    img = F.col(image)
    own_keys = F.transform(F.coalesce(F.col("key_columns"), F.array().cast("array<string>")), lambda k: F.lower(k))
    by_own = F.transform(own_keys, lambda k: F.element_at(F.filter(img, lambda c: F.lower(c["name"]) == k), 1)["value"])
    all_values = F.transform(img, lambda c: c["value"])
    own = F.when(F.size(own_keys) > 0, by_own).otherwise(all_values)
    if not schema_keys:
        return own
    by_schema = F.transform(
        F.col("key_aliases"),
        lambda names: F.element_at(F.filter(img, lambda c: F.array_contains(names, F.lower(c["name"]))), 1)["value"],
    )
    def column_value(col):
        found = F.try_element_at(F.filter(img, lambda c: F.array_contains(col["names"], F.lower(c["name"]))), F.lit(1))
        return F.when(found.isNull() | added_later(col), col["default"]).otherwise(found["value"])

    by_columns = F.transform(F.col("row_columns"), column_value)
    return (F.when(F.col("key_aliases").isNull(), own).when(F.size("key_aliases") > 0, by_schema)
            .when(F.col("row_columns").isNotNull(), by_columns).otherwise(all_values))


def added_later(column: Column) -> Column:
    """Whether a `row_columns` column was added after the row's point (`timeline`): the row
    holds its default, whatever value a column of that name had when it was written (as
    snapshot.project_image writes it)."""
    return F.coalesce(F.col("timeline") <= column["added"], F.lit(False))


def row_key_lean(image: str, entry: Column) -> Column:
    """`row_key(image, schema_keys=True)` for a lean image: the same rule, computed from the
    image's values and its dictionary `entry`'s lower-cased names by position
    (`array_position`), instead of searching the rebuilt image column by column with a
    lower-casing lambda per column (Spark interprets lambdas: measured ~10x the JVM time of
    this form over the bench archive's rows). The first column whose name matches wins, as in
    `row_key`."""
    names, values = entry["lower_names"], F.col(f"{image}_values")

    def value_at(position):
        return F.when(position > 0, F.element_at(values, position.cast("int")))

    def first_of(aliases):  # the position of the first column named by any of `aliases`, or null
        return F.array_min(F.transform(aliases, lambda n: F.nullif(F.array_position(names, n), F.lit(0))))

    own_keys = F.transform(F.coalesce(F.col("key_columns"), F.array().cast("array<string>")), lambda k: F.lower(k))
    by_own = F.transform(own_keys, lambda k: value_at(F.array_position(names, k)))
    own = F.when(F.size(own_keys) > 0, by_own).otherwise(values)
    by_schema = F.transform(F.col("key_aliases"), lambda aliases: value_at(first_of(aliases)))

    def column_value(col):
        found = first_of(col["names"])
        return F.when(found.isNull() | added_later(col), col["default"]).otherwise(
            F.element_at(values, found.cast("int")))

    by_columns = F.transform(F.col("row_columns"), column_value)
    return (F.when(F.col("key_aliases").isNull(), own).when(F.size("key_aliases") > 0, by_schema)
            .when(F.col("row_columns").isNotNull(), by_columns).otherwise(values))


def with_image_keys(rows: DataFrame, dictionary: SchemaDictionary) -> DataFrame:
    """Lean `rows` with each image's key, `_before_key` and `_after_key` (`row_key_lean` over
    `_before`/`_after`, the image's names from the dictionary, which the caller drops),
    computed once per row. Each image's key is in a generated method of its own
    (`codegen_boundary`): together with the joins before and the explode after them they
    outgrow what the JVM compiles."""
    for image in IMAGES:
        rows = _with_entry(rows, image, dictionary, f"_{image}", only=("lower_names",))
    for image in IMAGES:
        rows = codegen_boundary(rows).withColumn(f"_{image}_key", row_key_lean(image, F.col(f"_{image}")))
    return codegen_boundary(rows)


# how a change moves the number of identical rows of a table without a key (`copy_change`):
# an INSERT adds one, a DELETE removes one if any is there, an UPDATE that leaves the image
# as it was (or carries no old image) leaves at least one
COPY_ADDED, COPY_REMOVED, COPY_KEPT = 1, -1, 0


_boundaries = itertools.count()


def codegen_boundary(df: DataFrame) -> DataFrame:
    """`df` as it is, behind an operator Spark generates no code for (`observe`, with a count
    nobody reads): whole-stage code generation ends below it and starts again above. Why:
    Spark generates one method per stage, and the JVM does not compile a method past 8000
    bytes of bytecode; replay.build_session makes Spark run such a stage as separate
    operators instead (each copying every row), slower than two compiled methods. Measured
    on the last change per key at 4M events: 21.8 CPU s as separate operators, 10.0 s in four
    compiled stages (docs/engine.md)."""
    return df.observe(f"cdc_replay_stage_{next(_boundaries)}", F.count(F.lit(1)))


def change_rank(is_delete: Column) -> Column:
    """At one commit ts a DELETE precedes an INSERT of the same key (split updates); without
    commit ts, message order alone decides."""
    return F.when(F.col("commit_ts").isNotNull() & is_delete, 0).otherwise(1)


def order_struct() -> Column:
    return F.struct(
        F.col("timeline").alias("timeline"), F.col("rank").alias("rank"), F.col("partition").alias("partition"),
        F.col("offset").alias("offset"), F.col("event_index").alias("event_index"),
    )


def fill_previous_images(rows: DataFrame) -> DataFrame:
    """Give UPDATEs without old values, and DELETEs that carry only the key (TiCDC Avro), the
    row as it was: the previous change's new image of the same key. The first change of a key
    in the archive has no previous image and keeps what it had."""
    key = F.when(F.col("after").isNotNull(), row_key("after")).otherwise(row_key("before"))
    per_key = Window.partitionBy("database", "table", "_key").orderBy(
        "timeline", change_rank(F.col("op") == Op.DELETE), "partition", "offset", "event_index")
    previous = F.lag("after").over(per_key)
    filled = (
        F.when((F.col("op") == Op.UPDATE) & F.col("before").isNull(), previous)
        .when((F.col("op") == Op.DELETE) & previous.isNotNull()
              & (F.size(F.coalesce("before", F.array())) < F.size(previous)), previous)
        .otherwise(F.col("before"))
    )
    return rows.withColumn("_key", key).withColumn("before", filled).drop("_key")


def _match_tables(rows: DataFrame, intervals: DataFrame, known) -> DataFrame:
    """`rows` with the live table each belongs to at the cut (`_final_db`, `_final_tb`,
    `key_aliases`, `row_columns`: null when no interval holds the event) and `_known` (true
    when any DDL mentioned its name, else null). Intervals of one name never overlap, so an
    event matches at most one."""
    ev = (
        rows.withColumns({"_db": F.lower(F.coalesce("database", F.lit(""))),
                          "_tb": F.lower(F.coalesce("table", F.lit("")))})
        .alias("ev")
    )
    iv = intervals.alias("iv")
    matched = ev.join(
        F.broadcast(iv),
        (F.col("ev._db") == F.col("iv.database")) & (F.col("ev._tb") == F.col("iv.table"))
        & (F.col("ev.timeline") > F.col("iv.after"))
        & (F.col("iv.until").isNull() | (F.col("ev.timeline") <= F.col("iv.until"))),
        "left",
    ).select("ev.*", F.col("iv.final_database").alias("_final_db"), F.col("iv.final_table").alias("_final_tb"),
             F.col("iv.key_aliases").alias("key_aliases"), F.col("iv.row_columns").alias("row_columns"))
    if isinstance(known, DataFrame):
        kn = known.select(F.col("database").alias("_kdb"), F.col("table").alias("_ktb"), F.lit(True).alias("_known"))
        return matched.join(
            F.broadcast(kn), (F.col("_db") == F.col("_kdb")) & (F.col("_tb") == F.col("_ktb")), "left"
        ).drop("_kdb", "_ktb")
    pair = F.struct(F.col("_db").alias("d"), F.col("_tb").alias("t"))
    names = F.array(*[F.struct(F.lit(d).cast("string").alias("d"), F.lit(t).cast("string").alias("t"))
                      for d, t in sorted(known)]) if known else F.array().cast("array<struct<d: string, t: string>>")
    # true or null, as the left join's flag
    return matched.withColumn("_known", F.when(F.array_contains(names, pair), F.lit(True)))


MISSING_TABLE_STAGE = "table"


def mark_missing_tables(tagged: DataFrame, intervals: DataFrame, known) -> DataFrame:
    """Applied row events of a table that does not exist at their point (dropped, truncated
    away, renamed, or not yet created: a DDL mentions the name, but no live table's interval
    holds the event) become `quarantined` with that reason (error stage `table`), so every row
    event ends in a status that says what happened to it."""
    flagged = _match_tables(tagged, intervals, known)
    missing_now = ((F.col("status") == Status.APPLIED) & (F.col("kind") == Kind.ROW)
                   & F.col("_final_tb").isNull() & F.col("_known").isNotNull())
    reason = missing_table_reason()
    missing = F.col("_missing")  # decided once: the status below changes what `missing` reads
    return (flagged.withColumn("_missing", F.coalesce(missing_now, F.lit(False)))
            .withColumns({"status": F.when(missing, F.lit(Status.QUARANTINED)).otherwise(F.col("status")),
                          "error_stage": F.when(missing, F.lit(MISSING_TABLE_STAGE)).otherwise(F.col("error_stage")),
                          "error": F.when(missing, reason).otherwise(F.col("error"))})
            .drop("_db", "_tb", "_final_db", "_final_tb", "_known", "key_aliases", "row_columns", "_missing"))


def missing_table_reason() -> Column:
    """The quarantine error of a row event whose table does not exist at its point."""
    return F.concat(F.lit("no table "), F.coalesce(F.col("database"), F.lit("")), F.lit("."),
                    F.coalesce(F.col("table"), F.lit("")),
                    F.lit(" at this event's point in the DDL history (dropped, truncated, renamed or not yet "
                          "created); timeline "), F.col("timeline").cast("string"))


UNKNOWN_TABLE_STAGE = "schema"


def mark_unknown_tables(tagged: DataFrame, unknown: list[tuple], where: Column | None = None) -> DataFrame:
    """--require-schema: applied row events of the `unknown` (database, table) names (no DDL,
    --schema nor base describes them) become `quarantined` (error stage `schema`) instead of
    read with the schema their messages carry; `where`: only the rows it holds for. Both
    engines mark them by this expression (stages/history.py, engine_v2.tag_effects)."""
    condition = F.lit(False)
    for database, table in unknown:
        condition = condition | ((F.col("database") == database) & (F.col("table") == table))
    hit = (F.col("status") == Status.APPLIED) & (F.col("kind") == Kind.ROW) & condition
    if where is not None:
        hit = hit & where
    reason = F.concat(F.lit("no known schema for "), F.col("database"), F.lit("."), F.col("table"),
                      F.lit(" (no CREATE TABLE in the archive, none in --schema; --require-schema is set)"))
    # one step: every expression reads `status` as it was (`hit`), as the chain did
    return tagged.withColumns({"error": F.when(hit, reason).otherwise(F.col("error")),
                               "error_stage": F.when(hit, F.lit(UNKNOWN_TABLE_STAGE)).otherwise(F.col("error_stage")),
                               "status": F.when(hit, F.lit(Status.QUARANTINED)).otherwise(F.col("status"))})


# what the last change per key reads of a row event (engine_v2.tag_effects' joins and keys, order_struct)
EFFECT_INPUTS = ("database", "table", "timeline", "op", "commit_ts", "key_columns", "partition", "offset",
                 "event_index", "before", "after", "before_schema", "after_schema", "before_values", "after_values")


# what the SCD2 window reads besides EFFECT_INPUTS (scd2_validity's validity times)
VALIDITY_INPUTS = ("inferred_ts", "execute_ts_ms")


def packed(rows: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """`rows` with every column the last change per key does not read (`EFFECT_INPUTS`, and
    `keep`) in one struct, `_carried` (`unpacked` undoes it). Why: Spark generates one method
    for the whole map side of the last change per key (scan, joins, keys, sort), its size
    growing with the columns each operator passes on; past 8000 bytes of bytecode the JVM does
    not compile it (replay.build_session turns such stages into separate operators, slower
    than one compiled method). One column instead of a dozen keeps the method small."""
    read = set(EFFECT_INPUTS) | set(keep)
    carried = [c for c in rows.columns if c not in read]
    return rows.select(*[c for c in rows.columns if c in read], F.struct(*carried).alias("_carried"))


def unpacked(df: DataFrame) -> DataFrame:
    """`df` with the columns `packed` put in `_carried` back at the top level."""
    return df.select(*[c for c in df.columns if c != "_carried"], "_carried.*")


def latest_per_key(effects: DataFrame, multiset: bool = True) -> DataFrame:
    """The last change of every (table, key) by the replay order: distributed by key hash,
    so no table is ever held by one task and nothing reaches the driver. For a table without
    a key (the key is the whole row: identical rows share it) also `copies`, how many
    identical rows its changes leave, folded in the replay order (null for keyed tables).
    `multiset=False` (no table without a key in the run) leaves `copies` null: the fold's
    list is a typed aggregate, which a plain last-change aggregate does not need."""
    payload = F.struct(*[F.col(c) for c in effects.columns
                         if c not in ("final_database", "final_table", "row_key", "key_aliases", "row_columns",
                                      "copy_change")])
    # `first_change`: how the archive first touched the key ("update"/"delete": a row that
    # predates the archive, whose insert it never saw), so those keys are counted
    first = F.when(F.col("effect") == "delete", F.lit("delete")).otherwise(F.col("op"))
    changes = F.sort_array(F.collect_list(F.when(
        F.col("copy_change").isNotNull(), F.struct(order_struct().alias("o"), F.col("copy_change").alias("c")))))

    aggregates = [F.max_by(payload, order_struct()).alias("last"), F.min_by(first, order_struct()).alias("first_change")]
    if multiset:
        aggregates.append(changes.alias("_copy_changes"))
    last = effects.groupBy("final_database", "final_table", "row_key").agg(*aggregates)
    if not multiset:
        return last.select("final_database", "final_table", "row_key", "last.*", "first_change",
                           F.lit(None).cast("int").alias("copies"))
    # the count from none (a whole replay) is max(0 + add, floor) of the same steps a window merges
    stepped = last.withColumn("copy_steps", copy_steps(F.col("_copy_changes")))
    copies = F.greatest(F.col("copy_steps.add"), F.col("copy_steps.floor"))
    return stepped.select("final_database", "final_table", "row_key", "last.*", "first_change", copies.alias("copies"),
                          "copy_steps")


def copy_steps(changes: Column) -> Column:
    """How a key's copy changes (`latest_per_key`'s sorted list) move a count of identical rows
    not known here — a --since window over a table that already holds some: each change is
    x -> max(x + a, b) for x >= 0 (+1: (1, 0); -1 floored at 0: (-1, 0); at least one: (0, 1)),
    and two compose to (a1 + a2, max(b1 + a2, b2)), so the whole list is one (`add`, `floor`)
    struct and the count after it is max(count + add, floor) (`copies` is that from 0). Null
    for a key without copy changes (a keyed table)."""
    def step(acc, change):
        a = F.when(change["c"] == COPY_ADDED, 1).when(change["c"] == COPY_REMOVED, -1).otherwise(0)
        b = F.when((change["c"] != COPY_ADDED) & (change["c"] != COPY_REMOVED), 1).otherwise(0)
        return F.struct((acc["add"] + a).alias("add"), F.greatest(acc["floor"] + a, b).alias("floor"))

    start = F.struct(F.lit(0).alias("add"), F.lit(0).alias("floor"))
    return F.when(F.size(changes) > 0, F.aggregate(changes, start, step))


def live_copies() -> Column:
    """How many snapshot rows a key's last change leaves: 1 or 0 for a keyed table (upsert or
    delete), the folded count of identical rows for a table without a key."""
    return F.coalesce(F.col("copies"), F.when(F.col("effect") == "upsert", 1).otherwise(0))


def live_rows(latest: DataFrame, multiset: bool = True) -> DataFrame:
    """Snapshot rows: one INSERT per key whose last change left the row in place, and per
    identical row still there for a table without a key (whose last change may be the DELETE
    of one of several copies: the row is then its old image)."""
    deleted = F.col("effect") == "delete"
    # one step each (`withColumns`: every expression reads the columns before it), not one per
    # column: each DataFrame step is an analysis on the driver (docs/engine.md, "The driver's
    # py4j calls (twenty-fourth session)")
    changed = {"op": F.lit(Op.INSERT)}
    for part in ("", "_schema", "_values", "_labels"):
        if f"after{part}" in latest.columns:
            changed[f"after{part}"] = F.when(deleted, F.col(f"before{part}")).otherwise(F.col(f"after{part}"))
    for name in [c for c in ("before", "before_schema", "before_values", "before_labels") if c in latest.columns]:
        changed[name] = F.lit(None).cast(latest.schema[name].dataType)
    live = latest.where(live_copies() > 0).withColumns(changed)
    if multiset:  # identical rows of a table without a key: one row each (else every key is one row)
        live = live.withColumn("_copy", F.explode(F.array_repeat(F.lit(True), live_copies().cast("int")))).drop("_copy")
    return live.withColumns({"effect": F.lit("upsert"), "database": F.col("final_database"),
                             "table": F.col("final_table")})


SCD2_COLUMNS = ("_op", "_valid_from_ts", "_valid_to_ts", "_valid_from_ms", "_valid_to_ms", "_current")


def scd2_validity(effects: DataFrame) -> DataFrame:
    """SCD type 2 of the effects of the applied row events (`engine_v2.tag_effects`' rows),
    the columns that need the key's next change (one window per key): `_op` (the change,
    `delete` for a key an UPDATE moved away from), the validity from its commit ts (the
    inferred one where it has none) and execute time (ms) until the key's next change (null:
    still valid), in the replay order, and `_current` (a key's last version when it leaves the
    row in place). The images are left as they are (lean rows stay lean through the window's
    shuffle: engine v2 rebuilds them after it, stages/engine.py; then `scd2_images`)."""
    per_key = Window.partitionBy("final_database", "final_table", "row_key").orderBy(order_struct())
    valid_from = F.coalesce(F.col("commit_ts"), F.col("inferred_ts"))
    # the plain columns in one step; each window in a step of its own, as Spark plans them best:
    # in one step, every window's order struct was computed before the first shuffle and sent
    # through it (docs/engine.md "The driver of a small run (twenty-eighth session)")
    return (
        effects.withColumns({"_op": F.when(F.col("effect") == "delete", F.lit("delete")).otherwise(F.col("op")),
                             "_valid_from_ts": valid_from, "_valid_from_ms": F.col("execute_ts_ms")})
        .withColumn("_valid_to_ts", F.lead(valid_from).over(per_key))
        .withColumn("_valid_to_ms", F.lead("execute_ts_ms").over(per_key))
        .withColumn("_current", F.lead("effect").over(per_key).isNull() & (F.col("effect") == "upsert"))
    )


def scd2_images(versions: DataFrame) -> DataFrame:
    """`scd2_validity`'s rows (full images) as versions: the new row, or for a deletion the
    deleted row, under the table's final names."""
    upsert = F.col("effect") == "upsert"
    return versions.withColumns({"after": F.when(upsert, F.col("after")),
                                 "before": F.when(F.col("effect") == "delete", F.col("before")),
                                 "database": F.col("final_database"), "table": F.col("final_table")})


DISPATCHERS = ("index-value", "table", "ts", "canal", "canal-table")


def with_partition(df: DataFrame, dispatcher: str, partitions: int) -> DataFrame:
    """Add `out_partition` to row events. Canal's placement (Java String.hashCode of the
    database and key values, `abs(h) % N`; `canal-table`: of the table name) needs Python,
    so it runs as a vectorised mapInArrow pass; the others are native expressions."""
    if dispatcher not in ("canal", "canal-table"):
        return df.withColumn("out_partition", dispatch_partition(dispatcher, partitions))
    import pyarrow as pa
    from pyspark.sql.types import IntegerType, StructField, StructType

    from cdc_codecs.dispatch import canal_event_partition

    table_hash = dispatcher == "canal-table"

    def place(batches):
        from spark_apps.schema import events_from_batch

        for batch in batches:
            parts = [canal_event_partition(e, partitions, table_hash=table_hash) for e in events_from_batch(batch)]
            yield batch.append_column("out_partition", pa.array(parts, pa.int32()))

    schema = StructType(df.schema.fields + [StructField("out_partition", IntegerType())])
    return df.mapInArrow(place, schema)


def dispatch_partition(dispatcher: str, partitions: int) -> Column:
    """Output partition of a row event, as TiCDC's MQ sinks place it:

    * `table`: crc32(database + table) % N;
    * `index-value`: crc32(database + table), XOR crc32(name + value) of every handle-key
      column of the row (its new image, or the old one for a DELETE), % N. A value is its
      canonical text, which is what TiCDC hashes (Go's ColumnValueString: decimal integers,
      ENUM index, SET/BIT numbers, shortest floats without exponent, raw bytes, `null`);
      XOR makes the column order irrelevant. Handle-key columns are those flagged so, else the
      event's key columns; a table without either hashes by table alone, as in TiCDC;
    * `ts`: commit ts % N."""
    n = F.lit(partitions)
    if dispatcher == "table":
        return F.pmod(_table_hash(), n).cast("int")
    if dispatcher == "index-value":
        image = F.when(F.size(F.coalesce(F.col("after"), F.array())) > 0, F.col("after")).otherwise(F.col("before"))
        flagged = F.filter(image, lambda c: (c["flags"].bitwiseAND(int(ColumnFlag.HANDLE_KEY))) != 0)
        named = F.filter(image, lambda c: F.array_contains(F.coalesce(F.col("key_columns"), F.array()), c["name"]))
        handle = F.when(F.size(flagged) > 0, flagged).otherwise(named)
        return _index_value(handle, lambda c: c["name"], lambda c: c["value"], partitions)
    if dispatcher == "ts":
        return F.pmod(F.coalesce(F.col("commit_ts"), F.lit(0)), n).cast("int")
    if dispatcher in ("canal", "canal-table"):
        raise ValueError("canal placement needs with_partition()")
    raise ValueError(f"unknown dispatcher {dispatcher!r}; valid: {', '.join(DISPATCHERS)}")


def _table_hash() -> Column:
    return F.crc32(F.concat(F.encode(F.coalesce(F.col("database"), F.lit("")), "UTF-8"),
                            F.encode(F.coalesce(F.col("table"), F.lit("")), "UTF-8")))


def _index_value(handle: Column, name, value, partitions: int) -> Column:
    """The index-value partition from the row's handle-key columns `handle` (an array; null or
    empty: the table alone), `name(c)`/`value(c)` reading one of them."""
    null_text = F.lit(bytearray(b"null"))
    key_hash = F.aggregate(handle, F.lit(0).cast("bigint"), lambda acc, c: acc.bitwiseXOR(
        F.crc32(F.concat(F.encode(name(c), "UTF-8"), F.coalesce(value(c), null_text)))))
    return F.pmod(_table_hash().bitwiseXOR(F.coalesce(key_hash, F.lit(0).cast("bigint"))), F.lit(partitions)).cast("int")


def with_partition_lean(df: DataFrame, dispatcher: str, partitions: int, dictionary: SchemaDictionary) -> DataFrame:
    """`with_partition` for lean rows (schema ids, values, labels), the same partitions. `table` and `ts`
    read no image; `index-value` reads the handle-key columns by position: each image's
    dictionary entry gives its names and handle-key positions (`handle_positions`, computed
    once per column list on the driver), the row its values, so no image is rebuilt and only
    the key columns are visited (the rebuilt images cost ~15 CPU s per map task of the 1M
    bench's topics). Without flagged columns the event's `key_columns` name them, as in
    `dispatch_partition`. Canal's placements read whole events: the images are rebuilt for
    them and dropped again."""
    if dispatcher in ("table", "ts"):
        return df.withColumn("out_partition", dispatch_partition(dispatcher, partitions))
    if dispatcher != "index-value":
        for image in IMAGES:
            df = rebuilt_image(df, image, dictionary)
        return with_partition(df, dispatcher, partitions).drop(*IMAGES)
    for image in IMAGES:
        df = _with_entry(df, image, dictionary, f"_{image}", only=("names", "handle"))
    # the new image unless it is null or has no column (a DELETE's), as `dispatch_partition` picks
    after = F.size(F.coalesce(F.when(F.col("after_schema").isNotNull(), F.col("after_values")), F.array())) > 0
    names, handle, values = (F.when(after, F.col(a)).otherwise(F.col(b)) for a, b in (
        ("_after.names", "_before.names"), ("_after.handle", "_before.handle"), ("after_values", "before_values")))
    keys = F.coalesce(F.col("key_columns"), F.array().cast("array<string>"))
    named = F.filter(F.sequence(F.lit(1), F.size(names)), lambda i: F.array_contains(keys, F.element_at(names, i)))
    positions = F.when(F.size(handle) > 0, handle).when(F.size(names) > 0, named)
    placed = _index_value(positions, lambda i: F.element_at(names, i), lambda i: F.try_element_at(values, i), partitions)
    return df.withColumn("out_partition", placed).drop("_before", "_after")


_TOPIC_FIELDS = {"{topic}": "topic", "{schema}": "database", "{table}": "table"}  # a template's fields


def _topic_parts(template: str) -> list[str]:
    return [part for part in re.split(r"(\{topic\}|\{schema\}|\{table\})", template) if part]


def topic_name(template: str) -> Column:
    """Output topic from a template with {topic}, {schema} and {table}."""
    columns = [F.coalesce(F.col(_TOPIC_FIELDS[part]), F.lit("")) if part in _TOPIC_FIELDS else F.lit(part)
               for part in _topic_parts(template)]
    return F.concat(*columns) if columns else F.lit("")


def topic_name_of(template: str, topic: str | None, database: str | None, table: str | None) -> str:
    """`topic_name` of one row's values, on the driver (a null value is empty, as there)."""
    values = {"topic": topic, "database": database, "table": table}
    return "".join((values[_TOPIC_FIELDS[part]] or "") if part in _TOPIC_FIELDS else part
                   for part in _topic_parts(template))


REASONS_LISTED = 20  # quarantine reasons the manifest lists (the most frequent), each with a sample


def reason_class(error: Column) -> Column:
    """The kind of a quarantine error: its text without the record's location, quoted values and
    numbers, so records that failed the same way group together."""
    text = F.regexp_replace(error, r" at (object|topic|partition|offset|byte|field|line) .*$", "")
    text = F.regexp_replace(text, r"'[^']*'|\"[^\"]*\"", "'…'")
    return F.substring(F.regexp_replace(text, r"\d+", "N"), 1, 160)


TIMELINE_BUCKETS = 60  # commit-time buckets of the manifest's timeline (the monitoring page's chart)


def commit_bucket(start_ms: int, bucket_ms: int, buckets: int = TIMELINE_BUCKETS) -> Column:
    """The commit-time bucket of a row or DDL event of a table, null for other events and for
    commit times outside [start_ms, start_ms + buckets * bucket_ms)."""
    index = F.floor((F.shiftright(F.col("commit_ts"), LOGICAL_BITS) - F.lit(start_ms)) / F.lit(bucket_ms)).cast("int")
    counted = F.col("kind").isin(Kind.ROW, Kind.DDL) & F.col("table").isNotNull() & F.col("commit_ts").isNotNull()
    return F.when(counted & (index >= 0) & (index < buckets), index)
