"""What every layout shares: the plan it makes on the driver and the rows it may yield itself."""

from __future__ import annotations

import dataclasses

import orjson

from cdc_codecs.events import Kind, new_event

from ..schema import QUARANTINE_KIND
from cdc_codecs.tso import physical_ms


class LayoutError(ValueError):
    """The source cannot be read with the layout; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One unit of work for a Spark task: an object and how to read it (JSON parameters,
    always with "layout")."""

    uri: str
    size: int
    params: str


@dataclasses.dataclass(frozen=True)
class Plan:
    layout: str
    items: tuple[Item, ...]
    found: str  # what was found, one line for the log
    not_visible: tuple[str, ...] = ()  # objects deliberately not read (e.g. beyond an index file)
    schema_uri: str | None = None  # starting schemas the layout carries (used when --schema is not given)
    info: dict = dataclasses.field(default_factory=dict)  # the manifest's `layout` section
    # offsets numbered per object (line numbers: they jump from one object to the next), so a
    # hole is an object the layout knows is missing (`holes`), not a jump between offsets
    per_file_offsets: bool = False
    holes: tuple[dict, ...] = ()  # {topic, partition, from, to, object}: where a missing object's records would be
    # {topic: [commit ts, ...evidence]}: the ts after which the layout's own files prove the topic
    # holds every change (the storage sink's table versions), for a base export's gap check
    complete_after: dict = dataclasses.field(default_factory=dict)

    @property
    def objects(self) -> int:
        return len(self.items)

    def manifest(self) -> dict:
        return {"layout": self.layout, "found": self.found, "objects": len(self.items),
                "not_visible": len(self.not_visible), "not_visible_objects": list(self.not_visible[:100]),
                **self.info}


def item(uri: str, size: int, layout: str, **params) -> Item:
    return Item(uri, size, orjson.dumps({"layout": layout, **params}).decode())


def quarantine_row(uri, line_no, stage, reason, record=None, raw_line=None,
                   coordinates: dict | None = None, details: dict | None = None) -> dict:
    """A DECODED_ARROW_SCHEMA row for something that could not be read or decoded: the Kafka
    coordinates of its record (or those a damaged line still carries), `details` in extras."""
    row = {
        "kind": QUARANTINE_KIND, "object": uri, "line": line_no, "event_index": 0,
        "error": reason, "error_stage": stage, "raw_line": raw_line,
        "extras": {k: str(v) for k, v in (details or {}).items() if v is not None} or None,
    }
    if record is not None:
        row.update(topic=record.topic, partition=record.partition, offset=record.offset,
                   record_timestamp=record.timestamp, raw_key=record.key, raw_value=record.value)
    elif coordinates:
        row.update(coordinates)
    return row


def long_line_row(uri: str, line_no: int, line, coordinates: dict | None = None) -> dict:
    """The quarantine row of a line over --max-line-bytes (a storage.LongLine: its head only;
    the Kafka coordinates when its head still carries them)."""
    from .. import storage

    limit = storage.settings().max_line_bytes
    coordinates = dict(coordinates or {})
    if not coordinates and line.startswith(b'{"topic"'):  # a Kafka-record line: its coordinates come first
        import re

        found = re.match(rb'\{"topic":"((?:[^"\\]|\\.)*)","partition":(\d+),"offset":(\d+)', bytes(line[:4096]))
        if found:
            try:
                coordinates = {"topic": orjson.loads(b'"' + found.group(1) + b'"'),
                               "partition": int(found.group(2)), "offset": int(found.group(3))}
            except orjson.JSONDecodeError:
                coordinates = {}
    return quarantine_row(uri, line_no, "limit", f"line {line_no} is {line.length:,} bytes, over the limit of "
                          f"{limit:,} bytes per line (--max-line-bytes); its first {len(line):,} bytes are kept",
                          raw_line=bytes(line), coordinates=coordinates,
                          details={"line_bytes": line.length, "limit": limit})


def watermark_row(uri: str, topic: str, partition: int, watermark_ts: int) -> dict:
    """A watermark the layout itself carries (not a message, so no offset: it is no record and
    makes no hole): everything of `topic`/`partition` at or below `watermark_ts` is in the archive."""
    row = new_event(Kind.WATERMARK, watermark_ts=watermark_ts)
    row.update(topic=topic, partition=partition, offset=None, object=uri, line=0, event_index=0)
    return row


def ddl_row(uri: str, topic: str, database: str, table: str, commit_ts: int, query: str) -> dict:
    """A DDL the layout itself records (a storage-sink schema file's Query at its version; no
    offset, like a watermark_row)."""
    from cdc_codecs.ddl_types import classify

    row = new_event(Kind.DDL, commit_ts=commit_ts, execute_ts_ms=physical_ms(commit_ts), database=database, table=table,
                    ddl_query=query, ddl_type=classify(query))
    row.update(topic=topic, partition=0, offset=None, object=uri, line=0, event_index=0)
    return row
