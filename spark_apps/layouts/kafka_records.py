"""`kafka-records`: our own archive, one Kafka record per JSON line (cdc_codecs.archive), in
objects `*.jsonl`, compressed by extension (.gz, .zst, .lz4, .snappy)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from cdc_codecs.archive import ArchiveLineError, is_archive_object, parse_line

from .. import storage
from .base import LayoutError, Plan, item, long_line_row, quarantine_row

NAME = "kafka-records"


def matches(relatives: list[str]) -> int:
    return sum(1 for rel in relatives if is_archive_object(rel))


def plan(source: str, objects: list, options: dict, protocol: str | None = None,
         protocol_options: dict | None = None) -> Plan:
    if options:
        raise LayoutError(f"--layout-option is not used by {NAME}: {', '.join(options)}")
    items = tuple(item(o.uri, o.size, NAME) for o, rel in objects if is_archive_object(rel))
    return Plan(NAME, items, f"{len(items)} Kafka-record objects")


def read(uri: str, params: dict) -> Iterator:
    for line_no, line in enumerate(storage.iter_lines(uri), 1):
        if not line.strip():
            continue
        entry = read_line(uri, line_no, line)
        yield entry if isinstance(entry, dict) else (entry, line_no)


def read_line(uri: str, line_no: int, line: bytes):
    """The record of one non-blank line, or its quarantine row (also for the compiled line
    reader's leftovers, spark_apps.archive_io)."""
    if isinstance(line, storage.LongLine):
        return long_line_row(uri, line_no, line)
    try:
        return parse_line(line, uri)
    except ArchiveLineError as e:
        return quarantine_row(uri, line_no, "archive", f"archive line {line_no}: {e}", raw_line=line,
                              coordinates=line_coordinates(line))


def line_coordinates(line: bytes) -> dict:
    """Topic, partition and offset of a line that is not a valid record, where it still
    carries them (e.g. a value that is not base64), so the quarantine keeps its place."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(doc, dict):
        return {}
    found = {}
    if isinstance(doc.get("topic"), str):
        found["topic"] = doc["topic"]
    for name, limit in (("partition", 1 << 31), ("offset", 1 << 63), ("timestamp", 1 << 63)):
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit:
            found["record_timestamp" if name == "timestamp" else name] = value
    return found
