"""Building the spark-submit command that runs a Spark app of ours: a pure function of its
inputs (tests assert the exact list), used by `cdc-replay replay` and by the Airflow replay
operator, so the command line and the DAG run the very same thing."""

from __future__ import annotations

import os
import sys
import zipfile

SPARK_APPS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SPARK_APPS)
REPLAY_APP = os.path.join(SPARK_APPS, "replay.py")
LOG4J = os.path.join(SPARK_APPS, "conf", "log4j2.properties")


def is_local(master: str) -> bool:
    return master.startswith("local")


LOCAL_DRIVER_MEMORY = "4g"  # local mode runs everything in the driver JVM (Spark's default is 1g)


def spark_submit_command(
    app_args: list[str],
    *,
    master: str = "local[*]",
    python: str = sys.executable,
    py_files: str | None = None,
    spark_submit: str | None = None,
    app: str = REPLAY_APP,
    conf: dict[str, str] | None = None,
) -> list[str]:
    """spark-submit <confs> <app> <app_args>. Workers use `python` (the venv's), not
    whatever `python3` is on PATH; `py_files` ships our packages to a cluster; `conf` (the
    app's --spark-conf) reaches spark-submit too, because settings like spark.driver.memory
    only work before the JVM starts."""
    binary = spark_submit or os.path.join(os.path.dirname(python), "spark-submit")
    settings = {"spark.pyspark.python": python, "spark.pyspark.driver.python": python,
                "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J}"}
    if is_local(master):
        settings["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
    settings.update(conf or {})
    command = [binary, "--master", master, "--name", "cdc-replay"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    if py_files:
        command += ["--py-files", py_files]
    return command + [app, "--master", master, *app_args]


def build_py_files(directory: str) -> str:
    """A zip of our packages for cluster executors: `cdc_codecs` (from codecs/) and
    `spark_apps`. Local masters import them from the installed venv instead."""
    path = os.path.join(directory, "cdc_replay_py_files.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, package in ((os.path.join(REPO, "codecs"), "cdc_codecs"), (SPARK_APPS, "spark_apps")):
            for root, _dirs, files in os.walk(folder):
                if "__pycache__" in root:
                    continue
                for name in files:
                    if name.endswith((".py", ".proto", ".avsc", ".json", ".properties", ".xml")):
                        full = os.path.join(root, name)
                        archive.write(full, os.path.join(package, os.path.relpath(full, folder)))
    return path
