"""Build and stop the Spark session of a run."""

from __future__ import annotations

import os
import sys

from cdc_codecs import parse_option_pairs


def build_session(master: str, app_name: str, conf: list[str]):
    from pyspark.sql import SparkSession

    memoize_jvm_lookups()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8" if master.startswith("local") else "200",
        "spark.sql.adaptive.enabled": "true",
        "spark.pyspark.python": sys.executable,
        "spark.log.level": "WARN",
        "spark.sql.debug.maxToStringFields": "500",
        # HotSpot never compiles a method of more than 8000 bytes of bytecode: a whole-stage
        # method between that and Spark's own limit (65535) runs interpreted. Our plans keep
        # their stages below it (transforms.codegen_boundary); this is the safety net: the last
        # change per key's map stage before the boundaries, at 4M events, took 44.5 CPU s
        # interpreted, 22.9 s as separate compiled operators (docs/engine.md, "Part 5")
        "spark.sql.codegen.hugeMethodLimit": "8000",
        # PySpark 4 sends each Column function's Python call site to the JVM (eight py4j round
        # trips per F.col, when, ==, ...) for the DataFrame query context of errors; a replay
        # builds thousands of expressions on the driver between its jobs (docs/engine.md,
        # "The driver between jobs (twentieth session)")
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Int.MaxValue turns off the byte cap of the Arrow batches sent to Python workers (each
        # stays at maxRecordsPerBatch rows): with a cap, Spark sizes the batch after every row
        # it appends, setting the value count of every vector, which for list vectors walks the
        # batch so far. Quadratic per batch: at 1M events it was half the JVM's CPU in the
        # topics writer (docs/engine.md, "--emit topics at 1M (twenty-first session)")
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        # `lower` through the JVM's case mapping (Spark 3.5's, and spark_lower's for the
        # dictionary's names), not ICU's: the first ICU `lower` in a JVM initialises a table of
        # every code point's title case (CollationAwareUTF8String), 3-5 CPU s while the other
        # tasks wait on the class (docs/engine.md, "Jobs and gaps (twenty-sixth session)")
        "spark.sql.icu.caseMappings.enabled": "false",
    }
    if master.startswith("local"):  # workers fork with the heavy imports done (spark_apps/worker_daemon.py)
        defaults["spark.python.daemon.module"] = "spark_apps.worker_daemon"
    # executors (also in a cluster) reach S3 with the driver's settings
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_DEFAULT_REGION", "AWS_REGION"):
        if os.environ.get(name):
            defaults[f"spark.executorEnv.{name}"] = os.environ[name]
    for key, value in parse_option_pairs(conf).items():
        defaults[key] = value
    for key, value in defaults.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if master.startswith("local"):
        arrow_bounds_checks(session)
    return session


ARROW_CHECKS_ENV = "CDC_REPLAY_ARROW_CHECKS"  # "on": Arrow Java's bounds checks kept (local runs)
ARROW_UNSAFE = "arrow.enable_unsafe_memory_access"  # Arrow Java's switch (also $ARROW_ENABLE_UNSAFE_MEMORY_ACCESS)


def arrow_bounds_checks(spark, env: dict | None = None) -> bool:
    """Turns off Arrow Java's bounds checks in a local session's JVM (its tasks run there)
    before its first Arrow use; whether they are on afterwards. Why: every value Spark writes
    into an Arrow vector (ArrowWriter: the rows sent to Python, the topics writer's 417 MB at
    1M events) first checked the buffer's reference count and bounds (`ArrowBuf.chk`), 16% of
    the writer stage's JVM samples; Spark's writers size the buffers first (`setSafe`), so the
    check never fires and the bytes are the same. Kept when $CDC_REPLAY_ARROW_CHECKS=on, when
    the JVM was told either way (the property or Arrow's variable), or when Arrow's class was
    already loaded (it reads the switch once)."""
    env = os.environ if env is None else env
    value = env.get(ARROW_CHECKS_ENV, "").strip().lower() or "off"
    if value not in ("on", "off"):
        raise ValueError(f"${ARROW_CHECKS_ENV}={value!r}: use off (the default: Arrow Java's bounds checks off in a "
                         "local run) or on")
    jvm = spark.sparkContext._jvm
    system = jvm.java.lang.System
    told = system.getProperty(ARROW_UNSAFE) is not None or system.getenv("ARROW_ENABLE_UNSAFE_MEMORY_ACCESS") is not None
    if value == "off" and not told:
        system.setProperty(ARROW_UNSAFE, "true")
    return bool(jvm.org.apache.arrow.memory.BoundsChecking.BOUNDS_CHECKING_ENABLED)


# a run the replay's own session reads shuffles into one partition per this many records read,
# at least one per core and at most the session's setting (docs/engine.md "Jobs of a small run
# (twenty-seventh session)")
RECORDS_PER_SHUFFLE_PARTITION = 50_000
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def fit_shuffle_partitions(spark, records: int) -> int:
    """Lower the session's shuffle partitions to what `records` fill: a persisted shuffle
    output (the last change per key) keeps its partitions, so each later action reading it ran
    8 tasks of a few rows each in a 10k-event run. Only ever lowers (1M records keep 8). Returns
    the count in force."""
    given = int(spark.conf.get(SHUFFLE_PARTITIONS))
    wanted = max(spark.sparkContext.defaultParallelism, -(-records // RECORDS_PER_SHUFFLE_PARTITION))
    if wanted < given:
        spark.conf.set(SHUFFLE_PARTITIONS, str(wanted))
        return wanted
    return given


def stop_session(spark) -> None:
    """spark.stop() without waiting for pyspark's accumulator server to notice: its handler polls
    the JVM's connection once a second, and SparkContext.stop() waits for that poll (0.85 s of
    the 0.95 s a stop took, measured). The server is shut down in a daemon thread instead, which
    ends within that second (or with the process)."""
    import threading

    context = spark.sparkContext
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        context._accumulatorServer = None
    try:
        spark.stop()
    finally:
        if server is not None:
            threading.Thread(target=server.shutdown, name="cdc-replay-accumulator-stop", daemon=True).start()



def memoize_jvm_lookups() -> None:
    """Each JVM class and static method the driver names is looked up once per process, not once
    per use. py4j resolves `jvm.functions` (`sc._jvm.<name>`) and then `.col` (a static method)
    with a reflection round trip each, every time: PySpark's `F.col("x")`, `F.lit(1)`, every
    `F.*` function and every column named by a string cost three py4j calls where one builds
    the expression (2,176 of a small replay's 7,181 calls were these lookups: docs/engine.md,
    "The driver's py4j calls (twenty-fourth session)"). The answers are kept on the objects
    themselves (a JVMView's class by its name, a class's static method by its name), where
    Python finds them before asking py4j again; fields (values) and packages are not kept."""
    from py4j import java_gateway as jg

    if getattr(jg.JVMView.__getattr__, "_cdc_replay_memo", False):
        return
    view_lookup, class_lookup = jg.JVMView.__getattr__, jg.JavaClass.__getattr__

    def view_getattr(self, name):
        found = view_lookup(self, name)
        if isinstance(found, jg.JavaClass):
            self.__dict__[name] = found
        return found

    def class_getattr(self, name):
        found = class_lookup(self, name)
        if isinstance(found, jg.JavaMember):  # a static method (a field would be its value now)
            self.__dict__[name] = found
        return found

    view_getattr._cdc_replay_memo = class_getattr._cdc_replay_memo = True
    jg.JVMView.__getattr__, jg.JavaClass.__getattr__ = view_getattr, class_getattr
