"""Real captures other projects publish in their test suites (tests/fixtures/real/, provenance in
its README.md), replayed to a Parquet snapshot and compared, table by table, with the final state
that project's own test asserts (its expectation data is copied into the *.expected.json files,
never computed by our code).

Each capture is a set of plain message files, one message per line, the way the publishing test
feeds them to its consumer; they are turned into a Kafka-record archive in a tmp dir at test time
(the fixture files stay byte for byte as published). Expectations come in three forms, reduced here
to a final state by a tiny applier that shares no code with the product:
* rows: the rows a Paimon test reads back from its table (`+I[...]` strings);
* changelog: the +I/-U/+U/-D rows Flink's Canal format emits, applied per key;
* records: the per-message records TiCDC's consistency checker test asserts, the highest commit
  ts per key wins.
"""

from __future__ import annotations

import base64
import decimal
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REAL = Path(__file__).parent / "fixtures" / "real"


@dataclass
class Capture:
    id: str
    files: list[tuple[str, str]]  # (path under fixtures/real, Kafka topic), in the order the test sends them
    expected: str
    options: dict = field(default_factory=lambda: {"flat-message-flavor": "canal"})
    tables: str | None = None  # --tables, for a test that filters tables itself
    xfail: str | None = None


def _paimon(folder: str, names: list[str], topic: str = "t") -> list[tuple[str, str]]:
    return [(f"paimon/{folder}/{name}", topic) for name in names]


def _topics(folder: str, topics: int, files: int) -> list[tuple[str, str]]:
    # the multi-topic tests write file i of every topic before file i+1 of any
    return [(f"paimon/{folder}/topic{t}/canal-data-{i}.txt", f"topic{t}")
            for i in range(1, files + 1) for t in range(topics)]


_FIVE = [f"canal-data-{i}.txt" for i in range(1, 6)]
TIDB = {"enable-tidb-extension": "true"}
CAPTURES = [
    Capture("flink-canal-data", [("flink/canal-data.txt", "t")], "flink/canal-data.expected.json"),
    Capture("flink-canal-data-filter-table", [("flink/canal-data-filter-table.txt", "t")],
            "flink/canal-data-filter-table.expected.json", tables="my*.prod*"),
    Capture("paimon-table-schemaevolution", _paimon("table/schemaevolution", _FIVE),
            "paimon/table/schemaevolution/expected.json"),
    Capture("paimon-table-schemaevolutionmissingddl", _paimon("table/schemaevolutionmissingddl", _FIVE),
            "paimon/table/schemaevolutionmissingddl/expected.json"),
    Capture("paimon-table-schemaevolutionmultiple",
            _paimon("table/schemaevolutionmultiple", ["canal-data-1.txt", "canal-data-2.txt"]),
            "paimon/table/schemaevolutionmultiple/expected.json"),
    Capture("paimon-table-startupmode", _paimon("table/startupmode", ["canal-data-1.txt", "canal-data-2.txt"]),
            "paimon/table/startupmode/expected.json"),
    Capture("paimon-table-nonpk", _paimon("table/nonpk", ["canal-data-1.txt"]), "paimon/table/nonpk/expected.json"),
    Capture("paimon-table-incomplete", _paimon("table/incomplete", ["canal-data-2.txt"]),
            "paimon/table/incomplete/expected.json"),
    Capture("paimon-table-typenochange", _paimon("table/typenochange", ["canal-data-3.txt", "canal-data-4.txt"]),
            "paimon/table/typenochange/expected.json"),
    Capture("paimon-database-tostring", _paimon("database/tostring", ["canal-data-1.txt"]),
            "paimon/database/tostring/expected.json"),
    Capture("paimon-database-case-insensitive", _paimon("database/case-insensitive", ["canal-data-1.txt"]),
            "paimon/database/case-insensitive/expected.json"),
    Capture("paimon-database-schemaevolution", _topics("database/schemaevolution", 3, 3),
            "paimon/database/schemaevolution/expected.json"),
    Capture("paimon-database-prefixsuffix", _topics("database/prefixsuffix", 2, 3),
            "paimon/database/prefixsuffix/expected.json"),
    Capture("ticdc-consistency-checker-1", [("ticdc/consistency-checker-DataContent1.txt", "t")],
            "ticdc/consistency-checker-DataContent1.expected.json", options=TIDB),
    Capture("ticdc-consistency-checker-2", [("ticdc/consistency-checker-DataContent2.txt", "t")],
            "ticdc/consistency-checker-DataContent2.expected.json", options=TIDB),
    Capture("tibigdata-tidb-canal-json-ignore-case",
            [("tibigdata/TiDBCanalJsonDeserializationSchemaTest-testIgnoreCase.json", "t")],
            "tibigdata/TiDBCanalJsonDeserializationSchemaTest-testIgnoreCase.expected.json", options=TIDB),
]


# ---------------------------------------------------------------------------------------------
# the archive: one Kafka record per message line


def _messages(path: Path) -> list[bytes]:
    """The lines a publishing test sends: every line that parses as JSON (Paimon's isRecordLine
    skips the license header the same way), CRLF or LF terminated."""
    out = []
    for line in path.read_bytes().replace(b"\r\n", b"\n").split(b"\n"):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError:
            continue
        out.append(line)
    return out


def write_archive(capture: Capture, root: Path) -> None:
    offsets: dict[str, int] = {}
    lines: dict[str, list[str]] = {}
    for rel, topic in capture.files:
        for message in _messages(REAL / rel):
            offset = offsets.get(topic, 0)
            offsets[topic] = offset + 1
            lines.setdefault(topic, []).append(json.dumps({
                "topic": topic, "partition": 0, "offset": offset, "timestamp": 1700000000000 + offset,
                "key": None, "value": base64.b64encode(message).decode(), "headers": []}))
    for topic, records in lines.items():
        folder = root / topic / "0"
        folder.mkdir(parents=True)
        (folder / f"{topic}+0+{0:020d}.jsonl").write_text("\n".join(records) + "\n")


# ---------------------------------------------------------------------------------------------
# the expectations, reduced to {table: [row tuples as strings]}


def _split_fields(inner: str, sep: str) -> list[str]:
    """Split a Paimon/Flink row string on `sep` outside brackets (a byte list holds ', ')."""
    fields, depth, start = [], 0, 0
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0 and inner.startswith(sep, i):
            fields.append(inner[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    fields.append(inner[start:])
    return fields


def _paimon_rows(rows: list[str]) -> list[list]:
    out = []
    for row in rows:
        assert row.startswith("+I[") and row.endswith("]"), row
        out.append([None if v == "NULL" else v for v in _split_fields(row[3:-1], ", ")])
    return out


def _apply_changelog(changelog: list[str], columns: list[str], key: list[str]) -> list[list]:
    state: dict = {}
    for entry in changelog:
        kind, inner = entry[:2], entry[3:-1]
        values = [None if v == "null" else v for v in _split_fields(inner, ",")]
        assert len(values) == len(columns), entry
        row_key = tuple(values[columns.index(k)] for k in key)
        if kind in ("+I", "+U"):
            state[row_key] = values
        elif kind in ("-U", "-D"):
            assert state.pop(row_key) == values, entry
        else:
            raise AssertionError(entry)
    return list(state.values())


def _reduce_records(records: list[dict]) -> tuple[list[str], list[list]]:
    latest: dict = {}
    for record in records:
        if record["Pk"] not in latest or record["CommitTs"] > latest[record["Pk"]]["CommitTs"]:
            latest[record["Pk"]] = record
    columns = None
    rows = []
    for record in latest.values():
        keys = dict(part.split(": ", 1) for part in record["PkStr"][1:-1].split(", "))
        values = {**keys, **record["ColumnValues"]}
        columns = columns or sorted(values)
        assert sorted(values) == columns
        rows.append([values[c] for c in columns])
    return columns, rows


def expected_state(doc: dict) -> dict:
    """{name: (source tables, columns, rows)}."""
    out = {}
    for spec in doc["tables"]:
        sources = spec.get("sources") or [spec["table"]]
        if "rows" in spec:
            columns, rows = spec["columns"], _paimon_rows(spec["rows"])
        elif "changelog" in spec:
            columns, rows = spec["columns"], _apply_changelog(spec["changelog"], spec["columns"], spec["key"])
        else:
            columns, rows = _reduce_records(spec["records"])
        out[" + ".join(sources)] = (sources, columns, rows)
    return out


# ---------------------------------------------------------------------------------------------
# the snapshot, read back as strings the way the published expectations print values


def _show(value, arrow_type) -> str | None:
    import pyarrow as pa

    if value is None:
        return None
    if isinstance(value, bytes):  # Paimon prints VARBINARY as Java's Arrays.toString(byte[])
        return "[" + ", ".join(str(b) for b in struct.unpack(f"{len(value)}b", value)) + "]"
    if pa.types.is_float32(arrow_type):
        return ("f32", struct.unpack("f", struct.pack("f", value))[0])
    if pa.types.is_floating(arrow_type):
        return ("f64", value)
    if isinstance(value, decimal.Decimal):
        return ("dec", value)
    return str(value)


def _same(actual, expected: str | None) -> bool:
    """A float is compared as the type the snapshot holds (FLOAT: single precision), a decimal by
    value (the scale is the reader's typing: Paimon prints 1.20 for DECIMAL(10,2))."""
    if actual is None or expected is None:
        return actual is None and expected is None
    if isinstance(actual, tuple):
        kind, value = actual
        try:
            if kind == "f32":
                return value == struct.unpack("f", struct.pack("f", float(expected)))[0]
            if kind == "f64":
                return value == float(expected)
            return value == decimal.Decimal(expected)
        except (ValueError, decimal.InvalidOperation):
            return False
    return actual == expected


def read_snapshot(output: Path) -> dict:
    """{db.table: (column names, [row values])} from the Parquet snapshot."""
    import pyarrow.parquet as pq

    tables = {}
    for db in sorted(p for p in output.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        for table in sorted(p for p in db.iterdir() if p.is_dir()):
            files = sorted(table.rglob("*.parquet"))
            if not files:
                continue
            rows, names = [], None
            for f in files:
                t = pq.read_table(f)
                names = t.schema.names
                types = [t.schema.field(n).type for n in names]
                for record in t.to_pylist():
                    rows.append([_show(record[n], ty) for n, ty in zip(names, types)])
            tables[f"{db.name}.{table.name}"] = (names, rows)
    return tables


def _project(names: list[str], rows: list[list], columns: list[str]) -> list[list]:
    """The expected columns (matched case-insensitively, as MySQL names are); a column the
    snapshot's table does not have is null (a merged Paimon table's column that one source never had)."""
    lower = [n.lower() for n in names]
    index = [lower.index(c.lower()) if c.lower() in lower else None for c in columns]
    return [[row[i] if i is not None else None for i in index] for row in rows]


def _matches(actual_rows: list[list], expected_rows: list[list]) -> bool:
    remaining = list(expected_rows)
    for row in actual_rows:
        for j, candidate in enumerate(remaining):
            if all(_same(a, e) for a, e in zip(row, candidate)):
                del remaining[j]
                break
        else:
            return False
    return not remaining


PARAMS = [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
          for c in CAPTURES]


@pytest.mark.parametrize("capture", PARAMS)
def test_real_capture_replays_to_the_published_final_state(spark, capture, tmp_path):
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    write_archive(capture, tmp_path / "archive")
    argv = ["--source", str(tmp_path / "archive"), "--protocol", "canal-json",
            "--output", str(tmp_path / "snapshot"), "--emit", "snapshot", "--target-format", "parquet"]
    for key, value in capture.options.items():
        argv += ["--protocol-option", f"{key}={value}"]
    if capture.tables:
        argv += ["--tables", capture.tables]
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    assert manifest["counts"]["reconciled"], manifest["counts"]
    print(capture.id, json.dumps(manifest["counts"]))

    doc = json.loads((REAL / capture.expected).read_text())
    expected = expected_state(doc)
    actual = read_snapshot(tmp_path / "snapshot")
    covered = {s for sources, _, _ in expected.values() for s in sources} | set(doc.get("unasserted_tables", []))
    assert not set(actual) - covered, f"tables the publishing test does not expect: {sorted(set(actual) - covered)}"
    problems = []
    for name, (sources, columns, rows) in expected.items():
        got = []
        for source in sources:
            if source in actual:
                got += _project(*actual[source], columns)
        if not _matches(got, rows):
            problems.append(f"{name} {columns}:\n  expected {sorted(map(str, rows))}\n  snapshot {sorted(map(str, got))}")
    assert not problems, f"counts {manifest['counts']}\n" + "\n".join(problems)
    # the published captures are all valid: nothing of them may end in the quarantine
    assert manifest["counts"]["quarantined"] == 0, (manifest["counts"], manifest["quarantine"]["ddl"][:3])
