"""Benchmark (not a test): engine v1 against engine v2 against the hand-written Spark SQL job
(issue 33 point 3), A/B alternating on ONE canal-json archive written by `cdc-replay generate`.

Each round runs the three jobs in turn, each in a fresh process and Spark session (the job of
bench/bench_canal_json.py: `--job replay` with $CDC_REPLAY_ENGINE set, `--job native` for the
hand-written read / unbase64 / from_json / window "last row per key" / write job), and
reports per job: wall seconds of the job (session up, as bench_canal_json measures it) and of
the whole process, CPU seconds of every process of the job (the Python driver, its JVM, the
Python workers: sampled from the process tree, the last reading of each process kept), the
1-minute load average before and after, and the ratio of each median wall to the
hand-written job's (above 1: slower than it). Run it on a quiet machine (nothing else
running; the load average says whether it was).

    .venv/bin/python bench/engine_ab.py --transactions 100000 --rounds 3

Prints a Markdown table; bench/RESULTS.md records figures, load and command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOBS = (("v1", "replay", {"CDC_REPLAY_ENGINE": "v1"}), ("v2", "replay", {"CDC_REPLAY_ENGINE": "v2"}),
        ("hand-written", "native", {}))


def generate_archive(path: str, transactions: int, partitions: int) -> None:
    """The archive, by the product's own command (canal-json with TiDB's extension)."""
    cli = os.path.join(os.path.dirname(sys.executable), "cdc-replay")
    subprocess.run([cli, "generate", "--output", path, "--transactions", str(transactions),
                    "--partitions", str(partitions)], check=True, env={**os.environ, "PYTHONPATH": ROOT})


def run_job(kind: str, env: dict, source: str, workdir: str, master: str, driver_memory: str) -> dict:
    """One job in its own process, its process tree's CPU sampled while it runs."""
    import psutil

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "bench_canal_json.py"), "--job", kind,
                             "--source", source, "--workdir", workdir, "--master", master,
                             "--driver-memory", driver_memory],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env, "PYTHONPATH": ROOT})
    cpu: dict[int, float] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the {kind} job failed: {err[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    return {**result, "process_s": wall, "cpu_s": sum(cpu.values()), "load_before": load_before,
            "load_after": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=100_000, help="`cdc-replay generate --transactions`")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--archive", help="an archive written earlier (default: generated in a temporary folder)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of v1, v2, hand-written (alternating)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="cdc-engine-ab-")
    source = os.path.abspath(args.archive) if args.archive else os.path.join(workdir, "archive")
    if not args.archive:
        generate_archive(source, args.transactions, args.partitions)
    results: dict[str, list[dict]] = {name: [] for name, _, _ in JOBS}
    for round_ in range(args.rounds):
        order = JOBS if round_ % 2 == 0 else tuple(reversed(JOBS))  # no job always runs first
        for name, kind, env in order:
            results[name].append(run_job(kind, env, source, workdir, args.master, args.driver_memory))
            r = results[name][-1]
            print(f"round {round_ + 1} {name}: {r['seconds']:.1f} s job, {r['process_s']:.1f} s process, "
                  f"{r['cpu_s']:.1f} CPU s, load {r['load_before']:.2f} -> {r['load_after']:.2f}", file=sys.stderr)
    base = statistics.median(r["seconds"] for r in results["hand-written"])
    print(f"\nArchive {source} ({results['v1'][0].get('read', '?')} events read), {args.rounds} rounds, "
          f"{args.master}, load before the first job {results['v1'][0]['load_before']:.2f}\n")
    print("| job | wall s (median) | walls | process s (median) | CPU s (median) | load avg (min-max) | "
          "hand-written / job |")
    print("|---|---|---|---|---|---|---|")
    for name, _, _ in JOBS:
        rs = results[name]
        wall = statistics.median(r["seconds"] for r in rs)
        loads = [r["load_before"] for r in rs] + [r["load_after"] for r in rs]
        walls = ", ".join(f"{r['seconds']:.1f}" for r in rs)
        print(f"| {name} | {wall:.1f} | {walls} | "
              f"{statistics.median(r['process_s'] for r in rs):.1f} | {statistics.median(r['cpu_s'] for r in rs):.1f} | "
              f"{min(loads):.2f}-{max(loads):.2f} | {base / wall:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
