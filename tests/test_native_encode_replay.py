"""A replay's re-encoded snapshot and topics (canal-json, with DDL) are the same bytes whether
the compiled encoder writes the row messages or the Python codec does (CDC_REPLAY_NATIVE_ENCODE)."""

from __future__ import annotations

import pytest

from spark_apps import native_decode, native_encode, storage
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

pytestmark = [pytest.mark.spark, pytest.mark.skipif(native_decode.cdc_replay_native is None,
                                                    reason=f"{native_decode.UNAVAILABLE}")]
TIDB = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]


def objects(output: str) -> dict[str, bytes]:
    """The output's data objects (the manifest holds run times) by relative path."""
    return {storage.relative(info.uri, output): storage.read_bytes(info.uri)
            for info in storage.list_objects(output) if info.uri.endswith(".jsonl.gz")}


@pytest.mark.parametrize("emit,extra", [("snapshot", []), ("topics", ["--target-option", "content-compatible=true"])])
def test_the_compiled_and_python_encoders_write_the_same_objects(spark, tmp_path, monkeypatch, emit, extra):
    generated = generate(transactions=200, partitions=3, seed=29, ddl_rate=0.05)
    assert any(e["kind"] == "ddl" for e in generated.events)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    written = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(native_encode.ENV, switch)
        output = str(tmp_path / f"out{switch}")
        argv = ["--source", source, "--protocol", "canal-json", "--output", output,
                "--emit", emit, *TIDB, *extra]
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        written[switch] = objects(output)
    assert written["1"] and written["1"] == written["0"]
