"""Direct tests of spark_apps.transforms on tiny DataFrames: the branches that real archives
reach but generated histories rarely do (no DDL at all, keys first touched by an UPDATE or a
DELETE, whole-row keys across column changes, Avro tombstones without a lower bound); and of
tests/support/effect_chain.py, the step-by-step chain tests/test_engine_v2.py compares the
engine with."""

from __future__ import annotations

import pytest

from cdc_codecs.events import Kind, Op, new_event
from spark_apps import transforms as T
from spark_apps.schema import DECODED_FIELD_NAMES, DECODED_STRUCT

from .support import effect_chain as chain
from .support.lean_rows import lean_images

pytestmark = pytest.mark.spark


def col(name, value):
    return {"name": name, "mysql_type": "int", "flags": 0, "value": None if value is None else str(value).encode(),
            "label": None}


def frame(spark, events):
    rows = []
    for e in events:
        full = dict.fromkeys(DECODED_FIELD_NAMES)
        full.update({"topic": "t", "partition": 0, "event_index": 0, **e})
        rows.append(tuple(full[n] for n in DECODED_FIELD_NAMES))
    return spark.createDataFrame(rows, DECODED_STRUCT)


def row(op, offset, ts=None, before=None, after=None, partition=0, table="t", keys=("id",)):
    return new_event(Kind.ROW, op=op, commit_ts=ts, database="d", table=table, key_columns=list(keys),
                     before=before, after=after, partition=partition, offset=offset, topic="t")


def test_assign_tables_without_any_ddl_keeps_every_row_under_its_own_name(spark):
    events = frame(spark, [row(Op.UPDATE, 0, 10, [col("id", 1), col("v", 1)], [col("id", 1), col("v", 2)]),
                           row(Op.DELETE, 1, 11, [col("id", 2), col("v", 1)])])
    got = chain.assign_tables(T.with_timeline(events), None, None)
    assert [(r.final_database, r.final_table, r.key_aliases, r.row_columns) for r in got.collect()] == [
        ("d", "t", None, None)] * 2


def test_keys_first_touched_by_an_update_or_a_delete(spark):
    """An UPDATE of a row the archive never inserted is its latest image; a DELETE of one
    leaves nothing; both are told apart by `first_change` so they can be counted."""
    events = frame(spark, [
        row(Op.UPDATE, 0, 10, [col("id", 1), col("v", 1)], [col("id", 1), col("v", 2)]),
        row(Op.DELETE, 1, 11, [col("id", 2), col("v", 1)]),
        row(Op.INSERT, 2, 12, None, [col("id", 3), col("v", 3)]),
        row(Op.UPDATE, 3, 13, [col("id", 3), col("v", 3)], [col("id", 3), col("v", 4)]),
    ])
    effects = chain.row_effects(chain.assign_tables(T.with_timeline(events), None, None))
    latest = {tuple(r.row_key): (r.effect, r.first_change, r.after and r.after[1].value)
              for r in T.latest_per_key(effects).collect()}
    assert latest == {(b"1",): ("upsert", "update", b"2"), (b"2",): ("delete", "delete", None),
                      (b"3",): ("upsert", "insert", b"4")}
    live = T.live_rows(T.latest_per_key(effects))
    assert sorted(tuple(r.row_key) for r in live.collect()) == [(b"1",), (b"3",)]


def test_a_keyless_table_is_keyed_by_its_columns_at_the_cut(spark):
    """`row_columns` (a table with no key the DDL history knows): a column the image lacks
    takes its default, one the table no longer has is ignored, renamed columns match by any
    name they had, one added after the row's point takes its default though the image has a
    column of its name (dropped and added again: the old values are gone)."""
    events = frame(spark, [row(Op.INSERT, 0, 10, None, [col("a", 1), col("old", 5), col("gone", 7)], keys=())])

    def column(names, default, added):
        return T.F.struct(T.F.array(*[T.F.lit(n) for n in names]).alias("names"),
                          T.F.lit(default).cast("binary").alias("default"),
                          T.F.array(*[T.F.lit(p).cast("bigint") for p in added]).alias("added"))

    events = T.with_timeline(events).withColumn("key_aliases", T.F.array().cast("array<array<string>>")).withColumn(
        "row_columns", T.F.array(column(["a"], None, [1]), column(["new", "old"], None, [1]), column(["c"], b"9", [1]),
                                 column(["gone"], b"0", [20])))
    assert [tuple(r.k) for r in events.select(T.row_key("after", schema_keys=True).alias("k")).collect()] == [
        (b"1", b"5", b"9", b"0")]
    assert events.schema["row_columns"].dataType.simpleString() == T.ROW_COLUMNS_TYPE.replace(" ", "")


def test_tombstones_are_placed_between_their_partition_neighbours(spark):
    """TiCDC Avro DELETEs have no commit ts: after an earlier event the lower bound, as the
    first of the partition the upper bound (the next commit ts or watermark), alone none."""
    wm = new_event(Kind.WATERMARK, watermark_ts=150, topic="t", partition=0, offset=2)
    ddl = new_event(Kind.DDL, commit_ts=200, ddl_query="x", topic="t", partition=0, offset=4)
    events = frame(spark, [
        row(Op.DELETE, 0, None, [col("id", 1)]),             # first: upper bound 100
        row(Op.INSERT, 1, 100, None, [col("id", 2)]),
        wm,
        row(Op.DELETE, 3, None, [col("id", 2)]),             # after watermark 150: 151
        ddl,
        row(Op.DELETE, 5, None, [col("id", 3)]),             # after the DDL at 200: 201
        row(Op.DELETE, 0, None, [col("id", 4)], partition=1),  # alone: none
    ])
    got = {(r.partition, r.offset): r.inferred_ts
           for r in T.infer_commit_ts(events, True).where("kind = 'row'").collect()}
    assert got == {(0, 0): 100, (0, 1): None, (0, 3): 151, (0, 5): 201, (1, 0): None}


def test_lean_rows_carry_no_column_names_and_rebuild_to_the_same_images(spark):
    """Issue 13 point 3: what the dedupe shuffle and the `tagged` cache hold has no column name
    or type string (only the schema id, values and labels), and the images rebuilt from the
    dictionary are the decoded ones: nulls, empty images, labels, a null MySQL type at either
    position (which must not give two column lists one id)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    def c(name, mysql_type, value, label=None, flags=0):
        return {"name": name, "mysql_type": mysql_type, "flags": flags, "value": value, "label": label}

    images = [
        (None, [c("id", "int", b"1", flags=3), c("v", "varchar(8)", None)]),
        ([c("id", "int", b"1", flags=3), c("v", "varchar(8)", b"x")],
         [c("id", "int", b"1", flags=3), c("v", "varchar(8)", b"\xff\x00")]),
        ([c("a", None, b"1"), c("b", "int", b"2")], [c("a", "int", b"1"), c("b", None, b"2")]),
        ([c("e", "enum('x','y')", b"2", "y"), c("s", "set('p')", None)], []),
    ]
    events = frame(spark, [row(Op.UPDATE if b else Op.INSERT, i, 10 + i, b, a) for i, (b, a) in enumerate(images)])
    with_ids = T.with_schema_ids(events)
    dictionary = T.schema_dictionary(T.schema_entries(with_ids).collect())
    assert len(dictionary) == 5  # (a null, b int) and (a int, b null) are two; the empty list is one

    tagged = T.tag_status(lean_images(with_ids), cut=None)

    def strings_in(dt, path=""):
        if isinstance(dt, StructType):
            return [p for f in dt.fields for p in strings_in(f.dataType, f"{path}.{f.name}")]
        if isinstance(dt, ArrayType):
            return strings_in(dt.elementType, path + "[]")
        if isinstance(dt, MapType):
            return strings_in(dt.valueType, path + "{}")
        return [path] if dt.simpleString() == "string" and "[]" in path else []

    assert "before" not in tagged.columns and "after" not in tagged.columns
    # per event, the only string arrays left are the event's key names and the labels
    assert sorted(strings_in(tagged.schema)) == [".after_labels[]", ".before_labels[]", ".key_columns[]"]
    assert [r.status for r in tagged.orderBy("offset").collect()] == ["applied"] * 4
    full = T.full_images(tagged, T.plan_dictionary(dictionary), events.columns)
    assert full.columns[:len(events.columns)] == events.columns
    got = [(r.before, r.after) for r in full.orderBy("offset").collect()]
    want = [(b, a) for b, a in images]
    assert [tuple(None if img is None else [x.asDict() for x in img] for img in pair) for pair in got] == want

    # the replay makes rows lean in the decode tasks (spark_apps/lean_decode.py): the same values
    # and labels as the Spark expressions above, ids grouping the same column lists, the task's
    # dictionary in its `aux` row, and the same images rebuilt
    from spark_apps.lean_decode import LEAN_STRUCT, leaned

    decoded = events.repartition(2).mapInArrow(leaned(lambda batches: batches), LEAN_STRUCT)
    aux = [r.aux for r in decoded.where("aux IS NOT NULL").collect()]
    assert len(aux) == 2  # one per task
    worker = T.schema_dictionary(e for a in aux for e in a.entries)
    assert set(worker.values()) == set(dictionary.values()) and len(worker) == len(dictionary)
    lean_rows = decoded.where("aux IS NULL").drop("aux")
    spark_rows = {r.offset: r for r in tagged.collect()}
    renamed = {}
    for r in lean_rows.collect():
        for image in T.IMAGES:
            assert r[f"{image}_values"] == spark_rows[r.offset][f"{image}_values"]
            assert r[f"{image}_labels"] == spark_rows[r.offset][f"{image}_labels"]
            if r[f"{image}_schema"] is not None:
                assert worker[r[f"{image}_schema"]] == dictionary[spark_rows[r.offset][f"{image}_schema"]]
                renamed.setdefault(r[f"{image}_schema"], spark_rows[r.offset][f"{image}_schema"])
            else:
                assert spark_rows[r.offset][f"{image}_schema"] is None
    assert len(set(renamed.values())) == len(renamed) == 5
    full = T.full_images(T.tag_status(lean_rows, cut=None), T.plan_dictionary(worker), events.columns)
    got = [(r.before, r.after) for r in full.orderBy("offset").collect()]
    assert [tuple(None if img is None else [x.asDict() for x in img] for img in pair) for pair in got] == want

    # beyond DICTIONARY_LITERAL_MAX column lists the dictionary is a broadcast relation, not a
    # literal: the same images, and the plan holds no dictionary literal
    joined = T.plan_dictionary(worker, spark=spark, literal_max=0)
    assert joined.frame is not None and joined.buckets is None
    full = T.full_images(T.tag_status(lean_rows, cut=None), joined, events.columns)
    assert full.columns[:len(events.columns)] == events.columns
    got = [(r.before, r.after) for r in full.orderBy("offset").collect()]
    assert [tuple(None if img is None else [x.asDict() for x in img] for img in pair) for pair in got] == want
    assert "BroadcastHashJoin" in full._jdf.queryExecution().executedPlan().toString()


def test_lean_row_keys_equal_the_keys_of_the_rebuilt_images(spark):
    """`row_key_lean` (positions in the dictionary's lower-cased names) gives exactly what
    `row_key` gives on the full image, for every rule: own key columns (names in another case,
    a name twice), the history's key aliases, whole-row keys with defaults (and columns added
    at, before or after the row's point), and names whose
    lower case Java and Python could disagree on (taken from the JVM), or the JVM's and ICU's
    (U+A7C0, a letter newer than the JVM's Unicode tables: the session's `lower` is the JVM's,
    spark.sql.icu.caseMappings.enabled=false, as the dictionary's names). A key column the image
    lacks is null in the lean key (`row_key` fails the task with an index error there, so such
    cases are drawn only for the whole-row rule, whose defaults fill them)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from pyspark.sql import functions as F

    names = st.sampled_from(["id", "ID", "Id", "v", "w", "İd", "ǅ", "ς", "Σ", "\ua7c0d"])
    jvm_lower = T.spark_lower(spark)

    @st.composite
    def case(draw):
        img = draw(st.lists(st.tuples(names, st.none() | st.binary(max_size=2)), min_size=1, max_size=4))
        present = sorted({jvm_lower(n) for n, _ in img})
        kind = draw(st.sampled_from(["own", "aliases", "columns", "all"]))
        if kind == "own":  # key names as the message writes them: any case of a column's name
            spellings = [n for n, _ in img] + [n.upper() for n, _ in img if jvm_lower(n.upper()) == jvm_lower(n)]
            spec = draw(st.lists(st.sampled_from(spellings), max_size=2))
        elif kind == "aliases":  # each key column named by at least one alias the image has
            spec = [[draw(st.sampled_from(present))] + draw(st.lists(st.sampled_from(["x", "σ", "i̇d"]), max_size=1))
                    for _ in range(draw(st.integers(1, 2)))]
        elif kind == "columns":
            spec = draw(st.lists(st.tuples(st.lists(st.sampled_from(present + ["x", "ǆ"]), min_size=1, max_size=2),
                                           st.none() | st.binary(max_size=1),
                                           st.sampled_from([[1], [10], [20]])), max_size=3))  # added (the row: [10])
        else:
            spec = None
        return img, kind, spec

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(case(), min_size=1, max_size=6))
    def check(cases):
        dictionary, rows = {}, []
        for i, (img, kind, spec) in enumerate(cases):
            sid = i + 1
            dictionary[sid] = (tuple(n for n, _ in img), ("int",) * len(img), (0,) * len(img))
            rows.append({"after_schema": sid, "after_values": [v for _, v in img],
                         "after": [{"name": n, "mysql_type": "int", "flags": 0, "value": v, "label": None}
                                   for n, v in img],
                         "key_columns": spec if kind == "own" else ["id"],
                         "key_aliases": None if kind == "own" else [] if kind in ("columns", "all") else spec,
                         "row_columns": [{"names": a, "default": d, "added": at} for a, d, at in spec]
                         if kind == "columns" else None, "timeline": [10]})
        df = spark.createDataFrame(rows, "after_schema bigint, after_values array<binary>, after array<struct<name: "
                                   "string, mysql_type: string, flags: int, value: binary, label: string>>, "
                                   "key_columns array<string>, key_aliases array<array<string>>, row_columns "
                                   f"{T.ROW_COLUMNS_TYPE}, timeline array<bigint>")
        with_entry = T._with_entry(df, "after", T.plan_dictionary(dictionary, jvm_lower), "_entry")
        got = with_entry.select(T.row_key("after", schema_keys=True).alias("full"),
                                T.row_key_lean("after", F.col("_entry")).alias("lean")).collect()
        assert [r.lean for r in got] == [r.full for r in got]

    check()
    # a key column the image lacks: null in the lean key
    missing = spark.createDataFrame([(1, [b"1"], [["nope"], ["id"]])],
                                    "after_schema bigint, after_values array<binary>, key_aliases array<array<string>>")
    missing = missing.withColumn("key_columns", F.array().cast("array<string>")).withColumn(
        "row_columns", F.lit(None).cast(T.ROW_COLUMNS_TYPE)).withColumn("timeline", F.array(F.lit(10).cast("bigint")))
    for literal_max in (None, 0):  # the literal, then the broadcast relation
        one = T.plan_dictionary({1: (("ID",), ("int",), (0,))}, spark=spark, literal_max=literal_max)
        entry = T._with_entry(missing, "after", one, "_entry")
        assert entry.select(T.row_key_lean("after", F.col("_entry")).alias("k")).first().k == [None, b"1"]
        # an id the dictionary lacks fails the task, naming the id
        with pytest.raises(Exception, match="no column list for schema id 2"):
            T._with_entry(missing.withColumn("after_schema", F.lit(2).cast("bigint")), "after", one, "_entry").collect()


def test_the_sessions_lower_is_the_one_the_dictionarys_names_were_lowered_with(spark):
    """The lean keys compare `lower(key column)` in the plan with the dictionary's names
    lowered on the driver (`spark_lower`: the JVM's UTF8String.toLowerCase). The session maps
    case through the JVM too (stages/session.py: spark.sql.icu.caseMappings.enabled=false),
    so the two agree also on letters ICU's tables know and the JVM's do not (U+A7C0, U+2C2F:
    with ICU, `lower` gave U+A7C1 and the key named no column). Also the first `lower` of a
    JVM no longer builds ICU's title-case table of every code point (3-5 CPU s)."""
    from pyspark.sql import functions as F

    names = ["Id", "İd", "ς", "Σ", "ǅ", "\ua7c0d", "\u2c2f", "Ⓐ"]
    got = spark.createDataFrame([(n,) for n in names], "n string").select(F.lower("n").alias("l")).collect()
    assert [r.l for r in got] == [T.spark_lower(spark)(n) for n in names]
    assert got[5].l == "\ua7c0d"  # the JVM's tables: no lower case for it


def test_the_narrow_duplicate_check_gives_the_statuses_of_the_window_over_every_event(spark):
    """`duplicate_places` + `tag_status(duplicates=Duplicates(...))` (what the replay runs) against the
    window over every event's identity (`tag_status` alone): the same status for every event,
    with copies in other partitions and objects, a copy at the same offset read from two
    objects, copies out of scope, watermarks, and records that could not be decoded."""
    from pyspark.sql import functions as F

    from cdc_codecs.events import Kind as K

    def at(event, partition, offset, obj, line=1):
        return {**event, "partition": partition, "offset": offset, "object": obj, "line": line}

    insert = row(Op.INSERT, 0, 10, None, [col("id", 1)])
    update = row(Op.UPDATE, 0, 11, [col("id", 1)], [col("id", 2)])
    other = row(Op.INSERT, 0, 10, None, [col("id", 9)], table="skipped")
    mark = {"kind": K.WATERMARK, "watermark_ts": 12, "topic": "t"}
    bad = {"kind": "quarantine", "error": "x", "raw_value": b"?", "topic": "t"}
    events = frame(spark, [
        at(insert, 0, 1, "a"), at(insert, 1, 7, "b"), at(insert, 0, 1, "c"),  # copies: another partition, another object
        at(update, 0, 2, "a"), at(update, 0, 2, "a", line=2),  # the same record twice in one object
        at(other, 0, 3, "a"), at(other, 1, 8, "b"),  # out of scope: never duplicates
        at(mark, 0, 4, "a"), at(mark, 0, 4, "c"), at(mark, 1, 9, "b"),
        at(bad, 0, 5, "a"), at(bad, 0, 5, "c"), at(bad, 0, 6, "c"),
    ])
    scope = {"tables": ["d.t"], "cut": [11], "since": None}
    window = T.tag_status(events, **scope)
    narrow = T.tag_status(events, **scope, duplicates=T.Duplicates(T.duplicate_places(events, tables=["d.t"])))
    place = ["topic", "partition", "offset", "object", "line", "event_index"]
    expected = sorted((tuple(r[c] for c in place), r.status) for r in window.collect())
    assert sorted((tuple(r[c] for c in place), r.status) for r in narrow.collect()) == expected
    assert [s for _, s in expected].count("duplicate") == 5
    # lean rows name each event by the decode's `place_id`: the marks are those ids, broadcast
    numbered = events.withColumn("place_id", F.monotonically_increasing_id()).localCheckpoint()
    marks = T.duplicate_places(numbered, tables=["d.t"])
    assert marks.columns == ["place_id"]
    by_id = T.tag_status(numbered, **scope, duplicates=T.Duplicates(marks, broadcast=True))
    assert "place_id" not in by_id.columns
    assert sorted((tuple(r[c] for c in place), r.status) for r in by_id.collect()) == expected


@pytest.mark.generated_code
def test_packed_rows_carry_what_the_keys_do_not_read_and_unpack_to_the_same_rows(spark):
    """`packed` keeps EFFECT_INPUTS at the top level and the rest in `_carried`; `unpacked`
    gives back the same columns and values; `codegen_boundary` changes no row."""
    events = frame(spark, [row(Op.INSERT, 0, 10, None, [col("id", 1)]), row(Op.DELETE, 1, 11, [col("id", 1)])])
    packed = T.packed(events)
    assert set(packed.columns) == {c for c in events.columns if c in T.EFFECT_INPUTS} | {"_carried"}
    again = T.codegen_boundary(T.unpacked(packed))
    assert sorted(again.columns) == sorted(events.columns)
    assert sorted(map(tuple, again.select(*events.columns).collect())) == sorted(map(tuple, events.collect()))


def test_scd2_versions_are_valid_from_their_change_until_the_keys_next_one(spark):
    """The history's window (transforms.scd2_validity, then scd2_images:
    tests/support/effect_chain.py's `scd2_versions`), by hand: key 1 inserted, updated and
    deleted; key 2 inserted once; key 3 moved to key 4 by an UPDATE (a deletion of 3, an upsert
    of 4); one change without commit ts is valid from its inferred ts. Validity in TSO and
    execute time (ms); `_current` only for a key's last version that keeps the row."""
    v = lambda i, x: [col("id", i), col("v", x)]  # noqa: E731
    events = frame(spark, [
        row(Op.INSERT, 0, 10, None, v(1, 1)),
        row(Op.INSERT, 1, 11, None, v(2, 1)),
        row(Op.UPDATE, 2, 11, v(1, 1), v(1, 2)),
        row(Op.DELETE, 3, 12, v(1, 2)),
        row(Op.INSERT, 4, None, None, v(3, 1)),
        row(Op.UPDATE, 5, 13, v(3, 1), v(4, 1)),
    ]).withColumn("execute_ts_ms", T.F.col("offset") * 1000 + 7)
    events = events.withColumn("inferred_ts", T.F.when(T.F.col("commit_ts").isNull(), T.F.lit(9)).cast("bigint"))
    events = T.with_timeline(events)
    versions = chain.scd2_versions(chain.row_effects(chain.assign_tables(events, None, None)))

    def value(image):
        return None if image is None else {c.name: c.value for c in image}["v"]

    got = sorted((tuple(r.row_key), r._op, r._valid_from_ts, r._valid_to_ts, r._valid_from_ms, r._valid_to_ms,
                  r._current, value(r.after), value(r.before), r.database, r.table)
                 for r in versions.collect())
    assert got == sorted([
        ((b"1",), "insert", 10, 11, 7, 2007, False, b"1", None, "d", "t"),
        ((b"1",), "update", 11, 12, 2007, 3007, False, b"2", None, "d", "t"),
        ((b"1",), "delete", 12, None, 3007, None, False, None, b"2", "d", "t"),
        ((b"2",), "insert", 11, None, 1007, None, True, b"1", None, "d", "t"),
        ((b"3",), "delete", 13, None, 5007, None, False, None, b"1", "d", "t"),
        ((b"3",), "insert", 9, 13, 4007, 5007, False, b"1", None, "d", "t"),
        ((b"4",), "update", 13, None, 5007, None, True, b"1", None, "d", "t"),
    ])


def test_copy_steps_give_the_count_from_any_start(spark):
    """A window over a keyless table: `copy_steps` folds a key's copy changes to (add, floor)
    without the count they start from, and max(count + add, floor) is the count MySQL's
    changes leave from every start (INSERT +1, DELETE of one copy floored at 0, a change that
    leaves the row at least once); from 0 it is `copies`, a full replay's count."""
    import itertools

    def mysql(count, changes):
        for c in changes:
            count = count + 1 if c == T.COPY_ADDED else max(count - 1, 0) if c == T.COPY_REMOVED else max(count, 1)
        return count

    kinds = (T.COPY_ADDED, T.COPY_REMOVED, T.COPY_KEPT)
    lists = [list(p) for n in range(1, 5) for p in itertools.product(kinds, repeat=n)]
    df = spark.createDataFrame([(i, cs) for i, cs in enumerate(lists)], "i int, cs array<int>")
    steps = T.copy_steps(T.F.transform("cs", lambda c: T.F.struct(c.alias("c"))))
    got = {r.i: (r.s.add, r.s.floor) for r in df.select("i", steps.alias("s")).collect()}
    for i, changes in enumerate(lists):
        add, floor = got[i]
        assert [max(c + add, floor) for c in range(4)] == [mysql(c, changes) for c in range(4)], changes
    assert df.select(T.copy_steps(T.F.array().cast("array<struct<c:int>>")).alias("s")).first().s is None
