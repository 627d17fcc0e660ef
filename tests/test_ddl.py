"""DDL history with sqlglot's MySQL parser: schemas through time and table intervals."""

import pytest

from spark_apps.ddl import DDLError, SchemaHistory, TableInterval, schema_conflicts
from spark_apps.snapshot import project_image


def col(name, value, mysql_type="int"):
    return {"name": name, "mysql_type": mysql_type, "flags": 0, "value": value, "label": None}


def names(history, table="t", db="d"):
    return [c.name for c in history.tables[(db, table)].columns]


def test_create_table_reads_types_keys_and_defaults():
    h = SchemaHistory()
    h.apply("CREATE TABLE `d`.`t` (`id` BIGINT UNSIGNED NOT NULL, v VARCHAR(10) DEFAULT 'x', "
            "e ENUM('a','b') NOT NULL DEFAULT 'b', n DECIMAL(10,2) NOT NULL, PRIMARY KEY (`id`))", [10])
    t = h.tables[("d", "t")]
    assert [c.name for c in t.columns] == ["id", "v", "e", "n"]
    assert t.key_columns == ["id"]
    by = {c.name: c for c in t.columns}
    assert by["id"].mysql_type == "bigint unsigned"
    assert (by["v"].default, by["e"].default, by["e"].default_label, by["n"].default) == (b"x", b"2", "b", b"0.00")


def test_unqualified_names_use_the_event_database():
    h = SchemaHistory()
    h.apply("CREATE TABLE t (id INT PRIMARY KEY)", [1], "shop")
    assert ("shop", "t") in h.tables and h.tables[("shop", "t")].key_columns == ["id"]
    with pytest.raises(DDLError, match="no database"):
        h.apply("CREATE TABLE u (id INT)", [2], None)


def test_add_drop_and_rename_columns_with_positions():
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT PRIMARY KEY, a INT)", [1])
    h.apply("ALTER TABLE d.t ADD COLUMN b INT DEFAULT 7 FIRST", [2])
    h.apply("ALTER TABLE d.t ADD COLUMN c INT AFTER id, DROP COLUMN a", [3])
    h.apply("ALTER TABLE d.t RENAME COLUMN c TO c2", [4])
    h.apply("ALTER TABLE d.t CHANGE c2 c3 BIGINT", [5])
    assert names(h) == ["b", "id", "c3"]
    c3 = h.tables[("d", "t")].column("c3")
    assert c3.mysql_type == "bigint"
    assert [c3.name_at(p) for p in ([3, 1], [4, 1], [5, 1])] == ["c", "c2", "c3"]


def test_modify_and_change_column_move_the_column_as_mysql_does():
    """MODIFY / CHANGE COLUMN with FIRST or AFTER moves the column (MySQL's ALTER TABLE docs:
    "FIRST and AFTER ... also work with CHANGE and MODIFY"): after CREATE (id, a), ADD z FIRST,
    MODIFY a FIRST and ADD y AFTER id, MySQL's table is (a, z, id, y)."""
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT PRIMARY KEY, a INT)", [1])
    h.apply("ALTER TABLE d.t ADD COLUMN z INT FIRST", [2])
    h.apply("ALTER TABLE d.t MODIFY a INT FIRST", [3])
    h.apply("ALTER TABLE d.t ADD COLUMN y INT AFTER id", [4])
    assert names(h) == ["a", "z", "id", "y"]
    h.apply("ALTER TABLE d.t CHANGE COLUMN a b BIGINT AFTER y", [5])
    assert names(h) == ["z", "id", "y", "b"] and h.tables[("d", "t")].column("b").mysql_type == "bigint"
    h.apply("ALTER TABLE d.t MODIFY COLUMN z INT AFTER id, MODIFY y INT FIRST", [6])
    assert names(h) == ["y", "id", "z", "b"]
    h.apply("ALTER TABLE d.t MODIFY id BIGINT", [7])  # no position: stays
    assert names(h) == ["y", "id", "z", "b"]
    # the rows of each time are read with the order of their time
    assert [name for name, _ in h.columns_at("d", "t", [3, 1])] == ["a", "z", "id"]


def test_rows_are_read_with_the_schema_of_their_time():
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT PRIMARY KEY, a INT)", [1])
    h.apply("ALTER TABLE d.t ADD COLUMN b INT DEFAULT 7", [5])
    h.apply("ALTER TABLE d.t RENAME COLUMN a TO a2", [6])
    h.apply("ALTER TABLE d.t DROP COLUMN b", [8])
    h.apply("ALTER TABLE d.t ADD COLUMN b INT DEFAULT 9", [9])
    schema = h.tables[("d", "t")]
    # written at 3: no b yet (default), a under its old name
    assert project_image([col("id", b"1"), col("a", b"10")], [3], schema) == [
        col("id", b"1"), col("a2", b"10"), {**col("b", b"9"), "flags": 64}]
    # written at 7: b existed but was dropped and re-added later: the new default wins
    assert [c["value"] for c in project_image([col("id", b"1"), col("a2", b"10"), col("b", b"4")], [7], schema)] == [
        b"1", b"10", b"9"]
    # written at 10: its own values
    assert [c["value"] for c in project_image([col("id", b"1"), col("a2", b"1"), col("b", b"3")], [10], schema)] == [
        b"1", b"1", b"3"]


def test_truncate_drop_and_rename_shape_the_intervals():
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT PRIMARY KEY)", [1])
    h.apply("CREATE TABLE d.gone (id INT PRIMARY KEY)", [2])
    h.apply("TRUNCATE TABLE d.t", [5])
    h.apply("RENAME TABLE d.t TO d.t2", [7])
    h.apply("DROP TABLE d.gone", [8])
    assert h.intervals() == [
        TableInterval("d", "t", (5,), (7,), "d", "t2", (("id",),)),
        TableInterval("d", "t2", (7,), None, "d", "t2", (("id",),)),
    ]
    assert h.is_known("d", "gone") and h.is_known("D", "T")


def test_multi_rename_and_alter_rename_and_create_like():
    h = SchemaHistory()
    h.apply("CREATE TABLE d.a (id INT PRIMARY KEY, x VARCHAR(3))", [1])
    h.apply("CREATE TABLE d.b LIKE d.a", [2])
    h.apply("RENAME TABLE d.a TO d.tmp, d.b TO d.a, d.tmp TO d.b", [3])
    h.apply("ALTER TABLE d.b RENAME TO d.c", [4])
    assert sorted(h.tables) == [("d", "a"), ("d", "c")]
    assert names(h, "a") == ["id", "x"]


def test_drop_database_drops_its_tables_and_primary_keys_change():
    h = SchemaHistory()
    h.apply("CREATE DATABASE d", [1])
    h.apply("CREATE TABLE d.t (id INT, k INT)", [2])
    h.apply("ALTER TABLE d.t ADD PRIMARY KEY (k)", [3])
    assert h.tables[("d", "t")].key_columns == ["k"]
    h.apply("ALTER TABLE d.t DROP PRIMARY KEY", [4])
    assert h.tables[("d", "t")].key_columns == []
    h.apply("DROP DATABASE d", [5])
    assert h.tables == {}


@pytest.mark.parametrize("query, reason", [
    ("ALTER TABLE d.nope ADD COLUMN a INT", "no known schema"),
    ("CREATE TABLE d.t (", "cannot parse"),
    ("ALTER TABLE d.t DROP COLUMN zz", "no such column"),
])
def test_ddl_that_cannot_be_applied_says_why(query, reason):
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT PRIMARY KEY)", [1])
    with pytest.raises(DDLError, match=reason):
        h.apply(query, [2])


def test_in_band_columns_are_cross_checked_against_the_ddl_history():
    from spark_apps.ddl import schema_conflicts

    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT PRIMARY KEY, a VARCHAR(10))", [1])
    h.apply("ALTER TABLE d.t ADD COLUMN b INT UNSIGNED", [10])
    agree = {"database": "d", "table": "t", "columns": [("id", "int"), ("a", "varchar")], "first": [2], "last": [9], "events": 3}
    late = {"database": "d", "table": "t", "columns": [("id", "int"), ("a", "varchar")], "first": [11], "last": [12], "events": 2}
    typed = {"database": "d", "table": "t", "columns": [("id", "int"), ("a", "varchar"), ("b", "int")],
             "first": [11], "last": [11], "events": 1}
    unknown = {"database": "d", "table": "other", "columns": [("x", "int")], "first": [2], "last": [2], "events": 1}
    assert schema_conflicts(h, [agree, unknown]) == []
    [missing] = schema_conflicts(h, [late])
    assert "d.t: 2 row events" in missing and "missing b" in missing
    [retyped] = schema_conflicts(h, [typed])
    assert "types differ for b (int vs int unsigned)" in retyped


def test_a_not_null_unique_key_identifies_rows_when_there_is_no_primary_key():
    """TiDB's handle (InnoDB's clustered index): the primary key, else the first UNIQUE index
    whose columns are all NOT NULL; a nullable unique key does not identify a row."""
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (a INT, b INT NOT NULL, c VARCHAR(8) NOT NULL, UNIQUE KEY ua (a), "
            "UNIQUE KEY ubc (b, c))", [1])
    t = h.tables[("d", "t")]
    assert t.identity_columns() == ["b", "c"]
    assert [i.key_aliases for i in h.intervals()] == [(("b",), ("c",))]
    assert {c.name for c in t.columns if c.flags & 2} == {"b", "c"}  # handle-key flag
    assert "UNIQUE KEY `ubc` (`b`, `c`)" in t.create_statement()
    h.apply("ALTER TABLE d.t CHANGE b bb INT NOT NULL", [2])
    assert h.intervals()[0].key_aliases == (("b", "bb"), ("c",))
    h.apply("ALTER TABLE d.t DROP INDEX ubc", [3])
    assert t.identity_columns() == [] and h.intervals()[0].row_columns is not None
    h.apply("CREATE UNIQUE INDEX uc ON d.t (c)", [4])
    assert t.identity_columns() == ["c"]
    h.apply("DROP INDEX uc ON d.t", [5])
    h.apply("ALTER TABLE d.t ADD CONSTRAINT u2 UNIQUE (c)", [6])
    assert t.identity_columns() == ["c"]
    h.apply("ALTER TABLE d.t ADD PRIMARY KEY (bb)", [7])
    assert t.identity_columns() == ["bb"]


def test_column_level_unique_and_a_table_with_no_key_at_all():
    h = SchemaHistory()
    h.apply("CREATE TABLE d.t (id INT NOT NULL UNIQUE, v INT)", [1])
    assert h.tables[("d", "t")].identity_columns() == ["id"]
    h.apply("CREATE TABLE d.n (a INT, b INT DEFAULT 3)", [1])
    h.apply("ALTER TABLE d.n ADD COLUMN c INT DEFAULT 9", [2])
    interval = next(i for i in h.intervals() if i.table == "n")
    assert interval.key_aliases == ()
    assert interval.row_columns == ((("a",), None, (1,)), (("b",), b"3", (1,)), (("c",), b"9", (2,)))


def test_tables_from_before_the_archive_can_be_renamed_and_truncated():
    """A mid-stream archive: RENAME/TRUNCATE of a table no DDL described moves/clears its rows,
    which keep the columns and key their messages carry; an ALTER of it is refused without
    hiding the table's rows (the table is not marked known)."""
    h = SchemaHistory()
    with pytest.raises(DDLError, match="no known schema"):
        h.apply("ALTER TABLE d.x ADD COLUMN c INT", [1])
    assert not h.is_known("d", "x")
    h.apply("RENAME TABLE d.a TO d.b", [5])
    h.apply("ALTER TABLE d.c RENAME TO d.e", [6])
    h.apply("TRUNCATE TABLE d.f", [7])
    got = {(i.database, i.table): (i.after, i.until, i.final_table, i.key_aliases) for i in h.intervals()}
    assert got[("d", "a")] == ((), (5,), "b", None) and got[("d", "b")] == ((5,), None, "b", None)
    assert got[("d", "c")] == ((), (6,), "e", None)
    assert got[("d", "f")] == ((7,), None, "f", None)
    assert h.create_statements() == []
    # their rows' in-band columns are not reported as conflicts with a history that has none
    shapes = [{"database": "d", "table": t, "columns": [("id", "int")], "first": [p], "last": [p], "events": 1}
              for t, p in (("a", 1), ("b", 8), ("f", 3), ("f", 9))]
    assert schema_conflicts(h, shapes) == []
    assert h.is_known("d", "b") and not h.is_described("d", "b") and not h.is_described("d", "a")
    h.apply("CREATE TABLE d.b (id INT PRIMARY KEY)", [9])
    assert h.is_described("d", "b")


def test_statements_parsed_ahead_apply_as_parsed_on_the_spot():
    """ddl.parse_ahead (the replay parses an archive's DDL in a background thread while Spark
    jobs run) changes nothing: the same outcomes, the same errors, and a statement applied
    twice is not changed by its first application (each use gets its own copy)."""
    from spark_apps import ddl

    queries = ["CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(8))", "ALTER TABLE d.t ADD COLUMN w INT AFTER id",
               "ALTER TABLE d.t ADD COLUMN w INT AFTER id", "NOT SQL AT ALL (", "ALTER TABLE d.t DROP COLUMN v",
               "/*!40101 ALTER TABLE d.t ADD COLUMN x BIGINT */"]

    def replayed():
        history, outcomes = ddl.SchemaHistory(""), []
        for i, q in enumerate(queries):
            try:
                outcomes.append(history.apply(q, [i + 1], "d"))
            except ddl.DDLError as e:
                outcomes.append(f"error: {e}")
        return outcomes, history.create_statements()

    ddl.parse_ahead([]).join()  # nothing parsed ahead
    on_the_spot = replayed()
    ddl.parse_ahead(queries).join()
    assert replayed() == on_the_spot
    assert any(o.startswith("error: cannot parse DDL") for o in on_the_spot[0])
    ddl.parse_ahead([]).join()


_POOL = [
    "CREATE DATABASE {d}", "CREATE TABLE {d}.{t} (id INT PRIMARY KEY, v VARCHAR(8))",
    "CREATE TABLE {t} (id INT NOT NULL, u INT NOT NULL UNIQUE, v TEXT)", "CREATE TABLE {d}.{t} LIKE {d2}.{t2}",
    "ALTER TABLE {d}.{t} ADD COLUMN w BIGINT AFTER id", "ALTER TABLE {t} ADD COLUMN z INT FIRST",
    "ALTER TABLE {d}.{t} DROP COLUMN v", "ALTER TABLE {d}.{t} MODIFY COLUMN v VARCHAR(20)",
    "ALTER TABLE {d}.{t} CHANGE COLUMN v vv TEXT", "ALTER TABLE {d}.{t} RENAME COLUMN id TO pk",
    "ALTER TABLE {d}.{t} RENAME TO {d2}.{t2}", "RENAME TABLE {d}.{t} TO {d2}.{t2}, {d2}.{t} TO {d}.{t}",
    "DROP TABLE IF EXISTS {d}.{t}", "DROP TABLE {t}", "DROP DATABASE {d}", "TRUNCATE TABLE {d}.{t}",
    "CREATE UNIQUE INDEX ux ON {d}.{t} (v)", "DROP INDEX ux ON {d}.{t}", "ALTER TABLE {d}.{t} DROP PRIMARY KEY",
    "USE {d}", "CREATE TABLE {d}.{t} (id INT PRIMARY KEY); ALTER TABLE {d}.{t2} ADD COLUMN q INT",
]


class _EveryTableAfterEveryStatement:
    """The rule before the per-statement cut: every table's versions compared after each
    statement (quadratic, but obviously complete)."""

    def __new__(cls):
        class Full(SchemaHistory):
            def _record_versions(self, point, keys=None):
                super()._record_versions(point, None)
        return Full()


def test_versions_compare_only_the_tables_a_statement_names_and_miss_nothing():
    """SchemaHistory records a version after a statement only for the tables that statement
    names (or a dropped database holds); over random statement sequences on two databases the
    versions, tables and outcomes are those of comparing every table after every statement."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    statement = st.tuples(st.sampled_from(_POOL), st.sampled_from(["d", "e"]), st.sampled_from(["t", "u"]),
                          st.sampled_from(["d", "e"]), st.sampled_from(["t", "u"]))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(statement, min_size=1, max_size=25), st.sampled_from([None, "d", "e"]))
    def check(steps, default):
        runs = []
        for history in (SchemaHistory(), _EveryTableAfterEveryStatement()):
            outcomes = []
            for i, (pattern, d, t, d2, t2) in enumerate(steps):
                try:
                    outcomes.append(history.apply(pattern.format(d=d, t=t, d2=d2, t2=t2), [i + 1], default))
                except DDLError as e:
                    outcomes.append(f"error: {e}")
            runs.append((outcomes, history.versions, sorted(history.tables), history.create_statements()))
        assert runs[0] == runs[1]

    check()


def test_columns_at_by_bisection_answers_as_a_scan_of_every_version():
    """`columns_at` bisects a table's versions when their starts are in order and scans them
    otherwise (a placeholder from a RENAME/TRUNCATE of an undescribed table is appended with the
    empty start, late): over random statement sequences, at points before, at, between and
    after the statements (and the empty point), it answers as the scan: the last version that
    starts before the point or at the start."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    statement = st.tuples(st.sampled_from(_POOL), st.sampled_from(["d", "e"]), st.sampled_from(["t", "u"]),
                          st.sampled_from(["d", "e"]), st.sampled_from(["t", "u"]), st.integers(0, 2))

    def scanned(versions, point):
        signature = None
        for start, sig in versions:
            if start < point or not start:
                signature = sig
        return signature

    @settings(max_examples=300, deadline=None)
    @given(st.lists(statement, min_size=1, max_size=25))
    def check(steps):
        history, at = SchemaHistory(), 0
        for pattern, d, t, d2, t2, step in steps:
            at += step  # several statements may share a point
            try:
                history.apply(pattern.format(d=d, t=t, d2=d2, t2=t2), [at, 1])
            except DDLError:
                pass
        for grown in range(2):  # then again after every list grew (the starts are cached per length)
            points = [[], [0], [at + 1]] + [[p, q] for p in range(at + 2) for q in (0, 1, 2)]
            for (db, table), versions in list(history.versions.items()):
                for point in points:
                    assert history.columns_at(db, table, point) == scanned(versions, point), (versions, point)
                assert history.columns_at_each(db, table, points) == [scanned(versions, p) for p in points]
            at += 1
            for db, table in list(history.versions):
                try:
                    history.apply(f"ALTER TABLE {db}.{table} ADD COLUMN grown_{grown} INT", [at, 1])
                except DDLError:
                    pass

    check()


def test_columns_at_each_of_an_array_of_commit_ts_answers_as_columns_at():
    """The writer's precision hook asks for a batch's rows of a table at once, their points
    (one commit ts each) as an int64 array (`columns_at_each`, one numpy bisection): the same
    versions as `columns_at` of each point, before, at, between and after the statements, with
    a placeholder's empty start among them, and by a scan where the starts are not in order."""
    import numpy as np

    h = SchemaHistory()
    h.apply("RENAME TABLE d.x TO d.t", [])  # an undescribed table's placeholder: the empty start
    h.apply("CREATE TABLE d.u (id INT)", [2])
    for at, statement in ((3, "DROP TABLE d.t"), (3, "CREATE TABLE d.t (id INT)"), (5, "ALTER TABLE d.t ADD b INT"),
                          (9, "ALTER TABLE d.t ADD c INT"), (9, "ALTER TABLE d.t DROP b")):
        h.apply(statement, [at])
    h.apply("ALTER TABLE d.u ADD b INT", [1])  # out of order: `columns_at` scans
    points = np.array([-(1 << 63), 0, 2, 3, 4, 5, 6, 9, 10, (1 << 63) - 1], dtype=np.int64)
    for table in ("t", "u", "missing"):
        assert len(h.versions.get(("d", table), ())) != 1
        assert h.columns_at_each("d", table, points) == [h.columns_at("d", table, [p]) for p in points.tolist()]
    assert h.columns_at_each("D", "T", points[3:5]) == [h.columns_at("d", "t", [3]), h.columns_at("d", "t", [4])]


def test_existence_says_where_a_name_has_a_table():
    """The stretches of points at which a table of each name exists: from its CREATE (or the
    start, for a table described before the archive or dropped without being described) to its
    DROP or RENAME; a name no version mentions exists throughout."""
    h = SchemaHistory("CREATE TABLE d.old (id int primary key)")
    h.apply("CREATE TABLE d.t (id int primary key)", [10])
    h.apply("DROP TABLE d.t", [20])
    h.apply("CREATE TABLE d.t (id int primary key, v int)", [30])
    h.apply("DROP TABLE d.before_archive", [40])
    h.apply("RENAME TABLE d.old TO d.new", [50])
    stretches = {(t, after, until) for _, t, after, until in h.existence()}
    assert stretches == {("t", (10,), (20,)), ("t", (30,), None), ("before_archive", (), (40,)),
                         ("old", (), (50,)), ("new", (50,), None)}


def test_a_key_added_to_a_keyless_table_leaves_it_keyed_by_whole_rows():
    """Rows of a table that had no identity are named by all their columns even after ALTER
    TABLE ADD PRIMARY KEY (before it two rows could share the key's values); a table keyed from
    its CREATE, or whose key changes in one statement, stays keyed (tests/test_keyless_windows.py)."""
    h = SchemaHistory()
    h.apply("CREATE TABLE d.n (item VARCHAR(8) NOT NULL, qty INT)", [1])
    h.apply("ALTER TABLE d.n ADD PRIMARY KEY (item)", [2])
    h.apply("CREATE TABLE d.k (id INT PRIMARY KEY, w INT NOT NULL)", [3])
    h.apply("ALTER TABLE d.k DROP PRIMARY KEY, ADD PRIMARY KEY (w)", [4])
    n, k = (next(i for i in h.intervals() if i.table == t) for t in ("n", "k"))
    assert h.tables[("d", "n")].identity_columns() == ["item"] and n.key_aliases == () and n.row_columns
    assert k.key_aliases == (("w",),) and k.row_columns is None
    assert "PRIMARY KEY (`item`)" in h.tables[("d", "n")].create_statement()
