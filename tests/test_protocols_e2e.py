"""End to end per protocol: a generated history archived in protocol P, replayed to a
snapshot in P, equals the generator's state; and re-encoded topics replay to the same
snapshot (closure). Protocols without watermarks (Canal, OceanBase) cut at the archive's end."""

from __future__ import annotations

import pytest

import cdc_codecs
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

pytestmark = pytest.mark.spark


def options_for(protocol: str, tmp_path) -> dict:
    return {
        "canal-json": {"enable-tidb-extension": "true"},
        "avro": {"schema-registry": f"file://{tmp_path}/registry", "enable-tidb-extension": "true",
                 "avro-enable-watermark": "true"},
    }.get(protocol, {})


def replay(spark, protocol, options, source, output, emit="snapshot"):
    argv = ["--source", source, "--protocol", protocol, "--output", output, "--emit", emit]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


@pytest.mark.parametrize("protocol", cdc_codecs.protocols())
def test_snapshot_and_topics_closure(spark, protocol, tmp_path):
    options = options_for(protocol, tmp_path)
    generated = generate(transactions=120, partitions=3, seed=17, protocol=protocol, options=options)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    manifest = replay(spark, protocol, options, source, str(tmp_path / "snapshot"))
    has_watermarks = any(p["watermark"] is not None for p in manifest["partitions"])
    truth = generated.expected if has_watermarks else generated.final
    truth = {k: v for k, v in truth.items() if v}
    assert manifest["counts"]["reconciled"] and manifest["counts"]["duplicate"] > 0
    assert read_snapshot(str(tmp_path / "snapshot"), protocol, options) == truth

    topics = str(tmp_path / "topics")
    replay(spark, protocol, options, source, topics, emit="topics")
    replay(spark, protocol, options, topics, str(tmp_path / "again"))
    assert read_snapshot(str(tmp_path / "again"), protocol, options) == truth
