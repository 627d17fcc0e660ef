"""A replay's re-encoded oceanbase-avro snapshot and topics are the same bytes whether the compiled
encoder writes the row events' records or the Python codec does (CDC_REPLAY_NATIVE_ENCODE): the
record ids are numbered by the codec's `frame` either way, with DDL (Python) between compiled
rows, and the snapshot's rows of tables with ENUM/SET labels (which the projection may fill,
and this protocol encodes) prepared before either encoder reads them."""

from __future__ import annotations

import pytest

from spark_apps import native_decode
from spark_apps.generate import generate

from .test_native_encode_replay import assert_every_row_compiled, replayed_by_switch, writer_events, written_by_switch

pytestmark = [pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "OceanBaseAvroEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates OceanBaseAvroEncoder'}")]


@pytest.mark.spark
@pytest.mark.parametrize("emit,extra", [
    ("snapshot", ["--target-option", "avro-framing=confluent", "--target-option", "time-zone=+08:00"]),
    ("topics", ["--target-option", "timestamp-unit=ms"]),
])
def test_the_compiled_and_python_encoders_write_the_same_objects(spark, tmp_path, monkeypatch, emit, extra):
    # oceanbase-avro in and out: DDL adds and drops columns, a keyless table, three partitions
    generated = generate(transactions=150, partitions=3, seed=37, ddl_rate=0.05, keyless=True,
                         protocol="oceanbase-avro")
    assert any(e["kind"] == "ddl" for e in generated.events)
    written = replayed_by_switch(spark, tmp_path, monkeypatch, generated,
                                 ["--protocol", "oceanbase-avro", "--emit", emit, "--target-partitions", "3", *extra])
    assert written["1"] and written["1"] == written["0"]


@pytest.mark.parametrize("emit", ["snapshot", "topics"])
def test_the_writer_encodes_rows_from_arrow_alike(tmp_path, monkeypatch, emit):
    """The writer's own input (tests/test_native_encode_replay.py's: projected and rendered
    rows, DDL and a watermark between them) written to the same objects, every row compiled."""
    events = writer_events()
    written, stats = written_by_switch(tmp_path, monkeypatch, events, emit, "oceanbase-avro", {}, 7)
    assert written["1"][0] and written["1"] == written["0"]
    assert_every_row_compiled(events, stats)  # most straight from the batch


def test_the_snapshot_fills_enum_and_set_labels_before_the_compiled_encoder_reads_them(tmp_path, monkeypatch):
    """The projection fills the label of an ENUM/SET value from the DDL; oceanbase-avro writes
    a labelled value as an EnumSetValue, so those rows are prepared before the compiled encoder
    reads them (`Codec.encodes_labels`): without that, they would be written as bytes."""
    from cdc_codecs.events import Op
    from cdc_codecs.oceanbase_avro import OceanBaseAvroCodec

    from . import test_native_encode_replay as writer

    monkeypatch.setattr(writer, "DDL", [*writer.DDL, (13, "CREATE TABLE en (id INT PRIMARY KEY, e ENUM('a','b'), "
                                                          "s SET('x','y'))")])
    events = writer.writer_events() + [
        writer._row(40 + i, "en", [("id", str(i).encode(), "int", writer.PK), ("e", b"2", "enum('a','b')", 0),
                                   ("s", str(i % 4).encode(), "set('x','y')", 0)], ["id"],
                    op=Op.DELETE if i % 3 == 2 else Op.INSERT) for i in range(12)]
    for event in events[-12::2]:  # half of them with their labels: those need no `prepare` for them
        for c in event["after"] or event["before"]:
            c["label"] = {"e": "b", "s": ["", "x", "y", "x,y"][int(c["value"]) % 4]}.get(c["name"])
    written, stats = written_by_switch(tmp_path / "on", monkeypatch, events, "snapshot", "oceanbase-avro", {}, 7)
    assert written["1"][0] and written["1"] == written["0"]
    assert stats["1"].native == len(events) - len(writer.DDL)  # every row compiled, the en rows after `prepare`
    monkeypatch.setattr(OceanBaseAvroCodec, "encodes_labels", False)
    unlabelled, _ = written_by_switch(tmp_path / "off", monkeypatch, events, "snapshot", "oceanbase-avro", {}, 7)
    assert unlabelled["1"] != unlabelled["0"]
