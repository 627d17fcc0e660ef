"""
### Replay a CDC archive once (manual run)

Trigger this DAG from the form: pick the archive (an `s3://bucket/prefix` holding the Kafka
records TiCDC, Canal or OceanBase sent, one JSON line per record), its protocol and codec
options, what to emit — a point-in-time **snapshot** (one INSERT per live row) or the ordered,
deduplicated **topics** re-encoded in any protocol — and where the output goes.

| task | what it does |
|---|---|
| `check` | checks every field (the form's schema first, then protocol options against the codec, table patterns, commit ts); a bad value fails the run here, naming the field, before any work starts |
| `stage` | lists the archive objects the replay will read (boto3, Airflow connection `aws_default`) and writes their list to `<output>/_staging/airflow/staged.json` |
| `replay` | runs `spark_apps/replay.py` with spark-submit on the `spark_default` connection (local[*] unless it names a cluster) |
| `validate` | reconciles the run's `_manifest.json` (read = applied + deduplicated + pending + filtered + quarantined) and the staged objects; fails loudly when more records were quarantined than `max_bad_records` |
| `publish` | removes the staging area, records the metrics (the **CDC replay** page in the UI), and emits an asset event for the output URI (through the `cdc_replay_outputs` alias), so downstream DAGs can schedule on it |

The output prefix is replaced as a whole when a run succeeds, so re-running is safe.
Kafka: the source may be `kafka://topic1,topic2` (with starting/ending offsets) and the output
`kafka://` (emit topics, with a manifest URI); the cluster is the Airflow connection named in
`kafka_connection` (default `kafka_default`: its extra's `bootstrap.servers`, else host:port).
A rerun of a finished Kafka output produces nothing twice (docs/kafka.md).
Commit ts fields take a TiDB TSO (an integer) or an ISO-8601 time such as `2026-01-01T00:00:30Z`.
"""

from __future__ import annotations

from cdc_replay_airflow.manual import manual_replay_dag

manual_replay_dag(doc_md=__doc__)
