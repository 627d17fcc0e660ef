"""The suite's own file order (tests/conftest.py): per-file seconds read back from the JUnit XML
that scripts/test writes, so the next run hands out the longest files first."""

from __future__ import annotations

from .conftest import previous_file_seconds

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
