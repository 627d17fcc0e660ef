"""
### Deprecated: `cdc_replay_backfill` is now `cdc_replay_manual`

The same DAG as **cdc_replay_manual** (same form, same tasks), kept under its old id so that REST
clients and scripts that trigger `cdc_replay_backfill` keep working. The name collided with
Airflow's own *backfill* (re-running a scheduled DAG over past intervals, `airflow backfill
create`, which applies to `cdc_replay_scheduled`). Trigger `cdc_replay_manual` instead; this alias
will be removed in a later release.
"""

from __future__ import annotations

from cdc_replay_airflow.manual import DEPRECATED_DAG_ID, manual_replay_dag

manual_replay_dag(DEPRECATED_DAG_ID, doc_md=__doc__, tags=["cdc-replay", "manual", "spark", "deprecated"])
