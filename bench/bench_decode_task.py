"""Benchmark (not a test): CPU seconds of one replay decode task's work without Spark, per
protocol, on archives of the same events (bench/engine_ab.py's `cdc-replay generate` runs):
`decode`, `archive_io.decode_objects_fn` alone (the objects read, the compiled decoder, the
batches), and `task`, that inside `lean_decode.written_to(leaned(...))` as stage 2 runs it
(lean rows, statistics, Parquet file). Rounds alternate the protocols in one process.

    PYTHONPATH=<checkout> .venv/bin/python bench/bench_decode_task.py ARCHIVE_DIR:PROTOCOL... [--rounds 3]

Which compiled extension runs is the one on PYTHONPATH (printed): run it twice, once per
build, to compare two builds. An archive of protocol avro reads its registry at DIR-registry
(engine_ab's layout).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

# the code measured is the checkout PYTHONPATH names (else the installed one): this script can
# time another checkout's code
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa  # noqa: E402

from engine_ab import protocol_options  # noqa: E402
from cdc_codecs import avro  # noqa: E402
from spark_apps import archive_io, lean_decode, native_decode, storage  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("archives", nargs="+", help="DIR:PROTOCOL")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("decode", "task"), help="one of the two measures")
    args = ap.parse_args()
    print(f"code: {os.path.dirname(archive_io.__file__)}, {os.path.dirname(avro.__file__)}; extension: {native_decode.cdc_replay_native.__file__}; "
          f"load average {os.getloadavg()[0]:.1f}")
    sources = []
    for item in args.archives:
        path, protocol = item.rsplit(":", 1)
        objects = storage.list_objects(os.path.abspath(path))
        batch = pa.RecordBatch.from_pydict({"uri": [o.uri for o in objects], "size": [o.size for o in objects]})
        sources.append((protocol, protocol_options(protocol, os.path.abspath(path)), batch))
    best: dict[tuple, list] = {}
    out = tempfile.mkdtemp(prefix="bench-decode-task-")
    for _ in range(args.rounds):
        for protocol, options, batch in sources:
            for measure in ("decode", "task"):
                if args.only and measure != args.only:
                    continue
                fn = archive_io.decode_objects_fn(protocol, options)
                if measure == "task":
                    fn = lean_decode.written_to(lean_decode.leaned(fn), out)
                gc.collect()
                wall, cpu = time.perf_counter(), time.process_time()
                rows = sum(b.num_rows for b in fn(iter([batch])))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                best.setdefault((protocol, measure), []).append((cpu, wall, rows))
    print("\n| protocol | measure | CPU s (rounds) | wall s (best) | rows out |\n|---|---|---|---:|---:|")
    for (protocol, measure), runs in best.items():
        cpus = ", ".join(f"{c:.2f}" for c, _, _ in runs)
        print(f"| {protocol} | {measure} | {min(c for c, _, _ in runs):.2f} ({cpus}) | "
              f"{min(w for _, w, _ in runs):.2f} | {runs[-1][2]:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
