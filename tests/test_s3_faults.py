"""Reading at scale through faults (issue 14, point 4): S3 objects are read in Range GETs
and a body cut by a connection reset resumes at the first byte not received; throttling
(503 SlowDown) is retried by botocore. A fault-injecting proxy in front of the moto server
(tests/support/s3_faults.py) proves it: every line arrives exactly once, and a replay
through it writes byte-for-byte what a replay without faults writes."""

from __future__ import annotations

import contextlib
import gzip
import os

import orjson
import zstandard

from spark_apps import storage
from spark_apps.generate import generate, write_archive
from tests.support.s3_faults import fault_proxy

TIDB = ["--protocol-option", "enable-tidb-extension=true"]


@contextlib.contextmanager
def _through(proxy, chunk_size):
    """This process's S3 calls go through the proxy with small ranges, restored afterwards."""
    saved_endpoint, saved_settings = os.environ["AWS_ENDPOINT_URL"], storage.settings()
    os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
    storage.configure(storage.ReadSettings(chunk_size=chunk_size, max_attempts=10))
    try:
        yield
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved_endpoint
        storage.configure(saved_settings)


def test_ranged_reads_resume_after_resets_and_survive_slow_downs(bucket, s3_endpoint):
    lines = [orjson.dumps({"n": n, "pad": "x" * (n % 97)}) for n in range(6000)]
    data = b"\n".join(lines) + b"\n"
    objects = {"plain.jsonl": data, "packed.jsonl.gz": gzip.compress(data),
               "packed.jsonl.zst": zstandard.ZstdCompressor().compress(data)}
    for name, body in objects.items():
        storage.write_bytes(f"{bucket}/{name}", body)
    storage.write_bytes(f"{bucket}/empty.jsonl", b"")

    with fault_proxy(s3_endpoint, slow_down=0.15, reset=0.3, seed=14) as proxy, _through(proxy, 16 << 10):
        for name in objects:
            assert list(storage.iter_lines(f"{bucket}/{name}")) == lines, name
        assert storage.read_bytes(f"{bucket}/plain.jsonl") == data
        assert storage.read_bytes(f"{bucket}/empty.jsonl") == b""
        assert list(storage.iter_lines(f"{bucket}/empty.jsonl")) == []

    ranges = sum(-(-len(body) // (16 << 10)) for body in objects.values()) + -(-len(data) // (16 << 10))
    assert proxy.counts["requests"] > ranges  # ranged, and retried
    assert proxy.counts["slow_down"] > 0 and proxy.counts["reset"] > 0, proxy.counts


def _files(output):
    return {storage.relative(o.uri, output): storage.read_bytes(o.uri) for o in storage.list_objects(output)}


@contextlib.contextmanager
def _workers_through(spark, proxy):
    """The shared session's Python workers reach S3 through the proxy (a session's workers take
    SparkContext.environment, as spark.executorEnv.* sets it), and so does this process."""
    environment = spark.sparkContext.environment
    saved, saved_here = environment.get("AWS_ENDPOINT_URL"), os.environ["AWS_ENDPOINT_URL"]
    saved_settings = storage.settings()
    environment["AWS_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
    try:
        yield
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved_here
        storage.configure(saved_settings)
        if saved is None:
            environment.pop("AWS_ENDPOINT_URL", None)
        else:
            environment["AWS_ENDPOINT_URL"] = saved


def test_a_replay_through_throttling_and_resets_equals_one_without_faults(spark, bucket, s3_endpoint):
    from spark_apps.demo import read_snapshot
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    from .reference import reference_state

    generated = generate(transactions=80, partitions=2, seed=14, duplicate_rate=0.1)
    write_archive(generated.records, f"{bucket}/archive", records_per_object=30)
    argv = ["--source", f"{bucket}/archive", "--protocol", "canal-json", *TIDB, "--emit", "snapshot",
            "--target-option", "enable-tidb-extension=true", "--run-id", "faults"]

    def replay(output, *extra):
        return run(ReplayArgs.from_namespace(parser().parse_args([*argv, "--output", output, *extra])), spark=spark)

    clean = replay(f"{bucket}/clean")
    with fault_proxy(s3_endpoint, slow_down=0.1, reset=0.4, seed=14, min_body=512) as proxy, \
            _workers_through(spark, proxy):
        faulty = replay(f"{bucket}/faulty", "--s3-read-chunk-size", "2048", "--s3-max-attempts", "10")
    assert proxy.counts["slow_down"] > 0 and proxy.counts["reset"] > 0, proxy.counts
    assert any("/archive/" in path for path in proxy.reset_paths)  # Spark tasks' reads of archive objects

    counts = faulty["counts"]
    assert counts["reconciled"] and counts == clean["counts"]
    assert counts["records"] == len(generated.records)  # every archived record read exactly once
    assert read_snapshot(f"{bucket}/faulty") == reference_state(generated.events, generated.cut_ts)
    clean_files, faulty_files = _files(f"{bucket}/clean"), _files(f"{bucket}/faulty")
    assert clean_files.keys() == faulty_files.keys()
    for name in clean_files:
        if name != "_manifest.json":
            assert clean_files[name] == faulty_files[name], name
