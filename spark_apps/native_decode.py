"""The compiled decoders (native/cdc_replay_native, Rust + PyO3) behind the Python codecs:
canal-json, craft, open-protocol, avro, canal-protobuf and oceanbase-avro (PROTOCOLS).

The extension turns a batch of record values (an Arrow binary array) into Arrow buffers of the
canonical events with no Python object per value; this module wraps those buffers into a batch
of DECODED_ARROW_SCHEMA. Records the extension is not sure about (DDL, claim-check, anything
malformed or unusual) come back marked, and the caller decodes them with the Python codec, which
stays the reference: the output, quarantine rows included, is the same either way
(tests/codecs/test_native_*.py). What a type means comes from the Python codec's own rule
functions, asked once per distinct type: each codec builds its compiled decoder with them
(`Codec.compiled_decoder`, beside the codec; avro: the codec's analysis of each writer schema,
once per schema id; oceanbase-avro: its `_column_type`, `_render` and `parse_zone`).
docs/engine.md says why this design.

`CDC_REPLAY_DECODER=python` forces the pure-Python path for debugging, `native` requires the
extension; `auto` (default) uses it when it is importable. The driver's setting is captured in
the mapInArrow function, so executors follow it.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa

from cdc_codecs import codec_class, protocols
from cdc_codecs.events import COLUMN_TYPE, EVENT_SCHEMA

from .launch import NATIVE_SHIPPED
from .schema import DECODED_ARROW_SCHEMA

log = logging.getLogger("cdc_replay")

# the folder the extension shipped with a cluster job unpacks into, in each executor's working
# directory (`spark.archives=<zip>#SHIPPED`, spark_apps/launch.py `build_native_archive`)
SHIPPED = NATIVE_SHIPPED


def _on_worker() -> bool:
    """Whether this process is a Spark Python worker (an executor's, or local mode's)."""
    try:
        from pyspark import SparkFiles
    except ImportError:
        return False
    return bool(getattr(SparkFiles, "_is_running_on_worker", False))


def _shipped_folder() -> str | None:
    """In a Spark Python worker: the folder of the extension the job shipped, if it did (Spark
    unpacks archives into SparkFiles' root, the executor's working directory); else None."""
    if not _on_worker():
        return None
    from pyspark import SparkFiles

    for root in (SparkFiles._root_directory, os.getcwd()):
        folder = os.path.abspath(os.path.join(root or ".", SHIPPED))
        if os.path.isdir(folder):
            return folder
    return None


def where_this_runs() -> str:
    """This process's Python and platform, the two things a compiled extension must match."""
    import platform

    return f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, host {platform.node()}"


def _load():
    """(the extension module or None, where it came from: "shipped" | "installed" | None, why
    not). On an executor the copy shipped with the job comes first: it is built from the
    driver's sources, as the code --py-files ships; an executor's own installed copy (a packed
    environment) is the fallback. Each failure is kept in the reason, never silent."""
    import importlib
    import sys

    failures = []
    shipped = _shipped_folder()
    if shipped is not None:
        sys.path.insert(0, shipped)
        try:
            return importlib.import_module("cdc_replay_native"), "shipped", None
        except ImportError as e:  # built for another Python or platform than this executor's
            failures.append(f"the copy shipped with the job does not load here ({e})")
            sys.path.remove(shipped)
            for name in [n for n in sys.modules if n.split(".")[0] == "cdc_replay_native"]:
                del sys.modules[name]
    try:
        return importlib.import_module("cdc_replay_native"), "installed", None
    except ImportError as e:  # not built (scripts/bootstrap builds it): the Python codec decodes
        failures.append(f"no installed copy ({e})" if failures else f"not importable ({e})")
    if _on_worker():
        return None, None, (f"the compiled decoder cdc_replay_native does not load on this executor "
                            f"({where_this_runs()}): {'; '.join(failures)}")
    return None, None, f"the compiled decoder cdc_replay_native is {failures[0]}; run scripts/bootstrap"


cdc_replay_native, LOADED_FROM, UNAVAILABLE = _load()

ENV = "CDC_REPLAY_DECODER"
MODES = ("auto", "native", "python")
# the protocols with a compiled decoder, and each one's class in the extension (the codec says)
CLASSES = {p: codec_class(p).compiled_class for p in protocols() if codec_class(p).compiled_class}
PROTOCOLS = tuple(CLASSES)


def requested_mode() -> str:
    """auto | native | python: $CDC_REPLAY_DECODER, else auto."""
    mode = (os.environ.get(ENV) or "auto").strip().lower()
    if mode not in MODES:
        raise ValueError(f"decoder={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def choose(protocol: str, options: dict | None = None, mode: str | None = None) -> tuple[str, str]:
    """("native" | "python", why) for a protocol and its codec options, on this machine."""
    mode = mode or requested_mode()
    if mode == "python":
        return "python", f"forced by {ENV}=python"
    if protocol not in PROTOCOLS:
        return "python", f"no compiled decoder for {protocol} (compiled: {', '.join(PROTOCOLS)})"
    if (options or {}).get("large-message-handle-compression", "none") not in ("", "none"):
        return "python", "large-message-handle-compression: values are compressed"
    if str((options or {}).get("keep-original-entries", "false")).strip().lower() in ("true", "1", "yes"):
        return "python", "keep-original-entries: each entry is re-encoded in Python to compare"
    missing = UNAVAILABLE if cdc_replay_native is None else None
    if missing is None and not hasattr(cdc_replay_native, CLASSES[protocol]):
        # an extension built before this protocol's decoder was added: said, not a failed task per object
        missing = (f"the installed compiled extension has no {CLASSES[protocol]} (built from older sources: "
                   "run scripts/bootstrap)")
    if missing:
        if mode == "native":
            raise RuntimeError(missing)
        return "python", missing
    return "native", f"compiled {protocol} decoder (records it cannot take exactly go to the Python codec)"


def _bytes_view(buffer):
    """An Arrow buffer as unsigned bytes for the extension (pyarrow exports signed chars)."""
    return memoryview(b"") if buffer is None else memoryview(buffer).cast("B")


def _binary_args(values: pa.Array) -> tuple:
    """A binary array as the extension reads it (`BinaryArg` in native/.../lib.rs): validity,
    offsets, data, offset, length, large."""
    if pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type):
        large = True
    else:
        large = False
        if not pa.types.is_binary(values.type):
            values = values.cast(pa.binary())
    validity, offsets, data = values.buffers()[:3]
    return (_bytes_view(validity) if values.null_count else None, _bytes_view(offsets), _bytes_view(data),
            values.offset, len(values), large)


def _buf(data):
    return None if data is None else pa.py_buffer(data)


def _strings(parts, typ, n):
    validity, offsets, data, nulls = parts
    return pa.Array.from_buffers(typ, n, [_buf(validity), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _int64s(parts, n):
    validity, values, nulls = parts
    return pa.Array.from_buffers(pa.int64(), n, [_buf(validity), pa.py_buffer(values)], null_count=nulls)


def _list(parts, typ, n, child):
    validity, offsets, nulls = parts
    return pa.Array.from_buffers(typ, n, [_buf(validity), pa.py_buffer(offsets)], null_count=nulls, children=[child])


def _image(out, name, typ):
    items = out[name + "_items"]
    m = len(items["flags"]) // 4
    fields = [f for f in COLUMN_TYPE]
    children = [
        _strings(items["name"], pa.string(), m),
        _strings(items["mysql_type"], pa.string(), m),
        pa.Array.from_buffers(pa.int32(), m, [None, pa.py_buffer(items["flags"])]),
        _strings(items["value"], pa.binary(), m),
        _strings(items["label"], pa.string(), m),
    ]
    struct = pa.StructArray.from_arrays(children, fields=fields)
    return _list(out[name], typ, out["events"], struct)


class NativeDecoder:
    """One executor's compiled decoder for a configured codec of PROTOCOLS."""

    def __init__(self, codec):
        self.codec = codec
        self.decoder = codec.compiled_decoder(cdc_replay_native)
        self.native_records = 0
        self.python_records = 0

    def decode(self, values: pa.Array, source: dict[str, pa.Array],
               keys: pa.Array | None = None) -> tuple[pa.RecordBatch, pa.Array, np.ndarray]:
        """(events of the records decoded here, each event's record index, a bool array: True
        where the Python codec must decode the record).

        `source`: topic, partition, offset, record_timestamp, object, line arrays of the records;
        `keys`: the records' keys (open-protocol keeps its event keys there, avro its key record)."""
        n = len(values)
        args = [_binary_args(values)]
        if self.codec.compiled_takes_keys:  # as many keys as values
            args.append(_binary_args(keys if keys is not None else pa.nulls(n, pa.binary())))
        out = self.decoder.decode(*args)
        status = np.frombuffer(out["status"], dtype=np.uint8)
        fallback = status == 0
        done = int(n - fallback.sum())
        self.native_records += done
        self.python_records += n - done
        rec_idx = pa.array(np.frombuffer(out["rec_idx"], dtype=np.int32))
        source = {name: source[name].take(rec_idx)
                  for name in ("topic", "partition", "offset", "record_timestamp", "object", "line")}
        return _batch(out, source), rec_idx, fallback

    def decode_lines(self, data, start: int, line_no: int, max_records: int, uri: str,
                     plain: tuple[str, int, int] | None = None) -> tuple[pa.RecordBatch, pa.Array, dict]:
        """Lines of an archive object's decompressed bytes from byte `start` (at most
        `max_records` records; `line_no` lines before `start`), read and decoded in one pass
        (native/cdc_replay_native/src/archive.rs): (events of the records taken, each event's
        record ordinal, the extension's dict: `fallback` (ordinal, line number, start, end) of
        the lines the Python path must read, `consumed`, `line_no`, `records`, `last`).
        `plain`: (topic, base offset, last line number) of a TiCDC storage-sink file, whose lines
        are the values (layouts.ticdc_storage.offset)."""
        out = cdc_replay_native.decode_lines(self.decoder, data, start, line_no, max_records, plain)
        left = len(out["fallback"])
        self.native_records += out["records"] - left
        self.python_records += left
        events = out["events"]
        topic = out["topic"]
        source = {
            "topic": _strings(topic, pa.string(), events),
            "partition": pa.Array.from_buffers(pa.int32(), events, [None, pa.py_buffer(out["partition"])]),
            "offset": pa.Array.from_buffers(pa.int64(), events, [None, pa.py_buffer(out["offset"])]),
            "record_timestamp": _int64s(out["record_timestamp"], events),
            "object": pa.repeat(pa.scalar(uri, pa.string()), events),
            "line": pa.Array.from_buffers(pa.int64(), events, [None, pa.py_buffer(out["line"])]),
        }
        rec_idx = pa.array(np.frombuffer(out["rec_idx"], dtype=np.int32))
        return _batch(out, source), rec_idx, out


def _batch(out: dict, source: dict[str, pa.Array]) -> pa.RecordBatch:
    """The extension's buffers (and the events' source columns) as a DECODED_ARROW_SCHEMA batch."""
    events = out["events"]
    fields = EVENT_SCHEMA
    extras_type = fields.field("extras").type
    extras_child = pa.StructArray.from_arrays(
        [_strings(out["extra_keys"], pa.string(), len(out["extra_keys"][1]) // 4 - 1),
         _strings(out["extra_values"], pa.string(), len(out["extra_values"][1]) // 4 - 1)],
        fields=[extras_type.key_field, extras_type.item_field])
    key_items = _strings(out["key_items"], pa.string(), len(out["key_items"][1]) // 4 - 1)
    columns = {
        "kind": _strings(out["kind"], pa.string(), events),
        "op": _strings(out["op"], pa.string(), events),
        "commit_ts": _int64s(out["commit_ts"], events),
        "execute_ts_ms": _int64s(out["execute_ts_ms"], events),
        "database": _strings(out["database"], pa.string(), events),
        "table": _strings(out["table"], pa.string(), events),
        "key_columns": _list(out["key_columns"], fields.field("key_columns").type, events, key_items),
        "before": _image(out, "before", fields.field("before").type),
        "after": _image(out, "after", fields.field("after").type),
        "watermark_ts": _int64s(out["watermark_ts"], events),
        "tx_id": _strings(out["tx_id"], pa.string(), events),
        "extras": _list(out["extras"], extras_type, events, extras_child),
        "event_index": pa.array(np.frombuffer(out["event_index"], dtype=np.int32)),
    }
    if "position" in out:  # canal-protobuf's binlog positions, oceanbase-avro's record ids
        positions = pa.Array.from_buffers(pa.int64(), len(out["position_items"]) // 8,
                                          [None, pa.py_buffer(out["position_items"])])
        columns["position"] = _list(out["position"], fields.field("position").type, events, positions)
    columns.update(source)
    arrays = []
    for field in DECODED_ARROW_SCHEMA:
        array = columns.get(field.name)
        if array is None:
            array = pa.nulls(events, field.type)
        elif array.type != field.type:
            array = array.cast(field.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=DECODED_ARROW_SCHEMA)


NativeCanalJson = NativeDecoder  # its name when canal-json was the only compiled protocol


def merge(native: pa.RecordBatch, native_idx: pa.Array, python: pa.RecordBatch | None,
          python_idx: list[int]) -> pa.RecordBatch:
    """Both paths' rows in record order (each path keeps its records' event order)."""
    if python is None or python.num_rows == 0:
        return native
    if native.num_rows == 0:
        return python
    python = python.select(native.schema.names)
    at = native_idx.to_numpy(zero_copy_only=False)
    wanted = np.asarray(python_idx, dtype=np.int32)
    if np.any(at[1:] < at[:-1]) or np.any(wanted[1:] < wanted[:-1]):  # not in record order: sort both
        order = np.argsort(np.concatenate([at, wanted]), kind="stable")
        return pa.Table.from_batches([native, python]).take(pa.array(order)).combine_chunks().to_batches()[0]
    # both in record order (the usual case: a few records the compiled decoder declined, e.g.
    # DDL): the native rows sliced where the Python rows go, joined by one copy instead of a
    # `take` of every row of the wide batch
    cuts = np.searchsorted(at, wanted, side="right")  # native rows before each Python row
    pieces, done, start = [], 0, 0
    for stop in np.flatnonzero(np.append(cuts[1:] != cuts[:-1], True)) + 1:  # Python rows by cut
        cut = int(cuts[start])
        pieces += [native.slice(done, cut - done), python.slice(start, stop - start)]
        done, start = cut, int(stop)
    pieces.append(native.slice(done))
    return pa.concat_batches([p for p in pieces if p.num_rows])


def decoder_for(codec, mode: str):
    """A NativeDecoder for the codec when `mode` allows and the extension is here, else None
    (said once in the executor's log)."""
    global _task
    try:
        path, why = choose(codec.name, codec.config, mode)
    except RuntimeError as e:  # CDC_REPLAY_DECODER=native here without the extension: the task fails saying so
        raise RuntimeError(f"{ENV}=native: {e}") from None
    decoder = NativeDecoder(codec) if path == "native" else None
    if decoder is None:
        log.info("decoding %s with the Python codec: %s", codec.name, why)
    _task = (decoder, path, why)
    return decoder


# the decoder of the task this Python worker runs (a worker runs one task at a time): set by
# decoder_for, read once by `task_report` at the task's end
_task: tuple | None = None

REPORT_TYPE = pa.struct([pa.field("path", pa.string()), pa.field("reason", pa.string()),
                         pa.field("loaded_from", pa.string()), pa.field("compiled_records", pa.int64()),
                         pa.field("python_records", pa.int64())])


def task_report(records: int) -> list[dict]:
    """What this task's decoder did, for its `aux` row (lean_decode): the path taken and why,
    where the extension came from, and the records each path decoded (`records`: all the
    task read; with the compiled decoder, those it did not take went to the Python codec; lines
    that are no record count in neither). Empty when no decoder was made (a task without objects)."""
    global _task
    if _task is None:
        return []
    decoder, path, why = _task
    _task = None
    if decoder is None:
        return [{"path": path, "reason": why, "loaded_from": None, "compiled_records": 0, "python_records": records}]
    return [{"path": path, "reason": why, "loaded_from": LOADED_FROM, "compiled_records": decoder.native_records,
             "python_records": records - decoder.native_records}]

