"""One run at a time per output: a lease, `<output>/_lease.json`.

A run takes the lease before it touches the output (before it finishes an interrupted commit
or clears its staging) and gives it back when it ends, succeeded or failed. While it runs, a
background thread refreshes the lease's heartbeat; the commit checks, right before it starts,
that the lease is still this run's (`assert_held`). A second run on the same output is
refused in one line (exit 2) naming the run that holds it. A lease whose heartbeat is older
than the timeout (`--lease-timeout`, else $CDC_REPLAY_LEASE_TIMEOUT, else 600 s) is stale:
its run was killed (SIGKILL, a lost machine) or is stuck, and the next run takes it over.
A lease whose owner is provably dead is taken over at once: written on this host (same host
name, boot and PID namespace) by a process that no longer runs, or whose pid now belongs to a
process started at another time (`owner_dead`); a lease of another host waits for the timeout.

The document: {"version", "owner": {"host", "pid", "run_id", "boot_id", "pid_ns", "pid_start"},
"token", "started_at",
"heartbeat_at" (ISO 8601, UTC), "heartbeat" (Unix seconds), "timeout_s"}.

How it is made atomic:

* local paths: the lease is written complete to a temporary file, then hard-linked to its
  name: link() fails when the name exists, atomically (also on NFS), so of two runs exactly
  one creates it and nobody reads a half-written lease. Taking over a stale lease, a
  heartbeat and the release hold an exclusive `flock` on the lease file and check, under it,
  that the file is still the one at the name and still holds what was read (its token);
* S3: a conditional PUT, `If-None-Match: *`, creates the lease only when there is none
  (AWS S3 since 2024-08, MinIO; a server without it answers 501 and the lease falls back to
  a read-then-write check, said in the log); a takeover, a heartbeat and the release are
  conditional on the ETag read (`If-Match`), so of two runs taking over the same stale lease
  one wins and the other is refused;
* a Kafka output (kafka://) has no folder: its lease is in the --manifest-uri home, with its
  manifest and staging. Two runs producing into the same topics with different
  --manifest-uri are not stopped by it.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid

import orjson

from . import storage

LEASE = "_lease.json"
ENV = "CDC_REPLAY_LEASE_TIMEOUT"
DEFAULT_TIMEOUT = 600.0
VERSION = 1
log = logging.getLogger("cdc_replay")


class LeaseHeld(Exception):
    """The output is another run's: the message is one line naming it."""


class LeaseLost(Exception):
    """This run's lease was taken over (it was found stale) or removed."""


def timeout_seconds(option: float | None) -> float:
    """--lease-timeout, else $CDC_REPLAY_LEASE_TIMEOUT, else 600 s (ValueError when not > 0)."""
    if option is not None:
        value = float(option)
    else:
        text = os.environ.get(ENV, "").strip()
        try:
            value = float(text) if text else DEFAULT_TIMEOUT
        except ValueError:
            raise ValueError(f"${ENV}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"the lease timeout must be more than 0 seconds, got {value:g}")
    return value


def _now_iso(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds")


def describe(doc: dict, now: float | None = None) -> str:
    """`run R (pid P on H), started S, heartbeat N s ago`."""
    now = time.time() if now is None else now
    owner = doc.get("owner") or {}
    beat = doc.get("heartbeat")
    ago = f"heartbeat {now - beat:.0f} s ago" if isinstance(beat, int | float) else "no heartbeat"
    dead = ", its process no longer runs" if owner_dead(doc) else ""
    return (f"run {owner.get('run_id', '?')} (pid {owner.get('pid', '?')} on {owner.get('host', '?')}{dead}), "
            f"started {doc.get('started_at', '?')}, {ago}")


def is_stale(doc: dict, timeout: float, now: float | None = None) -> bool:
    """No heartbeat for `timeout` seconds, or an owner that is provably dead (`owner_dead`)."""
    now = time.time() if now is None else now
    beat = doc.get("heartbeat")
    return not isinstance(beat, int | float) or now - beat > timeout or owner_dead(doc)


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None when
    there is no such process (or no /proc). A zombie counts as gone: it runs no more."""
    text = _read_text(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _this_machine() -> dict:
    """What tells this host's processes apart from another's that shares its name: the boot
    (Linux boot_id) and the PID namespace (a container's pids are not the host's)."""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = None
    return {"host": socket.gethostname(), "boot_id": _read_text("/proc/sys/kernel/random/boot_id"), "pid_ns": pid_ns}


def owner_dead(doc: dict) -> bool:
    """The lease's owner provably no longer runs: written on this very machine (same host
    name, boot and PID namespace, all recorded) by a pid that is gone or now belongs to a
    process started at another time. Anything else (another host, an older lease without
    these fields, no /proc) is not provable: the heartbeat timeout decides."""
    owner = doc.get("owner")
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not owner.get("pid_start"):
        return False
    here = _this_machine()
    if not here["boot_id"] or not here["pid_ns"] or any(owner.get(k) != here[k] for k in here):
        return False
    return _process_start(owner["pid"]) != owner["pid_start"]


def read(home: str) -> dict | None:
    """The lease at `home` (None: there is none). A lease that cannot be parsed reads as a
    document without heartbeat (stale)."""
    doc, _ = _read(storage.join(storage.normalize(home), LEASE))
    return doc


def check_free(home: str, timeout: float) -> None:
    """Refuse (LeaseHeld) when a live lease holds `home`: the check before Spark starts
    (`cdc-replay replay` says it in one line without starting the JVM). Taking the lease is
    `Lease.acquire`, when the run starts."""
    doc = read(home)
    if doc is not None and not is_stale(doc, timeout):
        raise LeaseHeld(_held_message(home, doc, timeout))


def _held_message(home: str, doc: dict, timeout: float) -> str:
    return (f"--output {home} is in use by another replay: {describe(doc)} (its lease {storage.join(home, LEASE)} "
            f"is taken over when its heartbeat is older than {timeout:g} s: --lease-timeout, ${ENV}); one run at "
            "a time per output")


def _read(uri: str) -> tuple[dict | None, str | None]:
    """(document, S3 ETag or local inode tag) of the lease, (None, None) when there is none."""
    if storage.is_s3(uri):
        bucket, key = storage._split_s3(uri)
        try:
            response = storage.s3_client().get_object(Bucket=bucket, Key=key)
        except Exception as e:  # noqa: BLE001
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise
        data = response["Body"].read()
        return _parse(data), response.get("ETag")
    import fcntl

    try:
        with open(uri, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # not while a heartbeat rewrites it
            return _parse(f.read()), None
    except FileNotFoundError:
        return None, None


def _parse(data: bytes) -> dict:
    try:
        doc = orjson.loads(data)
        return doc if isinstance(doc, dict) else {}
    except orjson.JSONDecodeError:
        return {}


def _code(e: Exception) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


_CONFLICT = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class Lease:
    """This run's lease on `home`: `acquire()` (LeaseHeld when another run holds it),
    a heartbeat thread while it runs, `release()` at the end. Also a context manager."""

    def __init__(self, home: str, run_id: str, timeout: float):
        self.home = storage.normalize(home)
        self.uri = storage.join(self.home, LEASE)
        self.run_id, self.timeout = run_id, timeout
        self.token = uuid.uuid4().hex
        self.started = time.time()
        self._etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.lost: str | None = None  # why the lease is no longer ours
        self.took_over: dict | None = None  # the stale lease this run replaced

    # -------------------------------------------------------------- the document
    def _doc(self) -> bytes:
        now = time.time()
        here = _this_machine()
        return orjson.dumps({
            "version": VERSION,
            "owner": {"host": here["host"], "pid": os.getpid(), "run_id": self.run_id, "boot_id": here["boot_id"],
                      "pid_ns": here["pid_ns"], "pid_start": _process_start(os.getpid())},
            "token": self.token, "started_at": _now_iso(self.started), "heartbeat_at": _now_iso(now),
            "heartbeat": now, "timeout_s": self.timeout,
        }, option=orjson.OPT_INDENT_2)

    # -------------------------------------------------------------- acquire
    def acquire(self) -> "Lease":
        for _ in range(5):  # a lease released or replaced between our reads: look again
            if self._create():
                break
            doc, tag = _read(self.uri)
            if doc is None:
                continue
            if not is_stale(doc, self.timeout):
                raise LeaseHeld(_held_message(self.home, doc, self.timeout))
            if self._take_over(doc, tag):
                self.took_over = doc
                log.warning("took over the stale lease of %s at %s: %s", self.home, self.uri, describe(doc))
                break
        else:
            doc, _ = _read(self.uri)
            raise LeaseHeld(_held_message(self.home, doc or {}, self.timeout))
        # in this thread's context: storage.using's client (the Airflow hook's) reaches the heartbeat too
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._beat,),
                                        name="cdc-replay-lease", daemon=True)
        self._thread.start()
        return self

    def _create(self) -> bool:
        data = self._doc()
        if storage.is_s3(self.uri):
            bucket, key = storage._split_s3(self.uri)
            client = storage.s3_client()
            try:
                response = client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except Exception as e:  # noqa: BLE001
                code = _code(e)
                if code in _CONFLICT:
                    return False
                if code not in ("NotImplemented", "501"):
                    raise
                log.warning("%s: the S3 server does not do conditional writes (If-None-Match): the lease is "
                            "checked by reading first, which two runs starting together can both pass", self.uri)
                if _read(self.uri)[0] is not None:
                    return False
                response = client.put_object(Bucket=bucket, Key=key, Body=data)
            self._etag = response.get("ETag")
            return True
        os.makedirs(self.home, exist_ok=True)
        tmp = f"{self.uri}.{self.token}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, self.uri)  # atomic: fails when the name exists
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def _take_over(self, stale: dict, etag: str | None) -> bool:
        if storage.is_s3(self.uri):
            bucket, key = storage._split_s3(self.uri)
            try:
                response = storage.s3_client().put_object(Bucket=bucket, Key=key, Body=self._doc(), IfMatch=etag)
            except Exception as e:  # noqa: BLE001
                if _code(e) in _CONFLICT + ("NoSuchKey", "404"):
                    return False  # another run took it over (or it was released) first
                raise
            self._etag = response.get("ETag")
            return True
        return self._local_update(expect=stale.get("token"), data=self._doc(), expect_stale=True)

    # -------------------------------------------------------------- local updates under flock
    def _local_update(self, expect: str | None, data: bytes | None, expect_stale: bool = False) -> bool:
        """Replace (data) or delete (None) the local lease file if it still holds token
        `expect` (and, for a takeover, is still stale), under an exclusive flock on it."""
        import fcntl

        try:
            fd = os.open(self.uri, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_ino != os.stat(self.uri).st_ino:
                    return False  # replaced or deleted while we waited for the lock
            except FileNotFoundError:
                return False
            with os.fdopen(os.dup(fd), "rb") as f:
                doc = _parse(f.read())
            if doc.get("token") != expect or (expect_stale and not is_stale(doc, self.timeout)):
                return False
            if data is None:
                os.unlink(self.uri)
                return True
            # over the old bytes, then cut: on a full disk the small document's block is reused
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
            return True
        finally:
            os.close(fd)  # releases the flock

    # -------------------------------------------------------------- heartbeat
    def heartbeat(self) -> None:
        """Refresh the heartbeat now (LeaseLost when the lease is no longer ours)."""
        with self._lock:
            if self.lost:
                raise LeaseLost(self.lost)
            if storage.is_s3(self.uri):
                bucket, key = storage._split_s3(self.uri)
                try:
                    response = storage.s3_client().put_object(Bucket=bucket, Key=key, Body=self._doc(),
                                                              IfMatch=self._etag)
                except Exception as e:  # noqa: BLE001
                    if _code(e) in _CONFLICT + ("NoSuchKey", "404"):
                        self._lose()
                    raise
                self._etag = response.get("ETag")
            elif not self._local_update(expect=self.token, data=self._doc()):
                self._lose()

    def _lose(self) -> None:
        doc, _ = _read(self.uri)
        self.lost = (f"the lease on {self.home} is no longer this run's ({'now ' + describe(doc) if doc else 'removed'}"
                     f"): this run was taken for dead (no heartbeat for {self.timeout:g} s) and another took over")
        raise LeaseLost(self.lost)

    def _beat(self) -> None:
        interval = max(0.2, min(60.0, self.timeout / 5))
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except LeaseLost as e:
                log.error("%s", e)
                return
            except Exception as e:  # noqa: BLE001 - a failed refresh is retried at the next beat
                log.warning("lease heartbeat on %s failed (%s: %s); retrying in %.0f s", self.uri,
                            type(e).__name__, e, interval)

    def assert_held(self) -> None:
        """Before the commit: the lease is still this run's (LeaseLost otherwise)."""
        if self.lost:
            raise LeaseLost(self.lost)
        doc, etag = _read(self.uri)
        if doc is None or doc.get("token") != self.token:
            with self._lock:
                self.lost = self.lost or (
                    f"the lease on {self.home} is no longer this run's ({'now ' + describe(doc) if doc else 'removed'}); "
                    "another run took over the output, so this one does not commit")
            raise LeaseLost(self.lost)

    # -------------------------------------------------------------- release
    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still ours (never raises)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            if self.lost:
                return
            try:
                if storage.is_s3(self.uri):
                    bucket, key = storage._split_s3(self.uri)
                    try:
                        storage.s3_client().delete_object(Bucket=bucket, Key=key, IfMatch=self._etag)
                    except Exception as e:  # noqa: BLE001
                        if _code(e) not in _CONFLICT + ("NoSuchKey", "404"):
                            raise
                else:
                    self._local_update(expect=self.token, data=None)
            except Exception as e:  # noqa: BLE001 - the lease goes stale and is taken over later
                log.warning("could not release the lease %s (%s: %s); the next run takes it over after %g s",
                            self.uri, type(e).__name__, e, self.timeout)
            self.lost = "released"

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


_current: Lease | None = None


def hold(lease: Lease | None) -> None:
    """The lease this process's run holds (checked by manifest.commit before it commits)."""
    global _current
    _current = lease


@contextlib.contextmanager
def running(home: str, run_id: str, timeout_option: float | None, staging: str):
    """One run's hold on its output, as the app and the Airflow carry-forward both take it: the
    lease before the output is touched (LeaseHeld while another live run has it), held for the
    commit's check, released at the end. What the run staged goes when it fails, unless its
    commit switched to it (faults.clean_staging: the next run finishes that commit)."""
    from . import faults

    lease = Lease(home, run_id, timeout_seconds(timeout_option)).acquire()
    hold(lease)
    try:
        yield lease
    except BaseException:
        faults.clean_staging(home, staging)
        raise
    finally:
        lease.release()
        hold(None)


def assert_held(home: str) -> None:
    """Called by the commit: when this process holds a lease on `home`, it is still ours."""
    if _current is not None and _current.home == storage.normalize(home) and _current.lost != "released":
        _current.assert_held()
