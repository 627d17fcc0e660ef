"""The Delta Lake target (`--target-format delta`, delta-rs): one table per source table
(spark_apps.outputs.lake writes and commits; spark_apps.lakehouse holds the Delta commit and merge)."""

from __future__ import annotations

from .lake import LakeTables


class DeltaTables(LakeTables):
    format = "delta"
