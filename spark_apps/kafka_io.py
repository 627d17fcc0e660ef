"""Kafka as a source and as a target of the replay (docs/kafka.md).

Source: `kafka://host:port[,host:port]/topic1,topic2` is read as one batch through Spark's own
Kafka connector (spark-sql-kafka-0-10, a Spark package from Maven Central), with Spark's
`startingOffsets` / `endingOffsets` semantics, and turned into the records the archive path
decodes (topic, partition, offset, timestamp ms, key, value, headers): dedupe, cut and
quarantine then work unchanged. A record's "object" is `kafka://<servers>/<topic>/<partition>`.

Target: `--output kafka://host:port` produces the re-encoded records from the tasks that
already own one whole output partition each, in order, with confluent-kafka (librdkafka)
rather than Spark's Kafka sink: the delivery reports give the exact offsets each record got,
which the manifest records, and a finished partition leaves a marker so that a rerun of the
same replay skips it instead of producing it twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable

from . import storage
from .paths import segment

log = logging.getLogger("cdc_replay")

from .contract import KAFKA as SCHEME  # noqa: E402
from .contract import PRODUCED_MARKERS  # noqa: E402

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


# the URI grammar and offset rules are the request contract's (one set of rules for every entry point)
from .contract import KafkaUriError, check_offsets, is_kafka  # noqa: E402,F401
from .contract import parse_kafka_uri as parse_uri  # noqa: E402,F401


# the client settings of the cluster (security.protocol, sasl.*, ssl.*: librdkafka's names, as an
# Airflow Kafka connection's extra holds them), JSON in the environment: never in argv or logs
CONFIG_ENV = "CDC_REPLAY_KAFKA_CONFIG"
# librdkafka settings Spark's Kafka connector (the Java client) takes under the same name
_SAME_IN_JAVA = ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm",
                 "sasl.kerberos.service.name", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password")
_LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


class KafkaAccessError(RuntimeError):
    """The cluster cannot be reached or refuses the credentials (one line, no secret)."""


def client_config(environ=None) -> dict:
    """The cluster's client settings from $CDC_REPLAY_KAFKA_CONFIG (librdkafka names), without
    bootstrap.servers (the kafka:// URI names the brokers)."""
    import os

    raw = (os.environ if environ is None else environ).get(CONFIG_ENV)
    if not raw:
        return {}
    try:
        config = json.loads(raw)
    except ValueError:
        raise KafkaUriError(f"${CONFIG_ENV} is not a JSON object of client settings") from None
    if not isinstance(config, dict):
        raise KafkaUriError(f"${CONFIG_ENV} is not a JSON object of client settings")
    if "sasl.mechanisms" in config and "sasl.mechanism" not in config:  # librdkafka's alias
        config["sasl.mechanism"] = config.pop("sasl.mechanisms")
    return {k: v for k, v in config.items() if k != "bootstrap.servers"}


def described(config: dict) -> dict:
    """The settings as a manifest or a log may show them (secrets masked)."""
    from spark_apps import masking

    return {k: masking.MASK if "jaas" in k else masking.mask_option(k, str(v)) for k, v in config.items()}


def spark_options(config: dict) -> dict:
    """The same settings for Spark's Kafka source: `kafka.`-prefixed Java client names (SASL
    credentials as a JAAS login line, a PEM CA file as a PEM truststore). Settings with no Java
    equivalent are logged by name and not passed."""
    options, unused = {}, []
    for key, value in config.items():
        if key in _SAME_IN_JAVA:
            options[f"kafka.{key}"] = str(value)
        elif key == "ssl.ca.location":
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(value)
        elif key in ("sasl.username", "sasl.password"):
            continue
        elif key.startswith("java."):  # escape hatch: java.<name> is passed as kafka.<name>
            options[f"kafka.{key[len('java.'):]}"] = str(value)
        else:
            unused.append(key)
    if "sasl.username" in config:
        mechanism = str(config.get("sasl.mechanism", "PLAIN")).upper()
        if mechanism not in _LOGIN_MODULES:
            raise KafkaUriError(f"sasl.mechanism {mechanism}: Spark's Kafka source is given username/password for "
                                f"{', '.join(_LOGIN_MODULES)} only (give java.sasl.jaas.config for others)")

        def quoted(text) -> str:
            return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'

        options["kafka.sasl.jaas.config"] = (f"{_LOGIN_MODULES[mechanism]} required username="
                                             f"{quoted(config['sasl.username'])} password="
                                             f"{quoted(config.get('sasl.password', ''))};")
    if unused:
        log.info("Kafka client settings not passed to Spark's Kafka source (no Java equivalent): %s",
                 ", ".join(sorted(unused)))
    return options


def check_access(servers: str, config: dict, timeout: float = 30) -> None:
    """One metadata request before Spark starts: unreachable brokers or refused credentials
    fail the run with one line instead of Spark's retries and stack traces."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient({"bootstrap.servers": servers, **config, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while True:
        admin.poll(0)  # serves error_cb
        auth = [e for e in errors if e.code() in _AUTH_CODES]
        if auth:
            mechanism = config.get("sasl.mechanism")
            who = f" as {config['sasl.username']!r}" if config.get("sasl.username") else ""
            raise KafkaAccessError(f"Kafka {servers} refused the credentials ({config.get('security.protocol')}"
                                   f"{' ' + mechanism if mechanism else ''}{who}): {_first_line(auth[0].str())}")
        try:
            admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            return
        except KafkaException as e:
            admin.poll(0)
            if any(e.code() in _AUTH_CODES for e in errors):
                continue
            if time.monotonic() > deadline:
                raise KafkaAccessError(f"Kafka {servers} did not answer within {timeout:.0f}s: "
                                       f"{_first_line(str(e))}") from None


def _first_line(text: str) -> str:
    from spark_apps import masking

    return masking.mask_text(text.strip().splitlines()[0] if text.strip() else text)


def read_decoded(spark, uri: str, starting: str, ending: str, protocol: str, options: dict,
                 config: dict | None = None, lean: bool = False):
    """The source topics' records between the offsets, decoded: DECODED_STRUCT rows, or with
    `lean` the lean rows and `aux` rows of spark_apps/lean_decode.py."""
    from pyspark.sql import functions as F

    from spark_apps.archive_io import decode_records_fn
    from spark_apps.schema import DECODED_STRUCT

    servers, topics = parse_uri(uri, topics_required=True)
    raw = (spark.read.format("kafka")
           .option("kafka.bootstrap.servers", servers)
           .option("subscribe", ",".join(topics))
           .option("startingOffsets", starting)
           .option("endingOffsets", ending)
           .option("includeHeaders", "true")
           .options(**spark_options(config or {}))
           .load())
    records = raw.select(
        "topic", F.col("partition").cast("int").alias("partition"), "offset",
        F.unix_millis("timestamp").alias("timestamp"), "key", "value", "headers",
        F.concat(F.lit(f"{SCHEME}{servers}/"), F.col("topic"), F.lit("/"), F.col("partition").cast("string"))
        .alias("object"),
        F.lit(None).cast("int").alias("line"))
    if lean:
        from spark_apps.lean_decode import LEAN_STRUCT, leaned

        return records.mapInArrow(leaned(decode_records_fn(protocol, options)), LEAN_STRUCT)
    return records.mapInArrow(decode_records_fn(protocol, options), DECODED_STRUCT)


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
    """Produces one output partition's records in order, like archive_io._ObjectWriter writes
    objects; `flush` waits for every delivery report and records the partition as finished."""

    def __init__(self, servers: str, topic: str, partition: int, partitions: int, markers: str,
                 done: dict | None, config: dict | None = None):
        self.servers, self.topic, self.partition, self.markers = servers, topic, partition, markers
        self.config = dict(config or {})
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

            self.producer = Producer({"bootstrap.servers": servers, **self.config, **PRODUCER_CONF})
            ensure_topic(servers, topic, partitions, partition, self.config)
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


# a partition just created (or whose leader moved) answers these until a leader is elected
_AUTH_CODES = (-169, 58)  # librdkafka's _AUTHENTICATION, Kafka's SASL_AUTHENTICATION_FAILED
_RETRIABLE = ("NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART", "_TIMED_OUT",
              "NOT_COORDINATOR", "_TRANSPORT")


def watermark_offsets(consumer, partition, wait_s: float = 60) -> tuple[int, int]:
    """The partition's (low, high) watermarks, waiting out leader elections instead of failing."""
    import time

    from confluent_kafka import KafkaException

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return consumer.get_watermark_offsets(partition, timeout=30)
        except KafkaException as e:
            if not any(code in str(e) for code in _RETRIABLE) or time.monotonic() > deadline:
                raise
            log.info("%s/%d: %s; retrying", partition.topic, partition.partition, e)
            time.sleep(0.5)


def partition_watermarks(consumer, topics: list[str], timeout: float = 30) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermark of every partition of the topics (LookupError naming a topic the
    brokers do not have)."""
    from confluent_kafka import TopicPartition

    metadata = consumer.list_topics(timeout=timeout)
    out = {}
    for topic in topics:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            raise LookupError(f"topic {topic} does not exist")
        for p in sorted(meta.partitions):
            out[(topic, p)] = watermark_offsets(consumer, TopicPartition(topic, p))
    return out


def records_in_range(uri: str, starting: str, ending: str, config: dict | None = None,
                     timeout: float = 5) -> int | None:
    """At most how many records a read of `uri` from `starting` to `ending` (Spark's offset
    options) gets, from the brokers' watermarks before Spark starts: the size that chooses a
    Kafka source's small-run settings (launch.small_run_options). An upper bound (a compacted
    topic or a transaction's markers hold offsets without records); None when the brokers do
    not answer within `timeout` s or a topic is missing (the run itself says what is wrong)."""
    from confluent_kafka import Consumer

    import socket

    def answers(server: str) -> bool:  # a refused connection fails at once, librdkafka would retry
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            return True
        except (OSError, ValueError):
            return False

    try:
        servers, topics = parse_uri(uri, topics_required=True)
        if not any(answers(s) for s in servers.split(",")):
            return None
        given = {"starting": {} if starting in ("earliest", "latest") else json.loads(starting),
                 "ending": {} if ending == "latest" else json.loads(ending)}
        consumer = Consumer({"bootstrap.servers": servers, **(config or {}), "group.id": "cdc-replay-offsets",
                             "enable.auto.commit": False})
        try:
            marks = partition_watermarks(consumer, topics, timeout=timeout)
        finally:
            consumer.close()
    except Exception:  # noqa: BLE001 - sizing is an optimisation; the run itself reports the brokers
        return None

    def offset(which: str, topic: str, partition: int, low: int, high: int) -> int:
        value = given[which].get(topic, {}).get(str(partition))
        if value is None:  # not named: the whole partition (an upper bound of what Spark reads)
            value = -2 if which == "starting" and starting != "latest" else -1
        return low if value == -2 else high if value == -1 else min(max(value, low), high)

    return sum(max(0, offset("ending", t, p, low, high) - offset("starting", t, p, low, high))
               for (t, p), (low, high) in marks.items())


def writer_factory(servers: str, partitions: int, markers: str, done: dict, config: dict | None = None) -> Callable:
    def make(base, topic, partition, max_records):
        return KafkaPartitionWriter(servers, topic, partition, partitions, markers, done.get((topic, partition)),
                                    config)

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
