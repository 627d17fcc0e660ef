"""Running this project's Airflow DAGs on one machine: the environment for the `airflow` CLI
(an AIRFLOW_HOME with an embedded SQLite DB, our dags/ and plugins/, the `spark_default` and
`aws_default` connections) and the commands. Used by `cdc-replay demo` and by the tests.

Imports nothing of Airflow (spark_apps never depends on it): it only prepares the environment
and runs the `airflow` command of this Python environment as a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from .launch import REPO

DAGS = os.path.join(REPO, "dags")
PLUGINS = os.path.join(REPO, "plugins")
BIN = os.path.dirname(sys.executable)
AIRFLOW = os.path.join(BIN, "airflow")


def aws_connection(endpoint: str | None, key_id: str, secret: str, region: str = "us-east-1") -> str:
    """An Airflow connection of type aws, as the JSON AIRFLOW_CONN_* accepts."""
    extra = {"region_name": region}
    if endpoint:
        extra["endpoint_url"] = endpoint
    return json.dumps({"conn_type": "aws", "login": key_id, "password": secret, "extra": extra})


API_PORT = 8080


def _home_secret(home: str, name: str) -> str:
    """A random secret kept in `home` (created once), the same for every process on it."""
    import secrets

    path = os.path.join(home, f".{name}")
    try:
        with open(path) as f:
            value = f.read().strip()
        if value:
            return value
    except OSError:
        pass
    value = secrets.token_hex(32)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(value)
    return value


def write_config(home: str, *, sql_alchemy_conn: str | None = None, users: str = "admin:admin",
                 port: int = API_PORT) -> str:
    """A minimal airflow.cfg in `home`, so that later commands there (`airflow api-server`,
    `scheduler`, `dag-processor`, `triggerer`: start_commands) find our DAGs and plugins without
    any environment variable: the api-server on 127.0.0.1:`port` only, the execution API URL the
    task processes use on the same port, and one JWT secret and secret key for every process (a
    process without one makes its own, and the api-server then refuses the tasks' tokens)."""
    os.makedirs(home, exist_ok=True)
    path = os.path.join(home, "airflow.cfg")
    db = sql_alchemy_conn or f"sqlite:///{os.path.join(home, 'airflow.db')}"
    with open(path, "w") as f:
        f.write(
            "[core]\n"
            f"dags_folder = {DAGS}\n"
            f"plugins_folder = {PLUGINS}\n"
            "load_examples = False\n"
            "executor = LocalExecutor\n"
            f"simple_auth_manager_users = {users}\n"
            f"execution_api_server_url = http://127.0.0.1:{port}/execution/\n"
            "[database]\n"
            f"sql_alchemy_conn = {db}\n"
            "[logging]\n"
            f"base_log_folder = {os.path.join(home, 'logs')}\n"
            "[api]\n"
            "host = 127.0.0.1\n"
            f"port = {port}\n"
            f"secret_key = {_home_secret(home, 'api_secret_key')}\n"
            "[api_auth]\n"
            f"jwt_secret = {_home_secret(home, 'jwt_secret')}\n"
        )
    return path


# the processes of a local Airflow that runs triggered DAG runs (LocalExecutor): the scheduler
# also serves the task logs to the api-server (port 8793)
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def start_commands(home: str) -> list[str]:
    """Shell commands that start a local Airflow on `home` (written by write_config), each in
    the background, logs in `home`."""
    return [f"AIRFLOW_HOME={home} {AIRFLOW} {component} > {os.path.join(home, component + '.log')} 2>&1 &"
            for component in COMPONENTS]


def write_connections(home: str, env: dict, connections: dict[str, dict]) -> None:
    """Create (or replace) connections in the metadata DB of `home`, so that processes started
    later on it (the scheduler's task runs of a DAG triggered in the UI) find them without the
    AIRFLOW_CONN_* of this process."""
    path = os.path.join(home, ".connections.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(connections, f)
    try:
        result = airflow(["connections", "import", "--overwrite", path], env, capture_output=True, text=True)
    finally:
        os.remove(path)
    if result.returncode != 0:
        raise RuntimeError(f"airflow connections import failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def environment(home: str, *, spark_master: str = "local[2]", aws: str | None = None,
                extra: dict | None = None, base: dict | None = None) -> dict:
    """The environment for `airflow` commands on `home` (see write_config)."""
    env = dict(os.environ if base is None else base)
    for key in [k for k in env if k.startswith("AIRFLOW__") or k.startswith("AIRFLOW_CONN_")
                or k.startswith("AIRFLOW_VAR_")]:
        del env[key]
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
        "AIRFLOW__CORE__PLUGINS_FOLDER": PLUGINS,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
        "PATH": os.pathsep.join([BIN, env.get("PATH", "")]),
        "SPARK_LOCAL_IP": env.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYTHONUNBUFFERED": "1",
    })
    if aws:
        env["AIRFLOW_CONN_AWS_DEFAULT"] = aws
    env.update(extra or {})
    return env


def airflow(args: list[str], env: dict, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([AIRFLOW, *args], env=env, **kwargs)


def migrate(env: dict) -> None:
    result = airflow(["db", "migrate"], env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


_STORE_TASK_LOGS = r"""
import json, os, sys
from airflow.configuration import conf
from airflow.models.dagrun import DagRun
from airflow.utils.log.file_task_handler import FileTaskHandler
from airflow.utils.session import create_session

data = json.load(open(sys.argv[1]))
handler = FileTaskHandler(conf.get("logging", "base_log_folder"))
written = []
with create_session() as session:
    run = session.query(DagRun).filter(DagRun.dag_id == data["dag_id"]).order_by(DagRun.id.desc()).first()
    for ti in run.get_task_instances(session=session):
        lines = data["tasks"].get(ti.task_id)
        if not lines:
            continue
        path = os.path.join(handler.local_base, handler._render_filename(ti, ti.try_number or 1, session=session))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
        written.append(path)
print(json.dumps(written))
"""

_CONSOLE_LINE = re.compile(r"^(\S+Z) \[(\w+)\s*\] (.*)$")
_TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\w+)")
_TASK_END = re.compile(r"\[DAG TEST\] end task task_id=(\w+)")


def task_log_lines(console: list[str]) -> dict[str, list[dict]]:
    """`airflow dags test`'s console output split per task, each line as the structured log
    record Airflow's task log files hold (timestamp, level, event)."""
    tasks: dict[str, list[dict]] = {}
    current = None
    for line in console:
        line = line.rstrip("\n")
        start, end = _TASK_START.search(line), _TASK_END.search(line)
        if start:
            current = start.group(1)
            continue
        if end:
            current = None
            continue
        if current is None or not line.strip():
            continue
        match = _CONSOLE_LINE.match(line)
        tasks.setdefault(current, []).append({"timestamp": match.group(1), "level": match.group(2),
                                              "event": match.group(3)} if match else {"event": line})
    return tasks


def store_task_logs(env: dict, dag_id: str, console: list[str]) -> list[str]:
    """Write the task logs of the latest run of `dag_id`, from `airflow dags test`'s console
    output, where the api-server of the same AIRFLOW_HOME reads them (base_log_folder, the
    log file name template, as Airflow renders it). Why: `dags test` runs the tasks in its own
    process and logs them to the console only, so the UI showed them empty. Returns the files."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"dag_id": dag_id, "tasks": task_log_lines(console)}, f)
    try:
        result = subprocess.run([os.path.join(BIN, "python"), "-c", _STORE_TASK_LOGS, f.name], env=env,
                                capture_output=True, text=True, timeout=300)
    finally:
        os.remove(f.name)
    if result.returncode != 0:
        raise RuntimeError(f"writing the task logs failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
