"""The backfill DAG with Kafka in and out, for real: `airflow dags test` (SQLite), a one-node
KRaft broker on loopback (tests/support/kafka.py), the `kafka_default` Airflow connection naming
it, spark-submit reading the topic through Spark's Kafka connector and producing the re-encoded
topic; a confluent-kafka consumer reads it back, and the monitoring page's data shows the
produced offsets."""

from __future__ import annotations

import json

import pytest

from spark_apps import storage
from spark_apps.generate import generate

from ..test_kafka import consume, produce
from .conftest import run_airflow
from .test_dags_run import _run_id, _task_states, _xcom

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


def test_backfill_reads_kafka_and_produces_into_kafka(airflow_env, airflow_home, bucket):
    from cdc_replay_airflow.ui.render import render_page
    from tests.support.kafka import KafkaBroker

    broker = KafkaBroker().start()
    try:
        generated = generate(transactions=30, partitions=2, seed=5)
        broker.create_topic("shop", 2)
        produce(broker.bootstrap, generated.records)
        connection = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": broker.bootstrap}})
        conf = {"source": "kafka://shop", "protocol": "canal-json",
                "protocol_options": {"enable-tidb-extension": "true"},
                "output": "kafka://", "manifest_uri": f"{bucket}/kafka-run", "emit": "topics",
                "target_topic": "out-{topic}", "target_options": {"enable-tidb-extension": "true"}}
        result = run_airflow(["dags", "test", "cdc_replay_manual", "-c", json.dumps(conf)],
                             airflow_env(AIRFLOW_CONN_KAFKA_DEFAULT=connection))
        text = result.stdout + result.stderr
        assert result.returncode == 0, text[-6000:]
        run_id = _run_id(text)
        assert set(_task_states(airflow_home, "cdc_replay_manual", run_id).values()) == {"success"}
        assert f"Kafka connection kafka_default: bootstrap servers {broker.bootstrap}" in text

        manifest = json.loads(storage.read_bytes(f"{bucket}/kafka-run/_manifest.json"))
        assert manifest["counts"]["reconciled"] and manifest["counts"]["records"] == len(generated.records)
        got = consume(broker.bootstrap, ["out-shop"])
        produced_records = sum(len(v) for v in got.values())
        assert produced_records == manifest["output"]["records"] > 0

        metrics = _xcom(airflow_home, "cdc_replay_manual", run_id, "publish", "cdc_replay_metrics")
        assert metrics["status"] == "published" and metrics["output"] == f"kafka://{broker.bootstrap}"
        # per topic/partition: the first/last offsets the records got in the broker, and counts
        expected = [{"topic": t, "partition": p, "first_offset": records[0][0], "last_offset": records[-1][0],
                     "records": len(records), "skipped": False} for (t, p), records in sorted(got.items()) if records]
        assert metrics["produced"] == expected
        page = render_page([{"dag_id": "cdc_replay_manual", "run_id": run_id, "state": "success",
                             "run_type": "manual", "logical_date": None, "metrics": metrics, "note": None}],
                           prefix="/cdc-replay")
        assert "produced to Kafka" in page
        for row in expected:
            assert f'<td>out-shop/{row["partition"]}</td><td class="n"><code>{row["first_offset"]}</code>' in page
        assert not storage.list_objects(f"{bucket}/kafka-run/_staging/airflow")  # published: staging removed
    finally:
        broker.stop()


# ------------------------------------------------------------------ the form's Kafka fields (no broker)

def test_kafka_fields_become_the_apps_kafka_uris_and_options():
    from cdc_replay_airflow.request import parse_request, replay_arguments

    request = parse_request({"source": "kafka://shop,orders", "protocol": "canal-json", "output": "kafka://",
                             "emit": "topics", "manifest_uri": "s3://lake/kafka-run",
                             "starting_offsets": '{"shop": {"0": 5, "1": -2}}', "kafka_connection": "prod_kafka"})
    assert request.kafka_connection == "prod_kafka" and request.home == "s3://lake/kafka-run"
    app = request.with_kafka_servers("b1:9092,b2:9092")
    assert app.source == "kafka://b1:9092,b2:9092/shop,orders" and app.output == "kafka://b1:9092,b2:9092"
    args = replay_arguments(app)
    assert args[args.index("--starting-offsets") + 1] == '{"shop": {"0": 5, "1": -2}}'
    assert "--ending-offsets" not in args and args[args.index("--manifest-uri") + 1] == "s3://lake/kafka-run"


@pytest.mark.parametrize("conf, field", [
    ({"output": "kafka://", "emit": "topics"}, "manifest_uri"),
    ({"output": "kafka://", "manifest_uri": "s3://lake/m", "emit": "snapshot"}, "emit"),
    ({"output": "kafka://127.0.0.1:9092", "manifest_uri": "s3://lake/m", "emit": "topics"}, "output"),
    ({"source": "kafka://shop", "starting_offsets": "oldest"}, "starting_offsets"),
    ({"source": "kafka://shop", "ending_offsets": "earliest"}, "ending_offsets"),
    ({"source": "kafka://", "output": "s3://lake/out"}, "source"),
    ({"starting_offsets": "latest"}, "starting_offsets"),
    ({"manifest_uri": "s3://lake/m"}, "manifest_uri"),
])
def test_bad_kafka_fields_are_refused_naming_the_field(conf, field):
    from cdc_replay_airflow.request import RequestError, parse_request

    full = {"source": "s3://archive/shop", "protocol": "canal-json", "output": "s3://lake/out", **conf}
    with pytest.raises(RequestError) as e:
        parse_request(full)
    assert e.value.field == field


@pytest.mark.parametrize("host, port, extra, servers", [
    (None, None, {"bootstrap.servers": "k1:9092, k2:9093"}, "k1:9092,k2:9093"),
    ("broker", 19092, {}, "broker:19092"),
    ("k1,k2:9093", None, None, "k1:9092,k2:9093"),
])
def test_bootstrap_servers_come_from_the_extra_else_host_and_port(host, port, extra, servers):
    from cdc_replay_airflow.hooks.kafka import servers_of

    assert servers_of(host, port, extra) == servers


def test_a_connection_without_brokers_is_refused():
    from cdc_replay_airflow.hooks.kafka import servers_of

    with pytest.raises(ValueError, match="bootstrap.servers"):
        servers_of(None, None, {"security.protocol": "SSL"})
