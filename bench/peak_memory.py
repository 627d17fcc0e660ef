"""Peak memory of a local Spark run, sampled from the operating system (not a test).

In `local[N]` the driver and the executors are one JVM (the child of this Python process that
spark-submit started); the Python workers are that JVM's children. `PeakMemory` samples the
resident set size (RSS) of both every `interval` seconds in a thread and keeps the peaks: the
JVM's, and the sum over the Python workers alive at one moment. RSS is what the machine has to
provide; the JVM's heap grows lazily up to `spark.driver.memory`, so flat peaks across archive
sizes mean the run does not hold the archive in memory.

    with PeakMemory() as peak:
        run(...)
    print(peak.jvm_mb, peak.workers_mb)
"""

from __future__ import annotations

import os
import threading

import psutil


class PeakMemory:
    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.jvm_mb = 0.0
        self.workers_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            try:
                jvms = [p for p in me.children() if "java" in p.name().lower()]
                jvm = sum(p.memory_info().rss for p in jvms)
                workers = sum(c.memory_info().rss for p in jvms for c in p.children(recursive=True))
            except psutil.Error:  # a worker ended between listing and reading it
                jvm = workers = 0
            self.jvm_mb = max(self.jvm_mb, jvm / 2**20)
            self.workers_mb = max(self.workers_mb, workers / 2**20)
            self._stop.wait(self.interval)
