"""Benchmark (not a test): the replay against the Spark job a user would hand-write
(issue 33 point 3), A/B alternating on archives written by `cdc-replay generate` with one
seed, so every protocol's archive holds the same events.

Each round runs every job in turn (the order reversed every other round, so no job always
runs first), each in a fresh process and Spark session (bench/bench_canal_json.py `--job`):

* `--emits` (snapshot, topics, history) × `--protocols`: the full replay (`replay.run`) of the
  protocol's archive on engine v2, the only one since the twenty-fifth session
  ($CDC_REPLAY_ENGINE=v2 set, so a `--code` checkout from before v1's removal runs v2 too);
* `hand-written` (canal-json archive): read, unbase64, from_json, window "last row per key",
  write — the job the product competes with;
* `floor` (`--floor`, canal-json archive): read, unbase64, from_json, write — the least any
  Spark run over the archive costs (the 10k-event comparison).

Per job: wall seconds of the job (session up, as bench_canal_json measures it) and of the
whole process, CPU seconds of every process of the job (Python driver, its JVM, the Python
workers; sampled from the process tree, the last reading of each process kept), peak RSS of
the JVM (driver and executors: one process in local mode) and of the Python workers, shuffle
bytes written per event read (Spark's event log), the 1-minute load average before and after.
Then the ratios the issue asks for: each job against the hand-written job (above 1: faster),
each protocol against canal-json on the same emit, topics and history against the
snapshot. Run it on a quiet machine (nothing else running; the load average says whether it was).

    .venv/bin/python bench/engine_ab.py --transactions 100000 --rounds 3
    .venv/bin/python bench/engine_ab.py --transactions 400000 --rounds 2 --emits snapshot,topics,history
    .venv/bin/python bench/engine_ab.py --transactions 3300 --rounds 3 --floor --cli   # ~10k events, as run
    .venv/bin/python bench/engine_ab.py --transactions 20000 --rounds 2 \\
        --protocols canal-json,open-protocol,craft,avro,canal-protobuf

Prints Markdown tables; bench/RESULTS.md records figures, load and command.
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
HAND_WRITTEN = "hand-written"


def protocol_options(protocol: str, archive: str) -> dict:
    """Codec options for the generator and the replay (decode and re-encode) of `protocol`."""
    if protocol == "canal-json":
        return {"enable-tidb-extension": "true"}
    if protocol == "avro":
        return {"schema-registry": f"file://{archive}-registry", "enable-tidb-extension": "true",
                "avro-enable-watermark": "true"}
    return {}


def generate_archive(path: str, protocol: str, transactions: int, partitions: int) -> None:
    """The archive, by the product's own command (the same seed for every protocol)."""
    cli = os.path.join(os.path.dirname(sys.executable), "cdc-replay")
    argv = [cli, "generate", "--output", path, "--protocol", protocol, "--transactions", str(transactions),
            "--partitions", str(partitions), "--seed", "7"]
    for key, value in protocol_options(protocol, path).items():
        argv += ["--protocol-option", f"{key}={value}"]
    subprocess.run(argv, check=True, env={**os.environ, "PYTHONPATH": ROOT})


def run_job(job: dict, source: str, workdir: str, master: str, driver_memory: str, code: str = ROOT) -> dict:
    """One job in its own process, its process tree's CPU sampled while it runs."""
    import psutil

    event_log = tempfile.mkdtemp(prefix="events-", dir=workdir)
    output = os.path.join(workdir, "cli-output")
    if job["kind"] == "cli":  # as a user runs it: the command line, spark-submit, its small-run settings
        argv = [os.path.join(os.path.dirname(sys.executable), "cdc-replay"), "replay", "--source", source,
                "--protocol", job["protocol"], "--output", output, "--emit", job["emit"],
                "--spark-conf", "spark.eventLog.enabled=true", "--spark-conf", f"spark.eventLog.dir=file://{event_log}",
                "--spark-conf", "spark.eventLog.compress=false", "--spark-conf", f"spark.driver.memory={driver_memory}"]
        for key, value in protocol_options(job["protocol"], source).items():
            argv += ["--protocol-option", f"{key}={value}", "--target-option", f"{key}={value}"]
    else:
        argv = [sys.executable, os.path.join(code, "bench", "bench_canal_json.py"), "--job", job["kind"], "--source", source,
                "--workdir", workdir, "--master", master, "--driver-memory", driver_memory, "--event-log", event_log]
    if job["kind"] == "replay":
        argv += ["--protocol", job["protocol"], "--emit", job["emit"],
                 "--options", json.dumps(protocol_options(job["protocol"], source))]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    # run from the checkout: local Spark's Python workers start as `python -m` in the JVM's working
    # directory, which comes first on their sys.path (before PYTHONPATH)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=code,
                            env={**os.environ, **job["env"], "PYTHONPATH": code})
    cpu: dict[int, float] = {}
    jvm_mb = workers_mb = 0.0  # peaks of the JVMs' RSS and of the Python processes the JVMs started
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            jvm = workers = 0
            for p in [root, *root.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system
                    if "java" in p.name():
                        jvm += p.memory_info().rss
                        workers += sum(c.memory_info().rss for c in p.children(recursive=True))
                except psutil.Error:
                    pass
            jvm_mb, workers_mb = max(jvm_mb, jvm / 2**20), max(workers_mb, workers / 2**20)
        except psutil.Error:
            pass
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    if job["kind"] == "cli":
        if proc.returncode != 0:
            raise RuntimeError(f"the job {job['name']} failed: {err[-3000:]}")
        import shutil

        from bench_canal_json import shuffle_bytes_written

        with open(os.path.join(output, "_manifest.json")) as f:
            counts = json.load(f)["counts"]
        shutil.rmtree(output, ignore_errors=True)
        result = {"seconds": wall, "jvm_mb": jvm_mb, "workers_mb": workers_mb, "read": counts["read"],
                  "records": counts["records"], "shuffle_bytes": shuffle_bytes_written(event_log)}
    else:
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"the job {job['name']} failed: {err[-3000:]}")
        result = json.loads(lines[-1][len("RESULT "):])
    return {**result, "process_s": wall, "cpu_s": sum(cpu.values()), "load_before": load_before,
            "load_after": os.getloadavg()[0]}


def plan(args) -> list[dict]:
    """The jobs of one round: each a name, the archive it reads and how it runs."""
    jobs = []
    for protocol in args.protocols:
        for emit in args.emits:
            jobs.append({"name": f"{emit} {protocol}" + (" (CLI)" if args.cli else ""),
                         "kind": "cli" if args.cli else "replay", "protocol": protocol,
                         "emit": emit, "env": {"CDC_REPLAY_ENGINE": "v2"}})
    if args.hand_written:
        jobs.append({"name": HAND_WRITTEN, "kind": "native", "protocol": "canal-json", "env": {}})
    if args.floor:
        jobs.append({"name": "floor", "kind": "floor", "protocol": "canal-json", "env": {}})
    return jobs


def median(rs: list[dict], field: str) -> float:
    return statistics.median(r[field] for r in rs)


def report(jobs: list[dict], results: dict, sources: dict, args) -> None:
    # a CLI run's wall is its whole process: beside the other jobs' whole processes
    timed = "process_s" if args.cli else "seconds"
    base = median(results[HAND_WRITTEN], timed) if HAND_WRITTEN in results else None
    first = results[jobs[0]["name"]][0]
    events = next((r["read"] for rs in results.values() for r in rs if "read" in r), None)
    print(f"\n{args.rounds} rounds, {args.master}, --transactions {args.transactions}, events read "
          f"{events if events is not None else '?'} (canal-json: {sources['canal-json']}), code {args.code}; load "
          f"before the first job "
          f"{first['load_before']:.2f}\n")
    print(f"| job | {'process' if args.cli else 'job'} wall s (median) | walls | process s | CPU s | load avg (min-max) | JVM peak MB | "
          "workers peak MB | shuffle B/event | vs hand-written |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for job in jobs:
        rs = results[job["name"]]
        wall = median(rs, timed)
        loads = [r["load_before"] for r in rs] + [r["load_after"] for r in rs]
        read = rs[0].get("read") or events
        per_event = f"{median(rs, 'shuffle_bytes') / read:.0f}" if read and "shuffle_bytes" in rs[0] else "-"
        each = ", ".join(f"{r[timed]:.1f}" for r in rs)
        print(f"| {job['name']} | {wall:.1f} | {each} | "
              f"{median(rs, 'process_s'):.1f} | {median(rs, 'cpu_s'):.1f} | {min(loads):.2f}-{max(loads):.2f} | "
              f"{max(r['jvm_mb'] for r in rs):,.0f} | {max(r['workers_mb'] for r in rs):,.0f} | {per_event} | "
              f"{f'{base / wall:.2f}x' if base else '-'} |")
    replays = [j for j in jobs if j["kind"] in ("replay", "cli")]
    walls = {(j["emit"], j["protocol"]): median(results[j["name"]], "seconds") for j in replays}
    lines = []
    for (emit, protocol), wall in walls.items():
        if protocol != "canal-json" and (emit, "canal-json") in walls:
            lines.append(f"* {emit}: {protocol} at {walls[(emit, 'canal-json')] / wall:.2f}x "
                         "canal-json's speed (goal ≥ 0.8x)")
        if emit != "snapshot" and ("snapshot", protocol) in walls:
            lines.append(f"* {protocol}: {emit} takes {wall / walls[('snapshot', protocol)]:.2f}x the "
                         "snapshot's time (goal ≤ 1.3x)")
    if "floor" in results:
        floor = median(results["floor"], timed)
        what = "process" if args.cli else "job"
        for (emit, protocol), wall in walls.items():
            if protocol == "canal-json":
                lines.append(f"* {emit}: {wall / floor:.2f}x the floor's {what} wall time "
                             "(goal ≤ 1.2x at 10k events)")
    if lines:
        print("\n" + "\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=100_000, help="`cdc-replay generate --transactions`")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--archive", help="a canal-json archive written earlier (default: generated in a temporary "
                    "folder; other protocols are always generated)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every job (alternating order)")
    ap.add_argument("--emits", default="snapshot", help="outputs to replay to: snapshot,topics,history")
    ap.add_argument("--protocols", default="canal-json", help="archives' protocols (the same events in each)")
    ap.add_argument("--no-hand-written", dest="hand_written", action="store_false",
                    help="leave the hand-written job out (a size where only the replay's growth is asked, e.g. 16M)")
    ap.add_argument("--floor", action="store_true", help="also the floor job (read, from_json, write)")
    ap.add_argument("--cli", action="store_true", help="replays by the command line (`cdc-replay replay`: "
                    "spark-submit with the small-run settings) timed as whole processes, as a user runs them; "
                    "the floor is then compared by its whole process too")
    ap.add_argument("--archives", help="a folder for the generated archives (archive-<protocol>): one already "
                    "there is replayed again instead of generated, so runs of two checkouts read the same files")
    ap.add_argument("--code", default=ROOT, help="the checkout whose code the jobs run (PYTHONPATH; default: this "
                    "script's): an A/B runs the same script and archives against two checkouts")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    args = ap.parse_args()
    args.emits = args.emits.split(",")
    args.protocols = ["canal-json", *[p for p in args.protocols.split(",") if p != "canal-json"]]

    workdir = tempfile.mkdtemp(prefix="cdc-engine-ab-")
    sources = {}
    for protocol in args.protocols:
        if protocol == "canal-json" and args.archive:
            sources[protocol] = os.path.abspath(args.archive)
            continue
        sources[protocol] = os.path.join(os.path.abspath(args.archives or workdir), f"archive-{protocol}")
        if not (args.archives and os.path.isdir(sources[protocol])):
            generate_archive(sources[protocol], protocol, args.transactions, args.partitions)
    jobs = plan(args)
    results: dict[str, list[dict]] = {job["name"]: [] for job in jobs}
    for round_ in range(args.rounds):
        for job in (jobs if round_ % 2 == 0 else tuple(reversed(jobs))):
            r = run_job(job, sources[job["protocol"]], workdir, args.master, args.driver_memory, args.code)
            results[job["name"]].append(r)
            print(f"round {round_ + 1} {job['name']}: {r['seconds']:.1f} s job, {r['process_s']:.1f} s process, "
                  f"{r['cpu_s']:.1f} CPU s, load {r['load_before']:.2f} -> {r['load_after']:.2f}", file=sys.stderr)
    report(jobs, results, sources, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
