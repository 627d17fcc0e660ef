"""Benchmark (not a test): what a small replay costs (issue 13, points 4 and 5).

Two measurements:

* `--stages`: the Spark jobs and stages of one snapshot run of a tiny generated archive, per
  phase of the run, counted in-process with the status tracker (a job group per phase; skipped
  stages included, as Spark lists them in a job's stage ids);
* wall time (process start to exit) and CPU time (the CLI and every process it waited for:
  spark-submit's JVM and the Python workers) of the real command line, `cdc-replay replay`, on a
  generated TiCDC canal-json archive of about `--events` events, `--rounds` times, with the load
  average of the machine before each round (the machine is shared).

* `--worker-imports`: the CPU time a forked Python worker spends importing what a decode task
  needs (pyspark.worker, pyarrow, spark_apps.archive_io), forked from Spark's plain daemon and
  from spark_apps/worker_daemon.py (which imports the pure-Python part before forking),
  `--rounds` times each, alternating.

    .venv/bin/python bench/bench_small_run.py --stages
    .venv/bin/python bench/bench_small_run.py --events 10000 --rounds 3 [--before DIR] [--small-run-off]
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
    commit whose spark_apps is run instead (first on PYTHONPATH), for before/after pairs;
    `env`: extra environment (e.g. the small-run settings off)."""
    binary = os.path.join(os.path.dirname(sys.executable), "cdc-replay")
    env = {**os.environ, **(env or {}), **({"PYTHONPATH": os.path.abspath(code)} if code else {})}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", action="store_true", help="count the jobs and stages of a tiny snapshot run")
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", metavar="DIR",
                        help="also run a checkout of another commit (git archive), alternating with this one")
    parser.add_argument("--small-run-off", action="store_true",
                        help="also run this checkout with CDC_REPLAY_SMALL_RUN_MB=0, alternating")
    parser.add_argument("--worker-imports", action="store_true",
                        help="CPU s of a forked worker's imports, from Spark's daemon and from ours")
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
