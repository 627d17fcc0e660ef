"""ArchiveHook: the CDC archive and the replay outputs in object storage, through boto3.

The hook only builds the client (credentials and endpoint from the Airflow connection); every
object operation is spark_apps.storage's, the Spark app's own, run with that client (`using`).

Credentials come from an Airflow connection of type `aws` (default `aws_default`), read the way
the Amazon provider reads them: login = access key id, password = secret access key, extra
`region_name`, `endpoint_url` (MinIO, a loopback S3 server; also accepted under
`service_config.s3.endpoint_url`) and `aws_session_token`. Without that connection, boto3's
own chain applies (AWS_* variables, AWS_ENDPOINT_URL). Every secret is registered with
Airflow's masker before anything is logged. Absolute local paths work too (development).

Why not the Amazon provider's S3Hook: the project does not depend on
apache-airflow-providers-amazon, a large provider (every AWS service) for the four connection
settings used here. Its connection's other options (role_arn, profiles, session kwargs) are not
read; boto3's own chain (environment, instance role) covers those deployments (docs/airflow.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseHook
from spark_apps import storage

from cdc_replay_airflow.window import ArchiveObject


def _mask(value: str | None) -> None:
    if value:
        from airflow.sdk.log import mask_secret

        mask_secret(value)


class ArchiveHook(BaseHook):
    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "CDC archive (S3 via boto3)"

    def __init__(self, aws_conn_id: str | None = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id
        self._settings: dict | None = None
        self._client = None

    # -- connection ------------------------------------------------------------------------

    def settings(self) -> dict:
        """{"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "region_name",
        "endpoint_url"} from the connection (values None when unset); secrets masked."""
        if self._settings is not None:
            return self._settings
        settings: dict = {k: None for k in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token",
                                             "region_name", "endpoint_url")}
        conn = None
        if self.aws_conn_id:
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                conn = self.get_connection(self.aws_conn_id)
            except AirflowNotFoundException:
                self.log.info("No connection %r: boto3's default credential chain and AWS_ENDPOINT_URL apply",
                              self.aws_conn_id)
        if conn is not None:
            if conn.conn_type not in ("aws", "s3"):
                raise ValueError(f"connection {self.aws_conn_id!r} has type {conn.conn_type!r}, expected 'aws'")
            extra = conn.extra_dejson or {}
            settings["aws_access_key_id"] = conn.login or extra.get("aws_access_key_id")
            settings["aws_secret_access_key"] = conn.password or extra.get("aws_secret_access_key")
            settings["aws_session_token"] = extra.get("aws_session_token")
            settings["region_name"] = extra.get("region_name")
            settings["endpoint_url"] = (extra.get("endpoint_url")
                                        or (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
                                        or conn.host or None)
        for key in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token"):
            _mask(settings[key])
        self._settings = settings
        return settings

    def get_conn(self):
        """A boto3 S3 client."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            s = self.settings()
            self._client = boto3.client(
                "s3",
                aws_access_key_id=s["aws_access_key_id"], aws_secret_access_key=s["aws_secret_access_key"],
                aws_session_token=s["aws_session_token"], region_name=s["region_name"],
                endpoint_url=s["endpoint_url"],
                config=Config(retries={"max_attempts": 8, "mode": "standard"}),
            )
        return self._client

    def environment(self) -> dict[str, str]:
        """The AWS_* variables that give a subprocess (spark-submit, the replay app and its
        executors) the same access. Values are masked in logs; never put them in templated fields."""
        s = self.settings()
        names = {"aws_access_key_id": "AWS_ACCESS_KEY_ID", "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
                 "aws_session_token": "AWS_SESSION_TOKEN", "endpoint_url": "AWS_ENDPOINT_URL"}
        env = {var: s[key] for key, var in names.items() if s[key]}
        if s["region_name"]:
            env["AWS_DEFAULT_REGION"] = env["AWS_REGION"] = s["region_name"]
        return env

    def describe(self) -> str:
        """Where the hook points, for logs: no secret in it."""
        s = self.settings()
        return (f"connection {self.aws_conn_id!r}, endpoint {s['endpoint_url'] or 'AWS default'}, "
                f"region {s['region_name'] or 'default'}, "
                f"{'key from the connection' if s['aws_access_key_id'] else 'default credential chain'}")

    # -- objects: spark_apps.storage's functions, through this hook's client ---------------

    def using(self):
        """A block in which spark_apps.storage reaches S3 through this hook's client (built on
        the first S3 request only: local paths never read the connection)."""
        return storage.using(self.get_conn)

    def list_objects(self, prefix: str) -> list[ArchiveObject]:
        """Every object below `prefix` (recursively), sorted by URI, with its last-modified
        time; a local file is not below itself (as an S3 key is not)."""
        with self.using():
            listed = storage.list_objects(prefix)
        prefix = storage.normalize(prefix)
        return [ArchiveObject(o.uri, o.size, o.modified) for o in listed if o.uri != prefix]

    def copy(self, src: str, dst: str) -> None:
        """Copy one object (server-side on S3: no bytes pass through this worker)."""
        with self.using():
            storage.copy(src, dst)

    def copy_all(self, pairs: list[tuple[str, str, int]], progress: Callable[[int, int, int], None]) -> None:
        """Copy (src, dst, size) pairs, reporting (done, total, bytes done) as it goes."""
        done_bytes = 0
        for i, (src, dst, size) in enumerate(pairs, 1):
            self.copy(src, dst)
            done_bytes += size
            progress(i, len(pairs), done_bytes)

    def read_bytes(self, uri: str) -> bytes:
        with self.using():
            return storage.read_bytes(uri)

    def read_json(self, uri: str) -> Any:
        return json.loads(self.read_bytes(uri))

    def write_json(self, uri: str, value: Any) -> None:
        self.write_bytes(uri, json.dumps(value, indent=2, sort_keys=True, default=str).encode(), "application/json")

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode(), "text/plain; charset=utf-8")

    def write_bytes(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        with self.using():
            storage.write_bytes(uri, data, content_type)

    def exists(self, uri: str) -> bool:
        with self.using():
            return storage.exists(uri)

    def delete(self, uri: str) -> None:
        """Delete one object (nothing happens when it does not exist)."""
        with self.using():
            storage.delete(uri)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object below `prefix`; returns how many."""
        with self.using():
            return storage.delete_prefix(prefix)

    def ensure_bucket(self, uri: str) -> None:
        if storage.is_s3(uri):
            with self.using():
                storage.ensure_bucket(uri)
