"""The replay's outputs: one module per target behind one interface (`base.Target`), and the
plan that builds what they write (`plan.OutputPlan`).

    kafka_records   Kafka-record archive (gzip JSON-lines objects)    --target-format kafka
    kafka           Kafka topics (confluent-kafka, resumable)          --output kafka://...
    ticdc_storage   TiCDC cloud storage sink files                     --target-layout ticdc-storage
    parquet         Parquet datasets, snapshot and history             --target-format parquet
    delta, iceberg  lakehouse tables (lake: what they share)           --target-format delta|iceberg

Nothing here imports the replay driver (spark_apps.replay) or the readers (spark_apps.layouts);
docs/architecture.md says how to add a target.
"""

from .base import HISTORY, SNAPSHOT, TOPICS, WINDOW, OutputError, Target, TargetSpec, target_for
from .kafka import fingerprint, kafka_manifest
from .plan import OutputPlan, base_rows, table_frames

__all__ = ["HISTORY", "SNAPSHOT", "TOPICS", "WINDOW", "OutputError", "OutputPlan", "Target", "TargetSpec", "base_rows",
           "fingerprint", "kafka_manifest", "table_frames", "target_for"]
