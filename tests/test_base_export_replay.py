"""--base-export in a replay (issue 30): the published-shaped exports of
tests/fixtures/base_exports/ plus a small archive that continues them (a TiCDC changefeed
started at the Dumpling TSO, re-sending an older event; a Canal binlog subscription around a
mysqldump's position). The snapshot must equal the export's rows (hand-written in
tests/test_base_export.py) with the archive's later changes applied by hand here; the history
starts each exported row with an INSERT version at the export's position, and the topics
re-send each as an INSERT message before the archive's changes; archive events the export
holds are counted `in_base` (never a version or a message); gaps and newer exports are
refused."""

from __future__ import annotations

import copy
import pathlib

import pytest

from cdc_codecs import encode_records, get_codec
from cdc_codecs.archive import is_archive_object, parse_line
from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from cdc_codecs.mysql_types import parse_type
from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.generate import write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import ReplayError, run, validate

from .test_base_export import ITEMS, ITEMS_MYSQL
from .test_outputs import read_parquet

pytestmark = pytest.mark.spark

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "base_exports"
TSO = 453817264815718401  # dumpling-sql's metadata Pos
TIDB = {"enable-tidb-extension": "true"}
ITEM_COLUMNS = [("id", "bigint(20)"), ("name", "varchar(64)"), ("price", "decimal(10,2)"), ("weight", "float"),
                ("ratio", "double"), ("data", "varbinary(16)"), ("flags", "bit(8)"), ("kind", "enum('a','b','c')"),
                ("tags", "set('x','y','z')"), ("created", "datetime(3)"), ("day", "date"), ("note", "text"),
                ("doc", "json")]
ODD_COLUMNS = [("a", "int(11)"), ("b", "varchar(10)")]  # `c` is a virtual generated column


def image(columns, values: dict, key=("id",)):
    out = []
    for name, mysql_type in columns:
        flags = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) if name in key else 0
        if parse_type(mysql_type).is_binary:
            flags |= int(ColumnFlag.BINARY)
        out.append({"name": name, "mysql_type": mysql_type, "flags": flags, "value": values.get(name), "label": None})
    return out


def row_event(op, table, before=None, after=None, **place):
    columns, key = (ITEM_COLUMNS, ["id"]) if table == "items" else (ODD_COLUMNS, [])
    return new_event(Kind.ROW, op=op, database="shop", table=table, key_columns=key or None,
                     before=None if before is None else image(columns, before, key),
                     after=None if after is None else image(columns, after, key), **place)


def items(rows=ITEMS) -> dict:
    return {row["id"]: dict(row) for row in copy.deepcopy(rows)}


def write(records, path, first_offset=0):
    renumbered = [type(r)(r.topic, r.partition, r.offset + first_offset, None, r.key, r.value, r.headers)
                  for r in records]
    write_archive(renumbered, str(path), records_per_object=3)


def args_for(source, output, protocol, export, *extra, options=TIDB, emit="snapshot"):
    argv = ["--source", str(source), "--protocol", protocol, "--output", str(output), "--emit", emit,
            "--base-export", str(export), *extra]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return ReplayArgs.from_namespace(parser().parse_args(argv))


# ----------------------------------------------------------------------------- Dumpling from TiDB

def ts(ms_after: int) -> int:
    """A commit ts `ms_after` milliseconds after the export's TSO (negative: before it)."""
    return ((TSO >> 18) + ms_after) << 18


def tso_archive(path, first_offset=0, resend=True):
    """A changefeed started at the TSO: later changes of both tables, a re-sent copy of an older
    transaction (already in the export: it must not undo the export's row 1), watermarks."""
    row2 = dict(ITEMS[1])
    events = ([row_event(Op.UPDATE, "items", before=ITEMS[0], after=dict(ITEMS[0], name=b"stale"), commit_ts=ts(-5))]
              if resend else [])
    events += [
        row_event(Op.UPDATE, "items", before=row2, after=dict(row2, name=b"two", price=b"2.50"), commit_ts=ts(1)),
        row_event(Op.DELETE, "items", before=ITEMS[2], commit_ts=ts(2)),
        row_event(Op.INSERT, "items", after={"id": b"6", "name": b"six", "kind": b"2"}, commit_ts=ts(3)),
        row_event(Op.INSERT, "odd.name", after={"a": b"2", "b": b"two"}, commit_ts=ts(4)),
        row_event(Op.DELETE, "odd.name", before={"a": None, "b": b"n"}, commit_ts=ts(5)),
        new_event(Kind.WATERMARK, watermark_ts=ts(10)),
    ]
    codec = get_codec("canal-json", TIDB)
    records = encode_records(codec, events, topic="cdc", partitions=2,
                             dispatch=lambda e: 0 if e["table"] == "items" else 1)
    write(records, path, first_offset)


def test_dumpling_tso_snapshot_as_kafka_records(spark, tmp_path):
    tso_archive(tmp_path / "archive")
    manifest = run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql"),
                   spark=spark)
    expected = items()
    expected[b"2"].update(name=b"two", price=b"2.50")
    del expected[b"3"]
    expected[b"6"] = dict.fromkeys(expected[b"1"]) | {"id": b"6", "name": b"six", "kind": b"2"}
    snapshot = read_snapshot(str(tmp_path / "out"), "canal-json", TIDB)
    assert snapshot[("shop", "items")] == {(k,): v for k, v in expected.items()}
    # the keyless table: the export's two identical rows stay two, (NULL, 'n') is deleted
    odd = {(r["database"], r["table"]): r for r in manifest["tables"]}[("shop", "odd.name")]
    assert odd["rows"] == 3  # (1,'one') twice, (2,'two')
    assert sorted((k[0], k[1]) for k in snapshot[("shop", "odd.name")]) == [(b"1", b"one"), (b"2", b"two")]
    counts = manifest["counts"]
    assert counts["in_base"] == 1 and counts["filtered"] == 0 and counts["reconciled"]
    assert counts["read"] == counts["applied"] + counts["in_base"] + counts["duplicate"]
    assert manifest["window"]["base_position"] == f"TSO {TSO}"
    assert manifest["coverage"]["complete"]


def test_dumpling_csv_snapshot_as_parquet(spark, tmp_path):
    """The same archive over the CSV export (only `items`), written as typed Parquet."""
    tso_archive(tmp_path / "archive")
    manifest = run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-csv-gzip",
                            "--target-format", "parquet"), spark=spark)
    table = read_parquet(str(tmp_path / "out"))[("shop", "items")]
    rows = {r["id"]: r for r in table.to_pylist()}
    assert sorted(rows) == [1, 2, 4, 5, 6]
    assert rows[1]["name"] == "plain" and rows[1]["kind"] == "a" and rows[1]["tags"] == "x,z"
    assert rows[2]["name"] == "two" and str(rows[2]["price"]) == "2.50"
    assert rows[6]["kind"] == "b" and rows[4]["data"] == b"'"
    assert manifest["counts"]["in_base"] == 1


def test_tables_filter_the_export_too(spark, tmp_path):
    tso_archive(tmp_path / "archive")
    manifest = run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql",
                            "--target-format", "parquet", "--tables", "shop.odd?name"), spark=spark)
    assert sorted(read_parquet(str(tmp_path / "out"))) == [("shop", "odd.name")]
    assert manifest["output"]["rows"] == 3


def test_gap_is_refused(spark, tmp_path):
    """The archive's partitions begin at offset 5 and nothing in them is at or below the TSO:
    changes between the export and the archive's first record may be lost."""
    tso_archive(tmp_path / "archive", first_offset=5, resend=False)
    with pytest.raises(ReplayError, match=r"may start after it \(a gap\): 2 partition"):
        run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql"), spark=spark)
    assert not (tmp_path / "out" / "_manifest.json").exists()


def test_a_partition_with_an_event_at_the_export_is_not_a_gap(spark, tmp_path):
    """Offsets that begin above 0 are fine in a partition holding an event at or below the
    TSO (the changefeed was running at the export's position): only the other is refused."""
    tso_archive(tmp_path / "archive", first_offset=5)  # partition 0 holds the re-sent older event
    with pytest.raises(ReplayError, match=r" 1 partition\(s\) \(cdc/1 from offset 5\)"):
        run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql"), spark=spark)


def test_export_newer_than_the_cut_is_refused(spark, tmp_path):
    tso_archive(tmp_path / "archive")
    with pytest.raises(ReplayError, match="is newer than the archive's cut"):
        run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql",
                     "--as-of", str(ts(-1))), spark=spark)


def read_topics(output, protocol, options) -> dict:
    """{(topic, partition): [row event]} of a topics output, decoded in offset order."""
    codec = get_codec(protocol, options)
    records = []
    for info in storage.list_objects(str(output)):
        if is_archive_object(storage.relative(info.uri, str(output))):
            records.extend(parse_line(line) for line in storage.iter_lines(info.uri))
    out: dict = {}
    for record in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        for event in codec.decode(record):
            if event["kind"] == Kind.ROW:
                out.setdefault((record.topic, record.partition), []).append(event)
    return out


def values(img) -> dict:
    return {c["name"]: c["value"] for c in img}


def test_dumpling_tso_history(spark, tmp_path):
    """SCD2: each exported row is an INSERT version from the TSO; the re-sent older update
    (in the export) is no version; the archive's later changes follow with their commit ts."""
    tso_archive(tmp_path / "archive")
    manifest = run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql",
                            "--target-format", "parquet", emit="history"), spark=spark)
    tables = read_parquet(str(tmp_path / "out"))
    got: dict = {}
    for row in tables[("shop", "items")].to_pylist():
        got.setdefault(row["id"], []).append(row)
    expected = {1: [(TSO, "insert")], 2: [(TSO, "insert"), (ts(1), "update")], 3: [(TSO, "insert"), (ts(2), "delete")],
                4: [(TSO, "insert")], 5: [(TSO, "insert")], 6: [(ts(3), "insert")]}
    assert sorted(got) == sorted(expected)
    for key, rows in got.items():
        rows.sort(key=lambda r: r["_valid_from_ts"])
        assert [(r["_valid_from_ts"], r["_op"]) for r in rows] == expected[key]
        assert [r["_valid_to_ts"] for r in rows] == [r["_valid_from_ts"] for r in rows[1:]] + [None]
        assert [r["_current"] for r in rows] == [False] * (len(rows) - 1) + [rows[-1]["_op"] != "delete"]
    assert got[1][0]["name"] == "plain" and got[2][0]["name"] is None and got[2][1]["name"] == "two"
    assert str(got[2][1]["price"]) == "2.50" and got[3][0]["name"] == "café ☕"
    # the keyless table: two identical exported rows are two versions; (NULL, 'n') is deleted later
    odd = sorted(((r["_op"], r["_valid_from_ts"], r["a"], r["b"]) for r in tables[("shop", "odd.name")].to_pylist()),
                 key=repr)
    assert odd == sorted([("insert", TSO, 1, "one"), ("insert", TSO, 1, "one"), ("insert", TSO, None, "n"),
                          ("insert", ts(4), 2, "two"), ("delete", ts(5), None, "n")], key=repr)
    assert manifest["counts"]["in_base"] == 1 and manifest["counts"]["reconciled"]


def test_dumpling_tso_topics_in_canal_json(spark, tmp_path):
    """TiCDC's initial snapshot: an INSERT per exported row at the TSO, then the archive's later
    changes; the re-sent older update is not re-emitted."""
    tso_archive(tmp_path / "archive")
    manifest = run(args_for(tmp_path / "archive", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql",
                            emit="topics"), spark=spark)
    partitions = read_topics(tmp_path / "out", "canal-json", TIDB)
    events = [e for p in partitions.values() for e in p]
    for stream in partitions.values():  # in each partition the export's INSERTs come first
        stamps = [e["commit_ts"] for e in stream]
        assert stamps == sorted(stamps)
    row2 = dict(ITEMS[1])
    want = sorted([("items", "insert", TSO, r) for r in ITEMS]
                  + [("odd.name", "insert", TSO, r) for r in ({"a": b"1", "b": b"one"}, {"a": b"1", "b": b"one"},
                                                              {"a": None, "b": b"n"})]
                  + [("items", "update", ts(1), dict(row2, name=b"two", price=b"2.50")),
                     ("items", "delete", ts(2), ITEMS[2]),
                     ("items", "insert", ts(3), dict.fromkeys(ITEMS[0]) | {"id": b"6", "name": b"six", "kind": b"2"}),
                     ("odd.name", "insert", ts(4), {"a": b"2", "b": b"two"}),
                     ("odd.name", "delete", ts(5), {"a": None, "b": b"n"})], key=repr)
    got = sorted(((e["table"], e["op"], e["commit_ts"], values(e["before"] if e["op"] == "delete" else e["after"]))
                  for e in events), key=repr)
    assert got == want
    assert manifest["output"]["rows"] == len(want) and manifest["counts"]["in_base"] == 1


# ----------------------------------------------------------------------------- mysqldump + Canal

def canal_archive(path, events):
    codec = get_codec("canal-protobuf", {})
    write(encode_records(codec, events, topic="canal", partitions=1), path)


def around_the_dump() -> list[dict]:
    """Canal's binlog positions [file sequence, offset, row] around mysqldump-8.0's
    binlog.000003:4711: an event at 3:4000 is in the dump, 3:4711 and 4:120 are after it."""
    return [
        row_event(Op.UPDATE, "items", before=ITEMS_MYSQL[0], after=dict(ITEMS_MYSQL[0], name=b"stale"),
                  position=[3, 4000, 0], execute_ts_ms=1),
        row_event(Op.UPDATE, "items", before=ITEMS_MYSQL[3], after=dict(ITEMS_MYSQL[3], note=b"later"),
                  position=[3, 4711, 0], execute_ts_ms=2),
        row_event(Op.DELETE, "items", before=ITEMS_MYSQL[4], position=[4, 120, 0], execute_ts_ms=3),
    ]


def test_mysqldump_with_canal_protobuf(spark, tmp_path):
    """mysqldump at binlog.000003:4711 and a Canal archive around it (`around_the_dump`)."""
    canal_archive(tmp_path / "archive", around_the_dump())
    manifest = run(args_for(tmp_path / "archive", tmp_path / "out", "canal-protobuf", FIXTURES / "mysqldump-8.0",
                            "--target-format", "parquet", options={}), spark=spark)
    table = read_parquet(str(tmp_path / "out"))[("shop", "items")]
    rows = {r["id"]: r for r in table.to_pylist()}
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[1]["name"] == "plain" and rows[4]["note"] == "later"
    # a FLOAT the archive never rewrites keeps the dump's 6 significant digits
    assert rows[3]["weight"] == pytest.approx(-0.5)
    assert manifest["counts"]["in_base"] == 1 and manifest["counts"]["applied"] == 2
    assert manifest["window"]["base_position"].startswith("binlog binlog.000003:4711")


def test_mysqldump_topics_and_history_with_canal_protobuf(spark, tmp_path):
    """The dump's rows as INSERTs at binlog.000003:4711 (Canal's header: that file and offset, no
    execute time), before the archive's changes there and later; the event before it is not
    re-sent. The history's dump versions have no time (a dump carries none) and end at the
    archive's change (its execute time)."""
    canal_archive(tmp_path / "archive", [
        row_event(Op.UPDATE, "items", before=ITEMS_MYSQL[0], after=dict(ITEMS_MYSQL[0], name=b"stale"),
                  position=[3, 4000, 0], execute_ts_ms=1),
        row_event(Op.UPDATE, "items", before=ITEMS_MYSQL[3], after=dict(ITEMS_MYSQL[3], note=b"later"),
                  position=[3, 4711, 0], execute_ts_ms=2),
        row_event(Op.DELETE, "items", before=ITEMS_MYSQL[4], position=[4, 120, 0], execute_ts_ms=3),
    ])
    manifest = run(args_for(tmp_path / "archive", tmp_path / "topics", "canal-protobuf", FIXTURES / "mysqldump-8.0",
                            options={}, emit="topics"), spark=spark)
    (stream,) = read_topics(tmp_path / "topics", "canal-protobuf", {}).values()
    got = [(e["op"], e["position"], e["execute_ts_ms"], values(e["before"] if e["op"] == "delete" else e["after"]))
           for e in stream]
    assert got == ([("insert", [3, 4711, 0], None, r) for r in ITEMS_MYSQL]
                   + [("update", [3, 4711, 0], 2, dict(ITEMS_MYSQL[3], note=b"later")),
                      ("delete", [4, 120, 0], 3, ITEMS_MYSQL[4])])
    assert manifest["counts"]["in_base"] == 1
    run(args_for(tmp_path / "archive", tmp_path / "history", "canal-protobuf", FIXTURES / "mysqldump-8.0",
                 "--target-format", "parquet", options={}, emit="history"), spark=spark)
    versions: dict = {}
    for row in read_parquet(str(tmp_path / "history"))[("shop", "items")].to_pylist():
        versions.setdefault(row["id"], []).append(row)
    def ms(t):  # the history's validity times are timestamps (ms, UTC); Canal's execute times are ms
        return None if t is None else round(t.timestamp() * 1000)

    for rows in versions.values():
        rows.sort(key=lambda r: ms(r["_valid_from"]) or 0)
    shape = {k: [(r["_op"], ms(r["_valid_from"]), ms(r["_valid_to"]), r["_current"]) for r in rows]
             for k, rows in versions.items()}
    assert shape == {1: [("insert", None, None, True)], 2: [("insert", None, None, True)],
                     3: [("insert", None, None, True)], 4: [("insert", None, 2, False), ("update", 2, None, True)],
                     5: [("insert", None, 3, False), ("delete", 3, None, False)]}
    assert versions[1][0]["name"] == "plain" and versions[4][1]["note"] == "later"
    assert versions[3][0]["weight"] == pytest.approx(-0.5)


def test_mysqldump_newer_than_the_canal_archive_is_refused(spark, tmp_path):
    canal_archive(tmp_path / "archive", [
        row_event(Op.UPDATE, "items", before=ITEMS_MYSQL[0], after=dict(ITEMS_MYSQL[0], name=b"x"),
                  position=[3, 4000, 0], execute_ts_ms=1)])
    with pytest.raises(ReplayError, match="newer than the archive's end"):
        run(args_for(tmp_path / "archive", tmp_path / "out", "canal-protobuf", FIXTURES / "mysqldump-8.0",
                     options={}), spark=spark)


def test_positions_that_cannot_join_are_refused_before_spark(tmp_path):
    """Canal's flat JSON carries no binlog position; Canal protobuf carries no TiDB TSO."""
    with pytest.raises(ReplayError, match="--protocol canal-json carries none per event"):
        validate(args_for(tmp_path / "a", tmp_path / "out", "canal-json", FIXTURES / "mysqldump-8.0", options={}))
    with pytest.raises(ReplayError, match="--protocol canal-protobuf carries none"):
        validate(args_for(tmp_path / "a", tmp_path / "out", "canal-protobuf", FIXTURES / "dumpling-sql", options={}))
    (tmp_path / "mixed").mkdir()
    for name in ("metadata", "shop.items-schema.sql", "shop.items.000000000.sql"):
        (tmp_path / "mixed" / name).write_bytes((FIXTURES / "dumpling-sql" / name).read_bytes())
    (tmp_path / "mixed" / "shop.items.000000001.csv").write_bytes(
        (FIXTURES / "dumpling-sql" / "shop.items.000000001.sql").read_bytes())
    with pytest.raises(ReplayError, match="mixes .sql and .csv"):
        validate(args_for(tmp_path / "a", tmp_path / "out", "canal-json", tmp_path / "mixed"))


def test_what_the_request_takes_with_an_export(tmp_path):
    """Every emit mode and target format takes an export (Delta/Iceberg: tests/test_base_export_lake.py);
    so does a kafka:// source; --since and --base-snapshot are refused in one line."""
    from spark_apps.contract import RequestError, check

    def request(emit, *extra):
        check(args_for(tmp_path / "a", tmp_path / "out", "canal-json", FIXTURES / "dumpling-sql", *extra, emit=emit))

    request("history", "--target-format", "parquet")
    request("topics")
    for lake in ("delta", "iceberg"):
        request("history", "--target-format", lake)
        request("snapshot", "--target-format", lake)
    with pytest.raises(RequestError, match="--since is not used with it"):
        request("snapshot", "--target-format", "delta", "--since", "last")
    with pytest.raises(RequestError, match="two starting points"):
        request("snapshot", "--base-snapshot", str(tmp_path / "b"))
    # a kafka:// source takes it too (tests/test_kafka.py)
    check(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", "kafka://broker:9092/cdc", "--protocol", "canal-json", "--output", str(tmp_path / "out"),
         "--emit", "snapshot", "--base-export", str(FIXTURES / "dumpling-sql")])))
