"""The replay operator builds spark-submit from pure pieces, and the command the Spark
provider's hook runs is the command `cdc-replay replay` runs (spark_apps.launch), for a local
master and for a cluster URL taken from the `spark_default` connection."""

from __future__ import annotations

import os
import zipfile

import pytest

from cdc_replay_airflow.hooks.replay import EXIT_QUARANTINE, exit_status, spark_master
from cdc_replay_airflow.operators.replay import (
    ReplayOperator,
    extra_spark_conf,
    submit_settings,
    subprocess_environment,
)
from cdc_replay_airflow.request import parse_request, replay_arguments
from spark_apps.launch import (
    LOCAL_DRIVER_MEMORY,
    LOG4J,
    REPLAY_APP,
    LOCAL_JIT_OPTIONS,
    SMALL_RUN_SPARK_CONF,
    small_run_options,
    spark_submit_command,
)

REQUEST = parse_request({"source": "s3://cdc-archive/tidb/shop", "protocol": "canal-json",
                         "protocol_options": {"enable-tidb-extension": "true"}, "output": "s3://cdc-lake/out",
                         "emit": "topics", "target_protocol": "open-protocol", "max_bad_records": 1})


def test_submit_settings_are_exact(monkeypatch):
    monkeypatch.delenv("CDC_REPLAY_SMALL_RUN_MB", raising=False)
    monkeypatch.setenv("CDC_REPLAY_CDS_DIR", "off")  # the class-data archive: tests/test_cli.py
    assert submit_settings(REQUEST, master="local[2]", python="/venv/bin/python", run_id="d.r") == {
        "application": REPLAY_APP,
        "name": "cdc-replay",
        "conf": {"spark.pyspark.python": "/venv/bin/python", "spark.pyspark.driver.python": "/venv/bin/python",
                 "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS}",
                 "spark.driver.memory": LOCAL_DRIVER_MEMORY},
        "py_files": None,
        "application_args": [
            "--master", "local[2]", "--source", "s3://cdc-archive/tidb/shop", "--protocol", "canal-json",
            "--protocol-option", "enable-tidb-extension=true", "--output", "s3://cdc-lake/out", "--emit", "topics",
            "--target-protocol", "open-protocol", "--max-bad-records", "1", "--run-id", "d.r"],
    }
    with_conf = submit_settings(REQUEST, master="local[2]", python="/p",
                                spark_conf=extra_spark_conf("a.b=1, spark.driver.memory=2g"))
    # as the CLI does: to the app, and to spark-submit (driver settings only work before the JVM starts)
    assert with_conf["application_args"][-4:] == ["--spark-conf", "a.b=1", "--spark-conf", "spark.driver.memory=2g"]
    assert with_conf["conf"]["a.b"] == "1" and with_conf["conf"]["spark.driver.memory"] == "2g"
    with pytest.raises(ValueError, match="CDC_REPLAY_SPARK_CONF: 'oops' is not key=value"):
        extra_spark_conf("oops")
    # the stage task's listed bytes choose the small-run driver JVM as the CLI's listing does
    said = []
    small = submit_settings(REQUEST, master="local[2]", python="/p", source_bytes=1_000_000, say=said.append)
    assert small["conf"]["spark.driver.extraJavaOptions"] == (f"-Dlog4j2.configurationFile=file:{LOG4J} "
                                                              f"{LOCAL_JIT_OPTIONS}")
    assert {k: small["conf"][k] for k in SMALL_RUN_SPARK_CONF} == SMALL_RUN_SPARK_CONF
    assert said == ["small local run (1.0 MB of source, at most $CDC_REPLAY_SMALL_RUN_MB=16): driver JVM with "
                    "-XX:TieredStopAtLevel=1 (C1 JIT only), no class-data archive, spark.sql.codegen.wholeStage=false, "
                    "spark.sql.codegen.factoryMode=NO_CODEGEN"]
    cluster = submit_settings(REQUEST, master="spark://m:7077", python="/p", source_bytes=1_000_000)
    assert cluster["conf"]["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J}"
    assert not set(SMALL_RUN_SPARK_CONF) & set(cluster["conf"])


def test_a_kafka_sources_counted_records_choose_the_small_run_settings(monkeypatch):
    """The stage task counts a kafka:// source's records (its offsets; bytes are not known
    before the run): up to launch.SMALL_KAFKA_RECORDS they get the small-run settings."""
    from spark_apps.launch import SMALL_KAFKA_RECORDS

    monkeypatch.delenv("CDC_REPLAY_SMALL_RUN_MB", raising=False)
    monkeypatch.setenv("CDC_REPLAY_CDS_DIR", "off")
    said = []
    small = submit_settings(REQUEST, master="local[2]", python="/p", source_records=133, say=said.append)
    assert small["conf"]["spark.driver.extraJavaOptions"].endswith(LOCAL_JIT_OPTIONS)
    assert {k: small["conf"][k] for k in SMALL_RUN_SPARK_CONF} == SMALL_RUN_SPARK_CONF
    assert said == [f"small local run (133 Kafka records, at most {SMALL_KAFKA_RECORDS}): driver JVM with "
                    "-XX:TieredStopAtLevel=1 (C1 JIT only), no class-data archive, spark.sql.codegen.wholeStage=false, "
                    "spark.sql.codegen.factoryMode=NO_CODEGEN"]
    large = submit_settings(REQUEST, master="local[2]", python="/p", source_records=SMALL_KAFKA_RECORDS + 1)
    assert large["conf"]["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JIT_OPTIONS}"
    assert not set(SMALL_RUN_SPARK_CONF) & set(large["conf"])


def test_subprocess_environment_puts_the_venv_first():
    env = subprocess_environment("/venv/bin/python", {"PATH": "/usr/bin:/venv/bin", "SPARK_LOCAL_IP": "127.0.0.1"})
    assert env == {"PATH": "/venv/bin:/usr/bin", "PYSPARK_PYTHON": "/venv/bin/python",
                   "PYSPARK_DRIVER_PYTHON": "/venv/bin/python", "SPARK_LOCAL_IP": "127.0.0.1"}


def _parts(command: list[str]) -> tuple:
    """(binary, spark-submit options as a sorted list of pairs, application, its arguments)."""
    options, i = [], 1
    while command[i].startswith("--"):
        options.append((command[i], command[i + 1]))
        i += 2
    return os.path.basename(command[0]), sorted(options), command[i], command[i + 1:]


@pytest.mark.parametrize("connection, master", [
    ('{"conn_type": "spark", "host": "local[2]"}', "local[2]"),
    ("spark://local%5B*%5D", "local[*]"),
    ("spark://spark-master:7077", "spark://spark-master:7077"),
])
def test_the_operator_runs_what_the_cli_runs(monkeypatch, connection, master):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", connection)
    monkeypatch.delenv("CDC_REPLAY_SPARK_CONF", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    operator = ReplayOperator(task_id="replay", plan={"request": REQUEST.as_dict(), "run_id": "d.r"},
                              python="/venv/bin/python")
    operator.prepare()
    assert operator.master == master == spark_master("spark_default")
    hook = operator._get_hook()  # the hook SparkSubmitOperator builds from its public arguments
    command = hook._build_spark_submit_command(operator.application)
    py_files = operator.py_files
    if master.startswith("local"):
        assert py_files is None
    else:  # a cluster gets our packages shipped
        with zipfile.ZipFile(py_files) as z:
            names = z.namelist()
        assert "cdc_codecs/__init__.py" in names and "spark_apps/replay.py" in names
    java_options, conf, _ = small_run_options(master, None, {})  # the class-data archive of local runs
    expected = spark_submit_command(replay_arguments(REQUEST, run_id="d.r"), conf=conf,
                                    master=master, python="/venv/bin/python", py_files=py_files,
                                    spark_submit="spark-submit", driver_java_options=java_options)
    assert _parts(command) == _parts(expected)
    assert command[-len(expected[expected.index(REPLAY_APP) + 1:]):] == expected[expected.index(REPLAY_APP) + 1:]


def test_no_spark_connection_means_local_mode_not_yarn(monkeypatch):
    """Without a `spark_default` connection (a UI trigger on an Airflow where nobody created
    one), the replay runs in local mode: the operator's master and the command the provider's
    hook builds both say local[*]; the provider's own fallback would be yarn. An existing
    connection is left alone, and the environment is as it was afterwards."""
    from cdc_replay_airflow.hooks.replay import LOCAL_MASTER, default_local_connection

    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.delenv("CDC_REPLAY_SPARK_CONF", raising=False)
    assert spark_master("spark_default") == LOCAL_MASTER == "local[*]"
    operator = ReplayOperator(task_id="replay", plan={"request": REQUEST.as_dict(), "run_id": "d.r"},
                              python="/venv/bin/python")
    operator.prepare()
    assert operator.master == "local[*]" and operator.py_files is None
    assert operator._get_hook()._connection["master"] == "yarn"  # what the provider alone would do
    with default_local_connection("spark_default") as master:
        assert master == "local[*]"
        command = operator._get_hook()._build_spark_submit_command(operator.application)
    assert command[command.index("--master") + 1] == "local[*]"
    assert "AIRFLOW_CONN_SPARK_DEFAULT" not in os.environ
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://spark-master:7077")
    with default_local_connection("spark_default") as master:
        assert master == "spark://spark-master:7077"
        assert operator._get_hook()._connection["master"] == "spark://spark-master:7077"
    assert os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077"


def test_aws_credentials_go_to_the_subprocess_only(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://local%5B1%5D")
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", '{"conn_type": "aws", "login": "AKIAX", "password": "sekrit-1", '
                                                   '"extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"}}')
    operator = ReplayOperator(task_id="replay", plan={"request": REQUEST.as_dict(), "run_id": "d.r"})
    # the templated fields as Airflow renders and stores them, before the task runs
    for name in operator.template_fields:
        assert "sekrit-1" not in repr(getattr(operator, name, None))
    assert not operator.overwrite_rtif_after_execution  # not stored again once env_vars holds them
    operator.prepare()
    hook = operator._get_hook()
    command = hook._build_spark_submit_command(operator.application)
    assert not any("sekrit" in part or "AKIAX" in part for part in command)
    assert hook._env["AWS_SECRET_ACCESS_KEY"] == "sekrit-1" and hook._env["AWS_ACCESS_KEY_ID"] == "AKIAX"
    assert hook._env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9" and hook._env["AWS_REGION"] == "eu-west-1"


@pytest.mark.parametrize("status, outcome", [(0, "ok"), (3, "over limit"), (2, "no retry"), (1, "retry")])
def test_the_apps_exit_status_through_the_providers_public_api(tmp_path, monkeypatch, status, outcome):
    """The Spark provider's own hook runs spark-submit (here a stand-in on the PATH the operator
    gives the subprocess: the Python environment's bin first); the operator reads the exit
    status from the AirflowException the hook raises: 3 (quarantine over the limit) lets the
    validate task fail the run, 2 (bad input) fails without retries, other failures retry."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "spark-submit").write_text(f"#!/bin/sh\necho \"[replay r] reading and decoding\"\nexit {status}\n")
    (bin_dir / "spark-submit").chmod(0o755)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://local%5B1%5D")
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    monkeypatch.delenv("CDC_REPLAY_SPARK_CONF", raising=False)
    operator = ReplayOperator(task_id="replay", plan={"request": REQUEST.as_dict(), "run_id": "d.r"},
                              python=str(bin_dir / "python"))
    if outcome == "no retry":
        with pytest.raises(AirflowFailException, match="exit status 2"):
            operator.execute({"params": {}})
    elif outcome == "retry":
        with pytest.raises(AirflowException) as e:
            operator.execute({"params": {}})
        assert not isinstance(e.value, AirflowFailException) and exit_status(e.value) == 1
    else:
        result = operator.execute({"params": {}})
        assert result["quarantine_over_limit"] == (status == EXIT_QUARANTINE) and result["master"] == "local[1]"
