"""The request contract (spark_apps.contract): one table of good and bad requests, each made
through the three entry points (`cdc-replay replay`, the Spark app's argument parsing and the
Airflow form's check task), must get the same verdict and the same message from each; the
rendering of a request to the app's arguments parses back to the same request; the module
imports nothing but the standard library; its registries are the codecs' and layouts'."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_apps import cli, contract
from spark_apps import replay as app

ISO = "2026-01-01T00:00:03Z"
ISO_TSO = 1767225603000 << 18

# (id, the request as `replay` arguments after --source/--output, the same request as form
# fields, None for accepted or words of the refusal every entry point gives)
ROWS = [
    ("plain snapshot", [], {}, None),
    ("as-of as TSO", ["--as-of", str(ISO_TSO)], {"as_of": ISO_TSO}, None),
    ("as-of as ISO time", ["--as-of", ISO], {"as_of": ISO}, None),
    ("as-of ISO without zone", ["--as-of", "2026-01-01T00:00:03"], {"as_of": "2026-01-01T00:00:03"},
     "--as-of: '2026-01-01T00:00:03' has no time zone (add Z or +00:00)"),
    ("as-of neither", ["--as-of", "yesterday"], {"as_of": "yesterday"},
     "--as-of: 'yesterday' is neither a commit ts (TSO integer) nor an ISO-8601 time"),
    ("as-of and until", ["--as-of", "5", "--until", "6"], {"as_of": 5, "until": 6}, "--as-of and --until are the same"),
    ("topics of a window", ["--emit", "topics", "--since", "5", "--until", ISO],
     {"emit": "topics", "since": 5, "until": ISO}, None),
    ("empty window", ["--emit", "topics", "--since", "9", "--until", "9"], {"emit": "topics", "since": 9, "until": 9},
     "the window is empty: --since 9 is not below --until/--as-of 9"),
    ("snapshot window without base", ["--since", "5"], {"since": 5}, "a snapshot of a window needs --base-snapshot"),
    ("since last outside a lakehouse", ["--emit", "history", "--since", "last"], {"emit": "history", "since": "last"},
     "--since last applies to --emit snapshot with --target-format delta or iceberg"),
    ("unknown protocol", ["--protocol", "canal-jsn"], {"protocol": "canal-jsn"},
     "unknown protocol 'canal-jsn'; valid protocols: avro, canal-json"),
    ("read-only target protocol", ["--target-protocol", "csv"], {"target_protocol": "csv"},
     "csv is read, not written"),
    ("unknown protocol option", ["--protocol-option", "no-such-option=1"], {"protocol_options": {"no-such-option": "1"}},
     "no-such-option"),
    ("bad protocol option value", ["--protocol-option", "enable-tidb-extension=maybe"],
     {"protocol_options": {"enable-tidb-extension": "maybe"}}, "expected true or false"),
    ("table pattern", ["--tables", "shop.*,*.orders"], {"tables": "shop.*,*.orders"}, None),
    ("bad table pattern", ["--tables", "a.b.c"], {"tables": ["a.b.c"]},
     "--tables pattern 'a.b.c' is not of the form db.table"),
    ("offsets without kafka", ["--starting-offsets", "latest"], {"starting_offsets": "latest"},
     "--starting-offsets / --ending-offsets apply to a kafka:// --source"),
    ("kafka offsets", ["KAFKA", "--emit", "topics", "--starting-offsets", '{"shop": {"0": 42}}'],
     {"source": "kafka://shop", "emit": "topics", "starting_offsets": '{"shop": {"0": 42}}'}, None),
    ("kafka offsets not JSON", ["KAFKA", "--emit", "topics", "--starting-offsets", "first"],
     {"source": "kafka://shop", "emit": "topics", "starting_offsets": "first"},
     "--starting-offsets must be earliest, latest or JSON"),
    ("kafka ending earliest", ["KAFKA", "--emit", "topics", "--ending-offsets", "earliest"],
     {"source": "kafka://shop", "emit": "topics", "ending_offsets": "earliest"}, "--ending-offsets earliest would read"),
    ("kafka source with a layout", ["KAFKA", "--emit", "topics", "--layout", "ticdc-storage"],
     {"source": "kafka://shop", "emit": "topics", "layout": "ticdc-storage"}, "has no archive layout"),
    ("delta window", ["--target-format", "delta", "--since", "last"], {"target_format": "delta", "since": "last"}, None),
    ("iceberg history", ["--emit", "history", "--target-format", "iceberg", "--catalog", "type=filesystem"],
     {"emit": "history", "target_format": "iceberg", "catalog": {"type": "filesystem"}}, None),
    ("catalog without iceberg", ["--target-format", "delta", "--catalog", "type=filesystem"],
     {"target_format": "delta", "catalog": {"type": "filesystem"}}, "--catalog applies to --target-format iceberg"),
    ("table name outside a lakehouse", ["--target-table", "x.{table}"], {"target_table": "x.{table}"},
     "--target-table applies to --target-format delta or iceberg"),
    ("table name of one part", ["--target-format", "delta", "--target-table", "{table}"],
     {"target_format": "delta", "target_table": "{table}"}, "must give at least namespace.table"),
    ("topics as parquet", ["--emit", "topics", "--target-format", "parquet"], {"emit": "topics", "target_format": "parquet"},
     "--emit topics is written as a Kafka-record archive"),
    ("history as kafka", ["--emit", "history", "--target-format", "kafka"], {"emit": "history", "target_format": "kafka"},
     "--emit history is written as Parquet, Delta or Iceberg"),
    ("base snapshot for topics", ["--emit", "topics", "--base-snapshot", "BASE"], {"emit": "topics", "base_snapshot": "BASE"},
     "--base-snapshot applies to --emit snapshot"),
    ("output inside the source", ["--output", "SRC/out"], {"output": "SRC/out"}, "overlaps --source"),
    ("source inside the output", ["--output", "ROOT"], {"output": "ROOT"}, "overlaps --source"),
    ("output inside the schema", ["--schema", "OUT/schema.sql"], {"schema": "OUT/schema.sql"}, "overlaps --schema"),
    ("no partitions", ["--emit", "topics", "--target-partitions", "0"], {"emit": "topics", "target_partitions": 0},
     "--target-partitions must be at least 1"),
    ("negative quarantine limit", ["--max-bad-records", "-1"], {"max_bad_records": -1},
     "--max-bad-records must be 0 or more"),
    ("bad topic placeholder", ["--emit", "topics", "--target-topic", "{db}"], {"emit": "topics", "target_topic": "{db}"},
     "unknown placeholder {db}"),
]


def _paths(tmp_path, value: str) -> str:
    for name, path in (("SRC", tmp_path / "src"), ("OUT", tmp_path / "out"), ("BASE", tmp_path / "base"),
                       ("ROOT", tmp_path)):
        if value.startswith(name):
            return str(path) + value[len(name):]
    return value


@pytest.fixture(scope="module")
def kafka_broker():
    """A real broker for the accepted kafka:// rows: the CLI asks the cluster for its metadata
    before Spark starts (an unreachable one is refused), so an accepted request needs one."""
    from tests.support.kafka import KafkaBroker

    server = KafkaBroker().start()
    yield server
    server.stop()


def _unused_servers() -> str:
    """A loopback address nothing listens on: refused rows never reach the network (the
    contract refuses first), and no test relies on a fixed service port."""
    from spark_apps.local_s3 import free_port

    return f"127.0.0.1:{free_port()}"


def _requests(tmp_path, argv: list[str], fields: dict, servers: str | None = None) -> tuple[list[str], dict]:
    servers = servers or _unused_servers()
    (tmp_path / "src").mkdir(exist_ok=True)
    kafka = "KAFKA" in argv
    argv = [_paths(tmp_path, a) for a in argv if a != "KAFKA"]
    head = ["--source", f"kafka://{servers}/shop" if kafka else str(tmp_path / "src"),
            "--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true", "--emit", "snapshot"]
    if "--output" not in argv:
        head += ["--output", str(tmp_path / "out")]
    conf = {"source": str(tmp_path / "src"), "protocol": "canal-json", "output": str(tmp_path / "out"),
            "emit": "snapshot", "protocol_options": {"enable-tidb-extension": "true"}}
    conf.update({k: _paths(tmp_path, v) if isinstance(v, str) else v for k, v in fields.items()})
    return head + argv, conf  # the later of a repeated option wins (--emit, --protocol)


def _parses(argv) -> bool:
    try:
        contract.parse(argv)
    except contract.RequestError:
        return False
    return True


@pytest.mark.parametrize("name, argv, fields, refusal", ROWS, ids=[r[0] for r in ROWS])
def test_one_verdict_from_the_cli_the_app_and_the_form(name, argv, fields, refusal, tmp_path, capsys, request):
    from cdc_replay_airflow import tasks

    servers = request.getfixturevalue("kafka_broker").bootstrap if "KAFKA" in argv and refusal is None \
        else None
    argv, conf = _requests(tmp_path, argv, fields, servers)
    # the app's own argument parsing (spark_apps.replay.main's first step; no Spark)
    try:
        app.parse_args(argv)
        by_app = None
    except app.ReplayError as e:
        by_app = str(e)
    # the Airflow form: the manual DAG's check task
    try:
        tasks.check(conf)
        by_form = None
    except tasks.Refused as e:
        by_form = e.__cause__.message
    # the command line: refused with exit 2 and the message, before spark-submit
    if cli.check_replay(argv) is None:
        by_cli = None
    else:
        try:
            code = cli.main(["replay", *argv])
        except SystemExit as e:
            code = e.code
        assert code == 2
        by_cli = capsys.readouterr().err
    if refusal is None:
        assert (by_cli, by_app, by_form) == (None, None, None)
    else:
        assert by_app is not None and refusal in by_app
        assert by_form == by_app
        assert f"error: {by_app}\n" in by_cli


def test_iso_and_tso_give_the_same_request(tmp_path):
    from cdc_replay_airflow.request import app_args, parse_request

    argv, conf = _requests(tmp_path, ["--as-of", ISO], {"as_of": ISO})
    assert app.parse_args(argv).as_of == ISO_TSO == app_args(parse_request(conf)).as_of


def test_rendering_parses_back_to_the_same_request(tmp_path):
    argv = ["--source", "s3://archive/shop", "--protocol", "canal-json", "--protocol-option", "a=1",
            "--protocol-option", "b=2", "--layout", "ticdc-storage", "--layout-option", "x=y", "--output",
            "s3://lake/out", "--emit", "history", "--target-format", "iceberg", "--target-table", "n.{table}",
            "--catalog", "uri=sqlite:////tmp/c.db", "--since", "5", "--until", ISO, "--schema", "s3://lake/s.sql",
            "--require-schema", "--require-contiguous", "--tables", "shop.*", "--target-protocol", "open-protocol",
            "--target-option", "k=v", "--target-partitions", "3", "--dispatcher", "table", "--max-bad-records", "4",
            "--max-records-per-object", "10", "--master", "spark://m:7077", "--spark-conf", "a.b=c", "--spark-ui",
            "--run-id", "r1", "--s3-read-chunk-size", "1024", "--s3-max-attempts", "3", "--s3-retry-mode", "adaptive",
            "--target-topic", "{table}", "--target-layout", "kafka-records"]
    args = contract.parse(argv)
    assert args.until == ISO_TSO and args.spark_ui and args.catalog == ["uri=sqlite:////tmp/c.db"]
    assert contract.parse(contract.to_argv(args)) == args
    servers = _unused_servers()
    kafka = contract.parse(["--source", f"kafka://{servers}/t", "--protocol", "avro", "--output", f"kafka://{servers}",
                            "--manifest-uri", "/tmp/m", "--emit", "topics", "--starting-offsets", '{"t": {"0": 1}}',
                            "--ending-offsets", '{"t": {"0": 9}}', "--as-of", "7"])
    assert contract.parse(contract.to_argv(kafka)) == kafka
    # defaults are left out; --max-bad-records is always given (the operator reads it)
    plain = contract.parse(["--source", "/a", "--protocol", "avro", "--output", "/b", "--emit", "snapshot"])
    assert contract.to_argv(plain) == ["--source", "/a", "--protocol", "avro", "--output", "/b", "--emit", "snapshot",
                                       "--max-bad-records", "0"]


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pyspark", "airflow", "sqlglot", "boto3", "botocore", "cdc_codecs", "py4j",
                                  "pyarrow", "pandas", "orjson", "fastavro"}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import spark_apps.contract as c, spark_apps.options as o
args = c.parse(["--source", "/a", "--protocol", "canal-json", "--output", "/b", "--emit", "snapshot", "--as-of", "5"])
c.check(args)
assert c.to_argv(args)[-2:] == ["--max-bad-records", "0"]
print("ok")
"""


def test_the_contract_imports_only_the_standard_library():
    result = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_registries_are_the_codecs_and_the_layouts():
    import cdc_codecs

    from spark_apps import layouts

    assert {p: cdc_codecs.codec_class(p).writable for p in cdc_codecs.protocols()} == contract.PROTOCOLS
    assert tuple(layouts.LAYOUTS) == contract.LAYOUTS
    assert {v for k, v in vars(cdc_codecs.Kind).items() if k.isupper()} == set(contract.Kind.DECODED)


def test_manifests_of_older_versions_are_read_and_newer_refused(tmp_path):
    """The manifest's only builder stamps its version; the reader takes a manifest written
    before versions (no field, no gaps/timeline/reasons) as this version and refuses a newer one
    in one line (`cdc-replay summary`, exit 2)."""
    import json
    from types import SimpleNamespace

    from spark_apps import manifest as manifest_mod

    args = SimpleNamespace(protocol="canal-json", emit="snapshot", output_format="kafka", target_topic="{topic}",
                           dispatcher="index-value", table_patterns=lambda: [])
    built = manifest_mod.build(
        manifest_mod.RunFacts(run_id="r", args=args, source="/a", output=str(tmp_path), started=0, source_options={},
                              target_protocol="canal-json", target_options={}),
        manifest_mod.ReadFacts(objects=[], partition_stats=[], counts=[], cut={
            "kind": "archive_end", "commit_ts": None, "point": None, "description": "the end", "warnings": []}),
        manifest_mod.Outcome(written=[], quarantine_objects=[], ddl_log=[], ddl_failures=[]))
    assert built["version"] == contract.MANIFEST_VERSION
    old = {k: v for k, v in built.items()
           if k not in ("version", "gaps", "timeline", "coverage", "window", "inferred_schemas")}
    old["quarantine"] = {k: v for k, v in built["quarantine"].items() if k != "reasons"}
    (tmp_path / contract.MANIFEST).write_text(json.dumps(old))
    read = manifest_mod.read_manifest(str(tmp_path))
    assert read["version"] == contract.MANIFEST_VERSION and read["gaps"]["count"] == 0
    assert built["inferred_schemas"] == [] and read["inferred_schemas"] == []
    assert read["quarantine"]["reasons"] == [] and "events read" in manifest_mod.summary(read)
    (tmp_path / contract.MANIFEST).write_text(json.dumps({**built, "version": contract.MANIFEST_VERSION + 1}))
    assert cli.main(["summary", str(tmp_path)]) == 2
    with pytest.raises(contract.ManifestError, match="written by a newer cdc-replay"):
        manifest_mod.read_manifest(str(tmp_path))


def test_no_bare_status_or_kind_strings_outside_the_contract():
    """Statuses and kinds are named (contract.Status, contract.Kind) wherever the app and the
    Airflow package compare or write them. Allowed: manifest keys (`m["quarantine"]`, `"ddl": [...]`,
    `.get("quarantine")`), a column alias, and error stages (`"stage": "ddl"`)."""
    import ast
    import pathlib
    import tokenize

    values = {v for cls in (contract.Status, contract.Kind) for k, v in vars(cls).items()
              if k.isupper() and isinstance(v, str)}
    root = pathlib.Path(__file__).parent.parent
    bare = []
    for folder in ("spark_apps", "plugins", "dags"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "contract.py":
                continue
            with open(path) as f:
                tokens = [t for t in tokenize.generate_tokens(f.readline) if t.type not in (
                    tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
            for i, t in enumerate(tokens):
                if t.type != tokenize.STRING or t.string[0] not in "'\"" or ast.literal_eval(t.string) not in values:
                    continue
                before, after = [x.string for x in tokens[max(i - 2, 0):i]], tokens[i + 1].string
                if before[-1] == "[" or after == ":" or before in (["get", "("], ["alias", "("]) or \
                        (before[-1] == ":" and before[0] in ('"stage"', '"error_stage"')):
                    continue
                bare.append(f"{path.relative_to(root)}:{t.start[0]} {t.string}")
    assert not bare


def _counting(monkeypatch):
    """Counts, in this process: parses of a replay argv (any parser holding --source), contract
    checks, codec checks and S3/local location checks (storage.check_bucket)."""
    import argparse

    from spark_apps import storage

    counts = {"parse": 0, "check": 0, "check_codecs": 0, "check_bucket": 0}
    parse_known = argparse.ArgumentParser.parse_known_args

    def parse(self, *a, **k):
        if any("--source" in action.option_strings for action in self._actions):
            counts["parse"] += 1
        return parse_known(self, *a, **k)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse)
    for module, name in ((contract, "check"), (contract, "check_codecs"), (storage, "check_bucket")):
        original = getattr(module, name)

        def counted(*a, _name=name, _original=original, **k):
            counts[_name] += 1
            return _original(*a, **k)

        monkeypatch.setattr(module, name, counted)
    return counts


def test_argv_is_parsed_once_and_each_check_runs_once_per_process(tmp_path, monkeypatch):
    """Issue 29 point 3: `cdc-replay replay` parses its argv once and checks it once (rules,
    codecs, then the network) before spark-submit; the app, in its own process, the same."""
    (tmp_path / "src").mkdir()
    argv = ["--source", str(tmp_path / "src"), "--protocol", "canal-json", "--protocol-option",
            "enable-tidb-extension=true", "--output", str(tmp_path / "out"), "--emit", "snapshot"]
    monkeypatch.setenv("CDC_REPLAY_CDS_DIR", "off")
    submitted = []
    monkeypatch.setattr(cli.subprocess, "call", lambda command, **kw: submitted.append(command) or 0)
    counts = _counting(monkeypatch)
    assert cli.main(["replay", *argv]) == 0
    assert submitted and submitted[0][-len(argv):] == argv  # the command carries the same arguments
    assert counts == {"parse": 1, "check": 1, "check_codecs": 1, "check_bucket": 2}  # --source, --output
    # the app: parse_args checks, validate (run's first step) does not check again
    counts.update(dict.fromkeys(counts, 0))
    app.validate(app.parse_args(argv))
    assert counts == {"parse": 1, "check": 1, "check_codecs": 1, "check_bucket": 2}
