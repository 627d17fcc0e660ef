"""A real Spark standalone cluster on loopback, from the installed pyspark: one master and two
workers started with `spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`
(what Spark's sbin scripts run), each worker with 1 core and little memory, logs and work dirs
in a temporary folder. `standalone_cluster()` yields once both workers registered with the master
(its JSON at http://127.0.0.1:<webui>/json) and stops every process it started, also when the
body fails.

Ports: every process binds port 0 (the system picks a free one) and the fixture reads the ports
the master bound from its own log ("Starting Spark master at spark://...", "Bound MasterWebUI to
..., and started at http://..."), then checks that the UI it reads is this master's (its `/json`
names the same spark:// URL). A port chosen "free" beforehand can be taken before the JVM binds
it, and Spark then silently binds the next one: the fixture read another process's UI.

    python -m tests.support.spark_cluster     # start one, print its URLs, stop on Ctrl-C
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request


def spark_home() -> str:
    """The installed pyspark's folder: it has bin/spark-class and jars/ (a full Spark runtime)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


@dataclasses.dataclass
class Cluster:
    master_url: str  # spark://127.0.0.1:PORT
    webui: str  # http://127.0.0.1:PORT (the master's UI; /json is its state)
    directory: str  # logs (*.log) and the workers' work dirs (work-N/<app id>/<executor id>/)
    worker_dirs: list[str]

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui}/json", timeout=5) as response:
            return json.load(response)

    def applications(self) -> list[dict]:
        """Running and completed applications, as the master reports them."""
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def logs(self) -> str:
        text = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".log"):
                with open(os.path.join(self.directory, name), errors="replace") as f:
                    text.append(f"== {name}\n{f.read()[-4000:]}")
        return "\n".join(text)


_MASTER_URL = re.compile(r"Starting Spark master at (spark://[^\s:/]+:(\d+))")
_WEBUI = re.compile(r"Bound MasterWebUI to \S+, and started at (https?)://[^\s:/]+:(\d+)")


def bound_ports(log_text: str) -> tuple[int | None, int | None]:
    """(the RPC port, the web UI port) the master bound, as its log says (None until logged)."""
    rpc, webui = _MASTER_URL.search(log_text), _WEBUI.search(log_text)
    return (int(rpc.group(2)) if rpc else None), (int(webui.group(2)) if webui else None)


def _environment(home: str, directory: str) -> dict:
    """This process's environment without what a real cluster's nodes would not have: the
    driver's S3 credentials, its PYTHONPATH and PySpark settings (the app must pass them)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AWS_", "PYSPARK_")) and key != "PYTHONPATH"}
    env.update({
        "SPARK_HOME": home,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": directory,
        "SPARK_NO_DAEMONIZE": "1",
    })
    for key in ("SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_WORKER_CORES", "SPARK_WORKER_MEMORY",
                "SPARK_CONF_DIR"):
        env.pop(key, None)
    return env


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 120):
    home = spark_home()
    spark_class = os.path.join(home, "bin", "spark-class")
    directory = tempfile.mkdtemp(prefix="cdc-replay-spark-cluster-")
    env = _environment(home, directory)
    processes: list[subprocess.Popen] = []

    def start(name: str, args: list[str]) -> None:
        log = open(os.path.join(directory, f"{name}.log"), "wb")
        processes.append(subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()  # the child has its own descriptor

    worker_dirs = [os.path.join(directory, f"work-{i}") for i in range(workers)]
    cluster = Cluster("", "", directory, worker_dirs)
    deadline = time.monotonic() + timeout
    try:
        start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                         "--webui-port", "0"])
        while True:  # the ports it bound, from its log
            with open(os.path.join(directory, "master.log"), errors="replace") as f:
                port, webui_port = bound_ports(f.read())
            if port and webui_port:
                break
            if processes[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark master did not log its ports in {timeout:.0f} s:\n{cluster.logs()}")
            time.sleep(0.2)
        cluster.master_url, cluster.webui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{webui_port}"
        for i, work in enumerate(worker_dirs):
            os.makedirs(work)
            start(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                  "--port", "0", "--webui-port", "0",
                                  "--cores", str(cores), "--memory", memory, "--work-dir", work, cluster.master_url])
        while True:
            try:
                state = cluster.state()
                if state.get("url") != cluster.master_url:
                    raise RuntimeError(f"{cluster.webui}/json is not this master's UI: it names {state.get('url')}, "
                                       f"not {cluster.master_url}")
                alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= workers:
                    break
            except (OSError, ValueError):
                pass
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark standalone cluster did not come up with {workers} workers "
                                   f"in {timeout:.0f} s:\n{cluster.logs()}")
            time.sleep(0.5)
        yield cluster
    finally:
        for process in reversed(processes):  # workers first, then the master
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group (the JVM and any executor JVMs it started), SIGKILL after 20 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


if __name__ == "__main__":  # pragma: no cover - manual use
    with standalone_cluster() as running:
        print(f"master {running.master_url}, UI {running.webui}, logs in {running.directory}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
