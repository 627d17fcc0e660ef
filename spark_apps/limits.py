"""Limits on one message: columns per row image and rows per message (docs/reliability.md
"Limits"). The byte limits (line length, decompression ratio) are storage's, where the bytes
are read; the values of all four travel to the tasks in `storage.ReadSettings`.

A message beyond a limit becomes one quarantine row (stage `limit`, naming the object, line,
topic/partition/offset, protocol, the count and the option) instead of its events, so no
later stage holds a million columns or rows of one message. Two guards:

* before the decode, `big_value_bytes()`: a value longer than `BIG_VALUE` bytes (or than 64 bytes
  per allowed column) is not given to the compiled decoder (whose cost grows faster than the
  column count) but to the Python codec, after `message_problem` has counted a JSON message's
  rows and columns from its parsed structure (one orjson parse, no decode);
* after the decode, `within_limits(batch)`: columnar, on the decoded Arrow batch (the largest
  `event_index`, the longest image): a batch whose maxima are within the limits, the usual
  case, passes untouched; only a batch holding an offender is looked at row by row.
"""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from . import storage
from .layouts.base import quarantine_row

STAGE = "limit"
BIG_VALUE = 256 << 10  # bytes: a value above this (and above 64 bytes a column) goes to the Python codec


def big_value_bytes() -> int:
    """Values longer than this are left by the compiled decoder to the Python path (and its count)."""
    return max(BIG_VALUE, 64 * storage.settings().max_columns)


def _reason(what: str, count: int, limit: int, option: str, protocol: str) -> str:
    return (f"{protocol}: {what} {count:,}, over the limit of {limit:,} ({option}); the whole message is "
            "quarantined, its raw value not copied here (find it by its coordinates)")


def message_problem(value: bytes | None, protocol: str) -> str | None:
    """A JSON message (Canal / TiCDC canal-json shape: `data`, `old` lists of row objects)
    over the rows or columns limit: the reason; None otherwise or when it is not that shape
    (the check after the decode covers every protocol)."""
    if value is None or not value[:1] == b"{":
        return None
    limits = storage.settings()
    # each column of a row image costs at least one `:` and each row one `{`: most messages
    # are settled by two byte counts, without parsing
    if value.count(b":") <= limits.max_columns and value.count(b"{") <= limits.max_rows:
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None  # the codec says what is wrong with it
    if not isinstance(doc, dict):
        return None
    rows = 0
    for name in ("data", "old"):
        images = doc.get(name)
        if not isinstance(images, list):
            continue
        rows = max(rows, len(images))
        widest = max((len(r) for r in images if isinstance(r, dict)), default=0)
        if widest > limits.max_columns:
            return _reason("columns in a row image", widest, limits.max_columns, "--max-columns", protocol)
    if rows > limits.max_rows:
        return _reason("rows in the message", rows, limits.max_rows, "--max-rows", protocol)
    return None


def _image_length(batch: pa.RecordBatch, name: str) -> pa.Array:
    return pc.fill_null(pc.list_value_length(batch.column(name)), 0)


def within_limits(batch: pa.RecordBatch, protocol: str) -> pa.RecordBatch:
    """`batch` with every message over a limit replaced by one quarantine row (in its place)."""
    if batch.num_rows == 0:
        return batch
    limits = storage.settings()
    rows = batch.column("event_index")
    widest = pc.max_element_wise(_image_length(batch, "after"), _image_length(batch, "before"))
    over_rows = (pc.max(rows).as_py() or 0) >= limits.max_rows
    over_columns = (pc.max(widest).as_py() or 0) > limits.max_columns
    if not over_rows and not over_columns:
        return batch
    # the rare case: which messages, row by row (a message's events are adjacent in a batch)
    names = batch.schema.names
    cols = {n: batch.column(n).to_pylist() for n in ("object", "line", "topic", "partition", "offset",
                                                     "record_timestamp")}
    index, width = rows.to_pylist(), widest.to_pylist()

    def message(i):
        return tuple(cols[n][i] for n in ("object", "line", "topic", "partition", "offset"))

    worst: dict[tuple, list[int]] = {}  # message -> [events, widest image]
    for i in range(batch.num_rows):
        w = worst.setdefault(message(i), [0, 0])
        w[0], w[1] = max(w[0], index[i] + 1), max(w[1], width[i])
    bad = {m for m, (n, w) in worst.items() if n > limits.max_rows or w > limits.max_columns}
    if not bad:
        return batch
    keep, out, done = [], [], set()
    for i in range(batch.num_rows):
        m = message(i)
        if m not in bad:
            keep.append(i)
            continue
        if m in done:
            continue
        done.add(m)
        if keep:
            out.append(batch.take(pa.array(keep, pa.int64())))
            keep = []
        n, w = worst[m]
        reason = (_reason("columns in a row image", w, limits.max_columns, "--max-columns", protocol)
                  if w > limits.max_columns else
                  _reason("rows in the message", n, limits.max_rows, "--max-rows", protocol))
        row = quarantine_row(cols["object"][i], cols["line"][i], STAGE, reason,
                             coordinates={"topic": cols["topic"][i], "partition": cols["partition"][i],
                                          "offset": cols["offset"][i], "record_timestamp": cols["record_timestamp"][i]},
                             details={"rows": n, "columns": w})
        out.append(pa.RecordBatch.from_pylist([row], schema=batch.schema))
    if keep:
        out.append(batch.take(pa.array(keep, pa.int64())))
    table = pa.Table.from_batches(out, schema=batch.schema).combine_chunks()
    assert names == table.schema.names
    return table.to_batches()[0] if table.num_rows else batch.slice(0, 0)
