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


class AccessError(Exception):
    """A location that cannot be used; the message is one line saying what to fix."""


def check_bucket(uri: str, role: str) -> None:
    """Fail fast, in one line, when the bucket of an s3 URI cannot be used: no credentials,
    endpoint unreachable, no such bucket, access denied. One quick attempt, no retries:
    this runs before Spark starts. Local paths pass."""
    if not is_s3(uri):
        return
    import boto3
    import botocore.exceptions as bx
    from botocore.config import Config

    bucket, _ = _split_s3(uri)
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    where = f"the S3 endpoint {endpoint}" if endpoint else "S3"
    client = boto3.client("s3", endpoint_url=endpoint, config=Config(
        retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=15))
    try:
        client.head_bucket(Bucket=bucket)
    except bx.NoCredentialsError:
        raise AccessError(f"{role} {uri}: no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                          "or AWS_PROFILE)") from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as e:
        raise AccessError(f"{role} {uri}: cannot reach {where} ({type(e).__name__}); check AWS_ENDPOINT_URL and "
                          "the network") from None
    except bx.ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise AccessError(f"{role} {uri}: bucket {bucket!r} does not exist at {where}") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise AccessError(f"{role} {uri}: access to bucket {bucket!r} denied ({code}); check the credentials "
                              "and the bucket policy") from None
        raise AccessError(f"{role} {uri}: bucket {bucket!r} cannot be used ({code}: {e})") from None
    except bx.BotoCoreError as e:
        raise AccessError(f"{role} {uri}: {type(e).__name__}: {e}") from None


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


# object compression chosen by the name's last extension (kept libraries: gzip, zstandard,
# lz4 frames, python-snappy's framing format)
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".lz4", ".snappy", ".sz")


def compression_of(uri: str) -> str | None:
    """gzip | zstd | lz4 | snappy for a compressed object name, else None."""
    for suffix, name in ((".gz", "gzip"), (".zst", "zstd"), (".zstd", "zstd"), (".lz4", "lz4"),
                         (".snappy", "snappy"), (".sz", "snappy")):
        if uri.endswith(suffix):
            return name
    return None


def strip_compression(name: str) -> str:
    """The name without its compression extension."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _decompressing(stream, uri: str):
    method = compression_of(uri)
    if method == "gzip":
        return io.BufferedReader(gzip.GzipFile(fileobj=stream, mode="rb"), buffer_size=1 << 20)
    if method == "zstd":
        import zstandard

        # read_across_frames: files concatenated from several frames read as one
        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        return io.BufferedReader(reader, buffer_size=1 << 20)
    if method == "lz4":
        import lz4.frame

        return io.BufferedReader(lz4.frame.LZ4FrameFile(stream, mode="rb"), buffer_size=1 << 20)
    if method == "snappy":
        import snappy

        # the framing format (`.sz`, `snappy -c`) is streamable; python-snappy has no reader
        # object for it, so decompress the whole object (snappy objects are chunk-sized)
        data = stream.read()
        stream.close()
        return io.BytesIO(snappy.StreamDecompressor().decompress(data))
    return stream


class DamagedObject(Exception):
    """A `.gz` object that is truncated or corrupt (or empty) at `byte_offset` of its
    compressed bytes; every complete line before the damage was already yielded, and
    `partial` holds the decompressed bytes of the incomplete line cut by it."""

    def __init__(self, byte_offset: int, reason: str, partial: bytes = b""):
        super().__init__(f"damaged at byte {byte_offset}: {reason}")
        self.byte_offset, self.reason, self.partial = byte_offset, reason, partial


CHUNK = 1 << 20


def _chunks(uri: str) -> Iterator[bytes]:
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        try:
            while chunk := body.read(CHUNK):
                yield chunk
        finally:
            body.close()
        return
    with open(uri, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _gunzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Decompressed pieces of a gzip stream (several members allowed); raises DamagedObject
    at the exact compressed byte where it stops making sense, after yielding all before."""
    import zlib

    position = 0  # compressed bytes fully consumed
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    started = False  # inside a member
    for chunk in chunks:
        data = chunk
        while data:
            if not started and not data.strip(b"\0"):
                position += len(data)  # zero padding after the last member (as gzip allows)
                data = b""
                break
            started = True
            saved = decompressor.copy()
            try:
                out = decompressor.decompress(data)
            except zlib.error as e:
                # find the exact byte, keeping the output before it
                decompressor = saved
                for i in range(len(data)):
                    try:
                        piece = decompressor.decompress(data[i:i + 1])
                    except zlib.error:
                        raise DamagedObject(position + i, f"corrupt gzip data ({e})") from None
                    if piece:
                        yield piece
                raise DamagedObject(position + len(data), f"corrupt gzip data ({e})") from None
            if out:
                yield out
            if decompressor.eof:
                rest = decompressor.unused_data
                position += len(data) - len(rest)
                data = rest
                decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
                started = False
            else:
                position += len(data)
                data = b""
    if started:
        raise DamagedObject(position, "truncated: the object ends inside a gzip member")
    if position == 0:
        raise DamagedObject(0, "empty object: a .gz object of zero bytes holds no gzip member")


def iter_lines(uri: str) -> Iterator[bytes]:
    """The object's lines (decompressed by extension: .gz, .zst, .lz4, .snappy), streamed,
    without line terminators. A damaged `.gz` yields every complete line before the damage,
    then raises DamagedObject."""
    if uri.endswith(".gz"):  # our own reader, to keep every line before damage and say where it is
        pieces = _gunzip(_chunks(uri))
    elif compression_of(uri):
        pieces = _stream_chunks(open_stream(uri))
    else:
        pieces = _chunks(uri)
    pending = b""
    try:
        for piece in pieces:
            lines = (pending + piece).split(b"\n")
            pending = lines.pop()
            for line in lines:
                yield line.rstrip(b"\r")
    except DamagedObject as e:
        e.partial = pending
        raise
    if pending:
        yield pending.rstrip(b"\r")


def open_stream(uri: str):
    """A binary file object over the object's decompressed bytes (by extension)."""
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
        stream = io.BufferedReader(_RawReader(body), buffer_size=1 << 20)
    else:
        stream = open(uri, "rb", buffering=1 << 20)
    try:
        return _decompressing(stream, uri)
    except Exception:
        stream.close()
        raise


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


def _stream_chunks(stream) -> Iterator[bytes]:
    try:
        while chunk := stream.read(CHUNK):
            yield chunk
    finally:
        stream.close()


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


def copy(src: str, dst: str) -> None:
    """Copy one object (server-side on S3; locally a hard link when it can, replacing `dst`
    in one rename)."""
    if is_s3(src):
        sb, sk = _split_s3(src)
        db, dk = _split_s3(dst)
        s3_client().copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk})
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = f"{dst}.tmp-{os.getpid()}"
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


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
