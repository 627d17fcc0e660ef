"""Benchmark (not a test): one message at each default limit, and far beyond it, through the
replay's per-object read + decode (`archive_io.decode_objects_fn`, as it runs in `mapInArrow`),
in one process, with each decoder path. Prints the load average, wall and CPU seconds per case.

  at-columns   one canal-json row of 4,096 columns (--max-columns default)
  at-rows      one canal-json message of 100,000 rows of 3 columns (--max-rows default)
  over-columns one row of 200,000 columns: quarantined (counted, not decoded)
  over-rows    one message of 1,000,000 rows: quarantined
  bomb         a gzip object inflating 1,000 times (256 MiB of blank lines): stopped at the ratio

    flock /tmp/heavy.lock .venv/bin/python bench/limits.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402
import pyarrow as pa  # noqa: E402

from cdc_codecs.archive import format_record, object_name  # noqa: E402
from cdc_codecs.base import KafkaRecord  # noqa: E402
from cdc_codecs.tso import compose  # noqa: E402
from spark_apps import archive_io, native_decode, storage  # noqa: E402


def canal(columns: int, rows: int) -> bytes:
    names = [f"c{i}" for i in range(columns)]
    return orjson.dumps({
        "id": 0, "database": "db", "table": "t", "pkNames": ["c0"], "isDdl": False, "type": "INSERT",
        "es": 1767225600000, "ts": 1767225600001, "sql": "", "sqlType": {n: 4 for n in names},
        "mysqlType": {n: "int" for n in names}, "old": None,
        "data": [{n: str(r) for n in names} for r in range(rows)], "_tidb": {"commitTs": compose(1_000)}})


def write(folder: str, name: str, pieces: list[bytes]) -> str:
    c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    uri = os.path.join(folder, name, object_name("t", 0, 0))
    storage.write_bytes(uri, b"".join(c.compress(p) for p in pieces) + c.flush())
    return uri


def line(value: bytes) -> bytes:
    return format_record(KafkaRecord("t", 0, 0, 0, None, value)) + b"\n"


def main() -> int:
    limits = storage.settings()
    print(f"limits: {limits.max_columns} columns, {limits.max_rows} rows, ratio {limits.max_inflate_ratio:g}, "
          f"{limits.max_line_bytes} bytes per line")
    with tempfile.TemporaryDirectory() as folder:
        cases = {
            "at-columns": write(folder, "a", [line(canal(limits.max_columns, 1))]),
            "at-rows": write(folder, "b", [line(canal(3, limits.max_rows))]),
            "over-columns": write(folder, "c", [line(canal(200_000, 1))]),
            "over-rows": write(folder, "d", [line(canal(3, 1_000_000))]),
            "bomb": write(folder, "e", [line(canal(3, 1)), *([b"\n" * (1 << 20)] * 256)]),
        }
        print(f"load average before: {os.getloadavg()}")
        print(f"{'case':<13} {'decoder':<7} {'stored B':>10} {'rows':>8} {'quarantined':>11} {'wall s':>7} {'cpu s':>7}")
        for name, uri in cases.items():
            for decoder in ("python", "native"):
                os.environ[native_decode.ENV] = decoder
                fn = archive_io.decode_objects_fn("canal-json", {"enable-tidb-extension": "true"})
                batch = pa.RecordBatch.from_pydict({"uri": [uri], "size": [os.path.getsize(uri)]})
                wall, cpu = time.perf_counter(), time.process_time()
                out = pa.Table.from_batches(list(fn(iter([batch]))))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                kinds = out["kind"].to_pylist()
                print(f"{name:<13} {decoder:<7} {os.path.getsize(uri):>10,} {kinds.count('row'):>8,} "
                      f"{kinds.count('quarantine'):>11} {wall:>7.2f} {cpu:>7.2f}")
        print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
