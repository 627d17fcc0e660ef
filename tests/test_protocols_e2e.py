"""End to end per protocol: a generated history archived in protocol P, replayed to a
snapshot in P, equals the generator's state; and re-encoded topics replay to the same
snapshot (closure). Protocols without watermarks (Canal, OceanBase) cut at the archive's end."""

from __future__ import annotations

import pytest

import cdc_codecs
from cdc_codecs.ddl_types import classify
from cdc_codecs.events import Kind, new_event
from spark_apps.demo import read_snapshot
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

pytestmark = pytest.mark.spark


def options_for(protocol: str, tmp_path) -> dict:
    return {
        "canal-json": {"enable-tidb-extension": "true"},
        "avro": {"schema-registry": f"file://{tmp_path}/registry", "enable-tidb-extension": "true",
                 "avro-enable-watermark": "true"},
    }.get(protocol, {})


def replay(spark, protocol, options, source, output, emit="snapshot"):
    argv = ["--source", source, "--protocol", protocol, "--output", output, "--emit", emit]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


@pytest.mark.parametrize("protocol", [p for p in cdc_codecs.protocols() if cdc_codecs.codec_class(p).writable])
def test_snapshot_and_topics_closure(spark, protocol, tmp_path):
    options = options_for(protocol, tmp_path)
    generated = generate(transactions=120, partitions=3, seed=17, protocol=protocol, options=options)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    manifest = replay(spark, protocol, options, source, str(tmp_path / "snapshot"))
    has_watermarks = any(p["watermark"] is not None for p in manifest["partitions"])
    truth = generated.expected if has_watermarks else generated.final
    truth = {k: v for k, v in truth.items() if v}
    assert manifest["counts"]["reconciled"] and manifest["counts"]["duplicate"] > 0
    assert read_snapshot(str(tmp_path / "snapshot"), protocol, options) == truth

    topics = str(tmp_path / "topics")
    replay(spark, protocol, options, source, topics, emit="topics")
    replay(spark, protocol, options, topics, str(tmp_path / "again"))
    assert read_snapshot(str(tmp_path / "again"), protocol, options) == truth


def test_avro_stream_converted_to_canal_json_gets_old_values_from_history(spark, tmp_path):
    """Avro UPDATEs carry no old values and DELETEs only the key; canal-json needs both:
    they come from each key's previous change."""

    from cdc_codecs import get_codec
    from cdc_codecs.archive import parse_line
    from spark_apps import storage

    options = options_for("avro", tmp_path)
    generated = generate(transactions=80, partitions=2, seed=41, protocol="avro", options=options)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    argv = ["--source", source, "--protocol", "avro", "--output", str(tmp_path / "topics"), "--emit", "topics",
            "--target-protocol", "canal-json", "--target-option", "enable-tidb-extension=true"]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}"]
    manifest = run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
    assert manifest["output"]["rows"] > 0
    codec = get_codec("canal-json", {"enable-tidb-extension": "true"})
    deletes = 0
    for info in storage.list_objects(str(tmp_path / "topics")):
        if info.uri.endswith(".jsonl.gz"):
            for line in storage.iter_lines(info.uri):
                for event in codec.decode(parse_line(line)):
                    if event["op"] == "delete":
                        deletes += 1
                        assert len(event["before"]) > 1  # the whole row, not just the key
    assert deletes > 0
    again = str(tmp_path / "again")
    run(ReplayArgs.from_namespace(parser().parse_args(
        ["--source", str(tmp_path / "topics"), "--protocol", "canal-json", "--protocol-option",
         "enable-tidb-extension=true", "--output", again, "--emit", "snapshot",
         "--target-option", "enable-tidb-extension=true"])), spark=spark)
    assert read_snapshot(again) == {k: v for k, v in generated.expected.items() if v}


def test_an_event_the_target_cannot_carry_fails_the_run_and_names_it(spark, tmp_path):
    from spark_apps.replay import ReplayError

    from .scenario import Scenario
    from cdc_codecs import encode_records, get_codec

    options = options_for("avro", tmp_path)
    s = Scenario()
    s.tables[("d", "t")] = {"columns": [("id", "int"), ("v", "int")], "key": ["id"], "rows": {(b"1",): {"id": b"1", "v": b"1"}}}
    s.update("t", (1,), v=2)  # the row's insert is older than the archive: no old values anywhere
    records = encode_records(get_codec("avro", options), s.events, topic="t", partitions=1)
    write_archive(records, str(tmp_path / "archive"))
    argv = ["--source", str(tmp_path / "archive"), "--protocol", "avro", "--output", str(tmp_path / "out"),
            "--emit", "topics", "--target-protocol", "canal-json"]
    for key, value in options.items():
        argv += ["--protocol-option", f"{key}={value}"]
    with pytest.raises(ReplayError, match=r"canal-json cannot encode the (update|insert) event of d\.t read at t/0 offset 0"):
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def test_claim_check_messages_are_read_from_the_claim_check_storage(spark, bucket, tmp_path):
    """TiCDC moved every 4th row message to claim-check storage on S3 and sent only its location:
    with claim-check-storage-uri the replay reads them back and gets the full state."""
    import base64
    import dataclasses

    import orjson

    from spark_apps import storage

    options = {"enable-tidb-extension": "true"}
    generated = generate(transactions=80, partitions=2, seed=5, protocol="canal-json", options=options)
    records, moved = [], 0
    for i, rec in enumerate(generated.records):
        msg = orjson.loads(rec.value) if rec.value else {}
        if i % 4 == 1 and msg.get("isDdl") is False and msg.get("data"):
            name = f"claim-{i}.json"
            storage.write_bytes(f"{bucket}/claims/{name}", orjson.dumps(
                {"key": None, "value": base64.b64encode(rec.value).decode()}))
            keys = msg["pkNames"] or []
            msg.update(data=[{k: msg["data"][0].get(k) for k in keys}], old=None,
                       _tidb={**msg["_tidb"], "claimCheckLocation": f"s3://elsewhere/cf/{name}"})
            rec, moved = dataclasses.replace(rec, value=orjson.dumps(msg)), moved + 1
        records.append(rec)
    assert moved > 20
    write_archive(records, str(tmp_path / "archive"))
    manifest = replay(spark, "canal-json", {**options, "claim-check-storage-uri": f"{bucket}/claims"},
                      str(tmp_path / "archive"), str(tmp_path / "snapshot"))
    assert manifest["counts"]["quarantined"] == 0 and manifest["counts"]["reconciled"]
    assert read_snapshot(str(tmp_path / "snapshot"), "canal-json", options) == {
        k: v for k, v in generated.expected.items() if v}


@pytest.mark.parametrize("protocol", [p for p in cdc_codecs.protocols() if cdc_codecs.codec_class(p).writable])
def test_mid_stream_archive_every_output(spark, protocol, tmp_path):
    """An archive that starts after the tables exist (no CREATE TABLE, rows whose first change
    is an UPDATE or a DELETE, partitions starting at arbitrary offsets): every output mode works
    with the schemas the messages carry; the snapshot holds the rows the archive changed, as the
    generator's own state says, and the manifest says it covers only those."""
    from .test_outputs import read_parquet

    options = options_for(protocol, tmp_path)
    generated = generate(transactions=50, partitions=2, seed=29, protocol=protocol, options=options, mid_stream=True)
    assert not any(e["kind"] == "ddl" for e in generated.events)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source, records_per_object=60)
    manifest = replay(spark, protocol, options, source, str(tmp_path / "snapshot"))
    has_watermarks = any(p["watermark"] is not None for p in manifest["partitions"])
    truth = {k: v for k, v in (generated.expected if has_watermarks else generated.final).items() if v}
    assert manifest["counts"]["reconciled"] and manifest["counts"]["quarantined"] == 0
    assert read_snapshot(str(tmp_path / "snapshot"), protocol, options) == truth
    assert manifest["coverage"]["complete"] is False
    assert sorted(manifest["coverage"]["changed_rows_only"]) == ["shop.customers", "shop.orders"]
    by_table = {(t["database"], t["table"]): t for t in manifest["tables"]}
    # keys the archive never inserted: their first change is an UPDATE or a DELETE, counted
    assert sum(t["keys_first_updated"] + t["keys_first_deleted"] for t in by_table.values()) > 0

    topics = str(tmp_path / "topics")
    replay(spark, protocol, options, source, topics, emit="topics")
    replay(spark, protocol, options, topics, str(tmp_path / "again"))
    assert read_snapshot(str(tmp_path / "again"), protocol, options) == truth

    for emit in ("snapshot", "history"):
        out = str(tmp_path / f"parquet-{emit}")
        argv = ["--source", source, "--protocol", protocol, "--output", out, "--emit", emit,
                "--target-format", "parquet"]
        for key, value in options.items():
            argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        tables = read_parquet(out)
        if emit == "snapshot":
            assert {k: t.num_rows for k, t in tables.items()} == {k: len(v) for k, v in truth.items()}
        else:
            assert sum(t.num_rows for t in tables.values()) >= sum(len(v) for v in truth.values())


def test_avro_tombstone_first_on_a_renamed_tables_topic_or_its_partition(spark, tmp_path):
    """TiCDC Avro: a DELETE has no commit ts. One that is the first event of its partition (on
    the topic of a table renamed after its rows were written, or on a partition its key's
    insert did not use) is placed at its partition's next commit ts or watermark: after the
    RENAME, after its row's insert; it deletes the row (never dropped as an event of the old
    name's dead interval, never left live). Expected: the reference replayer, by true commit ts."""
    from cdc_codecs import encode_records, get_codec

    from .reference import reference_state

    options = options_for("avro", tmp_path)
    codec = get_codec("avro", options)
    ms = 1_767_225_600_000

    def ts(n):
        return (ms + n) << 18

    def image(i, v=None):
        return [{"name": "id", "mysql_type": "int", "flags": 11, "value": str(i).encode(), "label": None},
                {"name": "v", "mysql_type": "int", "flags": 64, "value": None if v is None else str(v).encode(),
                 "label": None}]

    def ddl(query, table, n):
        return new_event(Kind.DDL, commit_ts=ts(n), execute_ts_ms=ms + n, database="d", table=table, ddl_query=query,
                         ddl_type=classify(query))

    def change(op, table, n, i, v=None):
        before = image(i, v) if op == "delete" else None
        after = None if op == "delete" else image(i, v)
        return new_event(Kind.ROW, op=op, commit_ts=ts(n), execute_ts_ms=ms + n, database="d", table=table,
                         key_columns=["id"], before=before, after=after)

    def mark(n):
        return new_event(Kind.WATERMARK, watermark_ts=ts(n), execute_ts_ms=ms + n)

    old_topic = [ddl("CREATE TABLE `d`.`t` (`id` INT NOT NULL, `v` INT, PRIMARY KEY (`id`))", "t", 1),
                 ddl("CREATE TABLE `d`.`u` (`id` INT NOT NULL, `v` INT, PRIMARY KEY (`id`))", "u", 2),
                 change("insert", "t", 3, 1, 10), change("insert", "t", 4, 2, 20), change("insert", "t", 5, 5, 50),
                 ddl("RENAME TABLE `d`.`t` TO `d`.`t2`", "t", 10), mark(40)]
    by_id = {1: 0, 5: 1, 3: 0, 4: 1}
    new_topic = [change("delete", "t2", 11, 1, 10), change("delete", "t2", 12, 5, 50),
                 change("insert", "t2", 13, 3, 30), change("insert", "t2", 14, 4, 40), mark(40)]
    u_topic = [change("insert", "u", 20, 7, 70), change("delete", "u", 21, 7, 70), change("insert", "u", 22, 8, 80),
               mark(40)]
    u_partition = {(20, 7): 0, (21, 7): 1, (22, 8): 1}
    records = (
        encode_records(codec, old_topic, topic="t", partitions=1)
        + encode_records(codec, new_topic, topic="t2", partitions=2,
                         dispatch=lambda e: by_id[int((e["after"] or e["before"])[0]["value"])])
        + encode_records(codec, u_topic, topic="u", partitions=2,
                         dispatch=lambda e: u_partition[((e["commit_ts"] >> 18) - ms,
                                                          int((e["after"] or e["before"])[0]["value"]))]))
    first = {(r.topic, r.partition): r for r in records if r.offset == 0}
    assert first[("t2", 0)].value is None and first[("t2", 1)].value is None and first[("u", 1)].value is None
    write_archive(records, str(tmp_path / "archive"))
    manifest = replay(spark, "avro", options, str(tmp_path / "archive"), str(tmp_path / "out"))
    assert manifest["counts"]["reconciled"] and manifest["counts"]["quarantined"] == 0
    want = reference_state(old_topic + new_topic + u_topic)
    assert want == {("d", "t2"): {(b"2",): {"id": b"2", "v": b"20"}, (b"3",): {"id": b"3", "v": b"30"},
                                  (b"4",): {"id": b"4", "v": b"40"}},
                    ("d", "u"): {(b"8",): {"id": b"8", "v": b"80"}}}
    assert read_snapshot(str(tmp_path / "out"), "avro", options) == want
