"""The Kafka target: `--output kafka://host:port` (docs/kafka.md).

The re-encoded records are produced from the tasks that already own one whole output partition
each, in order, with confluent-kafka (librdkafka) rather than Spark's Kafka sink: the delivery
reports give the exact offsets each record got, which the manifest records, and a finished
partition leaves a marker so that a rerun of the same replay (same fingerprint) skips it
instead of producing it twice. The records are those of the Kafka-record archive target
(spark_apps.outputs.kafka_records); only where they go differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable

from .. import storage
from ..contract import KAFKA as SCHEME
from ..contract import PRODUCED_MARKERS, QUARANTINE
from ..kafka_io import Brokers, client_config, described, is_kafka, parse_uri, watermark_offsets
from ..paths import segment
from .kafka_records import KafkaRecordArchive

log = logging.getLogger("cdc_replay")

# idempotent producer: acks=all and per-partition sequence numbers, so retries neither duplicate
# nor reorder records within a partition (up to 5 requests in flight keep that guarantee);
# gapless (librdkafka stops rather than skip a failed batch) and no message timeout (flush bounds
# the wait), so what an interrupted attempt left in a partition is a prefix of its stream
PRODUCER_CONF = {
    "enable.idempotence": True,
    "enable.gapless.guarantee": True,
    "message.timeout.ms": 0,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 200_000,
    "message.max.bytes": 10_485_760,
}


def fingerprint(args, partition_stats: list[dict], cut: dict) -> str:
    """What decides the produced records: the options that shape the output and what was read.
    Two runs with the same fingerprint produce the very same records per partition."""
    shaping = {name: getattr(args, name) for name in (
        "source", "starting_offsets", "ending_offsets", "protocol", "protocol_option", "emit", "target_protocol",
        "target_option", "target_topic", "target_partitions", "dispatcher", "tables", "as_of", "until", "since",
        "base_snapshot", "schema", "require_schema", "output")}
    doc = {"args": shaping, "read": partition_stats, "cut": cut.get("point")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:20]


def markers_base(manifest_uri: str, print_: str) -> str:
    # under _staging/, which committing a manifest leaves alone (manifest.commit)
    return storage.join(storage.normalize(manifest_uri), PRODUCED_MARKERS, print_)


def _marker(base: str, state: str, topic: str, partition: int) -> str:
    return storage.join(base, state, f"{segment(topic)}+{partition}.json")  # the topic read back from the marker


def finished_partitions(base: str) -> dict[tuple[str, int], dict]:
    """Markers of partitions a run with this fingerprint produced completely."""
    done = {}
    for info in storage.list_objects(storage.join(base, "done")):
        row = json.loads(storage.read_bytes(info.uri))
        done[(row["topic"], row["partition"])] = row
    return done


def _read_marker(uri: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(uri))
    except Exception:  # noqa: BLE001 - missing (local or S3): no marker
        return None




class KafkaPartitionWriter:
    """Produces one output partition's records in order, like the archive target's ObjectWriter writes
    objects; `flush` waits for every delivery report and records the partition as finished."""

    def __init__(self, brokers: Brokers, topic: str, partition: int, partitions: int, markers: str,
                 done: dict | None):
        self.servers, self.topic, self.partition, self.markers = brokers.servers, topic, partition, markers
        self.config = dict(brokers.config or {})
        self.done = done
        self.offset = 0
        self.fed_events = self.fed_rows = 0
        self.written: list[dict] = []
        self.first = self.last = None
        self.delivered = 0
        self.bytes = 0
        self.errors: list[str] = []
        self.producer = None
        self.resumed = 0  # records an interrupted attempt had already produced: not produced again
        if done is None:
            from confluent_kafka import Producer

            self.producer = Producer({"bootstrap.servers": self.servers, **self.config, **PRODUCER_CONF})
            ensure_topic(self.servers, topic, partitions, partition, self.config)
            self._start()

    def _start(self) -> None:
        """Where this partition's records begin in the topic. The first attempt notes the
        partition's end offset before producing; a later attempt of the same replay (a Spark task
        retry, or a rerun after a failure) finds that note, and the records since then are the
        first ones of its own stream (same fingerprint, same records, same order): it skips that
        many. Exact while the replay is the only writer of its target partitions."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.servers, **self.config, "group.id": "cdc-replay-offsets",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            _low, high = watermark_offsets(consumer, TopicPartition(self.topic, self.partition))
        finally:
            consumer.close()
        started = _read_marker(_marker(self.markers, "started", self.topic, self.partition))
        if started is None:
            storage.write_bytes(_marker(self.markers, "started", self.topic, self.partition),
                                json.dumps({"topic": self.topic, "partition": self.partition, "start": high}).encode())
            self.start = high
        else:
            self.start = started["start"]
            self.resumed = max(0, high - self.start)
            if self.resumed:
                self.first, self.last = self.start, high - 1
                log.info("%s/%d: %d records produced by an interrupted attempt of this replay are not produced again",
                         self.topic, self.partition, self.resumed)

    def _report(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        offset = msg.offset()
        self.first = offset if self.first is None else min(self.first, offset)
        self.last = offset if self.last is None else max(self.last, offset)
        self.delivered += 1

    def add(self, key, value, headers) -> None:
        self.offset += 1
        if self.producer is None or self.offset <= self.resumed:
            return
        self.bytes += len(value or b"") + len(key or b"")
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, partition=self.partition,
                                      headers=list(headers) if headers else None, on_delivery=self._report)
                break
            except BufferError:  # local queue full: let deliveries drain it
                self.producer.poll(0.5)
        self.producer.poll(0)

    def flush(self) -> None:
        if self.producer is None:
            self.written.append({**self.done, "events": self.fed_events, "rows": self.fed_rows})
            return
        remaining = self.producer.flush(300)
        if self.resumed > self.offset:
            raise RuntimeError(f"{self.topic}/{self.partition} holds {self.resumed} records since this replay began "
                               f"producing it, more than the {self.offset} it produces: another writer is using it")
        if remaining or self.errors or self.delivered + self.resumed != self.offset:
            raise RuntimeError(f"producing {self.topic}/{self.partition} to {self.servers} failed: "
                               f"{self.delivered} of {self.offset} delivered, {remaining} pending; "
                               f"{'; '.join(self.errors[:3])}")
        row = {"uri": f"{SCHEME}{self.servers}/{self.topic}/{self.partition}", "topic": self.topic,
               "partition": self.partition, "first_offset": self.first if self.first is not None else -1,
               "last_offset": self.last if self.last is not None else -1, "records": self.offset,
               "events": self.fed_events, "rows": self.fed_rows, "bytes": self.bytes}
        storage.write_bytes(_marker(self.markers, "done", self.topic, self.partition), json.dumps(row).encode())
        self.written.append(row)




def writer_factory(brokers: Brokers, partitions: int, markers: str, done: dict) -> Callable:
    def make(base, topic, partition, max_records):
        return KafkaPartitionWriter(brokers, topic, partition, partitions, markers, done.get((topic, partition)))

    return make


def ensure_topic(servers: str, topic: str, partitions: int, needed_partition: int, config: dict | None = None) -> None:
    """Create the output topic with `partitions` partitions when missing (tasks may race: the
    losers see it exists); refuse a topic too small for the partition a record goes to."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers, **(config or {})})
    metadata = admin.list_topics(topic=topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None:
        future = admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic]
        try:
            future.result(timeout=60)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    deadline = time.monotonic() + 60
    while True:
        metadata = admin.list_topics(topic=topic, timeout=30).topics.get(topic)
        count = len(metadata.partitions) if metadata is not None and metadata.error is None else 0
        if count > needed_partition:
            led = metadata.partitions[needed_partition]
            if led.error is None and led.leader >= 0:
                return
        if 0 < count <= needed_partition and time.monotonic() > deadline - 50:
            raise RuntimeError(f"output topic {topic} has {count} partitions; the replay places records in "
                               f"partition {needed_partition} (--target-partitions / the source's partitions)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"output topic {topic} did not become available on {servers}")
        time.sleep(0.2)


class KafkaTopics(KafkaRecordArchive):
    """The archive target's records, produced to the brokers of a kafka:// output: each task
    produces its output partitions in order (KafkaPartitionWriter) instead of writing objects."""

    @classmethod
    def chosen(cls, args) -> bool:
        return args.output_format == "kafka" and args.target_layout != "ticdc-storage" and is_kafka(args.output)

    def writer(self) -> Callable:
        kafka = self.plan.kafka
        return writer_factory(Brokers(kafka["servers"], kafka["config"]), self.plan.partitions, kafka["markers"],
                              kafka["done"])


def prepared(output: str, home: str, fingerprint_: str) -> dict:
    """Where a kafka:// output goes and what an earlier run with the same fingerprint produced
    already (its partitions are skipped): the plan's `kafka`."""
    servers, _ = parse_uri(output, topics_required=False)
    markers = markers_base(home, fingerprint_)
    done = finished_partitions(markers)
    if done:
        log.info("%d output partitions already produced by an earlier run of this replay (fingerprint %s): "
                 "skipped", len(done), fingerprint_)
    return {"servers": servers, "fingerprint": fingerprint_, "markers": markers, "done": done,
            "config": client_config()}


def kafka_manifest(manifest: dict, kafka: dict, home: str) -> None:
    """What a Kafka output produced now and what an earlier run with the same fingerprint had
    already produced (skipped, not produced again), in the manifest; the quarantine is under
    `home` (--manifest-uri)."""
    done = kafka["done"]
    out = manifest["output"]
    skipped = [w for w in out["objects"] if (w["topic"], w["partition"]) in done]
    out["objects"] = [w for w in out["objects"] if (w["topic"], w["partition"]) not in done]
    out["records"] = sum(w["records"] for w in out["objects"])
    out["rows"] = sum(w["rows"] for w in out["objects"])
    out["kafka"] = {"bootstrap_servers": kafka["servers"], "fingerprint": kafka["fingerprint"],
                    "producer": {k: v for k, v in PRODUCER_CONF.items()},
                    "client": described(kafka["config"]),
                    "skipped": skipped, "skipped_records": sum(w["records"] for w in skipped),
                    "markers": kafka["markers"], "manifest_uri": home}
    manifest["quarantine"]["location"] = storage.join(home, QUARANTINE)
