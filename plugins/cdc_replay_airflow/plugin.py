"""The cdc-replay Airflow plugin: the monitoring page in the Airflow UI.

Airflow finds it through the `airflow.plugins` entry point of the installed package
(`pip install cdc-replay`), or through `plugins/cdc_replay_plugin.py` in a plugins folder.

It registers the FastAPI app (mounted by the API server at /cdc-replay, every route requiring
the UI's authenticated user) and two external views that show it inside the UI: "CDC replay" in
the Browse menu (/plugin/cdc-replay) and a "CDC replay" tab on every DAG run, scoped to that run.
Hooks and operators are NOT registered here: they are plain modules imported by name
(cdc_replay_airflow.hooks.*, cdc_replay_airflow.operators.*), as Airflow recommends, and listed
in the provider information (cdc_replay_airflow.provider).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/cdc-replay"


def _app():
    from cdc_replay_airflow.ui.app import app

    return app


class CdcReplayPlugin(AirflowPlugin):
    name = "cdc_replay"
    fastapi_apps = [{"app": _app(), "url_prefix": URL_PREFIX, "name": "CDC replay monitoring"}]
    external_views = [
        {"name": "CDC replay", "href": f"{URL_PREFIX}/", "url_route": "cdc-replay", "destination": "nav",
         "category": "browse"},
        {"name": "CDC replay", "href": f"{URL_PREFIX}/?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
         "url_route": "cdc-replay-run", "destination": "dag_run"},
    ]
