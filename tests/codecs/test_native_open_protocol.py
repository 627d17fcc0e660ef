"""The compiled open-protocol decoder (native/cdc_replay_native/src/open_protocol.rs) against
the Python codec, the reference: golden vectors, hand-written edge cases, a generated archive,
mutated messages and hypothesis-generated event streams decoded by both paths must give
identical DECODED_ARROW_SCHEMA rows, quarantine rows included."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from spark_apps import native_decode

from . import native_paths as paths
from . import test_native_craft
from . import test_open_protocol as golden
from .test_native_canal_json import records_batch
from .test_open_protocol import wide_decimals  # noqa: F401 - the fixture, for DECIMAL(40, s) values

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

PROTOCOL = "open-protocol"


def batch_of(messages: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    batch = records_batch([v for _, v in messages])
    return batch.set_column(batch.schema.get_field_index("key"), "key", pa.array([k for k, _ in messages], pa.binary()))


def assert_same(messages, options=None) -> list[dict]:
    return paths.assert_same(PROTOCOL, batch_of(messages), options)


def native_share(messages) -> tuple[int, int]:
    return paths.native_share(PROTOCOL, batch_of(messages))


def one(value: str, **key) -> tuple[bytes, bytes]:
    return golden.frame([(golden._key(**key), value)])


# ----------------------------------------------------------------------------- golden vectors

GOLDEN = [
    golden.BATCH,
    golden.frame([(golden.DOC_DDL_KEY, golden.DOC_DDL_VALUE)]),
    golden.frame([(golden.DOC_RESOLVED_KEY, "")]),
    *(golden.frame(entries) for entries in golden.GOLDEN_ENTRIES),
    *(message for message, _, _, _ in golden.ERRORS),
]


def test_golden_vectors_decode_the_same():
    python = assert_same(GOLDEN)
    assert {r["kind"] for r in python} >= {"row", "watermark", "ddl", "quarantine"}
    assert sum(r["kind"] == "quarantine" for r in python) == len(golden.ERRORS)


def test_the_compiled_path_takes_rows_and_resolved_events_and_leaves_ddl_and_bad_messages():
    all_types = golden.ALL_TYPES_VALUE.replace('"c_float_negzero":{"t":4,"f":65,"v":-0},', "")  # -0: Python
    batch = golden.frame([(golden.ALL_TYPES_KEY, all_types), (golden.PART_UPDATE_KEY, golden.PART_UPDATE_VALUE),
                          (golden.PART_DELETE_KEY, golden.PART_DELETE_VALUE)])
    messages = [batch, golden.frame([(golden.DOC_RESOLVED_KEY, "")]),
                golden.frame([(golden.DOC_DDL_KEY, golden.DOC_DDL_VALUE)]), (None, golden.VALUE), (golden.KEY, b"")]
    assert native_share(messages) == (2, 3)


# ----------------------------------------------------------------------------- edge cases

def col(t, v, f=64, h=None) -> str:
    import json

    return json.dumps({"t": t, "f": f, "v": v, **({} if h is None else {"h": h})}, ensure_ascii=False)


KEYED = '"id":{"t":3,"h":true,"f":11,"v":1}'
EDGE = [
    one('{"u":{' + KEYED + ',"a":{"t":3,"f":64,"v":-0}}}'),  # -0 in an integer column: a float after the rewrite
    one('{"u":{' + KEYED + ',"a":{"t":5,"f":64,"v":-0},"b":{"t":5,"f":64,"v":-0.0},"c":{"t":4,"f":64,"v":-0.5}}}'),
    one('{"u":{' + KEYED + '},"d":{}}'), one('{"u":{' + KEYED + '},"p":{}}'), one('{"d":{' + KEYED + '},"u":{}}'),
    one('{"u":{' + KEYED + '}}', t=True), one('{"u":{' + KEYED + '}}', ts=True), one('{"u":{' + KEYED + '}}', ts=1.0),
    one('{"u":{' + KEYED + '}}', rid=2**63 - 1, ptn=-(2**63)), one('{"u":{' + KEYED + '}}', rid=2**63),
    one('{"u":{' + KEYED + '}}', ptn=None, rid=None), one('{"u":{' + KEYED + '}}', ohk=0, ccl=""),
    one('{"u":{' + KEYED + '}}', ohk=1.5), one('{"u":{' + KEYED + '}}', scm=""), one('{"u":{' + KEYED + '}}', tbl=None),
    one('{"u":{"id":{"t":3,"h":"yes","f":11,"v":1}}}'), one('{"u":{"id":{"t":3,"h":true,"v":1}}}'),
    one('{"u":{"id":{"t":3,"h":true,"f":true,"v":1}}}'), one('{"u":{"id":{"t":3.0,"h":true,"f":11,"v":1}}}'),
    one('{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"id":{"t":3,"h":true,"f":11,"v":2}}}'),  # duplicate names
    one('{"u":{' + KEYED + ',"n":{"t":6,"f":64,"v":null}}}'),
    one('{"u":{' + KEYED + ',"q":' + ',"r":'.join(col(15, v, 65) for v in [
        "\\u00a0\\U0001F600", "\\ud800", "\\U00110000", "\\377\\400", "\\x4G", "\\'", "plain é", "\\u00e", "\\"]) + '}}'),
    *(one('{"u":{' + KEYED + ',"b":' + col(252, v) + '}}') for v in [
        "", "AA==", "AB==", "AAE=", "AAF=", "AAEC", "AAE", "AA=A", "A===", "AA AA==", "\u00e9AAA", "AAEC/w==", "_-AA"]),
    *(one('{"u":{' + KEYED + ',"x":{"t":%d,"f":64,"v":%s}}}' % (t, v)) for t, v in [
        (4, "2.50390625"), (5, "2.50390625"), (4, "3.4028235677973366e38"), (4, "3.4028234e38"), (5, "1e400"),
        (5, "9007199254740993"), (4, "16777217"), (5, "-9007199254740992"), (5, "18446744073709551615"),
        (5, "5e-324"), (4, "1e-46"), (5, "0.1"), (4, "0.1"), (5, "123456789012345678901234567890"), (4, "1E+2")]),
    *(one('{"u":{' + KEYED + ',"i":{"t":%d,"f":%d,"v":%s}}}' % (t, f, v)) for t, f, v in [
        (8, 192, "18446744073709551615"), (8, 64, "-9223372036854775808"), (8, 64, "-9223372036854775809"),
        (13, 64, "2024"), (16, 192, "0"), (247, 64, "true"), (3, 64, "1e2")]),
    one('{"u":{' + KEYED + ',"z":{"t":6,"f":2147483648,"v":null}}}'), one('{"u":{' + KEYED + ',"z":{"t":256,"v":1}}}'),
    (golden.frame([(golden._key(), '{"u":{' + KEYED + '}}')])[0], golden.frame([(golden._key(), '{"u":{' + KEYED + '}} ')])[1]),
    golden.frame([(golden._key(), '{"u":{' + KEYED + '}}'), (golden._key(t=3), ""),
                  (golden._key(ts=2), '{"d":{' + KEYED + '}}')]),
    (golden.KEY + golden.KEY[8:], golden.VALUE + golden.VALUE),
    # the typed JSON reader: escaped keys, repeated keys, fields of other JSON types
    one('{"\\u0075":{"\\u0069d":{"\\u0074":3,"h":true,"f":11,"v":1,"x":[1,{"y":2}]}},"q":{"a":[]}}'),
    one('{"u":{"id":{"t":3,"h":true,"f":11,"v":1}},"u":{"id":{"t":3,"h":true,"f":11,"v":2}}}'),
    one('{"u":{"id":{"t":3,"h":true,"f":11,"v":1,"v":7,"t":8}}}'),
    one('{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"b":"text"}}'), one('{"u":{"id":[1]}}'), one('{"u":"x"}'),
    one('{"u":{"id":{"t":3,"h":true,"f":11,"v":1}},"d":null,"p":null}'), one('{"u":{"id":{"t":3,"h":true,"f":11,"v":{"a":1}}}}'),
    one('{"u":{"id":{"t":3,"h":true,"f":11,"v":[1]}}}'), one('[{"u":{}}]'), one('"u"'), one('null'),
    one('{"u":{"i\\"d":{"t":15,"h":true,"f":11,"v":"\\u00e9\\n"}}}'),
]


def test_edge_cases_decode_the_same():
    python = assert_same(EDGE)
    kinds = [r["kind"] for r in python]
    assert kinds.count("quarantine") >= 15 and kinds.count("row") >= 30


def test_edge_cases_with_updated_only_and_handle_key_delete_options_decode_the_same():
    options = {"only-output-updated-columns": "true", "delete-only-output-handle-key-columns": "true"}
    partial = one('{"u":{' + KEYED + ',"a":' + col(3, 5) + ',"b":' + col(15, "x") + '},"p":{"b":' + col(15, "y")
                  + ',"c":' + col(3, 1) + '}}')
    assert_same([partial, *EDGE[:10]], options)


# ----------------------------------------------------------------------------- archives

def test_a_generated_archive_decodes_the_same_through_the_object_reader(tmp_path):
    out = paths.generated_archive(PROTOCOL, tmp_path, records_per_object=40)
    assert len(out["native"]) == len(out["python"]) > 300
    assert out["native"] == out["python"]
    assert {"row", "ddl", "watermark", "quarantine"} <= {r["kind"] for r in out["python"]}


# ----------------------------------------------------------------------------- fuzzing

def test_mutated_messages_decode_the_same():
    """The reference's mutation fuzz (one JSON field changed, entry bytes changed, framed bytes
    changed) over its golden entries and the edge cases: same rows or same quarantine."""
    rng = random.Random(20261125)
    entries_pool = golden.GOLDEN_ENTRIES + [[(golden._key(), '{"u":{' + KEYED + ',"x":{"t":5,"f":64,"v":0.1}}}')]]
    messages = []
    for _ in range(3000):
        entries = [(k.encode(), v.encode()) for k, v in rng.choice(entries_pool)]
        which = rng.random()
        n = rng.randrange(len(entries))
        k, v = entries[n]
        if which < 0.4:
            entries[n] = (golden._mutate_json(rng, k), v) if rng.random() < 0.3 else (k, golden._mutate_json(rng, v))
            messages.append(golden.frame(entries))
        elif which < 0.6:
            entries[n] = (golden._mutate(rng, k), v) if rng.random() < 0.3 else (k, golden._mutate(rng, v))
            messages.append(golden.frame(entries))
        else:
            key, value = golden.frame(entries)
            messages.append((golden._mutate(rng, key), value) if which < 0.8 else (key, golden._mutate(rng, value)))
    python = assert_same(messages)
    kinds = [r["kind"] for r in python]
    assert kinds.count("quarantine") > 1000 and kinds.count("row") > 300


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(golden.open_events(), min_size=1, max_size=8), batch=st.integers(1, 4),
       updated_only=st.booleans(), delete_keys_only=st.booleans())
def test_generated_event_streams_decode_the_same(wide_decimals, events, batch, updated_only, delete_keys_only):  # noqa: F811
    options = {"max-batch-size": str(batch), "only-output-updated-columns": str(updated_only),
               "delete-only-output-handle-key-columns": str(delete_keys_only)}
    assert_same(golden.encode(get_codec(PROTOCOL, options), events), options)


@settings(max_examples=100, deadline=None)
@given(pairs=test_native_craft.FLOATS)
@example(pairs=[(2.50390625, 2.50390625), (0.5, 1e-45), (9007199254740993.0, 16777217.0), (1e23, 3.4028234663852886e38),
                (5e-324, 1.1754942e-38), (123456789.125, 0.1)])
def test_float_and_double_values_decode_the_same(pairs):
    """JSON numbers as Go writes them and as anything else might: shortest texts and exact ties."""
    import json

    rows = ['{"u":{' + KEYED + ',"d":{"t":5,"f":64,"v":%s},"f":{"t":4,"f":64,"v":%s}}}' % (json.dumps(d), json.dumps(f))
            for d, f in pairs]
    assert_same([golden.frame([(golden._key(ts=i), r) for i, r in enumerate(rows)])])


def test_decoder_choice_names_the_compiled_protocols(monkeypatch):
    monkeypatch.setenv(native_decode.ENV, "auto")
    for protocol in native_decode.PROTOCOLS:
        assert native_decode.choose(protocol, {}) == (
            "native", f"compiled {protocol} decoder (records it cannot take exactly go to the Python codec)")
    assert native_decode.choose("csv", {}) == (
        "python", f"no compiled decoder for csv (compiled: {', '.join(native_decode.PROTOCOLS)})")
    assert {"canal-json", "craft", "open-protocol", "canal-protobuf", "avro"} <= set(native_decode.PROTOCOLS)
    assert native_decode.choose(PROTOCOL, {"large-message-handle-compression": "snappy"})[0] == "python"
