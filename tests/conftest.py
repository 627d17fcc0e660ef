"""Shared fixtures: a real S3-compatible server on loopback (moto's server mode) and one
local Spark session for the whole run (2 cores, few shuffle partitions, UI off)."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def pytest_report_header(config):
    """Say at the start which system parts (beyond the venv) this run has: scripts/test
    installs the missing ones first (tests/support/system_parts.py)."""
    from tests.support.system_parts import describe

    return [f"system: {line}" for line in describe(install=False)]


# Seconds a file is expected to take when no earlier run timed it: per test that waits on
# Airflow or Kafka for more than a minute (marked slow), that starts Spark or Airflow, or neither.
GUESS_SECONDS = {"slow": 120.0, "heavy": 15.0, "light": 0.5}


def previous_file_seconds(path: str | None, modules: set[str]) -> dict[str, float]:
    """Seconds per test module (dotted, as in `modules`) from the JUnit XML of an earlier run
    (scripts/test writes one to $CDC_REPLAY_TEST_JUNIT); empty when there is none or it does not
    parse. A test case's classname is its module, or its module and class."""
    import xml.etree.ElementTree as ET

    if not path or not os.path.exists(path):
        return {}
    try:
        cases = ET.parse(path).getroot().iter("testcase")
        seconds: dict[str, float] = {}
        for case in cases:
            name = case.get("classname") or ""
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                seconds[name] = seconds.get(name, 0.0) + float(case.get("time") or 0)
    except (ET.ParseError, ValueError, OSError):
        return {}
    return seconds


# Seconds per test file of the last CI run that was recorded in the repository, for a clone
# that has no JUnit XML of its own yet (CI runs on a fresh clone): the order of the files then
# comes from measured times too, not from the marks' guesses. `python -m tests.conftest JUNIT`
# rewrites it from a run's XML.
RECORDED_SECONDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_seconds.json")


def recorded_file_seconds(path: str, modules: set[str]) -> dict[str, float]:
    """The committed table (RECORDED_SECONDS) for the files still collected; empty when absent."""
    import json

    try:
        with open(path) as f:
            table = json.load(f)
    except (OSError, ValueError):
        return {}
    return {name: float(seconds) for name, seconds in table.items() if name in modules}


def write_recorded_seconds(junit: str, path: str = RECORDED_SECONDS) -> dict[str, float]:
    """Every test file's seconds in `junit` (`previous_file_seconds` over the test files beside
    `path`), rounded, written sorted to `path`."""
    import glob
    import json

    root = os.path.dirname(os.path.dirname(path))
    modules = {os.path.relpath(f, root).removesuffix(".py").replace(os.sep, ".")
               for f in glob.glob(os.path.join(root, "tests", "**", "*.py"), recursive=True)}
    table = {name: round(value, 1) for name, value in sorted(previous_file_seconds(junit, modules).items())}
    with open(path, "w") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    return table


def pytest_collection_modifyitems(config, items):
    """The longest files first (a stable sort: the order inside a file stays). scripts/test hands
    whole files to two processes in this order, so the longest runs start early and the many
    short files fill in around them, instead of one long file running alone at the end. A
    file's length is its time in the last run's JUnit XML ($CDC_REPLAY_TEST_JUNIT), else in the
    last recorded CI run (tests/file_seconds.json, for a fresh clone), else a guess from its
    tests' marks (GUESS_SECONDS, times the examples of a hypothesis test that starts Spark)."""
    def module(item) -> str:
        return item.nodeid.split("::")[0].removesuffix(".py").replace("/", ".")

    modules = {module(item) for item in items}
    measured = (previous_file_seconds(os.environ.get("CDC_REPLAY_TEST_JUNIT"), modules)
                or recorded_file_seconds(RECORDED_SECONDS, modules))
    guessed: dict[str, float] = {}
    for item in items:
        kind = ("slow" if item.get_closest_marker("slow") else
                "heavy" if item.get_closest_marker("spark") or item.get_closest_marker("airflow")
                or "spark" in getattr(item, "fixturenames", ()) else "light")
        # a hypothesis test with Spark or Airflow runs them once per example (pure ones take ms)
        examples = getattr(getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None),
                           "max_examples", 1) if kind == "heavy" else 1
        guessed[module(item)] = guessed.get(module(item), 0.0) + GUESS_SECONDS[kind] * examples
    items.sort(key=lambda item: -measured.get(module(item), guessed[module(item)]))


def _atomic_conditional_puts():
    """moto's server checks a PUT's If-Match / If-None-Match and then writes, as two steps:
    two of its threads can both pass the check (the CI saw three takers of one stale lease
    win). S3 decides a conditional write atomically, and the lease (spark_apps/lease.py)
    relies on it, so the tests' server takes a lock around each conditional PUT."""
    import functools
    import threading

    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "_atomic", False):
        return
    lock = threading.Lock()

    @functools.wraps(original)
    def put_object(self):
        if self.headers.get("If-Match") or self.headers.get("If-None-Match"):
            with lock:
                return original(self)
        return original(self)

    put_object._atomic = True
    S3Response.put_object = put_object


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1; AWS_* point at it for this process and every Spark
    worker it starts (they inherit the environment, so it is set before Spark starts)."""
    from moto.server import ThreadedMotoServer

    from spark_apps.local_s3 import DEMO_CREDENTIALS, free_port

    _atomic_conditional_puts()
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in [*DEMO_CREDENTIALS, "AWS_ENDPOINT_URL"]}
    os.environ.update(DEMO_CREDENTIALS)
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    yield endpoint
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def spark(s3_endpoint):
    from spark_apps.launch import LOCAL_JIT_OPTIONS, SMALL_RUN_SPARK_CONF
    from spark_apps.replay import build_session

    # every test's data is small: the settings the CLI gives small local runs (spark_apps.launch).
    # The C1-only JIT took this JVM's CPU for the replay tests from 169 to 133 s; the interpreted
    # expressions took four of test_protocols_e2e's tests from 121 to 73 s (Janino compiles each
    # new plan's code, and every test's plans are new). Tests marked `generated_code` get Spark's
    # generated code back (_generated_code below).
    session = build_session("local[2]", "cdc-replay-tests", [
        "spark.sql.shuffle.partitions=4", f"spark.driver.extraJavaOptions={LOCAL_JIT_OPTIONS}",
        *(f"{key}={value}" for key, value in SMALL_RUN_SPARK_CONF.items())])
    yield session
    from spark_apps.replay import stop_session

    stop_session(session)


# Spark's own defaults of the settings launch.SMALL_RUN_SPARK_CONF changes (what a run over
# launch.INTERPRETED_RUN_MB of source uses)
GENERATED_CODE_CONF = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


@pytest.fixture(autouse=True)
def _generated_code(request):
    """A test marked `generated_code` runs its replays in the session with whole-stage and
    per-expression generated code, as a larger archive's run does, so that path stays covered
    (the reference properties, the interpreted-against-generated comparison)."""
    if request.node.get_closest_marker("generated_code") is None:
        yield
        return
    from spark_apps.launch import SMALL_RUN_SPARK_CONF

    session = request.getfixturevalue("spark")
    for key, value in GENERATED_CODE_CONF.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in SMALL_RUN_SPARK_CONF.items():
            session.conf.set(key, value)


@pytest.fixture
def bucket(s3_endpoint, request):
    """A fresh bucket per test: s3://<test-name>."""
    import re

    from spark_apps import storage

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") or "bucket"
    uri = f"s3://{name}"
    storage.ensure_bucket(uri)
    return uri


if __name__ == "__main__":  # python -m tests.conftest JUNIT: record a run's per-file seconds
    print(f"{len(write_recorded_seconds(sys.argv[1]))} files' seconds written to {RECORDED_SECONDS}")
