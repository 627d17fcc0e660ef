"""Property (issue 30 point 4): a generated full export plus the mid-stream archive that
continues it, replayed with --base-export and cut anywhere, gives the snapshot that
tests/reference.py (sharing no code with the replay) computes over the full history: the rows
that predate the archive, the changes the export holds, then the archive's. The archive's
first records re-send changes the export already holds; they must be skipped (`in_base`)."""

from __future__ import annotations

import dataclasses
import tempfile

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive, write_base_export
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .reference import reference_state

WIRED = "base_export" in {f.name for f in dataclasses.fields(ReplayArgs)}
pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(not WIRED, reason="the replay has no --base-export option on this branch")]

# protocol -> the export kinds that go with its positions (generate.export_position_kind)
KINDS = {"canal-json": ["dumpling-sql", "dumpling-csv"], "open-protocol": ["dumpling-sql", "dumpling-csv"],
         "craft": ["dumpling-csv"], "canal-protobuf": ["mysqldump", "dumpling-sql"]}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    duplicate_rate=st.sampled_from([0.0, 0.2]),
    protocol=st.sampled_from(sorted(KINDS)),
    kind_index=st.integers(0, 1),
    compression=st.sampled_from([None, "gzip"]),
    cut_fraction=st.floats(0.0, 1.0),
)
@example(seed=3, partitions=2, duplicate_rate=0.2, protocol="canal-protobuf", kind_index=0, compression="gzip",
         cut_fraction=1.0)  # mysqldump | gzip beside Canal's binlog positions
@example(seed=5, partitions=3, duplicate_rate=0.0, protocol="canal-json", kind_index=1, compression=None,
         cut_fraction=0.0)  # a Dumpling CSV export and a cut at the archive's first commit
def test_export_plus_archive_equals_the_reference(spark, seed, partitions, duplicate_rate, protocol, kind_index,
                                                   compression, cut_fraction):
    kind = KINDS[protocol][kind_index % len(KINDS[protocol])]
    options = {"enable-tidb-extension": "true"} if protocol == "canal-json" else {}
    generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=duplicate_rate,
                         protocol=protocol, options=options, mid_stream=True, base_export=True, keyless=False)
    history = generated.history_before + generated.events
    with tempfile.TemporaryDirectory() as workdir:
        write_archive(generated.records, f"{workdir}/archive", records_per_object=40)
        write_base_export(generated, kind, f"{workdir}/export", compression=compression, rows_per_file=7,
                          statement_size=300)
        argv = ["--source", f"{workdir}/archive", "--protocol", protocol, "--output", f"{workdir}/out",
                "--emit", "snapshot", "--base-export", f"{workdir}/export"]
        as_of = None
        if "tso" in generated.base.position:  # a cut anywhere after the export (commit ts carried)
            stamps = sorted({e["commit_ts"] for e in generated.events if e["commit_ts"] <= generated.cut_ts})
            as_of = stamps[min(len(stamps) - 1, int(len(stamps) * cut_fraction))]
            argv += ["--as-of", str(as_of)]
        for key, value in options.items():
            argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
        manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        counts = manifest["counts"]
        assert counts["reconciled"]
        copies = sum(1 for p in generated.placements if any(p.event is e for e in generated.history_before))
        assert generated.base.resent <= copies and 1 <= counts["in_base"] <= copies
        want = reference_state(history, as_of, generated.schema_sql)
        assert read_snapshot(f"{workdir}/out", protocol, options) == want
