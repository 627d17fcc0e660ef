"""`transforms.infer_commit_ts` (issue 33 point 3): the tombstones' inferred commit ts from a
narrow window joined back to the events gives, for every event, exactly what the former
formulation (two windows over the whole events, kept here as the reference) gave: random
partitions with tombstones, DDL, watermarks, quarantined records, copies of records (ties on
offset and event index), partitions of tombstones only, a base export's TSO."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import Window
from pyspark.sql import functions as F

from spark_apps import transforms as T
from spark_apps.contract import Kind
from spark_apps.schema import QUARANTINE_KIND

pytestmark = pytest.mark.spark

SCHEMA = ("topic string, partition int, offset bigint, event_index int, object string, line bigint, kind string, "
          "commit_ts bigint, watermark_ts bigint, identity binary, payload string")
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True,
                phases=(Phase.explicit, Phase.generate))


def reference(events, export_tso):
    """The former `infer_commit_ts`: two windows per source partition over the whole events."""
    order = Window.partitionBy("topic", "partition").orderBy("offset", "event_index")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    reverse = Window.partitionBy("topic", "partition").orderBy(F.col("offset").desc(), F.col("event_index").desc())
    after = reverse.rowsBetween(Window.unboundedPreceding, -1)
    is_row, is_ddl = F.col("kind") == Kind.ROW, F.col("kind") == Kind.DDL
    lower = F.greatest(
        F.max(F.when(is_row, F.col("commit_ts"))).over(before),
        F.max(F.when(is_ddl, F.col("commit_ts") + 1)).over(before),
        F.max("watermark_ts").over(before) + 1,
    )
    upper = F.least(F.min(F.when(is_row | is_ddl, F.col("commit_ts"))).over(after),
                    F.min("watermark_ts").over(after))
    inferred = F.coalesce(lower, upper)
    if export_tso is not None:
        inferred = F.when((inferred <= F.lit(export_tso)) & (upper.isNull() | (upper > F.lit(export_tso))),
                          F.lit(export_tso + 1)).otherwise(inferred)
    return events.withColumn("inferred_ts", F.when(is_row & F.col("commit_ts").isNull(), inferred))


TS = st.integers(0, 30)
EVENT = st.one_of(
    st.tuples(st.just(Kind.ROW), TS, st.none()),        # a change with its commit ts
    st.tuples(st.just(Kind.ROW), st.none(), st.none()),  # a tombstone
    st.tuples(st.just(Kind.DDL), TS, st.none()),
    st.tuples(st.just(Kind.WATERMARK), st.none(), TS),
    st.tuples(st.just(QUARANTINE_KIND), st.none(), st.none()),
)
# a record: its offset step (0: nothing, > 0 a gap), its events, how many more copies it has
RECORD = st.tuples(st.integers(1, 3), st.lists(EVENT, min_size=1, max_size=3), st.integers(0, 2))
PARTITION = st.lists(RECORD, max_size=12)


def rows_of(partitions):
    """The events of `partitions` (topic `t<i // 2>`, partition `i % 2`): copies of a record in
    other objects, listed after all records so that they tie with their original by place only."""
    rows, copies = [], []
    for i, records in enumerate(partitions):
        offset = 0
        for step, events, more in records:
            offset += step
            for index, (kind, commit_ts, watermark_ts) in enumerate(events):
                payload = f"{i}/{offset}/{index}"
                for copy in range(more + 1):
                    (copies if copy else rows).append((
                        f"t{i // 2}", i % 2, offset, index, f"o{copy}", offset * 10 + copy, kind, commit_ts,
                        watermark_ts, payload.encode().ljust(16, b"."), payload))
    return rows + copies


@settings(max_examples=12, **SETTINGS)
@given(st.lists(PARTITION, min_size=1, max_size=6), st.one_of(st.none(), TS), st.booleans())
def test_the_narrow_window_infers_what_the_whole_events_window_inferred(spark, partitions, export_tso, broadcast):
    events = spark.createDataFrame(rows_of(partitions), SCHEMA).repartition(3)
    got = T.infer_commit_ts(events, True, export_tso, broadcast=broadcast)
    assert got.columns == [*events.columns, "inferred_ts"]
    got_rows = sorted(tuple(r) for r in got.collect())
    expected = sorted(tuple(r) for r in reference(events, export_tso).collect())
    assert len(got_rows) == len(expected)  # the join adds no row
    # every event as it was, its inferred commit ts as the reference's; the identity of a
    # tombstone given a ts extended by it, every other event's as the decode task gave it
    identity = SCHEMA.split(", ").index("identity binary")
    assert [r[:identity] + r[identity + 1:] for r in got_rows] == [r[:identity] + r[identity + 1:] for r in expected]
    for g, e in zip(got_rows, expected):
        assert g[identity] == (e[identity] if e[-1] is None else e[identity] + str(e[-1]).encode())


def test_copies_of_a_tombstone_share_one_identity_that_differs_from_another_ts(spark):
    """Copies of one tombstone (overlapping objects) stay one change for the duplicate check;
    the same DELETE image re-sent later in the partition, at another inferred ts, is another."""
    tomb = (Kind.ROW, None, None)
    events = spark.createDataFrame(rows_of([[(1, [(Kind.ROW, 5, None)], 0), (1, [tomb], 1),
                                             (1, [(Kind.ROW, 7, None)], 0), (1, [tomb], 0)]]), SCHEMA)
    events = events.withColumn("identity", F.when(F.col("commit_ts").isNull(), F.lit(b"x" * 16))
                               .otherwise(F.col("identity")))
    got = T.infer_commit_ts(events, True).where(F.col("commit_ts").isNull()).collect()
    assert sorted((r.offset, r.object, r.inferred_ts, bytes(r.identity)) for r in got) == [
        (2, "o0", 5, b"x" * 16 + b"5"), (2, "o1", 5, b"x" * 16 + b"5"), (4, "o0", 7, b"x" * 16 + b"7")]
