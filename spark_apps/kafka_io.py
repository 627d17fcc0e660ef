"""Kafka as a source of the replay, and the client settings and checks the Kafka target shares
(docs/kafka.md).

Source: `kafka://host:port[,host:port]/topic1,topic2` is read as one batch through Spark's own
Kafka connector (spark-sql-kafka-0-10, a Spark package from Maven Central), with Spark's
`startingOffsets` / `endingOffsets` semantics, and turned into the records the archive path
decodes (topic, partition, offset, timestamp ms, key, value, headers): dedupe, cut and
quarantine then work unchanged. A record's "object" is `kafka://<servers>/<topic>/<partition>`.

Target: `--output kafka://host:port` is written by spark_apps.outputs.kafka.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

log = logging.getLogger("cdc_replay")

from .contract import KAFKA as SCHEME  # noqa: E402

# the URI grammar and offset rules are the request contract's (one set of rules for every entry point)
from .contract import KafkaUriError, ProtocolSpec, check_offsets, is_kafka  # noqa: E402,F401
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


@dataclass(frozen=True)
class Brokers:
    """A Kafka cluster as a client reaches it: the bootstrap servers (host:port,...) and the
    client settings (client_config: librdkafka names, without bootstrap.servers)."""

    servers: str
    config: dict = field(default_factory=dict)


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


@dataclass(frozen=True)
class OffsetRange:
    """Where a Kafka source is read from and to: Spark's `startingOffsets` / `endingOffsets`
    (earliest/latest or JSON per topic and partition, contract.check_offsets)."""

    starting: str
    ending: str


def read_decoded(spark, uri: str, offsets: OffsetRange, codec: ProtocolSpec, config: dict | None = None,
                 lean: bool = False):
    """The source topics' records between the offsets, decoded by `codec`: DECODED_STRUCT rows,
    or with `lean` the lean rows and `aux` rows of spark_apps/lean_decode.py."""
    from pyspark.sql import functions as F

    from spark_apps.archive_io import decode_records_fn
    from spark_apps.schema import DECODED_STRUCT

    servers, topics = parse_uri(uri, topics_required=True)
    raw = (spark.read.format("kafka")
           .option("kafka.bootstrap.servers", servers)
           .option("subscribe", ",".join(topics))
           .option("startingOffsets", offsets.starting)
           .option("endingOffsets", offsets.ending)
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

        return records.mapInArrow(leaned(decode_records_fn(codec.protocol, codec.options)), LEAN_STRUCT)
    return records.mapInArrow(decode_records_fn(codec.protocol, codec.options), DECODED_STRUCT)


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
