"""Archive layouts (docs/layouts.md): the objects TiCDC's cloud storage sink and the Kafka
Connect S3 sink write, built here by hand from the producers' rules (tiflow/ticdc
pkg/sink/cloudstorage path.go, cmd/storage-consumer; kafka-connect-storage-cloud
RecordViews, Avro/Json/ByteArray record writer providers) - never with our own writers - then
planned, read, and replayed end to end against the same changes in a Kafka-record archive."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import io
import os

import fastavro
import lz4.frame
import orjson
import pytest
import snappy
import zstandard

from cdc_codecs import KafkaRecord, get_codec
from cdc_codecs.archive import format_record
from cdc_codecs.events import Kind
from spark_apps import layouts, storage
from spark_apps.layouts import kafka_connect_s3, ticdc_storage


def put(root, rel: str, data: bytes) -> None:
    storage.write_bytes(storage.join(str(root), rel), data)


def canal_line(database, table, ts, id_, name) -> bytes:
    """One canal-json INSERT with the TiDB extension, keys in TiCDC's order."""
    doc = {"id": 0, "database": database, "table": table, "pkNames": ["id"], "isDdl": False, "type": "INSERT",
           "es": ts >> 18, "ts": 1767225600000, "sql": "", "sqlType": {"id": 4, "name": 12},
           "mysqlType": {"id": "int", "name": "varchar"}, "old": None,
           "data": [{"id": str(id_), "name": name}], "_tidb": {"commitTs": ts}}
    return orjson.dumps(doc)


TS = [(1_000 << 18) + i for i in range(10)]


# ----------------------------------------------------------------------- ticdc-storage


def storage_sink_fixture(root) -> None:
    """A storage-sink tree written as TiCDC writes it: canal-json lines ending in \\r\\n, the
    index file holding the last data file's name and "\\n", schema files in both places, a
    database schema file, day date directories, a partitioned table, a dispatcher-suffixed
    table, file-index-width 10 for one table, and the root metadata without spaces."""
    crlf = b"\r\n"
    put(root, "metadata", b'{"checkpoint-ts":%d}' % TS[7])
    put(root, "shop/meta/schema_262144000_0123456789.json", b'{"Table":"","Schema":"shop","Version":1,'
        b'"TableVersion":262144000,"Query":"CREATE DATABASE `shop`","Type":1}')
    put(root, "shop/t/meta/schema_262144000_3954207718.json", orjson.dumps({
        "Table": "t", "Schema": "shop", "Version": 1, "TableVersion": 262144000,
        "Query": "CREATE TABLE `t` (`id` INT PRIMARY KEY,`name` VARCHAR(20))", "Type": 3,
        "TableColumns": [{"ColumnName": "id", "ColumnType": "INT", "ColumnPrecision": "11", "ColumnIsPk": "true"},
                         {"ColumnName": "name", "ColumnType": "VARCHAR", "ColumnPrecision": "20"}],
        "TableColumnsTotal": 2}, option=orjson.OPT_INDENT_2))
    put(root, "shop/old/262144000/schema.json", orjson.dumps({
        "Table": "old", "Schema": "shop", "Version": 1, "TableVersion": 262144000,
        "TableColumns": [{"ColumnName": "id", "ColumnType": "INT", "ColumnIsPk": "true"},
                         {"ColumnName": "name", "ColumnType": "VARCHAR", "ColumnPrecision": "20"}]}))
    # table t, two table versions (a move between nodes, same schema), day directories
    d1 = "shop/t/262144000/2026-01-01"
    put(root, f"{d1}/CDC000001.json", canal_line("shop", "t", TS[0], 1, "a") + crlf + canal_line("shop", "t", TS[1], 2, "b") + crlf)
    put(root, f"{d1}/CDC000002.json", canal_line("shop", "t", TS[2], 3, "c") + crlf)
    put(root, f"{d1}/meta/CDC.index", b"CDC000002.json\n")
    d2 = "shop/t/262144999/2026-01-02"
    put(root, f"{d2}/CDC000001.json", canal_line("shop", "t", TS[3], 4, "d") + crlf)
    put(root, f"{d2}/CDC000002.json", canal_line("shop", "t", TS[4], 5, "e") + crlf)  # beyond the index
    put(root, f"{d2}/meta/CDC.index", b"CDC000001.json\n")
    # a partitioned table with partition separator, file-index-width 10, no date
    p = "shop/p/262144000/88"
    put(root, f"{p}/CDC0000000001.json", canal_line("shop", "p", TS[5], 6, "f") + crlf)
    put(root, f"{p}/meta/CDC.index", b"CDC0000000001.json\n")
    # table across nodes: dispatcher-suffixed data and index files, month directory
    q = "shop/q/262144000/2026-01"
    put(root, f"{q}/CDC_6a8f3e2b9c1d4e5f_000001.json", canal_line("shop", "q", TS[6], 7, "g") + crlf
        + canal_line("shop", "q", TS[9], 8, "above the checkpoint") + crlf)
    put(root, f"{q}/meta/CDC_6a8f3e2b9c1d4e5f.index", b"CDC_6a8f3e2b9c1d4e5f_000001.json\n")
    # a data directory with no index file yet: nothing in it is visible
    put(root, "shop/r/262144000/CDC000001.json", canal_line("shop", "r", TS[1], 9, "h") + crlf)


def test_storage_sink_paths_are_parsed_as_ticdc_writes_them():
    parse = ticdc_storage.parse_data_path
    assert parse("db/t/437/CDC000001.json")["days"] == 0
    got = parse("db/t/437/2026-01-02/CDC000012.csv")
    assert (got["days"], got["index"], got["ext"], got["partition_id"]) == (20455, 12, "csv", None)
    got = parse("db/t/437/102/2026/CDC_abc_def_000003.json")
    assert (got["partition_id"], got["dispatcher"], got["index"], got["days"]) == (102, "abc_def", 3, 20454)
    assert parse("db/t/437/102/CDC000003.json")["partition_id"] == 102
    assert parse("db/t/437/2026-01/CDC0000000007.json.gz")["index"] == 7
    assert parse("db/t/meta/schema_1_0000000001.json") is None
    assert parse("db/t/437/x/y/z/CDC000001.json") is None
    # the offset grows with the table's file number, then the line; any realistic archive's offsets
    # fit a signed 64-bit integer (Spark's bigint, the manifest's JSON)
    assert ticdc_storage.offset(1, 1) > ticdc_storage.offset(0, 99) > ticdc_storage.offset(0, 2)
    assert ticdc_storage.offset(ticdc_storage.MAX_FILES - 1, 10 ** 9) < 2 ** 63


def test_storage_sink_plan_reads_visible_files_and_the_checkpoint(tmp_path):
    storage_sink_fixture(tmp_path)
    plan = layouts.plan(str(tmp_path), "auto", protocol="canal-json")
    assert plan.layout == "ticdc-storage" and "ticdc-storage" in plan.found
    assert plan.info["checkpoint_ts"] == TS[7]
    assert plan.info["table_schema_files"] == 2 and plan.info["database_schema_files"] == 1
    assert plan.schema_uri == str(tmp_path)
    assert sorted(os.path.relpath(u, tmp_path) for u in plan.not_visible) == [
        "shop/r/262144000/CDC000001.json", "shop/t/262144999/2026-01-02/CDC000002.json"]
    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    records, watermarks = [], []
    for it in plan.items:
        for entry in layouts.read(it.uri, it.params):
            if isinstance(entry, dict):
                watermarks.append((entry["topic"], entry["watermark_ts"], entry["kind"]))
            else:
                records.append(entry)
    assert sorted(watermarks) == [(t, TS[7], Kind.WATERMARK) for t in ("shop.p", "shop.q", "shop.t")]
    ids = sorted(int(codec.decode(r)[0]["after"][0]["value"]) for r, _ in records)
    assert ids == [1, 2, 3, 4, 6, 7, 8]
    first = next(r for r, line in records if r.object.endswith("2026-01-01/CDC000001.json") and line == 2)
    assert (first.topic, first.partition, first.value) == ("shop.t", 0, canal_line("shop", "t", TS[1], 2, "b"))
    assert first.offset == ticdc_storage.offset(0, 2)  # shop.t's first data file, line 2
    assert plan.per_file_offsets and plan.holes == () and plan.info["missing_files"] == 0
    with pytest.raises(layouts.LayoutError, match="--protocol canal-json"):
        layouts.plan(str(tmp_path), "ticdc-storage", protocol="open-protocol")


def test_storage_sink_tables_are_complete_after_their_first_version_and_date(tmp_path):
    """What the sink's own names prove of where a table's changes begin (a base export's gap
    check): the lowest table version directory (never below the start ts of the table sink
    that wrote it) and the latest moment the earliest date directory can have begun (a file
    TiCDC expires is a whole earlier date, named in the server's zone): 12:00 UTC of that date
    in the latest zone (UTC-12), its midnight in the zone the option names; a partitioned
    table is complete after the latest of its partitions; without dates, after its version."""
    from cdc_codecs.tso import compose

    start = compose(1767225630000)  # 2026-01-01 00:00:30 UTC
    line = canal_line("shop", "t", start + 5, 1, "a") + b"\r\n"
    for rel in (f"shop/t/{start}/2026-01-01/CDC000001.json", f"shop/t/{start}/2026-01-02/CDC000001.json",
                f"shop/t/{start + 99}/2026-01-02/CDC000001.json",  # a later version (a DDL)
                f"shop/p/{start}/81/2025-12-31/CDC000001.json", f"shop/p/{start}/82/2026-01-01/CDC000001.json",
                f"shop/n/{start - 7}/CDC000001.json"):  # date-separator none
        put(tmp_path, rel, line)
        put(tmp_path, rel.rsplit("/", 1)[0] + "/meta/CDC.index", b"CDC000001.json\n")
    day = (dt.date(2026, 1, 1) - dt.date(1970, 1, 1)).days
    noon = compose(1767225600000 + 12 * 3600 * 1000)  # 2026-01-01 12:00 UTC = midnight in UTC-12
    plan = layouts.plan(str(tmp_path), "ticdc-storage", protocol="canal-json")
    assert plan.complete_after == {"shop.t": [noon, start, day], "shop.p": [noon, start, day],
                                   "shop.n": [start - 7, start - 7, None]}
    zoned = layouts.plan(str(tmp_path), "ticdc-storage", {"time-zone": "UTC"}, protocol="canal-json")
    assert zoned.complete_after["shop.t"] == [start, start, day]  # midnight UTC is before the start
    east = layouts.plan(str(tmp_path), "ticdc-storage", {"time-zone": "Asia/Shanghai"}, protocol="canal-json")
    assert east.complete_after["shop.t"][0] == start  # 2026-01-01 began at 16:00 UTC the day before
    west = layouts.plan(str(tmp_path), "ticdc-storage", {"time-zone": "-05:00"}, protocol="canal-json")
    assert west.complete_after["shop.t"][0] == compose(1767225600000 + 5 * 3600 * 1000)
    with pytest.raises(layouts.LayoutError, match="unknown time zone"):
        layouts.plan(str(tmp_path), "ticdc-storage", {"time-zone": "Mars/Olympus"}, protocol="canal-json")
    with pytest.raises(layouts.LayoutError, match="is not used by ticdc-storage"):
        layouts.plan(str(tmp_path), "ticdc-storage", {"separator": "x"}, protocol="canal-json")


def test_storage_sink_files_are_numbered_per_table_and_missing_files_are_holes(tmp_path):
    """Offsets of a mid-stream archive as the sink lays it out (tiflow/ticdc
    pkg/sink/cloudstorage/path.go: {version}/[{partition id}/][{date}/]CDC{index}.json, the index
    restarting in each date directory, meta/CDC[_{dispatcher}].index naming the last file):
    every data file of a table has its own number in the sink's order (version, partition id,
    date, dispatcher, index), so no two lines share an offset and all fit in 63 bits whatever
    the dates and versions; a number up to an index file with no data file is a hole, numbered
    where that file would be."""
    line = canal_line("shop", "t", TS[0], 1, "a") + b"\r\n"
    v1, v2 = 449_000_000_000_000_000, 449_000_000_100_000_000
    dirs = {f"shop/t/{v1}/2026-01-01": 3, f"shop/t/{v1}/2026-01-02": 2, f"shop/t/{v2}/2026-01-02": 1,
            f"shop/p/{v1}/89/2026-01-01": 1, f"shop/p/{v1}/88/2026-01-01": 2}
    for directory, files in dirs.items():
        for index in range(1, files + 1):
            put(tmp_path, f"{directory}/CDC{index:06d}.json", line * index)
        put(tmp_path, f"{directory}/meta/CDC.index", b"CDC%06d.json\n" % files)
    put(tmp_path, f"shop/d/{v1}/2026-01/CDC_ab12_000001.json", line)
    put(tmp_path, f"shop/d/{v1}/2026-01/meta/CDC_ab12.index", b"CDC_ab12_000001.json\n")
    plan = layouts.plan(str(tmp_path), "ticdc-storage", protocol="canal-json")
    assert plan.holes == () and plan.info["missing_files"] == 0 and plan.per_file_offsets
    numbers = {os.path.relpath(it.uri, tmp_path): orjson.loads(it.params)["file"] for it in plan.items
               if "file" in orjson.loads(it.params)}
    assert numbers == {
        f"shop/t/{v1}/2026-01-01/CDC000001.json": 0, f"shop/t/{v1}/2026-01-01/CDC000002.json": 1,
        f"shop/t/{v1}/2026-01-01/CDC000003.json": 2, f"shop/t/{v1}/2026-01-02/CDC000001.json": 3,
        f"shop/t/{v1}/2026-01-02/CDC000002.json": 4, f"shop/t/{v2}/2026-01-02/CDC000001.json": 5,
        f"shop/p/{v1}/88/2026-01-01/CDC000001.json": 0, f"shop/p/{v1}/88/2026-01-01/CDC000002.json": 1,
        f"shop/p/{v1}/89/2026-01-01/CDC000001.json": 2, f"shop/d/{v1}/2026-01/CDC_ab12_000001.json": 0}
    offsets = []
    for it in plan.items:
        offsets += [(r.topic, r.offset) for r, _ in layouts.read(it.uri, it.params) if not isinstance(r, dict)]
    assert len(offsets) == len(set(offsets)) == (1 + 2 + 3) + (1 + 2) + 1 + (1 + 2) + 1 + 1  # lines per file
    assert all(0 < o < 2 ** 63 for _, o in offsets)
    assert plan.items == layouts.plan(str(tmp_path), "ticdc-storage", protocol="canal-json").items  # deterministic

    # a data file gone from the middle of a directory (its index file names a later one): a hole
    os.remove(tmp_path / f"shop/t/{v1}/2026-01-01/CDC000002.json")
    os.remove(tmp_path / f"shop/d/{v1}/2026-01/CDC_ab12_000001.json")  # the only file: no numbered file is left
    plan = layouts.plan(str(tmp_path), "ticdc-storage", protocol="canal-json")
    [hole] = plan.holes
    assert hole == {"topic": "shop.t", "partition": 0, "from": ticdc_storage.offset(1, 1),
                    "to": ticdc_storage.offset(1, ticdc_storage.MAX_LINE),
                    "object": str(tmp_path / f"shop/t/{v1}/2026-01-01/CDC000002.json")}
    assert plan.info["missing_files"] == 1 and plan.info["missing_objects"] == [hole["object"]]
    assert "1 missing" in plan.found
    numbers = {os.path.relpath(it.uri, tmp_path): orjson.loads(it.params)["file"] for it in plan.items
               if "file" in orjson.loads(it.params)}
    assert numbers[f"shop/t/{v1}/2026-01-01/CDC000003.json"] == 2  # the same numbers as before


# -------------------------------------------------------------------- kafka-connect-s3

VALUE_SCHEMA = ["null", "bytes"]  # ByteArrayConverter: Connect's optional bytes, as AvroData writes it
HEADER_SCHEMA = {"type": "array", "items": {"type": "record", "name": "ConnectDefault",
                                            "namespace": "io.confluent.connect.avro",
                                            "fields": [{"name": "key", "type": "string"},
                                                       {"name": "value", "type": "string"}]}}


def avro_file(schema, values) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), values, codec="null")
    return out.getvalue()


def connect_files(records, flush_size, directory, fmt, keys=False, headers=False, pad=10,
                  separator=b"\n", compress=None):
    """{relative path: bytes} as the S3 sink writes `records` of one topic partition: a file
    per `flush_size` records named by its first record's offset."""
    files = {}
    for start in range(0, len(records), flush_size):
        chunk = records[start:start + flush_size]
        r0 = chunk[0]
        stem = f"{directory}/{r0.topic}+{r0.partition}+{r0.offset:0{pad}d}"
        if fmt == "avro":
            files[f"{stem}.avro"] = avro_file(VALUE_SCHEMA, [r.value for r in chunk])
            if keys:
                files[f"{stem}.keys.avro"] = avro_file(VALUE_SCHEMA, [r.key for r in chunk])
            if headers:
                files[f"{stem}.headers.avro"] = avro_file(
                    HEADER_SCHEMA, [[{"key": k, "value": v.decode()} for k, v in r.headers] for r in chunk])
        else:
            if fmt == "json":  # Jackson writes byte[] as a base64 string
                data = b"".join(orjson.dumps(base64.b64encode(r.value).decode()) + b"\n" for r in chunk)
                name = f"{stem}.json"
            else:
                data = b"".join(r.value + separator for r in chunk)
                name = f"{stem}.bin"
            if compress == "gzip":
                data, name = gzip.compress(data), name + ".gz"
            files[name] = data
    return files


def sample_records(n=7, partition=3, first_offset=40):
    return [KafkaRecord("cdc.shop", partition, first_offset + i, None, b"k%d\x00" % i,
                        canal_line("shop", "t", TS[i % len(TS)], i, f"n{i}"), (("origin", b"tidb-%d" % i),))
            for i in range(n)]


@pytest.mark.parametrize("fmt,directory,compress", [
    ("avro", "topics/cdc.shop/partition=3", None),
    ("json", "topics/cdc.shop/year=2026/month=01/day=02/hour=05", "gzip"),
    ("bytearray", "archive/cdc.shop/region=eu", None),
    ("bytearray", "topics/cdc.shop/partition=3", "gzip"),
])
def test_connect_s3_objects_give_back_the_records_with_their_offsets(tmp_path, fmt, directory, compress):
    records = sample_records()
    for rel, data in connect_files(records, 3, directory, fmt, keys=True, headers=True, compress=compress).items():
        put(tmp_path, rel, data)
    plan = layouts.plan(str(tmp_path), "auto", protocol="canal-json")
    assert plan.layout == "kafka-connect-s3" and len(plan.items) == 3
    got = sorted((r for it in plan.items for r, _ in layouts.read(it.uri, it.params)), key=lambda r: r.offset)
    assert [(r.topic, r.partition, r.offset, r.value) for r in got] == [
        (r.topic, r.partition, r.offset, r.value) for r in records]
    if fmt == "avro":  # companions only exist for the Avro files here
        assert [(r.key, r.headers) for r in got] == [(r.key, r.headers) for r in records]


def test_connect_s3_bytearray_separator_option_and_binary_protocol_refused(tmp_path):
    records = sample_records(4)
    for rel, data in connect_files(records, 4, "topics/cdc.shop/partition=3", "bytearray", separator=b"\r\n").items():
        put(tmp_path, rel, data)
    plan = layouts.plan(str(tmp_path), "kafka-connect-s3", {"format.bytearray.separator": "\\r\\n"}, "canal-json")
    got = [r for it in plan.items for r, _ in layouts.read(it.uri, it.params)]
    assert [r.value for r in got] == [r.value for r in records]
    with pytest.raises(layouts.LayoutError, match="AvroFormat"):
        layouts.plan(str(tmp_path), "kafka-connect-s3", {}, "canal-protobuf")
    with pytest.raises(layouts.LayoutError, match="unknown --layout-option"):
        layouts.plan(str(tmp_path), "kafka-connect-s3", {"nope": "1"}, "canal-json")


# ------------------------------------------------------------------------ compression


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress),
    (".zst", lambda d: zstandard.ZstdCompressor().compress(d)),
    (".lz4", lz4.frame.compress),
    (".snappy", lambda d: snappy.StreamCompressor().compress(d)),
])
def test_objects_are_decompressed_by_extension(tmp_path, suffix, compress):
    records = sample_records(5)
    put(tmp_path, f"cdc.shop/3/part.jsonl{suffix}", compress(b"".join(format_record(r) + b"\n" for r in records)))
    plan = layouts.plan(str(tmp_path), "auto")
    assert plan.layout == "kafka-records"
    got = [r for it in plan.items for r, _ in layouts.read(it.uri, it.params)]
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (r.offset, r.key, r.value, r.headers) for r in records]


def test_auto_says_what_it_looked_for_when_nothing_matches(tmp_path):
    put(tmp_path, "notes/readme.txt", b"hello")
    with pytest.raises(layouts.LayoutError, match="no archive objects found"):
        layouts.plan(str(tmp_path), "auto")


def test_storage_sink_csv_rows_get_their_table_schema_and_keep_quoted_line_breaks(tmp_path):
    """csv files with include-commit-ts: the columns come from the schema file of the data
    directory's table version (or the latest before it); a quoted value holds a line break."""
    schema_v1 = {"Table": "t", "Schema": "shop", "Version": 1, "TableVersion": 100, "Query": "", "Type": 3,
                 "TableColumns": [{"ColumnName": "id", "ColumnType": "INT", "ColumnPrecision": "11", "ColumnIsPk": "true"},
                                  {"ColumnName": "name", "ColumnType": "VARCHAR", "ColumnPrecision": "20"}],
                 "TableColumnsTotal": 2}
    schema_v2 = dict(schema_v1, TableVersion=200, Query="ALTER TABLE `t` ADD COLUMN `b` BLOB",
                     TableColumns=[*schema_v1["TableColumns"], {"ColumnName": "b", "ColumnType": "BLOB"}],
                     TableColumnsTotal=3)
    put(tmp_path, "metadata", b'{"checkpoint-ts":900}')
    put(tmp_path, "shop/t/meta/schema_100_0000000001.json", orjson.dumps(schema_v1))
    put(tmp_path, "shop/t/meta/schema_200_0000000002.json", orjson.dumps(schema_v2))
    put(tmp_path, "shop/t/100/CDC000001.csv", b'"I","t","shop",150,1,"two\r\nlines"\r\n"D","t","shop",160,1,\\N\r\n')
    put(tmp_path, "shop/t/100/meta/CDC.index", b"CDC000001.csv\n")
    # a move between nodes: a new version directory, no new schema file, the same columns as 200
    put(tmp_path, "shop/t/300/CDC000001.csv", b'"U","t","shop",310,2,"x","AAE="\r\n')
    put(tmp_path, "shop/t/300/meta/CDC.index", b"CDC000001.csv\n")
    with pytest.raises(layouts.LayoutError, match="--protocol csv"):
        layouts.plan(str(tmp_path), "auto", protocol="canal-json")
    plan = layouts.plan(str(tmp_path), "auto", protocol="csv")
    codec = get_codec("csv", {"include-commit-ts": "true"})
    entries = [entry for it in plan.items for entry in layouts.read(it.uri, it.params)]
    events = [e for entry in entries if not isinstance(entry, dict) for e in codec.decode(entry[0])]
    # the data files carry no DDL: the schema file whose columns changed gives it, at its version
    assert [(r["kind"], r["commit_ts"], r["database"], r["table"], r["ddl_query"], r["ddl_type"])
            for r in entries if isinstance(r, dict) and r["kind"] == "ddl"] == [
        ("ddl", 200, "shop", "t", "ALTER TABLE `t` ADD COLUMN `b` BLOB", "add column")]
    assert plan.info["schema_changes"] == 1
    got = sorted((e["commit_ts"], e["op"], {c["name"]: c["value"] for c in (e["after"] or e["before"])})
                 for e in events)
    assert got == [(150, "insert", {"id": b"1", "name": b"two\r\nlines"}),
                   (160, "delete", {"id": b"1", "name": None}),
                   (310, "update", {"id": b"2", "name": b"x", "b": b"\x00\x01"})]


def test_our_own_objects_are_not_taken_for_connector_objects(tmp_path):
    put(tmp_path, "shop/0/shop+0+00000000000000000000.jsonl.gz", gzip.compress(format_record(sample_records(1)[0])))
    assert kafka_connect_s3.parse_name("shop/0/shop+0+00000000000000000000.jsonl.gz") is None
    assert layouts.plan(str(tmp_path), "auto").layout == "kafka-records"


def test_connect_s3_tombstone_partition_keys_become_null_value_records(tmp_path):
    """behavior.on.null.values=write: tombstones go to a partition of keys-only files."""
    records = sample_records(3)
    for rel, data in connect_files(records, 3, "topics/cdc.shop/partition=3", "avro", keys=True).items():
        put(tmp_path, rel, data)
    put(tmp_path, "topics/cdc.shop/tombstone/cdc.shop+3+0000000043.keys.avro", avro_file(VALUE_SCHEMA, [b"k9", b"k10"]))
    plan = layouts.plan(str(tmp_path), "kafka-connect-s3", protocol="avro")
    got = sorted((r for it in plan.items for r, _ in layouts.read(it.uri, it.params)), key=lambda r: r.offset)
    assert [(r.offset, r.key, r.value is None) for r in got][-2:] == [(43, b"k9", True), (44, b"k10", True)]
    assert "1 tombstone" in plan.found
