"""TiCDC claim-check messages: with `claim-check-storage-uri` the stored message replaces the
location message (canal-json and open-protocol, local directories and the S3 server, JSON and
raw objects, compressed values); without it, or when the object is missing or malformed, a
DecodeError names the location, the record and the option to set."""

from __future__ import annotations

import base64
import uuid

import orjson
import pytest

from cdc_codecs import DecodeError, KafkaRecord, decode_record, get_codec
from cdc_codecs.compression import compress
from cdc_codecs.events import ColumnFlag as F
from cdc_codecs.events import Kind, Op, column, new_event
from spark_apps import storage

COMMIT_TS = 441349361156227074
OBJECT = "s3://archive/cdc/0/cdc+0+00000000000000000007.jsonl.gz"
EVENT = new_event(Kind.ROW, op=Op.UPDATE, commit_ts=COMMIT_TS, database="shop", table="orders", key_columns=["id"],
                  before=[column("id", b"7", "bigint", F.HANDLE_KEY | F.PRIMARY_KEY), column("note", b"old", "text")],
                  after=[column("id", b"7", "bigint", F.HANDLE_KEY | F.PRIMARY_KEY),
                         column("note", b"x" * 20_000, "text")])


def record(key, value) -> KafkaRecord:
    return KafkaRecord("cdc", 0, 7, 1700000000000, key, value, (), OBJECT)


def store(prefix: str, key: bytes | None, value: bytes, raw: bool = False) -> str:
    """Write a claim-check object as TiCDC does; returns the location TiCDC would put in the
    message (its own storage URI + file name: only the file name is used to find it)."""
    name = f"{uuid.uuid4()}.json"
    body = value if raw else orjson.dumps({"key": None if key is None else base64.b64encode(key).decode(),
                                           "value": base64.b64encode(value).decode()})
    storage.write_bytes(storage.join(prefix, name), body)
    return f"s3://ticdc-claim-check/changefeed-1/{name}"


def canal_location_message(location: str) -> bytes:
    return orjson.dumps({"id": 0, "database": "shop", "table": "orders", "pkNames": ["id"], "isDdl": False,
                         "type": "UPDATE", "es": 1, "ts": 2, "sql": "", "sqlType": {"id": -5},
                         "mysqlType": {"id": "bigint"}, "old": None, "data": [{"id": "7"}],
                         "_tidb": {"commitTs": COMMIT_TS, "claimCheckLocation": location}})


def decoded_contents(events):
    keep = ("kind", "op", "commit_ts", "database", "table", "before", "after")
    return [{k: e[k] for k in keep} for e in events]


@pytest.mark.parametrize("compression, raw", [("none", False), ("lz4", False), ("snappy", True)])
def test_canal_json_claim_check_reads_the_stored_message(tmp_path, compression, raw):
    options = {"enable-tidb-extension": "true", "large-message-handle-compression": compression}
    [full] = get_codec("canal-json", options).encode([EVENT], topic="cdc", partition=0)
    location = store(str(tmp_path), full.key, full.value, raw=raw)
    codec = get_codec("canal-json", {**options, "claim-check-storage-uri": str(tmp_path),
                                     "claim-check-raw-value": str(raw).lower()})
    small = compress(compression, canal_location_message(location))  # the location message is compressed too
    claimed = decode_record(codec, record(None, small))
    assert decoded_contents(claimed) == decoded_contents(decode_record(codec, record(full.key, full.value)))
    assert claimed[0]["after"][1]["value"] == b"x" * 20_000 and claimed[0]["offset"] == 7


def test_open_protocol_claim_check_on_the_s3_server(bucket):
    from spark_apps.archive_io import read_object

    codec = get_codec("open-protocol", {"claim-check-storage-uri": f"{bucket}/claims"}, read_object=read_object)
    [full] = codec.encode([EVENT], topic="cdc", partition=0)
    location = store(f"{bucket}/claims", full.key, full.value)
    key = orjson.dumps({"ts": COMMIT_TS, "scm": "shop", "tbl": "orders", "t": 1, "ccl": location})
    value = orjson.dumps({"u": {"id": {"t": 8, "h": True, "f": 11, "v": 7}}})
    framed_key = (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key
    framed_value = len(value).to_bytes(8, "big") + value
    [claimed] = decode_record(codec, record(framed_key, framed_value))
    assert decoded_contents([claimed]) == decoded_contents(decode_record(codec, record(full.key, full.value)))
    assert claimed["after"][1]["value"] == b"x" * 20_000


def test_without_the_option_or_the_object_the_error_says_what_to_do(tmp_path):
    location = "s3://ticdc-claim-check/changefeed-1/5b1f0c9e.json"
    message = record(None, canal_location_message(location))
    with pytest.raises(DecodeError) as e:
        decode_record(get_codec("canal-json", {"enable-tidb-extension": "true"}), message)
    text = str(e.value)
    assert location in text and "claim-check-storage-uri" in text and OBJECT in text and "offset 7" in text
    codec = get_codec("canal-json", {"enable-tidb-extension": "true", "claim-check-storage-uri": str(tmp_path)})
    with pytest.raises(DecodeError, match=r"cannot read .*5b1f0c9e\.json"):
        decode_record(codec, message)
    storage.write_bytes(str(tmp_path / "5b1f0c9e.json"), b'{"value": "not base64!"}')
    with pytest.raises(DecodeError, match="is not .*base64.*claim-check-raw-value=true"):
        decode_record(codec, message)
    # an object that points further is refused, not followed
    storage.write_bytes(str(tmp_path / "5b1f0c9e.json"), orjson.dumps(
        {"key": None, "value": base64.b64encode(canal_location_message(location)).decode()}))
    with pytest.raises(DecodeError, match="itself a claim-check message"):
        decode_record(codec, message)


def test_an_s3_location_without_a_storage_reader_is_a_clear_error(bucket):
    """Codecs import nothing of the app: without the app's reader, S3 is out of their reach,
    and the message says so (quarantined, never dropped)."""
    codec = get_codec("open-protocol", {"claim-check-storage-uri": f"{bucket}/claims"})
    key = orjson.dumps({"ts": COMMIT_TS, "scm": "shop", "tbl": "orders", "t": 1, "ccl": "s3://x/claims/a.json"})
    framed_key = (1).to_bytes(8, "big") + len(key).to_bytes(8, "big") + key
    value = orjson.dumps({"u": {"id": {"t": 8, "h": True, "f": 11, "v": 7}}})
    with pytest.raises(DecodeError, match="need a storage reader"):
        decode_record(codec, record(framed_key, len(value).to_bytes(8, "big") + value))
