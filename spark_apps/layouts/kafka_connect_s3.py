"""`kafka-connect-s3`: the objects Confluent's Kafka Connect S3 sink writes
(confluentinc/kafka-connect-storage-cloud), with raw CDC bytes as values
(`value.converter=org.apache.kafka.connect.converters.ByteArrayConverter`).

    {topics.dir}/{topic}/partition={p}/{topic}+{p}+{start offset, zero-padded}.{ext}   default partitioner
    {topics.dir}/{topic}/year=YYYY/month=MM/.../{topic}+{p}+{start offset}.{ext}       time-based partitioners
    {topics.dir}/{topic}/{field}={value}/{topic}+{p}+{start offset}.{ext}             field partitioner

Only the file name is relied on (topic, partition and the offset of the file's first record),
so every partitioner's directories read the same. Formats, by extension:

* `.avro` (AvroFormat): an Avro container file whose records are the values (`bytes`, or
  `["null","bytes"]`); with `store.kafka.keys` / `store.kafka.headers` the companion
  `{name}.keys.avro` / `{name}.headers.avro` hold the keys and the headers (an array of
  {key, value} records, values as text) record by record;
* `.json` (JsonFormat): one JSON value per line; ByteArrayConverter bytes are base64 strings,
  a JSON object or array (JsonConverter without schemas) is the message itself, re-serialised;
* anything else, e.g. `.bin` (ByteArrayFormat): the values, each followed by
  `format.bytearray.separator` (default "\\n"). Only for text protocols (canal-json, a
  value with the separator inside breaks the split): binary protocols need AvroFormat.

`.gz` (s3.compression.type=gzip) and the other compression extensions are undone first.
A record's offset is the file's start offset plus its position in the file, as the connector
assigned them (one file holds consecutive records of one partition); timestamps are not
stored by the sink.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

import orjson

from cdc_codecs.base import KafkaRecord

from .. import storage
from .base import LayoutError, Plan, item, long_line_row

NAME = "kafka-connect-s3"
OPTIONS = ("format.bytearray.separator",)

# Kafka topic names are [a-zA-Z0-9._-]; the connector joins with "+" (directory.delim "/")
_FILE = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<start>\d+)(?P<rest>\..+)$")
_COMPANION = re.compile(r"^\.(keys|headers)\.")


def parse_name(rel: str) -> dict | None:
    """topic, partition, start offset, view (value/keys/headers) and format of an object name."""
    directory, _, name = rel.rpartition("/")
    m = _FILE.match(name)
    if not m or any(part.startswith(("_", ".")) for part in rel.split("/")[:-1]):
        return None
    rest = storage.strip_compression(m["rest"])
    if rest == ".jsonl":  # our own Kafka-record objects share the connector's naming
        return None
    view = "value"
    if c := _COMPANION.match(rest):
        view, rest = c[1], rest[len(c[0]) - 1:]
    fmt = {".avro": "avro", ".json": "json"}.get(rest, "bytearray")
    return {"topic": m["topic"], "partition": int(m["partition"]), "start": int(m["start"]), "view": view,
            "format": fmt, "dir": directory, "stem": f"{m['topic']}+{m['partition']}+{m['start']}"}


def matches(relatives: list[str]) -> int:
    return sum(1 for rel in relatives if parse_name(rel) is not None)


def _separator(options: dict) -> str:
    raw = options.get("format.bytearray.separator", "\n")
    return raw.encode("utf-8").decode("unicode_escape")  # accept "\r\n" written with backslashes


def plan(source: str, objects: list, options: dict, protocol: str | None = None,
         protocol_options: dict | None = None) -> Plan:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise LayoutError(f"unknown --layout-option {', '.join(sorted(unknown))} for {NAME}; valid: {', '.join(OPTIONS)}")
    separator = _separator(options)
    values, companions = [], {}
    for o, rel in objects:
        parsed = parse_name(rel)
        if parsed is None:
            continue
        if parsed["view"] == "value":
            values.append((o, parsed))
        else:
            companions[(parsed["dir"], parsed["stem"], parsed["view"])] = (o.uri, parsed["format"])
    if not values:
        raise LayoutError(f"{source}: no Kafka Connect S3 sink objects (<topic>+<partition>+<start offset>.<ext>)")
    formats = sorted({p["format"] for _, p in values})
    if "bytearray" in formats and protocol in ("canal-protobuf", "craft", "avro", "oceanbase-avro"):
        raise LayoutError(f"ByteArrayFormat objects split records at a separator, which {protocol}'s binary "
                          "values can contain: archive binary protocols with AvroFormat")
    items, keys, headers = [], 0, 0
    partitions = set()
    # keys without a value file: the connector's tombstone partition (behavior.on.null.values=write)
    value_stems = {(p["dir"], p["stem"]) for _, p in values}
    tombstones = 0
    for (directory, stem, view), spec in sorted(companions.items()):
        if view == "keys" and (directory, stem) not in value_stems:
            topic, partition, start = stem.split("+")
            items.append(item(spec[0], 0, NAME, topic=topic, partition=int(partition), start=int(start),
                              format="tombstones", separator=separator, keys=spec,
                              headers=companions.get((directory, stem, "headers"))))
            tombstones += 1
    for o, p in values:
        key = companions.get((p["dir"], p["stem"], "keys"))
        header = companions.get((p["dir"], p["stem"], "headers"))
        keys += key is not None
        headers += header is not None
        partitions.add((p["topic"], p["partition"]))
        items.append(item(o.uri, o.size, NAME, topic=p["topic"], partition=p["partition"], start=p["start"],
                          format=p["format"], separator=separator, keys=key, headers=header))
    found = (f"Kafka Connect S3 sink objects ({', '.join(formats)}): {len(items) - tombstones} value files of "
             f"{len(partitions)} topic partitions, {keys} with keys and {headers} with headers files, "
             f"{tombstones} tombstone (keys only) files")
    return Plan(NAME, tuple(items), found, info={"formats": formats, "partitions": len(partitions)})


def _avro_values(uri: str) -> Iterator:
    import fastavro

    stream = storage.open_stream(uri)
    try:
        yield from fastavro.reader(stream)
    finally:
        stream.close()


def _as_bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return orjson.dumps(value)


def _json_value(line: bytes) -> bytes | None:
    value = orjson.loads(line)
    if isinstance(value, str):
        if value[:1] in ("{", "["):
            return value.encode("utf-8")  # StringConverter text
        try:
            return base64.b64decode(value, validate=True)  # ByteArrayConverter bytes through Jackson
        except binascii.Error:
            return value.encode("utf-8")
    return _as_bytes(value)


def _headers(doc) -> tuple:
    if isinstance(doc, dict):  # enveloped (JsonFormat): {"headers": [...]}
        doc = doc.get("headers")
    return tuple((h["key"], _as_bytes(h.get("value")) or b"") for h in doc or ())


def _companion(spec) -> Iterator:
    """Keys or headers file entries, record by record (None when there is no such file, and
    after its end: a shorter companion shows as missing keys, never as shifted ones)."""
    if spec is not None:
        uri, fmt = spec
        if fmt == "avro":
            yield from ((fmt, v) for v in _avro_values(uri))
        else:
            yield from ((fmt, line) for line in storage.iter_lines(uri) if line.strip())
    while True:
        yield None


def _key(entry) -> bytes | None:
    if entry is None:
        return None
    fmt, raw = entry
    if fmt == "json":
        return _json_value(raw)
    return raw if fmt == "bytearray" else _as_bytes(raw)


def _header_entry(entry) -> tuple:
    if entry is None:
        return ()
    fmt, raw = entry
    return _headers(orjson.loads(raw) if fmt == "json" else raw)


def _values(uri: str, params: dict) -> Iterator:
    fmt = params["format"]
    if fmt == "avro":
        for value in _avro_values(uri):
            yield _as_bytes(value)
    elif fmt == "json":
        for line in storage.iter_lines(uri):
            if isinstance(line, storage.LongLine):  # over --max-line-bytes: its head only, said by read()
                yield line
            elif line.strip():
                yield _json_value(line)
    else:
        separator = params["separator"].encode("utf-8")
        stream = storage.open_stream(uri)
        try:
            data = stream.read()
        finally:
            stream.close()
        parts = data.split(separator)
        if parts and parts[-1] == b"":
            parts.pop()  # every value is followed by the separator
        yield from parts


def read(uri: str, params: dict) -> Iterator:
    topic, partition, start = params["topic"], params["partition"], params["start"]
    if params["format"] == "tombstones":  # null values: one per key
        keys, headers = _companion(params["keys"]), _companion(params["headers"])
        for position, key in enumerate(iter(lambda: next(keys), None)):
            yield KafkaRecord(topic, partition, start + position, None, _key(key), None,
                              _header_entry(next(headers)), uri), position + 1
        return
    keys, headers = _companion(params["keys"]), _companion(params["headers"])
    for position, value in enumerate(_values(uri, params)):
        key, header = next(keys), next(headers)  # read in step with the values, also past a quarantined one
        if isinstance(value, storage.LongLine):
            yield long_line_row(uri, position + 1, value,
                                {"topic": topic, "partition": partition, "offset": start + position})
            continue
        yield KafkaRecord(topic, partition, start + position, None, _key(key), value,
                          _header_entry(header), uri), position + 1
