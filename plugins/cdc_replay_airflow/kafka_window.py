"""The offsets a data interval reads from a kafka:// source (the scheduled DAG).

Intervals are chained by offsets, not recomputed from timestamps: an interval starts exactly
where the interval before it ended (its window record), and ends, per partition, at the first
offset whose record timestamp is >= the interval's end (Kafka's offsets_for_times), or at the
high watermark when no such record exists yet. So the windows of successive intervals are
gap-free and overlap-free whatever the record timestamps, and a rerun of an interval reads its
own recorded window again (the same records: the same output, nothing produced twice).

A window record, `<series home>/_kafka_windows/<start>-<end>.json`, is written before the
replay runs: a retry or rerun of the interval reuses it; the next interval finds it by name.

confluent-kafka is imported inside the functions (DAG files import this module at parse time).
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from cdc_replay_airflow.window import interval_label

log = logging.getLogger("cdc_replay")

FOLDER = "_kafka_windows"


class WindowError(ValueError):
    """The interval's window cannot be computed (say why, in one line)."""


def record_uri(home: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{home.rstrip('/')}/{FOLDER}/{interval_label(start)}-{interval_label(end)}.json"


def watermarks(servers: str, config: dict, topics: list[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermark of every partition of the topics."""
    from spark_apps.kafka_io import partition_watermarks

    consumer = _consumer(servers, config)
    try:
        return partition_watermarks(consumer, topics)
    except LookupError as e:
        raise WindowError(f"{e} on {servers}") from None
    finally:
        consumer.close()


def offsets_at(servers: str, config: dict, topics: list[str], moment: dt.datetime) -> dict[tuple[str, int], tuple[int, str]]:
    """Per partition: the first offset whose record timestamp is >= moment ("timestamp"), or the
    high watermark now when no record is that late yet ("high watermark")."""
    from confluent_kafka import TopicPartition

    marks = watermarks(servers, config, topics)
    consumer = _consumer(servers, config)
    try:
        ms = int(moment.timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(t, p, ms) for (t, p) in marks], timeout=30)
    finally:
        consumer.close()
    out = {}
    for tp in found:
        if tp.error is not None:
            raise WindowError(f"offsets_for_times {tp.topic}/{tp.partition}: {tp.error}")
        high = marks[(tp.topic, tp.partition)][1]
        out[(tp.topic, tp.partition)] = (tp.offset, "timestamp") if tp.offset >= 0 else (high, "high watermark")
    return out


def _consumer(servers: str, config: dict):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": servers, **config, "group.id": "cdc-replay-windows",
                     "enable.auto.commit": False})


def _first_start(starting: str, marks: dict) -> dict[tuple[str, int], int]:
    """The first interval's start from the configured starting_offsets, as concrete offsets."""
    if starting == "earliest":
        return {k: low for k, (low, _high) in marks.items()}
    if starting == "latest":
        return {k: high for k, (_low, high) in marks.items()}
    given = json.loads(starting)
    out = {}
    for (topic, p), (low, high) in marks.items():
        value = given.get(topic, {}).get(str(p), -2)
        out[(topic, p)] = low if value == -2 else high if value == -1 else value
    return out


def _as_json(offsets: dict[tuple[str, int], int]) -> dict:
    doc: dict = {}
    for (topic, p), offset in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(p)] = offset
    return doc


def plan_window(hook, home: str, start: dt.datetime, end: dt.datetime, *, first: bool, starting_offsets: str,
                servers: str, topics: list[str], config: dict) -> dict:
    """The interval's window: its own record when it has one (rerun), else computed from the
    previous interval's record (or, for the first interval, `starting_offsets`) and written.
    Returns {"starting": {topic: {partition: offset}}, "ending": ..., "partitions": [...]}."""
    uri = record_uri(home, start, end)
    if hook.exists(uri):
        window = hook.read_json(uri)
        log.info("Kafka window of [%s, %s) as recorded by its first run (%s): reused, so this run reads the same "
                 "records", start.isoformat(), end.isoformat(), uri)
        return window
    previous_name = f"-{interval_label(start)}.json"
    previous = [o.uri for o in hook.list_objects(f"{home.rstrip('/')}/{FOLDER}") if o.uri.endswith(previous_name)]
    marks = watermarks(servers, config, topics)
    if previous:
        ended = hook.read_json(sorted(previous)[-1])["ending"]
        begin = {(t, int(p)): o for t, parts in ended.items() for p, o in parts.items()}
        # a partition added to a topic since: from its first offset
        begin.update({k: low for k, (low, _h) in marks.items() if k not in begin})
        source = f"where the interval ending at {start.isoformat()} ended ({sorted(previous)[-1]})"
    elif first:
        begin = _first_start(starting_offsets, marks)
        source = f"starting_offsets {starting_offsets}"
    else:
        raise WindowError(f"no Kafka window of an interval ending at {start.isoformat()} is recorded under "
                          f"{home.rstrip('/')}/{FOLDER}: intervals read on from where the previous one ended; "
                          "replay the intervals in order from the DAG's start")
    ends = offsets_at(servers, config, topics, end)
    rows = []
    for key in sorted(marks):
        offset, how = ends[key]
        # never before the start (timestamps need not grow with offsets): no overlap
        stop = max(offset, begin[key])
        rows.append({"topic": key[0], "partition": key[1], "from": begin[key], "to": stop,
                     "records": stop - begin[key], "end_by": how})
    window = {"interval": [start.isoformat(), end.isoformat()], "starting": _as_json(begin),
              "ending": _as_json({(r["topic"], r["partition"]): r["to"] for r in rows}), "partitions": rows,
              "start_from": source, "computed_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    hook.write_json(uri, window)
    log.info("Kafka window of [%s, %s) starts at %s; recorded in %s", start.isoformat(), end.isoformat(), source, uri)
    return window


def describe(window: dict) -> list[str]:
    """One line per partition, for the task log."""
    return [f"{r['topic']}/{r['partition']}: offsets [{r['from']}, {r['to']}) = {r['records']} records "
            f"(end by {r['end_by']})" for r in window["partitions"]]


def previous_output(hook, home: str, start: dt.datetime) -> str | None:
    """The output of the latest interval before `start` that committed one, following the window
    records back (an interval without records has a window record but no output): the table
    schemas this interval starts from are in its manifest."""
    from cdc_replay_airflow.window import interval_output

    records = [o.uri for o in hook.list_objects(f"{home.rstrip('/')}/{FOLDER}")]
    label = interval_label(start)
    while True:
        ending = [u for u in records if u.endswith(f"-{label}.json")]
        if not ending:
            return None
        name = ending[-1].rsplit("/", 1)[1]
        begin = name[: -len(f"-{label}.json")]
        output = f"{home.rstrip('/')}/{begin}"
        if output == interval_output(home, start) or begin == label:
            return None
        if hook.exists(f"{output}/_manifest.json"):
            return output
        label = begin
