"""A TiCDC Avro re-encode into a fresh schema registry is the same bytes on every run, with
several output partitions: the run registers its new schemas in one order, the order a reader
meets them (output topic partitions one after the other, each from offset 0), before the writer
tasks start, so the ids the registry hands out (in each message's Confluent header) do not
depend on which writer task runs first (docs/engine.md, "Avro schema ids in a fresh registry")."""

from __future__ import annotations

import gzip

import pytest

from cdc_codecs.archive import parse_line
from spark_apps.generate import generate, write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .codecs.test_native_avro_encode import registry
from .test_native_encode_replay import objects


def ids_as_read(written: dict[str, bytes]) -> list[int]:
    """Every schema id of the objects' records (key, then value), read topic by topic,
    partition by partition, each in offset order."""
    records = sorted((parse_line(line) for data in written.values() for line in gzip.decompress(data).splitlines()),
                     key=lambda r: (r.topic, r.partition, r.offset))
    return [int.from_bytes(part[1:5], "big") for record in records for part in (record.key, record.value)
            if part and part[0] == 0]  # a Confluent header (0x01/0x02 start DDL, watermarks)


@pytest.mark.spark
@pytest.mark.parametrize("emit", ["snapshot", "topics"])
def test_fresh_registries_get_the_same_ids_in_reading_order(spark, tmp_path, monkeypatch, emit):
    """Topics: two runs with the registration pass. Snapshot: one run with the pass, one
    written by a single task (few rows, `kafka_records.one_writer`): the same ids and objects."""
    from spark_apps.outputs import kafka_records

    source_options = {"schema-registry": f"file://{tmp_path}/source-registry", "enable-tidb-extension": "true"}
    generated = generate(transactions=120, partitions=3, seed=41, ddl_rate=0.05, protocol="avro",
                         options=source_options)
    source = str(tmp_path / "archive")
    write_archive(generated.records, source)
    written, registries, passes = [], [], []
    real_pass = kafka_records.register_in_order
    monkeypatch.setattr(kafka_records, "register_in_order", lambda *a, **k: passes.append(emit) or real_pass(*a, **k))
    for n in range(2):  # two runs, each into its own fresh registry
        # the snapshot's first run with the pass (no row count is few enough), its second by one task
        monkeypatch.setattr(kafka_records, "ONE_WRITER_ROWS", -1 if n == 0 else 200_000)
        argv = ["--source", source, "--output", str(tmp_path / f"out{n}"), "--protocol", "avro", "--emit", emit,
                "--target-partitions", "4", "--target-option", f"schema-registry=file://{tmp_path}/registry{n}",
                "--target-option", "enable-tidb-extension=true"]
        for key, value in source_options.items():
            argv += ["--protocol-option", f"{key}={value}"]
        run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)
        written.append(objects(str(tmp_path / f"out{n}")))
        registries.append(registry(f"{tmp_path}/registry{n}"))
    assert len(passes) == (1 if emit == "snapshot" else 2)  # each way taken
    assert len(written[0]) >= 4  # every output partition has records
    # two runs: the same objects and the same registry (may hold by luck of the tasks' timing)
    assert written[0] == written[1]
    assert registries[0] == registries[1]
    # what does not: in one run, a reader meets the ids as 1, 2, 3, ... (each new id the next)
    first_seen = list(dict.fromkeys(ids_as_read(written[0])))
    assert len(first_seen) > 4 and first_seen == list(range(1, len(first_seen) + 1))
