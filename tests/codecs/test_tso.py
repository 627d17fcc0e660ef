"""The TSO layout (cdc_codecs/tso.py) against TiDB's own definition: physical milliseconds in
the high bits, an 18-bit logical counter in the low bits (pingcap/tidb oracle.ComposeTS)."""

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_codecs.tso import compose, from_datetime, physical_ms, to_datetime


def test_a_tso_taken_from_tidb_reads_as_its_wall_clock_time():
    # the high bits are milliseconds since the epoch: 400000000000000000 is 2018-05-09 15:15:06.250 UTC
    ts = 400000000000000000
    assert physical_ms(ts) == ts // 2**18
    assert to_datetime(ts) == dt.datetime(2018, 5, 9, 15, 15, 6, 250000, tzinfo=dt.timezone.utc)


@given(st.integers(0, 2**45), st.integers(0, 2**18 - 1))
def test_compose_and_physical_ms_round_trip(ms, logical):
    ts = compose(ms, logical)
    assert physical_ms(ts) == ms and ts & (2**18 - 1) == logical and ts == ms * 2**18 + logical


def test_a_moment_becomes_the_first_tso_of_its_millisecond():
    moment = dt.datetime(2026, 1, 1, 0, 0, 3, 250000, tzinfo=dt.timezone.utc)
    assert from_datetime(moment) == int(moment.timestamp() * 1000) * 2**18
    assert to_datetime(from_datetime(moment)) == moment
    with pytest.raises(ValueError, match="time zone"):
        from_datetime(moment.replace(tzinfo=None))
