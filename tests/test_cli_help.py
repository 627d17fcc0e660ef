"""The CLI's help says what it does, and its examples run as written (issue 31, rough edges)."""

from __future__ import annotations

import shlex

from spark_apps.cli import build_parser
from spark_apps.options import parser as replay_parser


def _help(*argv: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return out.getvalue()


def test_generate_help_examples_parse():
    text = _help("generate")
    example = text[text.index("examples:"):].split("\n", 1)[1].replace("\\\n", " ")
    lines = [shlex.split(line) for line in example.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert [line[:2] for line in lines] == [["cdc-replay", "generate"], ["cdc-replay", "replay"]] * 3
    for generate_line, replay_line in zip(lines[::2], lines[1::2]):
        build_parser().parse_args(generate_line[1:])
        args = replay_parser().parse_args(replay_line[2:])  # what `cdc-replay replay` parses
        assert args.emit == "snapshot" and args.protocol == "canal-json"


def test_replay_help_names_every_layout_and_kafka():
    text = " ".join(_help("replay").split())
    assert "Kafka-record archive with Spark" not in text
    assert "Replay a CDC archive" in text and "Kafka topics" in text


def _args(output_format: str = "kafka"):
    from types import SimpleNamespace

    return SimpleNamespace(protocol="canal-json", emit="snapshot", output_format=output_format, target_topic="{topic}",
                           dispatcher="index-value", table_patterns=lambda: [])


def _manifest(tmp_path, output_format: str = "kafka", counts=()) -> dict:
    """manifest.build of a run that read nothing (or only `counts`) into `tmp_path`."""
    from spark_apps import manifest as manifest_mod

    return manifest_mod.build(
        manifest_mod.RunFacts(run_id="r", args=_args(output_format), source="/a", output=str(tmp_path), started=0,
                              source_options={}, target_protocol=None, target_options={}),
        manifest_mod.ReadFacts(objects=[], partition_stats=[], counts=list(counts), cut={
            "kind": "archive_end", "commit_ts": None, "point": None, "description": "the end", "warnings": []}),
        manifest_mod.Outcome(written=[], quarantine_objects=[], ddl_log=[], ddl_failures=[]))


def test_a_lakehouse_summary_names_its_tables_paths_and_versions(tmp_path):
    from spark_apps import manifest as manifest_mod

    built = _manifest(tmp_path, "delta")
    built["output"]["lakehouse"] = {
        "shop.orders": {"source_database": "shop", "source_table": "orders", "table": "shop.orders",
                        "location": f"{tmp_path}/shop/orders", "version": 3, "rows": 120},
        "shop.customers": {"source_database": "shop", "source_table": "customers", "table": "shop.customers",
                           "location": f"{tmp_path}/shop/customers", "version": 1, "rows": 7}}
    text = manifest_mod.summary(built)
    assert "[None]" not in text and "topics -" not in text
    assert f"-> {tmp_path} [delta]" in text
    assert "in 2 Delta tables under" in text
    assert f"shop.orders     version 3, 120 rows at {tmp_path}/shop/orders" in text
    assert f"shop.customers  version 1, 7 rows at {tmp_path}/shop/customers" in text


def test_summary_json_prints_the_manifest(tmp_path, capsys):
    import json

    from spark_apps import cli, contract

    built = _manifest(tmp_path, "kafka")
    (tmp_path / contract.MANIFEST).write_text(json.dumps(built))
    assert cli.main(["summary", "--json", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["run_id"] == "r" and printed["output"]["uri"] == built["output"]["uri"]


def test_tables_excluded_by_tables_are_not_listed_as_replayed(tmp_path):
    from spark_apps import manifest as manifest_mod

    def count(table, status, events):
        return {"status": status, "kind": "row", "events": events, "database": "shop", "table": table,
                "min_commit_ts": 10, "max_commit_ts": 20}

    built = _manifest(tmp_path, counts=[
        count("orders", "applied", 5), count("orders", "filtered", 0), count("customers", "filtered", 7)])
    text = manifest_mod.summary(built)
    tables = text[text.index("  tables"):].splitlines()
    assert any("shop.orders" in line for line in tables[1:2])
    assert not any(line.startswith("    shop.customers") for line in tables)
    assert "filtered out     1 tables (--tables), 7 events: shop.customers" in text
