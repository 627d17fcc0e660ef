"""Spark-side schemas, all derived from the canonical Arrow schema (cdc_codecs.events)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from cdc_codecs.events import EVENT_FIELDS, EVENT_SCHEMA

from .contract import Kind

# Decoded rows: the canonical event plus, for records that could not be read or decoded, the
# reason and the raw record (kind = "quarantine" then; every event field but the source is null).
QUARANTINE_KIND = Kind.QUARANTINE
DECODED_ARROW_SCHEMA = pa.schema(
    EVENT_FIELDS
    + [
        pa.field("line", pa.int64()),  # 1-based line of the record in its archive object
        pa.field("error", pa.string()),
        pa.field("error_stage", pa.string()),  # "archive" (the line) or "decode" (the value)
        pa.field("raw_key", pa.binary()),
        pa.field("raw_value", pa.binary()),
        pa.field("raw_line", pa.binary()),
    ]
)
DECODED_FIELD_NAMES = tuple(DECODED_ARROW_SCHEMA.names)

EVENT_STRUCT = from_arrow_schema(EVENT_SCHEMA)
DECODED_STRUCT = from_arrow_schema(DECODED_ARROW_SCHEMA)

# What the object writers return to the driver: one row per written object.
WRITTEN_ARROW_SCHEMA = pa.schema(
    [
        pa.field("uri", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("first_offset", pa.int64()),
        pa.field("last_offset", pa.int64()),
        pa.field("records", pa.int64()),
        pa.field("events", pa.int64()),  # events encoded into the object's records
        pa.field("rows", pa.int64()),  # of which row events
        pa.field("bytes", pa.int64()),
    ]
)
WRITTEN_STRUCT = from_arrow_schema(WRITTEN_ARROW_SCHEMA)


def events_from_batch(batch: pa.RecordBatch) -> list[dict]:
    """Arrow rows back to event dicts (maps come back as pairs: make them dicts again); every
    writer and the partitioners read their events so."""
    rows = batch.to_pylist()
    for row in rows:
        extras = row.get("extras")
        if extras is not None and not isinstance(extras, dict):
            row["extras"] = dict(extras)
    return rows
