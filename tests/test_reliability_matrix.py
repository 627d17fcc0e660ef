"""The fault and bad-input matrix (docs/reliability.md lists every case with its outcome):
misuse is refused before any work, bad input is quarantined naming object, line, offset,
protocol and reason, faults are reported in one line, and the counts reconcile in every
case. Spark cases share one small archive and the session-scoped `spark` fixture, so the
module runs in CI within a few minutes."""

from __future__ import annotations

import os

import orjson
import pytest

from spark_apps import manifest as manifest_mod
from spark_apps import storage
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import ReplayError, validate

TIDB = ["--protocol-option", "enable-tidb-extension=true"]


def args_of(source, output, *extra, emit="snapshot"):
    argv = ["--source", source, "--protocol", "canal-json", *TIDB, "--output", output, "--emit", emit, *extra]
    return ReplayArgs.from_namespace(parser().parse_args(argv))


# ------------------------------------------------------------------ 1. the source is never touched

@pytest.mark.parametrize("output", ["{a}", "{a}/", "{a}/sub", "{root}", "file://{a}"])
def test_output_overlapping_the_source_is_refused(tmp_path, output):
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "x.jsonl").write_bytes(b"")
    with pytest.raises(ReplayError, match="overlaps --source"):
        validate(args_of(str(archive), output.format(a=archive, root=tmp_path)))
    assert (archive / "x.jsonl").exists()


def test_output_overlapping_the_source_through_a_symlink_is_refused(tmp_path):
    (tmp_path / "archive").mkdir()
    os.symlink(tmp_path / "archive", tmp_path / "link")
    with pytest.raises(ReplayError, match="overlaps --source"):
        validate(args_of(str(tmp_path / "archive"), str(tmp_path / "link")))


@pytest.mark.parametrize("option", ["--base-snapshot", "--schema"])
def test_output_overlapping_what_the_run_reads_is_refused(tmp_path, option):
    with pytest.raises(ReplayError, match=f"overlaps {option}"):
        validate(args_of(str(tmp_path / "archive"), str(tmp_path / "base"), option, str(tmp_path / "base"),
                         "--since", "5"))


def test_objects_staged_below_the_outputs_staging_area_are_not_an_overlap(tmp_path):
    """The Airflow DAGs copy the archive objects to <output>/_staging/airflow/objects and
    replay from there: the commit never touches _staging/, so that is no overlap."""
    output = tmp_path / "out"
    staged = output / "_staging" / "airflow" / "objects"
    staged.mkdir(parents=True)
    from spark_apps.replay import check  # the contract's rules (spark_apps.contract.check)

    check(args_of(str(staged), str(output)))  # accepted
    with pytest.raises(ReplayError, match="overlaps --source"):
        check(args_of(str(output / "data"), str(output)))


def test_s3_output_overlap_is_refused_and_siblings_are_not(tmp_path):
    with pytest.raises(ReplayError, match="overlaps --source"):
        validate(args_of("s3://lake/archive", "s3://lake/archive/out"))
    with pytest.raises(ReplayError, match="overlaps --source"):
        validate(args_of("s3://lake/archive/", "s3://lake"))
    assert not storage.overlaps("s3://lake/archive", "s3://lake/archive2")
    assert not storage.overlaps("s3://lake/archive", str(tmp_path / "lake/archive"))


def test_cli_refuses_output_equal_to_source_with_exit_2(tmp_path):
    import subprocess
    import sys

    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a.jsonl").write_bytes(b"{}\n")
    result = subprocess.run([sys.executable, "-m", "spark_apps.cli", "replay", "--source", str(archive),
                             "--protocol", "canal-json", "--output", str(archive), "--emit", "snapshot"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "overlaps --source" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (archive / "a.jsonl").read_bytes() == b"{}\n"


def _stage(staging, files):
    for rel, data in files.items():
        storage.write_bytes(storage.join(staging, rel), data)


def _manifest(run_id):
    return {"run_id": run_id, "output": {"objects": []}, "quarantine": {"objects": []}, "warnings": []}


def _commit_twice(output):
    """Run 1 commits two objects; a foreign file appears; run 2 commits one object."""
    _stage(storage.join(output, "_staging", "r1"), {"data/t/0/a.jsonl.gz": b"1", "data/t/1/b.jsonl.gz": b"1"})
    manifest_mod.commit(output, storage.join(output, "_staging", "r1"), _manifest("r1"))
    storage.write_bytes(storage.join(output, "notes/README.txt"), b"mine")
    storage.write_bytes(storage.join(output, "t/9/other.jsonl.gz"), b"mine")
    _stage(storage.join(output, "_staging", "r2"), {"data/t/0/a.jsonl.gz": b"2"})
    second = _manifest("r2")
    manifest_mod.commit(output, storage.join(output, "_staging", "r2"), second)
    return second


def _rel(output):
    return sorted(storage.relative(o.uri, output) for o in storage.list_objects(output))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_commit_deletes_only_what_an_earlier_run_wrote(tmp_path, where, request):
    output = str(tmp_path / "out") if where == "local" else request.getfixturevalue("bucket") + "/out"
    second = _commit_twice(output)
    # run 1's t/1/b is gone (ours, stale); the user's files stay and are reported
    assert _rel(output) == ["_manifest.json", "notes/README.txt", "t/0/a.jsonl.gz", "t/9/other.jsonl.gz"]
    assert storage.read_bytes(storage.join(output, "t/0/a.jsonl.gz")) == b"2"
    assert second["foreign_objects"] == ["notes/README.txt", "t/9/other.jsonl.gz"]
    assert any("not written by cdc-replay" in w and "notes/README.txt" in w for w in second["warnings"])
    assert manifest_mod.read_manifest(output)["committed"] == ["t/0/a.jsonl.gz"]


def test_commit_into_a_directory_of_other_files_deletes_nothing(tmp_path):
    output = str(tmp_path / "out")
    storage.write_bytes(storage.join(output, "data.csv"), b"keep")
    storage.write_bytes(storage.join(output, "_manifest.json.bak"), b"keep")
    _stage(storage.join(output, "_staging", "r1"), {"data/t/0/a.jsonl.gz": b"1"})
    manifest = _manifest("r1")
    manifest_mod.commit(output, storage.join(output, "_staging", "r1"), manifest)
    assert _rel(output) == ["_manifest.json", "_manifest.json.bak", "data.csv", "t/0/a.jsonl.gz"]
    assert manifest["foreign_objects"] == ["_manifest.json.bak", "data.csv"]


def test_a_commit_killed_midway_still_lets_the_next_run_clean_its_objects(tmp_path):
    """The commit log written before anything moves names the objects of both runs."""
    output = str(tmp_path / "out")
    _stage(storage.join(output, "_staging", "r1"), {"data/t/0/a.jsonl.gz": b"1", "data/t/5/z.jsonl.gz": b"1"})
    manifest_mod.commit(output, storage.join(output, "_staging", "r1"), _manifest("r1"))
    # run 2 was killed after writing its log and removing the manifest, with one object moved
    storage.write_bytes(storage.join(output, manifest_mod.COMMIT_LOG), orjson.dumps(
        {"run_id": "r2", "committed": ["t/0/a.jsonl.gz", "t/5/z.jsonl.gz", "t/7/new.jsonl.gz"]}))
    storage.delete(storage.join(output, manifest_mod.MANIFEST))
    storage.write_bytes(storage.join(output, "t/7/new.jsonl.gz"), b"2")
    _stage(storage.join(output, "_staging", "r3"), {"data/t/0/a.jsonl.gz": b"3"})
    third = _manifest("r3")
    manifest_mod.commit(output, storage.join(output, "_staging", "r3"), third)
    assert _rel(output) == ["_manifest.json", "t/0/a.jsonl.gz"] and third["foreign_objects"] == []


# ------------------------------------------------------------------ 4. nonsense is quarantined, never fatal

import json  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cdc_codecs.base import KafkaRecord  # noqa: E402
from cdc_codecs.archive import format_record  # noqa: E402

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=False),
                 st.text(max_size=8), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                            st.integers(), max_size=2))


def _sample_records():
    from spark_apps.generate import generate

    generated = generate(transactions=12, partitions=1, seed=3)
    return [r for r in generated.records if r.value]


SAMPLES = _sample_records()


@st.composite
def mutated_records(draw):
    """A valid archived canal-json record with one field of its message replaced by junk,
    removed, or the value's bytes damaged."""
    record = draw(st.sampled_from(SAMPLES))
    doc = orjson.loads(record.value)
    how = draw(st.sampled_from(["replace", "delete", "column", "bytes"]))
    if how == "bytes":
        value = bytearray(record.value)
        position = draw(st.integers(0, len(value) - 1))
        value[position] = draw(st.integers(0, 255))
        return _with_value(record, bytes(value))
    if how == "column" and isinstance(doc.get("data"), list) and doc["data"] and doc["data"][0]:
        row = doc["data"][0]
        name = draw(st.sampled_from(sorted(row)))
        if draw(st.booleans()):
            row[name] = draw(JUNK)
        else:
            del row[name]
    else:
        name = draw(st.sampled_from(sorted(doc)))
        if how == "delete":
            del doc[name]
        else:
            doc[name] = draw(JUNK)
    return _with_value(record, json.dumps(doc, ensure_ascii=False).encode())  # json: integers beyond 64 bits too


def _with_value(record, value):
    return KafkaRecord(record.topic, record.partition, record.offset, record.timestamp, record.key, value,
                       record.headers, record.object)


def _decode_file(path):
    import pyarrow as pa

    from spark_apps.archive_io import decode_objects_fn

    batch = pa.RecordBatch.from_pylist([{"uri": path, "size": os.path.getsize(path)}])
    rows = []
    for out in decode_objects_fn("canal-json", {"enable-tidb-extension": "true"})(iter([batch])):
        rows += out.to_pylist()
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=mutated_records())
def test_a_mutated_message_is_decoded_or_quarantined_naming_it(tmp_path_factory, record):
    """Every mutation either decodes to events that fit the schema and make sense, or becomes
    exactly one quarantine row with object, line, offset and the reason."""
    from spark_apps.archive_io import event_problem

    path = str(tmp_path_factory.mktemp("m") / "a.jsonl")
    with open(path, "wb") as f:
        f.write(format_record(record) + b"\n")
    rows = _decode_file(path)
    quarantined = [r for r in rows if r["kind"] == "quarantine"]
    if quarantined:
        assert len(rows) == 1
        q = rows[0]
        assert q["object"] == path and q["line"] == 1 and q["offset"] == record.offset
        assert q["topic"] == record.topic and q["partition"] == record.partition
        assert q["raw_value"] == record.value and q["error"] and "canal-json" in q["error"]
    else:
        assert rows and all(r["kind"] == "empty" or event_problem(r) is None for r in rows)
        assert all(r["offset"] == record.offset and r["line"] == 1 for r in rows)


# ------------------------------------------------------------------ the matrix archive: one Spark run, every bad input

import base64  # noqa: E402
import gzip  # noqa: E402
import zlib  # noqa: E402

from cdc_codecs.archive import object_name  # noqa: E402


def _mutate(record, change):
    doc = orjson.loads(record.value)
    change(doc)
    return _with_value(record, orjson.dumps(doc))


def _row_records(records, table):
    return [i for i, r in enumerate(records) if r.value and b'"isDdl":false' in r.value and f'"table":"{table}"'.encode() in r.value
            and b'"type":"INSERT"' in r.value]


def build_matrix_archive(root):
    """A canal-json archive of two partitions holding one case of every bad input. Returns
    {case: what identifies it} for the assertions."""
    from spark_apps.generate import generate

    records = list(generate(transactions=60, partitions=2, seed=21, pending_transactions=2).records)
    rows = [i for i in _row_records(records, "orders") if records[i].partition == 0]
    ddl = [i for i, r in enumerate(records) if r.value and b'"isDdl":true' in r.value and r.partition == 0]
    cases = {
        "database missing": (rows[1], lambda d: d.pop("database")),
        "database not a string": (rows[2], lambda d: d.__setitem__("database", 5)),
        "table not a string": (rows[3], lambda d: d.__setitem__("table", ["orders"])),
        "pkNames naming a column not in the row": (rows[4], lambda d: d.__setitem__("pkNames", ["nope"])),
        "empty row object": (rows[5], lambda d: d.__setitem__("data", [{}])),
        "value type does not match": (rows[6], lambda d: d["data"][0].__setitem__("amount", {"x": 1})),
        "DDL that cannot be parsed": (ddl[-1], lambda d: d.__setitem__("sql", "ALTER TABLE orders ADD COLUMN")),
    }
    identified = {}
    for case, (index, change) in cases.items():
        records[index] = _mutate(records[index], change)
        identified[case] = (records[index].partition, records[index].offset)
    by_partition = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    lines = {p: [format_record(r) for r in rs] for p, rs in by_partition.items()}
    # line-level damage in partition 0: bytes that are not UTF-8, a value that is not base64
    bad_utf8 = b'{"topic": "shop", "partition": 0, "offset": \xff\xfe}'
    bad_b64 = orjson.loads(lines[0][10])
    bad_b64["value"] = "!!not base64!!"
    identified["line not UTF-8"] = bad_utf8
    identified["value not base64"] = (0, bad_b64["offset"])
    lines[0][10] = orjson.dumps(bad_b64)
    lines[0].insert(20, bad_utf8)
    objects = {}
    half = {p: len(ls) // 2 for p, ls in lines.items()}
    for p, ls in lines.items():
        for part, chunk in ((0, ls[:half[p]]), (1, ls[half[p]:])):
            first = orjson.loads(chunk[0]).get("offset") if part else 0
            uri = storage.join(root, object_name("shop", p, first if isinstance(first, int) else part))
            objects[(p, part)] = (uri, b"\n".join(chunk) + b"\n")
    # partition 1's second object is truncated in the middle of its compressed bytes
    for key, (uri, data) in objects.items():
        packed = gzip.compress(data, mtime=0)
        if key == (1, 1):
            packed = packed[: len(packed) * 2 // 3]
            readable = zlib.decompressobj(31).decompress(packed)  # what survives, computed by zlib alone
            complete = readable[: readable.rfind(b"\n") + 1].splitlines()
            identified["truncated gzip"] = {"uri": uri, "bytes": len(packed), "complete": len(complete),
                                            "last_good": orjson.loads(complete[-1])["offset"],
                                            "records_of_partition_1": half[1] + len(complete)}
        storage.write_bytes(uri, packed)
    empty = storage.join(root, "shop/0/empty.jsonl.gz")
    storage.write_bytes(empty, b"")
    identified["zero-byte gzip"] = empty
    return identified


def _quarantine_lines(output):
    found = []
    for info in storage.list_objects(storage.join(output, "_quarantine")):
        found += [orjson.loads(line) for line in gzip.decompress(storage.read_bytes(info.uri)).splitlines()]
    return found


@pytest.fixture(scope="module")
def matrix_run(spark, tmp_path_factory):
    from spark_apps.replay import run

    root = tmp_path_factory.mktemp("matrix")
    identified = build_matrix_archive(str(root / "archive"))
    outputs = []
    manifests = []
    for n in (1, 2):  # the same replay twice: reruns must be byte-identical
        outputs.append(str(root / f"out{n}"))
        manifests.append(run(args_of(str(root / "archive"), outputs[-1], "--max-bad-records", "100",
                                     "--target-option", "enable-tidb-extension=true"), spark=spark))
    return identified, outputs, manifests


def test_matrix_run_completes_and_counts_reconcile(matrix_run):
    identified, outputs, manifests = matrix_run
    counts = manifests[0]["counts"]
    assert counts["reconciled"]
    assert counts["read"] == sum(counts[k] for k in ("applied", "duplicate", "pending", "filtered", "quarantined"))
    assert counts["quarantined"] == len(_quarantine_lines(outputs[0]))
    # archive lines that are not records (no coordinates) were counted, nothing overlapped
    assert counts["records"] > counts["offsets"] and "read twice" not in manifest_mod.summary(manifests[0])
    assert not os.path.exists(os.path.join(outputs[0], "_lease.json"))  # released


@pytest.mark.parametrize("case", ["database missing", "database not a string", "table not a string",
                                  "pkNames naming a column not in the row", "empty row object",
                                  "value type does not match", "value not base64"])
def test_matrix_bad_message_is_quarantined_with_its_coordinates(matrix_run, case):
    identified, outputs, _ = matrix_run
    partition, offset = identified[case]
    hits = [q for q in _quarantine_lines(outputs[0]) if q["partition"] == partition and q["offset"] == offset]
    assert len(hits) == 1, case
    q = hits[0]
    assert q["topic"] == "shop" and q["protocol"] == "canal-json" and q["line"] >= 1 and q["error"]
    assert q["object"].endswith(".jsonl.gz") and q["error_stage"] in ("archive", "decode")


def test_matrix_unparseable_ddl_is_quarantined(matrix_run):
    identified, outputs, manifests = matrix_run
    partition, offset = identified["DDL that cannot be parsed"]
    hits = [q for q in _quarantine_lines(outputs[0]) if q["offset"] == offset and q["error_stage"] == "ddl"]
    assert len(hits) == 1 and "DDL not applied" in hits[0]["error"] and hits[0]["protocol"] == "canal-json"


def test_matrix_quarantine_keeps_raw_bytes_exactly(matrix_run):
    identified, outputs, _ = matrix_run
    raw = identified["line not UTF-8"]
    hits = [q for q in _quarantine_lines(outputs[0]) if q.get("raw_line_base64")]
    assert [base64.b64decode(q["raw_line_base64"]) for q in hits] == [raw]
    assert hits[0]["line"] == 21 and "raw_line" not in hits[0]  # no U+FFFD look-alike


def test_matrix_truncated_gzip_keeps_every_complete_line(matrix_run):
    identified, outputs, manifests = matrix_run
    cut = identified["truncated gzip"]
    hits = [q for q in _quarantine_lines(outputs[0]) if q["object"] == cut["uri"] and q["error_stage"] == "archive"]
    assert len(hits) == 1
    q = hits[0]
    assert q["byte_offset"] == cut["bytes"] and q["last_good_offset"] == cut["last_good"]
    assert q["line"] == cut["complete"] + 1 and q["partition"] == 1 and "truncated" in q["error"]
    partition_1 = [p for p in manifests[0]["partitions"] if p["partition"] == 1][0]
    assert partition_1["records"] == cut["records_of_partition_1"]


def test_matrix_zero_byte_gzip_is_reported(matrix_run):
    identified, outputs, _ = matrix_run
    hits = [q for q in _quarantine_lines(outputs[0]) if q["object"] == identified["zero-byte gzip"]]
    assert len(hits) == 1 and "zero bytes" in hits[0]["error"]


# ------------------------------------------------------------------ 7. reruns are byte-identical

def test_matrix_rerun_is_byte_identical(matrix_run):
    _, outputs, manifests = matrix_run
    first, second = (_rel(o) for o in outputs)
    assert first == second
    for rel in first:
        if rel != "_manifest.json":
            assert storage.read_bytes(storage.join(outputs[0], rel)) == storage.read_bytes(storage.join(outputs[1], rel)), rel

    def scrub(manifest, output):
        text = orjson.dumps(manifest).decode().replace(output, "<output>")
        doc = orjson.loads(text)
        for key in ("run_id", "started_at", "finished_at", "duration_s"):
            doc.pop(key)
        return doc

    assert scrub(manifests[0], outputs[0]) == scrub(manifests[1], outputs[1])


# ------------------------------------------------------------------ 6. errors a user can act on: one line, exit 2

def _cli(*args, env=None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "spark_apps.cli", "replay", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def _s3_case(bucket, case):
    from spark_apps.local_s3 import free_port

    env = dict(os.environ)
    source, output = f"{bucket}/archive", f"{bucket}/out"
    storage.write_bytes(f"{source}/shop/0/a.jsonl", b"{}\n")
    if case == "missing source bucket":
        source = "s3://no-such-archive/tidb"
    elif case == "missing output bucket":
        output = "s3://no-such-lake/out"
    elif case == "missing credentials":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            env.pop(name, None)
        env.update(AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent",
                   AWS_EC2_METADATA_DISABLED="true")
    elif case == "unreachable endpoint":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    return source, output, env


@pytest.mark.parametrize("case, words", [
    ("missing source bucket", "--source s3://no-such-archive/tidb: bucket 'no-such-archive' does not exist"),
    ("missing output bucket", "--output s3://no-such-lake/out: bucket 'no-such-lake' does not exist"),
    ("missing credentials", "no AWS credentials found"),
    ("unreachable endpoint", "cannot reach the S3 endpoint http://127.0.0.1:"),
])
def test_s3_problems_are_one_line_with_exit_2_before_spark(bucket, case, words):
    source, output, env = _s3_case(bucket, case)
    result = _cli("--source", source, "--protocol", "canal-json", "--output", output, "--emit", "snapshot", env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cdc-replay: error: ") and words in lines[0], lines
    assert "Traceback" not in result.stderr + result.stdout and "spark" not in result.stderr.lower()


# ------------------------------------------------------------------ 5. masking are masked and never in argv

SECRET_ARGV = ["--source", "s3://a/b", "--protocol", "avro", "--protocol-option",
               "schema-registry=https://alice:s3cr3t@registry:8081", "--protocol-option", "enable-tidb-extension=true",
               "--output", "s3://c/d", "--emit", "topics", "--target-option=claim-check-storage-uri=s3://x/y?"
               "access-key=AKIA1&secret-access-key=hunter2", "--target-option", "basic-auth-password=pw9"]


@pytest.mark.parametrize("text, masked", [
    ("https://alice:s3cr3t@registry:8081/x", "https://alice:***@registry:8081/x"),
    ("s3://bucket/p?access-key=AKIA1&secret-access-key=hunter2&region=us", "s3://bucket/p?access-key=***&secret-access-key=***&region=us"),
    ("http://registry:8081", "http://registry:8081"),
    ("file:///tmp/registry", "file:///tmp/registry"),
])
def test_credentials_in_values_are_masked(text, masked):
    from spark_apps import masking

    assert masking.mask_text(text) == masked
    assert masking.mask_option("basic-auth-password", "pw") == "***"
    assert masking.mask_option("enable-tidb-extension", "true") == "true"


def test_credentials_reach_spark_submit_through_the_environment_only():
    from spark_apps import cli, masking

    kept, secret = masking.split_argv(SECRET_ARGV)
    command = " ".join(cli.replay_command(kept))
    for word in ("s3cr3t", "hunter2", "pw9", "AKIA1"):
        assert word not in command
    assert "enable-tidb-extension=true" in command
    env = masking.environment(secret)
    restored = masking.argv_from_environment(kept, env)
    original = parser().parse_args(SECRET_ARGV)
    again = parser().parse_args(restored)
    assert sorted(again.protocol_option) == sorted(original.protocol_option)
    assert sorted(again.target_option) == sorted(original.target_option)


def test_the_airflow_operator_passes_credentials_in_the_environment():
    import sys

    plugins = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins")
    if plugins not in sys.path:  # imported by name, as Airflow does (tests/airflow/conftest.py)
        sys.path.insert(0, plugins)
    from cdc_replay_airflow.operators.replay import submit_settings
    from cdc_replay_airflow.request import parse_request

    from spark_apps import masking

    request = parse_request({"source": "s3://cdc-archive/x", "protocol": "avro", "output": "s3://lake/y",
                             "emit": "topics", "protocol_options": {"schema-registry": "http://bob:pa55@reg:8081"}})
    settings = submit_settings(request, master="local[1]", python="/usr/bin/python3")
    kept, secret = masking.split_argv(settings["application_args"])
    assert "pa55" not in " ".join(kept) and "pa55" in masking.environment(secret)[masking.ENV]


def test_the_manifest_masks_credentials():
    from types import SimpleNamespace

    args = SimpleNamespace(protocol="avro", emit="topics", output_format="kafka", target_topic="{topic}",
                           dispatcher="index-value", table_patterns=lambda: [])
    manifest = manifest_mod.build(
        manifest_mod.RunFacts(
            run_id="r", args=args, source="s3://a", output="s3://b", started=0,
            source_options={"schema-registry": "https://alice:s3cr3t@registry:8081"}, target_protocol="avro",
            target_options={"schema-registry": "https://alice:s3cr3t@registry:8081", "basic-auth-password": "pw9"}),
        manifest_mod.ReadFacts(objects=[], partition_stats=[], counts=[], cut={
            "kind": "archive_end", "commit_ts": None, "point": None, "description": "", "warnings": []}),
        manifest_mod.Outcome(written=[], quarantine_objects=[], ddl_log=[], ddl_failures=[]))
    text = orjson.dumps(manifest).decode() + manifest_mod.summary(manifest)
    assert "s3cr3t" not in text and "pw9" not in text and "alice:***@registry" in text


def test_corrupt_gzip_yields_the_lines_before_and_names_the_exact_byte(tmp_path):
    """Three gzip members (as appended uploads write); the third's header is damaged: the two
    first members' lines all come out, and the damage is placed at that very byte."""
    members = [gzip.compress(b"".join(b"%d-%d\n" % (m, i) for i in range(1000)), mtime=0) for m in range(3)]
    damaged = bytearray(members[2])
    damaged[3] = 0xE0  # reserved FLG bits: not a gzip header any more
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(members[0] + members[1] + bytes(damaged))
    got = []
    with pytest.raises(storage.DamagedObject) as e:
        for line in storage.iter_lines(str(path)):
            got.append(line)
    assert got == [b"%d-%d" % (m, i) for m in range(2) for i in range(1000)]
    assert e.value.byte_offset == len(members[0]) + len(members[1]) + 3


@settings(max_examples=2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(mutations=st.lists(mutated_records(), min_size=8, max_size=8, unique_by=lambda r: r.offset))
def test_a_replay_of_mutated_messages_always_completes(spark, tmp_path_factory, mutations):
    """Spark end to end: an archive with 8 mutated messages replays to completion, counts
    reconcile, and only mutated records are quarantined, each named."""
    from spark_apps.generate import generate
    from spark_apps.replay import run

    root = tmp_path_factory.mktemp("mutated")
    by_offset = {r.offset: r for r in mutations}
    records = [by_offset.get(r.offset, r) if r.value else r
               for r in generate(transactions=12, partitions=1, seed=3).records]
    storage.write_bytes(str(root / "archive" / object_name("shop", 0, 0)),
                        gzip.compress(b"".join(format_record(r) + b"\n" for r in records), mtime=0))
    manifest = run(args_of(str(root / "archive"), str(root / "out"), "--max-bad-records", "100"), spark=spark)
    assert manifest["counts"]["reconciled"]
    quarantined = _quarantine_lines(str(root / "out"))
    assert len(quarantined) == manifest["counts"]["quarantined"]
    for q in quarantined:
        assert q["offset"] in by_offset and q["protocol"] == "canal-json" and q["error"], q
        assert q["object"].endswith(".jsonl.gz") and q["line"] == q["offset"] + 1


# ------------------------------------------------------------------ 2. commits are atomic for readers (S3)

def _independent_reader(output):
    """The documented reader rule (docs/reliability.md), with boto3 alone: read
    `<output>/_manifest.json`, take its object lists, read exactly those objects. Returns the
    run id and the objects' contents (a sorted list: names differ between the staged and the
    final copies, contents do not)."""
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])

    def get(uri):
        bucket, _, key = uri[len("s3://"):].partition("/")
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()

    doc = json.loads(get(f"{output}/_manifest.json"))
    uris = [e["uri"] for e in doc["output"]["objects"] + doc["quarantine"]["objects"]]
    return doc["run_id"], sorted(get(u) for u in uris)


def _contents(manifest):
    return sorted(storage.read_bytes(e["uri"]) for e in manifest["output"]["objects"] + manifest["quarantine"]["objects"])


def _clone(src, dst):
    """Every object under `src` copied below `dst`, manifests with their URIs rewritten."""
    for info in storage.list_objects(src):
        target = storage.join(dst, storage.relative(info.uri, src))
        if info.uri.endswith(".json"):
            storage.write_bytes(target, storage.read_bytes(info.uri).replace(src.encode(), dst.encode()))
        else:
            storage.copy(info.uri, target)


@pytest.fixture(scope="module")
def two_outputs(spark, s3_endpoint):
    """On the loopback S3 server: an output committed by a replay of archive A (old), and a
    replay of archive B (other data, a bad line for a quarantine object) into the same output,
    stopped just before its commit: the staged objects and the manifest it would commit."""
    from spark_apps import replay
    from spark_apps.generate import generate, write_archive

    root = "s3://atomic-commit"
    storage.ensure_bucket(root)
    write_archive(generate(transactions=15, partitions=3, seed=1).records, f"{root}/archive-a")
    write_archive(generate(transactions=25, partitions=2, seed=2).records, f"{root}/archive-b", bad_lines=1)
    old = replay.run(args_of(f"{root}/archive-a", f"{root}/base"), spark=spark)
    captured = {}
    real_commit = replay.manifest_mod.commit
    replay.manifest_mod.commit = lambda home, staging, manifest, replace=True: captured.update(
        staging=staging, manifest=manifest)
    try:
        replay.run(args_of(f"{root}/archive-b", f"{root}/base", "--max-bad-records", "10"), spark=spark)
    finally:
        replay.manifest_mod.commit = real_commit
    new = captured["manifest"]
    assert new["quarantine"]["objects"] and old["run_id"] != new["run_id"]
    return root, old, new, captured["staging"]


def _commit_in_a_process(output, staging, manifest, kill_at):
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(orjson.dumps(manifest))
    code = ("import sys, orjson; from spark_apps import manifest as m; "
            "m.commit(sys.argv[1], sys.argv[2], orjson.loads(open(sys.argv[3], 'rb').read()))")
    env = {**os.environ, manifest_mod.KILL_ENV: kill_at}
    return subprocess.run([sys.executable, "-c", code, output, staging, f.name], env=env, capture_output=True,
                          timeout=60)


@pytest.mark.parametrize("step", manifest_mod.COMMIT_STEPS)
def test_a_reader_sees_the_old_or_the_new_output_whatever_step_the_commit_is_killed_at(two_outputs, step):
    """The commit of replay B is SIGKILLed at each step; our readers (summary, the object list
    --base-snapshot decodes) and an independent one following the documented rule see all of
    A or all of B, never a mix; the next successful commit finishes and cleans everything."""
    root, old, new, staging = two_outputs
    output = f"{root}/killed-{step}"
    _clone(f"{root}/base", output)  # A committed, B staged below _staging/<run>/
    doc = orjson.loads(orjson.dumps(new).replace(f"{root}/base".encode(), output.encode()))
    run_staging = staging.replace(f"{root}/base", output)
    old_contents, new_contents = _contents(old), sorted(storage.read_bytes(u.uri) for u in storage.list_objects(staging))

    result = _commit_in_a_process(output, run_staging, doc, step)
    assert result.returncode == -9, result.stderr.decode()[-2000:]

    run_id, contents = _independent_reader(output)
    expected = {old["run_id"]: old_contents, new["run_id"]: new_contents}[run_id]
    assert contents == expected
    ours = manifest_mod.read_manifest(output)
    assert f"cdc-replay run {run_id}" in manifest_mod.summary(ours)
    base_objects = manifest_mod.current_objects(ours)
    assert sorted(storage.read_bytes(o.uri) for o in base_objects) == sorted(
        storage.read_bytes(e["uri"]) for e in (old if run_id == old["run_id"] else new)["output"]["objects"])
    assert run_id == (old["run_id"] if step == "logged" else new["run_id"])

    # the next run: finishes an interrupted commit, then stages and commits its own (B again)
    manifest_mod.finish_interrupted(output)
    assert _independent_reader(output) == (run_id, expected)
    third = orjson.loads(orjson.dumps(doc).replace(run_staging.encode(), f"{output}/_staging/r3".encode()))
    third["run_id"] = "r3"
    _clone(f"{root}/base/_staging/{new['run_id']}", f"{output}/_staging/r3")
    manifest_mod.commit(output, f"{output}/_staging/r3", third)
    left = _rel(output)
    assert left == sorted(["_manifest.json", *third["committed"]])  # no staging, log or stale object left
    assert _independent_reader(output) == ("r3", new_contents) and third["foreign_objects"] == []


def test_a_replay_killed_in_its_commit_is_finished_by_the_next_run(spark, two_outputs):
    """End to end through `cdc-replay replay`: the run is SIGKILLed while copying its staged
    objects into place; readers see its complete output (the manifest names the staged copies);
    the next replay finishes that commit, commits its own, and leaves no staging behind."""
    from spark_apps import replay

    root, old, new, staging = two_outputs
    output = f"{root}/killed-cli"
    _clone(f"{root}/base", output)
    storage.delete_prefix(f"{output}/_staging")  # only A, as committed
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "spark_apps.cli", "replay", "--source", f"{root}/archive-b", "--protocol", "canal-json",
         *TIDB, "--output", output, "--emit", "snapshot", "--max-bad-records", "10", "--master", "local[1]"],
        env={**os.environ, manifest_mod.KILL_ENV: "copying"}, capture_output=True, text=True, timeout=900)
    # the driver (spark-submit's child) was killed: the command fails
    assert result.returncode != 0, result.stderr[-3000:]
    run_id, contents = _independent_reader(output)
    assert run_id not in (old["run_id"], new["run_id"]) and contents == _contents(new)
    assert manifest_mod.read_manifest(output)["commit"]["staging"] == f"_staging/{run_id}"
    # the killed run's lease is left, but its process is gone (this host): the next run takes
    # it over at once, with the default timeout (600 s)
    from spark_apps import lease as lease_mod

    left = lease_mod.read(output)
    assert left["owner"]["run_id"] == run_id and lease_mod.owner_dead(left)
    again = replay.run(args_of(f"{root}/archive-b", output, "--max-bad-records", "10"), spark=spark)
    assert _rel(output) == sorted(["_manifest.json", *again["committed"]])
    assert _independent_reader(output) == (again["run_id"], _contents(new))


# ------------------------------------------------------------------ 8. every compression keeps the lines before damage

def _compressors():
    import lz4.frame
    import snappy
    import zstandard

    return {
        ".gz": lambda d: gzip.compress(d, mtime=0),
        ".zst": lambda d: zstandard.ZstdCompressor(write_checksum=True).compress(d),
        ".lz4": lambda d: lz4.frame.compress(d, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_checksum=True),
        ".snappy": lambda d: snappy.StreamCompressor().compress(d),
    }


def _archive_lines(n=6000):
    from spark_apps.generate import generate

    records = list(generate(transactions=n // 3, partitions=1, seed=5).records)
    return [format_record(r) for r in records]


def _read_until_damage(uri):
    got = []
    try:
        for line in storage.iter_lines(uri):
            got.append(line)
    except storage.DamagedObject as e:
        return got, e
    return got, None


@pytest.mark.parametrize("ext", [".gz", ".zst", ".lz4", ".snappy"])
def test_a_truncated_compressed_object_keeps_every_complete_line(tmp_path, ext):
    """Cut at two thirds of its compressed bytes: the complete lines before the cut come out
    (as many as `lz4 -dc` / `zstd -dc` / `gzip -dc` give, when the tool is here), then the damage
    names the object's length."""
    import shutil
    import subprocess

    lines = _archive_lines()
    packed = _compressors()[ext](b"\n".join(lines) + b"\n")
    cut = packed[: len(packed) * 2 // 3]
    path = tmp_path / f"shop-0-0.jsonl{ext}"
    path.write_bytes(cut)
    got, damage = _read_until_damage(str(path))
    assert damage is not None and damage.byte_offset == len(cut) and "truncated" in damage.reason
    assert 0 < len(got) < len(lines) and got == lines[: len(got)]
    tool = {".gz": "gzip", ".zst": "zstd", ".lz4": "lz4"}.get(ext)
    if tool and shutil.which(tool):
        out = subprocess.run([tool, "-dc", str(path)], capture_output=True).stdout
        assert got == out[: out.rfind(b"\n") + 1].splitlines()


@pytest.mark.parametrize("ext", [".gz", ".zst", ".lz4", ".snappy"])
def test_a_corrupt_compressed_object_keeps_the_lines_before_and_names_the_byte(tmp_path, ext):
    """Two frames (members) appended; the second's first byte is damaged: every line of the
    first comes out and the damage is placed in the second frame's header, not at the start."""
    lines = _archive_lines()
    first = _compressors()[ext](b"\n".join(lines[:3000]) + b"\n")
    second = bytearray(_compressors()[ext](b"\n".join(lines[3000:]) + b"\n"))
    second[0] ^= 0xFF  # not a frame (member, stream) header any more
    path = tmp_path / f"shop-0-0.jsonl{ext}"
    path.write_bytes(first + bytes(second))
    got, damage = _read_until_damage(str(path))
    assert got == lines[:3000]
    assert damage is not None and "corrupt" in damage.reason
    assert len(first) <= damage.byte_offset < len(first) + 16, damage


@pytest.mark.parametrize("ext", [".zst", ".lz4", ".snappy"])
def test_a_corrupt_block_inside_a_frame_keeps_the_blocks_before(tmp_path, ext):
    """A byte changed in the middle of one frame (lz4 and zstd with their checksums): the
    lines of the blocks before it come out, the damage is named at or after the changed byte."""
    lines = _archive_lines()
    packed = bytearray(_compressors()[ext](b"\n".join(lines) + b"\n"))
    middle = len(packed) // 2
    packed[middle] ^= 0x55
    path = tmp_path / f"shop-0-0.jsonl{ext}"
    path.write_bytes(bytes(packed))
    got, damage = _read_until_damage(str(path))
    assert damage is not None and "corrupt" in damage.reason and damage.byte_offset >= middle
    if ext != ".zst":  # zstd checks its checksum only at the frame's end: the lines read are not known good
        assert 0 < len(got) < len(lines) and got == lines[: len(got)]


@pytest.mark.parametrize("ext", [".gz", ".zst", ".lz4", ".snappy"])
@pytest.mark.parametrize("decoder", ["python", "auto"])
def test_a_damaged_object_is_quarantined_naming_the_byte_after_its_records(tmp_path, monkeypatch, ext, decoder):
    """What a Spark decode task does with a truncated object (decode_objects_fn, the Python
    codec and the compiled one): the complete records are decoded, one quarantine row says
    `object damaged at byte N` with the last good offset."""
    import pyarrow as pa

    from spark_apps.archive_io import decode_objects_fn
    from spark_apps.native_decode import ENV

    monkeypatch.setenv(ENV, decoder)
    lines = _archive_lines()
    packed = _compressors()[ext](b"\n".join(lines) + b"\n")
    cut = packed[: len(packed) * 2 // 3]
    path = tmp_path / f"shop-0-0.jsonl{ext}"
    path.write_bytes(cut)
    complete, _ = _read_until_damage(str(path))
    run = decode_objects_fn("canal-json", {"enable-tidb-extension": "true"})
    rows = [r for b in run(iter([pa.RecordBatch.from_pylist([{"uri": str(path), "size": len(cut)}])]))
            for r in b.to_pylist()]
    damaged = [r for r in rows if r.get("error_stage") == "archive"]
    assert len(damaged) == 1 and f"object damaged at byte {len(cut)}" in damaged[0]["error"]
    assert f"after line {len(complete)}" in damaged[0]["error"]
    last = orjson.loads(complete[-1])["offset"]
    assert f"offset {last}" in damaged[0]["error"]
    assert {r["offset"] for r in rows if r.get("error_stage") is None and r.get("offset") is not None} == {
        orjson.loads(line)["offset"] for line in complete}


def test_the_summary_says_read_twice_only_for_records_read_twice():
    """Archive lines that are not records (no coordinates) are counted in `records` but have no
    offset: they are not records read twice; a partition with more records than offsets is."""
    from types import SimpleNamespace

    args = SimpleNamespace(protocol="canal-json", emit="snapshot", output_format="kafka", target_topic="{topic}",
                           dispatcher="default", table_patterns=lambda: [])

    def manifest(records_of_partition, archive_lines):
        partition = {"topic": "shop", "partition": 0, "records": records_of_partition, "offsets": 10,
                     "min_offset": 0, "max_offset": 9, "watermark": None, "min_commit_ts": None,
                     "max_commit_ts": None}
        counts = [{"status": "quarantined", "kind": "quarantine", "events": archive_lines, "error_stage": "archive",
                   "database": None, "table": None}]
        return manifest_mod.build(
            manifest_mod.RunFacts(run_id="r", args=args, source="/a", output="/b", started=0, source_options={},
                                  target_protocol="canal-json", target_options={}),
            manifest_mod.ReadFacts(objects=[], partition_stats=[partition], counts=counts, cut={
                "kind": "archive_end", "commit_ts": None, "point": None, "description": "", "warnings": []}),
            manifest_mod.Outcome(written=[], quarantine_objects=[], ddl_log=[], ddl_failures=[]))

    clean = manifest(10, 3)
    assert clean["counts"]["records"] == 13 and "read twice" not in manifest_mod.summary(clean)
    overlapping = manifest(14, 3)
    assert "(4 of them read twice from overlapping objects)" in manifest_mod.summary(overlapping)


# ------------------------------------------------------------------ 9. one run at a time per output (the lease)

def _lease_home(where, tmp_path, request):
    return str(tmp_path / "out") if where == "local" else request.getfixturevalue("bucket") + "/out"


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_second_run_on_a_leased_output_is_refused_and_a_stale_lease_taken_over(tmp_path, request, where):
    """A lease refreshed by its heartbeat refuses every other run (also after the timeout has
    passed, since it beats); a lease whose heartbeat stopped (its run killed) is taken over
    after the timeout; the run it was taken from can no longer commit; release deletes it."""
    import time

    from spark_apps import lease as L

    home = _lease_home(where, tmp_path, request)
    first = L.Lease(home, "run-a", 1.0).acquire()
    doc = L.read(home)
    assert doc["owner"]["run_id"] == "run-a" and doc["owner"]["pid"] == os.getpid() and doc["owner"]["host"]
    assert doc["started_at"] and doc["heartbeat_at"] and doc["timeout_s"] == 1.0
    with pytest.raises(L.LeaseHeld, match=r"in use by another replay: run run-a \(pid \d+ on "):
        L.Lease(home, "run-b", 1.0).acquire()
    time.sleep(1.5)  # longer than the timeout: the heartbeat keeps it
    assert L.read(home)["heartbeat"] > doc["heartbeat"]
    with pytest.raises(L.LeaseHeld):
        L.Lease(home, "run-b", 1.0).acquire()
    first._stop.set()  # the run is killed: no more heartbeats
    first._thread.join()
    time.sleep(1.3)
    second = L.Lease(home, "run-b", 1.0).acquire()
    assert second.took_over["owner"]["run_id"] == "run-a" and L.read(home)["owner"]["run_id"] == "run-b"
    with pytest.raises(L.LeaseLost, match="another run took over"):
        first.assert_held()
    first.release()  # not its lease any more: left alone
    assert L.read(home)["owner"]["run_id"] == "run-b"
    second.assert_held()
    second.release()
    assert L.read(home) is None


@pytest.mark.parametrize("where", ["local", "s3"])
def test_runs_starting_together_get_the_lease_once(tmp_path, request, where):
    """8 processes ask for the lease of one output at the same moment (and 8 more take over one
    stale lease together): exactly one of each group gets it."""
    import subprocess
    import sys
    import time

    from spark_apps import lease as L

    home = _lease_home(where, tmp_path, request)
    script = ("import sys, time; from spark_apps import lease as L\n"
              "time.sleep(max(0, float(sys.argv[3]) - time.time()))\n"
              "try:\n    l = L.Lease(sys.argv[1], sys.argv[2], 30).acquire(); print('won'); l._stop.set()\n"
              # the winner lives on while the others ask: a dead owner's lease is taken over at once
              "    time.sleep(max(0, float(sys.argv[3]) + 5 - time.time()))\n"
              "except L.LeaseHeld:\n    print('refused')\n")
    for stale in (False, True):
        if stale:  # a lease whose heartbeat stopped long ago
            storage.write_bytes(storage.join(home, L.LEASE), orjson.dumps(
                {"owner": {"run_id": "dead"}, "token": "t", "heartbeat": time.time() - 3600}))
        at = time.time() + 3
        procs = [subprocess.Popen([sys.executable, "-c", script, home, f"run-{i}", str(at)], stdout=subprocess.PIPE,
                                  text=True, env={**os.environ, "PYTHONPATH": os.getcwd()}) for i in range(8)]
        outs = [p.communicate(timeout=60)[0].strip() for p in procs]
        assert sorted(outs) == ["refused"] * 7 + ["won"], outs
        winner = L.read(home)["owner"]["run_id"]
        assert winner == f"run-{outs.index('won')}"
        storage.delete(storage.join(home, L.LEASE))


def test_the_lease_timeout_comes_from_the_option_then_the_environment(monkeypatch):
    from spark_apps import lease as L

    monkeypatch.delenv(L.ENV, raising=False)
    assert L.timeout_seconds(None) == 600
    monkeypatch.setenv(L.ENV, "42")
    assert L.timeout_seconds(None) == 42 and L.timeout_seconds(5) == 5
    monkeypatch.setenv(L.ENV, "soon")
    with pytest.raises(ValueError, match="CDC_REPLAY_LEASE_TIMEOUT"):
        L.timeout_seconds(None)
    with pytest.raises(ValueError, match="more than 0"):
        L.timeout_seconds(0)


def test_the_commit_keeps_the_lease_and_refuses_when_it_was_lost(tmp_path):
    from spark_apps import lease as L

    output = str(tmp_path / "out")
    lease = L.Lease(output, "r1", 30).acquire()
    L.hold(lease)
    try:
        _stage(storage.join(output, "_staging", "r1"), {"data/t/0/a.jsonl.gz": b"1"})
        manifest = _manifest("r1")
        manifest_mod.commit(output, storage.join(output, "_staging", "r1"), manifest)
        assert manifest["foreign_objects"] == [] and storage.exists(storage.join(output, L.LEASE))
        storage.write_bytes(storage.join(output, L.LEASE), orjson.dumps({"token": "someone else", "heartbeat": 1}))
        _stage(storage.join(output, "_staging", "r1b"), {"data/t/0/a.jsonl.gz": b"2"})
        with pytest.raises(L.LeaseLost):
            manifest_mod.commit(output, storage.join(output, "_staging", "r1b"), _manifest("r1b"))
        assert storage.read_bytes(storage.join(output, "t/0/a.jsonl.gz")) == b"1"
    finally:
        lease.release()
        L.hold(None)


# ------------------------------------------------------------------ 10. an output that cannot be written: one line

def _can_mount():
    import subprocess

    if os.geteuid() != 0:
        return False
    probe = "/tmp/cdc-replay-mount-probe"
    os.makedirs(probe, exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", probe], capture_output=True)
    return ok


@pytest.fixture
def small_fs(tmp_path):
    """A real file system of 64 KiB (tmpfs), mounted for the test: a full disk or a read-only
    one, as the kernel reports them (ENOSPC, EROFS). Needs root and mount."""
    import subprocess

    assert _can_mount(), "a real full or read-only file system needs root and mount (tmpfs); the suite runs as root"
    mounted = []

    def make(options):
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64k,{options}", "tmpfs", str(point)], check=True)
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _fill(directory):
    fd = os.open(directory / "filler", os.O_CREAT | os.O_WRONLY)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _unwritable(case, tmp_path, small_fs):
    if case == "under a file":
        (tmp_path / "a-file").write_bytes(b"x")
        return str(tmp_path / "a-file" / "out"), "Not a directory (ENOTDIR)"
    if case == "read-only file system":
        return str(small_fs("ro") / "out"), "Read-only file system (EROFS)"
    if case == "full disk":
        point = small_fs("rw")
        (point / "out").mkdir()
        _fill(point)
        return str(point / "out"), "No space left on device (ENOSPC)"
    if case == "under /proc":
        return "/proc/cdc-replay-out", "(ENOENT)"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["under a file", "read-only file system", "full disk", "under /proc"])
def test_an_output_that_cannot_be_written_is_refused_in_one_line_before_spark(tmp_path, small_fs, case):
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a.jsonl").write_bytes(b"{}\n")
    output, words = _unwritable(case, tmp_path, small_fs)
    result = _cli("--source", str(archive), "--protocol", "canal-json", "--output", output, "--emit", "snapshot")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cdc-replay: error: --output {output} cannot be written: ")
    assert words in lines[0], lines
    assert "Traceback" not in result.stderr + result.stdout and "spark" not in result.stderr.lower()


def test_an_s3_output_that_denies_writes_is_refused_in_one_line_before_spark(bucket, s3_endpoint):
    from tests.support.s3_faults import fault_proxy

    storage.write_bytes(f"{bucket}/archive/shop/0/a.jsonl", b"{}\n")
    name = bucket[len("s3://"):]
    with fault_proxy(s3_endpoint, slow_down=0, reset=0, deny_writes=f"/{name}/out") as proxy:
        result = _cli("--source", f"{bucket}/archive", "--protocol", "canal-json", "--output", f"{bucket}/out",
                      "--emit", "snapshot", env={**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint})
        assert proxy.counts["denied"] == 1
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--output {bucket}/out cannot be written: PutObject refused (AccessDenied" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout and "spark" not in result.stderr.lower()
    assert storage.list_objects(f"{bucket}/out") == []


def test_a_leased_output_is_refused_in_one_line_before_spark(tmp_path):
    from spark_apps import lease as L

    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a.jsonl").write_bytes(b"{}\n")
    holder = L.Lease(str(tmp_path / "out"), "the-other-run", 30).acquire()
    try:
        result = _cli("--source", str(archive), "--protocol", "canal-json", "--output", str(tmp_path / "out"),
                      "--emit", "snapshot")
    finally:
        holder.release()
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is in use by another replay: run the-other-run (pid" in lines[0], lines
    assert "spark" not in result.stderr.lower()
    assert sorted(os.listdir(tmp_path / "out")) == []


def test_the_cause_of_a_spark_task_failure_is_one_line():
    """What the driver gets when a task fails: a Py4JJavaError whose text quotes the Python
    worker's traceback; the line names the errno and the path."""
    text = ("An error occurred while calling o123.collectToPython.\n: org.apache.spark.SparkException: Job aborted due "
            "to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 "
            "(TID 5) (127.0.0.1 executor driver): org.apache.spark.api.python.PythonException: Traceback (most "
            "recent call last):\n  File \"/x/archive_io.py\", line 321, in flush\n    storage.write_bytes(uri, data)\n"
            "  File \"/x/storage.py\", line 500, in write_bytes\n    f.write(data)\nOSError: [Errno 28] No space left "
            "on device: '/mnt/out/_staging/r1/data/shop/0/a.jsonl.gz.tmp-12'\n\n\tat org.apache.spark.api.python."
            "BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)\n")

    class Py4JJavaError(Exception):
        pass

    from spark_apps.faults import cause_of

    assert cause_of(Py4JJavaError(text)) == (
        "No space left on device (ENOSPC): /mnt/out/_staging/r1/data/shop/0/a.jsonl.gz.tmp-12")
    assert cause_of(OSError(30, "Read-only file system", "/o/x")) == "Read-only file system (EROFS): /o/x"


@pytest.mark.slow
def test_a_disk_that_fills_during_the_run_ends_in_one_line_with_exit_1(tmp_path, small_fs):
    """A real `cdc-replay replay` (spark-submit) into a 64 KiB file system: the probe passes,
    the staged objects do not fit. One line, exit 1, naming ENOSPC and the path, and the log
    file holding the trace; no stack trace on the console; no staging or lease left."""
    import subprocess
    import sys

    from spark_apps.generate import generate, write_archive

    write_archive(generate(transactions=600, partitions=2, seed=3).records, str(tmp_path / "archive"))
    output = small_fs("rw") / "out"
    log_file = tmp_path / "run.log"
    result = subprocess.run(
        [sys.executable, "-m", "spark_apps.cli", "replay", "--source", str(tmp_path / "archive"), "--protocol",
         "canal-json", "--protocol-option", "enable-tidb-extension=true", "--output", str(output), "--emit", "topics",
         "--master", "local[1]"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "CDC_REPLAY_LOG": str(log_file)})
    # spark-submit passes the driver's stderr on merged into its stdout: the console is both
    console = result.stdout + result.stderr
    assert result.returncode == 1, console[-3000:]
    errors = [line for line in console.splitlines() if line.startswith("cdc-replay: error: ")]
    assert len(errors) == 1, console[-3000:]
    assert errors[0].startswith("cdc-replay: error: the run failed: No space left on device (ENOSPC): " + str(output))
    assert errors[0].endswith(f"(full trace: {log_file})")
    assert "Traceback" not in console and "\tat " not in console, console[-3000:]
    trace = log_file.read_text()
    assert "Traceback" in trace and "No space left on device" in trace
    assert not (output / "_staging").exists() or not any((output / "_staging").iterdir())
    assert not (output / "_lease.json").exists()


def test_the_lease_timeout_option_travels_with_the_request(tmp_path):
    from spark_apps import contract

    args = args_of(str(tmp_path / "archive"), str(tmp_path / "out"), "--lease-timeout", "30")
    assert args.lease_timeout == 30
    assert contract.parse(contract.to_argv(args)) == args
    with pytest.raises(ReplayError, match="--lease-timeout: the lease timeout must be more than 0 seconds"):
        validate(args_of(str(tmp_path / "archive"), str(tmp_path / "out"), "--lease-timeout", "0"))


def _killed_holder(home, run_id="killed-run", timeout=2):
    """A real process that takes the lease of `home`, then is SIGKILLed (no release, no more
    heartbeats); returns its pid once the kernel has reaped it."""
    import signal
    import subprocess
    import sys

    script = ("import sys, time; from spark_apps import lease as L\n"
              f"L.Lease(sys.argv[1], {run_id!r}, {timeout}).acquire(); print('held', flush=True); time.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", script, home], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    return holder.pid


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_lease_of_a_killed_run_on_this_host_is_taken_over_at_once(tmp_path, request, where):
    """A process holding the lease is SIGKILLed: its lease names this host, its boot and PID
    namespace and a pid that no longer runs, so the next run takes it over at once (an Airflow
    retry is not refused), whatever the timeout."""
    from spark_apps import lease as L

    home = _lease_home(where, tmp_path, request)
    pid = _killed_holder(home, timeout=600)
    doc = L.read(home)
    assert doc["owner"]["pid"] == pid and doc["owner"]["pid_start"] and doc["owner"]["boot_id"]
    assert L.owner_dead(doc) and "its process no longer runs" in L.describe(doc)
    L.check_free(home, 600)  # the check before Spark lets the retry through
    lease = L.Lease(home, "next-run", 600).acquire()
    try:
        assert lease.took_over["owner"]["run_id"] == "killed-run" and L.read(home)["owner"]["run_id"] == "next-run"
    finally:
        lease.release()
    assert L.read(home) is None


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_lease_of_a_killed_run_on_another_host_is_taken_over_after_the_timeout(tmp_path, request, where):
    """The same killed run's lease, as if another machine had written it (its host name
    changed): whether that process runs cannot be known from here, so until the timeout its
    lease refuses other runs, then the next run takes it over."""
    import time

    from spark_apps import lease as L

    home = _lease_home(where, tmp_path, request)
    _killed_holder(home)
    doc = L.read(home)
    doc["owner"]["host"] = "another-" + doc["owner"]["host"]
    storage.write_bytes(storage.join(home, L.LEASE), orjson.dumps(doc))
    assert not L.owner_dead(doc)
    with pytest.raises(L.LeaseHeld, match="killed-run"):
        L.Lease(home, "next-run", 2).acquire()
    time.sleep(max(0.0, doc["heartbeat"] + 2.5 - time.time()))
    lease = L.Lease(home, "next-run", 2).acquire()
    try:
        assert lease.took_over["owner"]["run_id"] == "killed-run" and L.read(home)["owner"]["run_id"] == "next-run"
    finally:
        lease.release()
    assert L.read(home) is None


def test_a_live_owner_or_a_lease_without_proof_is_not_taken_for_dead(tmp_path):
    """Only proof counts: a live process's lease, a lease whose pid was reused by a process
    started at another time (dead), one of another boot or PID namespace, one written by an
    older version without these fields (not provable: the timeout decides)."""
    from spark_apps import lease as L

    home = str(tmp_path / "out")
    live = L.Lease(home, "live", 600).acquire()
    try:
        doc = L.read(home)
        assert not L.owner_dead(doc)
        with pytest.raises(L.LeaseHeld, match="live"):
            L.Lease(home, "other", 600).acquire()
        assert L.owner_dead({**doc, "owner": {**doc["owner"], "pid_start": str(int(doc["owner"]["pid_start"]) + 1)}})
        for field in ("boot_id", "pid_ns", "host"):
            gone = {**doc, "owner": {**doc["owner"], "pid_start": "1", field: "elsewhere"}}
            assert not L.owner_dead(gone), field
        older = {**doc, "owner": {k: doc["owner"][k] for k in ("host", "pid", "run_id")}}
        assert not L.owner_dead(older)
    finally:
        live.release()


def test_the_app_turns_a_fault_into_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    """The app's entry point (what spark-submit runs): a fault during the run is one line on
    stderr naming the cause and the log file, which holds the trace; exit 1."""
    from spark_apps import replay

    def failing_run(args):
        try:
            raise OSError(28, "No space left on device", str(tmp_path / "out" / "_staging" / "r" / "a.jsonl.gz"))
        except OSError as e:
            raise RuntimeError("the write failed") from e

    monkeypatch.setattr(replay, "run", failing_run)
    monkeypatch.setenv("CDC_REPLAY_LOG", str(tmp_path / "run.log"))
    status = replay.main(["--source", str(tmp_path / "archive"), "--protocol", "canal-json", "--output",
                          str(tmp_path / "out"), "--emit", "snapshot"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1, err
    assert err[0] == (f"cdc-replay: error: the run failed: No space left on device (ENOSPC): "
                      f"{tmp_path}/out/_staging/r/a.jsonl.gz (full trace: {tmp_path}/run.log)")
    assert "Traceback" in (tmp_path / "run.log").read_text()
