"""Benchmark (not a test): the Kafka-record writer (spark_apps/outputs/kafka_records.py
`write_topics_fn`) in one process, no Spark, with the compiled encoder on and off
($CDC_REPLAY_NATIVE_ENCODE) for canal-json (default), open-protocol, craft, oceanbase-avro, avro or
canal-protobuf (`--protocol`; avro's registry is a directory under the run's temporary folder), each with the snapshot's `prepare` (the projector) and the
topics' (`precision_from_history`).

The writer's input is built as Spark hands it: a generated archive of the protocol (`generate`,
DDL and a keyless table) decoded by the Python codec, placed in three output partitions by
commit ts, ordered, in Arrow batches of 10,000 rows (Spark's `maxRecordsPerBatch`); every row
event goes through both hooks (the snapshot would write only the last change per key: the
cost per row is what is measured; oceanbase-avro's updates go in as inserts of their after
image, as the snapshot writes every row: the codec refuses an update whose images differ in
columns, as a projected after image and the unprojected before image may). The schema history is the archive's DDL applied in order.
Per run: wall and CPU seconds (`time.process_time`) of the writer over all
batches, the events encoded from Arrow (of which projected without dicts) and turned into
dicts, and whether the objects are byte-identical across the switch. Run it flock'd, on a
machine as quiet as can be (the load is printed).

    flock /tmp/heavy.lock .venv/bin/python bench/bench_writer.py --transactions 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import pyarrow as pa

from cdc_codecs import get_codec
from cdc_codecs.base import decode_record
from cdc_codecs.events import EVENT_SCHEMA, Kind
from spark_apps import native_encode, storage
from spark_apps.ddl import SchemaHistory
from spark_apps.generate import generate
from spark_apps.outputs.kafka_records import write_topics_fn
from spark_apps.snapshot import precision_from_history, projector

PROTOCOL_OPTIONS = {"canal-json": {"enable-tidb-extension": "true"}, "open-protocol": {}, "craft": {},
                    "oceanbase-avro": {}, "canal-protobuf": {},
                    "avro": {"enable-tidb-extension": "true"}}  # + schema-registry (`protocol_options`)
SCHEMA = pa.schema([*EVENT_SCHEMA, pa.field("out_topic", pa.string()), pa.field("out_partition", pa.int32()),
                    pa.field("sort_point", pa.list_(pa.int64())), pa.field("sort_rank", pa.int32()),
                    pa.field("timeline", pa.list_(pa.int64()))])


def protocol_options(protocol: str, work: str) -> dict:
    """The codec options of `protocol`; avro's registry is a directory in `work`."""
    registry = {"schema-registry": f"file://{work}/registry"} if protocol == "avro" else {}
    return {**PROTOCOL_OPTIONS[protocol], **registry}


def writer_input(transactions: int, protocol: str = "canal-json", partitions: int = 3,
                 options: dict | None = None) -> tuple[list[pa.RecordBatch], SchemaHistory, int]:
    options = PROTOCOL_OPTIONS[protocol] if options is None else options
    generated = generate(transactions=transactions, partitions=3, seed=1, keyless=protocol != "avro", options=options,
                         protocol=protocol, duplicate_rate=0.0)  # the replay drops duplicates before the writer
    codec = get_codec(protocol, options)
    events = [e for r in generated.records for e in decode_record(codec, r) if e["kind"] in (Kind.ROW, Kind.DDL)]
    if protocol == "oceanbase-avro":  # it refuses an update whose before image the projection leaves
        events = [{**e, "op": "insert", "before": None} if e["op"] == "update" else e for e in events]
    history = SchemaHistory()
    rows = []
    ts = 0
    for e in events:
        # an Avro DELETE carries no commit ts (the one before it is used); Canal and OceanBase carry
        # none: their binlog positions / record ids order the events
        ts = ts if e["commit_ts"] is None else e["commit_ts"]
        point = [ts] if e["commit_ts"] is not None or not e.get("position") else list(e["position"])
        if e["kind"] == Kind.DDL:
            history.apply(e["ddl_query"], point, e["database"])
            places, rank = range(partitions), 2
        else:
            places, rank = [sum(point) % partitions], 1
        rows += [{**e, "out_topic": "out", "out_partition": p, "sort_point": point, "timeline": point,
                  "sort_rank": rank} for p in places]
    rows.sort(key=lambda r: (r["out_partition"], r["sort_point"], r["sort_rank"], r["partition"], r["offset"],
                             r["event_index"]))
    return pa.Table.from_pylist(rows, SCHEMA).to_batches(max_chunksize=10_000), history, len(rows)


def objects(base: str) -> dict[str, bytes]:
    return {storage.relative(i.uri, base): storage.read_bytes(i.uri) for i in storage.list_objects(base)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--protocol", choices=sorted(PROTOCOL_OPTIONS), default="canal-json")
    args = parser.parse_args()
    protocol = args.protocol
    work = tempfile.mkdtemp(prefix="bench_writer_")
    options = protocol_options(protocol, work)
    batches, history, n = writer_input(args.transactions, protocol, options=options)
    schemas = {(s.database.lower(), s.name.lower()): s for s in history.tables.values() if s.columns_known}
    print(f"{n:,} writer rows in {len(batches)} batches; load average {os.getloadavg()[0]:.2f}")
    print("| prepare | switch | wall s | CPU s | from Arrow (projected) | as dicts | compiled | Python |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for switch in ("1", "0"):  # warm-up, not measured: first imports, the extension's first call
            os.environ[native_encode.ENV] = switch
            for make in (projector(schemas), precision_from_history(history)):
                for _ in write_topics_fn(protocol, options, os.path.join(work, "warm"), 100_000, make)(
                        iter(batches[:1])):
                    pass
        shutil.rmtree(os.path.join(work, "warm"), ignore_errors=True)
        for r in range(args.rounds):
            for name, make in (("snapshot (projector)", lambda: projector(schemas)),
                               ("topics (precision_from_history)", lambda: precision_from_history(history))):
                out = {}
                for switch in ("1", "0") if r % 2 == 0 else ("0", "1"):
                    os.environ[native_encode.ENV] = switch
                    base = os.path.join(work, f"{r}-{switch}")
                    fn = write_topics_fn(protocol, options, base, 100_000, make())
                    wall, cpu = time.perf_counter(), time.process_time()
                    for _ in fn(iter(batches)):
                        pass
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    stats = fn.counts
                    out[switch] = objects(base)
                    shutil.rmtree(base)
                    print(f"| {name} | {switch} | {wall:.2f} | {cpu:.2f} | {stats.arrow:,} ({stats.projected:,}) | "
                          f"{stats.dicts:,} | {stats.native:,} | {stats.python:,} |", flush=True)
                assert out["1"] == out["0"], "the switch changed the objects"
        print(f"objects byte-identical across the switch; load average after {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
