"""The few PySpark APIs the app uses that Spark 4 added, with their Spark 3.5 equivalents, so
the app runs on Spark 3.5.x (EMR 7, Dataproc 2.2) and 4.x alike (docs/cluster.md "Spark
versions"; tests/test_spark_versions.py runs a replay on another pyspark).

* `DataType.fromDDL` (4.0): on 3.5, `_parse_datatype_string`, which parses the same DDL
  through the active session's JVM (a session exists wherever a DataFrame is built).
* `DataFrame.toArrow` (4.0): on 3.5, `_collect_as_arrow`, the Arrow batches the 4.x method
  assembles into a table (the same path `toPandas` takes with Arrow on 3.5).
"""

from __future__ import annotations


def ddl_type(ddl: str):
    """The Spark type of a DDL string ("a INT, b STRING" is a struct)."""
    from pyspark.sql.types import DataType

    from_ddl = getattr(DataType, "fromDDL", None)
    if from_ddl is not None:
        return from_ddl(ddl)
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


def collect_rows(df) -> list[dict]:
    """A DataFrame's rows on the driver as plain dicts (structs as dicts, arrays as lists),
    through Arrow."""
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is not None:
        return to_arrow().to_pylist()
    return [row for batch in df._collect_as_arrow() for row in batch.to_pylist()]
