"""The canonical change event: the one contract between every codec and the Spark apps.

Every codec decodes Kafka records into events of EVENT_SCHEMA and encodes events of that schema.
In Python an event is a plain dict with exactly the keys of EVENT_SCHEMA (see `new_event`), so
a list of events becomes an Arrow batch with `pa.RecordBatch.from_pylist(events, EVENT_SCHEMA)`.
docs/canonical-events.md explains every field; the rules that matter most:

* A column value is `bytes` (None = SQL NULL) holding the value's *canonical text*, which is
  the text TiCDC's canal-json writes (integers in decimal, unsigned up to 2^64-1, DECIMAL with
  its scale, temporal values as written, BIT as an unsigned decimal, ENUM as its 1-based index,
  SET as its bitmask, JSON as TiDB prints it), except binary-charset types (BINARY, VARBINARY,
  *BLOB), whose value is the raw bytes. Bytes keep every value lossless whatever its type.
* `label` carries ENUM/SET labels ("a" / "a,b") when the type parameters are known.
* `flags` uses TiCDC's column flag bits (ColumnFlag below), which every protocol can express.
"""

from __future__ import annotations

import enum
from typing import Any

import pyarrow as pa


class ColumnFlag(enum.IntFlag):
    """TiCDC's column flag bits (the `f` of the open protocol)."""

    BINARY = 1 << 0
    HANDLE_KEY = 1 << 1
    GENERATED = 1 << 2
    PRIMARY_KEY = 1 << 3
    UNIQUE_KEY = 1 << 4
    MULTIPLE_KEY = 1 << 5
    NULLABLE = 1 << 6
    UNSIGNED = 1 << 7


class Kind:
    ROW = "row"
    DDL = "ddl"
    WATERMARK = "watermark"


class Op:
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


COLUMN_TYPE = pa.struct(
    [
        pa.field("name", pa.string(), nullable=False),
        # MySQL type as the source wrote it, lower case, with parameters when known:
        # "int", "int unsigned", "int(10) unsigned", "decimal(10,4)", "enum('a','b')".
        pa.field("mysql_type", pa.string()),
        pa.field("flags", pa.int32(), nullable=False),
        pa.field("value", pa.binary()),  # canonical bytes; null = SQL NULL
        pa.field("label", pa.string()),  # ENUM/SET labels when known
    ]
)

IMAGE_TYPE = pa.list_(pa.field("item", COLUMN_TYPE, nullable=False))

EVENT_FIELDS = [
    pa.field("kind", pa.string(), nullable=False),  # Kind
    pa.field("op", pa.string()),  # Op, for kind=row
    # TiDB TSO of the transaction; null where the protocol carries none (Canal, OceanBase, ...)
    pa.field("commit_ts", pa.int64()),
    # Protocol ordering position where there is no commit ts, compared element by element
    # as integers: Canal (binlog file sequence, offset, row index), OceanBase (id).
    pa.field("position", pa.list_(pa.field("item", pa.int64(), nullable=False))),
    # Event (execution/commit) time in epoch milliseconds as the protocol states it (Canal `es`).
    pa.field("execute_ts_ms", pa.int64()),
    pa.field("database", pa.string()),
    pa.field("table", pa.string()),
    # Primary-key / handle-key column names; null when the protocol does not say.
    pa.field("key_columns", pa.list_(pa.field("item", pa.string(), nullable=False))),
    pa.field("before", IMAGE_TYPE),  # UPDATE: full old row; DELETE: the deleted row
    pa.field("after", IMAGE_TYPE),  # INSERT / UPDATE: full new row
    pa.field("ddl_query", pa.string()),
    pa.field("ddl_type", pa.string()),  # TiDB action name: "create table", "add column", ...
    pa.field("watermark_ts", pa.int64()),  # kind=watermark: everything <= it was sent
    pa.field("tx_id", pa.string()),  # transaction id / GTID when the protocol carries one
    # Protocol details kept so a re-encode in the same protocol is byte-exact (e.g. Canal `ts`).
    pa.field("extras", pa.map_(pa.string(), pa.string())),
    # Where the event came from.
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("record_timestamp", pa.int64()),
    pa.field("object", pa.string()),
    pa.field("event_index", pa.int32(), nullable=False),  # index of the event in its record
]

EVENT_SCHEMA = pa.schema(EVENT_FIELDS)
EVENT_FIELD_NAMES = tuple(f.name for f in EVENT_FIELDS)

# Fields that describe the change itself (not where it was read from): what a round trip
# through any codec must preserve.
SOURCE_FIELDS = ("topic", "partition", "offset", "record_timestamp", "object", "event_index")
CONTENT_FIELDS = tuple(n for n in EVENT_FIELD_NAMES if n not in SOURCE_FIELDS)


def new_event(kind: str, **fields: Any) -> dict:
    """An event dict with every EVENT_SCHEMA key (missing ones None, event_index 0)."""
    event = dict.fromkeys(EVENT_FIELD_NAMES)
    event["kind"] = kind
    event["event_index"] = 0
    unknown = set(fields) - set(EVENT_FIELD_NAMES)
    if unknown:
        raise TypeError(f"unknown event fields: {sorted(unknown)}")
    event.update(fields)
    return event


def column(
    name: str,
    value: bytes | str | None,
    mysql_type: str | None = None,
    flags: int = 0,
    label: str | None = None,
) -> dict:
    """A column dict; a str value is stored as its UTF-8 bytes."""
    if isinstance(value, str):
        value = value.encode()
    return {"name": name, "mysql_type": mysql_type, "flags": int(flags), "value": value, "label": label}

