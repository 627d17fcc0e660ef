"""The replay Spark app: read an archive, decode, deduplicate, order, apply DDL, and emit a
snapshot, re-encoded topics or an SCD2 history, with a manifest.

Run by `cdc-replay replay` (which calls spark-submit on this file) or by Airflow's
SparkSubmitOperator with the same arguments. `run()` is the driver: it validates, takes the
output's lease, and runs the stages of spark_apps/stages/ in order over one run context, each
handing the next a small result (docs/architecture.md); then the output and the commit. Only
small aggregates reach the driver: per-partition watermarks, per-table counts, the DDL
statements, object lists.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import sys
import time
import uuid

if __package__ in (None, ""):  # run as a file by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # pyspark from the installed package, where its compiled bytecode is cached, not from
    # spark-submit's copy in pyspark.zip (spark_apps/pyspark_path.py)
    from spark_apps.pyspark_path import prefer_installed

    prefer_installed()

from spark_apps import manifest as manifest_mod  # noqa: E402
from spark_apps import kafka_io, masking, spark_compat, storage  # noqa: E402
from spark_apps import contract  # noqa: E402
from cdc_codecs import parse_option_pairs  # noqa: E402
from spark_apps.options import ReplayArgs, parser  # noqa: E402,F401  (parser: tests build args with it)
from spark_apps.stages import base as base_stage  # noqa: E402
from spark_apps.stages import decode as decode_stage  # noqa: E402
from spark_apps.stages import engine as engine_stage  # noqa: E402
from spark_apps.stages import output as output_stage  # noqa: E402
from spark_apps.stages import summary as summary_stage  # noqa: E402
from spark_apps.stages.context import ReplayError, RunContext, log  # noqa: E402,F401  (log: tests read it here)
from spark_apps.stages.decode import (  # noqa: E402,F401  (the names tests and bench/ import from here)
    DECODE_FILES_ENV, DECODE_TASK_MB, DECODE_TASK_MB_ENV, UNREADABLE_ONLY, decode_tasks)
from spark_apps.stages.decode import choose_decoder as _decoder  # noqa: E402
from spark_apps.stages.decode import decode_files as _decode_files  # noqa: E402  (tests patch it here)
from spark_apps.stages.decode import decode_objects as _decode  # noqa: E402,F401  (bench/ imports it here)
from spark_apps.stages.decode import first_pass as _first_pass  # noqa: E402,F401
from spark_apps.stages.session import (  # noqa: E402
    SHUFFLE_PARTITIONS, build_session, fit_shuffle_partitions, memoize_jvm_lookups, stop_session)
from spark_apps.stages.summary import shape_columns as _shape_columns  # noqa: E402,F401
from spark_apps.stages.validate import check, list_source, parse_args, validate  # noqa: E402,F401
from spark_apps.stages.validate import home_of as _home  # noqa: E402


def run(args: ReplayArgs, spark=None) -> dict:
    """Run one replay; returns the manifest (also written to <output>/_manifest.json)."""
    started = time.time()
    spark_compat.install()  # Spark 3.5: what the app calls as Spark 4 takes it
    memoize_jvm_lookups()  # also for a session not built by build_session (py4j calls, session.py)
    source_codec, target_protocol, target_options, base = validate(args)
    run_id = args.run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]
    source = args.source if kafka_io.is_kafka(args.source) else storage.normalize(args.source)
    output = args.output if kafka_io.is_kafka(args.output) else storage.normalize(args.output)
    home = _home(args, output)
    ctx = RunContext(args=args, run_id=run_id, started=started, source=source, output=output, home=home,
                     staging=contract.staging_prefix(home, run_id), source_codec=source_codec,
                     target_protocol=target_protocol, target_options=target_options, base=base,
                     base_export=getattr(args, "_base_export", None))
    from spark_apps import lease as lease_mod

    try:  # one run at a time per output (spark_apps.lease): taken before the output is touched
        with lease_mod.running(home, run_id, args.lease_timeout, ctx.staging):
            return _leased(ctx, spark)
    except lease_mod.LeaseHeld as e:
        raise ReplayError(str(e)) from None


def _leased(ctx: RunContext, spark) -> dict:
    """The run, once it holds its output's lease: the source listed, the session and the
    decode tasks' folder set up around the stages."""
    # a commit killed after its manifest switched to its staging area is finished first (a
    # retry with the same run id stages in the same place); what else a killed run with this
    # id staged is not part of this run
    if manifest_mod.finish_interrupted(ctx.home):
        ctx.say("finished the commit an earlier run left interrupted in %s", ctx.home)
    storage.delete_prefix(ctx.staging)
    list_source(ctx)
    decoder = _decoder(ctx.source_codec)
    ctx.say("decoder chosen: %s (%s); the decode tasks report what they ran", decoder["path"], decoder["reason"])

    own_session = spark is None
    if own_session:
        ui = ["spark.ui.enabled=true"] if ctx.args.spark_ui else []
        spark = build_session(ctx.args.master, f"cdc-replay {ctx.run_id}", ui + ctx.args.spark_conf)
    from spark_apps.progress import Progress

    ctx.spark = spark
    try:
        with Progress(spark, ctx.run_id) as progress:
            ctx.progress = progress
            ctx.files = _decode_files(spark, ctx.source)
            try:
                # shuffle partitions by the records read, unless the caller chose them
                fit = own_session and SHUFFLE_PARTITIONS not in parse_option_pairs(ctx.args.spark_conf)
                return _stages(ctx, fit_shuffles=fit)
            finally:
                if ctx.files:
                    shutil.rmtree(ctx.files, ignore_errors=True)
    finally:
        if own_session:
            stop_session(spark)


def _stages(ctx: RunContext, fit_shuffles: bool = False) -> dict:
    """The stages in order, each handing the next its result (docs/architecture.md), then the
    commit, the only step that makes the output visible. `fit_shuffles`: the shuffle partitions
    lowered to the records read (`session.fit_shuffle_partitions`)."""
    decoded = decode_stage.decode_pass(ctx)  # 2. objects -> persisted lean rows, partition stats
    if fit_shuffles:
        fit_shuffle_partitions(ctx.spark, sum(s["records"] for s in decoded.partition_stats))
    if ctx.base_export is not None:  # the archive continues the export and reaches it
        base_stage.check_position(ctx, decoded)
    # 3. the cut and every event's status, 4. the DDL history, quarantine moves, then engine v2's last changes
    tagged, hist = engine_stage.tag_and_history(ctx, decoded)
    quarantine = summary_stage.write_quarantine(ctx, hist)  # 5. quarantine objects and reasons
    written = output_stage.write_output(ctx, decoded, tagged, hist)  # 6. the output, staged
    manifest = summary_stage.build_manifest(ctx, decoded, tagged, hist, written, quarantine)
    if written.kafka is not None:
        from spark_apps import outputs

        outputs.kafka_manifest(manifest, written.kafka, ctx.home)
    ctx.progress.phase(f"committing {ctx.home}")
    # lakehouse tables are committed already, table by table; the rest of the output stays
    manifest_mod.commit(ctx.home, ctx.staging, manifest, replace=written.lake_tables is None)
    ctx.say("committed %s", ctx.home)
    return manifest


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark", "botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    args = None
    try:
        args = parse_args(masking.argv_from_environment(argv))
        manifest = run(args)
    except ReplayError as e:
        print(f"cdc-replay: error: {masking.mask_text(str(e))}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a fault during the run: one line, the trace in a file
        from spark_apps import faults

        trace = faults.record_trace(e, faults.trace_file())
        print(f"cdc-replay: error: the run failed: {masking.mask_text(faults.cause_of(e))}"
              + (f" (full trace: {trace})" if trace else ""), file=sys.stderr)
        return 1
    summary = manifest_mod.summary(manifest)
    from spark_apps.launch import SUMMARY_ENV

    if os.environ.get(SUMMARY_ENV):  # `cdc-replay replay` prints it on its stdout, apart from the log
        with open(os.environ[SUMMARY_ENV], "w", encoding="utf-8") as f:
            f.write(summary + "\n")
    else:
        print(summary)
    quarantined = manifest["counts"]["quarantined"]
    if quarantined > args.max_bad_records:
        print(f"cdc-replay: error: {quarantined} records quarantined (more than --max-bad-records "
              f"{args.max_bad_records}); see {manifest['quarantine']['location']}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
