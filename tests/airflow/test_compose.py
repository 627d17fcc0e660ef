"""docker-compose.yaml: valid for Debian's docker-compose (`config -q`; no Docker engine runs here),
with Airflow 3.3.2's four components on PostgreSQL, a Spark master and worker, MinIO, the
project's folders mounted, `spark_default` resolving (as the Spark provider resolves it) to the
Spark master, and the S3 endpoint at MinIO."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from cdc_replay_airflow.hooks.replay import spark_master

from .tools import require_tool

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE = os.path.join(REPO, "docker-compose.yaml")
MOUNTS = {"dags": "/opt/cdc-replay/dags", "plugins": "/opt/cdc-replay/plugins",
          "spark_apps": "/opt/cdc-replay/spark_apps", "codecs": "/opt/cdc-replay/cdc_codecs"}
AIRFLOW = {"airflow-api-server": "api-server", "airflow-scheduler": "scheduler",
           "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}


@pytest.fixture(scope="module")
def config():
    binary = require_tool(("docker-compose",), "docker-compose")
    check = subprocess.run([binary, "-f", COMPOSE, "config", "-q"], capture_output=True, text=True, cwd=REPO,
                           timeout=120)
    assert check.returncode == 0, check.stderr
    resolved = subprocess.run([binary, "-f", COMPOSE, "config"], capture_output=True, text=True, cwd=REPO,
                              timeout=120)
    assert resolved.returncode == 0, resolved.stderr
    return yaml.safe_load(resolved.stdout)


def _mounts(service: dict) -> dict:
    out = {}
    for volume in service.get("volumes", []):
        source, target = (volume.split(":")[:2] if isinstance(volume, str) else (volume["source"], volume["target"]))
        out[os.path.relpath(source, REPO) if source.startswith("/") else source] = target
    return out


def test_services(config):
    assert set(config["services"]) == {"postgres", "minio", "minio-init", "airflow-init", *AIRFLOW,
                                       "spark-master", "spark-worker"}
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        assert "FROM apache/airflow:3.3.2-python3.11" in f.read()
    for name, command in AIRFLOW.items():
        service = config["services"][name]
        assert service["command"] in (command, [command]), name
        assert service["image"] == "cdc-replay-airflow:3.3.2"
        assert {k: v for k, v in _mounts(service).items() if k in MOUNTS} == MOUNTS, name
        env = service["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:airflow@postgres:")
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == MOUNTS["dags"]
        assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == MOUNTS["plugins"]
        assert set(service["depends_on"]) == {"postgres", "minio-init", "airflow-init"}
    assert "airflow db migrate" in " ".join(config["services"]["airflow-init"]["command"])
    assert config["services"]["postgres"]["image"].startswith("postgres:")
    assert config["services"]["minio"]["image"].startswith("minio/minio")
    for name in ("spark-master", "spark-worker"):
        assert {k: v for k, v in _mounts(config["services"][name]).items() if k in MOUNTS} == {
            k: v for k, v in MOUNTS.items() if k in ("spark_apps", "codecs")}, name
    assert "org.apache.spark.deploy.master.Master" in " ".join(config["services"]["spark-master"]["command"])
    assert "spark://spark-master:7077" in " ".join(config["services"]["spark-worker"]["command"])


def test_spark_default_is_the_master_and_s3_is_minio(config, monkeypatch):
    env = config["services"]["airflow-scheduler"]["environment"]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark_master("spark_default") == "spark://spark-master:7077"
    aws = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    assert aws["conn_type"] == "aws" and aws["extra"]["endpoint_url"] == "http://minio:9000"
    assert aws["login"] == config["services"]["minio"]["environment"]["MINIO_ROOT_USER"]
    scheduled = json.loads(env["AIRFLOW_VAR_CDC_REPLAY_SCHEDULED"])
    from cdc_replay_airflow.request import parse_request

    parse_request({k: v for k, v in scheduled.items()})  # the scheduled DAG's configuration is valid
