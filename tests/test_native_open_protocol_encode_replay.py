"""A replay's re-encoded open-protocol snapshot and topics are the same bytes whether the compiled
encoder writes the row events' key and value JSON or the Python codec does
(CDC_REPLAY_NATIVE_ENCODE): the batching into messages (max-batch-size, max-message-bytes) is
the codec's either way, with DDL and resolved events (Python) between compiled rows."""

from __future__ import annotations

import pytest

from spark_apps import native_decode
from spark_apps.generate import generate

from .test_native_encode_replay import assert_every_row_compiled, replayed_by_switch, writer_events, written_by_switch

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
    written = replayed_by_switch(spark, tmp_path, monkeypatch, generated,
                                 ["--protocol", "open-protocol", "--emit", emit, "--target-partitions", "3", *extra])
    assert written["1"] and written["1"] == written["0"]


@pytest.mark.parametrize("emit", ["snapshot", "topics"])
@pytest.mark.parametrize("options", [{"max-batch-size": "3"}, {"max-message-bytes": "700"}])
def test_the_writer_encodes_rows_from_arrow_and_batches_them_alike(tmp_path, monkeypatch, emit, options):
    """The writer's own input (tests/test_native_encode_replay.py's: projected and rendered
    rows, DDL and a watermark between them), framed into the same messages and objects, with
    the same per-object event counts."""
    events = writer_events()
    written, stats = written_by_switch(tmp_path, monkeypatch, events, emit, "open-protocol", options, 7)
    assert written["1"][0] and written["1"] == written["0"]
    assert_every_row_compiled(events, stats)  # most straight from the batch
