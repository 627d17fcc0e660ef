"""The replay request: every field checked with a message naming it, and the replay app's
arguments as an exact list (the same vocabulary `cdc-replay replay` takes)."""

from __future__ import annotations

import pytest

from cdc_replay_airflow.request import (
    PROTOCOLS,
    ReplayRequest,
    RequestError,
    check_codecs,
    parse_request,
    replay_arguments,
)
from cdc_codecs.tso import from_datetime

GOOD = {"source": "s3://cdc-archive/tidb/shop", "protocol": "canal-json",
        "protocol_options": {"enable-tidb-extension": True}, "output": "s3://cdc-lake/replay/shop", "emit": "snapshot"}


def test_protocol_list_is_the_contracts_registry():
    import cdc_codecs

    assert list(PROTOCOLS) == cdc_codecs.protocols()


def test_a_good_request_and_its_exact_arguments():
    request = parse_request({**GOOD, "tables": ["shop.*", "*.orders"], "as_of": 463267588725407744,
                             "target_protocol": "open-protocol", "target_options": "a=1&b=x",
                             "target_partitions": 3, "dispatcher": "table", "max_bad_records": 2,
                             "target_topic": "{schema}_{table}"})
    assert replay_arguments(request, run_id="r1", spark_conf=("spark.x=1",)) == [
        "--source", "s3://cdc-archive/tidb/shop", "--protocol", "canal-json",
        "--protocol-option", "enable-tidb-extension=true",
        "--output", "s3://cdc-lake/replay/shop", "--emit", "snapshot",
        "--target-protocol", "open-protocol", "--target-option", "a=1", "--target-option", "b=x",
        "--as-of", "463267588725407744", "--tables", "shop.*,*.orders", "--target-topic", "{schema}_{table}",
        "--target-partitions", "3", "--dispatcher", "table", "--max-bad-records", "2",
        "--run-id", "r1", "--spark-conf", "spark.x=1",
    ]
    assert ReplayRequest.from_dict(request.as_dict()) == request


def test_a_run_sets_its_own_spark_resources_after_the_deployments():
    """Issue 31 point 6: the form's Spark resources reach spark-submit (driver memory only works
    there) and the app, after $CDC_REPLAY_SPARK_CONF's settings, so the run's win."""
    from cdc_replay_airflow.operators.replay import submit_settings

    request = parse_request({**GOOD, "spark_conf": {"spark.executor.memory": "8g", "spark.driver.memory": "6g",
                                                    "spark.executor.instances": 4}})
    assert request.spark_conf == (("spark.executor.memory", "8g"), ("spark.driver.memory", "6g"),
                                  ("spark.executor.instances", "4"))
    assert ReplayRequest.from_dict(request.as_dict()) == request
    settings = submit_settings(request, master="spark://m:7077", python="/p",
                               spark_conf=("spark.executor.memory=2g", "spark.eventLog.enabled=true"))
    assert {k: settings["conf"][k] for k in ("spark.executor.memory", "spark.driver.memory",
                                             "spark.executor.instances", "spark.eventLog.enabled")} == {
        "spark.executor.memory": "8g", "spark.driver.memory": "6g", "spark.executor.instances": "4",
        "spark.eventLog.enabled": "true"}
    args = settings["application_args"]
    given = [args[i + 1] for i, a in enumerate(args) if a == "--spark-conf"]
    assert given == ["spark.executor.memory=2g", "spark.eventLog.enabled=true", "spark.executor.memory=8g",
                     "spark.driver.memory=6g", "spark.executor.instances=4"]


def test_the_arguments_parse_with_the_apps_parser():
    from spark_apps.options import ReplayArgs, parser

    request = parse_request({**GOOD, "tables": "shop.orders", "as_of": "2026-01-01T00:00:03Z"})
    args = ReplayArgs.from_namespace(parser().parse_args(["--master", "local[1]", *replay_arguments(request)]))
    assert args.source == GOOD["source"] and args.table_patterns() == ["shop.orders"]
    assert args.as_of == from_datetime(__import__("datetime").datetime(2026, 1, 1, 0, 0, 3, tzinfo=__import__("datetime").timezone.utc))
    assert args.protocol_option == ["enable-tidb-extension=true"]


@pytest.mark.parametrize("change, field, words", [
    ({"source": "http://x/y"}, "source", "is not s3://bucket/prefix"),
    ({"source": "s3://A_B/c"}, "source", "valid bucket name"),
    ({"source": None}, "source", "is required"),
    ({"output": "s3://cdc-archive/tidb/shop/out"}, "output", "overlaps --source"),
    ({"output": "s3://cdc-archive/tidb"}, "output", "overlaps --source"),
    ({"output": "s3://cdc-archive/tidb/shop"}, "output", "overlaps --source"),
    ({"emit": "snapshot", "since": 5, "base_snapshot": "s3://lake/base", "output": "s3://lake/base/x"},
     "output", "overlaps --base-snapshot"),
    ({"schema": "s3://cdc-lake/replay/shop/schema.sql"}, "output", "overlaps --schema"),
    ({"protocol": "canal-jsn"}, "protocol", "unknown protocol 'canal-jsn'; valid protocols"),
    ({"protocol_options": "nonsense"}, "protocol_options", "not of the form key=value"),
    ({"protocol_options": {"k": [1]}}, "protocol_options", "must be text"),
    ({"tables": ["a.b.c"]}, "tables", "not of the form db.table"),
    ({"as_of": -1}, "as_of", "negative"),
    ({"as_of": "yesterday"}, "as_of", "neither a commit ts"),
    ({"as_of": "2026-01-01T00:00:00"}, "as_of", "no time zone"),
    ({"emit": "everything"}, "emit", "is not one of"),
    ({"target_protocol": "kafka"}, "target_protocol", "unknown protocol"),
    ({"target_partitions": 0}, "target_partitions", "--target-partitions must be at least 1"),
    ({"max_bad_records": -2}, "max_bad_records", "--max-bad-records must be 0 or more"),
    ({"dispatcher": "random"}, "dispatcher", "is not one of"),
    ({"target_topic": "{db}"}, "target_topic", "unknown placeholder"),
    ({"colour": "red"}, "colour", "unknown field"),
    ({"spark_conf": {"spark.pyspark.python": "/bin/sh"}}, "spark_conf", "is not a Spark resource setting"),
    ({"spark_conf": {"spark.driver.extraJavaOptions": "-Dx=1"}}, "spark_conf", "others go in $CDC_REPLAY_SPARK_CONF"),
    ({"spark_conf": {"spark.executor.memory": "8g --jars x"}}, "spark_conf", "the value must be one word"),
    ({"max_columns": 0}, "max_columns", "--max-columns must be at least 1"),
    ({"max_rows": "many"}, "max_rows", "is not an integer"),
    ({"max_inflate_ratio": 0.5}, "max_inflate_ratio", "--max-inflate-ratio must be at least 1"),
    ({"max_line_bytes": -1}, "max_line_bytes", "--max-line-bytes must be at least 1"),
    ({"lease_timeout": 0}, "lease_timeout", "the lease timeout must be more than 0 seconds"),
    ({"lease_timeout": "soon"}, "lease_timeout", "is not a number"),
])
def test_bad_fields_are_named(change, field, words):
    with pytest.raises(RequestError) as e:
        parse_request({**GOOD, **change})
    assert e.value.field == field and words in str(e.value) and str(e.value).startswith(f"{field}: ")


def test_a_window_in_tso_or_iso_time():
    request = parse_request({**GOOD, "emit": "topics", "since": "2026-01-01T00:00:00Z", "until": 1 << 60})
    args = replay_arguments(request)
    assert args[args.index("--since") + 1] == str(1767225600000 << 18)
    assert args[args.index("--until") + 1] == str(1 << 60)
    with pytest.raises(RequestError) as e:
        parse_request({**GOOD, "emit": "topics", "since": 10, "until": 10})
    assert e.value.field == "since" and "the window is empty" in str(e.value)


@pytest.mark.parametrize("change, field, words", [
    ({"as_of": 5, "until": 6}, "until", "same bound"),
    ({"since": 5}, "since", "a snapshot of a window needs --base-snapshot"),
    ({"emit": "topics", "base_snapshot": "s3://cdc-lake/base"}, "base_snapshot", "applies to --emit snapshot"),
    ({"emit": "history", "target_format": "kafka"}, "target_format", "written as Parquet, Delta or Iceberg"),
    ({"emit": "topics", "target_format": "parquet"}, "target_format", "Kafka-record archive"),
    ({"target_format": "csv"}, "target_format", "is not one of kafka, parquet"),
    ({"schema": "ftp://x"}, "schema", "is not s3://"),
])
def test_fields_that_do_not_go_together(change, field, words):
    with pytest.raises(RequestError) as e:
        parse_request({**GOOD, **change})
    assert e.value.field == field and words in str(e.value)


def test_a_window_on_a_base_snapshot_and_history_in_parquet():
    request = parse_request({**GOOD, "base_snapshot": "s3://cdc-lake/base/", "since": 7, "until": 9,
                             "schema": "s3://cdc-lake/schema.sql"})
    assert replay_arguments(request)[-10:] == ["--since", "7", "--until", "9", "--base-snapshot", "s3://cdc-lake/base",
                                               "--schema", "s3://cdc-lake/schema.sql", "--max-bad-records", "0"]
    history = parse_request({**GOOD, "emit": "history"})
    assert history.output_format == "parquet" and "--target-format" not in replay_arguments(history)


def test_codec_options_are_checked_against_the_codec():
    with pytest.raises(RequestError) as e:
        check_codecs(parse_request({**GOOD, "protocol_options": {"enable-tidb-extension": "maybe"}}))
    assert e.value.field == "protocol_options" and "expected true or false" in str(e.value)
    with pytest.raises(RequestError) as e:
        check_codecs(parse_request({**GOOD, "target_options": {"no-such-option": "1"}}))
    assert e.value.field == "target_options"
    check_codecs(parse_request(GOOD))


def test_require_schema_is_a_flag():
    assert replay_arguments(parse_request({**GOOD, "require_schema": True}))[-3:] == [
        "--require-schema", "--max-bad-records", "0"]
    assert "--require-schema" not in replay_arguments(parse_request({**GOOD, "require_schema": False}))
    with pytest.raises(RequestError, match="require_schema: 'yes' is not true or false"):
        parse_request({**GOOD, "require_schema": "yes"})


@pytest.mark.parametrize("text", ["463267587686400000", "2026-01-01T00:00:00Z", "2026-01-01T08:00:00+08:00",
                                  "2026-01-01", "yesterday", "-5"])
def test_commit_ts_is_read_the_same_by_the_command_line_and_the_form(text):
    """--as-of/--since/--until: one rule (a TSO or an ISO-8601 time with a zone) for the CLI
    parser and the Airflow form; both accept or both refuse, with the same value or reason."""
    from spark_apps.options import parser

    from cdc_replay_airflow.request import RequestError, parse_request

    argv = ["--source", "/tmp/a", "--protocol", "canal-json", "--output", "/tmp/b", "--emit", "topics",
            "--since", text]
    try:
        cli = parser().parse_args(argv).since
    except SystemExit:
        cli = "refused"
    try:
        form = parse_request({"source": "/tmp/a", "protocol": "canal-json", "output": "/tmp/b", "emit": "topics",
                              "since": text}).since
    except RequestError:
        form = "refused"
    assert cli == form
    if text.endswith("Z"):
        assert cli == 463267587686400000


def test_layout_field_reaches_the_app_and_is_checked():
    from cdc_replay_airflow.request import LAYOUTS, RequestError, parse_request, replay_arguments

    from spark_apps.options import parser

    assert list(LAYOUTS) == list(parser()._option_string_actions["--layout"].choices)
    conf = {"source": "s3://archive-bucket/sink", "protocol": "canal-json", "output": "s3://lake-bucket/out"}
    assert "--layout" not in replay_arguments(parse_request(conf))
    request = parse_request({**conf, "layout": "ticdc-storage"})
    args = replay_arguments(request)
    assert args[args.index("--layout") + 1] == "ticdc-storage"
    with pytest.raises(RequestError, match="layout"):
        parse_request({**conf, "layout": "hdfs"})


def test_lakehouse_formats_are_offered_for_snapshot_and_history():
    for emit in ("snapshot", "history"):
        request = parse_request({**GOOD, "emit": emit, "target_format": "iceberg"})
        assert replay_arguments(request)[replay_arguments(request).index("--target-format") + 1] == "iceberg"
    with pytest.raises(RequestError, match="Kafka-record archive"):
        parse_request({**GOOD, "emit": "topics", "target_format": "delta"})


def test_lakehouse_fields_table_name_catalog_and_window():
    """target_table and catalog reach the app as --target-table / --catalog; a Delta/Iceberg
    snapshot takes since (or `last`) without a base snapshot."""
    conf = {**GOOD, "target_format": "iceberg", "target_table": "lake_{schema}.{table}",
            "catalog": {"type": "filesystem"}, "since": "last"}
    request = parse_request(conf)
    assert ReplayRequest.from_dict(request.as_dict()) == request
    args = replay_arguments(request)
    assert args[args.index("--target-table") + 1] == "lake_{schema}.{table}"
    assert args[args.index("--catalog") + 1] == "type=filesystem" and args[args.index("--since") + 1] == "last"
    assert parse_request({**GOOD, "target_format": "delta", "since": 5}).since == 5
    with pytest.raises(RequestError, match="^catalog: --catalog applies to"):
        parse_request({**GOOD, "target_format": "delta", "catalog": {"type": "filesystem"}})
    with pytest.raises(RequestError, match="^target_table:"):
        parse_request({**GOOD, "target_format": "delta", "target_table": "{table}"})
    with pytest.raises(RequestError, match="^since: a snapshot of a window needs --base-snapshot"):
        parse_request({**GOOD, "since": 5})


def test_the_limits_and_the_lease_timeout_reach_the_app_and_defaults_are_not_repeated():
    """The form's limit fields (docs/reliability.md "Limits") become the app's options, read back
    by the app's own parser; left at their defaults they add no argument."""
    from spark_apps.options import ReplayArgs, parser

    plain = replay_arguments(parse_request(GOOD))
    assert not [a for a in plain if a.startswith(("--max-columns", "--max-rows", "--max-inflate", "--max-line",
                                                   "--lease"))]
    request = parse_request({**GOOD, "max_columns": 64, "max_rows": "500", "max_inflate_ratio": 20,
                             "max_line_bytes": 1 << 20, "lease_timeout": "90"})
    args = ReplayArgs.from_namespace(parser().parse_args(["--master", "local[1]", *replay_arguments(request)]))
    assert (args.max_columns, args.max_rows, args.max_inflate_ratio, args.max_line_bytes, args.lease_timeout) == (
        64, 500, 20.0, 1 << 20, 90.0)
