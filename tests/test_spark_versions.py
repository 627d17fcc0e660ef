"""The Spark app on another Spark version than the lock's (Spark 3.5.x: EMR 7, Dataproc 2.2;
4.0.x): one end-to-end replay of a small generated archive, a snapshot and a Delta table,
checked against the reference replayer (tests/reference.py), run by the Python of an
environment holding that pyspark and this project.

    bench/spark_versions.sh 3.5.7 4.0.1      # makes those environments and runs this file in each

Without $CDC_REPLAY_PYSPARK_PYTHON (that environment's python) the test is skipped."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive

from .reference import reference_state
from .test_lakehouse import delta_tables

PYTHON_ENV = "CDC_REPLAY_PYSPARK_PYTHON"
PYTHON = os.environ.get(PYTHON_ENV)

pytestmark = [pytest.mark.spark, pytest.mark.skipif(not PYTHON, reason=f"${PYTHON_ENV} not set (bench/spark_versions.sh)")]
TIDB = ["--protocol-option", "enable-tidb-extension=true"]


def _replay(source: str, output: str, *extra: str) -> dict:
    cli = os.path.join(os.path.dirname(PYTHON), "cdc-replay")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "CDC_REPLAY_CDS_DIR": "off"})
    result = subprocess.run([cli, "replay", "--source", source, "--protocol", "canal-json", *TIDB,
                             "--output", output, "--master", "local[2]", *extra],
                            capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    with open(os.path.join(output, "_manifest.json")) as f:
        return json.load(f)


def test_the_other_pyspark_is_what_runs():
    """The environment holds the pyspark it was made with ($CDC_REPLAY_PYSPARK_VERSION, when set)."""
    out = subprocess.run([PYTHON, "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == os.environ.get("CDC_REPLAY_PYSPARK_VERSION", out.stdout.strip())


def test_snapshot_and_delta_on_that_spark(tmp_path):
    generated = generate(transactions=150, partitions=2, seed=35, ddl_rate=0.03)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)

    snapshot = str(tmp_path / "snapshot")
    manifest = _replay(source, snapshot, "--emit", "snapshot")
    cut = int(manifest["cut"]["commit_ts"])
    expected = {k: v for k, v in reference_state(generated.events, cut).items() if v}
    assert read_snapshot(snapshot) == expected == {k: v for k, v in generated.expected.items() if v}

    delta = str(tmp_path / "delta")
    manifest = _replay(source, delta, "--emit", "snapshot", "--target-format", "delta")
    assert int(manifest["cut"]["commit_ts"]) == cut
    assert delta_tables(delta, cut) == expected
