"""Limits per message and per object (issue 28 point 4, docs/reliability.md "Limits"):
columns per row image, rows per message, decompressed bytes per object (a ratio to its stored
size), bytes per line. A message or line beyond a limit is one quarantine row naming it (stage
`limit`), one at the limit is decoded, and the object goes on after it. The archives are built
here as TiCDC writes canal-json (with the TiDB extension) and as our archive lays out records."""

from __future__ import annotations

import base64
import gzip
import os
import time
import zlib

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cdc_codecs.archive import format_record, object_name
from cdc_codecs.base import KafkaRecord
from spark_apps import archive_io, native_decode, storage
from spark_apps.storage import ReadSettings

TIDB = {"enable-tidb-extension": "true"}


def canal(columns: int, rows: int, first_id: int = 0) -> bytes:
    """A TiCDC canal-json INSERT of `rows` rows of `columns` int columns (c0 the key)."""
    names = [f"c{i}" for i in range(columns)]
    return orjson.dumps({
        "id": 0, "database": "db", "table": "t", "pkNames": ["c0"], "isDdl": False, "type": "INSERT",
        "es": 1767225600000, "ts": 1767225600001, "sql": "", "sqlType": {n: 4 for n in names},
        "mysqlType": {n: "int" for n in names}, "old": None,
        "data": [{n: str(first_id + r) for n in names} for r in range(rows)],
        "_tidb": {"commitTs": (1_000 << 18) + first_id}})


def archive_object(folder, values: list[bytes], name=None, compress=gzip.compress) -> str:
    lines = b"\n".join(format_record(KafkaRecord("t", 0, i, 1767225600000, None, v)) for i, v in enumerate(values))
    uri = os.path.join(str(folder), name or object_name("t", 0, 0))
    storage.write_bytes(uri, compress(lines + b"\n"))
    return uri


@pytest.fixture
def limits():
    """Set the limits of this process (what the driver and each task do from the options)."""
    before = storage.settings()

    def set_(**values):
        storage.configure(ReadSettings(**values))

    yield set_
    storage.configure(before)


def decode(uri: str, decoder: str, monkeypatch) -> pa.Table:
    """One planned object through the decode task's function (as Spark runs it), in process."""
    monkeypatch.setenv(native_decode.ENV, decoder)
    fn = archive_io.decode_objects_fn("canal-json", TIDB)
    batch = pa.RecordBatch.from_pydict({"uri": [uri], "size": [os.path.getsize(uri)]})
    return pa.Table.from_batches(list(fn(iter([batch]))))


def quarantined(table: pa.Table) -> list[dict]:
    return table.filter(pc.equal(table["kind"], "quarantine")).select(
        ["object", "line", "topic", "partition", "offset", "error_stage", "error"]).to_pylist()


def rows_per_line(table: pa.Table) -> dict[int, int]:
    rows = table.filter(pc.equal(table["kind"], "row"))
    from collections import Counter

    return dict(Counter(rows["line"].to_pylist()))


@pytest.mark.parametrize("decoder", ["python", "native"])
def test_a_message_beyond_a_limit_is_quarantined_one_at_it_is_decoded(tmp_path, limits, monkeypatch, decoder):
    """Columns 50 and rows 100 allowed: 50 columns and 100 rows are decoded, 51 and 101 are
    one quarantine row each (stage, object, line, offset, protocol, the count and the option),
    and the messages after them are decoded."""
    limits(max_columns=50, max_rows=100)
    uri = archive_object(tmp_path, [canal(3, 1), canal(50, 1, 1), canal(51, 1, 2), canal(3, 100, 10),
                                    canal(3, 101, 200), canal(3, 1, 400)])
    out = decode(uri, decoder, monkeypatch)
    assert rows_per_line(out) == {1: 1, 2: 1, 4: 100, 6: 1}
    wide = out.filter(pc.equal(out["line"], 2))["after"][0].as_py()
    assert len(wide) == 50
    q = quarantined(out)
    assert [(r["line"], r["offset"], r["error_stage"]) for r in q] == [(3, 2, "limit"), (5, 4, "limit")]
    assert all(r["object"] == uri and r["topic"] == "t" and r["partition"] == 0 for r in q)
    assert q[0]["error"].startswith("canal-json: columns in a row image 51, over the limit of 50 (--max-columns)")
    assert q[1]["error"].startswith("canal-json: rows in the message 101, over the limit of 100 (--max-rows)")


@pytest.mark.parametrize("decoder", ["python", "native"])
def test_messages_at_the_default_limits_are_decoded_in_seconds_and_far_beyond_them_quarantined_at_once(
        tmp_path, monkeypatch, decoder):
    """At the defaults (4,096 columns, 100,000 rows) a message at each limit is decoded in
    seconds; one of 200,000 columns or 1,000,000 rows is quarantined without being decoded
    (the compiled decoder's cost grows faster than the column count: 200,000 columns would hold
    it for about half a minute)."""
    assert (storage.settings().max_columns, storage.settings().max_rows) == (4096, 100_000)
    uri = archive_object(tmp_path, [canal(4096, 1), canal(3, 100_000), canal(200_000, 1), canal(2, 1_000_000),
                                    canal(3, 1, 9)])
    started = time.monotonic()
    out = decode(uri, decoder, monkeypatch)
    took = time.monotonic() - started
    assert rows_per_line(out) == {1: 1, 2: 100_000, 5: 1}
    assert [(r["line"], r["error_stage"]) for r in quarantined(out)] == [(3, "limit"), (4, "limit")]
    assert took < 60, took  # seconds on a quiet machine (bench/limits.py measures it)


@pytest.mark.parametrize("decoder", ["python", "native"])
def test_a_line_beyond_the_limit_is_quarantined_without_being_held(tmp_path, limits, monkeypatch, decoder):
    """--max-line-bytes 20000: a 300 KB line (its record's value padded) is one quarantine row
    with its coordinates and its head; the lines before and after it are decoded."""
    limits(max_line_bytes=20_000)
    padded = orjson.loads(canal(3, 1, 5))
    padded["sql"] = "x" * 300_000
    uri = archive_object(tmp_path, [canal(3, 1), orjson.dumps(padded), canal(3, 1, 9)])
    out = decode(uri, decoder, monkeypatch)
    assert rows_per_line(out) == {1: 1, 3: 1}
    (q,) = quarantined(out)
    assert (q["line"], q["topic"], q["partition"], q["offset"], q["error_stage"]) == (2, "t", 0, 1, "limit")
    assert "bytes, over the limit of 20,000 bytes per line (--max-line-bytes)" in q["error"]


def _bomb(compress_stream, good: list[bytes], blank_mb: int) -> bytes:
    """Good records, then `blank_mb` MiB of blank lines, then one more record: a small object
    that inflates hundreds of times (built in pieces, never held decompressed)."""
    lines = b"\n".join(format_record(KafkaRecord("t", 0, i, 0, None, v)) for i, v in enumerate(good)) + b"\n"
    after = format_record(KafkaRecord("t", 0, len(good), 0, None, canal(3, 1, 99))) + b"\n"
    return compress_stream([lines, *([b"\n" * (1 << 20)] * blank_mb), after])


def _gzip_stream(pieces):
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(c.compress(p) for p in pieces) + c.flush()


def _zstd_stream(pieces):
    import zstandard

    c = zstandard.ZstdCompressor(level=19).compressobj()
    return b"".join(c.compress(p) for p in pieces) + c.flush()


@pytest.mark.parametrize("ext,stream", [(".gz", _gzip_stream), (".zst", _zstd_stream)], ids=["gzip", "zstd"])
@pytest.mark.parametrize("decoder", ["python", "native"])
def test_a_decompression_bomb_stops_at_the_ratio(tmp_path, monkeypatch, decoder, ext, stream):
    """A gzip / zstd object of a few hundred KB that inflates to 256 MiB: the records before the
    ratio is passed are decoded, then one quarantine row says where the object was stopped and
    why; the rest of it is not read."""
    data = _bomb(stream, [canal(3, 1, i) for i in range(5)], 256)
    uri = os.path.join(str(tmp_path), object_name("t", 0, 0).replace(".gz", ext))
    storage.write_bytes(uri, data)
    limit = max(100 * len(data), storage.INFLATE_FLOOR)
    assert 256 << 20 > limit  # the object would pass the ratio
    started = time.monotonic()
    out = decode(uri, decoder, monkeypatch)
    assert time.monotonic() - started < 30
    assert rows_per_line(out) == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    (q,) = quarantined(out)
    assert q["error_stage"] == "limit" and q["object"] == uri and q["offset"] is None
    assert f"decompresses to more than {limit:,} bytes, 100 times its {len(data):,} stored bytes " \
           "(--max-inflate-ratio); the rest of the object is not read" in q["error"]
    assert "last good record t/0 offset 4" in q["error"]


def test_ordinary_objects_are_far_below_the_ratio(tmp_path):
    """The default ratio leaves real archives alone: 3,000 generated records, gzip and zstd
    at their highest levels, inflate well under 100 times."""
    import zstandard

    from spark_apps.generate import generate

    lines = b"\n".join(format_record(r) for r in generate(transactions=1000, partitions=1, seed=3).records) + b"\n"
    for packed in (gzip.compress(lines, 9), zstandard.ZstdCompressor(level=19).compress(lines)):
        assert len(lines) / len(packed) < 25


def test_the_limits_travel_with_the_request_and_are_checked(tmp_path):
    from spark_apps import contract
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import ReplayError, validate

    def args(*extra):
        return ReplayArgs.from_namespace(parser().parse_args(
            ["--source", str(tmp_path / "a"), "--protocol", "canal-json", "--output", str(tmp_path / "b"),
             "--emit", "snapshot", *extra]))

    given = args("--max-columns", "10", "--max-rows", "20", "--max-inflate-ratio", "7.5", "--max-line-bytes", "1000")
    assert contract.parse(contract.to_argv(given)) == given
    settings = given.read_settings()
    assert (settings.max_columns, settings.max_rows, settings.max_inflate_ratio, settings.max_line_bytes) == \
        (10, 20, 7.5, 1000)
    assert "--max-columns" not in contract.to_argv(args())  # the defaults are not rendered
    (tmp_path / "a").mkdir()
    with pytest.raises(ReplayError, match="--max-rows must be at least 1, got 0"):
        validate(args("--max-rows", "0"))
    storage.configure(ReadSettings())


@pytest.mark.spark
def test_a_replay_quarantines_what_is_beyond_the_limits_and_completes(spark, tmp_path):
    """A Spark replay with small limits: every message beyond one is a quarantine row of the
    run (reason, stage, object, offset, protocol), the others are applied, counts reconcile."""
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    source = tmp_path / "archive"
    archive_object(source, [canal(3, 1), canal(20, 1, 1), canal(21, 1, 2), canal(3, 30, 10), canal(3, 31, 100),
                            canal(3, 1, 200)])
    argv = ["--source", str(source), "--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true",
            "--output", str(tmp_path / "out"), "--emit", "snapshot", "--max-bad-records", "10",
            "--max-columns", "20", "--max-rows", "30"]
    try:
        manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    finally:
        storage.configure(ReadSettings())
    assert manifest["counts"]["reconciled"], manifest["counts"]
    assert manifest["quarantine"]["records"] == 2
    docs = [orjson.loads(line) for o in manifest["quarantine"]["objects"]
            for line in gzip.decompress(storage.read_bytes(o["uri"])).splitlines()]
    got = sorted((d["offset"], d["error_stage"], d["protocol"], d["error"].split(";")[0]) for d in docs)
    assert got == [(2, "limit", "canal-json", "canal-json: columns in a row image 21, over the limit of 20 "
                                              "(--max-columns)"),
                   (4, "limit", "canal-json", "canal-json: rows in the message 31, over the limit of 30 (--max-rows)")]


def test_a_kafka_connect_s3_json_line_beyond_the_limit_is_quarantined_by_the_limits_name(tmp_path, limits):
    """The Kafka Connect S3 sink's JSON format (one Jackson value per line, ByteArrayConverter
    bytes as base64): a line over --max-line-bytes is one quarantine row naming the limit, with
    the record's topic, partition and offset (the file's first offset + its place); the records
    around it keep their offsets and their keys."""
    from spark_apps import layouts

    limits(max_line_bytes=20_000)
    values = [canal(3, 1), canal(3, 1, 5), canal(3, 1, 9)]
    values[1] = values[1] + b" " * 40_000  # a JSON document padded past the limit
    folder = tmp_path / "topics" / "cdc.shop" / "partition=3"
    folder.mkdir(parents=True)
    (folder / "cdc.shop+3+0000000040.json").write_bytes(
        b"".join(orjson.dumps(base64.b64encode(v).decode()) + b"\n" for v in values))
    plan = layouts.plan(str(tmp_path), "kafka-connect-s3", protocol="canal-json")
    (it,) = plan.items
    got = list(layouts.read(it.uri, it.params))
    records = [g for g in got if isinstance(g, tuple)]
    (q,) = [g for g in got if isinstance(g, dict)]
    assert [(r.offset, r.value) for r, _ in records] == [(40, values[0]), (42, values[2])]
    assert (q["topic"], q["partition"], q["offset"], q["error_stage"]) == ("cdc.shop", 3, 41, "limit")
    assert "over the limit of 20,000 bytes per line (--max-line-bytes)" in q["error"]
