"""Benchmark (not a test): CPU seconds of `archive_io.decode_objects_fn` (the replay's per-object
read + decode, as it runs in `mapInArrow`) over a generated archive of one protocol, in one
process, with each decoder path back to back:

  python  CDC_REPLAY_DECODER=python: Python reads the lines, the codec decodes;
  native  the compiled line reader and decoder (archive.rs + the protocol's decoder);
  values  Python reads the lines, the compiled decoder decodes the values (the line reader off).

    .venv/bin/python bench/bench_objects.py --protocol canal-protobuf --transactions 20000 [--rounds 2]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from spark_apps import archive_io, native_decode  # noqa: E402
from spark_apps.generate import generate, write_archive  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", default="canal-protobuf")
    ap.add_argument("--transactions", type=int, default=20000)
    ap.add_argument("--records-per-object", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    gen = generate(transactions=args.transactions, partitions=2, seed=3, protocol=args.protocol, options={})
    uris = write_archive(gen.records, tempfile.mkdtemp(prefix="bench-objects-") + "/archive",
                         records_per_object=args.records_per_object)
    batch = pa.RecordBatch.from_pydict({"uri": [str(u) for u in uris]})
    print(f"{args.protocol}: {len(gen.records):,} records in {len(uris)} objects; load average {os.getloadavg()[0]:.1f}")
    lines = archive_io._native_lines
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for mode in ("python", "native", "values"):
            os.environ[native_decode.ENV] = "native" if mode == "values" else mode
            archive_io._native_lines = (lambda *a: None) if mode == "values" else lines
            fn = archive_io.decode_objects_fn(args.protocol, {})
            gc.collect()
            started = time.process_time()
            rows = sum(b.num_rows for b in fn(iter([batch])))
            best[mode] = min(best.get(mode, float("inf")), time.process_time() - started)
    archive_io._native_lines = lines
    print("\n| path | CPU s | rows | vs python |\n|---|---:|---:|---:|")
    for mode, seconds in best.items():
        print(f"| {mode} | {seconds:.2f} | {rows:,} | {best['python'] / seconds:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
