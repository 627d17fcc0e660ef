"""Readable progress from spark-submit's output (pure; the replay hook feeds it lines).

With `spark.ui.showConsoleProgress=true` Spark redraws a bar such as
`[Stage 3:=====>          (5 + 2) / 8]` several times a second. Logged as is, that is
hundreds of lines; this turns it into one line per stage each time it passes another 10%:
`Spark stage 3: 62% (5 of 8 tasks done, 2 running)`.
"""

from __future__ import annotations

import re

_BAR = re.compile(r"\[Stage (\d+):[=> ]*\((\d+) \+ (\d+)\) / (\d+)\]")


class SparkProgress:
    def __init__(self, step: int = 10):
        self.step = step
        self._reported: dict[int, int] = {}

    def feed(self, line: str) -> tuple[list[str], bool]:
        """(messages to log, whether the line was a progress bar and should not be logged)."""
        bars = _BAR.findall(line)
        if not bars:
            return [], False
        messages = []
        for stage, done, running, total in bars:
            stage, done, running, total = int(stage), int(done), int(running), int(total)
            percent = 100 * done // total if total else 100
            bucket = percent // self.step * self.step
            if stage not in self._reported or bucket > self._reported[stage]:
                self._reported[stage] = bucket
                messages.append(f"Spark stage {stage}: {percent}% ({done} of {total} tasks done, {running} running)")
        return messages, True
