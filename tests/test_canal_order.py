"""Order and identity on archives shaped as Alibaba Canal writes them (flat messages, one per
binlog rows event, `es` in whole seconds, DDL on partition 0): issue 32's defects 1, 4 and 5,
and a row of a table that does not exist at its point (issue 28 point 8).

The messages follow Canal's FlatMessage (com.alibaba.otter.canal.protocol.FlatMessage and
MQMessageUtils.messageConverter): `data` holds the rows of one event, `old` only the changed
columns of an UPDATE, `mysqlType` the full column types, `es` the binlog event time in ms with
whole seconds, `ts` the conversion time (not an order), `isDdl`/`sql` for a DDL whose
`data` is null. Expected states are written out by hand from MySQL's semantics."""

from __future__ import annotations

import json

import pytest

from cdc_codecs.base import KafkaRecord
from spark_apps.generate import write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

pytestmark = pytest.mark.spark

ES = 1589373515000  # one second of binlog time (whole seconds, as Canal's `es` has)
TYPES = {"id": "int(11)", "name": "varchar(32)", "score": "int(11)"}
SQL_TYPES = {"int(11)": 4, "varchar(32)": 12}


def _dml(kind, table, rows, *, es=ES, old=None, pk=("id",), types=TYPES, database="shop", batch=1):
    return {"data": rows, "database": database, "es": es, "id": batch, "isDdl": False,
            "mysqlType": dict(types), "old": old, "pkNames": list(pk) if pk is not None else None, "sql": "",
            "sqlType": {c: SQL_TYPES[t] for c, t in types.items()}, "table": table, "ts": es + 431,
            "type": kind}


def _ddl(sql, table, kind, *, es=ES, database="shop", batch=1):
    return {"data": None, "database": database, "es": es, "id": batch, "isDdl": True, "mysqlType": None,
            "old": None, "pkNames": None, "sql": sql, "sqlType": None, "table": table, "ts": es + 431,
            "type": kind}


def _replay(spark, tmp_path, partitions: list[list[dict]], *extra):
    records = [KafkaRecord("canal", p, offset, ES, None, json.dumps(m).encode())
               for p, messages in enumerate(partitions) for offset, m in enumerate(messages)]
    write_archive(records, str(tmp_path / "archive"), records_per_object=4)
    argv = ["--source", str(tmp_path / "archive"), "--protocol", "canal-json", "--output", str(tmp_path / "out"),
            "--emit", "snapshot", "--target-format", "parquet", *extra]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def _rows(spark, tmp_path, table: str) -> list[tuple]:
    """The snapshot's rows of `table`, as sorted tuples of every column but the replay's own."""
    paths = [str(p) for p in (tmp_path / "out").rglob("*.parquet") if f"/{table}/" in str(p).replace("\\", "/")]
    if not paths:
        return []
    df = spark.read.parquet(*paths)
    columns = [c for c in df.columns if not c.startswith("_")]
    return sorted(tuple(r[c] for c in columns) for r in df.collect())


def _counts_reconcile(manifest):
    counts = manifest["counts"]
    assert counts["reconciled"], counts


def test_rows_in_the_same_second_as_their_create_table_are_kept(spark, tmp_path):
    """A real Canal capture: CREATE DATABASE, CREATE TABLE, 9 INSERTs, an UPDATE and a DELETE,
    all in one second of binlog time. Every row is after its CREATE TABLE (the offset orders
    them): 8 rows live, one updated."""
    messages = [_ddl("CREATE DATABASE shop", "", "QUERY"),
                _ddl("CREATE TABLE `t` (`id` int(11) NOT NULL, `name` varchar(32), `score` int(11), "
                     "PRIMARY KEY (`id`))", "t", "CREATE")]
    messages += [_dml("INSERT", "t", [{"id": str(i), "name": f"n{i}", "score": str(i * 10)}]) for i in range(1, 10)]
    messages.append(_dml("UPDATE", "t", [{"id": "2", "name": "two", "score": "20"}], old=[{"name": "n2"}]))
    messages.append(_dml("DELETE", "t", [{"id": "5", "name": "n5", "score": "50"}]))
    manifest = _replay(spark, tmp_path, [messages])
    _counts_reconcile(manifest)
    assert manifest["counts"]["quarantined"] == 0
    expected = sorted((i, "two" if i == 2 else f"n{i}", i * 10) for i in range(1, 10) if i != 5)
    assert _rows(spark, tmp_path, "t") == expected


def test_rows_after_an_add_column_in_the_same_second_keep_its_value(spark, tmp_path):
    """ALTER TABLE ADD COLUMN and an INSERT carrying the new column in the same second: the
    value is kept (not NULL); a row inserted before the ALTER and never re-sent takes the
    column's default."""
    types = {**TYPES, "bonus": "int(11)"}
    SQL_TYPES.setdefault("int(11)", 4)
    messages = [_ddl("CREATE TABLE `t` (`id` int(11) NOT NULL, `name` varchar(32), `score` int(11), "
                     "PRIMARY KEY (`id`))", "t", "CREATE", es=ES - 5000),
                _dml("INSERT", "t", [{"id": "1", "name": "a", "score": "1"}], es=ES - 4000),
                _dml("INSERT", "t", [{"id": "2", "name": "b", "score": "2"}]),
                _ddl("ALTER TABLE `t` ADD COLUMN `bonus` int(11) DEFAULT 7", "t", "ALTER"),
                _dml("INSERT", "t", [{"id": "3", "name": "c", "score": "3", "bonus": "60"}], types=types)]
    manifest = _replay(spark, tmp_path, [messages])
    _counts_reconcile(manifest)
    assert _rows(spark, tmp_path, "t") == [(1, "a", 1, 7), (2, "b", 2, 7), (3, "c", 3, 60)]


def test_the_partition_offset_orders_changes_when_es_goes_backwards(spark, tmp_path):
    """Binlog event times are not monotonic across transactions: a later transaction (a later
    offset in the partition) can carry an earlier second. The offset is Canal's order."""
    messages = [_ddl("CREATE TABLE `t` (`id` int(11) NOT NULL, `name` varchar(32), `score` int(11), "
                     "PRIMARY KEY (`id`))", "t", "CREATE", es=ES - 9000),
                _dml("INSERT", "t", [{"id": "1", "name": "first", "score": "1"}], es=ES),
                _dml("UPDATE", "t", [{"id": "1", "name": "second", "score": "1"}], old=[{"name": "first"}],
                     es=ES - 2000),
                _dml("INSERT", "t", [{"id": "2", "name": "x", "score": "2"}], es=ES + 1000),
                _dml("DELETE", "t", [{"id": "2", "name": "x", "score": "2"}], es=ES - 1000)]
    manifest = _replay(spark, tmp_path, [messages])
    _counts_reconcile(manifest)
    assert _rows(spark, tmp_path, "t") == [(1, "second", 1)]


def test_rows_of_other_partitions_in_the_ddls_second_are_after_it(spark, tmp_path):
    """DDL goes to partition 0; a row of partition 1 with the DDL's event time counts as after
    it (docs/semantics.md), so an INSERT in the second of its CREATE TABLE is kept."""
    create = _ddl("CREATE TABLE `t` (`id` int(11) NOT NULL, `name` varchar(32), `score` int(11), "
                  "PRIMARY KEY (`id`))", "t", "CREATE")
    p0 = [create, _dml("INSERT", "t", [{"id": "2", "name": "b", "score": "2"}])]
    p1 = [_dml("INSERT", "t", [{"id": "1", "name": "a", "score": "1"}])]
    manifest = _replay(spark, tmp_path, [p0, p1])
    _counts_reconcile(manifest)
    assert _rows(spark, tmp_path, "t") == [(1, "a", 1), (2, "b", 2)]


def test_identical_rows_of_a_keyless_table_are_a_multiset(spark, tmp_path):
    """MySQL keeps identical rows of a table without a key; a DELETE removes one of them and
    an UPDATE changes one (Canal's binlog row image names one row per change). Identical rows
    of one INSERT are told apart by their place in the message; identical changes in separate
    messages of the same second cannot be told from a redelivery (docs/semantics.md)."""
    types = {"name": "varchar(32)", "score": "int(11)"}
    row = {"name": "same", "score": "1"}
    messages = [_ddl("CREATE TABLE `k` (`name` varchar(32), `score` int(11))", "k", "CREATE", es=ES - 9000),
                _dml("INSERT", "k", [row, row, row], pk=None, types=types),
                _dml("INSERT", "k", [{"name": "other", "score": "2"}], pk=None, types=types),
                _dml("DELETE", "k", [row], pk=None, types=types),
                _dml("UPDATE", "k", [{"name": "same", "score": "5"}], old=[{"score": "1"}], pk=None, types=types),
                _dml("INSERT", "k", [{"name": "other", "score": "2"}], pk=None, types=types, es=ES + 1000)]
    manifest = _replay(spark, tmp_path, [messages])
    _counts_reconcile(manifest)
    assert _rows(spark, tmp_path, "k") == [("other", 2), ("other", 2), ("same", 1), ("same", 5)]
    assert {t["table"]: t["rows"] for t in manifest["tables"]}["k"] == 4


def test_rows_of_a_dropped_table_are_quarantined_with_the_reason(spark, tmp_path):
    """A multi-statement DDL drops the database; inserts into its table that follow (the
    table does not exist at their point) are quarantined, not counted applied."""
    messages = [_ddl("CREATE TABLE `t` (`id` int(11) NOT NULL, `name` varchar(32), `score` int(11), "
                     "PRIMARY KEY (`id`))", "t", "CREATE", es=ES - 9000),
                _dml("INSERT", "t", [{"id": "1", "name": "a", "score": "1"}], es=ES - 8000),
                _ddl("DROP DATABASE shop", "", "QUERY", es=ES - 7000),
                _dml("INSERT", "t", [{"id": "2", "name": "b", "score": "2"}], es=ES - 6000)]
    manifest = _replay(spark, tmp_path, [messages])
    _counts_reconcile(manifest)
    # the first row was applied (its table existed then; the DROP removed it), the second has
    # no table at its point
    assert manifest["counts"]["quarantined"] == 1
    reasons = {r["stage"]: r for r in manifest["quarantine"]["reasons"]}
    assert "table" in reasons and reasons["table"]["records"] == 1
    assert _rows(spark, tmp_path, "t") == []
