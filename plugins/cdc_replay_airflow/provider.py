"""Provider information for Airflow's providers manager (the `apache_airflow_provider` entry
point of the installed package): what cdc-replay adds to an Airflow installation."""

from __future__ import annotations


def get_provider_info() -> dict:
    from importlib.metadata import version

    return {
        "package-name": "cdc-replay",
        "name": "CDC replay",
        "description": "Replay archived CDC messages (TiCDC, Canal, OceanBase) with PySpark: hooks, the replay "
                       "operator, the manual replay DAG builder and the monitoring page.",
        "versions": [version("cdc-replay")],
        "integrations": [{"integration-name": "CDC replay", "external-doc-url": "https://github.com/cdc-replay",
                          "tags": ["software"]}],
        "operators": [{"integration-name": "CDC replay",
                       "python-modules": ["cdc_replay_airflow.operators.replay"]}],
        "hooks": [{"integration-name": "CDC replay",
                   "python-modules": ["cdc_replay_airflow.hooks.archive", "cdc_replay_airflow.hooks.replay"]}],
        "plugins": [{"name": "cdc_replay", "plugin-class": "cdc_replay_airflow.plugin.CdcReplayPlugin"}],
    }
