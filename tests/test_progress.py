"""Progress lines: records decoded and their rate come from an accumulator the decode tasks add
to; the time left from each stage's task rate."""

from __future__ import annotations

import pytest

from spark_apps.progress import counting, decoded_rate, eta


@pytest.mark.spark
def test_decode_tasks_count_records_not_events(spark):
    counter = spark.sparkContext.accumulator(0)

    def events(batches):  # three records: the second has two events, the third is a quarantine row
        for batch in batches:
            yield batch

    df = spark.createDataFrame([(0,), (0,), (1,), (0,)], "event_index int").repartition(2)
    assert df.mapInArrow(counting(events, counter), df.schema).count() == 4
    assert counter.value == 3


def test_time_left_from_the_task_rate():
    assert eta(0, 10, 5.0) == "" and eta(10, 10, 5.0) == ""
    assert eta(5, 10, 10.0) == ", 0.5 tasks/s, about 10 s left"
    assert eta(1, 100, 60.0) == ", 1.0 tasks/min, about 99 min left"


def test_the_records_rate_is_over_the_last_interval_not_since_the_start():
    """Issue 31 point 6: the rate of the records decoded since the previous line; once the decode
    is over (the later stages) the count stays and no rate falls towards zero."""
    assert decoded_rate(30_000, 100.0, 10_000, 110.0) == "30,000 records decoded (2,000 records/s over the last 10 s)"
    assert decoded_rate(30_000, 110.0, 30_000, 120.0) == "30,000 records decoded"
