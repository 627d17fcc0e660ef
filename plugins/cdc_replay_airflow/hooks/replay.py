"""What the replay operator needs around the Spark provider's SparkSubmitHook, through its public
API only (constructor arguments, `submit`, the AirflowException it raises): no subclass.

* The app's exit status: SparkSubmitHook.submit raises AirflowException("... Error code is: N.")
  when spark-submit fails; `exit_status` reads N. 2 means bad arguments or input (retrying
  cannot help, so the task fails without retries), 3 means more records were quarantined than
  --max-bad-records (the output is committed; the validate task reads the manifest and fails
  the run loudly).
* The Spark master of a connection, resolved as the provider documents its Spark connection
  (the operator needs it before the hook runs: the app gets it as --master, and a cluster gets
  our packages shipped).
* Progress: the app logs its own progress lines (records decoded, records/s, each stage's task
  rate and time left; spark_apps.progress), which the hook logs as they come; the app keeps
  Spark's console bar off (spark_apps.replay.build_session) unless a run asks for it with
  `--spark-conf spark.ui.showConsoleProgress=true`.
"""

from __future__ import annotations

import re

EXIT_BAD_INPUT = 2
EXIT_QUARANTINE = 3
_ERROR_CODE = re.compile(r"Error code is: (-?\d+)")


def exit_status(error: BaseException) -> int | None:
    """spark-submit's exit status, from the message of the AirflowException SparkSubmitHook.submit
    raises ("Cannot execute: ... Error code is: 3."); None when it names none."""
    match = _ERROR_CODE.search(str(error))
    return int(match.group(1)) if match else None


def spark_master(conn_id: str) -> str:
    """The master URL of a Spark connection, as the Spark provider reads it: a `spark` connection
    whose host holds a URL (or has no port) is that master (local[*], spark://m:7077, yarn);
    otherwise <conn type>://<host>[:<port>]. No connection: yarn (the provider's default)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowException:
        return "yarn"
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master
