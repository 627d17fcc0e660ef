"""ArchiveHook builds the S3 client from an Airflow connection and nothing else: every object
operation is spark_apps.storage's, the Spark app's own (one object-store module)."""

from __future__ import annotations

import json
import os

from cdc_replay_airflow.hooks.archive import ArchiveHook
from spark_apps import storage


def test_the_hook_reaches_s3_through_its_connection_with_the_apps_storage(bucket, s3_endpoint, monkeypatch):
    from spark_apps.local_s3 import DEMO_CREDENTIALS

    monkeypatch.setenv("AIRFLOW_CONN_ARCHIVE_TEST", json.dumps({
        "conn_type": "aws", "login": DEMO_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "password": DEMO_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "extra": {"endpoint_url": s3_endpoint}}))
    # the AWS variables point where nothing listens: only the connection's endpoint can answer
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    hook = ArchiveHook("archive_test")
    home = f"{bucket}/series"
    hook.write_json(f"{home}/_manifest.json", {"schemas": ["CREATE TABLE t (id INT)"]})
    hook.write_text(f"{home}/schema.sql", "CREATE TABLE t (id INT);\n")
    hook.write_bytes(f"{home}/shop/0/a.jsonl", b'{"x":1}\n')
    hook.copy(f"{home}/shop/0/a.jsonl", f"{home}/shop/1/a.jsonl")
    listed = hook.list_objects(home)
    assert [o.uri for o in listed] == [f"{home}/_manifest.json", f"{home}/schema.sql", f"{home}/shop/0/a.jsonl",
                                       f"{home}/shop/1/a.jsonl"]
    assert [o.size for o in listed][2:] == [8, 8] and all(o.last_modified is not None for o in listed)
    assert hook.read_json(f"{home}/_manifest.json") == {"schemas": ["CREATE TABLE t (id INT)"]}
    assert hook.read_bytes(f"{home}/shop/1/a.jsonl") == b'{"x":1}\n'
    head = hook.get_conn().head_object(Bucket=bucket[len("s3://"):], Key="series/_manifest.json")
    assert head["ContentType"] == "application/json"
    assert hook.exists(f"{home}/schema.sql") and not hook.exists(f"{home}/nothing")
    hook.delete(f"{home}/schema.sql")
    hook.delete(f"{home}/schema.sql")  # a missing object: nothing happens
    assert not hook.exists(f"{home}/schema.sql")
    assert hook.delete_prefix(home) == 3 and hook.list_objects(home) == []
    assert storage._GIVEN_CLIENT.get() is None  # the hook's client served those calls only


def test_local_paths_need_no_connection(tmp_path):
    hook = ArchiveHook("no_such_connection")
    home = str(tmp_path / "series")
    hook.write_json(f"{home}/a/_manifest.json", {"k": 1})
    hook.copy(f"{home}/a/_manifest.json", f"{home}/b/_manifest.json")
    listed = hook.list_objects(home)
    assert [o.uri for o in listed] == [f"{home}/a/_manifest.json", f"{home}/b/_manifest.json"]
    assert abs(listed[0].last_modified.timestamp() - os.stat(listed[0].uri).st_mtime) < 1e-5
    assert hook.list_objects(f"{home}/a/_manifest.json") == []  # a file is not below itself, as an S3 key
    assert hook.read_json(f"{home}/b/_manifest.json") == {"k": 1}
    assert hook.delete_prefix(home) == 2 and not os.path.exists(home)
    assert hook._client is None and hook._settings is None  # no client built, no connection read
