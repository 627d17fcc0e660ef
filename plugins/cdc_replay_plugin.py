"""The cdc-replay plugin for a plugins folder that mounts this repository's `plugins/` without
the package installed (docker-compose.yaml). An installed cdc-replay registers the plugin
through its `airflow.plugins` entry point; then this file defines nothing, so Airflow does not
load it twice (a second registration is reported as a plugin import error)."""

from importlib.metadata import entry_points

if not any(ep.value == "cdc_replay_airflow.plugin:CdcReplayPlugin" for ep in entry_points(group="airflow.plugins")):
    from cdc_replay_airflow.plugin import CdcReplayPlugin  # noqa: F401
