"""Profile (not a test): where a full canal-json replay to a snapshot spends its time, stage by
stage, beside the hand-written Spark SQL job of bench_canal_json.py on the same archive.

Per Spark stage, from the Spark UI's REST API (`/api/v1/applications/<id>/stages`): tasks,
executor CPU seconds (JVM task threads; robust against other load), executor run seconds,
shuffle read and write bytes, bytes spilled. The Python workers' CPU (decode, writers) is not in
the JVM's figure: it is measured as the CPU time of the Python worker processes under the Spark
JVM (psutil), per run.

Cold start (`--rounds 2`, issue 13 point 5): the same replay again in the same session, and per
round the wall time, the CPU seconds of the whole driver JVM (every thread: JIT compilers, GC,
the driver's planning, not only the tasks), of the Python driver and of the Python workers,
and the JVM's own counters: classes loaded, JIT compilation time, GC time, code generation
(classes compiled, their source size, compile time); the session's start is measured too.
`--code DIR` imports spark_apps from another checkout (run with that checkout's .venv python)
for before/after pairs.

    .venv/bin/python bench/profile_replay.py --events 300000
    .venv/bin/python bench/profile_replay.py --archive A --skip-baseline --rounds 2 [--code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_canal_json import bench_naive_replay, bench_replay, write_history  # noqa: E402

if "--code" in sys.argv:  # another checkout's spark_apps (before/after pairs), ahead of ours
    sys.path.insert(0, os.path.abspath(sys.argv[sys.argv.index("--code") + 1]))


def _stages(spark) -> list[dict]:
    url = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages?status=complete") as r:
        return json.load(r)


class _PythonCpu:
    """CPU seconds of the Python worker processes forked by the Spark JVM (children of this
    driver's JVM, and theirs); workers that exited are counted by their last sample."""

    def __init__(self):
        import psutil

        self.psutil = psutil
        self.seen: dict[int, float] = {}

    def sample(self) -> float:
        me = self.psutil.Process()
        for p in me.children(recursive=True):
            try:
                if "python" in p.name().lower():
                    t = p.cpu_times()
                    self.seen[p.pid] = t.user + t.system
            except self.psutil.Error:
                pass
        return sum(self.seen.values())


class _Counters:
    """The driver JVM's CPU seconds (all threads, from /proc), the Python driver's, and the JVM's
    class loading, JIT, GC and code generation counters, as deltas between two `take()`s."""

    def __init__(self, spark, python_cpu: "_PythonCpu"):
        import resource

        self.resource = resource
        self.jvm = spark._jvm
        self.pid = self.jvm.java.lang.ProcessHandle.current().pid()
        self.python_cpu = python_cpu

    def take(self) -> dict:
        management = self.jvm.java.lang.management.ManagementFactory
        codegen = self.jvm.org.apache.spark.metrics.source.CodegenMetrics
        compile_time, source = codegen.METRIC_COMPILATION_TIME(), codegen.METRIC_SOURCE_CODE_SIZE()
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        own = self.resource.getrusage(self.resource.RUSAGE_SELF)
        return {
            "JVM CPU s": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            "Python driver CPU s": own.ru_utime + own.ru_stime,
            "Python workers CPU s": self.python_cpu.sample(),
            "classes loaded": management.getClassLoadingMXBean().getTotalLoadedClassCount(),
            "JIT compilation s": management.getCompilationMXBean().getTotalCompilationTime() / 1000,
            "GC s": sum(g.getCollectionTime() for g in management.getGarbageCollectorMXBeans()) / 1000,
            "generated classes compiled": compile_time.getCount(),
            "generated source KB": source.getSnapshot().getMean() * source.getCount() / 1024,
            "code generation compile s": compile_time.getSnapshot().getMean() * compile_time.getCount() / 1000,
        }


def _report_rounds(session: dict, rounds: list[dict]) -> None:
    print("\n| | session start | " + " | ".join(f"replay {i + 1}" for i in range(len(rounds))) + " |")
    print("|---|" + "---:|" * (len(rounds) + 1))
    for key in session:
        cells = [session[key]] + [r[key] for r in rounds]
        print(f"| {key} | " + " | ".join(f"{v:,.0f}" if key in ("classes loaded", "generated classes compiled")
                                          else f"{v:.1f}" for v in cells) + " |")


def _report(title: str, stages: list[dict], events: int, python_cpu: float, seconds: float) -> None:
    print(f"\n### {title}: {seconds:.1f} s wall, {events / seconds:,.0f} events/s\n")
    print("| stage | what | tasks | CPU s | run s | shuffle read MB | shuffle write MB | spill MB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    total = {"cpu": 0.0, "run": 0.0, "read": 0, "write": 0}
    for s in sorted(stages, key=lambda s: s["stageId"]):
        cpu, run = s["executorCpuTime"] / 1e9, s["executorRunTime"] / 1e3
        read, write = s["shuffleReadBytes"], s["shuffleWriteBytes"]
        total["cpu"] += cpu
        total["run"] += run
        total["read"] += read
        total["write"] += write
        name = s["name"].split(" at ")[0] + " at " + os.path.basename(s["name"].split(" at ")[-1])
        print(f"| {s['stageId']} | {name} | {s['numTasks']} | {cpu:.1f} | {run:.1f} | {read / 1e6:.1f} | "
              f"{write / 1e6:.1f} | {s['diskBytesSpilled'] / 1e6:.1f} |")
    print(f"| | **total** ({len(stages)} stages) | | **{total['cpu']:.1f}** | {total['run']:.1f} | "
          f"{total['read'] / 1e6:.1f} | {total['write'] / 1e6:.1f} | |")
    print(f"\nPython workers' CPU: {python_cpu:.1f} s. Shuffle write per event: "
          f"{total['write'] / events:.0f} bytes.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--archive", help="reuse (or keep) the generated archive here")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="replays in the same session (the first one cold): per round wall, CPU and JVM counters")
    ap.add_argument("--code", metavar="DIR", help="import spark_apps from this checkout (before/after pairs)")
    ap.add_argument("--java-options", default=None,
                    help="spark.driver.extraJavaOptions of the session (e.g. the class-data archive's options)")
    args = ap.parse_args()

    from spark_apps.replay import build_session

    started = time.perf_counter()
    spark = build_session(args.master, "cdc-replay-profile", [
        "spark.driver.memory=6g", "spark.sql.shuffle.partitions=16", "spark.ui.enabled=true", "spark.ui.port=0",
        "spark.ui.retainedStages=2000", "spark.ui.retainedJobs=2000"]
        + ([f"spark.driver.extraJavaOptions={args.java_options}"] if args.java_options else []))
    session_seconds = time.perf_counter() - started
    counters = _Counters(spark, _PythonCpu())
    session = {"wall s": session_seconds, **counters.take()}
    print(f"spark_apps from {os.path.dirname(sys.modules['spark_apps.replay'].__file__)}; session up in "
          f"{session_seconds:.1f} s", flush=True)
    workdir = tempfile.mkdtemp(prefix="cdc-profile-")
    source = args.archive or os.path.join(workdir, "archive")
    try:
        if not os.path.isdir(source) or not os.listdir(source):
            started = time.perf_counter()
            write_history(args.events, source, min(100_000, args.events))
            print(f"archive of {args.events:,} events written in {time.perf_counter() - started:.0f} s", flush=True)
        py = counters.python_cpu
        rounds = []
        for i in range(args.rounds):
            before_stages = {s["stageId"] for s in _stages(spark)}
            cpu0 = py.sample()
            before = counters.take()
            seconds, manifest = bench_replay(spark, source, workdir)
            after = counters.take()
            rounds.append({"wall s": seconds, **{k: after[k] - before[k] for k in after}})
            stages = [s for s in _stages(spark) if s["stageId"] not in before_stages]
            events = manifest["counts"]["read"]
            _report(f"cdc-replay, {events:,} events" + (f", replay {i + 1}" if args.rounds > 1 else ""), stages,
                    events, py.sample() - cpu0, seconds)
        _report_rounds(session, rounds)
        if not args.skip_baseline:
            before_stages = {s["stageId"] for s in _stages(spark)}
            cpu0 = py.sample()
            seconds = bench_naive_replay(spark, source, workdir, "native")
            stages = [s for s in _stages(spark) if s["stageId"] not in before_stages]
            _report("hand-written Spark SQL job", stages, events, py.sample() - cpu0, seconds)
    finally:
        if not args.archive:
            shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
