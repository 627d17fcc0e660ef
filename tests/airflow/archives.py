"""A generated archive spread over two hours of archive time, for the scheduled DAG.

The generator's history spans a few seconds of commit time. Here the second half of it (every
event committed after the middle watermark) is moved one hour later — commit ts, execute time,
watermarks and record timestamps — by decoding each record and encoding it again (canal-json
re-encodes byte for byte), so commit time and archive time agree. The records of each source
partition up to its first moved record are archived under `.../dt=2026-01-01/hour=00/`, the rest
under `hour=01/`, in Kafka Connect's layout `<topic>/<partition>/dt=.../hour=.../<object>`. Late
redeliveries of early events therefore sit in hour 01 with their original commit ts, as they
would in a real archive. Hour 02 holds one resolved-ts watermark at 02:00:00 per partition (TiCDC
keeps sending them while idle), plus the corrupt records asked for.
"""

from __future__ import annotations

import dataclasses
import gzip

from cdc_codecs import Kind, KafkaRecord, get_codec, new_event
from cdc_codecs.archive import format_record

from spark_apps import storage
from spark_apps.generate import Generated, generate

HOUR_MS = 3_600_000
START_MS = 1767225600000  # 2026-01-01T00:00:00Z
OPTIONS = {"enable-tidb-extension": "true"}


@dataclasses.dataclass
class TwoHourArchive:
    generated: Generated
    objects: dict  # hour -> [uri, ...]
    records: dict  # hour -> number of records
    split_ts: int  # events above it were moved one hour later

    def changes(self, hour: int) -> list[tuple]:
        """(commit ts, table, op, key values) of the row changes committed in that hour, as archived."""
        out = []
        for event in self.generated.events:
            if event["kind"] != "row":
                continue
            ts = event["commit_ts"] + (HOUR_MS << 18 if event["commit_ts"] > self.split_ts else 0)
            if (ts >> 18) // HOUR_MS == START_MS // HOUR_MS + hour:
                image = event["after"] or event["before"]
                out.append((ts, event["table"], event["op"], next(c["value"] for c in image if c["name"] == "id")))
        return sorted(out)


def _event_ts(event: dict) -> int | None:
    return event.get("commit_ts") or event.get("watermark_ts")


def _shift(event: dict) -> dict:
    event = dict(event)
    for field in ("commit_ts", "watermark_ts"):
        if event.get(field):
            event[field] += HOUR_MS << 18
    if event.get("execute_ts_ms"):
        event["execute_ts_ms"] += HOUR_MS
    if event.get("extras") and "canal.ts" in event["extras"]:
        event["extras"] = {**event["extras"], "canal.ts": str(int(event["extras"]["canal.ts"]) + HOUR_MS)}
    return event


def write_two_hour_archive(prefix: str, *, transactions: int = 160, partitions: int = 2, seed: int = 11,
                           corrupt_in_hour_2: int = 0, records_per_object: int = 60) -> TwoHourArchive:
    generated = generate(transactions=transactions, partitions=partitions, seed=seed)
    codec = get_codec("canal-json", OPTIONS)
    decoded = [(record, codec.decode(record)) for record in generated.records]
    watermarks = sorted({e["watermark_ts"] for _, events in decoded for e in events if e.get("watermark_ts")})
    split = watermarks[len(watermarks) // 2]
    by_hour: dict[int, list[KafkaRecord]] = {0: [], 1: [], 2: []}
    moved_partitions: set = set()
    for record, events in decoded:
        late = any((_event_ts(e) or 0) > split for e in events)
        if late:
            messages = list(codec.encode([_shift(e) for e in events], topic=record.topic, partition=record.partition))
            assert len(messages) == 1
            record = KafkaRecord(record.topic, record.partition, record.offset, (record.timestamp or 0) + HOUR_MS,
                                 messages[0].key, messages[0].value, messages[0].headers)
            moved_partitions.add(record.partition)
        by_hour[1 if record.partition in moved_partitions else 0].append(record)
    resolved = (START_MS + 2 * HOUR_MS) << 18
    for partition in range(partitions):
        last = max(r.offset for r in generated.records if r.partition == partition)
        watermark = new_event(Kind.WATERMARK, watermark_ts=resolved, execute_ts_ms=resolved >> 18)
        message, = codec.encode([watermark], topic="shop", partition=partition)
        by_hour[2].append(KafkaRecord("shop", partition, last + 1, START_MS + 2 * HOUR_MS, message.key, message.value,
                                      message.headers))
        if partition == 0:
            for i in range(corrupt_in_hour_2):  # values that are not canal-json
                by_hour[2].append(KafkaRecord("shop", 0, last + 2 + i, None, None, b"\x00not canal-json"))
    objects: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for hour, records in by_hour.items():
        for partition in range(partitions):
            chunk_source = [r for r in records if r.partition == partition]
            for start in range(0, len(chunk_source), records_per_object):
                chunk = chunk_source[start:start + records_per_object]
                uri = storage.join(prefix, "shop", str(partition), "dt=2026-01-01", f"hour={hour:02d}",
                                   f"shop+{partition}+{chunk[0].offset:020d}.jsonl.gz")
                storage.write_bytes(uri, gzip.compress(b"\n".join(format_record(r) for r in chunk) + b"\n"))
                objects[hour].append(uri)
    return TwoHourArchive(generated, {h: sorted(u) for h, u in objects.items()},
                          {h: len(r) for h, r in by_hour.items()}, split)
