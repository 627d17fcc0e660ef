"""End to end per layout: a generated history archived as TiCDC's storage sink and as the
Kafka Connect S3 sink would archive it (files built here from the producers' rules) replays
to the same snapshot as the same changes read from a Kafka-record archive, and to the truth."""

from __future__ import annotations

import dataclasses
import io
from collections import defaultdict

import fastavro
import orjson
import pytest

from cdc_codecs import get_codec
from cdc_codecs.events import Kind
from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

pytestmark = pytest.mark.spark

CANAL = {"enable-tidb-extension": "true"}


def replay(spark, source, output, protocol, options, layout):
    argv = ["--source", source, "--protocol", protocol, "--output", output, "--emit", "snapshot",
            "--layout", layout]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def write_storage_sink(root: str, events: list[dict], checkpoint: int, rows_per_file: int = 9,
                       version: int = 449999999999999999, days: tuple = ("2026-01-01", "2026-01-02")) -> int:
    """The row events as TiCDC's storage sink writes them with canal-json
    (enable-tidb-extension, \\r\\n terminators): per table, files of a few rows in two day
    directories (`days`, named in the server's zone) of table version `version`, whose file
    index restarts at 1, an index file naming each directory's last file, a file beyond the
    index (still being written: a copy of rows, never read), a file repeating the previous
    file's last row (at-least-once), and the root metadata. Returns the number of data files
    not yet visible."""
    codec = get_codec("canal-json", CANAL)
    by_table = defaultdict(list)
    for event in events:
        if event["kind"] == Kind.ROW:
            by_table[(event["database"], event["table"])].append(event)
    hidden = 0
    for (database, table), rows in by_table.items():
        lines = [b"".join(m.value for m in codec.encode([e], topic="t", partition=0)) for e in rows]
        files = [lines[i:i + rows_per_file] for i in range(0, len(lines), rows_per_file)]
        for n in range(1, len(files)):
            files[n] = [files[n - 1][-1], *files[n]]  # redelivered after a retry
        half = (len(files) + 1) // 2
        for day, chunk in ((days[0], files[:half]), (days[1], files[half:])):
            directory = f"{database}/{table}/{version}/{day}"
            for index, content in enumerate(chunk, 1):
                storage.write_bytes(storage.join(root, directory, f"CDC{index:06d}.json"),
                                    b"".join(line + b"\r\n" for line in content))
            if chunk:
                storage.write_bytes(storage.join(root, directory, "meta/CDC.index"), f"CDC{len(chunk):06d}.json\n".encode())
                storage.write_bytes(storage.join(root, directory, f"CDC{len(chunk) + 1:06d}.json"),
                                    b"".join(line + b"\r\n" for line in chunk[0]))
                hidden += 1
    storage.write_bytes(storage.join(root, "metadata"), b'{"checkpoint-ts":%d}' % checkpoint)
    return hidden


def test_storage_sink_archive_replays_like_the_kafka_archive(spark, tmp_path):
    generated = generate(transactions=50, partitions=2, seed=23, protocol="canal-json", options=CANAL, ddl_rate=0.0)
    kafka, sink = str(tmp_path / "kafka"), str(tmp_path / "sink")
    write_archive(generated.records, kafka)
    hidden = write_storage_sink(sink, generated.events, generated.cut_ts)

    replay(spark, kafka, str(tmp_path / "from-kafka"), "canal-json", CANAL, "kafka-records")
    manifest = replay(spark, sink, str(tmp_path / "from-sink"), "canal-json", CANAL, "auto")
    truth = {k: v for k, v in generated.expected.items() if v}
    assert read_snapshot(str(tmp_path / "from-kafka"), "canal-json", CANAL) == truth
    assert read_snapshot(str(tmp_path / "from-sink"), "canal-json", CANAL) == truth
    assert manifest["layout"]["layout"] == "ticdc-storage" and manifest["layout"]["not_visible"] == hidden > 0
    assert manifest["cut"]["commit_ts"] == generated.cut_ts
    counts = manifest["counts"]
    assert counts["reconciled"] and counts["duplicate"] > 0 and counts["pending"] > 0


def test_connect_s3_avro_archive_on_s3_replays_like_the_kafka_archive(spark, bucket, tmp_path):
    generated = generate(transactions=40, partitions=2, seed=29, protocol="open-protocol", options={})
    records = [dataclasses.replace(r, headers=(("origin", b"tidb"),)) for r in generated.records]
    kafka, connect = str(tmp_path / "kafka"), f"{bucket}/connect"
    write_archive(records, kafka)
    by_partition = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    bytes_schema = fastavro.parse_schema(["null", "bytes"])
    header_schema = fastavro.parse_schema({"type": "array", "items": {
        "type": "record", "name": "ConnectDefault", "namespace": "io.confluent.connect.avro",
        "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": "string"}]}})

    def avro(schema, values):
        out = io.BytesIO()
        fastavro.writer(out, schema, values, codec="deflate")  # avro.codec=deflate
        return out.getvalue()

    for p, recs in by_partition.items():
        for start in range(0, len(recs), 30):  # flush.size=30
            chunk = recs[start:start + 30]
            stem = f"{connect}/topics/shop/partition={p}/shop+{p}+{chunk[0].offset:010d}"
            storage.write_bytes(f"{stem}.avro", avro(bytes_schema, [r.value for r in chunk]))
            storage.write_bytes(f"{stem}.keys.avro", avro(bytes_schema, [r.key for r in chunk]))
            storage.write_bytes(f"{stem}.headers.avro", avro(
                header_schema, [[{"key": k, "value": v.decode()} for k, v in r.headers] for r in chunk]))

    replay(spark, kafka, str(tmp_path / "from-kafka"), "open-protocol", {}, "kafka-records")
    manifest = replay(spark, connect, str(tmp_path / "from-connect"), "open-protocol", {}, "auto")
    truth = {k: v for k, v in generated.expected.items() if v}
    assert read_snapshot(str(tmp_path / "from-connect"), "open-protocol", {}) == truth
    assert read_snapshot(str(tmp_path / "from-kafka"), "open-protocol", {}) == truth
    assert manifest["layout"]["layout"] == "kafka-connect-s3"
    # offsets as the connector assigned them: the same partitions, records and watermarks as Kafka's
    assert [(s["topic"], s["partition"], s["records"], s["watermark"]) for s in manifest["partitions"]] == [
        (s["topic"], s["partition"], s["records"], s["watermark"])
        for s in orjson.loads(storage.read_bytes(str(tmp_path / "from-kafka" / "_manifest.json")))["partitions"]]


def csv_field(value: bytes | None) -> str:
    """TiCDC's csv formatValue with the default quote and null: NULL bare, text quoted."""
    return "\\N" if value is None else '"' + value.decode().replace('"', '""') + '"'


def write_customers_csv_sink(sink: str, events: list[dict], checkpoint: int) -> None:
    """`shop.customers`' row events as TiCDC's storage sink writes them with csv
    (include-commit-ts, output-old-value: an UPDATE is a D row and an I row, a key-changing one
    too): its table schema file, data files of 25 rows, the index file and the root metadata."""
    columns = ("id", "name", "note")
    storage.write_bytes(storage.join(sink, "shop/customers/meta/schema_1000_0000000000.json"), orjson.dumps({
        "Table": "customers", "Schema": "shop", "Version": 1, "TableVersion": 1000, "Query": "", "Type": 3,
        "TableColumns": [{"ColumnName": "id", "ColumnType": "INT", "ColumnPrecision": "11", "ColumnIsPk": "true"},
                         {"ColumnName": "name", "ColumnType": "VARCHAR", "ColumnPrecision": "64"},
                         {"ColumnName": "note", "ColumnType": "TEXT"}],
        "TableColumnsTotal": 3}))
    lines = []
    for e in events:
        if e["kind"] != Kind.ROW or e["table"] != "customers":
            continue

        def row(op, image, updated, e=e):
            values = {c["name"]: c["value"] for c in image}
            meta = [f'"{op}"', '"customers"', '"shop"', str(e["commit_ts"]), "true" if updated else "false"]
            return ",".join(meta + [csv_field(values[name]) for name in columns]).encode() + b"\r\n"

        if e["op"] == "update":
            lines += [row("D", e["before"], True), row("I", e["after"], True)]
        else:
            lines.append(row("I" if e["op"] == "insert" else "D", e["after"] or e["before"], False))
    directory = storage.join(sink, "shop/customers/1000")
    for n, start in enumerate(range(0, len(lines), 25), 1):
        storage.write_bytes(storage.join(directory, f"CDC{n:06d}.csv"), b"".join(lines[start:start + 25]))
    storage.write_bytes(storage.join(directory, "meta/CDC.index"), f"CDC{n:06d}.csv\n".encode())
    storage.write_bytes(storage.join(sink, "metadata"), b'{"checkpoint-ts":%d}' % checkpoint)


def test_storage_sink_csv_archive_replays_like_the_kafka_archive(spark, tmp_path):
    """csv with include-commit-ts and output-old-value: every UPDATE is a D row and an I row
    (a key-changing one too), the columns come from the table schema file."""
    generated = generate(transactions=40, partitions=2, seed=31, protocol="canal-json", options=CANAL, ddl_rate=0.0)
    kafka, sink = str(tmp_path / "kafka"), str(tmp_path / "sink")
    write_archive(generated.records, kafka)
    write_customers_csv_sink(sink, generated.events, generated.cut_ts)

    argv = ["--tables", "shop.customers"]
    run(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", kafka, "--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true",
         "--target-option", "enable-tidb-extension=true", "--output", str(tmp_path / "from-kafka"),
         "--emit", "snapshot", *argv])), spark=spark)
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", sink, "--protocol", "csv", "--protocol-option", "include-commit-ts=true",
         "--protocol-option", "output-old-value=true", "--target-protocol", "canal-json",
         "--target-option", "enable-tidb-extension=true", "--output", str(tmp_path / "from-sink"),
         "--emit", "snapshot", *argv])), spark=spark)
    truth = {k: v for k, v in generated.expected.items() if v and k[1] == "customers"}
    assert truth and read_snapshot(str(tmp_path / "from-sink"), "canal-json", CANAL) == truth
    assert read_snapshot(str(tmp_path / "from-kafka"), "canal-json", CANAL) == truth
    assert manifest["counts"]["quarantined"] == 0 and manifest["counts"]["pending"] > 0


def schema_file(database, table, version, query, columns, key) -> bytes:
    """A storage-sink table schema file (TableDefinition): type name upper case, the length or
    precision in ColumnPrecision."""
    def column(name, type_text):
        base, _, params = type_text.partition("(")
        doc = {"ColumnName": name, "ColumnType": base.upper()}
        if params:
            doc["ColumnPrecision"] = params.rstrip(")").split(",")[0]
        if name in key:
            doc["ColumnIsPk"] = "true"
        return doc

    return orjson.dumps({"Table": table, "Schema": database, "Version": 1, "TableVersion": version, "Query": query,
                         "Type": 3, "TableColumns": [column(n, t) for n, t in columns],
                         "TableColumnsTotal": len(columns)}, option=orjson.OPT_INDENT_2)


def test_storage_sink_schema_changes_come_from_its_schema_files(spark, tmp_path):
    """ADD / DROP COLUMN between table versions: the data files carry no DDL, the schema files
    do; the replay equals the Kafka archive of the same history (which carries the DDL) and the
    scenario's own state."""
    from .scenario import Scenario
    from .test_ddl_replay import archive

    s = Scenario("d")
    versions = []

    def version(ts):
        t = s.tables[("d", "t")]
        query = next(e["ddl_query"] for e in s.events if e["commit_ts"] == ts)
        versions.append((ts, query, list(t["columns"]), list(t["key"])))

    version(s.create_table("t", [("id", "int"), ("a", "varchar(10)"), ("b", "int")], key=["id"]))
    s.insert("t", id=1, a="one", b=10)
    s.insert("t", id=2, a="two", b=20)
    version(s.add_column("t", "c", "int", default="5"))  # rows before it read the default
    s.insert("t", id=3, a="three", b=30, c=33)
    s.update("t", (1,), a="uno")
    version(s.drop_column("t", "b"))
    s.insert("t", id=4, a="four", c=44)
    s.delete("t", (2,))

    sink = str(tmp_path / "sink")
    codec = get_codec("canal-json", CANAL)
    for ts, query, columns, key in versions:
        storage.write_bytes(storage.join(sink, f"d/t/meta/schema_{ts}_{ts % 10**10:010d}.json"),
                            schema_file("d", "t", ts, query, columns, key))
    by_version = defaultdict(list)
    for e in s.events:
        if e["kind"] == Kind.ROW:
            current = max(ts for ts, *_ in versions if ts < e["commit_ts"])
            by_version[current].append(b"".join(m.value for m in codec.encode([e], topic="t", partition=0)))
    for ts, lines in by_version.items():
        storage.write_bytes(storage.join(sink, f"d/t/{ts}/CDC000001.json"), b"".join(x + b"\r\n" for x in lines))
        storage.write_bytes(storage.join(sink, f"d/t/{ts}/meta/CDC.index"), b"CDC000001.json\n")
    storage.write_bytes(storage.join(sink, "metadata"), b'{"checkpoint-ts":%d}' % (s.ms << 18 | 1))
    archive(s, str(tmp_path / "kafka"))

    replay(spark, str(tmp_path / "kafka"), str(tmp_path / "from-kafka"), "canal-json", CANAL, "kafka-records")
    manifest = replay(spark, sink, str(tmp_path / "from-sink"), "canal-json", CANAL, "auto")
    assert manifest["layout"]["schema_changes"] == 2
    assert [d["query"] for d in manifest["ddl"]] == [q for _, q, *_ in versions[1:]]
    assert read_snapshot(str(tmp_path / "from-kafka"), "canal-json", CANAL) == s.state()
    assert read_snapshot(str(tmp_path / "from-sink"), "canal-json", CANAL) == s.state()
    assert not manifest.get("schema_conflicts"), manifest.get("schema_conflicts")


@pytest.mark.parametrize("emit", ["topics", "snapshot"])
def test_topics_written_as_a_storage_sink_replay_to_the_same_snapshot(spark, tmp_path, emit):
    """Closure: Kafka-record archive -> topics (or a snapshot) in TiCDC's storage-sink layout
    -> snapshot."""
    generated = generate(transactions=40, partitions=2, seed=37, protocol="canal-json", options=CANAL, ddl_rate=0.0)
    kafka, sink = str(tmp_path / "kafka"), str(tmp_path / "sink")
    write_archive(generated.records, kafka)
    argv = ["--source", kafka, "--protocol", "canal-json", "--output", sink, "--emit", emit,
            "--target-layout", "ticdc-storage", "--max-records-per-object", "20"]
    for key, value in CANAL.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    written = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    assert storage.read_bytes(storage.join(sink, "metadata")) == b'{"checkpoint-ts":%d}' % generated.cut_ts
    files = sorted(storage.relative(o.uri, sink) for o in storage.list_objects(sink)
                   if o.uri.endswith(".json") and "/meta/" not in o.uri and "_" not in o.uri.rsplit("/", 1)[-1][:1])
    assert files and all(ticdc_path(f) for f in files)
    first = files[0]
    index = storage.read_bytes(storage.join(sink, first.rsplit("/", 1)[0], "meta/CDC.index"))
    assert index.endswith(b".json\n") and storage.read_bytes(storage.join(sink, first)).endswith(b"}\r\n")
    assert written["layout"]["layout"] == "kafka-records"

    manifest = replay(spark, sink, str(tmp_path / "again"), "canal-json", CANAL, "auto")
    assert manifest["layout"]["layout"] == "ticdc-storage" and manifest["cut"]["commit_ts"] == generated.cut_ts
    assert read_snapshot(str(tmp_path / "again"), "canal-json", CANAL) == {
        k: v for k, v in generated.expected.items() if v}


def ticdc_path(rel: str) -> bool:
    from spark_apps.layouts.ticdc_storage import parse_data_path

    return parse_data_path(rel) is not None


def write_mid_stream_sink(sink: str, s, start_ts: int, versions: dict, partition_of=None) -> list[str]:
    """The scenario's row events after `start_ts` as TiCDC's storage sink writes them for a
    changefeed started on existing tables (tiflow/ticdc pkg/sink/cloudstorage path.go and
    table_definition.go): no CREATE TABLE anywhere; per table a schema file at the changefeed's
    start ts (Query "", Type 0: written from the table info, not from a DDL) and one per later
    DDL (its Query); data files `{table version}/[{partition id}/]{date}/CDC{index:06d}.json`
    (date-separator=day, the index restarting each day), two rows a file, canal-json lines
    ended by \\r\\n, each directory's meta/CDC.index naming its last file. `versions`:
    (database, table) -> [(table version, query, TableCol list)]. Returns the data files written."""
    from .storage_sink_files import schema_path, table_definition

    codec = get_codec("canal-json", CANAL)
    for (database, table), table_versions in versions.items():
        for ts, query, columns in table_versions:
            data = table_definition(database, table, ts, columns, query, 5 if query else 0)
            storage.write_bytes(storage.join(sink, schema_path(database, table, ts, data)), data)
    directories = defaultdict(list)
    for e in s.events:
        if e["kind"] != Kind.ROW or e["commit_ts"] <= start_ts:
            continue
        key = (e["database"], e["table"])
        version = max(ts for ts, *_ in versions[key] if ts < e["commit_ts"])
        day = "2026-01-01" if (e["commit_ts"] >> 18) - s.ms_start < 60_000 else "2026-01-02"
        partition = partition_of(e) if partition_of else None
        directory = "/".join(str(p) for p in (*key, version, partition, day) if p is not None)
        directories[directory].append(b"".join(m.value for m in codec.encode([e], topic="t", partition=0)))
    written = []
    for directory, lines in directories.items():
        files = [lines[i:i + 2] for i in range(0, len(lines), 2)]
        for index, chunk in enumerate(files, 1):
            name = storage.join(sink, directory, f"CDC{index:06d}.json")
            storage.write_bytes(name, b"".join(x + b"\r\n" for x in chunk))
            written.append(name)
        storage.write_bytes(storage.join(sink, directory, "meta/CDC.index"), f"CDC{len(files):06d}.json\n".encode())
    storage.write_bytes(storage.join(sink, "metadata"), b'{"checkpoint-ts":%d}' % (s.ms << 18 | 1))
    return written


def test_mid_stream_storage_sink_archive_with_year_and_bit_columns(spark, tmp_path):
    """A changefeed started on eight existing tables with YEAR and BIT columns, archived by the
    storage sink (schema files as table_definition.go writes them: `YEAR UNSIGNED`,
    `BIT UNSIGNED`; no CREATE TABLE; table versions, day directories, several files per
    directory, a partition separator): the replay gives exactly the rows, reports no holes on
    the complete archive, writes its manifest (offsets within 64 bits), gives the same
    offsets when run again, and names a data file missing from a directory."""
    from .scenario import Scenario
    from .storage_sink_files import table_col

    s = Scenario("shop")
    columns = [("id", "int"), ("y", "year"), ("flags", "bit(5)"), ("name", "varchar(20)")]
    cols = [table_col("id", "INT", precision=11, pk=True), table_col("y", "YEAR UNSIGNED", precision=4),
            table_col("flags", "BIT UNSIGNED", precision=5), table_col("name", "VARCHAR", precision=20)]
    tables = [f"t{i}" for i in range(8)]
    for table in tables:
        s.create_table(table, columns, key=["id"])
        s.insert(table, id=1, y="1999", flags="3", name="before")  # before the changefeed: not archived
    start = s._ts()  # the changefeed's start ts: every table's first table version
    s.ms_start = start >> 18
    for t in s.tables.values():  # rows from before the changefeed are in no file, nor in the snapshot
        t["rows"].clear()
    versions = {("shop", table): [(start, "", cols)] for table in tables}
    for n in range(2, 8):
        for table in tables:
            s.insert(table, id=n, y=str(2000 + n), flags=str(n % 32), name=f"{table}-{n}")
    s.update("t0", (2,), y="2155", flags="31")
    s.delete("t1", (3,))
    alter = s.add_column("t0", "note", "varchar(10)")
    versions[("shop", "t0")].append((alter, "ALTER TABLE `shop`.`t0` ADD COLUMN `note` varchar(10)",
                                     cols + [table_col("note", "VARCHAR", precision=10)]))
    s.ms += 60_000  # the next day's directories
    for n in range(8, 12):
        for table in tables:
            s.insert(table, id=n, y="1901" if n == 8 else str(2100 + n), flags=str(n), name=f"{table}-{n}",
                     **({"note": "new"} if table == "t0" else {}))
    s.update("t0", (8,), note="changed")
    sink = str(tmp_path / "sink")
    written = write_mid_stream_sink(sink, s, start, versions,
                                    partition_of=lambda e: 88 + int((e["after"] or e["before"])[0]["value"]) % 2
                                    if e["table"] == "t1" else None)
    assert any("/t1/" in w and "/89/2026-01-01/CDC000002.json" in w for w in written)

    manifest = replay(spark, sink, str(tmp_path / "out"), "canal-json", CANAL, "auto")
    truth = {k: v for k, v in s.state().items() if v}
    assert read_snapshot(str(tmp_path / "out"), "canal-json", CANAL) == truth
    assert truth[("shop", "t0")][(b"2",)]["y"] == b"2155" and truth[("shop", "t0")][(b"2",)]["flags"] == b"31"
    assert manifest["counts"]["quarantined"] == 0 and manifest["layout"]["schema_changes"] == 1
    assert manifest["gaps"] == {"count": 0, "missing_offsets": 0, "listed": []}
    assert not manifest.get("schema_conflicts"), manifest.get("schema_conflicts")
    assert all(0 <= p["min_offset"] <= p["max_offset"] < 2 ** 63 for p in manifest["partitions"])

    again = replay(spark, sink, str(tmp_path / "again"), "canal-json", CANAL, "auto")
    assert again["partitions"] == manifest["partitions"]

    missing = next(w for w in written if w.endswith("/t2/%d/2026-01-01/CDC000002.json" % start))
    storage.delete(missing)
    holed = replay(spark, sink, str(tmp_path / "holed"), "canal-json", CANAL, "auto")
    assert holed["gaps"]["count"] == 1 and holed["layout"]["missing_files"] == 1
    assert holed["layout"]["missing_objects"] == [missing]
    [hole] = holed["gaps"]["listed"]
    assert hole["topic"] == "shop.t2"
