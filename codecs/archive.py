"""The Kafka-record archive: how archived Kafka topics are stored, one record per JSON line.

    {"topic": str, "partition": int, "offset": int, "timestamp": int|null,
     "key": base64|null, "value": base64|null, "headers": [[name, base64], ...]}

Objects end in `.jsonl`, optionally compressed by extension (`.jsonl.gz`, `.jsonl.zst`,
`.jsonl.lz4`, `.jsonl.snappy`); writers name them
`<topic>/<partition>/<topic>+<partition>+<first offset, 20 digits>.jsonl.gz`. Readers rely on
the record fields, never on object names, and skip paths with a segment starting with `_` or
`.` (manifests, quarantine, staging), so an output prefix can itself be replayed.
"""

from __future__ import annotations

import binascii

import orjson

from .base import KafkaRecord

SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".jsonl.lz4", ".jsonl.snappy", ".jsonl.sz")


class ArchiveLineError(ValueError):
    """A line that is not a Kafka record; the reason names the field."""


def is_archive_object(path: str) -> bool:
    """True for record objects; false for hidden/underscore paths (manifest, quarantine)."""
    if not path.endswith(SUFFIXES):
        return False
    return not any(part.startswith(("_", ".")) for part in path.split("/") if part)


def object_name(topic: str, partition: int, first_offset: int) -> str:
    return f"{topic}/{partition}/{topic}+{partition}+{first_offset:020d}.jsonl.gz"


def _b64(value: bytes | None) -> str | None:
    return None if value is None else binascii.b2a_base64(value, newline=False).decode("ascii")


def _unb64(text, field: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ArchiveLineError(f"{field} is not a base64 string")
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except ValueError as e:  # binascii.Error, or text that is not ASCII (found by the line fuzzer)
        raise ArchiveLineError(f"{field} is not valid base64 ({e})") from None


def format_record(record: KafkaRecord) -> bytes:
    """One archive line (without the newline)."""
    line = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _b64(record.key),
        "value": _b64(record.value),
    }
    if record.headers:
        line["headers"] = [[name, _b64(value)] for name, value in record.headers]
    return orjson.dumps(line)


def line_former(topic: str, partition: int):
    """`format_record`'s line for records of one topic partition with no timestamp, as a
    function of (offset, key, value, headers): the same bytes, with the topic and partition
    rendered once (a writer formats a line per record; tests/test_archive.py compares them).
    Its `value_line(offset, value)` forms the line of a record with a value and nothing else;
    its `head` is the lines' start up to the offset (the compiled `value_lines` takes it)."""
    head = b'{"topic":%s,"partition":%d,"offset":' % (orjson.dumps(topic), partition)
    b2a = binascii.b2a_base64

    def line(offset: int, key: bytes | None, value: bytes | None, headers=None) -> bytes:
        return b'%s%d,"timestamp":null,"key":%s,"value":%s%s}' % (
            head, offset, b"null" if key is None else b'"%s"' % b2a(key, newline=False),
            b"null" if value is None else b'"%s"' % b2a(value, newline=False),
            b',"headers":%s' % orjson.dumps([[name, _b64(v)] for name, v in headers]) if headers else b"")

    def value_line(offset: int, value: bytes) -> bytes:
        """`line(offset, None, value)`, one call and one copy fewer (the writer's usual record)."""
        return b'%s%d,"timestamp":null,"key":null,"value":"%s"}' % (head, offset, b2a(value, newline=False))

    line.value_line, line.head = value_line, head
    return line


def parse_line(line: bytes | str, object: str | None = None) -> KafkaRecord:
    """Parse one archive line; raises ArchiveLineError naming what is wrong."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ArchiveLineError(f"line is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ArchiveLineError("line is not a JSON object")
    topic, partition, offset = doc.get("topic"), doc.get("partition"), doc.get("offset")
    if not isinstance(topic, str) or not topic:
        raise ArchiveLineError("topic is missing or not a string")
    if not _is_int(partition) or partition < 0 or partition >= 1 << 31:
        raise ArchiveLineError("partition is missing or not a non-negative integer")
    if not _is_int(offset) or offset < 0 or offset >= 1 << 63:
        raise ArchiveLineError("offset is missing or not a non-negative integer")
    timestamp = doc.get("timestamp")
    if timestamp is not None and (not _is_int(timestamp) or abs(timestamp) >= 1 << 63):
        raise ArchiveLineError("timestamp is not an integer")
    headers = ()
    raw_headers = doc.get("headers")
    if raw_headers:
        if not isinstance(raw_headers, list):
            raise ArchiveLineError("headers is not a list")
        parsed = []
        for i, item in enumerate(raw_headers):
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise ArchiveLineError(f"headers[{i}] is not [name, base64]")
            parsed.append((item[0], _unb64(item[1], f"headers[{i}]") or b""))
        headers = tuple(parsed)
    return KafkaRecord(
        topic, partition, offset, timestamp,
        _unb64(doc.get("key"), "key"), _unb64(doc.get("value"), "value"), headers, object,
    )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
