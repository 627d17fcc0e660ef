"""`cdc-replay demo`: the main job end to end on the embedded default, through Airflow.

A loopback S3 server (moto), a generated TiCDC canal-json archive in a bucket, then the manual
manual DAG (dags/cdc_replay_manual.py) run by `airflow dags test` with an embedded SQLite
metadata DB: its tasks check the request, list the archive, run the Spark app with spark-submit
in local mode (the same command `cdc-replay replay` runs), reconcile the manifest and publish.
Then the summary, a few output rows, a check of every row against the generator's truth, and
how to open the Airflow UI on the same AIRFLOW_HOME to see the run on the CDC replay page."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys

from cdc_codecs import get_codec
from cdc_codecs.archive import is_archive_object, parse_line

from . import airflow_local, storage
from .contract import Kind
from .generate import generate, write_archive
from .local_s3 import DEMO_CREDENTIALS, moto_server
from .manifest import read_manifest, summary

SOURCE = "s3://cdc-archive/tidb/shop"
OUTPUT = "s3://cdc-lake/replay/shop-snapshot"


def read_snapshot(output: str, protocol: str = "canal-json", options=None) -> dict:
    """{(db, table): {key: {column: value}}} from a snapshot output (decoded, not trusted)."""
    codec = get_codec(protocol, {"enable-tidb-extension": "true"} if options is None else options)
    tables: dict = {}
    for info in storage.list_objects(output):
        if not is_archive_object(storage.relative(info.uri, output)):
            continue
        for line in storage.iter_lines(info.uri):
            for event in codec.decode(parse_line(line)):
                if event["kind"] != Kind.ROW:
                    continue
                row = {c["name"]: c["value"] for c in event["after"]}
                key = tuple(row[k] for k in (event["key_columns"] or list(row)))
                tables.setdefault((event["database"], event["table"]), {})[key] = row
    return tables


def _show(value: bytes | None, mysql_type: str) -> str:
    if value is None:
        return "NULL"
    if "binary" in mysql_type or "blob" in mysql_type:
        return "0x" + value.hex()
    text = value.decode()
    return text if len(text) <= 24 else text[:21] + "..."


CONF = {
    "source": SOURCE, "protocol": "canal-json", "protocol_options": {"enable-tidb-extension": "true"},
    "output": OUTPUT, "emit": "snapshot", "target_options": {"enable-tidb-extension": "true"},
    "max_bad_records": 2,
}
DEFAULT_HOME = os.path.join(airflow_local.REPO, ".airflow")
_LOG_LINE = re.compile(r"^\S+Z \[(\w+)\s*\] (.*?)(?: \[[\w.]+\](?: \S+=\S+)*)?$")
_TASK = re.compile(r"\[DAG TEST\] starting task_id=(\w+)")
_SHOW = re.compile(r"^(Request checked|refused|Listed|Interval|Staged|Copying|Replaying|Spark stage|\[replay |"
                   r"cdc-replay run|Check:|Cut at|Removed the staging|Published|WARNING: (?!Using incubator)|"
                   r"cdc-replay: error|.*records quarantined, more)")


def demo_line(line: str, task: list) -> str | None:
    """The lines of `airflow dags test` worth showing, prefixed with their task; None to skip."""
    match = _TASK.search(line)
    if match:
        task[0] = match.group(1)
        return None
    match = _LOG_LINE.match(line.rstrip())
    if not match:
        return None
    level, message = match.groups()
    message = re.sub(r"^\S+ \S+ INFO cdc_replay: ", "", message.strip())
    if _SHOW.match(message) or level in ("error", "critical"):
        return f"  [{task[0] or '-'}] {message}"
    return None


def _ui_password(home: str) -> str:
    """The demo UI user's password (simple auth manager), created once per AIRFLOW_HOME."""
    path = os.path.join(home, "simple_auth_manager_passwords.json.generated")
    try:
        with open(path) as f:
            return json.load(f)["admin"]
    except (OSError, ValueError, KeyError):
        password = secrets.token_urlsafe(9)
        with open(path, "w") as f:
            json.dump({"admin": password}, f)
        return password


def run_demo(transactions: int = 2000, keep_server: bool = False, airflow_home: str | None = None) -> int:
    home = os.path.abspath(airflow_home or DEFAULT_HOME)
    os.environ.update({k: os.environ.get(k, v) for k, v in DEMO_CREDENTIALS.items()})
    with moto_server(keep=keep_server) as endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        print(f"[demo] S3-compatible server (moto) on {endpoint}")
        generated = generate(transactions=transactions, partitions=3, bad_values=2)
        storage.ensure_bucket(SOURCE)
        storage.ensure_bucket(OUTPUT)
        objects = write_archive(generated.records, SOURCE)
        print(f"[demo] wrote {len(generated.records):,} Kafka records of TiCDC canal-json (with duplicates, "
              f"DDL, watermarks, 2 corrupt records) in {len(objects)} objects to {SOURCE}")

        airflow_local.write_config(home)
        password = _ui_password(home)
        aws = airflow_local.aws_connection(endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                                           os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
        env = airflow_local.environment(home, aws=aws)
        for key in [k for k in env if k.startswith("AWS_")]:  # S3 access only through the Airflow connection
            del env[key]
        print(f"[demo] Airflow {_airflow_version()} with AIRFLOW_HOME={home} (SQLite metadata DB): airflow db migrate")
        airflow_local.migrate(env)
        # in the metadata DB too: a run triggered later in the UI (tasks run by the scheduler, without
        # this process's AIRFLOW_CONN_*) replays in local mode and reads the archive of this S3 server
        airflow_local.write_connections(home, env, {
            "spark_default": {"conn_type": "spark", "host": "local[*]"}, "aws_default": json.loads(aws)})
        conf = json.dumps(CONF)
        print(f"[demo] running the manual DAG (Spark local mode): airflow dags test cdc_replay_manual "
              f"-c '{conf}'", flush=True)
        log_path = os.path.join(home, "demo-dags-test.log")
        status = _run_dag_test(["dags", "test", "cdc_replay_manual", "-c", conf], env, log_path)
        with open(log_path) as f:  # for the UI: `dags test` logs its tasks to the console only
            try:
                written = airflow_local.store_task_logs(env, "cdc_replay_manual", f.readlines())
            except RuntimeError as e:
                written = []
                print(f"[demo] the task logs could not be stored for the UI: {e}", file=sys.stderr)
        if status != 0:
            print(f"[demo] the DAG run failed (exit status {status}); its full log: {log_path}", file=sys.stderr)
            return status or 1
        print(f"[demo] the DAG run succeeded; its full log: {log_path}")
        print(f"[demo] its {len(written)} task logs, as the UI shows them: "
              f"{os.path.dirname(os.path.dirname(written[0])) if written else '-'}")
        manifest = read_manifest(OUTPUT)
        print()
        print(summary(manifest))
        snapshot = read_snapshot(OUTPUT)
        for (db, table), rows in sorted(snapshot.items()):
            print(f"\n[demo] {db}.{table}: {len(rows)} rows; the first 3:")
            sample = [rows[k] for k in sorted(rows, key=lambda k: int(k[0]))[:3]]
            types = {c["name"]: c["mysql_type"] for e in generated.events if e["kind"] == Kind.ROW and e["table"] == table
                     for c in (e["after"] or e["before"])}
            columns = list(sample[0]) if sample else []
            print("  " + " | ".join(columns))
            for row in sample:
                print("  " + " | ".join(_show(row[c], types.get(c, "")) for c in columns))
        same = snapshot == {k: v for k, v in generated.expected.items() if v}
        total = sum(len(v) for v in snapshot.values())
        print(f"\n[demo] snapshot at commit ts {manifest['cut']['commit_ts']} ({manifest['cut']['time']}): "
              f"{total} rows; matches the generator's state at its last watermark: {'yes' if same else 'NO'}")
        print(f"[demo] manifest: {OUTPUT}/_manifest.json; quarantine: {manifest['quarantine']['location']}")
        print(f"[demo] to see the run in the Airflow UI (the CDC replay page: per table counts, commit ts ranges, "
              f"watermark lag, a plot):\n"
              f"         AIRFLOW_HOME={home} {airflow_local.AIRFLOW} api-server --port {airflow_local.API_PORT}\n"
              f"       then open http://localhost:{airflow_local.API_PORT}/plugin/cdc-replay and log in as admin, "
              f"password {password} (the api-server listens on 127.0.0.1 only)")
        commands = "\n".join(f"         {c}" for c in airflow_local.start_commands(home))
        server = (f"this S3 server ({endpoint}) stays up" if keep_server else
                  "run the demo with --keep-server so that its S3 server stays up (the aws_default connection names it)")
        print(f"[demo] to trigger cdc_replay_manual from the UI as well (Trigger DAG, its form), start the whole local "
              f"Airflow instead (api-server, scheduler, dag-processor, triggerer; docs/airflow.md \"A local Airflow\"):\n"
              f"{commands}\n"
              f"       its connections are in the metadata DB: spark_default local[*], aws_default; {server}")
        return 0 if same else 1


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def _run_dag_test(args: list[str], env: dict, log_path: str) -> int:
    """Run `airflow <args>`, show its progress lines as they come, keep the whole log."""
    task = [None]
    with open(log_path, "w") as log:
        process = subprocess.Popen([airflow_local.AIRFLOW, *args], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in process.stdout:
            log.write(line)
            shown = demo_line(line, task)
            if shown:
                print(shown, flush=True)
        return process.wait()
