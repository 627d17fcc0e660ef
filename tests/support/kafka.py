"""A throwaway one-node Apache Kafka broker (KRaft: broker and controller in one JVM) for the
tests that need a real Kafka, started by the project itself: nothing is expected to be running.

The broker is Apache Kafka's own server jar (`org.apache.kafka:kafka_2.13`) and its runtime
dependencies, taken from Maven Central with `mvn dependency:copy-dependencies` on a generated
pom into a per-user cache folder (`CDC_REPLAY_KAFKA_CACHE`, default ~/.cache/cdc-replay/kafka):
the first use downloads ~47 jars (about a minute), later uses none; no jar enters the repository.
The node's storage is formatted as `kafka-storage.sh format` does (`kafka.tools.StorageTool`),
then `kafka.Kafka server.properties` runs it, listening on 127.0.0.1 at free ports chosen at
start, its log folder in a temporary directory removed when the fixture ends.
Measured here (2 shared cores): format ~6 s, broker accepting connections ~25 s after launch.
"""

from __future__ import annotations

import base64
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

from spark_apps.local_s3 import free_port

KAFKA_VERSION = "4.1.1"  # Kafka's server line; Spark 4.2.0's connector speaks to it with its own clients
SCALA = "2.13"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdc-replay.tests</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId><version>{version}</version></dependency>
  </dependencies>
</project>
"""


def cache_dir() -> str:
    return os.environ.get("CDC_REPLAY_KAFKA_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "cdc-replay", "kafka")


def jars(version: str = KAFKA_VERSION) -> str:
    """The folder holding Kafka's server jars and dependencies, downloaded on first use."""
    folder = os.path.join(cache_dir(), f"kafka_{SCALA}-{version}")
    libs = os.path.join(folder, "libs")
    if glob.glob(os.path.join(libs, f"kafka_{SCALA}-{version}.jar")):
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("the Kafka broker's jars come from Maven Central through `mvn`, which is not installed")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "pom.xml"), "w") as f:
        f.write(POM.format(scala=SCALA, version=version))
    staging = libs + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    result = subprocess.run(["mvn", "-q", "-B", "-f", os.path.join(folder, "pom.xml"), "dependency:copy-dependencies",
                             f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"mvn could not fetch kafka_{SCALA}:{version}: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    os.replace(staging, libs)
    return libs




class KafkaBroker:
    """One KRaft node on loopback. `bootstrap` is host:port for clients."""

    def __init__(self, version: str = KAFKA_VERSION, sasl_users: dict[str, str] | None = None):
        """`sasl_users` ({user: password}): also a SASL_PLAINTEXT listener (PLAIN mechanism)
        accepting them, at `sasl_bootstrap`; the PLAINTEXT one stays for the test's own clients."""
        self.version = version
        self.folder = tempfile.mkdtemp(prefix="cdc-replay-kafka-")
        self.port, self.controller_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.sasl_users = dict(sasl_users or {})
        self.sasl_port = free_port() if self.sasl_users else None
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}" if self.sasl_users else None
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    def _properties(self) -> str:
        path = os.path.join(self.folder, "server.properties")
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": os.path.join(self.folder, "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # keep every record: retention is by record timestamp, and generated archives are dated in the past
            "log.retention.ms": "-1",
        }
        if self.sasl_users:
            settings["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            settings["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            settings["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            settings["sasl.enabled.mechanisms"] = "PLAIN"
            users = " ".join(f'user_{user}="{password}"' for user, password in self.sasl_users.items())
            settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};")
        with open(path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in settings.items())
        return path

    def start(self, timeout: float = 180) -> "KafkaBroker":
        libs = jars(self.version)
        classpath = os.path.join(libs, "*")
        properties = self._properties()
        # a cluster id that starts with "-" reads as an option to StorageTool's argument parser
        # (one in 64 runs failed so); Kafka's own Uuid.randomUuid draws again in that case too
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        started = time.monotonic()
        java = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", classpath]
        fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", properties],
                             capture_output=True, text=True, timeout=300)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {fmt.stdout[-2000:]}{fmt.stderr[-2000:]}")
        self.log_path = os.path.join(self.folder, "broker.log")
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen([*java, "kafka.Kafka", properties], stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited ({self.process.returncode}): {self._log_tail()}")
            if self._ready():
                self.startup_seconds = time.monotonic() - started
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the Kafka broker did not start within {timeout}s: {self._log_tail()}")

    def _ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        try:
            metadata = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=5)
            return bool(metadata.brokers)
        except Exception:
            return False

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-3000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # kept alive until the futures resolve
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        for future in futures.values():
            future.result(timeout=60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)
