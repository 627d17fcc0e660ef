"""Airflow test fixtures: a migrated AIRFLOW_HOME with an embedded SQLite DB, the environment
for `airflow` subprocesses (our dags/ and plugins/, `spark_default` = local[2], `aws_default`
pointing at the loopback S3 server with a per-session secret), and helpers to run commands.

Subprocesses never inherit AWS_* variables: S3 credentials reach the tasks only through the
Airflow connection, which is what the hook and the operator must handle."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

def pytest_configure(config):
    """Airflow reads its configuration when first imported: point it at a throwaway home (not
    ~/airflow) before any test module imports it."""
    import tempfile

    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-replay-airflow-unit-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "plugins")
if PLUGINS not in sys.path:  # the plugin package is imported by name, as Airflow does
    sys.path.insert(0, PLUGINS)


# tiny inputs on a 2-core machine: fewer shuffle partitions, fewer tasks
FAST_SPARK = {"CDC_REPLAY_SPARK_CONF": "spark.sql.shuffle.partitions=2"}


class AwsSecrets:
    def __init__(self):
        self.key_id = "AKIATEST" + uuid.uuid4().hex[:12].upper()
        self.secret = "s3cr3t-" + uuid.uuid4().hex


@pytest.fixture(scope="session")
def aws_secrets():
    return AwsSecrets()


@pytest.fixture(scope="session")
def migrated_home(tmp_path_factory):
    """make(name) -> a new AIRFLOW_HOME (SQLite) with its own airflow.cfg and a copy of one
    database `airflow db migrate` made once per test process: a fresh home's database is the
    same file every time, and its migration takes ~3.5 s."""
    import shutil

    from spark_apps import airflow_local as al

    template = str(tmp_path_factory.mktemp("airflow-migrated"))
    al.write_config(template)
    al.migrate(al.environment(template))

    def make(name: str) -> str:
        home = str(tmp_path_factory.mktemp(name))
        al.write_config(home)
        shutil.copyfile(os.path.join(template, "airflow.db"), os.path.join(home, "airflow.db"))
        return home

    return make


@pytest.fixture(scope="session")
def airflow_home(migrated_home):
    """A migrated AIRFLOW_HOME (SQLite), shared by the `airflow dags test` runs."""
    return migrated_home("airflow-home")


@pytest.fixture(scope="session")
def airflow_env(airflow_home, s3_endpoint, aws_secrets):
    from spark_apps import airflow_local as al

    def make(**extra) -> dict:
        env = al.environment(airflow_home, aws=al.aws_connection(s3_endpoint, aws_secrets.key_id, aws_secrets.secret),
                             extra={**FAST_SPARK, **extra})
        for key in [k for k in env if k.startswith("AWS_")]:
            del env[key]
        return env

    return make


def run_airflow(args: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    from spark_apps import airflow_local as al

    return al.airflow(args, env, capture_output=True, text=True, timeout=timeout)


class AirflowSession:
    """`airflow` commands run one after the other in one long-lived Airflow process
    (tests/airflow/cli_session.py: the CLI's own parser and command functions), with one
    environment: each run after the first skips Airflow's ~11 s of start-up and exit. `run`
    returns what `run_airflow` does (the output in `stdout`, stderr merged into it)."""

    def __init__(self, env: dict):
        import queue
        import threading

        from .cli_session import __file__ as script

        self.process = subprocess.Popen([sys.executable, script], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()  # the output's lines, None at its end
        threading.Thread(target=lambda: [*map(self.lines.put, self.process.stdout), self.lines.put(None)],
                         daemon=True).start()

    def run(self, args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
        import json
        import queue
        import time

        from .cli_session import MARKER

        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        lines, deadline = [], time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.process.kill()
                raise subprocess.TimeoutExpired(["airflow", *args], timeout, "".join(lines)) from None
            if line is None:
                raise RuntimeError(f"the Airflow process exited ({self.process.wait()}) during "
                                   f"{args}:\n{''.join(lines)[-5000:]}")
            if line.startswith(MARKER):
                return subprocess.CompletedProcess(["airflow", *args], int(line.split()[1]), "".join(lines), "")
            lines.append(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # the end of its commands: it exits
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> "AirflowSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@pytest.fixture
def airflow_session():
    """AirflowSession(env) for the test, closed after it."""
    sessions = []
    yield lambda env: sessions.append(AirflowSession(env)) or sessions[-1]
    for session in sessions:
        session.close()


def task_logs(home: str) -> str:
    """Every task log file under AIRFLOW_HOME/logs, concatenated."""
    text = []
    for root, _dirs, files in os.walk(os.path.join(home, "logs")):
        for name in files:
            with open(os.path.join(root, name), errors="replace") as f:
                text.append(f.read())
    return "\n".join(text)
