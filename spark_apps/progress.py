"""Progress a person can follow in the driver's log (also under Airflow): every few seconds,
the running Spark stages with tasks done / total and percent, plus the run's own phase."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("cdc_replay")


class Progress:
    def __init__(self, spark, run_id: str, every: float = 10.0):
        self._tracker = spark.sparkContext.statusTracker()
        self._run_id = run_id
        self._every = every
        self._phase = "starting"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cdc-replay-progress", daemon=True)

    def phase(self, name: str) -> None:
        self._phase = name
        log.info("[replay %s] %s", self._run_id, name)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _loop(self) -> None:
        last = None
        while not self._stop.wait(self._every):
            try:
                stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
            except Exception:  # the context is stopping
                return
            parts = []
            for stage in stages:
                if stage is None or not stage.numTasks:
                    continue
                done = stage.numCompletedTasks
                parts.append(f"stage {stage.stageId}: {done}/{stage.numTasks} tasks "
                             f"({100 * done // stage.numTasks}%)")
            line = f"{self._phase}: {'; '.join(parts)}" if parts else None
            if line and line != last:
                log.info("[replay %s] %s", self._run_id, line)
                last = line
