"""ReplayOperator: runs the replay Spark app (spark_apps/replay.py) with the Spark provider's
SparkSubmitOperator on a Spark connection (`spark_default`: a cluster URL such as
spark://master:7077 when configured; when the connection does not exist, local[*], where the
provider itself would fall back to yarn: cdc_replay_airflow.hooks.replay.default_local_connection).

Thin: the spark-submit pieces come from pure functions (`submit_settings`, and
`cdc_replay_airflow.request.replay_arguments` for the app's arguments), which build the same
command as `cdc-replay replay` (spark_apps.launch.submit_plan); the hook runs it.
The Spark provider is used through its public API only: SparkSubmitOperator's arguments (the
subprocess environment is its `env_vars`), and the exit status read from the AirflowException
its hook raises (cdc_replay_airflow.hooks.replay). S3 access comes from the Airflow AWS
connection through ArchiveHook.environment(); that environment and credentials in option values
are set when the task runs, after Airflow has rendered and stored the templated fields (this
operator does not store them again after execution), and every secret is registered with
Airflow's masker, so none shows in the UI or the logs.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from cdc_replay_airflow.hooks.replay import (
    EXIT_BAD_INPUT,
    EXIT_QUARANTINE,
    default_local_connection,
    exit_status,
    spark_master,
)
from cdc_replay_airflow.request import ReplayRequest, replay_arguments
from spark_apps import masking
from spark_apps.launch import (
    REPLAY_APP,
    build_native_archive,
    build_py_files,
    finish_class_archive,
    is_local,
    small_run_options,
    submit_plan,
)

SPARK_CONF_ENV = "CDC_REPLAY_SPARK_CONF"
# masters for which SparkSubmitHook turns env_vars into --conf arguments, and what must not go there
CONF_ENV_MASTERS = ("yarn", "k8s://")
# the Kafka client settings ($CDC_REPLAY_KAFKA_CONFIG, spark_apps.kafka_io.CONFIG_ENV) may hold SASL passwords
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", masking.ENV, "CDC_REPLAY_KAFKA_CONFIG")


def extra_spark_conf(value: str | None) -> tuple[str, ...]:
    """Deployment-wide Spark settings for the app ("k=v k2=v2", from $CDC_REPLAY_SPARK_CONF)."""
    items = tuple(item for item in (value or "").replace(",", " ").split() if item)
    for item in items:
        if "=" not in item:
            raise ValueError(f"{SPARK_CONF_ENV}: {item!r} is not key=value")
    return items


def submit_settings(request: ReplayRequest, *, master: str, python: str, run_id: str | None = None,
                    py_files: str | None = None, spark_conf: tuple[str, ...] = (), source_bytes: int | None = None,
                    say=lambda text: None, archives: tuple[str, ...] = (), source_records: int | None = None) -> dict:
    """Everything SparkSubmitOperator needs, as plain values: the plan `cdc-replay replay`
    renders as its spark-submit command (spark_apps.launch.submit_plan), so the two cannot
    drift: the application, its arguments (`--master` first), the Spark confs, the job name.
    `source_bytes` (what the stage task listed; `source_records` for a kafka:// source) chooses
    the small-run settings as the CLI does;
    `say` gets the line saying which and why."""
    # the deployment's settings, then the run's own resources (the form's spark_conf) over them
    spark_conf = (*spark_conf, *(f"{key}={value}" for key, value in request.spark_conf))
    app_args = replay_arguments(request, run_id=run_id, spark_conf=spark_conf)
    conf = dict(item.split("=", 1) for item in spark_conf)
    from spark_apps.cli import with_packages

    conf = with_packages(request, conf)  # a kafka:// source: Spark's Kafka connector (a Spark package)
    java_options, small_conf, why = small_run_options(master, source_bytes, conf, source_records=source_records)
    say(why)
    plan = submit_plan(app_args, master=master, python=python, py_files=py_files, conf={**small_conf, **conf},
                       driver_java_options=java_options, archives=archives)
    # the master comes from the Spark connection (SparkSubmitOperator passes it)
    return {name: plan[name] for name in ("application", "name", "conf", "py_files", "application_args")}


def subprocess_environment(python: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """PATH with the Python environment's bin first (spark-submit lives there) and the
    Python the driver and workers use."""
    base = os.environ if base is None else base
    bin_dir = os.path.dirname(python)
    env = {
        "PATH": os.pathsep.join([bin_dir, *[p for p in base.get("PATH", "").split(os.pathsep) if p and p != bin_dir]]),
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
    }
    if "SPARK_LOCAL_IP" in base:
        env["SPARK_LOCAL_IP"] = base["SPARK_LOCAL_IP"]
    return env


def _mask_in_airflow(secret: dict) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older Airflow
        return
    for values in secret.values():
        for value in values:
            for part in value.split("&"):
                name, _, text = part.partition("=")
                mask_secret(text)


def kafka_environment(request: ReplayRequest) -> dict[str, str]:
    """The Kafka connection's client settings (SASL/SSL) for the app, in its environment only;
    their secret values are masked in Airflow's logs."""
    if not (request.kafka_source or request.kafka_output):
        return {}
    import json

    from cdc_replay_airflow.hooks.kafka import client_config
    from spark_apps.kafka_io import CONFIG_ENV

    config = client_config(request.kafka_connection)
    if not config:
        return {}
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older Airflow
        mask_secret = None
    for key, value in config.items():
        if mask_secret is not None and (masking.mask_option(key, str(value)) != str(value) or "jaas" in key):
            mask_secret(str(value))
    return {CONFIG_ENV: json.dumps(config)}


class ReplayOperator(SparkSubmitOperator):
    """Run one replay.

    :param plan: the stage task's result: ``{"request": ReplayRequest.as_dict(), "run_id": ...}``
        (an XComArg or a templated value); ``request.source`` is what the app reads.
    :param aws_conn_id: Airflow AWS connection for S3 (credentials, endpoint, region).
    :param python: the Python of the Spark driver and workers (default: this interpreter,
        or $CDC_REPLAY_PYTHON).
    :param options_variable: credentials in option values are masked in the plan (an XCom);
        their real values are taken from the DAG run's params (the backfill form) or, when
        given, from this Airflow Variable (the scheduled DAG's request).
    """

    template_fields = (*SparkSubmitOperator.template_fields, "plan")
    ui_color = "#e8f2fc"
    overwrite_rtif_after_execution = False  # env_vars holds credentials once the task runs

    def __init__(self, *, plan: Any, aws_conn_id: str = "aws_default", conn_id: str = "spark_default",
                 python: str | None = None, options_variable: str | None = None, **kwargs: Any) -> None:
        super().__init__(application=REPLAY_APP, name="cdc-replay", conn_id=conn_id, **kwargs)
        self.spark_conn_id = conn_id
        self.plan = plan
        self.options_variable = options_variable
        self._given: dict | None = None  # where masked option values are restored from (execute)
        self.aws_conn_id = aws_conn_id
        self.python = python  # resolved when the task runs (the worker's interpreter by default)
        self.master: str | None = None

    def prepare(self) -> ReplayRequest:
        """Resolve the Spark master from the connection and set SparkSubmitOperator's arguments
        (application, name, conf, py_files, application_args, env_vars) for this run."""
        from cdc_replay_airflow.hooks.archive import ArchiveHook

        from cdc_replay_airflow.tasks import restore_secrets

        request = ReplayRequest.from_dict(restore_secrets(self.plan["request"], self._given))
        python = self.python or os.environ.get("CDC_REPLAY_PYTHON") or sys.executable
        master = self.master = spark_master(self.spark_conn_id)
        py_files, archives = None, ()
        if not is_local(master):  # our code, and the compiled decoders, shipped to the executors
            folder = tempfile.mkdtemp(prefix="cdc-replay-")
            py_files = build_py_files(folder)
            native, shipped = build_native_archive(folder, python=python)
            self.log.info("%s", shipped)
            archives = (native,) if native else ()
        staged = self.plan.get("staged") or {}  # what the stage task listed (a kafka:// source: its records)
        kafka = staged.get("mode") == "kafka"
        settings = submit_settings(request, master=master, python=python, run_id=self.plan["run_id"],
                                   py_files=py_files, archives=archives,
                                   spark_conf=extra_spark_conf(os.environ.get(SPARK_CONF_ENV)),
                                   source_bytes=None if kafka else staged.get("bytes"),
                                   source_records=staged.get("records") if kafka else None, say=self.log.info)
        self.application = settings["application"]
        self.name = settings["name"]
        self.conf = {**settings["conf"], **(self.conf or {})}
        self.py_files = settings["py_files"]
        # credentials in option values reach the app through the environment, never the
        # command line (which the hook logs and `ps` shows), and are masked in Airflow's logs
        self.application_args, secret = masking.split_argv(settings["application_args"])
        _mask_in_airflow(secret)
        self._archive = ArchiveHook(self.aws_conn_id)
        env = {**subprocess_environment(python), **self._archive.environment(), **masking.environment(secret),
               **kafka_environment(request)}
        if master.startswith(CONF_ENV_MASTERS):
            # the provider hands env_vars to YARN / Kubernetes as `--conf spark.*Env.K=V` on
            # spark-submit's command line: no credential goes there (the cluster's own
            # credentials apply, docs/airflow.md)
            dropped = sorted(k for k in env if k in SECRET_ENV)
            if dropped:
                self.log.warning("Spark master %s: %s not passed to spark-submit (it would put them on its command "
                                 "line); the cluster's own credentials apply", master, ", ".join(dropped))
            env = {k: v for k, v in env.items() if k not in SECRET_ENV}
        self.env_vars = {**(self.env_vars or {}), **env}
        return request

    def execute(self, context: Any) -> dict:
        if self.plan.get("carry") is not None:  # no archive object in the interval: no Spark job
            from cdc_replay_airflow.hooks.archive import ArchiveHook
            from cdc_replay_airflow.tasks import carry_forward

            manifest = carry_forward(ArchiveHook(self.aws_conn_id), self.plan)
            return {"run_id": self.plan["run_id"], "output": manifest["output"]["uri"], "master": None,
                    "quarantine_over_limit": False, "carried_from": manifest["carried_from"]}
        if self.options_variable:
            from airflow.sdk import Variable

            self._given = Variable.get(self.options_variable, default=None, deserialize_json=True)
        else:
            self._given = dict(context.get("params") or {})
        request = self.prepare()
        run_id = self.plan["run_id"]
        self.log.info("Replaying %s [%s] -> %s (%s) on Spark master %s; S3 through %s", request.source,
                      request.protocol, request.output, request.emit, self.master, self._archive.describe())
        # what an earlier attempt left in the app's staging area (_staging/<run id>/) the app
        # handles itself: a commit killed after its manifest switched there is finished first
        # (the manifest names those objects), anything else is removed before it stages
        over_limit = False
        try:
            with default_local_connection(self.spark_conn_id):  # no connection: local[*], not yarn
                super().execute(context)
            finish_class_archive(list(self.conf.values()), 0)
        except AirflowException as e:
            status = exit_status(e)
            finish_class_archive(list(self.conf.values()), status)
            if status == EXIT_BAD_INPUT:
                raise AirflowFailException(f"the replay app refused its arguments or input (exit status 2), "
                                           f"so retrying cannot help: {e}") from e
            if status != EXIT_QUARANTINE:
                raise
            self.log.warning("The replay quarantined more records than --max-bad-records allows; its output "
                             "and manifest are committed, and the validate task will fail the run.")
            over_limit = True
        return {"run_id": run_id, "output": request.output, "master": self.master,
                "quarantine_over_limit": over_limit}
