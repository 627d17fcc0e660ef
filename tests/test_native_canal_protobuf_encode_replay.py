"""A replay's re-encoded canal-protobuf snapshot and topics are the same bytes whether the
compiled encoder writes the row entries' pieces or the Python codec does
(CDC_REPLAY_NATIVE_ENCODE): the grouping of rows into entries and of entries into Packets is
the codec's `frame` either way, with DDL and watermarks (Python) between compiled rows."""

from __future__ import annotations

import pytest

from cdc_codecs.events import Kind
from spark_apps import native_decode, native_encode
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .test_native_encode_replay import DDL, objects, writer_events, written_by_switch

pytestmark = [pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "CanalProtobufEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates CanalProtobufEncoder'}")]


@pytest.mark.spark
@pytest.mark.parametrize("emit,extra", [
    ("snapshot", []),
    ("topics", ["--target-option", "packet-form=raw", "--target-option", "source-timezone=+08:00"]),
])
def test_the_compiled_and_python_encoders_write_the_same_objects(spark, tmp_path, monkeypatch, emit, extra):
    # canal-protobuf in and out: DDL adds and drops columns, a keyless table, three partitions
    generated = generate(transactions=200, partitions=3, seed=31, ddl_rate=0.05, keyless=True,
                         protocol="canal-protobuf")
    assert any(e["kind"] == "ddl" for e in generated.events)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    written = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        output = str(tmp_path / f"out{switch}")
        argv = ["--source", source, "--protocol", "canal-protobuf", "--output", output, "--emit", emit,
                "--target-partitions", "3", *extra]
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        written[switch] = objects(output)
    assert written["1"] and written["1"] == written["0"]


@pytest.mark.parametrize("emit", ["snapshot", "topics"])
def test_the_writer_encodes_rows_from_arrow_and_frames_them_alike(tmp_path, monkeypatch, emit):
    """The writer's own input (tests/test_native_encode_replay.py's: projected and rendered
    rows, DDL and a watermark between them), framed into the same messages and objects, with
    the same per-object event counts."""
    events = writer_events()
    written, stats = written_by_switch(tmp_path, monkeypatch, events, emit, "canal-protobuf", {}, 7)
    assert written["1"][0] and written["1"] == written["0"]
    on, off = stats["1"], stats["0"]
    total = len(events) + 2 * sum(e["kind"] == Kind.DDL for e in events) + 1
    nonrow = 3 * len(DDL) + 1
    assert off.native == 0 and on.native + on.python == total
    assert on.python == nonrow and on.arrow  # every row compiled, most straight from the batch
