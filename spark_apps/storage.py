"""Object storage for archives and outputs: local directories and `s3://bucket/prefix`.

S3 goes through boto3 (no hadoop-aws jar exists here, and executors need nothing but Python):
the endpoint comes from `AWS_ENDPOINT_URL` and credentials from the usual AWS variables, so a
loopback moto server or MinIO works the same as AWS. Every function takes full URIs.
The Airflow tasks use these same functions with the client their hook builds from an Airflow
connection (`using`); no other module lists, tests, reads, writes or deletes objects.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import urlparse

from .paths import join, overlaps  # noqa: F401  (the contract's naming rules, spark_apps.paths)

_S3_CLIENTS: dict = {}
log = logging.getLogger("cdc_replay")


@dataclass(frozen=True)
class ReadSettings:
    """How S3 objects are read: GETs of `chunk_size` bytes (Range requests), and botocore's
    retry policy (`retry_mode` standard|adaptive, `max_attempts` per request, which also
    bounds the resumes of one interrupted body). Defaults follow the AWS variables
    AWS_MAX_ATTEMPTS / AWS_RETRY_MODE when set, as every AWS SDK does."""

    chunk_size: int = 8 << 20
    max_attempts: int = 8
    retry_mode: str = "standard"
    # limits on what one object or message may make us hold (docs/reliability.md "Limits"):
    # decompressed bytes per compressed object as a ratio to its stored bytes (at least
    # INFLATE_FLOOR), bytes per line of a line-based object, columns per row image and rows per
    # message (spark_apps.archive_io checks these two)
    max_inflate_ratio: float = 100.0
    max_line_bytes: int = 64 << 20
    max_columns: int = 4096
    max_rows: int = 100_000


INFLATE_FLOOR = 16 << 20  # a small object may always decompress to this many bytes


def _default_settings() -> ReadSettings:
    attempts = os.environ.get("AWS_MAX_ATTEMPTS", "")
    mode = os.environ.get("AWS_RETRY_MODE", "")
    return ReadSettings(max_attempts=int(attempts) if attempts.isdigit() and int(attempts) > 0 else 8,
                        retry_mode=mode if mode in ("standard", "adaptive") else "standard")


_SETTINGS = _default_settings()


def read_settings(args) -> ReadSettings:
    """The read settings a request's options give (spark_apps.options.ReplayArgs: the S3 options
    and the limits); the AWS variables where the options leave them unset."""
    default = _default_settings()
    return ReadSettings(chunk_size=args.s3_read_chunk_size, max_attempts=args.s3_max_attempts or default.max_attempts,
                        retry_mode=args.s3_retry_mode or default.retry_mode, max_columns=args.max_columns,
                        max_rows=args.max_rows, max_inflate_ratio=args.max_inflate_ratio,
                        max_line_bytes=args.max_line_bytes)


def settings() -> ReadSettings:
    return _SETTINGS


def configure(read_settings: ReadSettings) -> None:
    """Use these settings in this process (the driver sets them from the options; Spark
    tasks get them in the closure of the function that reads: archive_io)."""
    global _SETTINGS
    if read_settings.chunk_size < 1:
        raise ValueError(f"chunk size must be at least 1 byte, got {read_settings.chunk_size}")
    if read_settings.max_attempts < 1:
        raise ValueError(f"max attempts must be at least 1, got {read_settings.max_attempts}")
    if read_settings.retry_mode not in ("standard", "adaptive"):
        raise ValueError(f"retry mode must be standard or adaptive, got {read_settings.retry_mode!r}")
    for name in ("max_inflate_ratio", "max_line_bytes", "max_columns", "max_rows"):
        if not getattr(read_settings, name) >= 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(read_settings, name)}")
    if read_settings != _SETTINGS:
        _SETTINGS = read_settings
        _S3_CLIENTS.clear()


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    # when the object was last written (S3 LastModified, a file's mtime), as listings give it;
    # the Airflow DAGs select an interval's archive objects by it when the path holds no time
    modified: dt.datetime | None = field(default=None, compare=False)


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def normalize(uri: str) -> str:
    """Absolute local paths (file:// accepted); s3 URIs unchanged, without a trailing slash."""
    if is_s3(uri):
        return uri.rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return os.path.abspath(uri)


def _split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if not parsed.netloc:
        raise ValueError(f"{uri!r} has no bucket (expected s3://bucket/prefix)")
    return parsed.netloc, parsed.path.lstrip("/")


_GIVEN_CLIENT: ContextVar[Callable | None] = ContextVar("cdc_replay_s3_client", default=None)


@contextmanager
def using(client_factory: Callable):
    """Inside this block (this thread or task only) S3 is reached through the client that
    `client_factory()` returns instead of the one from the AWS variables: the Airflow hook's,
    built from its connection. The factory is called on the first S3 request only, so local
    paths never build a client."""
    token = _GIVEN_CLIENT.set(client_factory)
    try:
        yield
    finally:
        _GIVEN_CLIENT.reset(token)


def s3_client():
    """The client `using` gave, else one boto3 client per process and endpoint (creating one
    costs ~50 ms). botocore retries each request (503 SlowDown and other throttling, 5xx,
    connection errors before the response) with exponential backoff, as `settings()` says."""
    given = _GIVEN_CLIENT.get()
    if given is not None:
        return given()
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    client = _S3_CLIENTS.get(endpoint)
    if client is None:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3", endpoint_url=endpoint,
            config=Config(retries={"max_attempts": _SETTINGS.max_attempts, "mode": _SETTINGS.retry_mode},
                          max_pool_connections=16),
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
                found.append(ObjectInfo(f"s3://{bucket}/{item['Key']}", item["Size"], item.get("LastModified")))
        return sorted(found, key=lambda o: o.uri)
    if os.path.isfile(prefix):
        return [_local_info(prefix)]
    found = []
    for root, _dirs, files in os.walk(prefix):
        for name in files:
            found.append(_local_info(os.path.join(root, name)))
    return sorted(found, key=lambda o: o.uri)


def _local_info(path: str) -> ObjectInfo:
    stat = os.stat(path)
    return ObjectInfo(path, stat.st_size, dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc))


def total_size(prefix: str, stop_above: int | None = None) -> int:
    """Bytes of every object below `prefix`, the listing stopped as soon as the sum passes
    `stop_above` (sizing a source before Spark starts must stay cheap on a huge archive)."""
    prefix = normalize(prefix)
    total = 0
    if is_s3(prefix):
        bucket, key = _split_s3(prefix)
        pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{key}/" if key else "")
        sizes = (item["Size"] for page in pages for item in page.get("Contents", ()))
    elif os.path.isfile(prefix):
        sizes = iter([os.path.getsize(prefix)])
    else:
        sizes = (os.path.getsize(os.path.join(root, name)) for root, _dirs, files in os.walk(prefix) for name in files)
    for size in sizes:
        total += size
        if stop_above is not None and total > stop_above:
            break
    return total


def relative(uri: str, prefix: str) -> str:
    prefix = normalize(prefix).rstrip("/") + "/"
    uri = normalize(uri)
    if not uri.startswith(prefix):
        raise ValueError(f"{uri} is not under {prefix}")
    return uri[len(prefix):]


def read_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        with _RangedReader(bucket, key) as reader:
            return reader.readall()
    with open(uri, "rb") as f:
        return f.read()


class _RangedReader(io.RawIOBase):
    """An S3 object's bytes, read in Range GETs of `settings().chunk_size` bytes.

    botocore retries a GET until its response starts, but a body cut afterwards (connection
    reset, timeout mid-stream) surfaces as an exception from read(): retrying the whole
    object there would re-emit lines already yielded. This reader instead asks again for
    the range from the first byte not yet received, with exponential backoff (full jitter),
    up to `max_attempts` consecutive failures; later ranges carry If-Match with the first
    response's ETag, so an object replaced mid-read fails instead of mixing two versions."""

    def __init__(self, bucket: str, key: str, start: int = 0):
        self._bucket, self._key = bucket, key
        self._settings = _SETTINGS
        self._position = start  # the first Range GET starts here
        self._size: int | None = None  # known after the first response
        self._etag: str | None = None
        self._body = None
        self._body_end = 0  # the range of the current body ends before this byte
        self.resumes = 0

    def readable(self) -> bool:
        return True

    def _open(self) -> None:
        end = self._position + self._settings.chunk_size - 1
        if self._size is not None:
            end = min(end, self._size - 1)
        request = {"Bucket": self._bucket, "Key": self._key, "Range": f"bytes={self._position}-{end}"}
        if self._etag:
            request["IfMatch"] = self._etag
        try:
            response = s3_client().get_object(**request)
        except Exception as e:
            code = str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))
            if code == "InvalidRange" and self._position == 0:  # a zero-byte object
                self._size, self._body, self._body_end = 0, None, 0
                return
            raise
        self._etag = self._etag or response.get("ETag")
        content_range = response.get("ContentRange") or ""
        if "/" in content_range:
            self._size = int(content_range.rsplit("/", 1)[1])
        else:  # a server that ignored Range sent the whole object
            if self._position:
                response["Body"].close()
                raise OSError(f"s3://{self._bucket}/{self._key}: the server ignored a Range request")
            self._size = int(response.get("ContentLength", 0))
        self._body = response["Body"]
        self._body_end = self._position + int(response.get("ContentLength", 0))

    def readinto(self, buffer) -> int:
        import botocore.exceptions as bx
        import urllib3.exceptions as ux

        failures = 0
        while True:
            if not len(buffer) or (self._size is not None and self._position >= self._size):
                return 0
            try:
                if self._body is None or self._position >= self._body_end:
                    self._close_body()
                    self._open()
                    if self._body is None:
                        return 0
                data = self._body.read(min(len(buffer), self._body_end - self._position))
                if not data:
                    raise bx.IncompleteReadError(actual_bytes=self._position, expected_bytes=self._body_end)
            except (bx.ResponseStreamingError, bx.IncompleteReadError, bx.ReadTimeoutError, bx.ConnectionError,
                    ux.HTTPError, ConnectionError, TimeoutError) as e:
                self._close_body()
                failures += 1
                if failures >= self._settings.max_attempts:
                    raise
                self.resumes += 1
                delay = random.uniform(0, min(20.0, 0.1 * 2 ** failures))
                log.warning("s3://%s/%s: read interrupted at byte %d (%s); resuming in %.2fs",
                         self._bucket, self._key, self._position, type(e).__name__, delay)
                time.sleep(delay)
                continue
            buffer[: len(data)] = data
            self._position += len(data)
            return len(data)

    def _close_body(self) -> None:
        if self._body is not None:
            try:
                self._body.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is dropped
                pass
            self._body = None

    def close(self) -> None:
        self._close_body()
        super().close()


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
    """A compressed object (`.gz`, `.zst`, `.lz4`, `.snappy`) that is truncated or corrupt (or
    empty) at `byte_offset` of its compressed bytes; every complete line before the damage was already yielded, and
    `partial` holds the decompressed bytes of the incomplete line cut by it."""

    def __init__(self, byte_offset: int, reason: str, partial: bytes = b""):
        super().__init__(f"damaged at byte {byte_offset}: {reason}")
        self.byte_offset, self.reason, self.partial = byte_offset, reason, partial


CHUNK = 1 << 20


def _chunks(uri: str) -> Iterator[bytes]:
    return iter_range(uri, 0)


def iter_range(uri: str, start: int) -> Iterator[bytes]:
    """The object's stored bytes (not decompressed) from byte `start` to its end, in pieces:
    on S3 Range GETs that begin at `start`, so a task reading one part of a large object
    fetches about that part (closing the iterator early stops the reads)."""
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        with _RangedReader(bucket, key, start) as reader:
            while chunk := reader.read(CHUNK):
                yield chunk
        return
    with open(uri, "rb") as f:
        f.seek(start)
        while chunk := f.read(CHUNK):
            yield chunk


def _gunzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Decompressed pieces of a gzip stream (several members allowed); raises DamagedObject
    at the exact compressed byte where it stops making sense, after yielding all before.
    Inflated by zlib-ng (the same format, ~2x faster than the stdlib's zlib; its decompressor
    copies, reports eof and unused data, and raises its own `error`, as zlib's does)."""
    from zlib_ng import zlib_ng as zlib

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


class OverLimit(DamagedObject):
    """A compressed object that decompresses to more than --max-inflate-ratio times its stored
    bytes (a decompression bomb): the lines before that point were yielded, the rest is not read."""


class _Counted:
    """The compressed chunks of an object (callable again, to re-read it), counting the bytes
    read (`position`) and knowing its stored size (`size`, from the first read)."""

    def __init__(self, uri: str):
        self.uri, self.position, self.size = uri, 0, None

    def __call__(self) -> Iterator[bytes]:
        self.position = 0
        if is_s3(self.uri):
            bucket, key = _split_s3(self.uri)
            with _RangedReader(bucket, key) as reader:
                while chunk := reader.read(CHUNK):
                    self.size = reader._size
                    self.position += len(chunk)
                    yield chunk
            return
        with open(self.uri, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            while chunk := f.read(CHUNK):
                self.position += len(chunk)
                yield chunk


def _guarded(pieces: Iterator[bytes], counted: _Counted) -> Iterator[bytes]:
    """The decompressed pieces, stopped (OverLimit) when they exceed the ratio to the stored size."""
    ratio = _SETTINGS.max_inflate_ratio
    total = 0
    for piece in pieces:
        limit = max(int(ratio * (counted.size or 0)), INFLATE_FLOOR)
        if total + len(piece) > limit:
            yield piece[:limit - total]  # the lines up to the limit are read
            raise OverLimit(counted.position, f"over the limit: it decompresses to more than {limit:,} bytes, "
                                              f"{ratio:g} times its {counted.size:,} stored bytes "
                                              "(--max-inflate-ratio); the rest of the object is not read")
        total += len(piece)
        yield piece


def iter_pieces(uri: str) -> Iterator[bytes]:
    """The object's decompressed bytes in pieces (lines cross pieces); a damaged compressed
    object (`.gz`, `.zst`, `.lz4`, `.snappy`: truncated, corrupt or empty) yields everything
    before the damage, then raises DamagedObject naming the compressed byte; one that
    decompresses beyond --max-inflate-ratio raises OverLimit there."""
    method = compression_of(uri)
    if method is None:
        return _chunks(uri)
    counted = _Counted(uri)
    if method == "gzip" and uri.endswith(".gz"):  # our own reader, to keep every line before damage and say where
        pieces = _gunzip(_slices(counted(), 64 << 10))  # 64 KiB in: at most ~64 MiB out per call (deflate)
    else:  # zstd, lz4, snappy: the same promise, through spark_apps.damage
        from .damage import decode

        pieces = decode(method, counted, DamagedObject)
    return _guarded(pieces, counted)


def _slices(chunks: Iterator[bytes], size: int) -> Iterator[bytes]:
    for chunk in chunks:
        for start in range(0, len(chunk), size):
            yield chunk[start:start + size]


class LongLine(bytes):
    """A line longer than --max-line-bytes: its first bytes only (`length`: the whole line's);
    the layouts quarantine it (`layouts.base.long_line_row`) instead of reading it."""

    length: int = 0
    KEPT = 64 << 10  # bytes of it kept for the quarantine row


def _long_line(head: bytes, length: int) -> LongLine:
    line = LongLine(head[:LongLine.KEPT])
    line.length = length
    return line


def iter_lines(uri: str) -> Iterator[bytes]:
    """The object's lines (decompressed by extension: .gz, .zst, .lz4, .snappy), streamed,
    without line terminators. A damaged compressed object yields every complete line before
    the damage, then raises DamagedObject. A line longer than --max-line-bytes comes as a
    LongLine (its head), never held whole."""
    limit = _SETTINGS.max_line_bytes
    pending = b""
    skipping = 0  # inside a long line: its bytes so far (its head is `pending`)
    try:
        for piece in iter_pieces(uri):
            if skipping:
                end = piece.find(b"\n")
                if end < 0:
                    skipping += len(piece)
                    continue
                yield _long_line(pending, skipping + end)
                pending, skipping, piece = b"", 0, piece[end + 1:]
            lines = (pending + piece).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if len(line) > limit:
                    yield _long_line(line, len(line))
                else:
                    yield line.rstrip(b"\r")
            if len(pending) > limit:
                skipping, pending = len(pending), pending[:LongLine.KEPT]
    except DamagedObject as e:
        e.partial = pending
        raise
    if skipping:
        yield _long_line(pending, skipping)
    elif pending:
        yield pending.rstrip(b"\r") if len(pending) <= limit else _long_line(pending, len(pending))


def open_stream(uri: str):
    """A binary file object over the object's decompressed bytes (by extension)."""
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        stream = io.BufferedReader(_RangedReader(bucket, key), buffer_size=1 << 20)
    else:
        stream = open(uri, "rb", buffering=1 << 20)
    try:
        return _decompressing(stream, uri)
    except Exception:
        stream.close()
        raise


def write_bytes(uri: str, data: bytes, content_type: str | None = None) -> None:
    """One object in one PUT (locally: a temporary file renamed over it); `content_type` is
    the S3 object's Content-Type (S3's default when None)."""
    if is_s3(uri):
        bucket, key = _split_s3(uri)
        typed = {"ContentType": content_type} if content_type else {}
        s3_client().put_object(Bucket=bucket, Key=key, Body=data, **typed)
        return
    os.makedirs(os.path.dirname(uri), exist_ok=True)
    tmp = f"{uri}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
    except OSError as e:  # a full disk: say where, and leave no partial file
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, uri) from e
        raise
    os.replace(tmp, uri)


def copy(src: str, dst: str) -> None:
    """Copy one object (server-side on S3; locally a hard link when it can, replacing `dst`
    in one rename)."""
    if is_s3(src):
        sb, sk = _split_s3(src)
        db, dk = _split_s3(dst)
        s3_client().copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk})
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(dst) and os.path.samefile(src, dst):
        return  # already linked (a commit or carry-forward run again): renaming a link onto it would do nothing
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


def delete_prefix(prefix: str) -> int:
    """Delete every object below `prefix` (S3: 1,000 keys per request); returns how many."""
    prefix = normalize(prefix)
    if is_s3(prefix):
        objects = list_objects(prefix)
        bucket, _ = _split_s3(prefix)
        for start in range(0, len(objects), 1000):
            keys = [{"Key": _split_s3(o.uri)[1]} for o in objects[start:start + 1000]]
            errors = s3_client().delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True}).get("Errors")
            if errors:  # a key S3 did not delete is no success
                first = errors[0]
                raise OSError(f"s3://{bucket}/{first.get('Key')}: not deleted ({first.get('Code')}: "
                              f"{first.get('Message')}; {len(errors)} keys failed)")
        return len(objects)
    if os.path.isdir(prefix):
        count = sum(len(files) for _root, _dirs, files in os.walk(prefix))
        shutil.rmtree(prefix)
        return count
    return 0


def exists(uri: str) -> bool:
    """Whether the object exists. On S3 any answer to the HEAD that is an error (404, or 403
    without list permission) means no; a request that gets no answer raises."""
    if is_s3(uri):
        import botocore.exceptions as bx

        bucket, key = _split_s3(uri)
        try:
            s3_client().head_object(Bucket=bucket, Key=key)
            return True
        except bx.ClientError:
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
