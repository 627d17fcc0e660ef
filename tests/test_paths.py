"""Names from the input never decide where files go (spark_apps.paths, docs/layouts.md): the
segment rule's properties, and replays of an archive whose topics, databases and tables are
hostile (`../../x`, `/abs`, `a/b`, NUL, newlines, 300 characters) into every output, local
and on S3: nothing lands outside --output, the manifest names only objects that exist, the
summary keeps its lines."""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import unicodedata

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs.archive import object_name, parse_line
from cdc_codecs.base import KafkaRecord
from spark_apps import storage
from spark_apps.manifest import summary
from spark_apps.outputs import lake
from spark_apps.paths import MAX_BYTES, display, segment, unsegment

ORDINARY = ["shop", "orders_2024", "tidb_test.t1", "t1", "Orders", "订单", "user-02", "a b", "x.y.z", "v1.2",
            "CDC000001.json", "2024-01-01", "a_b", "a__b", "db$1", "ü", "emoji😀"]

# the unsafe names: traversal, absolute paths, separators, our own names, controls, cut names
HOSTILE = ["..", ".", "../../../dbx", "../../../../escape2", "/abs", "/", "\\", "a/b", "a\\b", "_staging",
           "_quarantine", "_manifest.json", ".hidden", "x\ny", "n\x00ul", "%2F", "!2F", "", "_", "t" * 300,
           "é" * 150, "a.", "a ", "\u2028", "\ud800", "a:b", "a*?<>|\"b", "{x}[y]#~^`"]


def names():
    return st.one_of(st.text(max_size=400), st.sampled_from(HOSTILE + ORDINARY),
                     st.lists(st.sampled_from(["..", ".", "/", "\\", "\x00", "_", "!", "%", "a", "é"]),
                              max_size=8).map("".join))


# ------------------------------------------------------------------ the rule

@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_names_are_unchanged(name):
    assert segment(name) == name


@given(names())
@settings(max_examples=2000, deadline=None)
def test_a_segment_is_one_safe_segment(name):
    seg = segment(name)
    assert seg not in (".", "..", "") and "/" not in seg and "\\" not in seg
    assert not seg.startswith(".") and (seg == "_" or not seg.startswith("_"))
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in seg)  # no NUL, no newline
    assert len(seg.encode("utf-8")) <= MAX_BYTES and "%" not in seg
    if "!!" not in seg:  # not cut to length: the name comes back
        assert unsegment(seg) == name


@given(names(), names())
@settings(max_examples=2000, deadline=None)
def test_distinct_names_never_share_a_segment(a, b):
    if a != b:
        assert segment(a) != segment(b)


@given(st.lists(names(), min_size=1, max_size=4), st.sampled_from(["/tmp/out", "s3://bucket/out"]))
@settings(max_examples=1000, deadline=None)
def test_a_joined_path_stays_below_the_output(parts, base):
    uri = storage.join(base, *map(segment, parts), "part-00000.parquet")
    path = uri[len("s3://bucket"):] if base.startswith("s3://") else uri
    root = "/out" if base.startswith("s3://") else base
    assert posixpath.normpath(path).startswith(root + "/")
    assert uri.count("/") == base.count("/") + len(parts) + 1  # one level per name, none dropped


def test_none_and_empty_are_distinct_from_every_name():
    assert segment(None) == "_" and segment("") == "!" and segment("_") == "!5F"
    assert unsegment("_") is None and unsegment("!") == ""


def test_long_names_are_cut_with_a_hash_and_stay_distinct():
    a, b = "t" * 300, "t" * 299 + "u"
    assert segment(a) != segment(b) and segment(a).startswith("t" * 100)
    assert all(len(segment(n).encode()) <= MAX_BYTES for n in (a, b, "é" * 150, "\x00" * 300))
    with pytest.raises(ValueError, match="cut name"):
        unsegment(segment(a))


def test_lakehouse_tables_are_one_folder_per_name_part():
    assert lake.table_location("/o", "{schema}.{table}", "shop", "orders") == "/o/shop/orders"
    assert lake.table_parts("lake_{schema}.{table}_v", "shop", "orders") == ["lake_shop", "orders_v"]
    one = lake.table_location("/o", "{schema}.{table}", "a.b", "c")
    two = lake.table_location("/o", "{schema}.{table}", "a", "b.c")
    assert one != two and one == "/o/a.b/c"
    assert lake.table_location("/o", "{schema}.{table}", "../../../dbx", "t") == "/o/!2E.!2F..!2F..!2Fdbx/t"
    assert lake.table_location("/o", "{schema}.{table}", "a/b", "c") != \
        lake.table_location("/o", "{schema}.{table}", "a", "b/c")
    # the manifest's key of a table: unambiguous, ordinary names as before
    assert lake.table_key("{schema}.{table}", "shop", "orders") == "shop.orders"
    assert lake.table_key("{schema}.{table}", "a.b", "c") == "a!2Eb.c"
    assert lake.table_key("{schema}.{table}", "a", "b.c") == "a.b!2Ec"


@given(st.lists(st.tuples(st.text(max_size=12), st.text(max_size=12)), min_size=2, max_size=6, unique=True))
@settings(max_examples=300, deadline=None)
def test_distinct_tables_never_share_a_manifest_key(tables):
    keys = {lake.table_key("{schema}.{table}", d, t) for d, t in tables}
    assert len(keys) == len(tables)


@pytest.mark.spark
def test_a_rerun_skips_only_the_tables_it_names(spark):
    """The rerun's skip of tables already at the cut compares (database, table) pairs:
    skipping `a.b`.`c` keeps `a`.`b.c` (a dotted `db.table` string matched both)."""
    df = spark.createDataFrame([("a.b", "c", 1), ("a", "b.c", 2), ("shop", "orders", 3)], "database string, "
                               "`table` string, id int")
    kept = lake.without_tables(df, {("a.b", "c")})
    assert sorted(r.id for r in kept.collect()) == [2, 3]
    assert sorted(r.id for r in lake.without_tables(df, {("a", "b.c"), ("shop", "orders")}).collect()) == [1]
    assert lake.without_tables(df, set()) is df


def test_display_keeps_a_name_on_one_line():
    assert display("shop") == "shop" and display(None) == "-"
    assert display("x\ny") == "x\\ny" and display("a\x00b") == "a\\x00b" and display("a\\nb") == "a\\\\nb"
    assert len(display("t" * 300)) == 200


# ------------------------------------------------------------------ end to end

TOPICS = ["../../../../escape2", "/abs/topic", "x\ny", "t" * 300, "n\x00ul", "_staging", "ok"]
TABLES = [("../../../dbx", "t"), ("a/b", "c"), ("a", "b/c"), (".", ".."), ("/etc", "passwd"), ("_quarantine", "x"),
          ("d" * 300, "e"), ("nul\x00db", "t\nx"), ("shop", "orders"), ("a.b", "c"), ("a", "b.c")]
TIDB = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]


def canal(database, table, ts, id_) -> bytes:
    doc = {"id": 0, "database": database, "table": table, "pkNames": ["id"], "isDdl": False, "type": "INSERT",
           "es": ts >> 18, "ts": 1767225600000, "sql": "", "sqlType": {"id": 4, "name": 12},
           "mysqlType": {"id": "int", "name": "varchar(20)"}, "old": None,
           "data": [{"id": str(id_), "name": f"n{id_}"}], "_tidb": {"commitTs": ts}}
    return orjson.dumps(doc)


def hostile_archive(root: str) -> None:
    """One record per table, spread over the hostile topics (objects named by the rule too)."""
    by_topic: dict[str, list] = {}
    for i, (database, table) in enumerate(TABLES):
        topic = TOPICS[i % len(TOPICS)]
        records = by_topic.setdefault(topic, [])
        records.append(KafkaRecord(topic, 0, len(records), 1767225600000 + i, None,
                                   canal(database, table, (1_000 << 18) + i, i)))
    from cdc_codecs.archive import format_record

    for topic, records in by_topic.items():
        lines = b"\n".join(format_record(r) for r in records) + b"\n"
        storage.write_bytes(storage.join(root, object_name(segment(topic), 0, 0)), gzip.compress(lines))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    source = str(base / "src")
    hostile_archive(source)
    return base, source


def replay(spark, source, output, emit, *extra):
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    argv = ["--source", source, "--protocol", "canal-json", "--output", output, "--emit", emit, *TIDB, *extra]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def files_below(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs} | {
        os.path.join(d, s) for d, subs, _ in os.walk(root) for s in subs}


def check_manifest(manifest: dict, output: str) -> None:
    """Every object the manifest lists exists below the output, and the summary keeps its lines."""
    entries = manifest["output"]["objects"] + manifest["quarantine"]["objects"]
    assert entries
    for entry in entries:
        assert entry["uri"].startswith(output.rstrip("/") + "/"), entry["uri"]
        assert "/_staging/" not in entry["uri"]
        assert storage.read_bytes(entry["uri"])  # exists after the commit
    for rel in manifest["committed"]:
        assert storage.exists(storage.join(output, rel)), rel
    text = summary(manifest)
    assert "\x00" not in text
    assert all(line.startswith(("cdc-replay run", "  ")) for line in text.split("\n")), text


def check_contained(base, output: str, before: set[str]) -> None:
    """Nothing was written under the test's folder but below --output."""
    new = files_below(str(base)) - before
    output = output.rstrip("/")
    outside = sorted(p for p in new if not (p + "/").startswith(output + "/") and not output.startswith(p + "/"))
    assert not outside, outside[:5]


@pytest.mark.spark
def test_kafka_record_archive_output_with_hostile_topics(spark, hostile):
    base, source = hostile
    output = str(base / "k" / "a" / "b" / "c" / "out")
    before = files_below(str(base))
    manifest = replay(spark, source, output, "topics")
    check_contained(base, output, before)
    check_manifest(manifest, output)
    assert set(manifest["output"]["topics"]) == set(TOPICS)
    # the objects read back: every record in its own topic
    topics = set()
    for entry in manifest["output"]["objects"]:
        for line in gzip.decompress(storage.read_bytes(entry["uri"])).splitlines():
            topics.add(parse_line(line, entry["uri"]).topic)
        assert entry["uri"].split("/")[-3] == segment(entry["topic"])
    assert topics == set(TOPICS)
    assert "x\\ny" in summary(manifest)


@pytest.mark.spark
@pytest.mark.parametrize("emit", ["snapshot", "history"])
def test_parquet_output_with_hostile_tables(spark, hostile, emit):
    import pyarrow.parquet as pq

    base, source = hostile
    output = str(base / f"p-{emit}" / "a" / "b" / "c" / "out")
    before = files_below(str(base))
    manifest = replay(spark, source, output, emit, "--target-format", "parquet")
    check_contained(base, output, before)
    check_manifest(manifest, output)
    found = {}
    for entry in manifest["output"]["objects"]:
        folder = tuple(entry["uri"][len(output) + 1:].split("/")[:2])
        found[folder] = found.get(folder, 0) + pq.read_table(io.BytesIO(storage.read_bytes(entry["uri"]))).num_rows
    assert found == {(segment(d), segment(t)): 1 for d, t in TABLES}
    assert len(found) == len(TABLES)  # one dataset per table: none shares a folder


@pytest.mark.spark
def test_ticdc_storage_target_layout_with_hostile_tables(spark, hostile):
    base, source = hostile
    output = str(base / "s" / "a" / "b" / "c" / "out")
    before = files_below(str(base))
    manifest = replay(spark, source, output, "snapshot", "--target-layout", "ticdc-storage")
    check_contained(base, output, before)
    check_manifest(manifest, output)
    folders = {tuple(e["uri"][len(output) + 1:].split("/")[:2]) for e in manifest["output"]["objects"]}
    assert folders == {(segment(d), segment(t)) for d, t in TABLES}
    for d, t in folders:
        assert storage.exists(storage.join(output, d, t))  # the index beside the data files


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_lakehouse_output_with_hostile_tables(spark, hostile, fmt):
    base, source = hostile
    output = str(base / fmt / "a" / "b" / "c" / "out")
    before = files_below(str(base))
    manifest = replay(spark, source, output, "snapshot", "--target-format", fmt)
    check_contained(base, output, before)
    check_manifest(manifest, output)
    target = lake.open_format(fmt, output, "{schema}.{table}")
    for database, table in TABLES:  # one table each, none shared
        assert target.row_count(database, table) == 1, (database, table)
        assert target.location(database, table).startswith(output + "/")
    # the manifest lists each table once, under a key no other table has (`a.b`.`c`, `a`.`b.c`)
    tables = manifest["output"]["lakehouse"]
    assert sorted((e["source_database"], e["source_table"]) for e in tables.values()) == sorted(TABLES)
    assert tables["a!2Eb.c"]["source_database"] == "a.b" and tables["a.b!2Ec"]["source_table"] == "b.c"
    assert tables["shop.orders"]["rows"] == 1
    again = replay(spark, source, output, "snapshot", "--target-format", fmt)  # a rerun: every table unchanged
    assert len(again["output"]["lakehouse"]) == len(TABLES)
    assert all(e["unchanged"] for e in again["output"]["lakehouse"].values())
    for database, table in TABLES:
        assert target.row_count(database, table) == 1, (database, table)


@pytest.mark.spark
def test_parquet_output_on_s3_with_hostile_tables(spark, hostile, bucket):
    base, source = hostile
    output = f"{bucket}/x/y/out"
    manifest = replay(spark, source, output, "snapshot", "--target-format", "parquet")
    keys = [o.uri for o in storage.list_objects(bucket)]
    assert keys and all(k.startswith(output + "/") for k in keys), [k for k in keys if not k.startswith(output)]
    check_manifest(manifest, output)
    assert len({tuple(e["uri"][len(output) + 1:].split("/")[:2]) for e in manifest["output"]["objects"]}) == len(TABLES)
