"""Engine v2's core (spark_apps/engine_v2.py) against v1's transform chain on the same ready
events: the same effects of the applied row events (each event's final table, keys and
changes) and the same last change per key (every column the output reads); and no event
crossing a shuffle whole in v2's plan.

v1 here is what the replay stages (stages/dedupe.py, stages/history.py) run, and what v1's
output stage ran before v1 was removed (twenty-fifth session), step by step, each tested on
its own (tests/test_transforms.py): duplicate_places, tag_status, _summarise, the DDL history
from the summary's applied DDL (with the stream's column sets), _quarantine_missing_tables,
then packed / assign_tables / row_effects (tests/support/effect_chain.py) / latest_per_key /
unpacked over the applied row events. v2 is given that history, as in a run
(stages/engine.py). The statuses and counts are the summary's (the product has no other:
`tag_effects` keeps the applied row events that have effects only). The events are lean rows
(schema ids, values, labels, place ids), as the decode tasks give them."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from cdc_codecs.events import Kind, Op, new_event
from spark_apps import engine_v2 as V2
from spark_apps import transforms as T
from spark_apps.contract import Status
from spark_apps.ddl import SchemaHistory
from spark_apps.outputs import table_frames as _table_frames
from spark_apps.stages.history import _apply_ddl, _quarantine_missing_tables, _stream_shapes
from spark_apps.stages.summary import summarise as _summarise

from .support.effect_chain import assign_tables, row_effects, shuffle_exchanges
from .support.lean_rows import lean_images
from .test_transforms import frame

pytestmark = pytest.mark.spark

LATEST = ("final_database", "final_table", "row_key", "effect", "op", "timeline", "partition", "offset",
          "event_index", "before_schema", "before_values", "after_schema", "after_values", "first_change", "copies",
          "status")
EFFECTS = ("final_database", "final_table", "row_key", "effect", "copy_change", "rank", "op", "timeline", "partition",
           "offset", "event_index", "commit_ts")


def c(name, value):
    return {"name": name, "mysql_type": "int", "flags": 0, "value": None if value is None else str(value).encode(),
            "label": None}


def img(**values):
    return [c(k, v) for k, v in values.items()]


def ev(op, ts, before=None, after=None, *, table="t", keys=("id",), partition=0, offset=0, obj="o1", line=None):
    return {**new_event(Kind.ROW, op=op, commit_ts=ts, database="d", table=table, key_columns=list(keys),
                        before=before, after=after, partition=partition, offset=offset, topic="t"),
            "object": obj, "line": offset + 1 if line is None else line}


def ddl(ts, query, table, offset, obj="o1", partition=0):
    return {**new_event(Kind.DDL, commit_ts=ts, ddl_query=query, database="d", table=table, topic="t",
                        partition=partition, offset=offset), "object": obj, "line": offset + 1}


def copy(event, **at):
    """The same event read again (another object, line, partition or offset)."""
    return {**event, **at}


def lean_ready(spark, events):
    """The events as the replay's `ready` frame: lean images and a place id per event, and the
    schema dictionary ({id: (names, types, flags)}) the decode tasks collect."""
    with_ids = T.with_schema_ids(frame(spark, events))
    dictionary = T.schema_dictionary(T.schema_entries(with_ids).collect())
    ready = lean_images(with_ids).withColumn("place_id", F.monotonically_increasing_id()).localCheckpoint()
    return ready, dictionary


def run_v1(spark, ready, dictionary, tables, cut, since=None):
    """v1's passes, as the replay stages (stages/dedupe.py, stages/history.py) and outputs.OutputPlan.snapshot chain them."""
    duplicates = T.duplicate_places(ready, tables=tables)
    tagged = T.tag_status(ready, tables=tables, cut=cut, since=since,
                          duplicates=T.Duplicates(duplicates, found=duplicates.count() > 0))
    summary = _summarise(tagged, shapes=True, dictionary=dictionary)
    history = SchemaHistory("")
    history.use_stream_schemas(_stream_shapes(summary["shapes"], dictionary))
    _apply_ddl(history, summary["ddl"], "canal-json")
    tagged, counts = _quarantine_missing_tables(spark, tagged, summary["counts"], history, None,
                                                summary["row_ranges"])
    multiset = bool(summary["keyless"]) or any(i.key_aliases == () for i in history.intervals())
    plan = T.plan_dictionary(dictionary, T.spark_lower(spark), spark=spark)
    intervals, known = _table_frames(spark, history)
    rows = tagged.where((F.col("status") == Status.APPLIED) & (F.col("kind") == Kind.ROW))
    effects = row_effects(assign_tables(T.packed(rows), intervals, known), plan)
    latest = T.unpacked(T.latest_per_key(effects, multiset=multiset))
    statuses = sorted(tuple(r) for r in tagged.groupBy("status", "kind").count().collect())
    return {"effects": effects, "latest": latest, "counts": counts, "statuses": statuses, "ddl": summary["ddl"],
            "multiset": multiset, "history": history}


def run_v2(spark, ready, dictionary, tables, cut, since=None, multiset=True, history=None):
    """v2 over the DDL history the summary built (`history`, run_v1's), as in a run."""
    intervals, known = _table_frames(spark, history)
    plan = T.plan_dictionary(dictionary, T.spark_lower(spark), spark=spark)
    stretches, names = V2.existence_frames(spark, history)
    duplicates = V2.find_duplicates(ready, tables)
    tagged = V2.tag_effects(ready, tables=tables, cut=cut, since=since, intervals=intervals, known=known,
                            stretches=stretches, stretch_names=names, dictionary=plan, duplicates=duplicates)
    return {"tagged": tagged, "latest": V2.latest(tagged, multiset=multiset), "duplicates": duplicates}


def rows_of(latest, columns=LATEST):
    return sorted((tuple(_plain(r[c]) for c in columns) for r in latest.collect()), key=repr)


def _plain(value):
    return tuple(_plain(v) for v in value) if isinstance(value, list) else value


def same(spark, events, tables=None, cut=None, since=None):
    """Run both; require the same effects (one row each, v2's from its map stage) and the same
    last changes."""
    ready, dictionary = lean_ready(spark, events)
    one = run_v1(spark, ready, dictionary, tables, cut, since)
    two = run_v2(spark, ready, dictionary, tables, cut, since, multiset=one["multiset"], history=one["history"])
    assert rows_of(two["tagged"], EFFECTS) == rows_of(one["effects"], EFFECTS)
    assert rows_of(two["latest"]) == rows_of(one["latest"])
    return one, two


def test_duplicates_key_changes_reinserts_keyless_rows_and_the_cut(spark):
    """No DDL: copies in other partitions, objects and lines; an UPDATE that moves a row to
    another key (its two effects in two partitions of the shuffle); DELETE then
    INSERT of a key; a keyless table holding identical rows; events above the cut; a table out
    of scope; a watermark and a record that could not be read, each twice."""
    insert1 = ev(Op.INSERT, 10, None, img(id=1, v=1), offset=0)
    move = ev(Op.UPDATE, 11, img(id=1, v=1), img(id=2, v=1), offset=1)
    insert3 = ev(Op.INSERT, 12, None, img(id=3, v=3), offset=2)
    delete3 = ev(Op.DELETE, 13, img(id=3, v=3), offset=3)
    reinsert3 = ev(Op.INSERT, 14, None, img(id=3, v=4), offset=4)
    late = ev(Op.UPDATE, 30, img(id=2, v=1), img(id=2, v=9), offset=5)  # beyond the cut
    k1 = ev(Op.INSERT, 10, None, img(a=1), table="k", keys=(), partition=1, offset=0)
    k2 = ev(Op.INSERT, 11, None, img(a=1), table="k", keys=(), partition=1, offset=1)
    k3 = ev(Op.DELETE, 12, img(a=1), table="k", keys=(), partition=1, offset=2)
    k4 = ev(Op.INSERT, 13, None, img(a=2), table="k", keys=(), partition=1, offset=3)
    other = ev(Op.INSERT, 10, None, img(id=5), table="skipped", offset=6)
    mark = {**new_event(Kind.WATERMARK, watermark_ts=20, topic="t", partition=0, offset=7), "object": "o1", "line": 8}
    bad = {"kind": "quarantine", "error": "not json", "error_stage": "decode", "raw_value": b"?", "topic": "t",
           "partition": 0, "offset": 8, "object": "o1", "line": 9}
    events = [insert1, copy(insert1, object="o2"), move, copy(move, partition=2, offset=40, object="o3"),
              insert3, delete3, reinsert3, copy(reinsert3, line=99), late,
              k1, k2, copy(k2, object="o2"), k3, k4, other, mark, copy(mark, object="o2"), bad, copy(bad, object="o2")]
    for tables in (None, ["d.t", "d.k"]):
        one, two = same(spark, events, tables=tables, cut=[20])
    assert rows_of(one["latest"])  # not vacuous
    assert {s for s, _, _ in one["statuses"]} >= {Status.APPLIED, Status.DUPLICATE, Status.PENDING,
                                                  Status.FILTERED, Status.QUARANTINED}
    # without a cut and with a window start (--since)
    same(spark, events, cut=None, since=11)


def test_the_history_at_the_cut_renames_key_changes_and_keyless_add_column(spark):
    """With DDL: a renamed table (rows under both names land on one key), a primary key
    changed to another column (rows keyed by the key at the cut), a keyless table gaining a
    column with a default (older images name the same row), a dropped table (its later rows
    quarantined as missing), a DDL above the cut (not applied) and a DDL copy."""
    create = ddl(1, "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)", "t", 0)
    events = [
        create, copy(create, object="o2"),
        ev(Op.INSERT, 10, None, img(id=1, v=1), offset=1),
        ev(Op.INSERT, 11, None, img(id=2, v=2), offset=2),
        ddl(12, "RENAME TABLE d.t TO d.u", "t", 3),
        ev(Op.UPDATE, 13, img(id=1, v=1), img(id=1, v=5), table="u", offset=4),
        ev(Op.UPDATE, 14, img(id=2, v=2), img(id=7, v=2), table="u", offset=5),
        ddl(2, "CREATE TABLE d.p (id INT PRIMARY KEY, w INT)", "p", 6),
        ev(Op.INSERT, 10, None, img(id=1, w=100), table="p", offset=7),
        ev(Op.INSERT, 11, None, img(id=2, w=200), table="p", offset=8),
        ddl(15, "ALTER TABLE d.p DROP PRIMARY KEY, ADD PRIMARY KEY (w)", "p", 9),
        ev(Op.UPDATE, 16, img(id=1, w=100), img(id=3, w=100), table="p", keys=("w",), offset=10),
        ddl(3, "CREATE TABLE d.k (a INT)", "k", 11),
        ev(Op.INSERT, 10, None, img(a=1), table="k", keys=(), offset=12),
        ev(Op.INSERT, 11, None, img(a=1), table="k", keys=(), offset=13),
        ddl(17, "ALTER TABLE d.k ADD COLUMN b INT DEFAULT 5", "k", 14),
        ev(Op.DELETE, 18, img(a=1, b=5), table="k", keys=(), offset=15),
        ev(Op.INSERT, 19, None, img(a=1, b=6), table="k", keys=(), offset=16),
        ddl(4, "CREATE TABLE d.g (id INT PRIMARY KEY)", "g", 17),
        ev(Op.INSERT, 10, None, img(id=1), table="g", offset=18),  # applied, in no table at the cut
        ddl(19, "DROP TABLE d.g", "g", 19),
        ev(Op.INSERT, 20, None, img(id=2), table="g", offset=20),  # no table d.g at 20: quarantined
        ddl(40, "ALTER TABLE d.u ADD COLUMN z INT", "u", 21),  # above the cut
        ev(Op.INSERT, 41, None, img(id=9, v=9, z=1), table="u", offset=22),
    ]
    one, two = same(spark, events, cut=[30])
    assert any(r[1] == "u" and r[2] == (b"7",) for r in rows_of(two["latest"]))  # renamed, key changed
    assert any(c["error_stage"] == T.MISSING_TABLE_STAGE for c in one["counts"])
    assert not any(r.final_table == "g" and r.offset == 20 for r in two["tagged"].collect())  # its quarantined row


def test_no_event_crosses_a_shuffle_whole(spark):
    """v2 tags every event in the map stage: the only shuffle below its tagged rows is v1's
    duplicate check (identities and places, persisted), and its last change per key adds one,
    after a partial aggregate in each task (at most one row per key and task crosses it). Lean
    rows with a DDL history (broadcast joins are not shuffles)."""
    events = [ddl(1, "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)", "t", 0),
              ev(Op.INSERT, 10, None, img(id=1, v=1), offset=1),
              ev(Op.UPDATE, 11, img(id=1, v=1), img(id=2, v=1), offset=2),
              ev(Op.UPDATE, 12, img(id=2, v=1), img(id=2, v=3), offset=3)]
    events.append(copy(events[1], object="o2"))
    ready, dictionary = lean_ready(spark, events)
    two = run_v2(spark, ready, dictionary, None, [20], history=run_v1(spark, ready, dictionary, None, [20])["history"])
    assert rows_of(two["latest"]) and two["duplicates"].found
    # the marks' plan (a computed, cached plan prints its final and initial stages: counted alike)
    marks = shuffle_exchanges(two["duplicates"].places)
    assert marks >= 1
    assert shuffle_exchanges(two["tagged"]) == marks, two["tagged"]._jdf.queryExecution().executedPlan().toString()
    latest = V2.latest(two["tagged"])
    assert shuffle_exchanges(latest) == marks + 1, latest._jdf.queryExecution().executedPlan().toString()
    plan = latest._jdf.queryExecution().executedPlan().toString()
    assert "partial_max_by" in plan, plan


def test_copies_naming_other_key_columns_give_v1s_result(spark):
    """The identity does not hold the key columns: two copies of an event naming different
    key columns are still one event (the duplicate check is by identity, v1's), so the later
    copy is a duplicate and the last changes are v1's."""
    first = ev(Op.INSERT, 10, None, img(id=1, v=2), offset=0)
    one, two = same(spark, [first, copy(first, key_columns=["v"], object="o2")])
    assert (Status.DUPLICATE, Kind.ROW, 1) in one["statuses"] and len(rows_of(two["tagged"], EFFECTS)) == 1


def test_random_changes_with_copies_and_cuts_give_v1s_result(spark):
    """Hypothesis: random INSERT/UPDATE (key-changing or not)/DELETE sequences over a few keys
    of a keyed and a keyless table, random copies of random events (other partition, object
    or line), a random cut: both engines give the same result. Few examples: each is two
    engines' Spark jobs."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    step = st.tuples(st.sampled_from(["k", "t"]), st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]),
                     st.integers(1, 3), st.integers(1, 3), st.integers(0, 2))

    @settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(step, min_size=1, max_size=10), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2)),
                                                               max_size=4), st.integers(10, 22))
    def check(steps, copies, cut):
        events = []
        for i, (table, op, a, b, value) in enumerate(steps):
            keys = ("id",) if table == "t" else ()
            before = img(id=a, v=value) if op != Op.INSERT else None
            after = img(id=b if op == Op.UPDATE else a, v=value + 1) if op != Op.DELETE else None
            events.append(ev(op, 10 + i, before, after, table=table, keys=keys, partition=i % 2, offset=i))
        for index, how in copies:
            if index < len(events):
                where = [{"object": "o2"}, {"partition": 3, "offset": 100 + index}, {"line": 1000 + index}][how]
                events.append(copy(events[index], **where))
        same(spark, events, cut=[cut])

    check()


def test_only_the_names_whose_rows_leave_their_table_are_checked_for_existence():
    """`existence_frames(row_ranges=...)` keeps the stretches of a name only when its applied
    rows (v1's summary's lowest and highest point) reach outside every one stretch of it; with
    none left there is no frame and no join (no Spark needed). v1's own test of the whole run
    (`_rows_may_lack_tables`) agrees. Pure Python, milliseconds."""
    from spark_apps.stages.history import _rows_may_lack_tables

    stretches = [("shop", "a", (10,), (20,)), ("shop", "a", (30,), None), ("shop", "b", (0,), None)]

    class History:  # what existence_frames reads of a ddl.SchemaHistory
        def existence(self):
            return stretches

    inside = {("shop", "a"): ([12], [18]), ("shop", "b"): ([5], [100]), ("shop", "c"): ([1], [2])}
    assert V2.existence_frames(None, History(), inside) == (None, None)
    assert not _rows_may_lack_tables(stretches, inside)
    between = {**inside, ("shop", "a"): ([12], [35])}  # rows between the DROP at 20 and the CREATE at 30
    assert [s[:2] for s in stretches if V2.may_lack_table(s[0], s[1], stretches, between)] == [("shop", "a")] * 2
    assert not V2.may_lack_table("shop", "b", stretches, between)
    assert not V2.may_lack_table("shop", "a", stretches, {("shop", "b"): ([5], [6])})  # no applied rows of a
    assert _rows_may_lack_tables(stretches, between)


def test_engine_v1_is_refused_and_v2_accepted(monkeypatch, tmp_path):
    """v1 was removed (twenty-fifth session): `--engine v1` or $CDC_REPLAY_ENGINE=v1 fails the
    run's checks before Spark starts, saying so; `--engine v2` (kept for the scripts that pass
    it) and no engine pass them. No Spark, milliseconds."""
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.stages.context import ReplayError
    from spark_apps.stages.validate import validate

    def checked(*extra):
        (tmp_path / "archive").mkdir(exist_ok=True)
        return validate(ReplayArgs.from_namespace(parser().parse_args(
            ["--source", str(tmp_path / "archive"), "--output", str(tmp_path / "out"), "--protocol", "canal-json",
             "--emit", "snapshot", *extra])))

    monkeypatch.delenv("CDC_REPLAY_ENGINE", raising=False)
    with pytest.raises(ReplayError, match=r"--engine v1: engine v1 was removed \(twenty-fifth session\); v2 is"):
        checked("--engine", "v1")
    checked("--engine", "v2")
    checked()
    monkeypatch.setenv("CDC_REPLAY_ENGINE", "v1")
    with pytest.raises(ReplayError, match=r"\$CDC_REPLAY_ENGINE=v1: engine v1 was removed"):
        checked()
    checked("--engine", "v2")  # the option first


@pytest.mark.parametrize("literal_max", [T.DUPLICATES_LITERAL_MAX, 1])
def test_a_small_runs_collected_duplicates_give_the_cached_ones_statuses(spark, monkeypatch, literal_max):
    """Below DUPLICATES_COLLECT_MAX_RECORDS records read the later copies' place ids are
    collected (engine_v2.collected_duplicates): a literal id set in the plan (no join), or
    beyond DUPLICATES_LITERAL_MAX a local relation joined by broadcast; none found, no join.
    Every event's status is the one the cached places give."""
    monkeypatch.setattr(T, "DUPLICATES_LITERAL_MAX", literal_max)
    first = [ev(Op.INSERT, 10 + i, None, img(id=i, v=i), offset=i) for i in range(6)]
    copies = [copy(first[0], object="o2"), copy(first[3], partition=1, offset=40), copy(first[3], line=99)]

    def statuses(ready, duplicates):
        tagged = T.tag_status(ready, cut=[13], duplicates=duplicates)
        return sorted(tuple(r) for r in tagged.select("partition", "offset", "object", "line", "status").collect())

    for events, found in ((first + copies, True), (first, False)):
        ready, _ = lean_ready(spark, events)
        cached = V2.find_duplicates(ready)
        collected = V2.find_duplicates(ready, records=len(events))
        assert cached.places is not None and cached.found == found == collected.found
        assert (collected.ids is not None) == (found and literal_max > 1)
        assert (collected.places is not None) == (found and literal_max == 1)
        assert statuses(ready, collected) == statuses(ready, cached)
        cached.places.unpersist()
    assert {s for *_, s in statuses(ready, collected)} == {Status.APPLIED, Status.PENDING}
    big = V2.find_duplicates(ready, records=T.DUPLICATES_COLLECT_MAX_RECORDS + 1)  # cached, as before
    assert big.places is not None and big.places.is_cached
    big.places.unpersist()


def test_an_id_set_literal_finds_its_ids_whatever_their_sign(spark):
    """transforms.in_id_set's buckets (Python's % on the driver, Spark's pmod in the task) agree
    for negative and 64-bit ids."""
    values = [-(2**63), -7, -1, 0, 1, 5, 12, 2**40 + 3, 2**63 - 1]
    ids = [-(2**63), -7, 0, 12, 2**63 - 1]
    df = spark.createDataFrame([(v,) for v in values], "v bigint")
    found = {r["v"]: r["hit"] for r in df.select("v", T.in_id_set(F.col("v"), ids).alias("hit")).collect()}
    assert found == {v: v in ids for v in values}
