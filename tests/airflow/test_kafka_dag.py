"""The backfill DAG with Kafka in and out, for real: `airflow dags test` (SQLite), a one-node
KRaft broker on loopback (tests/support/kafka.py), the `kafka_default` Airflow connection naming
it, spark-submit reading the topic through Spark's Kafka connector and producing the re-encoded
topic; a confluent-kafka consumer reads it back, and the monitoring page's data shows the
produced offsets."""

from __future__ import annotations

import collections
import json

import pytest

from spark_apps import storage
from spark_apps.generate import generate

from ..test_kafka import consume, produce
from .conftest import task_logs
from .test_dags_run import _db, _run_id, _task_states, _xcom, own_airflow_home  # noqa: F401 - a fixture

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


PASSWORD = "Kafka-pw-8086"


def _restamped(records, hours):
    """The generated records stamped in consecutive hours of 2026-01-01: the first half of each
    partition's records in the first hour, the rest in the second (timestamps grow with offsets)."""
    import dataclasses
    import datetime as dt

    out = []
    for p in sorted({r.partition for r in records}):
        mine = [r for r in records if r.partition == p]
        for i, r in enumerate(mine):
            hour = hours[0] if i < len(mine) // 2 else hours[1]
            moment = dt.datetime(2026, 1, 1, hour, tzinfo=dt.timezone.utc).timestamp() * 1000
            out.append(dataclasses.replace(r, timestamp=int(moment) + i * 1000))
    return out


def _changes(got: dict) -> collections.Counter:
    """The row and DDL records of consumed canal-json topics, per partition (watermarks aside)."""
    from cdc_codecs import get_codec
    from cdc_codecs.base import KafkaRecord

    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    out = collections.Counter()
    for (topic, partition), records in got.items():
        for offset, key, value, headers in records:
            kinds = {e["kind"] for e in codec.decode(KafkaRecord(topic, partition, offset, 0, key, value, headers))}
            if kinds & {"row", "ddl"}:
                out[(partition, key, value)] += 1
    return out


def test_kafka_in_the_backfill_and_the_scheduled_dags_over_sasl(own_airflow_home, bucket, airflow_session):
    """One broker with a SASL_PLAINTEXT (PLAIN) listener; the `kafka_default` connection names it
    with its login/password and security settings in the extra. The backfill DAG replays the
    whole topic (every event: until at the highest TSO) into out-shop; the scheduled DAG replays
    the intervals [00:00, 01:00) and [01:00, 02:00) as offset windows into sched-shop: interval
    2 starts exactly where 1 ended, their union equals the backfill's records, and a rerun of
    interval 1 reads the same window and produces nothing again. The password appears in no
    log, XCom or rendered field."""
    from cdc_replay_airflow.tasks import EVERY_EVENT_READ
    from cdc_replay_airflow.ui.render import render_page
    from tests.support.kafka import KafkaBroker

    home, make_env = own_airflow_home
    broker = KafkaBroker(sasl_users={"replay": PASSWORD}).start()
    try:
        generated = generate(transactions=30, partitions=2, seed=5, duplicate_rate=0)
        broker.create_topic("shop", 2)
        produce(broker.bootstrap, _restamped(generated.records, (0, 1)))
        connection = json.dumps({"conn_type": "kafka", "login": "replay", "password": PASSWORD,
                                 "extra": {"bootstrap.servers": broker.sasl_bootstrap,
                                           "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}})
        codec_options = {"protocol": "canal-json", "protocol_options": {"enable-tidb-extension": "true"},
                         "target_options": {"enable-tidb-extension": "true"}, "emit": "topics"}
        conf = {"source": "kafka://shop", **codec_options, "output": "kafka://",
                "manifest_uri": f"{bucket}/kafka-run", "target_topic": "out-{topic}", "until": EVERY_EVENT_READ}
        scheduled = {"source": "kafka://shop", **codec_options, "output": "kafka://",
                     "manifest_uri": f"{bucket}/sched", "target_topic": "sched-{topic}"}
        env = make_env(AIRFLOW_CONN_KAFKA_DEFAULT=connection, AIRFLOW_VAR_CDC_REPLAY_SCHEDULED=json.dumps(scheduled))
        airflow = airflow_session(env)  # one Airflow process for the four runs
        result = airflow.run(["dags", "test", "cdc_replay_manual", "-c", json.dumps(conf)])
        text = result.stdout + result.stderr
        assert result.returncode == 0, text[-6000:]
        run_id = _run_id(text)
        assert set(_task_states(home, "cdc_replay_manual", run_id).values()) == {"success"}
        assert f"Kafka connection kafka_default: bootstrap servers {broker.sasl_bootstrap}" in text
        # the records counted over SASL before Spark: the small-run settings (spark_apps.launch)
        assert f"small local run ({len(generated.records)} Kafka records, at most" in text + task_logs(home)

        manifest = json.loads(storage.read_bytes(f"{bucket}/kafka-run/_manifest.json"))
        assert manifest["counts"]["reconciled"] and manifest["counts"]["records"] == len(generated.records)
        assert manifest["counts"]["pending"] == 0  # every event read is replayed
        got = consume(broker.bootstrap, ["out-shop"])
        produced_records = sum(len(v) for v in got.values())
        assert produced_records == manifest["output"]["records"] > 0
        assert manifest["output"]["kafka"]["client"] == {"security.protocol": "SASL_PLAINTEXT",
                                                         "sasl.mechanism": "PLAIN", "sasl.username": "replay",
                                                         "sasl.password": "***"}

        metrics = _xcom(home, "cdc_replay_manual", run_id, "publish", "cdc_replay_metrics")
        assert metrics["status"] == "published" and metrics["output"] == f"kafka://{broker.sasl_bootstrap}"
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

        # the scheduled DAG: two hourly intervals as offset windows, then interval 1 again
        half = {p: sum(1 for r in generated.records if r.partition == p) for p in (0, 1)}
        texts, windows = [], {}
        for date in ("2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00", "2026-01-01T01:00:00+00:00"):
            run = airflow.run(["dags", "test", "cdc_replay_scheduled", date])
            texts.append(run.stdout + run.stderr)
            assert run.returncode == 0, texts[-1][-6000:]
            sched_run = _run_id(texts[-1])
            assert set(_task_states(home, "cdc_replay_scheduled", sched_run).values()) == {"success"}
            sched = _xcom(home, "cdc_replay_scheduled", sched_run, "publish", "cdc_replay_metrics")
            windows.setdefault(date, []).append(sched["kafka_window"])
            if len(texts) == 1:
                first_interval = sched
                after_first = consume(broker.bootstrap, ["sched-shop"])
            if len(texts) == 2:
                after_both = consume(broker.bootstrap, ["sched-shop"])
        one, two = windows["2026-01-01T01:00:00+00:00"][0], windows["2026-01-01T02:00:00+00:00"][0]
        assert [(w["partition"], w["from"], w["to"]) for w in one] == [(p, 0, half[p] // 2) for p in (0, 1)]
        assert [(w["partition"], w["from"], w["to"]) for w in two] == [(p, half[p] // 2, half[p]) for p in (0, 1)]
        assert [w["end_by"] for w in one + two] == ["timestamp"] * 2 + ["high watermark"] * 2
        # the union of the intervals' records is the single replay's
        assert _changes(after_both) == _changes(got)
        assert _changes(after_first) != _changes(got)  # interval 1 alone is a part
        # the rerun of interval 1: its own window, nothing produced again
        assert windows["2026-01-01T01:00:00+00:00"][1] == one
        assert consume(broker.bootstrap, ["sched-shop"]) == after_both
        rerun = json.loads(storage.read_bytes(f"{bucket}/sched/20260101T000000Z/_manifest.json"))
        assert rerun["output"]["records"] == 0 and rerun["output"]["kafka"]["skipped_records"] > 0
        assert rerun["source"]["starting_offsets"] == json.dumps({"shop": {"0": 0, "1": 0}})
        assert rerun["source"]["ending_offsets"] == json.dumps({"shop": {str(p): half[p] // 2 for p in (0, 1)}})
        assert "Kafka window shop/0: offsets [0, " in texts[0] + task_logs(home)
        page = render_page([{"dag_id": "cdc_replay_scheduled", "run_id": "r", "state": "success",
                             "run_type": "scheduled", "logical_date": None, "metrics": first_interval, "note": None}],
                           prefix="/cdc-replay")
        assert f'<td>shop/1</td><td class="n"><code>0</code></td><td class="n"><code>{half[1] // 2}</code>' in page

        # the password: in no log, XCom or rendered field
        with _db(home) as db:
            stored = [str(row[0]) for row in db.execute("select value from xcom")] + [
                str(row[0]) for row in db.execute("select rendered_fields from rendered_task_instance_fields")]
        assert PASSWORD not in text + "".join(texts) + task_logs(home) + "".join(stored)
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


def test_the_connections_login_and_password_are_the_sasl_credentials_unless_the_extra_gives_them():
    from cdc_replay_airflow.hooks.kafka import config_of

    extra = {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert config_of("u", "p", extra) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                          "sasl.username": "u", "sasl.password": "p"}
    assert config_of("u", "p", {**extra, "sasl.username": "x", "sasl.password": "y"})["sasl.username"] == "x"
    assert config_of(None, None, {"bootstrap.servers": "k:9092"}) == {}


@pytest.mark.parametrize("conf, message", [
    ({"emit": "snapshot"}, "emit: a kafka:// source is replayed interval by interval"),
    ({"emit": "topics", "ending_offsets": '{"shop": {"0": 5}}'}, "ending_offsets: is set from the data interval"),
])
def test_the_scheduled_dag_refuses_what_offset_windows_cannot_do(conf, message):
    import datetime as dt

    from cdc_replay_airflow.tasks import Refused, plan_interval

    config = {"source": "kafka://shop", "protocol": "canal-json", "output": "s3://lake/out", **conf}
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(Refused, match=message):
        plan_interval(config, start, start + dt.timedelta(hours=1), first_start=start)


def test_a_kafka_interval_replays_every_event_of_its_window_into_its_own_output():
    import datetime as dt

    from cdc_replay_airflow.tasks import EVERY_EVENT_READ, plan_interval

    start = dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone.utc)
    planned = plan_interval({"source": "kafka://shop", "protocol": "canal-json", "output": "kafka://",
                             "manifest_uri": "s3://lake/sched", "emit": "topics"},
                            start, start + dt.timedelta(hours=1), first_start=start - dt.timedelta(hours=1))
    request = planned["request"]
    assert (request["since"], request["until"]) == (None, EVERY_EVENT_READ)
    assert request["manifest_uri"] == "s3://lake/sched/20260101T010000Z" and request["output"] == "kafka://"
    assert planned["kafka_window"] == {"home": "s3://lake/sched", "first": False}
    assert planned["require_complete"] is False


def test_an_archive_interval_into_kafka_keeps_its_manifest_per_interval():
    import datetime as dt

    from cdc_replay_airflow.tasks import plan_interval

    start = dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone.utc)
    previous = (start - dt.timedelta(hours=1), start)
    planned = plan_interval({"source": "s3://archive/shop", "protocol": "canal-json", "output": "kafka://",
                             "manifest_uri": "s3://lake/sched", "emit": "topics"},
                            start, start + dt.timedelta(hours=1), first_start=previous[0], previous=previous,
                            exists=lambda uri: uri == "s3://lake/sched/20260101T000000Z/_manifest.json")
    request = planned["request"]
    assert request["output"] == "kafka://" and request["manifest_uri"] == "s3://lake/sched/20260101T010000Z"
    assert planned["schema_from"] == "s3://lake/sched/20260101T000000Z" and planned["output_base"] == "s3://lake/sched"
    assert request["since"] == (1767229200000 << 18) - 1 and "kafka_window" not in planned
