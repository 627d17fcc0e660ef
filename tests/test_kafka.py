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
SASL_USER, SASL_PASSWORD = "replay", "Pw-sasl-4711"
PROTOCOL = ["--protocol", "open-protocol"]


@pytest.fixture(scope="module")
def broker():
    from tests.support.kafka import KafkaBroker

    server = KafkaBroker(sasl_users={SASL_USER: SASL_PASSWORD}).start()
    print(f"\nKafka {server.version} broker on {server.bootstrap} ready in {server.startup_seconds:.1f}s")
    yield server
    server.stop()


def replay(*args, env=None, check=True):
    result = subprocess.run([*CDC_REPLAY, "replay", *args, "--max-bad-records", "10", "--master", "local[2]",
                             "--spark-conf", "spark.sql.shuffle.partitions=4"],
                            capture_output=True, text=True, timeout=900, env=env)
    if check:
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
                # no more than are left: consume() waits out its timeout until it has that many
                for m in consumer.consume(min(500, high - low - len(out[(topic, p)])), timeout=5):
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


def test_replay_from_kafka_into_kafka_equals_the_archive_replay(spark, broker, bucket, tmp_path):
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    generated = generate(transactions=120, partitions=3, seed=11, protocol="open-protocol", options={}, bad_values=2)
    broker.create_topic("shop", 3)
    produce(broker.bootstrap, generated.records)
    archive = tmp_path / "archive"
    write_archive(generated.records, str(archive))

    # the same replay from the archive on disk, written as an archive: the expected records. In
    # the tests' Spark session, not through spark-submit (the Kafka runs below go through it):
    # the same app, ~20 s of a JVM's start-up less
    run(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", str(archive), *PROTOCOL, "--output", str(tmp_path / "expected"), "--emit", "topics",
         "--target-topic", "out-{topic}"])), spark=spark)
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


def test_a_snapshot_into_kafka_is_the_archive_snapshot(spark, broker, tmp_path):
    """A snapshot into a kafka:// output: its last changes per key (an archive with DDL and
    key-moving UPDATEs, cut at its middle) go through the same records as the Kafka-record
    archive's (`KafkaTopics`), so what a consumer reads back from the topic is, record for
    record, the archive snapshot of the same replay."""
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    generated = generate(transactions=60, partitions=2, seed=41, topic="v2snap", protocol="open-protocol",
                         options={}, ddl_rate=0.05, split_key_updates=False)
    write_archive(generated.records, str(tmp_path / "archive"), records_per_object=50)
    row_ts = sorted(e["commit_ts"] for e in generated.events if e["kind"] == "row")
    common = ["--source", str(tmp_path / "archive"), *PROTOCOL, "--emit", "snapshot", "--target-topic",
              "out-{topic}", "--as-of", str(row_ts[len(row_ts) // 2])]
    manifests = {name: run(ReplayArgs.from_namespace(parser().parse_args([*common, *out])), spark=spark)
                 for name, out in (("archive", ["--output", str(tmp_path / "expected")]),
                                   ("kafka", ["--output", f"kafka://{broker.bootstrap}", "--manifest-uri",
                                              str(tmp_path / "kafka-run")]))}
    expected = archive_records(str(tmp_path / "expected"))
    got = consume(broker.bootstrap, ["out-v2snap"])
    assert expected and {k: [r[1:] for r in v] for k, v in got.items()} == {
        k: [r[1:] for r in v] for k, v in expected.items()}
    assert manifests["kafka"]["counts"] == manifests["archive"]["counts"]
    assert manifests["kafka"]["output"]["records"] == manifests["archive"]["output"]["records"] > 0


@pytest.mark.parametrize("protocol, kind", [("open-protocol", "dumpling-sql"), ("canal-protobuf", "mysqldump")])
def test_a_kafka_source_continues_a_base_export(broker, tmp_path, protocol, kind):
    """--base-export with a kafka:// source: a mid-stream archive's records produced into a topic
    (its first records re-send changes the export holds), the export beside it. The export's
    position joins the records read from Kafka as it joins archived ones (a TSO by commit ts,
    a binlog position by Canal's per-event position): the snapshot equals tests/reference.py
    over the full history, and the re-sent copies are `in_base`, not applied."""
    from spark_apps.demo import read_snapshot
    from spark_apps.generate import write_base_export

    from .reference import reference_state

    topic = f"exported-{protocol}"
    generated = generate(transactions=60, partitions=2, seed=17, duplicate_rate=0.2, protocol=protocol, options={},
                         topic=topic, mid_stream=True, base_export=True)
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, generated.records)
    export = tmp_path / "export"
    write_base_export(generated, kind, str(export), rows_per_file=7)
    args = ["--source", f"kafka://{broker.bootstrap}/{topic}", "--protocol", protocol, "--output",
            str(tmp_path / "out"), "--emit", "snapshot", "--base-export", str(export)]
    as_of = generated.cut_ts if "tso" in generated.base.position else None
    replay(*args, *(["--as-of", str(as_of)] if as_of is not None else []))
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    counts = manifest["counts"]
    copies = sum(1 for p in generated.placements if any(p.event is e for e in generated.history_before))
    assert counts["reconciled"] and 1 <= counts["in_base"] <= copies and counts["quarantined"] == 0
    assert manifest["window"]["base_export"] == str(export)
    want = reference_state(generated.history_before + generated.events, as_of, generated.schema_sql)
    assert read_snapshot(str(tmp_path / "out"), protocol, {}) == want


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


def test_a_kafka_source_is_sized_by_its_offsets_for_the_small_run_settings(broker, monkeypatch):
    """A Kafka source's bytes are not known before the run, its offsets are: the CLI asks the
    brokers how many records the offsets span (kafka_io.records_in_range, an upper bound) and
    gives up to launch.SMALL_KAFKA_RECORDS the small-run settings (docs/replay.md); a source
    it cannot size keeps Spark's defaults, as before."""
    from spark_apps import cli, kafka_io
    from spark_apps.launch import (CDS_ENV, SMALL_KAFKA_RECORDS, SMALL_RUN_ENV, LOCAL_JIT_OPTIONS,
                                   SMALL_RUN_SPARK_CONF, small_run_options)

    monkeypatch.delenv(SMALL_RUN_ENV, raising=False)
    monkeypatch.delenv(kafka_io.CONFIG_ENV, raising=False)
    generated = generate(transactions=30, partitions=2, seed=8, topic="sized", protocol="open-protocol", options={})
    broker.create_topic("sized", 2)
    produce(broker.bootstrap, generated.records)
    per_partition = collections.Counter(r.partition for r in generated.records)
    uri = f"kafka://{broker.bootstrap}/sized"
    assert kafka_io.records_in_range(uri, "earliest", "latest") == len(generated.records)
    assert kafka_io.records_in_range(uri, json.dumps({"sized": {"0": 3, "1": -2}}),
                                     json.dumps({"sized": {"0": 10, "1": -1}})) == 7 + per_partition[1]
    assert kafka_io.records_in_range(uri, "latest", "latest") == 0
    assert kafka_io.records_in_range(f"kafka://{broker.bootstrap}/no-such-topic", "earliest", "latest") is None
    assert kafka_io.records_in_range("kafka://127.0.0.1:1/sized", "earliest", "latest", timeout=1) is None

    said = []
    command = cli.replay_command(["--source", uri, *PROTOCOL, "--output", "o", "--emit", "topics"], say=said.append)
    confs = dict(command[i + 1].split("=", 1) for i, c in enumerate(command) if c == "--conf")
    assert LOCAL_JIT_OPTIONS in confs["spark.driver.extraJavaOptions"]
    assert {k: confs[k] for k in SMALL_RUN_SPARK_CONF} == SMALL_RUN_SPARK_CONF
    assert said[-1].startswith(f"small local run ({len(generated.records)} Kafka records, at most "
                               f"{SMALL_KAFKA_RECORDS}): driver JVM with {LOCAL_JIT_OPTIONS} (C1 JIT only)")
    # over the bound, or turned off: the C1 JIT of every local run, generated code; a cluster: Spark's defaults
    no_archive = {CDS_ENV: "off"}
    assert small_run_options("local[2]", None, source_records=SMALL_KAFKA_RECORDS + 1, env=no_archive)[:2] == (
        LOCAL_JIT_OPTIONS, {})
    assert small_run_options("local[2]", None, source_records=5, env={**no_archive, SMALL_RUN_ENV: "0"})[:2] == (
        LOCAL_JIT_OPTIONS, {})
    assert small_run_options("spark://m:7077", None, source_records=5)[:2] == (None, {})
    unknown = cli.replay_command(["--source", "kafka://127.0.0.1:1/t", *PROTOCOL, "--output", "o", "--emit", "topics"],
                                 say=said.append)
    assert LOCAL_JIT_OPTIONS in " ".join(unknown) and not set(SMALL_RUN_SPARK_CONF) & set(
        unknown[i + 1].split("=", 1)[0] for i, c in enumerate(unknown) if c == "--conf")
    assert said[-1].startswith("local run, not small (the source's size is not known before the run): driver JVM "
                               "with -XX:TieredStopAtLevel=1 (C1 JIT only), generated code")


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
    from spark_apps.kafka_io import Brokers
    from spark_apps.outputs import kafka as kafka_target  # the Kafka target (spark_apps.outputs.kafka)

    broker.create_topic("resumed", 2)
    markers = str(tmp_path / "markers")
    records = [(f"k{i}".encode(), f"v{i}".encode(), (("h", bytes([i])),)) for i in range(6)]

    def writer():
        return kafka_target.KafkaPartitionWriter(Brokers(broker.bootstrap), "resumed", 1, 2, markers, None)

    first = writer()
    for key, value, headers in records[:4]:
        first.add(key, value, headers)
    first.producer.flush(60)  # delivered, then the task dies before finishing the partition
    assert kafka_target.finished_partitions(markers) == {}

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
    assert kafka_target.finished_partitions(markers)[("resumed", 1)]["records"] == 6

    # a finished partition is not produced at all
    done = kafka_target.finished_partitions(markers)[("resumed", 1)]
    third = kafka_target.KafkaPartitionWriter(Brokers(broker.bootstrap), "resumed", 1, 2, markers, done)
    for key, value, headers in records:
        third.add(key, value, headers)
    third.flush()
    assert third.producer is None and consume(broker.bootstrap, ["resumed"]) == got


def test_sasl_credentials_reach_spark_and_the_producer_and_a_wrong_password_fails_in_one_line(broker, tmp_path):
    """A SASL_PLAINTEXT (PLAIN) listener: the client settings (librdkafka names, as a Kafka
    connection's extra holds them) reach Spark's Kafka source as kafka.* options and the
    producers as their config, through the environment; never argv, output or manifest."""
    import os

    from spark_apps import kafka_io

    generated = generate(transactions=20, partitions=2, seed=3, topic="secured", protocol="open-protocol", options={})
    broker.create_topic("secured", 2)
    produce(broker.bootstrap, generated.records)
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": SASL_USER,
              "sasl.password": SASL_PASSWORD}
    env = {**os.environ, kafka_io.CONFIG_ENV: json.dumps(config)}
    source, output = f"kafka://{broker.sasl_bootstrap}/secured", f"kafka://{broker.sasl_bootstrap}"
    args = ["--source", source, *PROTOCOL, "--output", output, "--manifest-uri", str(tmp_path / "m"),
            "--emit", "topics", "--target-topic", "out-{topic}", "--as-of", str(generated.cut_ts)]
    result = replay(*args, env=env)
    manifest_text = (tmp_path / "m" / "_manifest.json").read_text()
    manifest = json.loads(manifest_text)
    assert manifest["counts"]["records"] == len(generated.records) and manifest["counts"]["reconciled"]
    got = consume(broker.bootstrap, ["out-secured"])
    assert sum(len(v) for v in got.values()) == manifest["output"]["records"] > 0
    assert manifest["output"]["kafka"]["client"] == {**config, "sasl.password": "***"}
    assert SASL_PASSWORD not in result.stdout + result.stderr + manifest_text

    # without credentials the SASL listener is not reachable by PLAINTEXT clients; a wrong
    # password: one line, exit 2, before Spark starts
    wrong = replay(*args, env={**env, kafka_io.CONFIG_ENV: json.dumps({**config, "sasl.password": "nope"})},
                   check=False)
    errors = [line for line in wrong.stderr.splitlines() if line.startswith("cdc-replay: error:")]
    assert wrong.returncode == 2 and len(errors) == 1, wrong.stderr[-3000:]
    assert f"Kafka {broker.sasl_bootstrap} refused the credentials (SASL_PLAINTEXT PLAIN as 'replay')" in errors[0]
    assert "SparkSession" not in wrong.stdout + wrong.stderr and "nope" not in wrong.stderr


def test_spark_options_translate_the_client_settings():
    from spark_apps.kafka_io import spark_options

    options = spark_options({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": "u", "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem",
                             "java.ssl.truststore.password": "x", "socket.keepalive.enable": True})
    assert options == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
        "kafka.ssl.truststore.password": "x",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="u" password="p\\"w";'}


def test_interval_windows_chain_by_offsets_against_the_broker(broker, tmp_path):
    """The scheduled DAG's Kafka windows (cdc_replay_airflow.kafka_window), against the broker:
    interval 2 starts exactly where interval 1 ended, together they cover every offset once, a
    rerun reuses its recorded window even after more records arrived, and a late record (stamped
    in an interval whose window was already cut) is read by the next interval."""
    import datetime as dt

    from confluent_kafka import Producer

    from cdc_replay_airflow import kafka_window as kw
    from cdc_replay_airflow.hooks.archive import ArchiveHook

    utc = dt.timezone.utc
    h = [dt.datetime(2026, 1, 1, hour, tzinfo=utc) for hour in range(4)]
    broker.create_topic("windows", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})

    def send(partition, moment, n, tag):
        for i in range(n):
            producer.produce("windows", value=f"{tag}{i}".encode(), partition=partition,
                             timestamp=int(moment.timestamp() * 1000) + i * 1000)
        assert producer.flush(30) == 0

    send(0, h[0], 5, "a"), send(1, h[0], 3, "b"), send(0, h[1], 4, "c")  # partition 1: nothing in hour 1
    hook, home = ArchiveHook(aws_conn_id=None), str(tmp_path / "series")
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": SASL_USER,
              "sasl.password": SASL_PASSWORD}

    def window(i, first=False):
        return kw.plan_window(hook, home, h[i], h[i + 1], first=first, starting_offsets="earliest",
                              servers=broker.sasl_bootstrap, topics=["windows"], config=config)

    with pytest.raises(kw.WindowError, match="replay the intervals in order"):
        window(1)  # interval 1's window is not recorded yet
    w0 = window(0, first=True)
    assert w0["starting"] == {"windows": {"0": 0, "1": 0}} and w0["ending"] == {"windows": {"0": 5, "1": 3}}
    assert [r["end_by"] for r in w0["partitions"]] == ["timestamp", "high watermark"]
    w1 = window(1)
    assert w1["starting"] == w0["ending"] and w1["ending"] == {"windows": {"0": 9, "1": 3}}
    send(1, h[1], 2, "late"), send(0, h[3], 1, "d")  # after interval 1's window was cut
    assert window(1) == w1 and window(0, first=True) == w0  # reruns: their own recorded windows
    w2 = window(2)
    assert w2["starting"] == w1["ending"] and w2["ending"] == {"windows": {"0": 9, "1": 5}}
    assert [(r["partition"], r["from"], r["to"]) for r in w2["partitions"]] == [(0, 9, 9), (1, 3, 5)]
    # every offset of the topic in exactly one window
    covered = sorted((r["partition"], o) for w in (w0, w1, w2) for r in w["partitions"] for o in range(r["from"], r["to"]))
    assert covered == sorted([(0, o) for o in range(9)] + [(1, o) for o in range(5)])
    assert SASL_PASSWORD not in "".join(o.uri + hook.read_bytes(o.uri).decode() for o in hook.list_objects(home))
    # the table schemas interval 3 starts from: the latest earlier interval that has an output
    assert kw.previous_output(hook, home, h[2]) is None
    hook.write_json(f"{home}/20260101T000000Z/_manifest.json", {"schemas": []})
    assert kw.previous_output(hook, home, h[2]) == f"{home}/20260101T000000Z"
    hook.write_json(f"{home}/20260101T010000Z/_manifest.json", {"schemas": []})
    assert kw.previous_output(hook, home, h[2]) == f"{home}/20260101T010000Z"
    assert kw.previous_output(hook, home, h[0]) is None
