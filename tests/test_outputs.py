"""Windows on a base snapshot, topics of a window, SCD2 history and typed Parquet output."""

from __future__ import annotations

import decimal
import io
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import ReplayError, run

from .reference import reference_state

pytestmark = pytest.mark.spark
TIDB = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]


def replay(spark, source, output, *extra, emit="snapshot"):
    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", emit, *TIDB, *extra]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def read_parquet(output: str) -> dict:
    """{(db, table): pyarrow.Table} of a Parquet output."""
    tables = defaultdict(list)
    for info in storage.list_objects(output):
        rel = storage.relative(info.uri, output)
        if rel.endswith(".parquet"):
            db, table, _ = rel.split("/")
            tables[(db, table)].append(pq.read_table(io.BytesIO(storage.read_bytes(info.uri))))
    import pyarrow as pa

    return {k: pa.concat_tables(v) for k, v in tables.items()}


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    generated = generate(transactions=300, partitions=3, seed=23, ddl_rate=0.03)
    path = str(tmp_path_factory.mktemp("archive"))
    write_archive(generated.records, path)
    return generated, path


def watermark_in_the_middle(generated) -> int:
    ts = sorted({e["commit_ts"] for e in generated.events if e["kind"] == "row" and e["commit_ts"] <= generated.cut_ts})
    return ts[len(ts) // 2]


def test_window_on_a_base_snapshot_equals_the_full_replay(spark, history, tmp_path):
    generated, source = history
    middle = watermark_in_the_middle(generated)
    base = str(tmp_path / "base")
    replay(spark, source, base, "--as-of", str(middle))
    assert read_snapshot(base) == reference_state(generated.events, middle)
    window = replay(spark, source, str(tmp_path / "window"), "--base-snapshot", base)
    assert window["window"]["since"] == middle and window["counts"]["filtered"] > 0
    from spark_apps.manifest import summary, tso_time

    assert f"({tso_time(middle)} .. " in summary(window)  # the window both as TSO and as time
    assert read_snapshot(str(tmp_path / "window")) == {k: v for k, v in generated.expected.items() if v}
    assert window["counts"]["reconciled"]


def test_window_arguments_are_checked(spark, history, tmp_path):
    generated, source = history
    with pytest.raises(ReplayError, match="needs --base-snapshot"):
        replay(spark, source, str(tmp_path / "o"), "--since", "5")
    with pytest.raises(ReplayError, match="no readable _manifest.json"):
        replay(spark, source, str(tmp_path / "o"), "--base-snapshot", str(tmp_path / "nothing"))
    with pytest.raises(ReplayError, match="window is empty"):
        replay(spark, source, str(tmp_path / "o"), "--since", "9", "--until", "9", emit="topics")


def test_topics_of_a_window_hold_exactly_its_changes(spark, history, tmp_path):
    generated, source = history
    middle = watermark_in_the_middle(generated)
    manifest = replay(spark, source, str(tmp_path / "topics"), "--since", str(middle), emit="topics")
    window_changes = [e for e in generated.events if e["kind"] == "row" and middle < e["commit_ts"] <= generated.cut_ts]
    assert manifest["output"]["rows"] == len(window_changes)


def expected_versions(generated):
    """Per (table, key): [(commit_ts, op)] from the generator's own events (no DDL here)."""
    versions = defaultdict(list)
    for e in generated.events:
        if e["kind"] != "row" or e["commit_ts"] > generated.cut_ts:
            continue
        table = (e["database"], e["table"])
        before = e["before"] and next(c["value"] for c in e["before"] if c["name"] == "id")
        after = e["after"] and next(c["value"] for c in e["after"] if c["name"] == "id")
        if e["op"] == "delete":
            versions[(table, before)].append((e["commit_ts"], "delete"))
        elif e["op"] == "update" and before != after:
            versions[(table, before)].append((e["commit_ts"], "delete"))
            versions[(table, after)].append((e["commit_ts"], "update"))
        else:
            versions[(table, after)].append((e["commit_ts"], e["op"]))
    return versions


def test_history_has_one_version_per_change_with_validity(spark, tmp_path):
    generated = generate(transactions=200, partitions=3, seed=29, ddl_rate=0)
    write_archive(generated.records, str(tmp_path / "archive"))
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "history"), emit="history")
    assert manifest["output"]["format"] == "parquet"
    tables = read_parquet(str(tmp_path / "history"))
    expected = expected_versions(generated)
    got = defaultdict(list)
    for (db, table), data in tables.items():
        for row in data.to_pylist():
            got[((db, table), str(row["id"]).encode())].append(row)
    assert set(got) == set(expected)
    for key, rows in got.items():
        rows.sort(key=lambda r: r["_valid_from_ts"])
        assert [(r["_valid_from_ts"], r["_op"]) for r in rows] == expected[key]
        assert [r["_valid_to_ts"] for r in rows] == [r["_valid_from_ts"] for r in rows[1:]] + [None]
        assert [r["_current"] for r in rows] == [False] * (len(rows) - 1) + [rows[-1]["_op"] != "delete"]
    current = {(k[0], k[1]) for k, rows in got.items() if rows[-1]["_current"]}
    truth = {(t, key[0]) for t, rows in generated.expected.items() for key in rows}
    assert current == truth


def test_snapshot_as_typed_parquet(spark, history, tmp_path):
    generated, source = history
    manifest = replay(spark, source, str(tmp_path / "parquet"), "--target-format", "parquet")
    tables = read_parquet(str(tmp_path / "parquet"))
    orders = tables[("shop", "orders")]
    types = {f.name: str(f.type) for f in orders.schema}
    assert types["id"] == "int64" and types["big"] == "uint64" and types["amount"] == "decimal128(12, 2)"
    assert types["created"] == "timestamp[us]" and types["payload"] == "binary" and types["status"] == "string"
    truth = generated.expected[("shop", "orders")]
    rows = {str(r["id"]).encode(): r for r in orders.to_pylist()}
    assert set(rows) == {k[0] for k in truth}
    labels = {b"1": "new", b"2": "paid", b"3": "shipped"}
    for (key,), row in truth.items():
        got = rows[key]
        assert got["payload"] == row["payload"]
        assert (got["big"] is None and row["big"] is None) or str(got["big"]).encode() == row["big"]
        assert (got["amount"] is None and row["amount"] is None) or got["amount"] == decimal.Decimal(row["amount"].decode())
        assert got["status"] == (labels[row["status"]] if row["status"] is not None else None)
    assert manifest["output"]["rows"] == sum(len(v) for v in generated.expected.values())


def test_canal_dispatcher_places_rows_as_canal_does(spark, history, tmp_path):
    from cdc_codecs import get_codec
    from cdc_codecs.archive import parse_line
    from cdc_codecs.dispatch import canal_event_partition

    generated, source = history
    output = str(tmp_path / "topics")
    replay(spark, source, output, "--dispatcher", "canal", "--target-partitions", "4", emit="topics")
    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    placed = 0
    for info in storage.list_objects(output):
        if info.uri.endswith(".jsonl.gz"):
            for line in storage.iter_lines(info.uri):
                record = parse_line(line)
                for event in codec.decode(record):
                    if event["kind"] == "row":
                        assert record.partition == canal_event_partition(event, 4)
                        placed += 1
                    elif event["kind"] == "ddl":
                        assert record.partition == 0
    assert placed > 100


def test_ticdc_dispatchers_place_rows_as_tiflow_does(spark):
    """tiflow's own dispatcher tests (index_value_test.go, table_test.go, 16 partitions) give
    these partitions; handle-key flags or, without them, the key columns select the columns."""
    from spark_apps.transforms import dispatch_partition

    def image(*pairs, flags=2):
        return [{"name": n, "value": v.encode() if v is not None else None, "flags": flags if k else 0}
                for n, v, k in pairs]

    rows = [  # (database, table, key_columns, after, before, expected index-value, expected table)
        ("test", "t1", ["a"], image(("a", "11", True), ("b", "22", False)), None, 2, 15),
        ("test", "t1", ["a"], image(("a", "22", True), ("b", "22", False)), None, 11, 15),
        ("test", "t1", ["a"], image(("a", "11", True), ("b", "33", False)), None, 2, 15),
        ("test", "t2", ["a", "b"], image(("a", "11", True), ("b", "22", True)), None, 5, 5),
        ("test", "t2", ["a", "b"], image(("b", "22", True), ("a", "11", True)), None, 5, 5),
        ("test", "t2", ["a", "b"], image(("a", "11", True), ("b", "0", True)), None, 14, 5),
        ("test", "t2", ["a", "b"], image(("a", "11", True), ("b", "33", True)), None, 2, 5),
        # a DELETE hashes its old image; no flags: the key columns are the handle key
        ("test", "t1", ["a"], None, image(("a", "11", True), ("b", "1", False), flags=0), 2, 15),
        ("test", "t3", [], image(("x", "1", False)), None, 3, 3),  # no key: the table alone
    ]
    column = "array<struct<name:string,value:binary,flags:int>>"
    df = spark.createDataFrame(
        [(d, t, k, a, b, 7) for d, t, k, a, b, _, _ in rows],
        f"database string, table string, key_columns array<string>, after {column}, before {column}, commit_ts bigint")
    got = df.select(dispatch_partition("index-value", 16).alias("iv"), dispatch_partition("table", 16).alias("tb"),
                    dispatch_partition("ts", 4).alias("ts")).collect()
    assert [(r["iv"], r["tb"], r["ts"]) for r in got] == [(iv, tb, 3) for *_, iv, tb in rows]

    # lean rows (the topics' form: schema id + values, the column lists in the dictionary, a
    # literal or a broadcast relation) are placed the same, without rebuilding their images
    from spark_apps import transforms as T

    dictionary, lean = {}, []
    for d, t, k, a, b, _, _ in rows:
        cells = []
        for img in (b, a):
            if img is None:
                cells += [None, None]
                continue
            entry = (tuple(c["name"] for c in img), ("int",) * len(img), tuple(c["flags"] for c in img))
            sid = dictionary.setdefault(entry, 100 + len(dictionary))
            cells += [sid, [c["value"] for c in img]]
        lean.append((d, t, k, *cells, 7, len(lean)))
    lean_df = spark.createDataFrame(lean, "database string, table string, key_columns array<string>, "
                                    "before_schema bigint, before_values array<binary>, after_schema bigint, "
                                    "after_values array<binary>, commit_ts bigint, i int")
    entries = {sid: entry for entry, sid in dictionary.items()}
    for plan in (T.plan_dictionary(entries), T.plan_dictionary(entries, spark=spark, literal_max=0)):
        placed = lean_df
        for dispatcher, n, name in (("index-value", 16, "iv"), ("table", 16, "tb"), ("ts", 4, "by_ts")):
            placed = T.with_partition_lean(placed, dispatcher, n, plan).withColumnRenamed("out_partition", name)
        got = sorted(placed.select("i", "iv", "tb", "by_ts").collect())
        assert [(r["iv"], r["tb"], r["by_ts"]) for r in got] == [(iv, tb, 3) for *_, iv, tb in rows]


@pytest.mark.parametrize("extra, chosen", [
    ([], "KafkaRecordArchive"),
    (["--output", "kafka://broker:9092", "--manifest-uri", "/tmp/m"], "KafkaTopics"),
    (["--target-layout", "ticdc-storage"], "TiCDCStorageSink"),
    (["--target-format", "parquet"], "ParquetTables"),
    (["--target-format", "delta"], "DeltaTables"),
    (["--target-format", "iceberg"], "IcebergTables"),
])
def test_the_options_choose_one_output_target(extra, chosen):
    """Each target module says when the options ask for it (spark_apps.outputs.target_for);
    exactly one answers for every accepted combination."""
    from spark_apps.outputs import target_for

    argv = ["--source", "/tmp/a", "--protocol", "canal-json", "--output", "/tmp/o", "--emit", "snapshot", *extra]
    assert target_for(ReplayArgs.from_namespace(parser().parse_args(argv))).__name__ == chosen


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_object_writer_compresses_as_it_goes_into_fixed_bytes(tmp_path, monkeypatch, compiled):
    """The archive target's objects are compressed chunk by chunk in a background thread
    (kafka_records.ObjectWriter) by zlib-ng, level 6, gzip without mtime: each object is its
    lines deflated in chunks of `CHUNK_LINES` counted from the object's first line (zlib-ng's
    bytes depend on the cut, unlike zlib's), whichever batches the messages came in, so a rerun
    writes the same bytes; the stdlib's gzip reads them back. Rolled every `max_records`, with
    the offsets and counts of its records. The same bytes with the value-only records' lines
    formed by the extension (`value_lines`, runs of them between other records) or by Python."""
    import gzip
    import itertools

    from zlib_ng import zlib_ng

    from cdc_codecs.archive import format_record
    from cdc_codecs.base import EncodedMessage, KafkaRecord
    from spark_apps import native_decode, native_encode
    from spark_apps.outputs.kafka_records import ObjectWriter

    monkeypatch.setenv(native_encode.ENV, compiled)
    values = [(None if i % 7 < 4 else f"k{i}".encode(), (f"value {i} " * (i % 17)).encode(),
               [("h", b"x")] if i % 5 == 0 else None) for i in range(6001)]
    one = ObjectWriter(str(tmp_path / "one"), "t", 1, max_records=2500)
    one.CHUNK_LINES, one.PENDING = 333, 2
    for i, (key, value, headers) in enumerate(values):
        one.fed_events += 1
        one.fed_rows += i % 2
        one.add(key, value, headers)
    one.flush()
    batched = ObjectWriter(str(tmp_path / "batched"), "t", 1, max_records=2500)
    batched.CHUNK_LINES, batched.PENDING = 333, 2
    assert (batched._value_lines is not None) == (compiled == "1" and native_decode.cdc_replay_native is not None)
    done = 0
    for size in itertools.cycle([1, 1000, 77, 2600, 5]):
        part = values[done:done + size]
        if not part:
            break
        messages = [value if key is None and not headers else EncodedMessage(key, value, tuple(headers or ()))
                    for key, value, headers in part]
        batched.add_messages(messages, range(1, len(part) + 1), list(itertools.accumulate((done + j) % 2
                                                                                        for j in range(len(part)))))
        done += len(part)
    batched.flush()
    written = one.written
    assert [(w["first_offset"], w["last_offset"], w["records"], w["events"]) for w in written] == [
        (0, 2499, 2500, 2500), (2500, 4999, 2500, 2500), (5000, 6000, 1001, 1001)]
    assert [{**w, "uri": None} for w in batched.written] == [{**w, "uri": None} for w in written]
    for w in written:
        lines = [format_record(KafkaRecord("t", 1, o, None, *values[o])) + b"\n"
                 for o in range(w["first_offset"], w["last_offset"] + 1)]
        with open(w["uri"], "rb") as f:
            data = f.read()
        deflate = zlib_ng.compressobj(6, zlib_ng.DEFLATED, 31)
        assert data == b"".join([deflate.compress(b"".join(lines[i:i + 333])) for i in range(0, len(lines), 333)]
                                + [deflate.flush()])
        assert data[4:8] == bytes(4)  # no mtime
        assert gzip.decompress(data) == b"".join(lines)
        assert w["bytes"] == len(data)
        with open(w["uri"].replace(str(tmp_path / "one"), str(tmp_path / "batched")), "rb") as f:
            assert f.read() == data
    assert sum(w["rows"] for w in written) == 3000


def _topic_kinds(output: str) -> dict:
    """{output topic: {kind: [events]}} of a topics output (canal-json with TiDB's extension)."""
    from cdc_codecs import get_codec
    from cdc_codecs.archive import is_archive_object, parse_line

    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    out: dict = defaultdict(lambda: defaultdict(list))
    for info in storage.list_objects(output):
        if is_archive_object(storage.relative(info.uri, output)):
            for line in storage.iter_lines(info.uri):
                record = parse_line(line)
                for event in codec.decode(record):
                    out[record.topic][event["kind"]].append((record.partition, event))
    return out


@pytest.fixture(scope="module")
def ghost_archive(tmp_path_factory, history):
    """The history fixture's records plus copies of some of its row events as `shop.ghost`, a
    table no DDL describes (--require-schema quarantines them), after each partition's records."""
    import dataclasses
    import json

    generated, _ = history
    last = defaultdict(int)
    for r in generated.records:
        last[r.partition] = max(last[r.partition], r.offset)
    ghosts = []
    for r in [r for r in generated.records if b'"isDdl":false' in r.value][:40]:
        message = json.loads(r.value)
        message["table"] = "ghost"
        last[r.partition] += 1
        ghosts.append(dataclasses.replace(r, offset=last[r.partition],
                                          value=json.dumps(message, separators=(",", ":")).encode()))
    path = str(tmp_path_factory.mktemp("ghost-archive"))
    write_archive(list(generated.records) + ghosts, path)
    return generated, path


@pytest.mark.parametrize("extra", [
    [],
    ["--target-topic", "{schema}-{table}"],  # the database's DDL (no table) goes to `shop-`: DDL only
    ["--target-topic", "{topic}.{schema}.{table}", "--since", "middle"],
    ["--target-topic", "{schema}-{table}", "--tables", "shop.orders"],
    ["--target-topic", "x-{table}", "--require-schema"],  # shop.ghost's rows quarantined: no x-ghost
])
def test_watermarks_go_to_exactly_the_topics_of_the_changes(spark, ghost_archive, tmp_path, extra):
    """The output topics that get watermarks (named on the driver from the summary, stages/output.py
    `output_topics`) are exactly the topics the applied row and DDL events go to, whatever the
    template, window, table filter or quarantine; each watermark once per topic partition."""
    generated, source = ghost_archive
    extra = [str(watermark_in_the_middle(generated)) if a == "middle" else a for a in extra]
    output = str(tmp_path / "topics")
    manifest = replay(spark, source, output, *extra, emit="topics")
    kinds = _topic_kinds(output)
    changed = {t for t, k in kinds.items() if k.get("row") or k.get("ddl")}
    marked = {t for t, k in kinds.items() if k.get("watermark")}
    assert changed and marked == changed, (sorted(changed), sorted(marked))
    spread = set()
    for topic in marked:
        placed = [(p, e["watermark_ts"]) for p, e in kinds[topic]["watermark"]]
        assert len(placed) == len(set(placed)), topic  # each watermark once per partition
        spread.add(frozenset(placed))
    assert len(spread) == 1  # the same watermarks in every partition of every topic
    # the applied watermarks (at most the cut; above --since) and the cut itself, each once
    cut = manifest["cut"]["commit_ts"]
    since = int(extra[extra.index("--since") + 1]) if "--since" in extra else None
    from cdc_codecs import get_codec

    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    expected = {e["watermark_ts"] for r in generated.records for e in codec.decode(r) if e["kind"] == "watermark"
                and e["watermark_ts"] <= cut and (since is None or e["watermark_ts"] > since)} | {cut}
    assert {ts for _, ts in next(iter(spread))} == expected
    if "--require-schema" in extra:
        assert "x-ghost" not in kinds and manifest["counts"]["quarantined"] > 0
    elif "--tables" not in extra and "--since" not in extra:
        assert any("ghost" in t for t in changed) or "--target-topic" not in extra
    if extra[:2] == ["--target-topic", "{schema}-{table}"] and "--tables" not in extra:
        assert "shop-" in changed and not kinds["shop-"].get("row")  # a topic of DDL alone


@pytest.mark.parametrize("target, dispatcher", [("canal-json", "index-value"), ("craft", "index-value"),
                                                ("craft", "table"), ("canal-json", "canal")])
def test_topics_place_each_ddl_once_where_its_protocol_puts_it(spark, history, tmp_path, target, dispatcher):
    """Every applied DDL goes once to partition 0 (canal-json: `ddl_placement` first) or once to
    every partition (craft: all), and every applied row event to one partition per key, with
    the dispatchers Spark's expressions place (index-value, table) and Canal's (Python)."""
    from cdc_codecs import get_codec
    from cdc_codecs.archive import is_archive_object, parse_line

    generated, source = history
    output = str(tmp_path / "topics")
    target_options = {"enable-tidb-extension": "true"} if target == "canal-json" else {}
    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", "topics",
            "--protocol-option", "enable-tidb-extension=true", "--target-protocol", target, "--dispatcher", dispatcher]
    for key, value in target_options.items():
        argv += ["--target-option", f"{key}={value}"]
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    codec = get_codec(target, target_options)
    ddl, rows = defaultdict(list), defaultdict(set)
    for info in storage.list_objects(output):
        if is_archive_object(storage.relative(info.uri, output)):
            for line in storage.iter_lines(info.uri):
                record = parse_line(line)
                for event in codec.decode(record):
                    if event["kind"] == "ddl":
                        ddl[event["ddl_query"]].append(record.partition)
                    elif event["kind"] == "row":
                        image = event["after"] or event["before"]
                        key = (event["table"], next(c["value"] for c in image if c["name"] == "id"))
                        rows[key].add(record.partition)
    cut = manifest["cut"]["commit_ts"]
    source_codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    applied = {(e["commit_ts"], e["ddl_query"]) for r in generated.records for e in source_codec.decode(r)
               if e["kind"] == "ddl" and e["commit_ts"] <= cut}  # the archive's duplicates once
    expected = [query for _, query in applied]
    every = [0] if target == "canal-json" else [0, 1, 2]
    assert expected and sorted(ddl) == sorted(set(expected))
    assert all(sorted(ddl[q]) == sorted(every * expected.count(q)) for q in ddl), dict(ddl)
    assert rows and all(len(placed) == 1 for placed in rows.values())
    assert dispatcher == "table" or len({p for placed in rows.values() for p in placed}) == 3
