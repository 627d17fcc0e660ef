"""Kafka as a source and a target, against a real Apache Kafka broker (tests/support/kafka.py:
Kafka's own jars from Maven Central, one KRaft node on loopback).

A generated archive's records are produced into a topic exactly as they sit in the archive
(partition, offset, timestamp, key, value); `cdc-replay replay` (the real spark-submit path, with
Spark's Kafka connector from Maven Central) reads them from the broker and produces the
re-encoded topics into the broker; a consumer reads every record back and compares it with the
same replay run from the archive on disk. A rerun produces nothing twice."""

from __future__ import annotations

import collections
import gzip
import json
import subprocess
import sys

import pytest

from cdc_codecs.archive import parse_line
from spark_apps import storage
from spark_apps.generate import generate, write_archive

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CDC_REPLAY = [sys.executable, "-m", "spark_apps.cli"]
PROTOCOL = ["--protocol", "open-protocol"]


@pytest.fixture(scope="module")
def broker():
    from tests.support.kafka import KafkaBroker

    server = KafkaBroker().start()
    print(f"\nKafka {server.version} broker on {server.bootstrap} ready in {server.startup_seconds:.1f}s")
    yield server
    server.stop()


def replay(*args):
    result = subprocess.run([*CDC_REPLAY, "replay", *args, "--max-bad-records", "10", "--master", "local[2]",
                             "--spark-conf", "spark.sql.shuffle.partitions=4"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


def produce(bootstrap: str, records) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in records:
        producer.produce(r.topic, value=r.value, key=r.key, partition=r.partition, timestamp=r.timestamp or 0,
                         headers=list(r.headers) or None)
    assert producer.flush(60) == 0


def consume(bootstrap: str, topics: list[str]) -> dict:
    """Every record of the topics, per (topic, partition) in offset order."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    out = {}
    for topic in topics:
        for p in metadata.topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            out[(topic, p)] = []
            if high == low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while len(out[(topic, p)]) < high - low:
                for m in consumer.consume(500, timeout=5):
                    assert m.error() is None, m.error()
                    out[(topic, p)].append((m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
    consumer.close()
    return out


def archive_records(output: str) -> dict:
    out = collections.defaultdict(list)
    for info in storage.list_objects(output):
        if info.uri.endswith(".jsonl.gz") and "/_" not in info.uri[len(output):]:
            for line in gzip.decompress(storage.read_bytes(info.uri)).splitlines():
                r = parse_line(line, info.uri)
                out[(r.topic, r.partition)].append((r.offset, r.key, r.value, tuple(r.headers)))
    return {k: sorted(v) for k, v in out.items()}


def test_replay_from_kafka_into_kafka_equals_the_archive_replay(broker, bucket, tmp_path):
    generated = generate(transactions=120, partitions=3, seed=11, protocol="open-protocol", options={}, bad_values=2)
    broker.create_topic("shop", 3)
    produce(broker.bootstrap, generated.records)
    archive = tmp_path / "archive"
    write_archive(generated.records, str(archive))

    # the same replay from the archive on disk, written as an archive: the expected records
    replay("--source", str(archive), *PROTOCOL, "--output", str(tmp_path / "expected"), "--emit", "topics",
           "--target-topic", "out-{topic}")
    expected_manifest = json.loads((tmp_path / "expected" / "_manifest.json").read_text())
    expected = archive_records(str(tmp_path / "expected"))

    source = f"kafka://{broker.bootstrap}/shop"
    manifest_uri = f"{bucket}/kafka-run"
    first = replay("--source", source, *PROTOCOL, "--output", f"kafka://{broker.bootstrap}", "--manifest-uri",
                   manifest_uri, "--emit", "topics", "--target-topic", "out-{topic}")
    manifest = json.loads(storage.read_bytes(f"{manifest_uri}/_manifest.json"))
    got = consume(broker.bootstrap, ["out-shop"])

    # every record, in order, in its partition, with its key, value and headers
    assert {k: [r[1:] for r in v] for k, v in got.items()} == {k: [r[1:] for r in v] for k, v in expected.items()}
    assert sum(len(v) for v in got.values()) == expected_manifest["output"]["records"] > 0
    # the same decisions: records read, duplicates, pending, quarantined (the 2 bad values)
    assert manifest["counts"] == expected_manifest["counts"]
    assert manifest["counts"]["quarantined"] == 2 and manifest["counts"]["reconciled"]
    assert manifest["cut"] == expected_manifest["cut"]
    # the manifest records what was produced: topic, partition, first/last offset, counts
    produced = {(o["topic"], o["partition"]): o for o in manifest["output"]["objects"]}
    assert produced.keys() == got.keys()
    for key, records in got.items():
        assert (produced[key]["first_offset"], produced[key]["last_offset"], produced[key]["records"]) == (
            records[0][0], records[-1][0], len(records))
    assert manifest["output"]["kafka"]["skipped"] == []
    # the quarantine names the Kafka source partition and offset of each bad record
    quarantine = [json.loads(line) for o in storage.list_objects(f"{manifest_uri}/_quarantine")
                  for line in gzip.decompress(storage.read_bytes(o.uri)).splitlines()]
    assert sorted((q["object"], q["offset"]) for q in quarantine if q["error_stage"] == "decode") == sorted(
        (f"{source}/{q['partition']}", q["offset"]) for q in quarantine if q["error_stage"] == "decode")
    assert len(quarantine) == 2 and all(q["object"].startswith(source + "/") for q in quarantine)
    assert f"read from Kafka  {manifest['counts']['records']:,} records in 3 partitions" in first.stdout

    # a rerun of the same replay produces nothing twice: every partition is already finished
    again = replay("--source", source, *PROTOCOL, "--output", f"kafka://{broker.bootstrap}", "--manifest-uri",
           manifest_uri, "--emit", "topics", "--target-topic", "out-{topic}")
    rerun = json.loads(storage.read_bytes(f"{manifest_uri}/_manifest.json"))
    assert rerun["output"]["records"] == 0 and rerun["output"]["objects"] == []
    assert rerun["output"]["kafka"]["skipped_records"] == expected_manifest["output"]["records"]
    assert "already produced by an earlier run of this replay (skipped)" in again.stdout
    assert consume(broker.bootstrap, ["out-shop"]) == got


def test_ending_offsets_per_partition_bound_what_is_read(broker, tmp_path):
    """Spark's Kafka source semantics: JSON per partition, ending offsets exclusive, -1 latest."""
    generated = generate(transactions=40, partitions=2, seed=5, topic="bounded", protocol="open-protocol", options={})
    broker.create_topic("bounded", 2)
    produce(broker.bootstrap, generated.records)
    per_partition = collections.Counter(r.partition for r in generated.records)
    replay("--source", f"kafka://{broker.bootstrap}/bounded", *PROTOCOL, "--output", str(tmp_path / "out"),
           "--emit", "topics", "--starting-offsets", json.dumps({"bounded": {"0": 3, "1": -2}}),
           "--ending-offsets", json.dumps({"bounded": {"0": 10, "1": -1}}), "--as-of", str(generated.cut_ts))
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    read = {p["partition"]: p["records"] for p in manifest["partitions"]}
    assert read == {0: 7, 1: per_partition[1]}
    assert manifest["counts"]["records"] == 7 + per_partition[1] and manifest["counts"]["reconciled"]


@pytest.mark.parametrize("args, message", [
    (["--source", "kafka://127.0.0.1:9092", "--output", "o"], "name the topics"),
    (["--source", "kafka://127.0.0.1:9092/t", "--ending-offsets", "earliest", "--output", "o"], "read nothing"),
    (["--source", "kafka://127.0.0.1:9092/t", "--starting-offsets", "{\"t\": {\"0\": \"x\"}}", "--output", "o"],
     "JSON must map"),
    (["--source", "a", "--output", "kafka://127.0.0.1:9092"], "needs --manifest-uri"),
    (["--source", "a", "--output", "kafka://127.0.0.1:9092/t", "--manifest-uri", "m"], "takes no topics"),
    (["--source", "a", "--starting-offsets", "latest", "--output", "o"], "apply to a kafka:// --source"),
])
def test_kafka_arguments_are_refused_before_spark_starts(args, message):
    result = subprocess.run([*CDC_REPLAY, "replay", *args, *PROTOCOL, "--emit", "topics"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_kafka_source_adds_the_connector_package():
    from spark_apps import cli, packages

    command = cli.replay_command(["--source", "kafka://127.0.0.1:1/t", *PROTOCOL, "--output", "o", "--emit", "topics",
                                  "--spark-conf", "spark.jars.packages=g:a:1"])
    confs = dict(command[i + 1].split("=", 1) for i, c in enumerate(command) if c == "--conf")
    assert confs["spark.jars.packages"] == packages.PACKAGES["kafka"] + ",g:a:1"
    assert confs["spark.jars.ivySettings"] == packages.IVY_SETTINGS
    plain = cli.replay_command(["--source", "dir", *PROTOCOL, "--output", "o", "--emit", "topics"])
    assert not any(c.startswith("spark.jars.packages") for c in plain)


def test_an_interrupted_partition_is_resumed_not_produced_twice(broker, tmp_path):
    """A task that failed after producing part of its partition (or a failed run) is followed by
    an attempt of the same replay: it produces only the records the first attempt had not."""
    from spark_apps import kafka_io

    broker.create_topic("resumed", 2)
    markers = str(tmp_path / "markers")
    records = [(f"k{i}".encode(), f"v{i}".encode(), (("h", bytes([i])),)) for i in range(6)]

    def writer():
        return kafka_io.KafkaPartitionWriter(broker.bootstrap, "resumed", 1, 2, markers, None)

    first = writer()
    for key, value, headers in records[:4]:
        first.add(key, value, headers)
    first.producer.flush(60)  # delivered, then the task dies before finishing the partition
    assert kafka_io.finished_partitions(markers) == {}

    second = writer()
    for key, value, headers in records:
        second.add(key, value, headers)
    second.flush()
    got = consume(broker.bootstrap, ["resumed"])
    assert [(k, v, h) for _, k, v, h in got[("resumed", 1)]] == [(k, v, tuple(h)) for k, v, h in records]
    assert got[("resumed", 0)] == []
    assert second.written[0] | {"bytes": 0} == {
        "uri": f"kafka://{broker.bootstrap}/resumed/1", "topic": "resumed", "partition": 1, "first_offset": 0,
        "last_offset": 5, "records": 6, "events": 0, "rows": 0, "bytes": 0}
    assert kafka_io.finished_partitions(markers)[("resumed", 1)]["records"] == 6

    # a finished partition is not produced at all
    done = kafka_io.finished_partitions(markers)[("resumed", 1)]
    third = kafka_io.KafkaPartitionWriter(broker.bootstrap, "resumed", 1, 2, markers, done)
    for key, value, headers in records:
        third.add(key, value, headers)
    third.flush()
    assert third.producer is None and consume(broker.bootstrap, ["resumed"]) == got
