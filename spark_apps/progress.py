"""Progress a person can follow in the driver's log (also under Airflow): every few seconds,
the running Spark stages with tasks done / total, percent and an estimate of the time left
(from the stage's own task rate), plus the run's own phase and the Spark UI's address when
the UI is on (`--spark-ui`)."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("cdc_replay")


class Progress:
    def __init__(self, spark, run_id: str, every: float = 10.0):
        self._tracker = spark.sparkContext.statusTracker()
        # records decoded so far: tasks add to it as they finish (Spark sends accumulator
        # updates with each finished task)
        self.records = spark.sparkContext.accumulator(0)
        # the live conf (one py4j call), not getConf()'s copy (one per setting)
        enabled = spark.sparkContext._conf.get("spark.ui.enabled", "true") == "true"
        self._ui_url = spark.sparkContext.uiWebUrl if enabled else None
        self._run_id = run_id
        self._every = every
        self._phase = "starting"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cdc-replay-progress", daemon=True)

    def phase(self, name: str) -> None:
        self._phase = name
        log.info("[replay %s] %s", self._run_id, name)

    def __enter__(self) -> "Progress":
        if self._ui_url:
            log.info("[replay %s] Spark UI at %s (while the run lasts)", self._run_id, self._ui_url)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _loop(self) -> None:
        last = None
        first_seen: dict[int, float] = {}
        counted = (time.monotonic(), 0)  # (when, records decoded then): the rate is over the last interval
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
                now = time.monotonic()
                started = first_seen.setdefault(stage.stageId, now)
                parts.append(f"stage {stage.stageId}: {done}/{stage.numTasks} tasks "
                             f"({100 * done // stage.numTasks}%){eta(done, stage.numTasks, now - started)}")
            decoded = self.records.value
            now = time.monotonic()
            if parts and decoded:
                parts.insert(0, decoded_rate(decoded, *counted, now))
            counted = (now, decoded)
            line = f"{self._phase}: {'; '.join(parts)}" if parts else None
            if line and line != last:
                log.info("[replay %s] %s", self._run_id, line)
                last = line


def counting(fn, counter):
    """The mapInArrow function `fn`, adding the records it decodes (events with index 0: one
    per record, quarantined ones included) to the accumulator `counter`."""
    if counter is None:
        return fn

    def run(batches):
        import pyarrow.compute as pc

        for batch in fn(batches):
            counter.add(pc.sum(pc.equal(batch.column("event_index"), 0)).as_py() or 0)
            yield batch

    return run


def decoded_rate(decoded: int, since: float, before: int, now: float) -> str:
    """"N records decoded", with the rate since the last line while the count grows: a rate
    since the start would keep falling through the stages after the decode."""
    if decoded <= before or now <= since:
        return f"{decoded:,} records decoded"
    return f"{decoded:,} records decoded ({(decoded - before) / (now - since):,.0f} records/s over the last {now - since:.0f} s)"


def eta(done: int, total: int, elapsed: float) -> str:
    """", about N s left" from the tasks done so far in `elapsed` seconds (empty before the first)."""
    if not done or done >= total or elapsed <= 0:
        return ""
    rate = done / elapsed
    left = (total - done) / rate
    return f", {rate:.1f} tasks/s, about {left:.0f} s left" if left < 120 else \
        f", {rate * 60:.1f} tasks/min, about {left / 60:.0f} min left"
