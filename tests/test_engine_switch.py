"""The engine switch at run level (issue 33, step 2): the same archive replayed with `--engine
v1` and `--engine v2` in one Spark session must give byte-identical data and quarantine
objects and equal manifests, but for the times and the manifest's `engine`; and v2 must really
have run (it falls back nowhere since the twenty-fourth session): a snapshot or history to
Parquet, Delta or Iceberg (tables compared read back), a snapshot or topics to Kafka records
(a kafka:// output: tests/test_kafka.py), with or without commit ts or positions, schemas
taken from the stream, --require-schema.

The archives: generated ones (several protocols; DDL of every kind the generator writes,
primary-key-changing UPDATEs, duplicates, a keyless table with repeated rows, mid-stream
archives with DDL on tables the archive never created, several cuts) and real captures
(tests/fixtures/real/)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .test_protocols_e2e import options_for
from .test_real_captures import CAPTURES, write_archive as write_capture

pytestmark = pytest.mark.spark

RUN_ID = "20260101T000000Z-engines"
TIMES = ("started_at", "finished_at", "duration_s")


def both(spark, source: str, tmp_path: Path, argv: list[str]) -> tuple[dict, dict]:
    """Replay `source` with each engine (same run id: the same object names); assert the same
    bytes in every object written but the manifest, and the same manifest but for the times
    and the `engine` (the output folder's name replaced). Returns the two manifests."""
    manifests, trees = {}, {}
    for engine in ("v1", "v2"):
        out = tmp_path / f"out-{engine}"
        args = parser().parse_args(["--source", source, "--output", str(out), "--run-id", RUN_ID,
                                    "--engine", engine, *argv])
        manifest = run(ReplayArgs.from_namespace(args), spark=spark)
        trees[engine] = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
                         if p.is_file() and p.name not in ("_manifest.json", "_lease.json")
                         and not p.name.startswith(".")}
        text = json.dumps({k: v for k, v in manifest.items() if k not in TIMES + ("engine",)}, sort_keys=True)
        manifests[engine] = (manifest, json.loads(text.replace(str(out), "<out>")))
    assert trees["v1"] and sorted(trees["v2"]) == sorted(trees["v1"])
    differing = [name for name in trees["v1"] if trees["v1"][name] != trees["v2"][name]]
    assert not differing, f"objects differ between the engines: {differing[:5]}"
    one, two = manifests["v1"][1], manifests["v2"][1]
    assert two == one, [k for k in one if one.get(k) != two.get(k)]
    assert manifests["v1"][0]["engine"] == {"requested": "v1", "ran": "v1", "fallback": None}
    return manifests["v1"][0], manifests["v2"][0]


def _argv(protocol: str, options: dict, *extra: str) -> list[str]:
    argv = ["--protocol", protocol, *extra]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return argv


def _ran_v2(manifest: dict) -> None:
    assert manifest["engine"] == {"requested": "v2", "ran": "v2", "fallback": None}, manifest["engine"]


GENERATED = [
    # (id, protocol, generate's keywords, replay options)
    ("canal-json-ddl-keyless-parquet", "canal-json", {"keyless": True, "ddl_rate": 0.08},
     ["--emit", "snapshot", "--target-format", "parquet"]),
    ("canal-json-ddl-kafka-records", "canal-json", {"ddl_rate": 0.08}, ["--emit", "snapshot"]),
    ("canal-json-key-moves-as-of", "canal-json", {"split_key_updates": False, "keyless": True},
     ["--emit", "snapshot", "--target-format", "parquet", "--as-of", "MIDDLE"]),
    ("canal-json-tables-until", "canal-json", {"ddl_rate": 0.05},
     ["--emit", "snapshot", "--target-format", "parquet", "--tables", "shop.orders,shop.ledger", "--until", "MIDDLE"]),
    ("open-protocol-kafka-records", "open-protocol", {"ddl_rate": 0.05}, ["--emit", "snapshot"]),
    ("canal-protobuf-positions", "canal-protobuf", {"ddl_rate": 0.05},
     ["--emit", "snapshot", "--target-format", "parquet"]),
    ("avro-parquet", "avro", {}, ["--emit", "snapshot", "--target-format", "parquet"]),
    # tables whose schema v1 takes from their row events (an ALTER of a table the archive never
    # created): v2 keys them by the summary's history (twenty-fourth session)
    ("canal-json-mid-stream-ddl", "canal-json", {"mid_stream": True, "mid_stream_ddl": True, "ddl_rate": 0.1},
     ["--emit", "snapshot", "--target-format", "parquet"]),
    # --require-schema: --schema describes orders only; customers' schema comes from its rows
    # (its ALTERs), so its applied rows are quarantined, in v2's map stage as in v1
    ("canal-json-mid-stream-require-schema", "canal-json",
     {"mid_stream": True, "mid_stream_ddl": True, "ddl_rate": 0.1},
     ["--emit", "snapshot", "--target-format", "parquet", "--schema", "SCHEMA:orders", "--require-schema",
      "--max-bad-records", "1000"]),
    # histories (Parquet) and topics (Kafka records): sixteenth session
    ("canal-json-ddl-keyless-history", "canal-json", {"keyless": True, "ddl_rate": 0.08}, ["--emit", "history"]),
    ("canal-json-ddl-keyless-topics", "canal-json", {"keyless": True, "ddl_rate": 0.08}, ["--emit", "topics"]),
    ("canal-json-key-moves-as-of-history", "canal-json", {"split_key_updates": False, "keyless": True},
     ["--emit", "history", "--as-of", "MIDDLE"]),
    ("canal-json-window-history", "canal-json", {"ddl_rate": 0.08, "keyless": True},
     ["--emit", "history", "--since", "MIDDLE"]),
    ("canal-json-tables-until-topics", "canal-json", {"ddl_rate": 0.05},
     ["--emit", "topics", "--tables", "shop.orders,shop.ledger", "--until", "MIDDLE"]),
    ("open-protocol-history", "open-protocol", {"ddl_rate": 0.05}, ["--emit", "history"]),
    ("canal-protobuf-positions-history", "canal-protobuf", {"ddl_rate": 0.05, "keyless": True},
     ["--emit", "history"]),
    ("canal-protobuf-positions-topics", "canal-protobuf", {"ddl_rate": 0.05}, ["--emit", "topics"]),
    ("avro-history", "avro", {}, ["--emit", "history"]),
    ("avro-topics", "avro", {}, ["--emit", "topics"]),  # old images filled from the key's previous change
    ("canal-json-mid-stream-ddl-history", "canal-json",
     {"mid_stream": True, "mid_stream_ddl": True, "ddl_rate": 0.1}, ["--emit", "history"]),
    ("canal-json-mid-stream-ddl-topics", "canal-json",
     {"mid_stream": True, "mid_stream_ddl": True, "ddl_rate": 0.1}, ["--emit", "topics"]),
]


@pytest.mark.parametrize("case", GENERATED, ids=[c[0] for c in GENERATED])
def test_generated_archives_replay_alike_on_both_engines(spark, tmp_path, case):
    _, protocol, keywords, extra = case
    options = options_for(protocol, tmp_path)
    generated = generate(transactions=60, partitions=2, seed=41, protocol=protocol, options=options, **keywords)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source, records_per_object=50)
    row_ts = sorted(e["commit_ts"] for e in generated.events if e["kind"] == "row" and e.get("commit_ts"))
    extra = [str(row_ts[len(row_ts) // 2]) if a == "MIDDLE" else _schema_file(generated, tmp_path, a) for a in extra]
    _, v2 = both(spark, source, tmp_path, _argv(protocol, options, *extra))
    _ran_v2(v2)
    if "--require-schema" in extra:
        assert v2["counts"]["quarantined"] > 0 and v2["counts"]["applied"] > 0, v2["counts"]


def _schema_file(generated, tmp_path: Path, argument: str) -> str:
    """`SCHEMA:<table>`: a --schema SQL file with the CREATE TABLE of that table as it was
    before the archive (the generator's `schema_sql`); any other argument as it is."""
    if not argument.startswith("SCHEMA:"):
        return argument
    table = argument.removeprefix("SCHEMA:")
    name = f"CREATE TABLE `{generated.database}`.`{table}`"
    [create] = [c for c in generated.schema_sql.split(";\n") if c.startswith(name)]
    path = tmp_path / "schema.sql"
    path.write_text(create.rstrip(";\n") + ";\n")
    return str(path)


REAL = {c.id: c for c in CAPTURES}


@pytest.mark.parametrize("capture_id, emit", [
    ("ticdc-consistency-checker-1", ["--emit", "snapshot", "--target-format", "parquet"]),  # commit ts
    ("paimon-table-schemaevolution", ["--emit", "snapshot", "--target-format", "parquet"]),  # no ts, DDL
    ("ticdc-consistency-checker-1", ["--emit", "history"]),
    ("ticdc-consistency-checker-1", ["--emit", "topics"]),
    ("paimon-table-schemaevolution", ["--emit", "history"]),
    ("paimon-table-schemaevolution", ["--emit", "topics"]),
], ids=["checker-snapshot", "paimon-snapshot", "checker-history", "checker-topics", "paimon-history",
        "paimon-topics"])
def test_real_captures_replay_alike_on_both_engines(spark, tmp_path, capture_id, emit):
    """Paimon's Canal flat JSON has neither commit ts nor position, and DDL: its DDL and rows
    are placed by their running event time, the same in v1's summary and v2's map stage."""
    capture = REAL[capture_id]
    write_capture(capture, tmp_path / "archive")
    extra = emit + (["--tables", capture.tables] if capture.tables else [])
    argv = ["--protocol", "canal-json", *extra]
    for key, value in capture.options.items():
        argv += ["--protocol-option", f"{key}={value}"]
    _, v2 = both(spark, str(tmp_path / "archive"), tmp_path, argv)
    _ran_v2(v2)


def test_base_exports_replay_alike_on_both_engines(spark, tmp_path):
    """--base-export (tests/test_base_export_replay.py's archives): the export's rows enter v2's
    one shuffle as applied events that later archive changes replace, archive events the
    export holds are `in_base`: a Dumpling TSO with a TiCDC changefeed (its re-sent older
    event), to Kafka records and to Parquet, and a mysqldump with Canal protobuf positions."""
    from .test_base_export_replay import FIXTURES, TIDB, around_the_dump, canal_archive, tso_archive

    tso_archive(tmp_path / "tso")
    for i, (export, extra) in enumerate([("dumpling-sql", []), ("dumpling-csv-gzip", ["--target-format", "parquet"])]):
        (tmp_path / f"tso-{i}").mkdir()
        _, v2 = both(spark, str(tmp_path / "tso"), tmp_path / f"tso-{i}",
                     _argv("canal-json", TIDB, "--emit", "snapshot", "--base-export", str(FIXTURES / export), *extra))
        _ran_v2(v2)
        assert v2["counts"]["in_base"] == 1
    canal_archive(tmp_path / "canal", around_the_dump())
    (tmp_path / "canal-out").mkdir()
    _, v2 = both(spark, str(tmp_path / "canal"), tmp_path / "canal-out",
                 _argv("canal-protobuf", {}, "--emit", "snapshot", "--target-format", "parquet",
                       "--base-export", str(FIXTURES / "mysqldump-8.0")))
    _ran_v2(v2)
    assert v2["counts"]["in_base"] == 1 and v2["counts"]["applied"] == 2


def test_base_exports_give_alike_histories_and_topics_on_both_engines(spark, tmp_path):
    """--base-export with --emit history and topics (as tests/test_base_export_replay.py
    replays them): the export's rows start each key's history with an INSERT version at the
    export's position, in v2 from its effects (full images beside the archive's lean ones),
    and are the topics' first messages."""
    from .test_base_export_replay import FIXTURES, TIDB, around_the_dump, canal_archive, tso_archive

    tso_archive(tmp_path / "tso")
    for i, (export, extra) in enumerate([("dumpling-sql", ["--emit", "history"]),
                                         ("dumpling-csv-gzip", ["--emit", "topics"])]):
        (tmp_path / f"tso-{i}").mkdir()
        _, v2 = both(spark, str(tmp_path / "tso"), tmp_path / f"tso-{i}",
                     _argv("canal-json", TIDB, "--base-export", str(FIXTURES / export), *extra))
        _ran_v2(v2)
        assert v2["counts"]["in_base"] == 1
    canal_archive(tmp_path / "canal", around_the_dump())
    for emit in ("history", "topics"):
        (tmp_path / f"canal-{emit}").mkdir()
        _, v2 = both(spark, str(tmp_path / "canal"), tmp_path / f"canal-{emit}",
                     _argv("canal-protobuf", {}, "--emit", emit, "--base-export", str(FIXTURES / "mysqldump-8.0")))
        _ran_v2(v2)
        assert v2["counts"]["in_base"] == 1 and v2["counts"]["applied"] == 2


@pytest.mark.parametrize("target", [["--emit", "snapshot"], ["--emit", "snapshot", "--target-format", "parquet"],
                                    ["--emit", "history"]], ids=["kafka-records", "parquet", "history"])
def test_a_window_on_a_base_snapshot_replays_alike_on_both_engines(spark, tmp_path, target):
    """--base-snapshot: the base (a v1 snapshot as Kafka records at the middle of a generated
    archive with DDL, key moves and a keyless table) enters v2's shuffle as applied rows at
    the window's start."""
    options = options_for("canal-json", tmp_path)
    generated = generate(transactions=60, partitions=2, seed=43, protocol="canal-json", options=options,
                         ddl_rate=0.05, keyless=True, split_key_updates=False)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source, records_per_object=50)
    row_ts = sorted(e["commit_ts"] for e in generated.events if e["kind"] == "row" and e.get("commit_ts"))
    base = tmp_path / "base"
    run(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", source, "--output", str(base), "--engine", "v1",
         *_argv("canal-json", options, "--emit", "snapshot", "--as-of", str(row_ts[len(row_ts) // 2]))])), spark=spark)
    (tmp_path / "window").mkdir()
    _, v2 = both(spark, source, tmp_path / "window",
                 _argv("canal-json", options, "--base-snapshot", str(base), *target))
    _ran_v2(v2)
    assert v2["counts"]["filtered"] > 0


def _lake_rows(fmt: str, output: str, manifest: dict) -> dict:
    """{table: its rows read back by deltalake / pyiceberg, ordered} of every table the run's
    manifest names."""
    from .support.outputs import lake_tables

    return {name: (columns, sorted(repr(sorted(r.items())) for r in rows))
            for name, (columns, rows) in lake_tables(fmt, output, manifest).items()}


def both_lakes(spark, source: str, tmp_path: Path, fmt: str, runs: list[list[str]]) -> list[dict]:
    """Each engine's runs in turn at its own output (a window `--since last` after a run at a
    cut); after each, the same tables read back (same columns, same rows) and the same
    manifest but for the times, the `engine` and Iceberg's snapshot ids (random). The other
    objects (quarantine) byte for byte. Returns v2's manifests."""
    outs = {engine: tmp_path / f"lake-{engine}" for engine in ("v1", "v2")}
    found = {"v1": [], "v2": []}
    for engine, out in outs.items():
        for i, argv in enumerate(runs):
            args = parser().parse_args(["--source", source, "--output", str(out), "--run-id", f"{RUN_ID}{i}",
                                        "--engine", engine, "--target-format", fmt, *argv])
            manifest = run(ReplayArgs.from_namespace(args), spark=spark)
            locations = [str(Path(e["location"].removeprefix("file://")))
                         for e in manifest["output"]["lakehouse"].values()]
            others = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
                      if p.is_file() and p.name not in ("_manifest.json", "_lease.json", "_catalog.sqlite")
                      and not p.name.startswith(".") and not any(str(p).startswith(loc + os.sep) for loc in locations)}
            text = json.dumps({k: v for k, v in manifest.items() if k not in TIMES + ("engine",)}, sort_keys=True)
            same = json.loads(text.replace(str(out), "<out>"))
            if fmt == "iceberg":
                for entry in same["output"]["lakehouse"].values():
                    entry.pop("version", None)
            found[engine].append((manifest, same, _lake_rows(fmt, str(out), manifest), others))
    for (one, same1, rows1, others1), (two, same2, rows2, others2) in zip(found["v1"], found["v2"]):
        assert rows1 and rows2 == rows1
        assert same2 == same1, [k for k in same1 if same1.get(k) != same2.get(k)]
        assert others2 == others1
        assert one["engine"] == {"requested": "v1", "ran": "v1", "fallback": None}
    return [m for m, *_ in found["v2"]]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
@pytest.mark.parametrize("emit", ["snapshot", "history"])
def test_lake_tables_are_alike_on_both_engines(spark, tmp_path, fmt, emit):
    """Delta and Iceberg tables (issue 33): a generated canal-json archive with DDL, a keyless
    table and (the snapshot's) key-moving UPDATEs, written in full at its middle and then the window after it —
    for a snapshot merged into the tables (`--since last`), for a history a run of the window's
    versions (`--since` the middle) — read back alike from v1's and v2's tables."""
    options = options_for("canal-json", tmp_path)
    # the history's archive is canal-json-window-history's (with the snapshot's, a window of it
    # takes a table's schema from its row events: canal-json-mid-stream-ddl covers that)
    keywords = {"ddl_rate": 0.05, "split_key_updates": False} if emit == "snapshot" else {"ddl_rate": 0.08}
    generated = generate(transactions=60, partitions=2, seed=41, protocol="canal-json", options=options,
                         keyless=True, **keywords)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source, records_per_object=50)
    row_ts = sorted(e["commit_ts"] for e in generated.events if e["kind"] == "row" and e.get("commit_ts"))
    middle = str(row_ts[len(row_ts) // 2])
    argv = _argv("canal-json", options, "--emit", emit)
    window = ["--since", "last"] if emit == "snapshot" else ["--since", middle]
    manifests = both_lakes(spark, source, tmp_path, fmt, [[*argv, "--as-of", middle], [*argv, *window]])
    for manifest in manifests:
        _ran_v2(manifest)
    assert manifests[1]["window"]["since"] == int(middle)


def test_the_engine_comes_from_the_option_then_the_environment(monkeypatch):
    from spark_apps.stages.context import ReplayError
    from spark_apps.stages.engine import ENGINE_ENV, requested

    args = ReplayArgs.from_namespace(parser().parse_args(
        ["--source", "/a", "--output", "/b", "--protocol", "canal-json", "--emit", "snapshot"]))
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert args.engine is None and requested(args) == "v1"
    monkeypatch.setenv(ENGINE_ENV, "v2")
    assert requested(args) == "v2"
    assert requested(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", "/a", "--output", "/b", "--protocol", "canal-json", "--emit", "snapshot", "--engine", "v1"]))) == "v1"
    monkeypatch.setenv(ENGINE_ENV, "v3")
    with pytest.raises(ReplayError, match="CDC_REPLAY_ENGINE='v3'"):
        requested(args)
    assert os.environ[ENGINE_ENV] == "v3"
