"""Properties for the archive shapes real captures showed and the generator did not produce
(issue 32): the Spark replay's snapshot equals the reference replayer's state
(tests/reference.py, which shares no code with the replay) on generated archives with

1. DDL and rows at the same event time: Canal flat messages (`es` in whole seconds) and TiCDC
   canal-json without the TiDB extension (`es` in ms), a CREATE TABLE / ADD COLUMN followed by
   rows of its table in the same millisecond;
2. mid-stream archives (no CREATE TABLE, no schema dump) whose tables get ALTERed;
3. TiCDC storage-sink schema files (`--schema`) with `YEAR UNSIGNED` / `BIT UNSIGNED` columns;
4. keyless tables holding identical rows (a multiset: DELETE / UPDATE change one copy);
5. Canal `es` going backwards across transactions.

Few examples each: every one is a Spark replay.
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from cdc_codecs.archive import is_archive_object, parse_line
from cdc_codecs.events import Kind
from spark_apps import storage
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive, write_schema_files
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .reference import reference_rows, reference_state

pytestmark = pytest.mark.spark

# flavours of canal-json without commit ts: (codec options, unit of `es` in ms)
CANAL = {"flat-message-flavor": "canal"}
TICDC_PLAIN = {}
ES_UNIT = {"canal": 1000, "ticdc": 1}
FLAVOURS = {"canal": CANAL, "ticdc": TICDC_PLAIN}
TIDB = {"enable-tidb-extension": "true"}

# no shrinking: each example is a replay, and an xfail test's failure would shrink for minutes
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True,
                phases=(Phase.explicit, Phase.generate))


def replay(spark, workdir: str, generated, protocol: str, options: dict, *extra: str) -> dict:
    write_archive(generated.records, f"{workdir}/archive", records_per_object=40)
    argv = ["--source", f"{workdir}/archive", "--protocol", protocol, "--output", f"{workdir}/out",
            "--emit", "snapshot", *extra]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    assert manifest["counts"]["reconciled"]
    return manifest


def snapshot_rows(output: str, protocol: str, options: dict) -> dict:
    """{(db, table): sorted rows} of a snapshot output, every row as many times as it is there
    (demo.read_snapshot keys rows, so a keyless table's copies would show once)."""
    codec = get_codec(protocol, options)
    tables: dict = {}
    for info in storage.list_objects(output):
        if not is_archive_object(storage.relative(info.uri, output)):
            continue
        for line in storage.iter_lines(info.uri):
            for event in codec.decode(parse_line(line)):
                if event["kind"] == Kind.ROW:
                    row = tuple(sorted((c["name"], c["value"]) for c in event["after"]))
                    tables.setdefault((event["database"], event["table"]), []).append(row)
    return {k: sorted(v, key=repr) for k, v in tables.items()}


def without_empty(state: dict) -> dict:
    return {k: v for k, v in state.items() if v}


@settings(max_examples=3, **SETTINGS)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    flavour=st.sampled_from(sorted(FLAVOURS)),
    duplicate_rate=st.sampled_from([0.0, 0.2]),
)
def test_same_event_time_ddl_and_rows(spark, seed, partitions, flavour, duplicate_rate):
    """CREATE TABLE then INSERTs, ADD COLUMN then rows using the new column, in one second
    (one millisecond): the DDL applies to the rows after it in its partition's offset order
    and to the rows of other partitions at its event time."""
    options = FLAVOURS[flavour]
    generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=duplicate_rate,
                         ddl_rate=0.12, same_second_ddl=True, options=options)
    with tempfile.TemporaryDirectory() as workdir:
        replay(spark, workdir, generated, "canal-json", options)
        assert read_snapshot(f"{workdir}/out", "canal-json", options) == reference_state(
            None, placements=generated.placements, es_unit_ms=ES_UNIT[flavour])


@settings(max_examples=3, **SETTINGS)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    flavour=st.sampled_from(sorted(FLAVOURS)),
    backward=st.sampled_from([0.2, 0.5]),
    ddl_rate=st.sampled_from([0.0, 0.05]),
)
def test_event_time_going_backwards(spark, seed, partitions, flavour, backward, ddl_rate):
    """A later transaction with an earlier `es`: within a partition the offset decides, across
    partitions the highest `es` seen so far in the partition."""
    options = FLAVOURS[flavour]
    generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=0.1,
                         ddl_rate=ddl_rate, backward_es_rate=backward, options=options)
    with tempfile.TemporaryDirectory() as workdir:
        replay(spark, workdir, generated, "canal-json", options)
        assert read_snapshot(f"{workdir}/out", "canal-json", options) == reference_state(
            None, placements=generated.placements, es_unit_ms=ES_UNIT[flavour])


@settings(max_examples=3, **SETTINGS)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    target=st.sampled_from(["canal-json+tidb", "open-protocol", "canal-json+canal"]),
    mid_stream=st.booleans(),
)
def test_keyless_tables_keep_identical_rows(spark, seed, partitions, target, mid_stream):
    """A table without a key holding identical rows keeps every copy; a DELETE removes one
    copy (none when the archive never wrote the row), an UPDATE changes one copy."""
    protocol, _, flavour = target.partition("+")
    options = {"tidb": TIDB, "canal": CANAL}.get(flavour, {})
    generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=0.1, ddl_rate=0.0,
                         keyless=True, protocol=protocol, options=options, mid_stream=mid_stream)
    if flavour == "canal":  # no commit ts, no watermarks: the whole archive
        expected, extra = reference_rows(None, placements=generated.placements, es_unit_ms=1000), []
    else:
        expected, extra = reference_rows(generated.events, generated.cut_ts), ["--as-of", str(generated.cut_ts)]
    with tempfile.TemporaryDirectory() as workdir:
        replay(spark, workdir, generated, protocol, options, *extra)
        assert snapshot_rows(f"{workdir}/out", protocol, options) == expected


@settings(max_examples=3, **SETTINGS)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    protocol=st.sampled_from(["canal-json", "open-protocol"]),
    cut_fraction=st.floats(0.3, 1.0),
)
@example(seed=852, partitions=3, protocol="open-protocol", cut_fraction=0.56)  # DATETIME(3) `…00.000`, type code only
def test_mid_stream_archive_alters_tables_it_never_created(spark, seed, partitions, protocol, cut_fraction):
    """No CREATE TABLE, no --schema: a table's schema is the columns its first row event
    carries, and the ADD / DROP COLUMN and TRUNCATE that follow apply to it (a row written
    before an ADD COLUMN and not sent again shows the column's default). Open-protocol's type
    codes carry no DATETIME precision: a value stays as TiCDC rendered it (seed 852: `…00.000`)."""
    options = TIDB if protocol == "canal-json" else {}
    generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=0.1, ddl_rate=0.1,
                         mid_stream=True, mid_stream_ddl=True, protocol=protocol, options=options)
    stamps = sorted({e["commit_ts"] for e in generated.events if e["commit_ts"] <= generated.cut_ts})
    as_of = stamps[min(len(stamps) - 1, int(len(stamps) * cut_fraction))]
    with tempfile.TemporaryDirectory() as workdir:
        manifest = replay(spark, workdir, generated, protocol, options, "--as-of", str(as_of))
        assert manifest["quarantine"]["ddl"] == []  # every ALTER applied
        assert read_snapshot(f"{workdir}/out", protocol, options) == reference_state(generated.events, as_of)


@settings(max_examples=2, **SETTINGS)
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(1, 3),
    mid_stream_ddl=st.booleans(),
)
def test_storage_sink_schema_files_with_year_and_bit(spark, seed, partitions, mid_stream_ddl):
    """--schema from TiCDC storage-sink table schema files, where TiDB writes the YEAR and BIT
    columns `YEAR UNSIGNED` / `BIT UNSIGNED`: the files agree with the archive's rows (no schema
    conflict) and the snapshot equals the reference's state from the same schemas."""
    generated = generate(transactions=60, partitions=partitions, seed=seed, duplicate_rate=0.1, ddl_rate=0.08,
                         mid_stream=True, mid_stream_ddl=mid_stream_ddl, year_bit=True, options=TIDB)
    with tempfile.TemporaryDirectory() as workdir:
        write_schema_files(generated, f"{workdir}/schemas")
        manifest = replay(spark, workdir, generated, "canal-json", TIDB, "--schema", f"{workdir}/schemas",
                          "--as-of", str(generated.cut_ts))
        assert manifest["schema_conflicts"] == []
        assert read_snapshot(f"{workdir}/out", "canal-json", TIDB) == reference_state(
            generated.events, generated.cut_ts, generated.schema_sql)
