"""A replay's re-encoded open-protocol snapshot and topics are the same bytes whether the compiled
encoder writes the row events' key and value JSON or the Python codec does
(CDC_REPLAY_NATIVE_ENCODE): the batching into messages (max-batch-size, max-message-bytes) is
the codec's either way, with DDL and resolved events (Python) between compiled rows."""

from __future__ import annotations

import pytest

from cdc_codecs.events import Kind
from spark_apps import native_decode, native_encode
from spark_apps.ddl import SchemaHistory
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.outputs.kafka_records import write_topics_fn
from spark_apps.replay import run
from spark_apps.snapshot import precision_from_history, projector

from .test_native_encode_replay import DDL, objects, writer_batches, writer_events

pytestmark = [pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "OpenProtocolEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates OpenProtocolEncoder'}")]


@pytest.mark.spark
@pytest.mark.parametrize("emit,extra", [
    ("snapshot", ["--target-option", "max-batch-size=3"]),
    # (delete-only-output-handle-key-columns refuses the keyless table's deletes: the codec tests)
    ("topics", ["--target-option", "only-output-updated-columns=true", "--target-option", "max-message-bytes=1500",
                "--target-option", "large-message-handle-compression=lz4"]),
])
def test_the_compiled_and_python_encoders_write_the_same_objects(spark, tmp_path, monkeypatch, emit, extra):
    # open-protocol in and out: DDL adds and drops columns, a keyless table, three partitions
    generated = generate(transactions=200, partitions=3, seed=31, ddl_rate=0.05, keyless=True,
                         protocol="open-protocol")
    assert any(e["kind"] == "ddl" for e in generated.events)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    written = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        output = str(tmp_path / f"out{switch}")
        argv = ["--source", source, "--protocol", "open-protocol", "--output", output, "--emit", emit,
                "--target-partitions", "3", *extra]
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        written[switch] = objects(output)
    assert written["1"] and written["1"] == written["0"]


@pytest.mark.parametrize("emit", ["snapshot", "topics"])
@pytest.mark.parametrize("options", [{"max-batch-size": "3"}, {"max-message-bytes": "700"}])
def test_the_writer_encodes_rows_from_arrow_and_batches_them_alike(tmp_path, monkeypatch, emit, options):
    """The writer's own input (tests/test_native_encode_replay.py's: projected and rendered
    rows, DDL and a watermark between them), framed into the same messages and objects, with
    the same per-object event counts."""
    history = SchemaHistory()
    for ts, query in DDL:
        history.apply(query, [ts], "d")
    if emit == "snapshot":
        prepare = projector({(s.database.lower(), s.name.lower()): s for s in history.tables.values()
                             if s.columns_known})
    else:
        prepare = precision_from_history(history)
    events = writer_events()
    written, stats = {}, {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        base = str(tmp_path / switch)
        fn = write_topics_fn("open-protocol", options, base, 7, prepare)
        rows = [r for b in fn(iter(writer_batches(events))) for r in b.to_pylist()]
        stats[switch] = fn.counts
        written[switch] = (objects(base), [{k: v for k, v in r.items() if k != "uri"} for r in rows])
    assert written["1"][0] and written["1"] == written["0"]
    on, off = stats["1"], stats["0"]
    total = len(events) + 2 * sum(e["kind"] == Kind.DDL for e in events) + 1
    nonrow = 3 * len(DDL) + 1
    assert off.native == 0 and on.native + on.python == total
    assert on.python == nonrow and on.arrow  # every row compiled, most straight from the batch
