"""The suite's own file order (tests/conftest.py): per-file seconds read back from the JUnit XML
that scripts/test writes, so the next run hands out the longest files first."""

from __future__ import annotations

import json

from .conftest import previous_file_seconds, recorded_file_seconds, write_recorded_seconds

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="0" tests="5" time="130.0">
<testcase classname="tests.test_kafka" name="test_a" time="100.5" />
<testcase classname="tests.test_kafka" name="test_b[x]" time="1.5" />
<testcase classname="tests.airflow.test_stack" name="test_c" time="20" />
<testcase classname="tests.test_cli.TestHelp" name="test_d" time="3" />
<testcase classname="tests.test_gone" name="test_e" time="5" />
</testsuite></testsuites>
"""


def test_seconds_per_file_from_the_last_runs_junit_xml(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    modules = {"tests.test_kafka", "tests.airflow.test_stack", "tests.test_cli", "tests.test_new"}
    # a test in a class counts for its module; a file no longer collected is left out
    assert previous_file_seconds(str(path), modules) == {
        "tests.test_kafka": 102.0, "tests.airflow.test_stack": 20.0, "tests.test_cli": 3.0}


def test_no_or_a_broken_xml_gives_no_seconds(tmp_path):
    assert previous_file_seconds(None, {"tests.test_kafka"}) == {}
    assert previous_file_seconds(str(tmp_path / "missing.xml"), {"tests.test_kafka"}) == {}
    (tmp_path / "cut.xml").write_text(JUNIT[:200])  # a run stopped while writing
    assert previous_file_seconds(str(tmp_path / "cut.xml"), {"tests.test_kafka"}) == {}


def test_a_fresh_clone_orders_by_the_recorded_ci_run(tmp_path):
    """tests/file_seconds.json: written from a run's XML (a class counts for its module, found by
    its file), read back for the files still collected; a missing or broken table gives nothing."""
    (tmp_path / "tests" / "airflow").mkdir(parents=True)
    for name in ("test_kafka.py", "test_cli.py", "test_gone.py", "airflow/test_stack.py"):
        (tmp_path / "tests" / name).write_text("")
    (tmp_path / "junit.xml").write_text(JUNIT)
    table = tmp_path / "tests" / "file_seconds.json"
    written = write_recorded_seconds(str(tmp_path / "junit.xml"), str(table))
    assert written == json.loads(table.read_text()) == {
        "tests.airflow.test_stack": 20.0, "tests.test_cli": 3.0, "tests.test_gone": 5.0, "tests.test_kafka": 102.0}
    assert recorded_file_seconds(str(table), {"tests.test_kafka", "tests.test_new"}) == {"tests.test_kafka": 102.0}
    assert recorded_file_seconds(str(tmp_path / "missing.json"), {"tests.test_kafka"}) == {}
    table.write_text("{")
    assert recorded_file_seconds(str(table), {"tests.test_kafka"}) == {}

