"""Issue 13 point 6: the replay on a real Spark standalone cluster (a master and two workers from
the installed pyspark, on 127.0.0.1; tests/support/spark_cluster.py), started by `cdc-replay
replay --master spark://...` and by the Airflow backfill DAG's replay task with `spark_default`
pointing at the cluster. Both outputs are byte for byte the local-mode output of the same
archive; manifests differ only in run id, times and the output URI.

The executors' Python is the venv's interpreter run without its site hooks (`-S`, site-packages
on PYTHONPATH): our dependencies import, but the editable install of cdc-replay does not, as on
a real cluster whose packed environment holds only the dependencies. So the run passing shows
our code reached the executors the documented way (`--py-files`), and the executors' work dirs
hold the shipped zip."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import sysconfig

import pytest

from spark_apps import storage
from spark_apps.generate import generate, write_archive

from .support import outputs
from .support.spark_cluster import standalone_cluster

CDC_REPLAY = [sys.executable, "-m", "spark_apps.cli"]
ARGS = ["--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true", "--emit", "snapshot",
        "--target-option", "enable-tidb-extension=true"]
SMALL = "spark.sql.shuffle.partitions=2"  # a tiny archive: the same few tasks in both modes


@pytest.fixture(scope="module")
def cluster():
    with standalone_cluster(workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> str:
    """The venv's Python without site hooks: dependencies yes, our packages only if shipped."""
    path = tmp_path_factory.mktemp("executor-python") / "python"
    path.write_text("#!/bin/sh\n"
                    f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{sysconfig.get_paths()["purelib"]}" '
                    f'exec "{sys.executable}" -S "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


@pytest.fixture(scope="module")
def archive(s3_endpoint):
    storage.ensure_bucket("s3://cluster-archive")
    storage.ensure_bucket("s3://cluster-lake")
    generated = generate(transactions=200, partitions=3, seed=13)
    write_archive(generated.records, "s3://cluster-archive/tidb/shop")
    return "s3://cluster-archive/tidb/shop"


def _replay(archive: str, output: str, master: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CDC_REPLAY, "replay", "--source", archive, "--output", output, *ARGS,
                           "--master", master, "--spark-conf", SMALL, *extra],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def local_output(archive) -> str:
    output = "s3://cluster-lake/local"
    result = _replay(archive, output, "local[2]", "--run-id", "cluster-test")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output


def _assert_same_output(output: str, local: str) -> None:
    got, want = outputs.data(output), outputs.data(local)
    assert sorted(got) == sorted(want)
    assert [path for path in want if got[path] != want[path]] == []
    assert want, "the local run wrote no data objects"
    assert outputs.manifest(output) == outputs.manifest(local)


def _assert_ran_on_both_workers(cluster, app_name: str) -> None:
    """The master lists the application as finished with the two workers' cores, and each worker
    ran an executor of it whose work dir received our code through --py-files."""
    apps = [a for a in cluster.applications() if a["name"] == app_name]
    assert len(apps) == 1, [a["name"] for a in cluster.applications()]
    app = apps[0]
    assert app["state"] == "FINISHED" and app["cores"] == 2
    for work in cluster.worker_dirs:
        executors = os.listdir(os.path.join(work, app["id"]))
        assert executors, f"no executor of {app['id']} on {work}"
        for executor in executors:
            assert "cdc_replay_py_files.zip" in os.listdir(os.path.join(work, app["id"], executor))


def test_executor_python_sees_dependencies_but_not_our_packages(executor_python, tmp_path):
    """Run where executors run: in a work dir outside the repository."""
    probe = "import pyspark, fastavro, orjson\ntry:\n import {}\nexcept ImportError:\n print('absent')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for package in ("spark_apps", "cdc_codecs"):
        result = subprocess.run([executor_python, "-c", probe.format(package)], capture_output=True, text=True,
                                cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "absent"


def test_every_module_imports_from_the_py_files_zip_alone(executor_python, tmp_path):
    """What --py-files ships is complete: in the executors' Python (no editable install), every
    module of spark_apps and cdc_codecs imports from the zip, with its resources (the OceanBase
    Avro schema, protobuf descriptors)."""
    from spark_apps.launch import build_py_files

    zip_path = build_py_files(str(tmp_path))
    probe = (
        "import importlib, sys, zipfile\n"
        "path = sys.argv[1]\n"
        "names = sorted(n[:-3].replace('/', '.').removesuffix('.__init__') for n in zipfile.ZipFile(path).namelist()\n"
        "               if n.endswith('.py'))\n"
        "for name in names:\n"
        "    module = importlib.import_module(name)\n"
        "    assert module.__file__.startswith(path), (name, module.__file__)\n"
        "print(len(names))\n")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": zip_path}
    result = subprocess.run([executor_python, "-c", probe, zip_path], capture_output=True, text=True, cwd=tmp_path,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout) > 40


@pytest.mark.spark
@pytest.mark.slow
def test_cli_replay_on_the_cluster_is_byte_identical_to_local_mode(cluster, archive, local_output, executor_python):
    output = "s3://cluster-lake/cli-cluster"
    result = _replay(archive, output, cluster.master_url, "--run-id", "cluster-test",
                     "--spark-conf", f"spark.pyspark.python={executor_python}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + cluster.logs()
    _assert_same_output(output, local_output)
    _assert_ran_on_both_workers(cluster, "cdc-replay cluster-test")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.airflow
def test_airflow_replay_task_on_the_cluster_is_byte_identical_to_local_mode(
        cluster, archive, local_output, executor_python, s3_endpoint, tmp_path):
    """`airflow dags test cdc_replay_manual` with spark_default = the cluster: the replay task
    (ReplayOperator through the Spark provider's hook) submits to the cluster."""
    from spark_apps import airflow_local as al

    home = str(tmp_path / "airflow")
    al.write_config(home)
    aws = al.aws_connection(s3_endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    env = al.environment(home, spark_master=cluster.master_url, aws=aws, extra={
        "CDC_REPLAY_SPARK_CONF": f"{SMALL} spark.pyspark.python={executor_python}"})
    for key in [k for k in env if k.startswith("AWS_")]:  # S3 only through the Airflow connection
        del env[key]
    al.migrate(env)
    output = "s3://cluster-lake/airflow-cluster"
    conf = {"source": archive, "output": output, "protocol": "canal-json", "emit": "snapshot",
            "protocol_options": {"enable-tidb-extension": "true"},
            "target_options": {"enable-tidb-extension": "true"}}
    result = al.airflow(["dags", "test", "cdc_replay_manual", "-c", json.dumps(conf)], env,
                        capture_output=True, text=True, timeout=900)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-5000:] + cluster.logs()
    assert f"on Spark master {cluster.master_url}" in text
    _assert_same_output(output, local_output)
    run_id = json.loads(storage.read_bytes(f"{output}/_manifest.json"))["run_id"]
    assert re.fullmatch(r"cdc_replay_manual\..+", run_id)
    _assert_ran_on_both_workers(cluster, f"cdc-replay {run_id}")
