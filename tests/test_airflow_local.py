"""The local Airflow home (spark_apps.airflow_local): one airflow.cfg for every process started on
it, so a run triggered in the UI runs (scheduler and DAG processor beside the api-server) and the
tasks' tokens are accepted (one JWT secret), on loopback only."""

from __future__ import annotations

import configparser
import os

from spark_apps import airflow_local


def test_one_config_for_every_process(tmp_path):
    home = str(tmp_path / "home")
    airflow_local.write_config(home)
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(home, "airflow.cfg"))
    assert cfg["api"]["host"] == "127.0.0.1" and cfg["api"]["port"] == "8080"
    assert cfg["core"]["execution_api_server_url"] == "http://127.0.0.1:8080/execution/"
    secret, key = cfg["api_auth"]["jwt_secret"], cfg["api"]["secret_key"]
    assert len(secret) == 64 and len(key) == 64 and secret != key
    assert cfg["core"]["dags_folder"] == airflow_local.DAGS and cfg["core"]["executor"] == "LocalExecutor"
    # written again (the demo runs again): the same secrets, so running processes keep working
    airflow_local.write_config(home, port=8093)
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(home, "airflow.cfg"))
    assert cfg["api_auth"]["jwt_secret"] == secret and cfg["api"]["secret_key"] == key
    assert cfg["api"]["port"] == "8093" and cfg["core"]["execution_api_server_url"] == "http://127.0.0.1:8093/execution/"
    assert oct(os.stat(os.path.join(home, ".jwt_secret")).st_mode & 0o777) == "0o600"


def test_start_commands_name_every_component(tmp_path):
    commands = airflow_local.start_commands("/h")
    assert [c.split()[2] for c in commands] == ["api-server", "scheduler", "dag-processor", "triggerer"]
    assert all(c.startswith(f"AIRFLOW_HOME=/h {airflow_local.AIRFLOW} ") and c.endswith("2>&1 &") for c in commands)
