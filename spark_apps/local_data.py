"""Small DataFrames of rows the driver holds (the archive objects to read, the schema
history's intervals, ...), built in the JVM from Arrow batches.

`spark.createDataFrame(list)` and `sc.parallelize(list).toDF()` make a Python RDD: every query
that reads them runs their rows through a plain Python worker, forked from a Python daemon of
its own (Spark keys daemons by their environment, and the Arrow functions' workers have
another), so a run started two daemons and four workers where two workers do the work. A
`pyarrow.Table` goes to the JVM as Arrow record batches and is read there alone: a local
relation in the plan (no job to broadcast it either), or for `slices` an RDD with one partition
per batch (docs/engine.md "Small runs").
"""


from __future__ import annotations

# below this many bytes of Arrow data, Spark makes a local relation of the batches (its own
# partitioning, contiguous row ranges); 0 for the duration of one createDataFrame keeps ours
LOCAL_RELATION_THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"


def local_frame(spark, rows, schema: str, slices: list[list[int]] | None = None):
    """A DataFrame of `rows` (tuples in the order of `schema`'s fields; a struct value may be a
    tuple too): a local relation, or with `slices` (lists of row indexes) one partition per
    slice, in this order."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from . import spark_compat

    struct = spark_compat.ddl_type(schema)
    rows = list(rows)
    if not spark_compat.creates_from_arrow():  # Spark 3.5
        return spark_compat.frame_from_rows(spark, rows, struct, slices)
    arrow_schema = to_arrow_schema(struct)
    groups = [list(range(len(rows)))] if slices is None else slices
    columns = list(zip(*rows)) if rows else [()] * len(arrow_schema)
    batches = [pa.RecordBatch.from_arrays([pa.array([column[i] for i in group], type=field.type)
                                           for column, field in zip(columns, arrow_schema)], schema=arrow_schema)
               for group in groups if group]
    if not batches:  # no rows: one empty batch (a table of no batches has columns of no chunks)
        batches = [pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in arrow_schema], schema=arrow_schema)]
    table = pa.Table.from_batches(batches, schema=arrow_schema)
    if slices is None:
        return spark.createDataFrame(table, struct)
    given = spark.conf.get(LOCAL_RELATION_THRESHOLD, None)
    spark.conf.set(LOCAL_RELATION_THRESHOLD, "0")
    try:
        return spark.createDataFrame(table, struct)
    finally:
        if given is None:
            spark.conf.unset(LOCAL_RELATION_THRESHOLD)
        else:
            spark.conf.set(LOCAL_RELATION_THRESHOLD, given)


def balanced_slices(sizes: list[int], count: int) -> list[list[int]]:
    """Indexes of `sizes` in `count` slices of about equal total size (largest first, each to
    the lightest slice so far), the heaviest slice first, each slice largest first."""
    import heapq

    slices: list[list[int]] = [[] for _ in range(max(1, min(count, len(sizes))))]
    lightest = [(0, s) for s in range(len(slices))]  # (total size, slice)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, s = heapq.heappop(lightest)
        slices[s].append(i)
        heapq.heappush(lightest, (total + sizes[i], s))
    totals = dict((s, total) for total, s in lightest)
    return [slices[s] for s in sorted(range(len(slices)), key=lambda s: (-totals[s], s)) if slices[s]]
