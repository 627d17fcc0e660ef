"""Partition placement of the producers, as pure functions of an event.

Canal (alibaba/canal connector MQMessageUtils.messagePartition, flat and protobuf alike) with
`canal.mq.partitionHash` set:

* DDL (`isDdl`) goes to partition 0, and so does a statement (QUERY) entry without rows and a
  table that matches no partitionHash rule;
* a table rule (`db.table` without `:columns`) hashes the table name alone:
  `abs(table.hashCode()) % N`;
* a column rule (`db.table:id^name` or `:$pk$`) hashes every row on its own:
  `h = database.hashCode()` when `canal.mq.database.hash` is true (its default) else 0, then
  `h ^= value.hashCode()` for each key column value (a NULL counts as ""), partition
  `abs(abs(h) % N)` — Java's Math.abs and truncating `%`, so Integer.MIN_VALUE stays in range.
  The values are Canal's Java strings (binary as ISO-8859-1 characters, see canal_common).

`hashCode` is Java's String.hashCode over UTF-16 code units, in 32-bit two's complement;
written here because no kept library computes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .events import Kind, Op

_INT_MIN = -(1 << 31)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def _java_abs(value: int) -> int:
    return value if value == _INT_MIN else abs(value)  # Math.abs(Integer.MIN_VALUE) is negative


def _java_rem(value: int, divisor: int) -> int:
    remainder = abs(value) % divisor
    return -remainder if value < 0 else remainder  # Java's % truncates toward zero


def canal_partition(
    database: str | None,
    table: str | None,
    key_values: Iterable[str | None],
    partitions: int,
    hash_by_database: bool = True,
    *,
    table_hash: bool = False,
    ddl: bool = False,
) -> int:
    """Canal's partition for a row of `database.table` whose key columns hold `key_values`
    (Canal's strings; None for NULL), with `partitions` partitions.

    `hash_by_database` is canal.mq.database.hash; `table_hash` selects a partitionHash rule
    without columns (hash of the table name alone); `ddl` sends the event to partition 0."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    if ddl:
        return 0
    if table_hash:
        h = java_string_hash(table or "")
    else:
        h = java_string_hash(database or "") if hash_by_database else 0
        for value in key_values:
            h ^= java_string_hash(value or "")
    return _java_abs(_java_rem(_java_abs(h), partitions))


def _default_text(column: dict) -> str | None:
    from .canal_common import canal_text

    return canal_text(column)


def canal_event_partition(
    event: dict,
    partitions: int,
    hash_by_database: bool = True,
    *,
    key_columns: Iterable[str] | None = None,
    table_hash: bool = False,
    render: Callable[[dict], str | None] = _default_text,
) -> int:
    """canal_partition for a canonical event: DDL (and watermarks) to partition 0; a row hashes
    the values of `key_columns` (default: the event's key columns) in its after image (before
    image for DELETE), rendered as Canal renders them (`render`, default UTC TIMESTAMPs)."""
    if event["kind"] != Kind.ROW:
        return 0
    image = event["before"] if event["op"] == Op.DELETE else event["after"]
    names = set(event["key_columns"] or () if key_columns is None else key_columns)
    values = [render(c) for c in image or () if c["name"] in names]
    return canal_partition(
        event["database"], event["table"], values, partitions, hash_by_database, table_hash=table_hash
    )
