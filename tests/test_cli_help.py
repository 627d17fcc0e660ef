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
    example = text[text.index("example:"):].split("\n", 1)[1].replace("\\\n", " ")
    lines = [shlex.split(line) for line in example.splitlines() if line.strip()]
    assert [line[:2] for line in lines] == [["cdc-replay", "generate"], ["cdc-replay", "replay"]]
    build_parser().parse_args(lines[0][1:])
    args = replay_parser().parse_args(lines[1][2:])  # what `cdc-replay replay` parses
    assert args.emit == "snapshot" and args.protocol == "canal-json"


def test_replay_help_names_every_layout_and_kafka():
    text = " ".join(_help("replay").split())
    assert "Kafka-record archive with Spark" not in text
    assert "Replay a CDC archive" in text and "Kafka topics" in text
