"""Benchmark (not a test): decode speed of every protocol beside canal-json, same events, same run.

N row events of one 10-column table (70% INSERT, 20% UPDATE, 10% DELETE; ints, BIGINT
UNSIGNED, DECIMAL, DOUBLE, DATETIME, VARCHAR, TEXT with NULLs, ENUM, VARBINARY) are encoded in
each protocol (one partition, each protocol's default batching), then decoded:

  (a) pure Python, one process: `codec.decode(record)` for every record; CPU time of the
      process (other load on the machine matters less), best of `--rounds` rounds;
  (b) one process, as the replay decodes: `spark_apps.archive_io.decode_records_fn` (the
      function the replay runs in `mapInArrow`) over Arrow batches of the records, with the
      compiled decoder where the protocol has one (`native_decode.PROTOCOLS`) and with
      CDC_REPLAY_DECODER=python for every protocol; CPU s of the process, best of `--rounds`;
  (c) Spark local[2]: a cached DataFrame of the records, decoded by
      `spark_apps.archive_io.decode_records_fn` in `mapInArrow`, forced with
      `df.write.format("noop")`; wall time.

Events/s counts decoded events (an avro UPDATE decodes to its new row only and an avro DELETE
to its key columns: avro has less to decode). Prints Markdown tables; bench/RESULTS.md keeps
the figures with the machine, date and command.

    .venv/bin/python bench/bench_codecs.py --events 100000 [--no-spark] [--no-pure] [--native-only] [--profile craft,avro]

Adding a protocol: one line in PROTOCOLS.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import pstats
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import numpy as np  # noqa: E402

from cdc_codecs import encode_records, get_codec, protocols  # noqa: E402
from cdc_codecs.events import ColumnFlag, Kind, Op, column, new_event  # noqa: E402
from cdc_codecs.tso import physical_ms  # noqa: E402

REGISTRY = "<registry>"
# (label, protocol, options): canal-json first, the baseline
PROTOCOLS = [
    ("canal-json", "canal-json", {"enable-tidb-extension": "true"}),
    ("canal-json/canal", "canal-json", {"flat-message-flavor": "canal"}),
    ("open-protocol", "open-protocol", {}),
    ("avro", "avro", {"enable-tidb-extension": "true", "schema-registry": REGISTRY}),
    ("canal-protobuf", "canal-protobuf", {}),
    ("oceanbase-avro", "oceanbase-avro", {}),
    ("craft", "craft", {}),
]

PK = ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY
NULLABLE = ColumnFlag.NULLABLE


def image(rng: random.Random, key: int) -> list[dict]:
    return [
        column("id", str(key), "bigint", PK),
        column("user_id", str(rng.randrange(1, 10**6)), "int", NULLABLE),
        column("big", str(rng.randrange(2**64)), "bigint unsigned", NULLABLE | ColumnFlag.UNSIGNED),
        column("amount", f"{rng.randrange(-10**9, 10**9) / 100:.2f}", "decimal(12,2)", NULLABLE),
        column("score", np.format_float_positional(rng.random() * 1000, unique=True, trim="-"), "double", NULLABLE),
        column("created", "2024-05-%02d 12:%02d:%02d" % (rng.randrange(1, 29), rng.randrange(60), rng.randrange(60)),
               "datetime", NULLABLE),
        column("name", "user-%d" % rng.randrange(10**6), "varchar(64)", NULLABLE),
        column("note", None if rng.random() < 0.5 else "some text é " * rng.randrange(1, 4), "text", NULLABLE),
        column("state", str(rng.randrange(1, 4)), "enum('new','paid','sent')", NULLABLE, None),
        column("digest", rng.randbytes(16), "varbinary(16)", NULLABLE | ColumnFlag.BINARY),
    ]


def with_labels(img: list[dict]) -> list[dict]:
    for c in img:
        if c["name"] == "state":
            c["label"] = ("new", "paid", "sent")[int(c["value"]) - 1]
    return img


def events(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out, live = [], []
    ts = 449_500_000_000_000_000
    for i in range(n):
        ts += rng.randrange(1, 5000)
        roll = rng.random()
        op = Op.INSERT if roll < 0.7 or len(live) < 10 else Op.UPDATE if roll < 0.9 else Op.DELETE
        if op == Op.INSERT:
            key = i
            live.append(key)
            before, after = None, with_labels(image(rng, key))
        else:
            key = live[rng.randrange(len(live))]
            before = with_labels(image(rng, key))
            after = with_labels(image(rng, key)) if op == Op.UPDATE else None
        out.append(new_event(Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=physical_ms(ts), database="shop",
                             table="orders", key_columns=["id"], before=before, after=after))
    return out


def options_for(options: dict, registry: str) -> dict:
    return {k: registry if v == REGISTRY else v for k, v in options.items()}


def encode_all(stream: list[dict], registry: str) -> dict[str, list]:
    out = {}
    for label, protocol, options in PROTOCOLS:
        codec = get_codec(protocol, options_for(options, registry))
        out[label] = encode_records(codec, stream, topic="orders", partitions=1)
    return out


def decode_python(protocol: str, options: dict, records: list, rounds: int) -> tuple[float, int]:
    """Best CPU seconds over `rounds` of decoding every record with a fresh codec."""
    best, count = float("inf"), 0
    for _ in range(rounds):
        codec = get_codec(protocol, options)
        gc.collect()
        started = time.process_time()
        count = 0
        for record in records:
            count += len(codec.decode(record))
        best = min(best, time.process_time() - started)
    return best, count


def record_batches(records: list) -> list:
    """The records as the Arrow batches mapInArrow hands decode_records_fn (BATCH_ROWS each)."""
    import pyarrow as pa

    from spark_apps.archive_io import BATCH_ROWS

    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.int64()), ("key", pa.binary()), ("value", pa.binary())])
    return [pa.RecordBatch.from_pydict({
        "topic": [r.topic for r in chunk], "partition": [r.partition for r in chunk],
        "offset": [r.offset for r in chunk], "timestamp": [r.timestamp for r in chunk],
        "key": [r.key for r in chunk], "value": [r.value for r in chunk]}, schema=schema)
        for chunk in (records[i:i + BATCH_ROWS] for i in range(0, len(records), BATCH_ROWS))]


def decode_arrow(protocol: str, options: dict, batches: list, rounds: int, mode: str) -> tuple[float, int, str]:
    """Best CPU seconds over `rounds` of decode_records_fn over the batches (decoder `mode`),
    the rows out (quarantine rows would count: there are none) and the path taken."""
    from spark_apps import native_decode
    from spark_apps.archive_io import decode_records_fn

    os.environ[native_decode.ENV] = mode
    path = native_decode.choose(protocol, options)[0]
    best, count = float("inf"), 0
    try:
        for _ in range(rounds):
            fn = decode_records_fn(protocol, options)
            gc.collect()
            started = time.process_time()
            count = sum(b.num_rows for b in fn(iter(batches)))
            best = min(best, time.process_time() - started)
    finally:
        os.environ.pop(native_decode.ENV, None)
    return best, count, path


def parse_floor(protocol: str, options: dict, records: list, rounds: int) -> float | None:
    """Best CPU seconds of only the parse a Python-object decoder cannot avoid, no canonical
    assembly: fastavro's C reader per record (avro: key and value; oceanbase-avro), or upb's
    protobuf parse of Packet, Messages, Entry and RowChange with every column value read
    (canal-protobuf). None for the other protocols. Any design built on these parsers (per
    record, per batch, or in `mapInArrow`) costs at least this."""
    codec = get_codec(protocol, options)
    if protocol == "avro":
        def parse(record):
            if record.key:
                codec._read(record.key, "key")
            if record.value and record.value[:1] == b"\x00":
                codec._read(record.value, "value")
    elif protocol == "oceanbase-avro":
        def parse(record):
            codec._read(record.value)
    elif protocol == "canal-protobuf":
        from cdc_codecs.canal_protobuf import pb

        def parse(record):
            packet = pb.Packet()
            packet.ParseFromString(record.value)
            messages = pb.Messages()
            messages.ParseFromString(packet.body)
            for raw in messages.messages:
                entry = pb.Entry()
                entry.ParseFromString(raw)
                change = pb.RowChange()
                change.ParseFromString(entry.storeValue)
                for row in change.rowDatas:
                    for column in row.beforeColumns:
                        column.value
                    for column in row.afterColumns:
                        column.value
    else:
        return None
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        started = time.process_time()
        for record in records:
            parse(record)
        best = min(best, time.process_time() - started)
    return best


def profile(protocol: str, options: dict, records: list, top: int = 18) -> None:
    codec = get_codec(protocol, options)
    for record in records[:2000]:  # warm the caches, as a long decode is
        codec.decode(record)
    profiler = cProfile.Profile()
    profiler.enable()
    for record in records:
        codec.decode(record)
    profiler.disable()
    print(f"\n### cProfile: {protocol} {options or ''} ({len(records):,} records, tottime order)\n\n```")
    pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(top)
    print("```")


def _records_only(batches):
    """The floor: records moved to a Python worker and read (`to_pydict`, as decode_records_fn
    does), nothing decoded or returned."""
    for batch in batches:
        batch.to_pydict()
    return iter(())


def bench_spark(encoded: dict[str, list], registry: str, master: str, repeat: int) -> list[tuple[str, float, int, float]]:
    """(label, best decode seconds, events, best floor seconds) per protocol. All DataFrames
    are cached first and the rounds go round-robin over the protocols, so a change in the
    machine's load hits every protocol alike; the best round counts."""
    from spark_apps.archive_io import decode_records_fn
    from spark_apps.replay import build_session
    from spark_apps.schema import DECODED_STRUCT

    spark = build_session(master, "cdc-replay-bench-codecs", ["spark.driver.memory=6g"])
    print(f"Spark {spark.version}, master {master}", file=sys.stderr)

    def timed(df) -> float:
        started = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    runs = {}
    for label, protocol, options in PROTOCOLS:
        rows = [(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value) for r in encoded[label]]
        df = spark.createDataFrame(
            rows, "topic string, partition int, offset long, timestamp long, key binary, value binary")
        df = df.repartition(spark.sparkContext.defaultParallelism * 2).cache()
        df.count()
        decoded = df.mapInArrow(decode_records_fn(protocol, options_for(options, registry)), DECODED_STRUCT)
        floor = df.mapInArrow(_records_only, DECODED_STRUCT)
        timed(decoded)  # warm the Python workers and the codec's caches
        runs[label] = (decoded, floor, decoded.count())
    best = {label: [float("inf"), float("inf")] for label in runs}
    for _ in range(repeat):
        for label, (decoded, floor, _) in runs.items():
            best[label][0] = min(best[label][0], timed(decoded))
            best[label][1] = min(best[label][1], timed(floor))
    spark.stop()
    return [(label, best[label][0], runs[label][2], best[label][1]) for label in runs]


def table(results: list[tuple], sizes: dict[str, float], unit: str, base: str = "canal-json") -> None:
    """Markdown table; a 4th element per result is the Spark floor (records to Python only).
    `base`: the label of the row the ratios are to."""
    base_label, base = base, next(r[2] / r[1] for r in results if r[0] == base)
    floor = len(results[0]) > 3
    print(f"| protocol | bytes/event | {unit} | events/s | vs {base_label} |" + (" floor s |" if floor else "")
          + "\n|---|---:|---:|---:|---:|" + ("---:|" if floor else ""))
    for label, seconds, n, *rest in results:
        rate = n / seconds
        print(f"| {label} | {sizes[label]:,.0f} | {seconds:.2f} | {rate:,.0f} | {rate / base:.2f}x |"
              + (f" {rest[0]:.2f} |" if rest else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="pure-Python rounds (best is reported)")
    ap.add_argument("--spark-repeat", type=int, default=3, help="timed Spark rounds over all protocols (best)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-pure", action="store_true", help="skip (a), the codecs alone")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--profile", default="", help="comma-separated labels to profile with cProfile")
    ap.add_argument("--native-only", action="store_true",
                    help="(b): only the compiled paths (no Python codec runs, no parse floors): minutes less")
    args = ap.parse_args()

    missing = set(protocols()) - {p for _, p, _ in PROTOCOLS}
    if missing:
        print(f"warning: registered protocols not benchmarked: {sorted(missing)}", file=sys.stderr)
    registry = "file://" + tempfile.mkdtemp(prefix="bench-registry-")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.platform()}; {time.strftime('%Y-%m-%d')}; load average {os.getloadavg()[0]:.1f}")
    stream = events(args.events)
    ops = {op: sum(e["op"] == op for e in stream) for op in (Op.INSERT, Op.UPDATE, Op.DELETE)}
    print(f"events: {len(stream):,} rows of shop.orders (10 columns): {ops}")
    encoded = encode_all(stream, registry)
    sizes = {label: sum(len(r.value or b"") + len(r.key or b"") for r in recs) / len(stream)
             for label, recs in encoded.items()}
    print("records per protocol: " + ", ".join(f"{k} {len(v):,}" for k, v in encoded.items()))

    if not args.no_pure:
        results = []
        for label, protocol, options in PROTOCOLS:
            seconds, n = decode_python(protocol, options_for(options, registry), encoded[label], args.rounds)
            results.append((label, seconds, n))
        print(f"\n(a) pure Python, one process, codec.decode per record (CPU s, best of {args.rounds}):\n")
        table(results, sizes, "CPU s")

    for label in filter(None, args.profile.split(",")):
        _, protocol, options = next(p for p in PROTOCOLS if p[0] == label)
        profile(protocol, options_for(options, registry), encoded[label])

    results = []
    for label, protocol, options in PROTOCOLS:
        batches = record_batches(encoded[label])
        for mode in ("auto",) if args.native_only else ("auto", "python"):
            seconds, n, path = decode_arrow(protocol, options_for(options, registry), batches, args.rounds, mode)
            results.append((f"{label} ({path})", seconds, n))
            sizes[results[-1][0]] = sizes[label]
            if path == "python":
                break  # no compiled path: the python run would repeat this one
    for label, protocol, options in [] if args.native_only else PROTOCOLS:
        seconds = parse_floor(protocol, options_for(options, registry), encoded[label], args.rounds)
        if seconds is not None:
            n = next(r[2] for r in results if r[0].startswith(label + " ("))
            results.append((f"{label} (parse only)", seconds, n))
            sizes[results[-1][0]] = sizes[label]
    print(f"\n(b) one process, decode_records_fn over Arrow batches of the records, the compiled decoder "
          f"where there is one (native) and the Python codec (python); 'parse only': the parser a Python "
          f"decoder of that protocol cannot avoid, nothing assembled (CPU s, best of {args.rounds}):\n")
    table(results, sizes, "CPU s", base="canal-json (native)")

    if not args.no_spark:
        results = bench_spark(encoded, registry, args.master, args.spark_repeat)
        print(f"\n(c) Spark {args.master}, decode_records_fn in mapInArrow over a cached DataFrame, "
              f"noop write (wall s, best of {args.spark_repeat} round-robin rounds; floor: records moved "
              f"to Python and read, nothing decoded):\n")
        table(results, sizes, "wall s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
