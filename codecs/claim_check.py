"""TiCDC claim-check messages (large-message-handle-option=claim-check): a message too large
for Kafka is written whole to external storage as `<uuid>.json` and the Kafka message carries
only its location (`_tidb.claimCheckLocation` in canal-json, `ccl` in the open-protocol key).

With the codec option `claim-check-storage-uri` (TiCDC's parameter of the same name: a local
directory or s3:// prefix) the decoder reads the stored message and decodes it in place of the
location message, as TiCDC's own consumers do: the location's last path element is looked up
under that URI; the object is `{"key": base64, "value": base64}` (Go's JSON of the message's
key and value bytes) or, with `claim-check-raw-value=true`, the raw value. Without the option
the message is a DecodeError naming the location (quarantined, never silently dropped).

Storage is reached through the codec's `read_object` (given by the app: local paths and S3 through
boto3); the codecs import nothing of the app.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from .base import KafkaRecord, Option

OPTIONS = (
    Option("claim-check-storage-uri", "", "decode: where TiCDC stored claim-check messages (local directory or "
                                          "s3://bucket/prefix); without it a claim-check message is quarantined", str),
    Option("claim-check-raw-value", False, "decode: the stored claim-check objects hold the raw value, not "
                                           '{"key", "value"} JSON', bool),
)


def claimed_message(codec, location: str, **where) -> tuple[bytes | None, bytes]:
    """The (key, value) of the message TiCDC stored at `location`; a DecodeError of `codec`
    (with `where`: byte_offset / field) when it cannot be had."""
    base = codec.config["claim-check-storage-uri"]
    if not base:
        raise codec.error(f"claim-check message: the full row is stored at {location!r}, outside the archive; "
                          "give the codec option claim-check-storage-uri to read it", **where)
    name = str(location).rstrip("/").rsplit("/", 1)[-1]
    uri = base.rstrip("/") + "/" + name
    try:
        data = codec.read_object(uri)
    except Exception as e:  # missing object, S3 error
        raise codec.error(f"claim-check message: cannot read {uri} ({type(e).__name__}: {e})", **where) from None
    if codec.config["claim-check-raw-value"]:
        return None, data
    try:
        doc = orjson.loads(data)
        key, value = doc.get("key"), doc["value"]
        return (None if key is None else base64.b64decode(key, validate=True)), base64.b64decode(value, validate=True)
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, binascii.Error) as e:
        raise codec.error(f"claim-check object {uri} is not {{\"key\": base64, \"value\": base64}} "
                          f"({type(e).__name__}: {e}); for raw values set claim-check-raw-value=true", **where) from None


def decode_claimed(codec, record: KafkaRecord | None, location: str, **where) -> list[dict]:
    """The events of the message stored at `location`, decoded by `codec` in place of the
    location message `record` (whose source fields they keep). A stored message that is
    itself a claim-check message is an error, not followed."""
    if getattr(codec, "_claiming", False):
        raise codec.error(f"a claim-check object is itself a claim-check message (pointing at {location!r})", **where)
    key, value = claimed_message(codec, location, **where)
    codec._claiming = True
    try:
        if record is None:
            return codec.decode(KafkaRecord("", 0, 0, None, key, value))
        return codec.decode(KafkaRecord(record.topic, record.partition, record.offset, record.timestamp, key, value))
    finally:
        codec._claiming = False
