"""Faults of the environment end in one line, not a stack trace.

* Before Spark starts, `probe_output` creates and deletes a small object under the output
  (`_probe-<random>`): an output that cannot be written (a read-only file system, no
  permission, a full disk, a path under a file, a bucket that denies PutObject) is refused in
  one line naming the path and the cause, exit 2 (spark_apps.replay.validate).
* A fault found later (the disk fills during the run, the bucket policy changes) fails the
  run with one line, exit 1: `one_line` digs the cause out of the exception (a Spark task's
  Python traceback inside a Py4JJavaError included), and the full trace goes to a log file
  named in that line (`trace_file`: $CDC_REPLAY_LOG, else the temporary directory). Spark's
  own task-failure reports go to that file too (spark_apps/conf/log4j2.properties).
* What the failed run staged is deleted when nothing points at it (`clean_staging`); what
  cannot be deleted then is deleted by the next successful run (docs/reliability.md).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import traceback
import uuid

from . import storage

LOG_ENV = "CDC_REPLAY_LOG"
PROBE_PREFIX = "_probe-"


def describe_os_error(e: OSError) -> str:
    """`No space left on device (ENOSPC)`."""
    if e.errno is None:
        return str(e)
    return f"{os.strerror(e.errno)} ({errno.errorcode.get(e.errno, e.errno)})"


def _created_dirs(path: str) -> list[str]:
    """The directories makedirs(path) would create, deepest last."""
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return list(reversed(missing))


def probe_output(home: str, option: str = "--output") -> None:
    """Create and delete a small object under `home` (storage.AccessError, one line, when it
    cannot be done). Local directories the probe had to create are removed again."""
    home = storage.normalize(home)
    name = f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
    data = b"cdc-replay write probe: deleted at once\n"
    if storage.is_s3(home):
        _probe_s3(home, option, storage.join(home, name), data)
        return
    created = _created_dirs(home)
    path = os.path.join(home, name)
    try:
        os.makedirs(home, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)  # delayed allocation: a full disk may only say so here
        finally:
            os.close(fd)
        os.unlink(path)
    except OSError as e:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise storage.AccessError(f"{option} {home} cannot be written: {describe_os_error(e)}"
                                  + (f" at {e.filename}" if e.filename and e.filename != home else "")) from None
    finally:
        for directory in reversed(created):
            try:
                os.rmdir(directory)
            except OSError:
                break


def _probe_s3(home: str, option: str, uri: str, data: bytes) -> None:
    import botocore.exceptions as bx

    bucket, key = storage._split_s3(uri)
    client = storage.s3_client()
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data)
    except bx.ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        raise storage.AccessError(f"{option} {home} cannot be written: PutObject refused ({code}: "
                                  f"{e.response.get('Error', {}).get('Message', '')}); check the bucket policy "
                                  "and the credentials' permissions") from None
    except bx.BotoCoreError as e:
        raise storage.AccessError(f"{option} {home} cannot be written: {type(e).__name__}: {e}") from None
    try:
        client.delete_object(Bucket=bucket, Key=key)
    except bx.ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        raise storage.AccessError(f"{option} {home}: objects can be written but not deleted (DeleteObject: {code}); "
                                  f"a run must replace its output (delete the probe {uri} by hand)") from None


# ------------------------------------------------------------------------- one line


_PY_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception|Exit|Warning|Interrupt)"
                           r"|OSError|PermissionError|FileNotFoundError)(?::\s*(.*))?$")
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] ([^:]+)(?::\s*'?([^']*)'?)?")


def _root(e: BaseException) -> BaseException:
    seen = set()
    while (e.__cause__ or e.__context__) is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return e


def _last_python_error(text: str) -> str | None:
    """The last `SomeError: message` line of a Python traceback quoted in `text` (a Spark
    task's, inside a Py4JJavaError's message)."""
    found = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" in line:
            for later in lines[i + 1:]:
                if later.startswith((" ", "\t")):
                    continue
                match = _PY_EXCEPTION.match(later.strip())
                if match:
                    found = later.strip()
                    break
    return found


def cause_of(e: BaseException) -> str:
    """The fault behind `e` in one line: `No space left on device (ENOSPC): /out/_staging/...`,
    `S3 PutObject AccessDenied: ...`, else the innermost exception's type and first line."""
    text = f"{type(e).__name__}: {e}"
    root = _root(e)
    chain, seen, link = [], set(), e
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(link)
        link = link.__cause__ or link.__context__
    errors = [x for x in chain if isinstance(x, OSError) and x.errno is not None]
    if errors:  # the one that says where, else the innermost
        error = next((x for x in errors if x.filename), errors[-1])
        where = f": {error.filename}" if error.filename else ""
        return f"{describe_os_error(error)}{where}"
    code = getattr(root, "response", {}).get("Error", {}).get("Code") if hasattr(root, "response") else None
    if code:
        operation = getattr(root, "operation_name", "") or ""
        return f"S3 {operation} {code}: {root.response['Error'].get('Message', '')}".replace("  ", " ").strip()
    quoted = _last_python_error(str(e)) or _last_python_error(str(root))
    if quoted:
        errno_match = _ERRNO_TEXT.search(quoted)
        if errno_match:
            number = int(errno_match.group(1))
            name = errno.errorcode.get(number, str(number))
            where = f": {errno_match.group(3)}" if errno_match.group(3) else ""
            return f"{os.strerror(number)} ({name}){where}"
        return quoted
    first = next((line.strip() for line in str(root).splitlines() if line.strip()), "")
    if type(root).__name__ == "Py4JJavaError":  # a JVM failure: its first Java exception line
        java = re.search(r"^\s*(?:Caused by: )?([\w.$]+(?:Exception|Error)(?::.*)?)$", str(root), re.M)
        if java:
            first = java.group(1)
    return f"{type(root).__name__}: {first}" if first else text.splitlines()[0]


def trace_file() -> str:
    """Where the full trace of a failed run goes: $CDC_REPLAY_LOG (`cdc-replay replay` sets one
    per run: `new_log_file`), else <tmp>/cdc-replay.log, where Spark's task-failure reports go
    too (spark_apps/conf/log4j2.properties)."""
    return os.environ.get(LOG_ENV) or os.path.join(tempfile.gettempdir(), "cdc-replay.log")


def new_log_file() -> str:
    """A fresh log file name for one `cdc-replay replay`: <tmp>/cdc-replay-<time>-<pid>.log."""
    import time

    return os.path.join(tempfile.gettempdir(), f"cdc-replay-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log")


def record_trace(e: BaseException, path: str) -> str | None:
    """Append the exception's full trace to `path`; returns the path, None when it cannot be
    written (the disk may be the one that is full)."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(traceback.format_exception(e)))
            f.write("\n")
        return path
    except OSError:
        return None


def clean_staging(home: str, staging: str) -> bool:
    """Delete a failed run's staging unless the manifest points into it (a commit killed or
    failed after its switch: the next run finishes it). True when deleted."""
    from .contract import MANIFEST

    try:
        uri = storage.join(home, MANIFEST)
        if storage.exists(uri):
            import orjson

            pending = (orjson.loads(storage.read_bytes(uri)).get("commit") or {}).get("staging")
            if pending and storage.join(home, pending) == staging:
                return False
        storage.delete_prefix(staging)
        return True
    except Exception:  # noqa: BLE001 - the next successful run deletes what is left
        return False
