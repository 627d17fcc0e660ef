"""Property: for random histories (seeds, partition counts, redelivery rates, DDL rates, split
or unsplit key updates, protocols, a cut anywhere), the Spark replay equals the reference
replayer in tests/reference.py, which shares no code with it."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .reference import reference_state

# the reference properties also cover Spark's generated code (the session's default is interpreted)
pytestmark = [pytest.mark.spark, pytest.mark.generated_code]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 4),
    duplicate_rate=st.sampled_from([0.0, 0.1, 0.3]),
    ddl_rate=st.sampled_from([0.0, 0.05]),
    split=st.booleans(),
    protocol=st.sampled_from(["canal-json", "open-protocol", "craft"]),
    cut_fraction=st.floats(0.2, 1.0),
)
def test_spark_replay_equals_the_reference(spark, seed, partitions, duplicate_rate, ddl_rate, split, protocol,
                                           cut_fraction):
    options = {"enable-tidb-extension": "true"} if protocol == "canal-json" else {}
    generated = generate(transactions=80, partitions=partitions, seed=seed, duplicate_rate=duplicate_rate,
                         ddl_rate=ddl_rate, split_key_updates=split, protocol=protocol, options=options)
    stamps = sorted({e["commit_ts"] for e in generated.events if e["commit_ts"] <= generated.cut_ts})
    as_of = stamps[min(len(stamps) - 1, int(len(stamps) * cut_fraction))]
    with tempfile.TemporaryDirectory() as workdir:
        write_archive(generated.records, f"{workdir}/archive", records_per_object=40)
        argv = ["--source", f"{workdir}/archive", "--protocol", protocol, "--output", f"{workdir}/out",
                "--emit", "snapshot", "--as-of", str(as_of)]
        for key, value in options.items():
            argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
        manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        assert manifest["counts"]["reconciled"]
        assert read_snapshot(f"{workdir}/out", protocol, options) == reference_state(generated.events, as_of)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    duplicate_rate=st.sampled_from([0.0, 0.2]),
    protocol=st.sampled_from(["canal-json", "open-protocol", "craft", "avro"]),
    with_schema=st.booleans(),
    cut_fraction=st.floats(0.2, 1.0),
)
def test_mid_stream_replay_equals_the_reference(spark, seed, partitions, duplicate_rate, protocol, with_schema,
                                                cut_fraction):
    """Archives that start after the tables exist (no DDL, keys first changed by an UPDATE or
    a DELETE, partitions at arbitrary offsets), with or without --schema: the snapshot equals
    the reference replayer's state, which holds the rows the archive changed."""
    with tempfile.TemporaryDirectory() as workdir:
        options = {"canal-json": {"enable-tidb-extension": "true"},
                   "avro": {"schema-registry": f"file://{workdir}/registry", "enable-tidb-extension": "true",
                            "avro-enable-watermark": "true"}}.get(protocol, {})
        generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=duplicate_rate,
                             protocol=protocol, options=options, mid_stream=True)
        stamps = sorted({e["commit_ts"] for e in generated.events if e["commit_ts"] <= generated.cut_ts})
        as_of = stamps[min(len(stamps) - 1, int(len(stamps) * cut_fraction))]
        write_archive(generated.records, f"{workdir}/archive", records_per_object=40)
        argv = ["--source", f"{workdir}/archive", "--protocol", protocol, "--output", f"{workdir}/out",
                "--emit", "snapshot", "--as-of", str(as_of)]
        if with_schema:
            with open(f"{workdir}/schema.sql", "w") as f:
                f.write(generated.schema_sql)
            argv += ["--schema", f"{workdir}/schema.sql"]
        for key, value in options.items():
            argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
        manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        assert manifest["counts"]["reconciled"] and manifest["coverage"]["complete"] is False
        assert read_snapshot(f"{workdir}/out", protocol, options) == reference_state(
            generated.events, as_of, generated.schema_sql if with_schema else "")
