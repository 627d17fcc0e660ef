"""The few PySpark APIs the app uses that Spark 4 added, with their Spark 3.5 equivalents, so
the app runs on Spark 3.5.x (EMR 7, Dataproc 2.2) and 4.x alike (docs/cluster.md "Spark
versions"; tests/test_spark_versions.py runs a replay on another pyspark).

* `DataType.fromDDL` (4.0): on 3.5, `_parse_datatype_string`, which parses the same DDL
  through the active session's JVM (a session exists wherever a DataFrame is built).
* `DataFrame.toArrow` (4.0): on 3.5, `_collect_as_arrow`, the Arrow batches the 4.x method
  assembles into a table (the same path `toPandas` takes with Arrow on 3.5).
* `functions.array_position(col, Column)` (a Column as the value: 4.0): on 3.5 `install()`
  (called when the app builds its session) makes the Python function pass a Column on to the
  JVM function, which takes one on 3.5 too.
* `SparkSession.createDataFrame(pyarrow.Table)` (4.0): on 3.5 the driver's small frames
  (spark_apps.local_data) are made from the rows themselves, one partition per slice
  (`frame_from_rows`): a Python RDD, which 4.x avoids, but the same rows in the same partitions.
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


def creates_from_arrow() -> bool:
    """Whether `SparkSession.createDataFrame` takes a pyarrow.Table (Spark 4)."""
    import pyspark

    return int(pyspark.__version__.split(".")[0]) >= 4


def frame_from_rows(spark, rows: list, struct, groups: list[list[int]] | None):
    """A DataFrame of `rows` (tuples in the order of `struct`'s fields): with `groups` (lists of
    row indexes) one partition per group, in this order."""
    if groups is None:
        return spark.createDataFrame(rows, struct)
    groups = [g for g in groups if g]
    parts = [[rows[i] for i in group] for group in groups]
    rdd = spark.sparkContext.parallelize(parts, max(1, len(parts))).flatMap(lambda part: part)
    return spark.createDataFrame(rdd, struct)


def install() -> None:
    """On Spark 3.5: the functions of pyspark.sql.functions the app calls with a Column where the
    3.5 Python function wants a literal (and its JVM function takes a Column) pass it on as 4.x
    does. Nothing on Spark 4."""
    if creates_from_arrow():
        return
    from pyspark.sql import functions as F
    from pyspark.sql.column import Column, _to_java_column

    if getattr(F.array_position, "_cdc_replay_compat", False):
        return
    original = F.array_position

    def array_position(col, value):
        if isinstance(value, Column):
            from pyspark import SparkContext

            jvm = SparkContext._active_spark_context._jvm
            return Column(jvm.org.apache.spark.sql.functions.array_position(_to_java_column(col), value._jc))
        return original(col, value)

    array_position._cdc_replay_compat = True
    F.array_position = array_position
