"""Benchmark (not a test): what a small replay costs (issue 13, points 4 and 5).

Two measurements:

* `--stages`: the Spark jobs and stages of one snapshot run of a tiny generated archive, per
  phase of the run, counted in-process with the status tracker (a job group per phase; skipped
  stages included, as Spark lists them in a job's stage ids);
* wall time (process start to exit) and CPU time (the CLI and every process it waited for:
  spark-submit's JVM and the Python workers) of the real command line, `cdc-replay replay`, on a
  generated TiCDC canal-json archive of about `--events` events, `--rounds` times, with the load
  average of the machine before each round (the machine is shared).

* `--timeline`: one run of the real command line, where its wall time goes: per phase (the CLI,
  spark-submit's start, the driver's imports and session, each Spark SQL action with its jobs,
  the driver's work between actions, the stop) from the processes' start times (/proc), the
  driver's log lines and Spark's event log; then CPU seconds per process (sampled from /proc
  every 50 ms) and per thread group of the driver JVM (JIT compilers, GC, task threads, the
  threads that plan and run the driver's queries);

* `--worker-imports`: the CPU time a forked Python worker spends importing what a decode task
  needs (pyspark.worker, pyarrow, spark_apps.archive_io), forked from Spark's plain daemon and
  from spark_apps/worker_daemon.py (which imports the pure-Python part before forking),
  `--rounds` times each, alternating.

    .venv/bin/python bench/bench_small_run.py --stages
    .venv/bin/python bench/bench_small_run.py --events 10000 --rounds 3 [--before DIR] [--small-run-off]
    .venv/bin/python bench/bench_small_run.py --timeline [--events 10000] [--spark-conf K=V ...] [--before DIR]
    .venv/bin/python bench/bench_small_run.py --worker-imports --rounds 5
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

TIDB = ["--protocol-option", "enable-tidb-extension=true", "--target-option", "enable-tidb-extension=true"]


def tiny_archive(path: str) -> None:
    from spark_apps.generate import generate, write_archive

    generated = generate(transactions=12, partitions=2, seed=3, duplicate_rate=0.1, bad_values=1)
    write_archive(generated.records, path, records_per_object=20, bad_lines=1)


def archive_of(events: int, path: str) -> int:
    """A generated archive of about `events` decoded events (rows, DDL, watermarks, duplicates)."""
    from spark_apps.generate import generate, write_archive

    transactions = max(10, events * 100 // 304)  # ~3.04 records (events) per transaction, measured
    generated = generate(transactions=transactions, partitions=4, seed=5, duplicate_rate=0.02)
    write_archive(generated.records, path, records_per_object=2000)
    return len(generated.records)


def count_stages(spark, run) -> dict[str, tuple[int, int]]:
    """{phase: (jobs, stages)} of `run()`, the phases being the run's own progress phases."""
    from spark_apps import progress

    tracker = spark.sparkContext.statusTracker()
    phases = []
    original = progress.Progress.phase
    prefix = f"bench-{time.time_ns()}"

    def phase(self, name):
        group = f"{prefix}-{len(phases)}"
        phases.append((group, name))
        spark.sparkContext.setJobGroup(group, name)
        original(self, name)

    progress.Progress.phase = phase
    try:
        run()
    finally:
        progress.Progress.phase = original
        spark.sparkContext.setJobGroup("bench-after", "after")
    result = {}
    for group, name in phases:
        jobs = tracker.getJobIdsForGroup(group)
        stages = sum(len(tracker.getJobInfo(j).stageIds) for j in jobs)
        result[name] = (len(jobs), stages)
    return result


def snapshot_stages(spark, workdir: str) -> dict[str, tuple[int, int]]:
    from spark_apps.options import ReplayArgs, parser
    from spark_apps.replay import run

    source = os.path.join(workdir, "tiny")
    tiny_archive(source)
    argv = ["--source", source, "--protocol", "canal-json", "--output", os.path.join(workdir, "tiny-out"),
            "--emit", "snapshot", "--max-bad-records", "5", *TIDB]
    return count_stages(spark, lambda: run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark))


def cli_round(source: str, output: str, code: str | None = None, env: dict | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one `cdc-replay replay` process tree; `code`: a checkout of another
    commit, for before/after pairs: its own `.venv/bin/cdc-replay` when it was bootstrapped,
    else this environment with its spark_apps first on PYTHONPATH; `env`: extra environment
    (e.g. the small-run settings off)."""
    own = code and os.path.join(code, ".venv", "bin", "cdc-replay")
    binary = own if own and os.path.exists(own) else os.path.join(os.path.dirname(sys.executable), "cdc-replay")
    env = {**os.environ, **(env or {}), **({"PYTHONPATH": os.path.abspath(code)} if code and binary != own else {})}
    shutil.rmtree(output, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([binary, "replay", "--source", source, "--protocol", "canal-json", "--output", output,
                    "--emit", "snapshot", *TIDB], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


WORKER_IMPORTS = """
import resource, sys
import pyspark.daemon
if sys.argv[1] == "preloaded":
    from spark_apps.worker_daemon import preload
    preload()
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
started = cpu()
import pyspark.worker, pyarrow, spark_apps.archive_io
print(cpu() - started)
"""


def worker_imports(daemon: str) -> float:
    """CPU s of a worker's imports after the `daemon` ("plain" or "preloaded") imported its own."""
    out = subprocess.run([sys.executable, "-c", WORKER_IMPORTS, daemon], check=True, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return float(out.stdout.strip())


class _ProcessTree:
    """CPU seconds of a process and its descendants, sampled from /proc every 50 ms (a process
    that exits keeps its last sample), with each one's start time and command line, and the
    driver JVM's threads by name."""

    def __init__(self, root: int):
        import threading

        self.root = root
        self.ticks = os.sysconf("SC_CLK_TCK")
        # the epoch time of the boot, to 10 ms (/proc/stat's btime is whole seconds)
        self.boot = time.time() - float(open("/proc/uptime").read().split()[0])
        self.processes: dict[int, dict] = {}
        self.threads: dict[tuple[int, int], tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _stat(self, path: str):
        try:
            text = open(path).read()
        except OSError:
            return None
        fields = text[text.rfind(")") + 2:].split()
        return (text[text.find("(") + 1:text.rfind(")")], int(fields[1]),
                (int(fields[11]) + int(fields[12])) / self.ticks, self.boot + int(fields[19]) / self.ticks)

    def _loop(self) -> None:
        while not self._stop.is_set():
            stats = {}
            for name in os.listdir("/proc"):
                if name.isdigit() and (st := self._stat(f"/proc/{name}/stat")):
                    stats[int(name)] = st
            tree, grew = {self.root}, True
            while grew:
                grew = False
                for pid, (_, ppid, _, _) in stats.items():
                    if ppid in tree and pid not in tree:
                        tree.add(pid)
                        grew = True
            for pid in tree & stats.keys():
                comm, _, cpu, start = stats[pid]
                seen = self.processes.setdefault(pid, {"start": start, "command": ""})
                try:
                    command = open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip()
                except OSError:
                    command = ""
                seen.update(cpu=cpu, comm=comm, command=command or seen["command"], last=time.time())
                if comm == "java":
                    try:
                        for tid in os.listdir(f"/proc/{pid}/task"):
                            if st := self._stat(f"/proc/{pid}/task/{tid}/stat"):
                                self.threads[(pid, int(tid))] = (st[0], st[2])
                    except OSError:
                        pass
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _what(command: str) -> str:
    if "spark_apps.worker_daemon" in command or "pyspark.daemon" in command:
        return "Python worker daemon / worker"
    if "org.apache.spark.launcher.Main" in command:
        return "spark-submit's launcher JVM"
    if "org.apache.spark.deploy.SparkSubmit" in command and "java" in command.split()[0]:
        return "driver JVM (SparkSubmit)"
    if "spark-submit" in command or "spark-class" in command or "find_spark_home" in command:
        return "spark-submit's scripts"
    if "spark_apps/replay.py" in command:
        return "driver Python (spark_apps/replay.py)"
    if "cdc-replay" in command:
        return "the CLI (cdc-replay)"
    return command.split()[0].rsplit("/", 1)[-1] if command else "?"


def _thread_group(name: str) -> str:
    import re

    if "CompilerThre" in name:
        return "JIT compiler threads"
    if name.startswith(("GC Thread", "G1 ")) or name == "VM Thread":
        return "GC and VM threads"
    if name.startswith("Executor task"):
        return "task threads (Spark tasks)"
    if re.fullmatch(r"Thread-\d+", name):
        return "py4j threads (the driver's calls: planning, optimising, code generation on the driver)"
    if name == "java":
        return "main thread (JVM start, SparkSubmit)"
    return "other Spark threads (scheduler, shuffle, AQE, listeners)"


def timeline(source: str, output: str, spark_conf: list[str], code: str | None = None) -> None:
    """Print where one `cdc-replay replay` run's wall time and CPU time go (`code`: a checkout
    with its own .venv to run instead of this one)."""
    import json
    import re
    import threading

    events_dir = tempfile.mkdtemp(prefix="bench-small-events-")
    binary = os.path.join(code, ".venv", "bin", "cdc-replay") if code else os.path.join(
        os.path.dirname(sys.executable), "cdc-replay")
    argv = [binary, "replay", "--source", source, "--protocol", "canal-json", "--output", output, "--emit", "snapshot",
            *TIDB, "--spark-conf", "spark.eventLog.enabled=true", "--spark-conf", f"spark.eventLog.dir={events_dir}",
            "--spark-conf", "spark.eventLog.compress=false"]
    for item in spark_conf:
        argv += ["--spark-conf", item]
    shutil.rmtree(output, ignore_errors=True)
    load = os.getloadavg()[0]
    started = time.time()
    # the driver's log lines reach the CLI's stdout (spark-submit merges the driver's stderr)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree = _ProcessTree(process.pid)
    lines: list[tuple[float, str]] = []

    def read():
        for line in process.stdout:
            lines.append((time.time(), line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    status = process.wait()
    ended = time.time()
    reader.join()
    tree.stop()
    if status:
        print("\n".join(text for _, text in lines[-30:]))
        raise SystemExit(f"the run failed ({status})")
    events = []
    for root, _, files in os.walk(events_dir):
        for name in sorted(files):
            if name.startswith("events_"):
                events += [json.loads(line) for line in open(os.path.join(root, name))]
    shutil.rmtree(events_dir, ignore_errors=True)

    def at(t: float) -> str:
        return f"{t - started:6.2f}"

    rows: list[tuple[float, float, str]] = []
    starts = sorted((p["start"], _what(p["command"])) for p in tree.processes.values())

    def first(what: str) -> float | None:
        return next((t for t, w in starts if w == what), None)

    def line_at(pattern: str) -> float | None:
        return next((t for t, text in lines if re.search(pattern, text)), None)

    def last(what: str) -> float | None:
        return max((p["last"] for p in tree.processes.values() if _what(p["command"]) == what), default=None)

    submit = first("driver JVM (SparkSubmit)")  # spark-submit's own process, which execs the JVM
    jvm = last("spark-submit's launcher JVM")  # about when the driver JVM is exec'd (50 ms samples)
    driver = first("driver Python (spark_apps/replay.py)")
    listed = line_at(r"\] \d+ objects, ")
    decoding = line_at(r"\] reading and decoding")
    app_start = next(e["Timestamp"] / 1000 for e in events if e["Event"] == "SparkListenerApplicationStart")
    app_end = next(e["Timestamp"] / 1000 for e in events if e["Event"] == "SparkListenerApplicationEnd")
    rows.append((started, submit, "the CLI: imports, argument checks, sizing the source"))
    rows.append((submit, jvm, "spark-submit's scripts and launcher JVM (builds the java command)"))
    rows.append((jvm, driver, "driver JVM start until it starts the driver Python"))
    rows.append((driver, listed, "driver Python: imports, argument checks, listing the source"))
    rows.append((listed, decoding, f"Spark session (SparkContext up at {at(app_start).strip()} s), progress reporter"))
    sql_start = {e["executionId"]: e["time"] / 1000 for e in events if e["Event"].endswith("SQLExecutionStart")}
    sql_end = {e["executionId"]: e["time"] / 1000 for e in events if e["Event"].endswith("SQLExecutionEnd")}
    jobs: dict[int, list] = {}
    for e in events:
        if e["Event"] == "SparkListenerJobStart":
            sql = e.get("Properties", {}).get("spark.sql.execution.id")
            jobs.setdefault(int(sql) if sql is not None else -1, []).append(e["Submission Time"] / 1000)
    first_task = {}
    for e in events:
        if e["Event"] == "SparkListenerTaskStart":
            first_task.setdefault(e["Stage ID"], e["Task Info"]["Launch Time"] / 1000)
    previous = decoding
    for sql in sorted(sql_start):
        names = {e["executionId"]: e["description"].split(" at ")[0] + " at " + e["description"].rsplit("/", 1)[-1]
                 for e in events if e["Event"].endswith("SQLExecutionStart")}
        rows.append((previous, sql_start[sql], "  driver between actions: building the next plan (py4j calls, analysis)"))
        job_list = jobs.get(sql, [])
        rows.append((sql_start[sql], sql_end.get(sql, sql_start[sql]),
                     f"  Spark action {sql}: {names[sql]}, {len(job_list)} jobs"
                     + (f" (planning until the first job: {min(job_list) - sql_start[sql]:.2f} s)" if job_list else "")))
        previous = sql_end.get(sql, sql_start[sql])
    committed = line_at(r"\] committed ")
    rows.append((previous, committed, "driver: manifest and commit"))
    rows.append((committed, app_end, "spark.stop()"))
    driver_end, jvm_end = last("driver Python (spark_apps/replay.py)"), last("driver JVM (SparkSubmit)")
    rows.append((app_end, driver_end, "the driver Python's end (summary, exit)"))
    rows.append((driver_end, jvm_end, "the driver JVM's end (shutdown hooks, temporary folders)"))
    rows.append((jvm_end, ended, "the CLI's end (class-data archive kept)"))
    daemon = first("Python worker daemon / worker")
    print(f"load average (1 min) at the start: {load:.1f}; wall {ended - started:.1f} s\n")
    print("| from s | to s | wall s | phase |\n|---:|---:|---:|---|")
    for begin, end, what in rows:
        if begin is None or end is None:
            continue
        print(f"| {at(begin)} | {at(end)} | {end - begin:5.2f} | {what} |")
    if daemon:
        print(f"\nThe Python worker daemon started at {at(daemon).strip()} s (the first decode task at "
              f"{at(min(first_task.values())).strip()} s).")
    cpu: dict[str, float] = {}
    count: dict[str, int] = {}
    for p in tree.processes.values():
        what = _what(p["command"])
        cpu[what] = cpu.get(what, 0.0) + p.get("cpu", 0.0)
        count[what] = count.get(what, 0) + 1
    print("\n| process | count | CPU s (sampled) |\n|---|---:|---:|")
    for what, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
        if seconds >= 0.01:
            print(f"| {what} | {count[what]} | {seconds:.2f} |")
    print(f"| **total** | | **{sum(cpu.values()):.2f}** |")
    groups: dict[str, float] = {}
    for comm, seconds in tree.threads.values():
        groups[_thread_group(comm)] = groups.get(_thread_group(comm), 0.0) + seconds
    print("\n| driver JVM threads | CPU s (sampled) |\n|---|---:|")
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {group} | {seconds:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", action="store_true", help="count the jobs and stages of a tiny snapshot run")
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", metavar="DIR",
                        help="also run a checkout of another commit, alternating with this one: with its own "
                             ".venv (scripts/bootstrap run there) or, without one, in this environment")
    parser.add_argument("--small-run-off", action="store_true",
                        help="also run this checkout with CDC_REPLAY_SMALL_RUN_MB=0, alternating")
    parser.add_argument("--worker-imports", action="store_true",
                        help="CPU s of a forked worker's imports, from Spark's daemon and from ours")
    parser.add_argument("--timeline", action="store_true",
                        help="one run of the CLI: wall time per phase and CPU time per process and JVM thread group")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="K=V",
                        help="with --timeline: a --spark-conf for the run (repeatable)")
    args = parser.parse_args()
    if args.worker_imports:
        print("| round | load average (1 min) | Spark's daemon (CPU s) | spark_apps.worker_daemon (CPU s) |\n"
              "|---:|---:|---:|---:|")
        for i in range(args.rounds):
            load = os.getloadavg()[0]
            print(f"| {i + 1} | {load:.1f} | {worker_imports('plain'):.2f} | {worker_imports('preloaded'):.2f} |",
                  flush=True)
        return
    workdir = tempfile.mkdtemp(prefix="bench-small-")
    try:
        if args.stages:
            from spark_apps.replay import build_session

            spark = build_session("local[2]", "bench-small-run", [])
            try:
                snapshot_stages(spark, workdir)  # warm-up run (first run of a session compiles more)
                counted = snapshot_stages(spark, workdir)
            finally:
                spark.stop()
            print("| phase | jobs | stages |\n|---|---:|---:|")
            for name, (jobs, stages) in counted.items():
                print(f"| {name} | {jobs} | {stages} |")
            print(f"| **total** | {sum(j for j, _ in counted.values())} | {sum(s for _, s in counted.values())} |")
            return
        source = os.path.join(workdir, "archive")
        records = archive_of(args.events, source)
        print(f"archive: {records:,} records under {source}")
        if args.timeline:
            timeline(source, os.path.join(workdir, "out"), args.spark_conf, args.before)
            return
        print("| round | code | load average (1 min) | wall s | CPU s |\n|---:|---|---:|---:|---:|")
        for i in range(args.rounds):
            variants = ([("before", args.before, None)] if args.before else []) + (
                [("this checkout, CDC_REPLAY_SMALL_RUN_MB=0", None, {"CDC_REPLAY_SMALL_RUN_MB": "0"})]
                if args.small_run_off else []) + [("this checkout", None, None)]
            for name, code, env in variants:
                load = os.getloadavg()[0]
                wall, cpu = cli_round(source, os.path.join(workdir, "out"), code, env)
                print(f"| {i + 1} | {name} | {load:.1f} | {wall:.1f} | {cpu:.1f} |", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
