"""Building the spark-submit command that runs a Spark app of ours: a pure function of its
inputs (tests assert the exact list), used by `cdc-replay replay` and by the Airflow replay
operator, so the command line and the DAG run the very same thing."""

from __future__ import annotations

import os
import sys
import zipfile

SPARK_APPS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SPARK_APPS)
REPLAY_APP = os.path.join(SPARK_APPS, "replay.py")
LOG4J = os.path.join(SPARK_APPS, "conf", "log4j2.properties")


# where the app writes its summary instead of stdout (set by `cdc-replay replay`: spark-submit
# merges the app's stderr, its log, into its stdout, so only a file keeps the two apart)
SUMMARY_ENV = "CDC_REPLAY_SUMMARY_FILE"


def is_local(master: str) -> bool:
    return master.startswith("local")


LOCAL_DRIVER_MEMORY = "4g"  # local mode runs everything in the driver JVM (Spark's default is 1g)

# Local runs (docs/engine.md "Small runs", "The JIT of local runs"): a replay of a small archive
# is mostly JVM fixed cost, a third of it the C2 JIT compiler's threads and much of the rest
# loading Spark's classes and generating code. Every local run maps a class-data archive
# (AppCDS) of Spark's classes and compiles with C1 only: C1's code is slower at peak, but in a
# replay the JVM mostly scans, shuffles and aggregates few columns (the decode runs in the
# Python workers), and C2's compiler threads took 13-17 of the JVM's CPU seconds from the two
# cores the tasks share (measured: 1M events 33-35 s against 36.5-39 s, 4M 105-115 s against
# 109-117 s; CPU 17-26% / 0-14% less).
# Interpreted expressions skip code generation but are slower per row: only small sources.
SMALL_RUN_ENV = "CDC_REPLAY_SMALL_RUN_MB"
SMALL_RUN_MB = 16.0  # default threshold (MB of archive objects, as stored); 0 turns it off
LOCAL_JIT_ENV = "CDC_REPLAY_LOCAL_JIT"  # "c1" (the default) or "default": the JVM's own tiered JIT
LOCAL_JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
# Spark settings of the smallest runs (each one a --spark-conf of the user's replaces): no
# Janino compilation of generated code, neither whole-stage nor per expression (Spark's
# interpreted projections, predicates and orderings instead). Up to INTERPRETED_RUN_MB of
# source only, and only within the small-run threshold: measured, it saves CPU at 1.1 MB (10k
# events) and costs some at 19 MB (148k events), where the rows outweigh the compilation.
SMALL_RUN_SPARK_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
INTERPRETED_RUN_MB = 4.0
# A Kafka source's bytes are not known before the run, its offsets are (kafka_io.records_in_range):
# up to this many records it is a small run with interpreted expressions, the size the
# interpreted settings were measured to save CPU at (10k events, 1.1 MB of archive)
SMALL_KAFKA_RECORDS = 10_000
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CDS_ENV = "CDC_REPLAY_CDS_DIR"  # where the class-data archives go ("off": none)
# settings that change the driver's class path: its classes would not match an archive's
CLASS_PATH_CONF = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")


def class_archive(env: dict | None = None) -> str | None:
    """The driver JVM's class-data archive (AppCDS) for small runs: the classes a replay loads,
    mapped from one file instead of read from Spark's jars and verified again each run. One
    file per JVM and set of Spark jars (a key in its name), in $CDC_REPLAY_CDS_DIR (default
    ~/.cache/cdc-replay/cds); None when set to "off"."""
    import hashlib
    import shutil

    env = os.environ if env is None else env
    folder = env.get(CDS_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "cdc-replay", "cds")
    if folder == "off":
        return None
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    java = os.path.realpath(os.path.join(env["JAVA_HOME"], "bin", "java") if env.get("JAVA_HOME")
                            else shutil.which("java") or "java")
    key = hashlib.sha256(repr((java, pyspark.__version__, sorted(os.listdir(jars)) if os.path.isdir(jars) else None))
                         .encode()).hexdigest()[:16]
    return os.path.join(folder, f"spark-driver-{key}.jsa")


def class_archive_options(path: str | None) -> str:
    """-XX options that use the archive at `path`, or that write it when this JVM exits (to a
    temporary name: finish_class_archive renames it once the run succeeded, so a JVM never
    maps a half-written archive)."""
    if path is None:
        return ""
    quiet = "-Xlog:cds=off,cds+dynamic=off"  # a line per class it cannot archive (signed jars ...)
    if os.path.exists(path):
        return f"-XX:SharedArchiveFile={path} {quiet}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:  # no writable cache: the run goes without
        return ""
    return f"-XX:ArchiveClassesAtExit={path}.{os.getpid()}.tmp {quiet}"


def finish_class_archive(settings: list[str], returncode: int) -> None:
    """After the driver JVM exited (`settings`: the spark-submit command or its confs' values):
    keep the class-data archive it wrote; a run that failed keeps none."""
    for option in " ".join(str(s) for s in settings).split():
        if option.startswith("-XX:ArchiveClassesAtExit=") and os.path.exists(option.split("=", 1)[1]):
            written = option.split("=", 1)[1]
            if returncode == 0 and os.path.getsize(written) > 0:
                os.replace(written, written.rsplit(".", 2)[0])
            else:
                os.remove(written)


def small_run_threshold(env: dict | None = None) -> int:
    """Bytes up to which a local run counts as small ($CDC_REPLAY_SMALL_RUN_MB, default 16)."""
    value = (os.environ if env is None else env).get(SMALL_RUN_ENV, "").strip()
    try:
        mb = float(value) if value else SMALL_RUN_MB
    except ValueError:
        raise ValueError(f"${SMALL_RUN_ENV}={value!r} is not a number of MB") from None
    if mb < 0:
        raise ValueError(f"${SMALL_RUN_ENV}={value!r} is negative")
    return int(mb * 1_000_000)


def local_jit(env: dict | None = None) -> bool:
    """Whether a local run's driver JVM compiles with C1 only ($CDC_REPLAY_LOCAL_JIT, default c1)."""
    value = (os.environ if env is None else env).get(LOCAL_JIT_ENV, "").strip().lower() or "c1"
    if value not in ("c1", "default"):
        raise ValueError(f"${LOCAL_JIT_ENV}={value!r}: use c1 (C1 JIT only, the default) or default (the JVM's own)")
    return value == "c1"


def small_run_options(master: str, source_bytes: int | None, conf: dict[str, str] | None = None,
                      env: dict | None = None, source_records: int | None = None
                      ) -> tuple[str | None, dict[str, str], str]:
    """(driver JVM options to add, or None; Spark settings to add; why, for the log) for a local
    run: the class-data archive and the C1-only JIT (unless $CDC_REPLAY_LOCAL_JIT=default), and
    for a small source up to INTERPRETED_RUN_MB also SMALL_RUN_SPARK_CONF (less what `conf` sets
    itself). Nothing for a cluster master, nor when --spark-conf sets the driver's Java options
    (the user's value wins); no archive when the settings change the driver's class path
    (spark.jars, packages: a Kafka source). A Kafka source is sized by `source_records` (its
    offsets) instead of bytes: small, and interpreted, up to SMALL_KAFKA_RECORDS; not small
    when neither size is known."""
    conf = conf or {}
    if not is_local(master):
        return None, {}, f"driver JVM with its default JIT: master {master} is a cluster"
    if DRIVER_JAVA_OPTIONS in conf:
        return None, {}, f"driver JVM options as --spark-conf {DRIVER_JAVA_OPTIONS} gives them"
    threshold = small_run_threshold(env)
    if source_bytes is None and source_records is None:
        large = "the source's size is not known before the run"
    elif threshold == 0:
        large = f"${SMALL_RUN_ENV}=0 turns the small-run settings off"
    elif source_bytes is None:
        large = (None if source_records <= SMALL_KAFKA_RECORDS else
                 f"the Kafka source holds more than {SMALL_KAFKA_RECORDS} records")
    elif source_bytes > threshold:
        large = f"the source holds more than ${SMALL_RUN_ENV}={threshold / 1e6:g} MB"
    else:
        large = None
    archive = None if any(key in conf for key in CLASS_PATH_CONF) else class_archive(env)
    cds_options = class_archive_options(archive)
    cds = ("no class-data archive" if not cds_options else f"class-data archive {archive}"
           if cds_options.startswith("-XX:SharedArchiveFile=") else f"writing the class-data archive {archive}")
    c1 = local_jit(env)
    jit = (f"driver JVM with {LOCAL_JIT_OPTIONS} (C1 JIT only)" if c1
           else f"driver JVM with its default JIT (${LOCAL_JIT_ENV}=default)")
    options = " ".join(o for o in (LOCAL_JIT_OPTIONS if c1 else "", cds_options) if o) or None
    if large is not None:
        return options, {}, f"local run, not small ({large}): {jit}, generated code; {cds}"
    interpreted = source_bytes is None or source_bytes <= INTERPRETED_RUN_MB * 1_000_000
    settings = {k: v for k, v in SMALL_RUN_SPARK_CONF.items() if k not in conf} if interpreted else {}
    codegen = (", ".join(f"{k}={v}" for k, v in settings.items()) or "code generation as --spark-conf sets it"
               if interpreted else f"generated code (over {INTERPRETED_RUN_MB:g} MB)")
    size = (f"{source_records} Kafka records, at most {SMALL_KAFKA_RECORDS}" if source_bytes is None else
            f"{source_bytes / 1e6:.1f} MB of source, at most ${SMALL_RUN_ENV}={threshold / 1e6:g}")
    return options, settings, f"small local run ({size}): {jit}, {cds}, {codegen}"


def submit_plan(
    app_args: list[str],
    *,
    master: str = "local[*]",
    python: str = sys.executable,
    py_files: str | None = None,
    app: str = REPLAY_APP,
    conf: dict[str, str] | None = None,
    driver_java_options: str | None = None,
    archives: tuple[str, ...] = (),
) -> dict:
    """What spark-submit is given, as values: `master`, `name`, `conf` (ordered), `py_files`,
    `application` and `application_args` (`--master` first). `spark_submit_command` renders it
    as a command line and the Airflow operator hands it to SparkSubmitOperator, so the two
    cannot drift and nothing parses a command back. Workers use `python` (the venv's), not
    whatever `python3` is on PATH; `py_files` ships our packages to a cluster, `archives`
    (`path#name`) the compiled extension (build_native_archive); `conf` (the app's
    --spark-conf) reaches spark-submit too, because settings like spark.driver.memory only work
    before the JVM starts. `driver_java_options` (small_run_options) go after ours."""
    java_options = " ".join(o for o in (f"-Dlog4j2.configurationFile=file:{LOG4J}", driver_java_options) if o)
    settings = {"spark.pyspark.python": python, "spark.pyspark.driver.python": python,
                DRIVER_JAVA_OPTIONS: java_options}
    if is_local(master):
        settings["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
    settings.update(conf or {})
    if archives:  # after the user's own spark.archives (a packed environment), not instead
        settings["spark.archives"] = ",".join(a for a in (settings.get("spark.archives"), *archives) if a)
    return {"master": master, "name": "cdc-replay", "conf": settings, "py_files": py_files, "application": app,
            "application_args": ["--master", master, *app_args]}


def spark_submit_command(app_args: list[str], *, python: str = sys.executable, spark_submit: str | None = None,
                         **plan) -> list[str]:
    """spark-submit <confs> <app> <app_args>: `submit_plan` as a command line (`spark_submit`:
    the binary, by default the one beside `python`)."""
    given = submit_plan(app_args, python=python, **plan)
    binary = spark_submit or os.path.join(os.path.dirname(python), "spark-submit")
    command = [binary, "--master", given["master"], "--name", given["name"]]
    for key, value in given["conf"].items():
        command += ["--conf", f"{key}={value}"]
    if given["py_files"]:
        command += ["--py-files", given["py_files"]]
    return command + [given["application"], *given["application_args"]]


def build_py_files(directory: str) -> str:
    """A zip of our packages for cluster executors: `cdc_codecs` (from codecs/) and
    `spark_apps`. Local masters import them from the installed venv instead."""
    path = os.path.join(directory, "cdc_replay_py_files.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, package in ((os.path.join(REPO, "codecs"), "cdc_codecs"), (SPARK_APPS, "spark_apps")):
            for root, _dirs, files in os.walk(folder):
                if "__pycache__" in root:
                    continue
                for name in files:
                    if name.endswith((".py", ".proto", ".avsc", ".json", ".properties", ".xml")):
                        full = os.path.join(root, name)
                        archive.write(full, os.path.join(package, os.path.relpath(full, folder)))
    return path


# The compiled decoders (native/cdc_replay_native) on a cluster: a zip of the extension's
# package unpacked by Spark into each executor's working directory under this name
# (`spark.archives`), where spark_apps.native_decode looks for it first.
NATIVE_SHIPPED = "cdc_replay_native_shipped"
NATIVE_ENV = "CDC_REPLAY_NATIVE_WHEEL"  # a wheel built for the executors instead, or "off"


def _installed_native(python: str) -> str | None:
    """The folder of the cdc_replay_native package in `python`'s environment, or None."""
    probe = "import importlib.util as u; s = u.find_spec('cdc_replay_native'); print(s.submodule_search_locations[0] if s else '')"
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        import importlib.util

        spec = importlib.util.find_spec("cdc_replay_native")
        return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None
    import subprocess

    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return found or None


def build_native_archive(directory: str, python: str = sys.executable, env: dict | None = None) -> tuple[str | None, str]:
    """(`path#NATIVE_SHIPPED` for spark.archives, or None; what is shipped, for the log): the
    compiled extension for cluster executors. By default the one installed in the driver's
    Python (scripts/bootstrap builds it): right where the executors' Python and platform match
    the driver's. $CDC_REPLAY_NATIVE_WHEEL names a wheel built for the executors instead (a
    wheel is a zip with the package at its root: shipped as it is), or "off". Executors that
    cannot load what is shipped use their own installed copy, else the Python codecs, and the
    manifest says so (manifest.decoder_observed)."""
    import shutil

    env = os.environ if env is None else env
    wheel = (env.get(NATIVE_ENV) or "").strip()
    path = os.path.join(directory, "cdc_replay_native.zip")
    if wheel.lower() == "off":
        return None, f"compiled decoders not shipped (${NATIVE_ENV}=off): executors use their own installed copy, if any"
    if wheel:
        if not zipfile.is_zipfile(wheel) or "cdc_replay_native/__init__.py" not in zipfile.ZipFile(wheel).namelist():
            raise ValueError(f"${NATIVE_ENV}={wheel}: not a wheel of cdc_replay_native (no cdc_replay_native/__init__.py)")
        shutil.copyfile(wheel, path)  # Spark unpacks by extension: .whl is not one it knows
        return f"{path}#{NATIVE_SHIPPED}", f"compiled decoders shipped to the executors from {wheel}"
    folder = _installed_native(python)
    if folder is None:
        return None, (f"compiled decoders not shipped: {python} has no cdc_replay_native (scripts/bootstrap builds "
                      "it); executors use their own installed copy, if any, else the Python codecs")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, _dirs, files in os.walk(folder):
            if "__pycache__" in root:
                continue
            for name in files:
                full = os.path.join(root, name)
                archive.write(full, os.path.join("cdc_replay_native", os.path.relpath(full, folder)))
    return f"{path}#{NATIVE_SHIPPED}", f"compiled decoders shipped to the executors from {folder}"
