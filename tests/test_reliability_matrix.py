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
