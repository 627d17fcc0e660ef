"""What the codec tests share about canonical events. Moved here from the codecs in the
twenty-eighth session: the product called neither function (a decoder builds each column's
flags inline, the Spark apps build their Arrow batches from the schema directly).

`column_flags` is the expectation, not the decoder: what a Canal decoder gives a column
(the type's flags, plus the key flags for a key column); `to_record_batch` checks that
events fit the canonical Arrow schema."""

from __future__ import annotations

import pyarrow as pa

from cdc_codecs.canal_common import type_info
from cdc_codecs.events import EVENT_SCHEMA, ColumnFlag


def column_flags(type_text: str | None, is_key: bool) -> int:
    """The flags a Canal message's column decodes to: its type's (`canal_common.type_info`),
    and PRIMARY_KEY | HANDLE_KEY for a key column (Canal's isKey / pkNames)."""
    flags = type_info(type_text).flags
    return flags | int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) if is_key else flags


def to_record_batch(events: list[dict]) -> pa.RecordBatch:
    """The events as one batch of the canonical Arrow schema (raises if one does not fit)."""
    return pa.RecordBatch.from_pylist(events, schema=EVENT_SCHEMA)
