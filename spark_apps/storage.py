"""Object storage for archives and outputs: local directories and `s3://bucket/prefix`.

S3 goes through boto3 (no hadoop-aws jar exists here, and executors need nothing but Python):
the endpoint comes from `AWS_ENDPOINT_URL` and credentials from the usual AWS variables, so a
loopback moto server or MinIO works the same as AWS. Every function takes full URIs.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlparse

_S3_CLIENTS: dict = {}


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def join(base: str, *parts: str) -> str:
    result = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            result = f"{result}/{part}"
    return result


def normalize(uri: str) -> str:
    """Absolute local paths (file:// accepted); s3 URIs unchanged, without a trailing slash."""
    if is_s3(uri):
        return uri.rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return os.path.abspath(uri)


def overlaps(a: str, b: str) -> bool:
    """True when one location is the other or lies inside it (symlinks resolved locally),
    so writing or replacing one would touch the other."""
    if is_s3(a) != is_s3(b):
        return False
    if not is_s3(a):
        a, b = os.path.realpath(normalize(a)), os.path.realpath(normalize(b))
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if not parsed.netloc:
        raise ValueError(f"{uri!r} has no bucket (expected s3://bucket/prefix)")
    return parsed.netloc, parsed.path.lstrip("/")


def s3_client():
    """One boto3 client per process and endpoint (creating one costs ~50 ms)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    client = _S3_CLIENTS.get(endpoint)
    if client is None:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=endpoint,
            config=Config(retries={"max_attempts": 8, "mode": "standard"}, max_pool_connections=16),
        )
        _S3_CLIENTS[endpoint] = client
    return client


def list_objects(prefix: str) -> list[ObjectInfo]:
    """Every object below `prefix`, recursively, sorted by URI."""
    prefix = normalize(prefix)
    if is_s3(prefix):
        bucket, key = _split_s3(prefix)
        key_prefix = f"{key}/" if key else ""
        paginator = s3_client().get_paginator("list_objects_v2")
        found = []
        for page in paginator.paginate(Bucket=bucket, Prefix=key_prefix):
            for item in page.get("Contents", ()):
                found.append(ObjectInfo(f"s3://{bucket}/{item['Key']}", item["Size"]))
        return sorted(found, key=lambda o: o.uri)
    if os.path.isfile(prefix):
        return [ObjectInfo(prefix, os.path.getsize(prefix))]
    found = []
    for root, _dirs, files in os.walk(prefix):
        for name in files:
            path = os.path.join(root, name)
            found.append(ObjectInfo(path, os.path.getsize(path)))
    return sorted(found, key=lambda o: o.uri)


def relative(uri: str, prefix: str) -> str:
    prefix = normalize(prefix).rstrip("/") + "/"
    uri = normalize(uri)
    if not uri.startswith(prefix):
        raise ValueError(f"{uri} is not under {prefix}")
    return uri[len(prefix):]


def read_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    with open(uri, "rb") as f:
        return f.read()


def iter_lines(uri: str) -> Iterator[bytes]:
    """The object's lines (gunzipped for `.gz`), streamed, without line terminators."""
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        stream = io.BufferedReader(_RawReader(body), buffer_size=1 << 20)
    else:
        stream = open(uri, "rb", buffering=1 << 20)
    try:
        if uri.endswith(".gz"):
            stream = gzip.GzipFile(fileobj=stream, mode="rb")
            stream = io.BufferedReader(stream, buffer_size=1 << 20)
        for line in stream:
            yield line.rstrip(b"\r\n")
    finally:
        stream.close()


class _RawReader(io.RawIOBase):
    """A file object over a botocore body (which only offers read(n))."""

    def __init__(self, body):
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


def write_bytes(uri: str, data: bytes) -> None:
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        return
    os.makedirs(os.path.dirname(uri), exist_ok=True)
    tmp = f"{uri}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, uri)


def move(src: str, dst: str) -> None:
    """Move one object (rename locally; copy + delete on S3)."""
    if is_s3(src):
        sb, sk = _split_s3(src)
        db, dk = _split_s3(dst)
        s3_client().copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk})
        s3_client().delete_object(Bucket=sb, Key=sk)
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.replace(src, dst)


def delete(uri: str) -> None:
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        s3_client().delete_object(Bucket=bucket, Key=key)
    elif os.path.exists(uri):
        os.remove(uri)


def delete_prefix(prefix: str) -> None:
    prefix = normalize(prefix)
    if is_s3(prefix):
        for info in list_objects(prefix):
            delete(info.uri)
    elif os.path.isdir(prefix):
        shutil.rmtree(prefix)


def exists(uri: str) -> bool:
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        try:
            s3_client().head_object(Bucket=bucket, Key=key)
            return True
        except Exception:
            return False
    return os.path.exists(uri)


def ensure_bucket(uri: str) -> None:
    """Create the bucket of an s3 URI if it does not exist (demo and tests)."""
    bucket, _ = _split_s3(uri)
    client = s3_client()
    try:
        client.head_bucket(Bucket=bucket)
    except Exception:
        client.create_bucket(Bucket=bucket)
