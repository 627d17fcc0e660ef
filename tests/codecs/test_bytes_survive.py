"""Bytes survive every conversion (issue 12, point 4).

Binary column values (BINARY, VARBINARY, BLOB, BIT) decoded from any protocol and encoded to any
other come back byte for byte: random byte strings (every one of the 256 byte values, empty,
long) are pushed through every ordered pair of protocols and the decoded values are compared
with the originals as bytes. The expectation is the drawn value itself, not anything a codec
computes. OceanBase records whose binary values arrive as Avro `bytes` under a character type
code (OMS's VARCHAR 15 / CLOB 211 with type_info BINARY) are converted to every protocol too:
they used to come out of canal-json with U+FFFD in place of their high bytes.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import decode_record, encode_records
from cdc_codecs.events import ColumnFlag as F
from cdc_codecs.events import Kind, Op, new_event

from . import test_conversion_matrix as matrix
from .losses import PROFILES
from .test_oceanbase import avro, base_record, cv, kafka

KEY = F.PRIMARY_KEY | F.HANDLE_KEY
ALL_BYTES = bytes(range(256))
LONG = random.Random(12).randbytes(200_000)  # a 200 kB BLOB, every byte value many times
BINARY_COLUMNS = [("c_binary", "binary(16)"), ("c_varbinary", "varbinary(65535)"), ("c_blob", "blob"),
                  ("c_longblob", "longblob")]
BASE_TS = 449_500_000_000_000_000


def row(op: str, ts: int, key: int, values: dict, bits: int | None) -> dict:
    def image(vals):
        cols = [{"name": "id", "mysql_type": "bigint", "flags": int(KEY), "value": str(key).encode(), "label": None}]
        for name, mysql_type in BINARY_COLUMNS:
            cols.append({"name": name, "mysql_type": mysql_type, "flags": int(F.BINARY | F.NULLABLE),
                         "value": vals[name], "label": None})
        cols.append({"name": "c_bit", "mysql_type": "bit(64)", "flags": int(F.UNSIGNED | F.NULLABLE),
                     "value": None if bits is None else str(bits).encode(), "label": None})
        return cols

    before = image(values) if op != Op.INSERT else None
    after = image(values) if op != Op.DELETE else None
    return new_event(Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=ts >> 18, database="shop", table="bin",
                     key_columns=["id"], before=before, after=after)


def events_of(blobs: list[bytes], bits: int | None) -> list[dict]:
    """INSERT, UPDATE and DELETE rows holding `blobs` in every binary column (BINARY(16) gets
    the first 16 bytes, padded as MySQL pads it)."""
    out = []
    for i, blob in enumerate(blobs):
        values = {"c_binary": blob[:16].ljust(16, b"\x00"), "c_varbinary": blob[:65535], "c_blob": blob[:65535],
                  "c_longblob": blob}
        ts = BASE_TS + (i * 3 << 18)
        out.append(row(Op.INSERT, ts, i, values, bits))
        out.append(row(Op.UPDATE, ts + (1 << 18), i, values, bits))
        out.append(row(Op.DELETE, ts + (2 << 18), i, values, bits))
    return out


def values_seen(events: list[dict]) -> list:
    """Every binary value of every image, in order, as (column, bytes)."""
    return [(c["name"], c["value"]) for e in events for side in ("before", "after") for c in e[side] or ()
            if c["name"] != "id"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> str:
    return "file://" + str(tmp_path_factory.mktemp("registry"))


def through(profiles, events, registry) -> list[dict]:
    for profile in profiles:
        events = matrix.trip(profile, events, registry)
    return events


def assert_bytes_survive(profiles, events, registry) -> list[dict]:
    """The binary values that come out are the drawn ones, byte for byte, wherever the
    protocols carry the image (Avro sends no old values and only the key of a DELETE); the
    rest of the events as the conversion matrix expects them."""
    got = through(profiles, events, registry)
    want = events
    for profile in profiles:
        want = profile.expect(want)
    drawn = set(values_seen(events))
    assert set(values_seen(got)) <= drawn
    assert values_seen(got) == values_seen(want)
    matrix.assert_same(got, want, " -> ".join(p.name for p in profiles))
    return got


PAIRS = list(itertools.product(PROFILES, repeat=2))


@pytest.mark.parametrize("first, second", PAIRS, ids=lambda p: p.name)
def test_all_byte_values_empty_and_long_survive_every_pair(first, second, registry):
    events = events_of([ALL_BYTES, ALL_BYTES[::-1], b"", LONG], (1 << 64) - 1)
    got = assert_bytes_survive([first, second], events, registry)
    if second.expect(first.expect(events)):  # (open protocol refuses events without a commit ts)
        assert ("c_longblob", LONG) in values_seen(got), "the long value went missing"
        assert ("c_varbinary", ALL_BYTES) in values_seen(got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blobs=st.lists(st.binary(max_size=300) | st.integers(0, 2**32).map(lambda s: random.Random(s).randbytes(5000)),
                      min_size=1, max_size=3),
       bits=st.none() | st.integers(0, (1 << 64) - 1) | st.sampled_from([0, 1, 255, 256, (1 << 63), (1 << 64) - 1]),
       profiles=st.lists(st.sampled_from(PROFILES), min_size=2, max_size=3))
def test_random_bytes_survive_any_chain(blobs, bits, profiles, registry):
    assert_bytes_survive(profiles, events_of(blobs, bits), registry)


# ------------------------------------------------------------------------------ OceanBase bytes

# (dataTypeNumber, ColumnValue builder): how OMS may carry a binary value
OB_BINARY_CARRIERS = [
    (15, lambda b: cv("BINARY", b, "bytes")),  # OMS's VARCHAR code, binary type_info
    (211, lambda b: cv("BINARY", b, "bytes")),  # OMS's CLOB code
    (198, lambda b: cv("BINARY", b, "bytes")),  # VAR_BINARY
    (199, lambda b: cv("BINARY", b, "bytes")),  # BINARY
    (253, lambda b: cv("BINARY", b, "bytes")),  # raw libobcdc VARCHAR/VARBINARY
    (252, lambda b: cv("BINARY", b, "bytes")),  # raw BLOB/TEXT
    (254, lambda b: cv("STRING", {"charsetName": "binary", "value": b.decode("latin-1")}, "StringObject")),
]


@pytest.mark.parametrize("code, carrier", OB_BINARY_CARRIERS, ids=[str(c) for c, _ in OB_BINARY_CARRIERS])
@pytest.mark.parametrize("target", PROFILES, ids=lambda p: p.name)
def test_oceanbase_binary_values_survive_conversion_to_every_protocol(code, carrier, target, registry):
    from cdc_codecs import get_codec

    ob = get_codec("oceanbase-avro")
    record = base_record(
        timestamp=1_700_000_000,
        fields=[{"name": "id", "dataTypeNumber": 8}, {"name": "b", "dataTypeNumber": code}], pkIndexes=[0],
        afterImages=[cv("LONG", 1, "long"), carrier(ALL_BYTES)])
    [event] = decode_record(ob, kafka(avro(record)))
    assert event["after"][1]["value"] == ALL_BYTES
    assert event["after"][1]["flags"] & F.BINARY, event["after"][1]
    event["commit_ts"] = BASE_TS  # open protocol and craft need an ordering timestamp
    codec = matrix.codec_for(target, registry)
    [decoded] = [e for r in encode_records(codec, [event], topic="t", partitions=1) for e in decode_record(codec, r)]
    value = {c["name"]: c["value"] for c in decoded["after"]}["b"]
    assert value == ALL_BYTES, f"{target.name}: {value[:40]!r}..."
    assert "\ufffd".encode() not in value


def test_oceanbase_geometry_reaches_canal_json_as_its_bytes():
    from cdc_codecs import get_codec

    wkb = bytes.fromhex("e6100000") + bytes.fromhex("0101000000000000000000f03f0000000000000040")
    record = base_record(
        fields=[{"name": "id", "dataTypeNumber": 8}, {"name": "g", "dataTypeNumber": 255}], pkIndexes=[0],
        afterImages=[cv("LONG", 1, "long"), cv("GEOMETRY", {"srid": 4326, "wkb": wkb[4:]}, "GeometryValue")])
    [event] = decode_record(get_codec("oceanbase-avro"), kafka(avro(record)))
    for options in ({}, {"flat-message-flavor": "canal"}):
        codec = get_codec("canal-json", options)
        [message] = encode_records(codec, [event], topic="t", partitions=1)
        [decoded] = decode_record(codec, message)
        assert {c["name"]: c["value"] for c in decoded["after"]}["g"] == wkb
