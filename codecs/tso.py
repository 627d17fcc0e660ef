"""TiDB timestamps (TSO): one place for their layout.

A TSO is the physical time in milliseconds since the epoch shifted left 18 bits, plus an 18-bit
logical counter (TiDB's oracle package). Canal and OceanBase have no TSO; where they need one
(ordering, a cut) it is built from their millisecond times the same way.
"""

from __future__ import annotations

import datetime as dt

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def physical_ms(ts: int) -> int:
    """The TSO's wall-clock part, milliseconds since the epoch."""
    return ts >> LOGICAL_BITS


def compose(ms: int, logical: int = 0) -> int:
    """The TSO of a millisecond time and a logical counter."""
    return (ms << LOGICAL_BITS) | logical


def to_datetime(ts: int) -> dt.datetime:
    """The UTC moment of a TSO (its logical part dropped)."""
    return dt.datetime.fromtimestamp(physical_ms(ts) / 1000, dt.timezone.utc)


def from_datetime(moment: dt.datetime) -> int:
    """The first TSO of an aware moment (logical part 0)."""
    if moment.tzinfo is None:
        raise ValueError("a time zone is required")
    return compose(int(round(moment.timestamp() * 1000)))
