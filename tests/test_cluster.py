"""Issue 13 point 6: the replay on a real Spark standalone cluster (a master and two workers from
the installed pyspark, on 127.0.0.1; tests/support/spark_cluster.py), started by `cdc-replay
replay --master spark://...` and by the Airflow backfill DAG's replay task with `spark_default`
pointing at the cluster. Both outputs are byte for byte the local-mode output of the same
archive; manifests differ only in run id, times and the output URI.

The executors' Python is the venv's interpreter run without its site hooks (`-S`) on a copy of
site-packages without the compiled extension (links to every other entry): our dependencies
import, but neither the editable install of cdc-replay nor cdc_replay_native does, as on a real
cluster whose packed environment holds only the dependencies. So the run passing shows our code
reached the executors the documented way (`--py-files`), and its manifest, counted by the decode
tasks, shows the compiled decoders reached them too (`spark.archives`, docs/cluster.md); the
executors' work dirs hold both. The Airflow run ships a wheel whose library does not load (as
one built for another platform would): its executors decode with the Python codecs, and the
manifest, the summary and the task log say so; its output is the same bytes."""

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
from spark_apps.launch import NATIVE_ENV, NATIVE_SHIPPED, SMALL_RUN_SPARK_CONF

from .support import outputs
from .support.spark_cluster import standalone_cluster

CDC_REPLAY = [sys.executable, "-m", "spark_apps.cli"]
ARGS = ["--protocol", "canal-json", "--protocol-option", "enable-tidb-extension=true", "--emit", "snapshot",
        "--target-option", "enable-tidb-extension=true"]
SMALL = "spark.sql.shuffle.partitions=2"  # a tiny archive: the same few tasks in both modes
# and the same plans: the local run, a small one, runs Spark's interpreted expressions
# (launch.SMALL_RUN_SPARK_CONF); a cluster run gets them only when told. Given to the cluster
# runs too, their executors skip compiling each stage's generated code (Janino, then the JIT).
INTERPRETED = [f"{key}={value}" for key, value in SMALL_RUN_SPARK_CONF.items()]


@pytest.fixture(scope="module")
def cluster():
    with standalone_cluster(workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> str:
    """The venv's Python without site hooks: dependencies yes, our packages and the compiled
    extension only if shipped."""
    folder = tmp_path_factory.mktemp("executor-python")
    site = folder / "site-packages"
    site.mkdir()
    purelib = sysconfig.get_paths()["purelib"]
    for name in os.listdir(purelib):
        if not name.startswith("cdc_replay_native"):
            (site / name).symlink_to(os.path.join(purelib, name))
    path = folder / "python"
    path.write_text("#!/bin/sh\n"
                    f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" '
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


def _foreign_wheel(folder) -> str:
    """A wheel of cdc_replay_native whose library does not load here, as one built for another
    platform would not: the installed package with its shared library's bytes replaced."""
    import importlib.util
    import zipfile

    package = importlib.util.find_spec("cdc_replay_native").submodule_search_locations[0]
    path = os.path.join(folder, "cdc_replay_native-0.1.0-cp311-abi3-macosx_11_0_arm64.whl")
    with zipfile.ZipFile(path, "w") as wheel:
        for name in os.listdir(package):
            if name.endswith(".so"):
                wheel.writestr(f"cdc_replay_native/{name}", b"\xcf\xfa\xed\xfe not an ELF object")
            elif name.endswith(".py"):
                wheel.write(os.path.join(package, name), f"cdc_replay_native/{name}")
    return path


def _replay(archive: str, output: str, master: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CDC_REPLAY, "replay", "--source", archive, "--output", output, *ARGS,
                           "--master", master, "--spark-conf", SMALL,
                           *(arg for item in INTERPRETED for arg in ("--spark-conf", item)), *extra],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def local_output(archive) -> str:
    output = "s3://cluster-lake/local"
    result = _replay(archive, output, "local[2]", "--run-id", "cluster-test")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output


def _assert_same_output(output: str, local: str, warnings: tuple[str, ...] = ()) -> dict:
    """The same objects and manifest as the local run's, but for what the decode tasks report
    (`decoder`: where they ran) and `warnings` (their fallback): returns that `decoder`."""
    got, want = outputs.data(output), outputs.data(local)
    assert sorted(got) == sorted(want)
    assert [path for path in want if got[path] != want[path]] == []
    assert want, "the local run wrote no data objects"
    manifest, local_manifest = outputs.manifest(output), outputs.manifest(local)
    decoder = manifest.pop("decoder")
    assert local_manifest.pop("decoder")["executors"][0]["loaded_from"] == "installed"  # local mode: the venv's
    assert manifest.pop("warnings") == local_manifest.pop("warnings") + [*warnings]
    assert manifest == local_manifest
    return decoder


def _assert_ran_on_both_workers(cluster, app_name: str) -> None:
    """The master lists the application as finished with the two workers' cores, and each worker
    ran an executor of it whose work dir received our code through --py-files and the compiled
extension through spark.archives (unpacked)."""
    apps = [a for a in cluster.applications() if a["name"] == app_name]
    assert len(apps) == 1, [a["name"] for a in cluster.applications()]
    app = apps[0]
    assert app["state"] == "FINISHED" and app["cores"] == 2
    for work in cluster.worker_dirs:
        executors = os.listdir(os.path.join(work, app["id"]))
        assert executors, f"no executor of {app['id']} on {work}"
        for executor in executors:
            shipped = os.listdir(os.path.join(work, app["id"], executor))
            assert "cdc_replay_py_files.zip" in shipped and NATIVE_SHIPPED in shipped, shipped


def test_executor_python_sees_dependencies_but_not_our_packages_nor_the_compiled_extension(executor_python, tmp_path):
    """Run where executors run: in a work dir outside the repository."""
    probe = "import pyspark, fastavro, orjson\ntry:\n import {}\nexcept ImportError:\n print('absent')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for package in ("spark_apps", "cdc_codecs", "cdc_replay_native"):
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
    decoder = _assert_same_output(output, local_output)
    _assert_ran_on_both_workers(cluster, "cdc-replay cluster-test")
    # the executors have no cdc_replay_native of their own: the copy shipped with the job decoded
    assert "compiled decoders shipped to the executors from " in result.stderr
    assert decoder["path"] == decoder["expected"] == "native", decoder
    assert {(g["path"], g["loaded_from"]) for g in decoder["executors"]} == {("native", "shipped")}, decoder
    compiled = sum(g["compiled_records"] for g in decoder["executors"])
    assert compiled > 0 and compiled + sum(g["python_records"] for g in decoder["executors"]) == \
        outputs.manifest(output)["counts"]["records"]
    assert "decoder          native (canal-json), as the decode tasks reported:" in result.stdout
    assert "compiled (the copy shipped with the job)" in result.stdout


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
        "CDC_REPLAY_SPARK_CONF": " ".join([SMALL, *INTERPRETED, f"spark.pyspark.python={executor_python}"]),
        NATIVE_ENV: _foreign_wheel(tmp_path)})
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
    decoder = _assert_same_output(output, local_output, warnings=(
        json.loads(storage.read_bytes(f"{output}/_manifest.json"))["warnings"][-1],))
    # what was shipped does not load on the executors, and they have no copy of their own:
    # the Python codecs decoded, and the manifest, the summary and the task log say why
    assert decoder["expected"] == "native" and decoder["path"] == "python", decoder
    assert {g["path"] for g in decoder["executors"]} == {"python"}
    assert sum(g["python_records"] for g in decoder["executors"]) == outputs.manifest(output)["counts"]["records"]
    for group in decoder["executors"]:
        assert group["reason"].startswith("the compiled decoder cdc_replay_native does not load on this executor "
                                          "(Python 3."), group
        assert "the copy shipped with the job does not load here (" in group["reason"]
        assert "; no installed copy (" in group["reason"]
    warning = "decode tasks ran the Python codec instead of the compiled decoder"
    assert warning in outputs.manifest(output)["warnings"][-1]
    assert re.search(rf"WARNING .*{warning}", text), text[-5000:]
    assert "compiled decoders shipped to the executors from " in text
    run_id = json.loads(storage.read_bytes(f"{output}/_manifest.json"))["run_id"]
    assert re.fullmatch(r"cdc_replay_manual\..+", run_id)
    _assert_ran_on_both_workers(cluster, f"cdc-replay {run_id}")
