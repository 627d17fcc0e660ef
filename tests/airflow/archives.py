"""Generated archives spread over hours of archive time, for the scheduled DAG.

The generator's history spans a few seconds of commit time. Here it is cut into segments at
watermarks and segment k is moved `hours[k]` hours later — commit ts, execute time, watermarks and
record timestamps — by decoding each record and encoding it again (canal-json re-encodes byte for
byte), so commit time and archive time agree. Each source partition's records are archived under
`.../dt=2026-01-01/hour=HH/` of the latest segment seen so far on that partition, in Kafka Connect's
layout `<topic>/<partition>/dt=.../hour=.../<object>`. Late redeliveries of early events therefore
sit in a later hour with their original commit ts, as they would in a real archive. The tail hour,
if any, holds one resolved-ts watermark at its start per partition (TiCDC keeps sending them while
idle), plus the corrupt records asked for. Hours no segment moves to hold no object at all.

`write_two_hour_archive`: segments at hours 00 and 01, the tail at 02.
"""

from __future__ import annotations

import bisect
import dataclasses
import gzip

from cdc_codecs import Kind, KafkaRecord, get_codec, new_event
from cdc_codecs.archive import format_record

from spark_apps import storage
from spark_apps.generate import Generated, generate

HOUR_MS = 3_600_000
START_MS = 1767225600000  # 2026-01-01T00:00:00Z
OPTIONS = {"enable-tidb-extension": "true"}


def hour_tso(hour: int) -> int:
    """The TSO of 2026-01-01T<hour>:00:00Z."""
    return (START_MS + hour * HOUR_MS) << 18


@dataclasses.dataclass
class HourlyArchive:
    generated: Generated
    objects: dict  # hour -> [uri, ...] (every hour from 00 to the last, empty ones too)
    records: dict  # hour -> number of records
    splits: list  # watermarks: events above splits[k - 1] (and up to splits[k]) are in segment k
    hours: tuple  # segment k is moved hours[k] hours later

    @property
    def split_ts(self) -> int:
        return self.splits[0]

    def shift_of(self, ts: int | None) -> int:
        return self.hours[bisect.bisect_left(self.splits, ts or 0)]

    def shifted(self) -> list[dict]:
        """Every row and DDL event of the history with the commit ts it has in the archive."""
        return [{**e, "commit_ts": e["commit_ts"] + ((self.shift_of(e["commit_ts"]) * HOUR_MS) << 18)}
                for e in self.generated.events if e["kind"] in ("row", "ddl")]

    def full_history(self) -> list[dict]:
        """shifted() after the changes a base export holds (none without one): the whole history."""
        return self.generated.history_before + self.shifted()

    def changes(self, hour: int) -> list[tuple]:
        """(commit ts, table, op, key values) of the row changes committed in that hour, as archived."""
        out = []
        for event in self.shifted():
            if event["kind"] != "row":
                continue
            if (event["commit_ts"] >> 18) // HOUR_MS == START_MS // HOUR_MS + hour:
                image = event["after"] or event["before"]
                out.append((event["commit_ts"], event["table"], event["op"],
                            next(c["value"] for c in image if c["name"] == "id")))
        return sorted(out)


TwoHourArchive = HourlyArchive


def _event_ts(event: dict) -> int | None:
    return event.get("commit_ts") or event.get("watermark_ts")


def _shift(event: dict, hours: int) -> dict:
    event = dict(event)
    for field in ("commit_ts", "watermark_ts"):
        if event.get(field):
            event[field] += (hours * HOUR_MS) << 18
    if event.get("execute_ts_ms"):
        event["execute_ts_ms"] += hours * HOUR_MS
    if event.get("extras") and "canal.ts" in event["extras"]:
        event["extras"] = {**event["extras"], "canal.ts": str(int(event["extras"]["canal.ts"]) + hours * HOUR_MS)}
    return event


def write_hourly_archive(prefix: str, *, hours: tuple = (0, 1), tail_hour: int | None = 2, transactions: int = 160,
                         partitions: int = 2, seed: int = 11, corrupt_in_tail: int = 0,
                         records_per_object: int = 60, ddl_rate: float = 0.02,
                         base_export: bool = False) -> HourlyArchive:
    """`base_export`: a mid-stream archive with a full export taken just before it
    (`generate(mid_stream=True, base_export=True)`; its TSO falls in hour 00, which is not moved;
    write it with spark_apps.generate.write_base_export)."""
    assert list(hours) == sorted(set(hours)) and hours[0] == 0
    generated = generate(transactions=transactions, partitions=partitions, seed=seed, ddl_rate=ddl_rate,
                         mid_stream=base_export, base_export=base_export)
    codec = get_codec("canal-json", OPTIONS)
    decoded = [(record, codec.decode(record)) for record in generated.records]
    watermarks = sorted({e["watermark_ts"] for _, events in decoded for e in events if e.get("watermark_ts")})
    splits = [watermarks[len(watermarks) * k // len(hours)] for k in range(1, len(hours))]
    last_hour = tail_hour if tail_hour is not None else hours[-1]
    by_hour: dict[int, list[KafkaRecord]] = {h: [] for h in range(last_hour + 1)}
    partition_hour: dict = {}
    for record, events in decoded:
        shift = max(hours[bisect.bisect_left(splits, _event_ts(e) or 0)] for e in events) if events else 0
        if shift:
            messages = list(codec.encode([_shift(e, shift) for e in events], topic=record.topic,
                                         partition=record.partition))
            assert len(messages) == 1
            record = KafkaRecord(record.topic, record.partition, record.offset,
                                 (record.timestamp or 0) + shift * HOUR_MS, messages[0].key, messages[0].value,
                                 messages[0].headers)
        partition_hour[record.partition] = max(partition_hour.get(record.partition, 0), shift)
        by_hour[partition_hour[record.partition]].append(record)
    if tail_hour is not None:
        resolved = hour_tso(tail_hour)
        for partition in range(partitions):
            last = max(r.offset for r in generated.records if r.partition == partition)
            watermark = new_event(Kind.WATERMARK, watermark_ts=resolved, execute_ts_ms=resolved >> 18)
            message, = codec.encode([watermark], topic="shop", partition=partition)
            by_hour[tail_hour].append(KafkaRecord("shop", partition, last + 1, START_MS + tail_hour * HOUR_MS,
                                                  message.key, message.value, message.headers))
            if partition == 0:
                for i in range(corrupt_in_tail):  # values that are not canal-json
                    by_hour[tail_hour].append(KafkaRecord("shop", 0, last + 2 + i, None, None,
                                                          b"\x00not canal-json"))
    objects: dict[int, list[str]] = {h: [] for h in by_hour}
    for hour, records in by_hour.items():
        for partition in range(partitions):
            chunk_source = [r for r in records if r.partition == partition]
            for start in range(0, len(chunk_source), records_per_object):
                chunk = chunk_source[start:start + records_per_object]
                uri = storage.join(prefix, "shop", str(partition), "dt=2026-01-01", f"hour={hour:02d}",
                                   f"shop+{partition}+{chunk[0].offset:020d}.jsonl.gz")
                storage.write_bytes(uri, gzip.compress(b"\n".join(format_record(r) for r in chunk) + b"\n"))
                objects[hour].append(uri)
    return HourlyArchive(generated, {h: sorted(u) for h, u in objects.items()},
                         {h: len(r) for h, r in by_hour.items()}, splits, tuple(hours))


def topic_changes(output: str) -> list[tuple]:
    """(commit ts, table, op, id) of every row event in a topics output, decoded (sorted, repeats kept)."""
    from cdc_codecs.archive import is_archive_object, parse_line

    codec = get_codec("canal-json", OPTIONS)
    out = []
    for info in storage.list_objects(output):
        if is_archive_object(storage.relative(info.uri, output)):
            for line in storage.iter_lines(info.uri):
                for e in codec.decode(parse_line(line)):
                    if e["kind"] == "row":
                        image = e["after"] or e["before"]
                        out.append((e["commit_ts"], e["table"], e["op"],
                                    next(c["value"] for c in image if c["name"] == "id")))
    return sorted(out)


def write_two_hour_archive(prefix: str, *, transactions: int = 160, partitions: int = 2, seed: int = 11,
                           corrupt_in_hour_2: int = 0, records_per_object: int = 60) -> HourlyArchive:
    return write_hourly_archive(prefix, hours=(0, 1), tail_hour=2, transactions=transactions, partitions=partitions,
                                seed=seed, corrupt_in_tail=corrupt_in_hour_2, records_per_object=records_per_object)
