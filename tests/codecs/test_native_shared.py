"""What the compiled decoders share (native/cdc_replay_native): the line reader
(src/archive.rs) feeds every compiled decoder, not only canal-json's
(tests/codecs/test_native_canal_json.py tests the line grammar): a Kafka-record archive object
of craft or open-protocol messages, read and decoded in one pass, gives the Python path's rows,
and the lines it cannot take (no key for open-protocol, a key that is not base64, headers, a
message its decoder hands back) reach the Python path unchanged. And the JSON fields a decoder
does not read are checked as orjson checks them (canal_typed's `Checked`), not skipped."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest

from cdc_codecs import get_codec
from spark_apps import archive_io, native_decode
from spark_apps.archive_io import decode_objects_fn
from spark_apps.schema import DECODED_ARROW_SCHEMA

from . import test_craft as craft_golden
from . import native_paths as paths
from . import test_native_open_protocol as open_golden
from .test_native_canal_json import DROP, archive_line, object_bytes

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _lines(messages: list[tuple[bytes | None, bytes]]) -> list[bytes]:
    """Archive lines of (key, value) messages, then the first message again with no key, a key
    that is not base64, and a header."""
    lines = [archive_line(value, offset=i, key=DROP if key is None else _b64(key))
             for i, (key, value) in enumerate(messages)]
    key, value = messages[0]
    n = len(messages)
    lines += [archive_line(value, offset=n, key=DROP), archive_line(value, offset=n + 1, key="a2V5!"),
              archive_line(value, offset=n + 2, key=_b64(key or b"k"), headers=[["h", "dg=="]])]
    return lines


def _both(monkeypatch, protocol: str, uri: str) -> list[dict]:
    out = {}
    for mode in ("python", "native"):
        monkeypatch.setenv(native_decode.ENV, mode)
        batches = list(decode_objects_fn(protocol, {})(iter([pa.RecordBatch.from_pydict({"uri": [uri]})])))
        table = pa.Table.from_batches(batches, schema=DECODED_ARROW_SCHEMA)
        table.validate(full=True)
        out[mode] = table.to_pylist()
    assert out["native"] == out["python"]
    return out["python"]


def _lines_share(protocol: str, uri: str) -> tuple[int, int]:
    """(records whose lines the compiled decoder took, records it left to the Python path)."""
    codec = get_codec(protocol, {})
    native = native_decode.NativeDecoder(codec)
    list(archive_io._native_lines_object(native, codec, uri, *archive_io._native_lines(native, None)))
    return native.native_records, native.python_records


@pytest.mark.parametrize("protocol", ["craft", "open-protocol"])
def test_craft_and_open_protocol_archive_lines_decode_the_same_through_the_line_reader(monkeypatch, tmp_path,
                                                                                      protocol):
    if protocol == "craft":
        messages = [(b"k", value) for value in [*craft_golden.SEEDS, craft_golden.batched_message()]]
    else:
        messages = [m for m in open_golden.GOLDEN if m[1] is not None]
    path = tmp_path / "orders+1+0.jsonl"
    path.write_bytes(object_bytes(_lines(messages)))
    rows = _both(monkeypatch, protocol, str(path))
    assert {r["kind"] for r in rows} >= {"row", "watermark", "ddl", "quarantine"}
    taken, left = _lines_share(protocol, str(path))
    assert taken + left == len(messages) + 3
    assert taken >= 2  # the row messages (and resolved/watermark ones) are taken here
    if protocol == "craft":  # the key is not read: only the bad key, the header and the DDL go to Python
        assert left == 3
    else:  # the three odd lines, the DDL, the bad messages
        assert left >= 4 + len(open_golden.golden.ERRORS)


def test_open_protocol_fields_it_does_not_read_are_still_checked_as_orjson_does():
    """A lone surrogate or a number beyond float64 in a field or column property the decoder
    does not use: orjson refuses the value (quarantine), so the compiled path must not take it."""
    value = open_golden.golden.PART_UPDATE_VALUE
    odd = [value[:-1] + ',"x":"\\ud800"}', value[:-1] + ',"x":[1e400]}',
           value.replace('"t":', '"z":1e400,"t":', 1), value.replace('"t":', '"z":{"a":"\\udc00"},"t":', 1)]
    messages = [open_golden.golden.frame([(open_golden.golden.PART_UPDATE_KEY, v)]) for v in [value, *odd]]
    rows = paths.assert_same("open-protocol", open_golden.batch_of(messages))
    assert [r["kind"] for r in rows] == ["row"] + ["quarantine"] * len(odd)


def test_an_extension_without_the_protocols_decoder_is_said_and_the_python_codec_decodes(monkeypatch):
    """A stale build (older than the crate's sources) lacks the newer decoders' classes: the
    choice says so and names the remedy, instead of every object failing in its task."""
    from spark_apps import native_decode

    monkeypatch.delattr(native_decode.cdc_replay_native, "AvroDecoder")
    path, reason = native_decode.choose("avro", {}, mode="auto")
    assert path == "python" and "has no AvroDecoder" in reason and "scripts/bootstrap" in reason
    with pytest.raises(RuntimeError, match="has no AvroDecoder"):
        native_decode.choose("avro", {}, mode="native")
    assert native_decode.choose("craft", {}, mode="auto")[0] == "native"
