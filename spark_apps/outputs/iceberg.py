"""The Apache Iceberg target (`--target-format iceberg`, pyiceberg and a catalog): one table per
source table (spark_apps.outputs.lake writes and commits; spark_apps.lakehouse holds the Iceberg
commit, merge and schema evolution)."""

from __future__ import annotations

from .lake import LakeTables


class IcebergTables(LakeTables):
    format = "iceberg"
