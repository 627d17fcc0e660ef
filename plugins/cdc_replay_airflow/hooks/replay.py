"""What the replay operator needs around the Spark provider's SparkSubmitHook, through its public
API only (constructor arguments, `submit`, the AirflowException it raises): no subclass.

* The app's exit status: SparkSubmitHook.submit raises AirflowException("... Error code is: N.")
  when spark-submit fails; `exit_status` reads N. 2 means bad arguments or input (retrying
  cannot help, so the task fails without retries), 3 means more records were quarantined than
  --max-bad-records (the output is committed; the validate task reads the manifest and fails
  the run loudly).
* The Spark master of a connection, resolved as the provider documents its Spark connection
  (the operator needs it before the hook runs: the app gets it as --master, and a cluster gets
  our packages shipped). No connection means local mode (`local[*]`), not the provider's yarn.
* Progress: the app logs its own progress lines (records decoded, records/s, each stage's task
  rate and time left; spark_apps.progress), which the hook logs as they come; the app keeps
  Spark's console bar off (spark_apps.replay.build_session) unless a run asks for it with
  `--spark-conf spark.ui.showConsoleProgress=true`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

EXIT_BAD_INPUT = 2
EXIT_QUARANTINE = 3
# the master of a replay whose Spark connection does not exist (README, docs/airflow.md)
LOCAL_MASTER = "local[*]"
_ERROR_CODE = re.compile(r"Error code is: (-?\d+)")


def exit_status(error: BaseException) -> int | None:
    """spark-submit's exit status, from the message of the AirflowException SparkSubmitHook.submit
    raises ("Cannot execute: ... Error code is: 3."); None when it names none."""
    match = _ERROR_CODE.search(str(error))
    return int(match.group(1)) if match else None


def spark_connection(conn_id: str):
    """The Airflow connection `conn_id`, or None when there is none."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowException:
        return None


def spark_master(conn_id: str) -> str:
    """The master URL of a Spark connection, as the Spark provider reads it: a `spark` connection
    whose host holds a URL (or has no port) is that master (local[*], spark://m:7077, yarn);
    otherwise <conn type>://<host>[:<port>]. No connection: local[*] (LOCAL_MASTER; the
    provider's own default would be yarn, see default_local_connection)."""
    conn = spark_connection(conn_id)
    if conn is None:
        return LOCAL_MASTER
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


@contextlib.contextmanager
def default_local_connection(conn_id: str):
    """While the Spark provider's hook runs: when the connection `conn_id` does not exist, it
    exists as `local[*]` in this task process's environment (AIRFLOW_CONN_<ID>, the first place
    Airflow looks for a connection), so the provider runs spark-submit in local mode instead of
    its own default, yarn (which fails without HADOOP_CONF_DIR). An existing connection, from
    the metadata DB or any secrets backend, is left alone. Yields the master."""
    if spark_connection(conn_id) is not None:
        yield spark_master(conn_id)
        return
    name = f"AIRFLOW_CONN_{conn_id.upper()}"
    given = os.environ.get(name)
    os.environ[name] = json.dumps({"conn_type": "spark", "host": LOCAL_MASTER})
    try:
        yield LOCAL_MASTER
    finally:
        if given is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = given
