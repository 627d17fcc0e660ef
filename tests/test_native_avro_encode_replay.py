"""A replay's re-encoded TiCDC Avro snapshot and topics are the same bytes, and leave the same
schema registry behind, whether the compiled encoder writes the rows' Avro bodies or the Python
codec does (CDC_REPLAY_NATIVE_ENCODE): the schemas are registered in the stream's order either
way (each switch writes to a fresh registry), with DDL and watermarks (Python) between compiled
rows."""

from __future__ import annotations

import pytest

from spark_apps import native_decode
from spark_apps.generate import generate

from .codecs.test_native_avro_encode import registry
from .test_native_encode_replay import assert_every_row_compiled, replayed_by_switch, writer_events, written_by_switch

pytestmark = [pytest.mark.skipif(
    native_decode.cdc_replay_native is None or not hasattr(native_decode.cdc_replay_native, "AvroEncoder"),
    reason=f"{native_decode.UNAVAILABLE or 'cdc_replay_native predates AvroEncoder'}")]


@pytest.mark.spark
@pytest.mark.parametrize("emit", ["snapshot", "topics"])
def test_the_compiled_and_python_encoders_write_the_same_objects(spark, tmp_path, monkeypatch, emit):
    # avro in and out: DDL adds and drops columns (a keyless table cannot send its DELETEs)
    source_options = {"schema-registry": f"file://{tmp_path}/source-registry", "enable-tidb-extension": "true",
                      "avro-enable-watermark": "true"}
    generated = generate(transactions=200, partitions=3, seed=37, ddl_rate=0.05, protocol="avro",
                         options=source_options)
    assert any(e["kind"] == "ddl" for e in generated.events)
    # one output partition (the time of one writer task); several register in reading order
    # before the writers start: tests/test_avro_registry_order.py

    def args(switch):
        argv = ["--protocol", "avro", "--emit", emit, "--target-partitions", "1",
                "--target-option", f"schema-registry=file://{tmp_path}/registry{switch}",
                "--target-option", "enable-tidb-extension=true"]
        for key, value in source_options.items():
            argv += ["--protocol-option", f"{key}={value}"]
        return argv

    written = replayed_by_switch(spark, tmp_path, monkeypatch, generated, args)
    registries = {switch: registry(f"{tmp_path}/registry{switch}") for switch in written}
    assert written["1"] and registries["1"] and (written["1"], registries["1"]) == (written["0"], registries["0"])


@pytest.mark.parametrize("emit", ["snapshot", "topics"])
@pytest.mark.parametrize("options", [{}, {"enable-tidb-extension": "true", "avro-enable-watermark": "true"}])
def test_the_writer_encodes_rows_from_arrow_and_registers_alike(tmp_path, monkeypatch, emit, options):
    """The writer's own input (tests/test_native_encode_replay.py's: projected and rendered
    rows, DDL and a watermark between them): the same objects, per-object counts and registry."""
    events = writer_events()

    def options_for(switch):
        return {**options, "schema-registry": f"file://{tmp_path}/registry{switch}"}

    written, stats = written_by_switch(tmp_path, monkeypatch, events, emit, "avro", options_for, 7)
    assert written["1"][0] and written["1"] == written["0"]
    assert registry(f"{tmp_path}/registry1") == registry(f"{tmp_path}/registry0")
    assert_every_row_compiled(events, stats)  # most straight from the batch
