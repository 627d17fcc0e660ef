"""Profile (not a test): where each job of `engine_ab.py` spends its wall time, stage by stage
and between stages, from Spark's event log and the CPU of the job's processes over time.

Each job (`--jobs`: `replay`, `hand-written`, `floor`) runs as `engine_ab.py` runs it: in a
fresh process and Spark session (`bench_canal_json.py --job`), on one archive. Meanwhile the
CPU seconds of the job's processes are sampled every 0.1 s with their time, by role: the Python
driver, the JVM (driver and executors: one process in local mode), and the Python workers the
JVM starts (decode, writers). Afterwards Spark's event log gives every stage's submission and
completion time, its tasks' run time, CPU time, GC and shuffle bytes, and every job's call site.
The samples are then attributed to what ran at their moment: a stage (split evenly when several
overlap) or **no stage** — the driver between jobs (planning, code generation, collecting
results, Python on the driver, writing the manifest). So per job:

* per stage: wall (submission to completion), tasks, executor run s, executor CPU s (JVM task
  threads), GC s, shuffle write MB, and the CPU of the JVM process, the Python workers and the
  Python driver while it ran;
* the gaps: wall seconds when no stage ran, split into the session's start (before the first
  job), between jobs and after the last, with the processes' CPU in them;
* for each stage of more than a second: Spark's SQL metrics that say what its rows cost (the
  exchange's `data size` of the rows it shuffled, per row; `scan time`; `sort time`; `data
  sent to Python workers`, per row) and its tasks' spans from the stage's start (a lone task
  at the end: the cores half idle);
* `--jfr`: the JVM's Java Flight Recorder samples of the executor task threads, by the stage
  running at their moment (one stage at a time: samples while stages overlap are left out),
  the Java methods they were in (self) and under (inclusive): which JVM code a stage's CPU is.

    .venv/bin/python bench/profile_eventlog.py --archive A --jobs replay,hand-written [--emit topics] [--keep DIR] [--code DIR] [--jfr]
    .venv/bin/python bench/profile_eventlog.py --archive /tmp/ab/archive-avro --protocol avro --jobs replay   # engine_ab's archives

Prints Markdown; bench/RESULTS.md records figures, load and command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# the replay on engine v2, the only one since the twenty-fifth session ($CDC_REPLAY_ENGINE=v2: a
# --code checkout from before v1's removal runs v2 too); `v2`, its former name, is kept
JOBS = {"replay": ("replay", {"CDC_REPLAY_ENGINE": "v2"}), "v2": ("replay", {"CDC_REPLAY_ENGINE": "v2"}),
        "hand-written": ("native", {}), "floor": ("floor", {})}


def _role(p, root_pid: int) -> str:
    if p.pid == root_pid:
        return "driver"
    return "jvm" if "java" in p.name() else "workers"


def run_sampled(kind: str, env: dict, archive: str, workdir: str, event_log: str, master: str,
                memory: str, code: str = ROOT, emit: str = "snapshot",
                protocol: str = "canal-json", jfr: str | None = None) -> tuple[dict, list[tuple[float, dict]]]:
    """The job in its own process (spark_apps from the checkout `code`; a replay of the archive
    in `protocol` writes `emit`); its RESULT and a list of (epoch s, cumulative CPU s per role)."""
    import psutil

    argv = [sys.executable, os.path.join(code, "bench", "bench_canal_json.py"), "--job", kind, "--source", archive,
            "--workdir", workdir, "--master", master, "--driver-memory", memory, "--event-log", event_log]
    if kind == "replay":
        from engine_ab import protocol_options

        argv += ["--protocol", protocol, "--options", json.dumps(protocol_options(protocol, archive)), "--emit", emit]
    env = {**os.environ, **env, "PYTHONPATH": code}
    if jfr:  # every JVM of the job records (local mode: one, the driver and its executor)
        env["JAVA_TOOL_OPTIONS"] = (env.get("JAVA_TOOL_OPTIONS", "") + " -XX:StartFlightRecording="
                                    f"filename={jfr},settings=profile,dumponexit=true").strip()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=code)  # the workers run `python -m`: cwd first on sys.path
    root = psutil.Process(proc.pid)
    seen: dict[int, tuple[str, float]] = {}
    samples: list[tuple[float, dict]] = []
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    err: list[str] = []
    threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True).start()
    while proc.poll() is None:
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    seen[p.pid] = (_role(p, root.pid), t.user + t.system)
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        totals = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        for role, cpu in seen.values():
            totals[role] += cpu
        samples.append((time.time(), totals))
        time.sleep(0.1)
    reader.join()
    lines = [line for line in out[0].splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the job {kind} failed: {''.join(err)[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):]), samples


def read_event_log(event_log: str) -> dict:
    """Stages (times, names, task metrics), jobs (times, stages, call site) and the application's span."""
    stages: dict[int, dict] = {}
    jobs: dict[int, dict] = {}
    app = {}
    for d, _, names in os.walk(event_log):
        for name in names:
            if name.startswith(("appstatus", ".")):
                continue
            with open(os.path.join(d, name)) as f:
                for line in f:
                    e = json.loads(line)
                    kind = e["Event"]
                    if kind == "SparkListenerApplicationStart":
                        app["start"] = e["Timestamp"] / 1e3
                    elif kind == "SparkListenerApplicationEnd":
                        app["end"] = e["Timestamp"] / 1e3
                    elif kind == "SparkListenerJobStart":
                        props = e.get("Properties") or {}
                        jobs[e["Job ID"]] = {"start": e["Submission Time"] / 1e3, "stages": e["Stage IDs"],
                                             "site": props.get("callSite.short") or ""}
                    elif kind == "SparkListenerJobEnd":
                        jobs[e["Job ID"]]["end"] = e["Completion Time"] / 1e3
                    elif kind == "SparkListenerStageCompleted":
                        info = e["Stage Info"]
                        s = stages.setdefault(info["Stage ID"], _stage())
                        s.update(name=info["Stage Name"], tasks=info["Number of Tasks"],
                                 start=info["Submission Time"] / 1e3, end=info["Completion Time"] / 1e3,
                                 sql={a["Name"]: int(a["Value"]) for a in info.get("Accumulables") or []
                                      if a.get("Name") in SQL_METRICS and str(a.get("Value", "")).isdigit()})
                    elif kind == "SparkListenerTaskEnd":
                        m = e.get("Task Metrics") or {}
                        s = stages.setdefault(e["Stage ID"], _stage())
                        s["run"] += m.get("Executor Run Time", 0) / 1e3
                        s["cpu"] += m.get("Executor CPU Time", 0) / 1e9
                        s["gc"] += m.get("JVM GC Time", 0) / 1e3
                        w = m.get("Shuffle Write Metrics") or {}
                        s["write"] += w.get("Shuffle Bytes Written", 0)
                        s["written"] += w.get("Shuffle Records Written", 0)
                        info = e.get("Task Info") or {}
                        s["spans"].append((info.get("Launch Time", 0) / 1e3, info.get("Finish Time", 0) / 1e3))
                        r = m.get("Shuffle Read Metrics") or {}
                        s["read"] += r.get("Remote Bytes Read", 0) + r.get("Local Bytes Read", 0)
    for job_id, job in jobs.items():
        for sid in job["stages"]:
            if sid in stages:
                stages[sid].setdefault("job", job_id)
    return {"stages": {k: v for k, v in stages.items() if "start" in v}, "jobs": jobs, "app": app}


def _stage() -> dict:
    return {"run": 0.0, "cpu": 0.0, "gc": 0.0, "write": 0, "read": 0, "written": 0, "spans": [], "sql": {}}


# Spark's SQL metrics (a stage's accumulables, summed over its tasks) that `stage_details` shows
SQL_METRICS = ("data size", "scan time", "sort time", "data sent to Python workers")


def attribute(log: dict, samples: list[tuple[float, dict]]) -> tuple[dict, dict]:
    """Each sample interval's CPU per role to the stages running at its middle (evenly), else
    to the gap it falls in: `start` (before the first job), `between` jobs, `end` (after the last)."""
    stages = log["stages"]
    spans = sorted((j["start"], j.get("end", j["start"])) for j in log["jobs"].values())
    first, last = (spans[0][0], spans[-1][1]) if spans else (0.0, 0.0)
    per_stage = {sid: {"driver": 0.0, "jvm": 0.0, "workers": 0.0} for sid in stages}
    gaps = {g: {"wall": 0.0, "driver": 0.0, "jvm": 0.0, "workers": 0.0} for g in ("start", "between", "end")}
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        mid = (t0 + t1) / 2
        running = [sid for sid, s in stages.items() if s["start"] <= mid < s["end"]]
        delta = {k: c1[k] - c0[k] for k in c1}
        if running:
            for sid in running:
                for k, v in delta.items():
                    per_stage[sid][k] += v / len(running)
            continue
        gap = gaps["start" if mid < first else "end" if mid >= last else "between"]
        gap["wall"] += t1 - t0
        for k, v in delta.items():
            gap[k] += v
    return per_stage, gaps


def _site(name: str) -> str:
    what, _, where = name.partition(" at ")
    return f"{what} at {os.path.basename(where)}" if where else what


def report(title: str, result: dict, log: dict, samples, per_stage: dict, gaps: dict, load: tuple) -> None:
    stages = log["stages"]
    wall = samples[-1][0] - samples[0][0]
    cpu = {k: samples[-1][1][k] for k in samples[-1][1]}
    events = result.get("read")
    print(f"\n### {title}\n")
    print(f"process {wall:.1f} s, job {result['seconds']:.1f} s"
          + (f", {events:,} events read" if events else "")
          + f"; CPU s: Python driver {cpu['driver']:.1f}, JVM {cpu['jvm']:.1f}, Python workers {cpu['workers']:.1f}"
          f" (total {sum(cpu.values()):.1f}); {len(log['jobs'])} Spark jobs, {len(stages)} stages run;"
          f" load {load[0]:.2f} -> {load[1]:.2f}\n")
    print("| stage | job | call site | tasks | wall s | exec run s | exec CPU s | GC s | shuffle write MB "
          "| JVM CPU s | workers CPU s | driver CPU s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    total = {"wall": 0.0, "run": 0.0, "cpu": 0.0, "gc": 0.0, "write": 0, "jvm": 0.0, "workers": 0.0, "driver": 0.0}
    for sid in sorted(stages):
        s, a = stages[sid], per_stage[sid]
        w = s["end"] - s["start"]
        for k in ("run", "cpu", "gc", "write"):
            total[k] += s[k]
        for k in ("jvm", "workers", "driver"):
            total[k] += a[k]
        total["wall"] += w
        print(f"| {sid} | {s.get('job', '')} | {_site(s['name'])} | {s['tasks']} | {w:.2f} | {s['run']:.1f} | "
              f"{s['cpu']:.1f} | {s['gc']:.1f} | {s['write'] / 1e6:.1f} | {a['jvm']:.1f} | {a['workers']:.1f} | "
              f"{a['driver']:.1f} |")
    print(f"| | | **stages** (wall summed; overlap counted twice) | | **{total['wall']:.1f}** | {total['run']:.1f} | "
          f"{total['cpu']:.1f} | {total['gc']:.1f} | {total['write'] / 1e6:.1f} | {total['jvm']:.1f} | "
          f"{total['workers']:.1f} | {total['driver']:.1f} |")
    for name, label in (("start", "no stage: process start to first job (session, decode planning)"),
                        ("between", "no stage: between jobs (driver)"), ("end", "no stage: after last job")):
        g = gaps[name]
        print(f"| | | {label} | | {g['wall']:.1f} | | | | | {g['jvm']:.1f} | {g['workers']:.1f} | {g['driver']:.1f} |")
    if events:
        print(f"\nShuffle write per event: {total['write'] / events:.0f} bytes.")
    stage_details(stages)


def stage_details(stages: dict, longer: float = 1.0) -> None:
    """Each stage of more than `longer` s: its SQL metrics and its tasks' spans."""
    rows = []
    for sid in sorted(stages):
        s = stages[sid]
        if s["end"] - s["start"] <= longer:
            continue
        sql, parts = s["sql"], []
        size = sql.get("data size")
        if size and s["written"]:
            parts.append(f"data size {size / 1e6:.1f} MB for {s['written']:,} rows shuffled "
                         f"({size / s['written']:.0f} B/row, {s['write'] / 1e6:.1f} MB written compressed)")
        for name in ("scan time", "sort time"):
            if sql.get(name):
                parts.append(f"{name} {sql[name] / 1e3:.2f} s")
        sent = sql.get("data sent to Python workers")
        if sent:
            parts.append(f"data sent to Python workers {sent / 1e6:.1f} MB")
        spans = sorted(s["spans"])
        if spans:
            parts.append("tasks (from the stage's start, s) " + ", ".join(
                f"{a - s['start']:.1f}-{b - s['start']:.1f}" for a, b in spans if b - a >= 0.05))
        rows.append(f"* stage {sid}: " + "; ".join(parts))
    if rows:
        print(f"\nStages of more than {longer:g} s:\n")
        print("\n".join(rows))


def jfr_frames(jfr: str, stages: dict, top: int = 12, longer: float = 1.0) -> None:
    """The Flight Recorder's execution samples of the executor task threads ("Executor task
    launch worker"), each given to the stage running at its moment (none when several ran:
    left out); per stage of more than `longer` s, the methods most samples were in (self) and
    under (inclusive, the method counted once per sample). Samples are of Java code only (not
    native code: e.g. a JNI compressor) and are biased to safepoints: shares, not seconds."""
    import collections
    import datetime
    import shutil

    tool = shutil.which("jfr") or os.path.join(os.path.dirname(os.path.realpath(shutil.which("java") or "java")), "jfr")
    out = subprocess.run([tool, "print", "--json", "--events", "jdk.ExecutionSample", jfr],
                         capture_output=True, text=True, check=True).stdout
    windows = {sid: (s["start"], s["end"]) for sid, s in stages.items() if s["end"] - s["start"] > longer}
    own: dict = collections.defaultdict(collections.Counter)
    under: dict = collections.defaultdict(collections.Counter)
    count: collections.Counter = collections.Counter()
    for event in json.loads(out)["recording"]["events"]:
        v = event["values"]
        if "Executor task launch worker" not in ((v.get("sampledThread") or {}).get("javaName") or ""):
            continue
        at = datetime.datetime.fromisoformat(v["startTime"].replace("Z", "+00:00")).timestamp()
        running = [sid for sid, (a, b) in windows.items() if a <= at < b]
        if len(running) != 1:
            continue
        sid = running[0]
        frames = [f"{f['method']['type']['name'].rsplit('/', 1)[-1]}.{f['method']['name']}"
                  for f in v["stackTrace"]["frames"]]
        count[sid] += 1
        if frames:
            own[sid][frames[0]] += 1
        for frame in set(frames):
            under[sid][frame] += 1
    print("\nJFR samples of the executor task threads (shares of the stage's samples):")
    for sid in sorted(count):
        n = count[sid]
        print(f"\n* stage {sid}, {n} samples. Self: " + "; ".join(
            f"{f} {100 * k / n:.0f}%" for f, k in own[sid].most_common(top)))
        print("  Inclusive: " + "; ".join(f"{f} {100 * k / n:.0f}%" for f, k in under[sid].most_common(3 * top)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archive", required=True, help="an archive written earlier (canal-json with TiDB's extension "
                    "unless --protocol; engine_ab's archive-<protocol>: an Avro registry beside it)")
    ap.add_argument("--protocol", default="canal-json", help="the archive's protocol (the replay job; codec "
                    "options as engine_ab.py gives them)")
    ap.add_argument("--jobs", default="replay,hand-written", help="comma-separated: " + ",".join(JOBS))
    ap.add_argument("--emit", default="snapshot", help="what the replay job writes: snapshot, topics or history")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--code", default=ROOT, help="run spark_apps (and its bench_canal_json.py) from this checkout: "
                    "before/after pairs")
    ap.add_argument("--keep", help="keep the event logs and samples in this folder")
    ap.add_argument("--jfr", action="store_true", help="record the JVM with Java Flight Recorder (beside the event "
                    "log) and show each stage's Java methods")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="cdc-profile-eventlog-")
    for name in args.jobs.split(","):
        kind, env = JOBS[name]
        event_log = os.path.join(args.keep or workdir, f"events-{name}-{int(time.time())}")
        os.makedirs(event_log)
        load = os.getloadavg()[0]
        jfr = event_log + ".jfr" if args.jfr else None
        result, samples = run_sampled(kind, env, os.path.abspath(args.archive), workdir, event_log, args.master,
                                      args.driver_memory, os.path.abspath(args.code), args.emit,
                                      args.protocol, jfr)
        if args.keep:
            with open(event_log + ".samples.json", "w") as f:
                json.dump([result, samples], f)
        log = read_event_log(event_log)
        per_stage, gaps = attribute(log, samples)
        report(name if args.emit == "snapshot" else f"{name} --emit {args.emit}", result, log, samples, per_stage, gaps, (load, os.getloadavg()[0]))
        if jfr:
            jfr_frames(jfr, log["stages"])
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
