"""The reference replayer (tests/reference.py) on small hand-made histories: the semantics it
models (docs/semantics.md) spelled out case by case. Pure Python, no Spark."""

from __future__ import annotations

from cdc_codecs.events import Kind, Op, new_event

from .reference import event_points, reference_history, reference_rows, reference_state

DB = "d"


def row(op, table, before=None, after=None, *, ts=None, es=None, keys=("id",)):
    def image(values):
        return [{"name": n, "mysql_type": "int", "flags": 0, "value": None if v is None else str(v).encode(),
                 "label": None} for n, v in values.items()] if values is not None else None

    return new_event(Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=es, database=DB, table=table,
                     key_columns=list(keys), before=image(before), after=image(after))


def ddl(query, table, *, ts=None, es=None):
    return new_event(Kind.DDL, commit_ts=ts, execute_ts_ms=es, database=DB, table=table, ddl_query=query,
                     ddl_type=None)


def b(**values):
    return {k: str(v).encode() if v is not None else None for k, v in values.items()}


def test_keyless_table_is_a_multiset():
    events = [ddl("CREATE TABLE `d`.`n` (`a` INT, `b` INT)", "n", ts=1)]
    for ts, op, before, after in [(2, Op.INSERT, None, {"a": 1, "b": 1}), (3, Op.INSERT, None, {"a": 1, "b": 1}),
                                  (4, Op.INSERT, None, {"a": 1, "b": 1}), (5, Op.DELETE, {"a": 1, "b": 1}, None),
                                  (6, Op.UPDATE, {"a": 1, "b": 1}, {"a": 2, "b": 2}),
                                  (7, Op.DELETE, {"a": 9, "b": 9}, None),  # never seen: removes nothing
                                  (8, Op.UPDATE, {"a": 7, "b": 7}, {"a": 3, "b": 3})]:  # adds the new image
        events.append(row(op, "n", before, after, ts=ts, keys=()))
    rows = reference_rows(events)[(DB, "n")]
    assert sorted(dict(r)["a"] for r in rows) == [b"1", b"2", b"3"]
    assert reference_rows(events, as_of=4)[(DB, "n")] == [tuple(sorted(b(a=1, b=1).items()))] * 3


def test_table_without_ddl_takes_its_first_row_events_columns_and_later_ddl():
    events = [
        row(Op.INSERT, "t", None, {"id": 1, "v": 1}, ts=1),
        row(Op.UPDATE, "t", {"id": 5, "v": 0}, {"id": 5, "v": 5}, ts=2),  # first seen as an UPDATE
        ddl("ALTER TABLE `d`.`t` ADD COLUMN `w` INT DEFAULT 7", "t", ts=3),
        row(Op.INSERT, "t", None, {"id": 2, "v": 2, "w": 8}, ts=4),
        ddl("ALTER TABLE `d`.`t` DROP COLUMN `v`", "t", ts=5),
    ]
    assert reference_state(events) == {(DB, "t"): {
        (b"1",): b(id=1, w=7), (b"5",): b(id=5, w=7), (b"2",): b(id=2, w=8)}}


def test_rows_of_a_table_that_does_not_exist_at_their_point_are_not_state():
    events = [
        row(Op.INSERT, "later", None, {"id": 1}, ts=1),  # before its CREATE
        ddl("CREATE TABLE `d`.`later` (`id` INT, PRIMARY KEY (`id`))", "later", ts=2),
        row(Op.INSERT, "later", None, {"id": 2}, ts=3),
        row(Op.INSERT, "old", None, {"id": 1}, ts=4),  # a table from before the archive
        ddl("RENAME TABLE `d`.`old` TO `d`.`new`", "old", ts=5),
        row(Op.INSERT, "old", None, {"id": 2}, ts=6),  # under its old name
        row(Op.INSERT, "gone", None, {"id": 1}, ts=7),
        ddl("DROP TABLE `d`.`gone`", "gone", ts=8),
        row(Op.INSERT, "gone", None, {"id": 2}, ts=9),
    ]
    assert reference_state(events) == {(DB, "later"): {(b"2",): b(id=2)}, (DB, "new"): {(b"1",): b(id=1)}}


def test_event_time_points():
    """t is the highest es of the partition so far: es going back never reorders a partition;
    across partitions t orders, then the partition, then the offset."""
    e = [row(Op.INSERT, "t", None, {"id": i}, es=es) for i, es in enumerate([5000, 3000, 4000, 4000])]
    points = event_points([(0, 10, 0, e[0]), (0, 11, 0, e[1]), (1, 7, 0, e[2]), (1, 3, 0, e[3]),
                           (0, 12, 0, e[1])])  # a redelivery counts at its first placement
    assert [points[id(x)][0] for x in e] == [(5000, 0, 10, 0), (5000, 0, 11, 0), (4000, 1, 7, 0), (4000, 1, 3, 0)]


def test_ddl_applies_to_rows_after_its_point():
    """Canal es in whole seconds: an ADD COLUMN and rows in the same second. On partition 0
    the offset decides; on another partition a row at the DDL's t is after it."""
    add = ddl("ALTER TABLE `d`.`t` ADD COLUMN `w` INT DEFAULT 7", "t", es=2_400)
    create = ddl("CREATE TABLE `d`.`t` (`id` INT, `v` INT, PRIMARY KEY (`id`))", "t", es=1_000)
    before_create = row(Op.INSERT, "t", None, {"id": 0, "v": 0}, es=1_900)  # p0, before the CREATE's offset
    same_second_p1 = row(Op.INSERT, "t", None, {"id": 1, "v": 1, "w": 1}, es=1_100)  # p1, t = 1 s
    before_add_p0 = row(Op.INSERT, "t", None, {"id": 2, "v": 2}, es=2_000)
    after_add_p0 = row(Op.INSERT, "t", None, {"id": 3, "v": 3, "w": 3}, es=2_999)
    after_add_p1 = row(Op.INSERT, "t", None, {"id": 4, "v": 4, "w": 4}, es=2_500)
    placements = [(0, 0, 0, before_create), (0, 1, 0, create), (0, 2, 0, before_add_p0), (0, 3, 0, add),
                  (0, 4, 0, after_add_p0), (1, 0, 0, same_second_p1), (1, 1, 0, after_add_p1)]
    state = reference_state(None, placements=placements, es_unit_ms=1000)
    assert state == {(DB, "t"): {
        (b"1",): b(id=1, v=1, w=7),  # at the CREATE's second on p1: after it, but before the ADD (t = 1 s)
        (b"2",): b(id=2, v=2, w=7),  # before the ADD on p0: the default
        (b"3",): b(id=3, v=3, w=3),
        (b"4",): b(id=4, v=4, w=4),  # p1 at the ADD's second: after it
    }}


def test_history_of_a_row_from_before_a_column_was_dropped_and_added_again_has_the_default():
    """MySQL drops a column's values with it: added again, old rows hold its default, so their
    history versions do too (and a keyless table names such rows by the default)."""
    events = [ddl("CREATE TABLE `d`.`k` (`a` INT, `note` VARCHAR(8) DEFAULT 'x')", "k", ts=1),
              row(Op.INSERT, "k", None, {"a": 1, "note": "y"}, ts=2, keys=()),
              ddl("ALTER TABLE `d`.`k` DROP COLUMN `note`", "k", ts=3),
              ddl("ALTER TABLE `d`.`k` ADD COLUMN `note` VARCHAR(8) DEFAULT 'x'", "k", ts=4),
              row(Op.INSERT, "k", None, {"a": 1, "note": "x"}, ts=5, keys=())]
    first, second = reference_history(events)[(DB, "k")]
    assert first == ("insert", 2, 5, False, tuple(sorted(b(a=1, note="x").items())))
    assert second == ("insert", 5, None, True, tuple(sorted(b(a=1, note="x").items())))
    assert reference_rows(events)[(DB, "k")] == [tuple(sorted(b(a=1, note="x").items()))] * 2
