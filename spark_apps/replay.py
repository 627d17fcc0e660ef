"""The replay Spark app: read an archive, decode, deduplicate, order, apply DDL, and emit a
snapshot, re-encoded topics or an SCD2 history, with a manifest.

Run by `cdc-replay replay ...` (which calls spark-submit on this file) or by Airflow's
SparkSubmitOperator with the same arguments. `run()` is the thin shell: validate, list,
read, transform (spark_apps.transforms), write, commit. Only small aggregates reach the
driver: per-partition watermarks, per-table counts, the DDL statements, object lists.
"""

from __future__ import annotations

import datetime as dt
import functools
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

from cdc_codecs import codec_class, get_codec, parse_option_pairs  # noqa: E402
from cdc_codecs.errors import CodecError  # noqa: E402

from spark_apps import ddl as ddl_mod  # noqa: E402
from spark_apps import gaps as gaps_mod  # noqa: E402
from spark_apps import manifest as manifest_mod  # noqa: E402
from spark_apps import kafka_io, masking, schema_files, spark_compat, storage  # noqa: E402
from spark_apps.ddl import DDLError, SchemaHistory  # noqa: E402
from spark_apps import contract  # noqa: E402
from spark_apps.contract import LAST_CUT, QUARANTINE, Kind, Status  # noqa: E402
from spark_apps.options import ReplayArgs, parser  # noqa: E402,F401  (parser: tests build args with it)
from spark_apps.paths import display  # noqa: E402

log = logging.getLogger("cdc_replay")


class ReplayError(RuntimeError):
    """A run that cannot proceed or must fail; the message says why and what to do."""


def build_session(master: str, app_name: str, conf: list[str]):
    from pyspark.sql import SparkSession

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
    return builder.getOrCreate()


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


def _starting_schemas(uri: str) -> schema_files.StartingSchemas:
    try:
        return schema_files.load(uri)
    except schema_files.SchemaFileError as e:
        raise ReplayError(f"--schema {e}") from e


def _base_manifest(args: ReplayArgs) -> dict | None:
    if not args.base_snapshot:
        return None
    try:
        base = manifest_mod.read_manifest(args.base_snapshot)
    except Exception as e:
        raise ReplayError(f"--base-snapshot {args.base_snapshot}: no readable _manifest.json "
                          f"({type(e).__name__}: {e}); it must be the output of a snapshot run") from e
    out = base["output"]
    if out["emit"] != "snapshot" or out.get("format", "kafka") != "kafka":
        raise ReplayError(f"--base-snapshot {args.base_snapshot} is a {out['emit']} ({out.get('format', 'kafka')}) "
                          "output; it must be a snapshot written as a Kafka-record archive")
    if base["cut"]["commit_ts"] is None:
        raise ReplayError(f"--base-snapshot {args.base_snapshot} has no commit-ts cut")
    return base


def _validate_lakehouse(args: ReplayArgs) -> None:
    """What the worker's environment decides (an Iceberg catalog for an s3:// output)."""
    from spark_apps import lakehouse

    try:
        if args.output_format == "iceberg":
            lakehouse.iceberg_catalog_properties(storage.normalize(args.output), parse_option_pairs(args.catalog))
    except lakehouse.LakehouseError as e:
        raise ReplayError(str(e)) from e


def check(args: ReplayArgs) -> None:
    """The request contract's rules (spark_apps.contract), as every entry point applies them:
    once per request (parse_args checks, and validate checks only what parse_args did not)."""
    if getattr(args, "_checked", False):
        return
    try:
        contract.check(args)
        contract.check_codecs(args)
    except contract.RequestError as e:
        raise ReplayError(e.message) from None
    args._checked = True


def parse_args(argv: list[str]) -> ReplayArgs:
    """The app's arguments, parsed and checked before any Spark starts (ReplayError)."""
    try:
        args = contract.parse(argv)
    except contract.RequestError as e:
        raise ReplayError(e.message) from None
    check(args)
    return args


def validate(args: ReplayArgs) -> tuple:
    """Check everything that can be checked before Spark starts; returns (source codec,
    target protocol, target options, base manifest or None)."""
    check(args)
    try:  # S3 reads of this process; Spark tasks get the same settings (archive_io)
        storage.configure(args.read_settings())
    except ValueError as e:
        raise ReplayError(str(e) if str(e).startswith("--") else f"--s3-read-chunk-size/--s3-max-attempts: {e}") from None
    source_codec = get_codec(args.protocol, parse_option_pairs(args.protocol_option))
    target_protocol = args.target_protocol or args.protocol
    target_options = parse_option_pairs(args.target_option)
    if args.output_format in ("delta", "iceberg"):
        _validate_lakehouse(args)
    # then what needs the network: one quick request per S3 location, before Spark starts
    for option, uri in (("--source", args.source), ("--output", args.output), ("--base-snapshot", args.base_snapshot),
                        ("--schema", args.schema), ("--manifest-uri", args.manifest_uri)):
        if uri and not kafka_io.is_kafka(uri):
            try:
                storage.check_bucket(storage.normalize(uri), option)
            except storage.AccessError as e:
                raise ReplayError(str(e)) from None
    _check_kafka_access(args)
    _check_output_writable(args)
    if args.output_format in ("delta", "iceberg") and args.emit == "snapshot" and args.since is not None:
        _lake_window(args)
    base = _base_manifest(args)
    if base is not None:
        base_cut = base["cut"]["commit_ts"]
        if args.since is not None and args.since != base_cut:
            raise ReplayError(f"--since {args.since} differs from the base snapshot's cut {base_cut}: the window "
                              "must start where the base snapshot ends")
        args.since = base_cut
        if args.upper is not None and args.upper <= args.since:
            raise ReplayError(f"the window is empty: --since {args.since} is not below --until/--as-of {args.upper}")
    if args.schema:
        starting = _starting_schemas(args.schema)
        try:
            SchemaHistory(starting.initial_sql())
        except DDLError as e:
            raise ReplayError(f"--schema {args.schema}: {e}") from e
    return source_codec, target_protocol, target_options, base


def _check_output_writable(args: ReplayArgs) -> None:
    """Before Spark: the output's home can be written (a probe object created and deleted:
    spark_apps.faults) and no other run holds its lease (spark_apps.lease)."""
    from spark_apps import faults, lease as lease_mod

    try:
        timeout = lease_mod.timeout_seconds(args.lease_timeout)
    except ValueError as e:
        raise ReplayError(f"--lease-timeout: {e}") from None
    if kafka_io.is_kafka(args.output) and not args.manifest_uri:
        return  # the contract refuses it
    home = _home(args, args.output if kafka_io.is_kafka(args.output) else storage.normalize(args.output))
    try:
        faults.probe_output(home, "--manifest-uri" if kafka_io.is_kafka(args.output) else "--output")
        lease_mod.check_free(home, timeout)
    except (storage.AccessError, lease_mod.LeaseHeld) as e:
        raise ReplayError(str(e)) from None


def _lake_window(args: ReplayArgs) -> None:
    """A Delta/Iceberg snapshot of a window is merged into the tables, which hold the state at
    --since: no --base-snapshot. The table schemas at --since come from the output's last
    manifest, whose cut must be --since (`--since last`: that cut, when every table it wrote is
    still at it). Sets args.since (None: no table yet, a full run) and args.lake_schemas."""
    from spark_apps import lakehouse

    output = storage.normalize(args.output)
    try:
        previous = manifest_mod.read_manifest(output)
    except Exception:  # no earlier run at this output
        previous = None
    tables = [t for t in ((previous or {}).get("output", {}).get("lakehouse") or {}).values() if "source_table" in t]
    if args.since == LAST_CUT:
        if previous is None or not tables:
            log.info("--since last: no tables at %s yet; replaying in full", output)
            args.since = None
            return
        try:
            target = lakehouse.Target(args.output_format, output, args.target_table, parse_option_pairs(args.catalog))
            cuts = {target.key(t["source_database"], t["source_table"]): (target.last_commit(t["source_database"], t["source_table"]) or {}).get("cut_commit_ts")
                    for t in tables}
        except lakehouse.LakehouseError as e:
            raise ReplayError(str(e)) from e
        distinct = {c for c in cuts.values()}
        if len(distinct) != 1 or None in distinct:
            raise ReplayError(f"--since last: the tables at {output} are not at one cut ({cuts}); give --since")
        args.since = int(distinct.pop())
    last_cut = None if previous is None else previous.get("cut", {}).get("commit_ts")
    if last_cut is None or last_cut < args.since:
        raise ReplayError(f"--since {args.since}: the tables at {output} must be at that cut or later, so that no "
                          f"change is missed (the last run there committed cut {last_cut or 'none'})")
    if last_cut > args.since:  # changes up to its cut are in the tables already: merging them again is void
        log.info("--since %s: the tables at %s are at cut %s already; the window starts there", args.since, output,
                 last_cut)
        args.since = last_cut
    args.lake_schemas = list(previous.get("schemas", []))


def _check_kafka_access(args: ReplayArgs) -> None:
    """The cluster's security settings ($CDC_REPLAY_KAFKA_CONFIG) and one request per kafka://
    location before Spark starts (the URI and offset rules are the contract's, checked earlier)."""
    uris = {u for u in (args.source, args.output) if kafka_io.is_kafka(u)}
    if not uris:
        return
    try:
        config = kafka_io.client_config()
        for uri in uris:
            kafka_io.check_access(kafka_io.parse_uri(uri, topics_required=uri == args.source)[0], config)
    except (kafka_io.KafkaUriError, kafka_io.KafkaAccessError) as e:
        raise ReplayError(str(e)) from e


def _home(args: ReplayArgs, output: str) -> str:
    """Where the manifest, quarantine and staging go: the output, or for a Kafka output --manifest-uri."""
    return storage.normalize(args.manifest_uri) if kafka_io.is_kafka(output) else output


def _plan_layout(args: ReplayArgs, source: str):
    """The source's layout plan (spark_apps.layouts): what is read, how, and what was found."""
    from spark_apps import layouts

    try:
        return layouts.plan(source, args.layout, parse_option_pairs(args.layout_option), args.protocol,
                            parse_option_pairs(args.protocol_option))
    except (layouts.LayoutError, CodecError) as e:
        raise ReplayError(str(e)) from e


def _decoder(codec) -> dict:
    """Which decoder the driver chooses for the executors (the compiled one, or the Python
    codec and why); whether it loads there only the decode tasks can tell (manifest.decoder_observed)."""
    from spark_apps import native_decode

    try:
        path, reason = native_decode.choose(codec.name, codec.config)
    except (ValueError, RuntimeError) as e:  # a bad CDC_REPLAY_DECODER, or =native without the module
        raise ReplayError(f"{native_decode.ENV}: {e}") from None
    return {"path": path, "reason": reason}


DECODE_TASK_MB_ENV = "CDC_REPLAY_DECODE_TASK_MB"
# the decoded columns only records that could not be read or decoded fill (schema.py)
UNREADABLE_ONLY = ("line", "error", "error_stage", "raw_key", "raw_value", "raw_line")
DECODE_FILES_ENV = "CDC_REPLAY_DECODE_FILES"  # "off": Spark persists the decode in local mode too
DECODE_TASK_MB = 64
# protocols whose events carry the producer's position where they have no commit ts
# (docs/semantics.md): their order needs no running event time
POSITIONED_PROTOCOLS = ("canal-protobuf", "oceanbase-avro")


def decode_tasks(sizes: list[int], parallelism: int) -> int:
    """How many decode tasks read objects of these stored `sizes`: two per core, and more for
    a large archive, about `CDC_REPLAY_DECODE_TASK_MB` (default 64) stored MB each, so a
    task's decoded rows, its share of every later map-side sort and its Python worker's
    memory stay the same size whatever the archive's (with a fixed count, a 16M-event archive
    gave each of 4 tasks 5M records: sorts spilled and workers grew). Never more than the
    objects: an object is read by one task."""
    import os

    task_mb = float(os.environ.get(DECODE_TASK_MB_ENV) or DECODE_TASK_MB)
    by_size = -(-sum(sizes) // max(1, int(task_mb * (1 << 20))))
    return max(1, min(len(sizes), max(parallelism * 2, by_size)))


def _decode(spark, objects, protocol: str, options: dict, counter=None, lean: bool = False,
            files: str | None = None):
    """Objects (ObjectInfo: Kafka-record objects, or layout plan Items with their params) ->
    decoded rows, each object read and decoded in a Spark task; `counter` (an accumulator)
    counts the records decoded, for the progress lines. `lean`: the lean rows and `aux` rows
    of spark_apps/lean_decode.py; `files`: the lean rows go to Parquet files in this folder
    instead (`lean_decode.written_to`), only the `aux` rows come back."""
    from spark_apps.archive_io import decode_objects_fn
    from spark_apps.lean_decode import LEAN_STRUCT, leaned, written_to
    from spark_apps.local_data import balanced_slices, local_frame
    from spark_apps.progress import counting
    from spark_apps.schema import DECODED_STRUCT

    parallelism = decode_tasks([o.size for o in objects], spark.sparkContext.defaultParallelism)
    # slices of about equal bytes, the heaviest first, each biggest object first; built in the
    # JVM (local_data: no Python worker of its own)
    rows = [(o.uri, o.size, getattr(o, "params", None)) for o in objects]
    objects_df = local_frame(spark, rows, "uri string, size long, params string",
                             balanced_slices([o.size for o in objects], parallelism))
    decode = counting(decode_objects_fn(protocol, options), counter)
    if files:
        return objects_df.mapInArrow(written_to(leaned(decode), files), LEAN_STRUCT)
    return (objects_df.mapInArrow(leaned(decode), LEAN_STRUCT) if lean
            else objects_df.mapInArrow(decode, DECODED_STRUCT))


def _first_pass(decoded, files: str | None = None):
    """(events, partition statistics, schema dictionary, DDL events, the tasks' decoder
    reports) of the persisted lean
    `decoded` rows (spark_apps/lean_decode.py): one action that collects only the decode tasks'
    `aux` rows (the statistics, dictionary, offset runs and DDL events each task gathered while
    decoding: no aggregate, no shuffle), plus one for the distinct offsets of partitions the
    runs do not prove (gaps.count_offsets). With `files` the tasks wrote their rows there
    (`_decode(files=...)`): `decoded` holds only the `aux` rows, and the events are read back
    from the files. ValueError on an id collision."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.lean_decode import EVENTS_STRUCT, merge_stats

    if files:
        auxes = [r["aux"] for r in _collected(decoded.select("aux"))]
        events = decoded.sparkSession.read.schema(EVENTS_STRUCT).parquet(files)
    else:
        events = decoded.where(F.col("aux").isNull()).drop("aux")
        auxes = [r["aux"] for r in _collected(decoded.where(F.col("aux").isNotNull()).select("aux"))]
    merged: dict[tuple, dict] = {}
    for a in auxes:
        for s in a["stats"]:
            key = (s.pop("topic"), s.pop("partition"))
            merged[key] = s if key not in merged else merge_stats(merged[key], s)
    # sorted here, not by Spark
    partition_stats = sorted(({"topic": t, "partition": p, **s} for (t, p), s in merged.items()),
                             key=lambda s: (s["topic"], s["partition"] is not None, s["partition"] or 0))
    schema_dictionary = T.schema_dictionary(e for a in auxes for e in a["entries"])
    ddl = [e for a in auxes for e in a["ddl_events"]]
    decoders = [d for a in auxes for d in a["decoders"]]
    # lines that are not records (stage "archive") may still name their place: not counted
    records = events.where(F.col("topic").isNotNull() & ~F.coalesce(F.col("error_stage") == "archive", F.lit(False)))
    gaps_mod.count_offsets(records, partition_stats, [r for a in auxes for r in a["runs"]])
    return events, partition_stats, schema_dictionary, ddl, decoders


def _decode_files(spark, source: str) -> str | None:
    """A fresh folder for the decode tasks' Parquet files (`_decode(files=...)`) when every task
    runs where the driver runs (local mode) and the source is an archive; None otherwise: on a
    cluster an executor's disk is not another's, so Spark persists the rows itself
    (DISK_ONLY), and so it does for Kafka sources or with CDC_REPLAY_DECODE_FILES=off."""
    import tempfile

    if (kafka_io.is_kafka(source) or not spark.sparkContext.master.startswith("local")
            or os.environ.get(DECODE_FILES_ENV, "").lower() in ("off", "0", "false", "no")):
        return None
    local_dir = (spark.sparkContext.getConf().get("spark.local.dir") or "").split(",")[0] or None
    return tempfile.mkdtemp(prefix="cdc-replay-decoded-", dir=local_dir)


def _collected(df) -> list[dict]:
    """A small result on the driver as plain dicts (structs as dicts, arrays as lists), through
    Arrow: many times cheaper than pickled Rows for the thousands of nested values of the
    decode tasks' `aux` rows or the summary's groups."""
    return spark_compat.collect_rows(df)  # DataFrame.toArrow on Spark 4, its 3.5 equivalent


def run(args: ReplayArgs, spark=None) -> dict:
    """Run one replay; returns the manifest (also written to <output>/_manifest.json)."""
    started = time.time()
    spark_compat.install()  # Spark 3.5: what the app calls as Spark 4 takes it
    source_codec, target_protocol, target_options, base = validate(args)
    run_id = args.run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]
    source = args.source if kafka_io.is_kafka(args.source) else storage.normalize(args.source)
    output = args.output if kafka_io.is_kafka(args.output) else storage.normalize(args.output)
    staging = contract.staging_prefix(_home(args, output), run_id)
    from spark_apps import faults, lease as lease_mod

    try:  # one run at a time per output (spark_apps.lease): taken before the output is touched
        lease = lease_mod.Lease(_home(args, output), run_id, lease_mod.timeout_seconds(args.lease_timeout)).acquire()
    except lease_mod.LeaseHeld as e:
        raise ReplayError(str(e)) from None
    lease_mod.hold(lease)
    try:
        return _leased(args, spark, started, run_id, source, output, staging, source_codec, target_protocol,
                       target_options, base)
    except BaseException:
        # what this run staged goes, unless its commit switched to it (the next run finishes it)
        faults.clean_staging(_home(args, output), staging)
        raise
    finally:
        lease.release()
        lease_mod.hold(None)


def _leased(args, spark, started, run_id, source, output, staging, source_codec, target_protocol, target_options,
            base) -> dict:
    """The run, once it holds its output's lease."""
    # a commit killed after its manifest switched to its staging area is finished first (a
    # retry with the same run id stages in the same place); what else a killed run with this
    # id staged is not part of this run
    if manifest_mod.finish_interrupted(_home(args, output)):
        log.info("[replay %s] finished the commit an earlier run left interrupted in %s", run_id, _home(args, output))
    storage.delete_prefix(staging)
    layout_plan = None
    if kafka_io.is_kafka(source):
        objects = []
        log.info("[replay %s] Kafka %s from %s to %s; protocol %s", run_id, source, args.starting_offsets,
                 args.ending_offsets, args.protocol)
    else:
        layout_plan = _plan_layout(args, source)
        objects = list(layout_plan.items)
        if not objects:
            raise ReplayError(f"no archive objects to read under {source} ({layout_plan.found})")
        if layout_plan.not_visible:
            log.warning("[replay %s] %d objects are not yet visible and are left for a later run (e.g. %s)", run_id,
                        len(layout_plan.not_visible), layout_plan.not_visible[0])
        if not args.schema and layout_plan.schema_uri:  # the layout carries table schemas (storage sink)
            args.schema = layout_plan.schema_uri
        log.info("[replay %s] %d objects, %.1f MB under %s; protocol %s; %s", run_id, len(objects),
                 sum(o.size for o in objects) / 1e6, source, args.protocol, layout_plan.found)
    decoder = _decoder(source_codec)
    log.info("[replay %s] decoder chosen: %s (%s); the decode tasks report what they ran", run_id, decoder["path"],
             decoder["reason"])

    own_session = spark is None
    if own_session:
        ui = ["spark.ui.enabled=true"] if args.spark_ui else []
        spark = build_session(args.master, f"cdc-replay {run_id}", ui + args.spark_conf)
    from spark_apps.progress import Progress

    try:
        with Progress(spark, run_id) as progress:
            return _run(spark, args, run_id, started, source, output, staging, objects, source_codec,
                        target_protocol, target_options, base, progress, layout_plan=layout_plan)
    finally:
        if own_session:
            stop_session(spark)


def _run(spark, args, run_id, started, source, output, staging, objects, source_codec, target_protocol,
         target_options, base, progress, layout_plan=None) -> dict:
    home = _home(args, output)
    files = _decode_files(spark, source)
    try:
        return _replay(spark, args, run_id, started, source, output, staging, objects, source_codec,
                       target_protocol, target_options, base, progress, layout_plan, home, files)
    finally:
        if files:
            shutil.rmtree(files, ignore_errors=True)


def _release(decoded, files: str | None) -> None:
    """Drop what Spark persisted of the decode (the files are removed when the run ends)."""
    if not files:
        decoded.unpersist()


def _replay(spark, args, run_id, started, source, output, staging, objects, source_codec, target_protocol,
            target_options, base, progress, layout_plan, home, files) -> dict:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from spark_apps import outputs
    from spark_apps import transforms as T
    from spark_apps.archive_io import write_quarantine_fn
    from spark_apps.schema import DECODED_FIELD_NAMES, WRITTEN_STRUCT

    progress.phase(f"reading and decoding {len(objects)} objects" if objects else f"reading {source}")
    # intermediates reused by several actions are kept on local disk: their nested rows are
    # large, and disk keeps the heap free for sorting (measured: memory caching ran out of heap)
    if kafka_io.is_kafka(source):
        decoded = kafka_io.read_decoded(spark, source, args.starting_offsets, args.ending_offsets, args.protocol,
                                        parse_option_pairs(args.protocol_option), kafka_io.client_config(),
                                        lean=True)
    else:
        decoded = _decode(spark, objects, args.protocol, parse_option_pairs(args.protocol_option),
                          progress.records, lean=True, files=files)
    # the decode tasks write lean rows (spark_apps/lean_decode.py: each image's column list id,
    # values and labels) and end with one `aux` row each: the column lists they saw (the lean
    # rows' dictionary) and their runs of offsets (the distinct offset count without a shuffle).
    # In local mode the rows go to Parquet files (read back by the later jobs); elsewhere Spark
    # persists them
    decoded_columns = list(DECODED_FIELD_NAMES)
    if files:
        log.info("[replay %s] decoded rows: Parquet files in %s (local mode)", run_id, files)
    else:
        decoded = decoded.persist(StorageLevel.DISK_ONLY)
    # 1. per source partition: records, commit ts range, highest watermark -> the cut
    try:
        events, partition_stats, schema_dictionary, ddl_events, decoder_reports = _first_pass(decoded, files)
    except ValueError as e:
        _release(decoded, files)
        raise ReplayError(f"lean rows: {e}") from None
    ddl_statements = {(d["database"], d["table"], d["ddl_query"]) for d in ddl_events if d["topic"] is not None}
    # parsed while the next Spark jobs run, about in the order they will be applied
    ddl_mod.parse_ahead(d["ddl_query"] for d in sorted(
        ddl_events, key=lambda d: (d["commit_ts"] is None, d["commit_ts"] or 0)))
    log.info("[replay %s] decoded %s records from %d partitions", run_id,
             f"{sum(s['records'] for s in partition_stats):,}", len(partition_stats))
    decoder = manifest_mod.decoder_observed(_decoder(source_codec), decoder_reports)
    for line in manifest_mod.decoder_lines(decoder):
        log.info("[replay %s] decoder on the executors: %s", run_id, line)
    if manifest_mod.decoder_fell_back(decoder):
        log.warning("[replay %s] %s", run_id, manifest_mod.decoder_fell_back(decoder))
    try:
        cut = manifest_mod.compute_cut(partition_stats, args.upper)
    except manifest_mod.CutError as e:
        raise ReplayError(str(e)) from e
    if args.since is not None and cut["kind"] != "commit_ts":
        raise ReplayError("--since needs commit ts, and this archive carries none")
    log.info("[replay %s] cut: %s", run_id, cut["description"])
    offset_gaps, gap_count = gaps_mod.gaps(events, partition_stats, layout=layout_plan)
    if gap_count:
        shown = ", ".join(f"{display(g['topic'])}/{g['partition']} offsets {g['from']}..{g['to']}" for g in offset_gaps[:5])
        log.warning("[replay %s] %d holes in the source offsets: %s", run_id, gap_count, shown)
        if args.require_contiguous:
            _release(decoded, files)
            raise ReplayError(f"--require-contiguous: the archive misses offsets ({gap_count} holes: {shown}"
                              + (" ..." if gap_count > 5 else "") + "); a missing or truncated archive object?")

    # 2. statuses: quarantined / filtered / duplicate / pending / applied
    progress.phase("deduplicating and cutting")
    needs_inference = any(s["max_commit_ts"] is not None for s in partition_stats) and any(
        s["rows_without_commit_ts"] for s in partition_stats)
    # the duplicate check is a narrow shuffle (identity and place of each event) that finds the
    # later copies, few; every event is then told apart from them by a join, so no event travels
    # through a shuffle whole and nothing but `decoded` is persisted (transforms.duplicate_places).
    # Rows stay lean; the images are rebuilt from the dictionary (one literal in the plan) where
    # the output needs them
    # no commit ts and no producer position anywhere (Canal flat JSON, canal-json without the
    # TiDB extension): the partition offset orders, through a running event time
    needs_event_time = (not any(s["max_commit_ts"] is not None for s in partition_stats)
                        and args.protocol not in POSITIONED_PROTOCOLS)
    ready = T.partition_event_time(T.infer_commit_ts(events, needs_inference), needs_event_time)
    if needs_inference or needs_event_time:  # a window per source partition: computed once
        ready = ready.persist(StorageLevel.DISK_ONLY)
    duplicates = T.duplicate_places(ready, tables=args.table_patterns()).persist(StorageLevel.DISK_ONLY)
    duplicate_count = duplicates.count()
    tagged = T.tag_status(ready, tables=args.table_patterns(), cut=cut["point"], since=args.since,
                          duplicates=duplicates, dedupe=duplicate_count > 0,
                          broadcast_duplicates=duplicate_count <= T.DUPLICATES_BROADCAST_MAX)
    dictionary = T.plan_dictionary(schema_dictionary, T.spark_lower(spark), spark=spark)
    log.info("[replay %s] schema dictionary: %d column lists (%s)", run_id, len(schema_dictionary),
             "a literal in the plan" if dictionary.frame is None else "a broadcast relation")

    # 3. DDL history, applied on the driver in timeline order (DDL events are few)
    quarantine_base = storage.join(staging, QUARANTINE)
    starting = _starting_schemas(args.schema) if args.schema else None
    initial = "\n".join([starting.initial_sql() if starting else "",
                         ";\n".join(base.get("schemas", [])) if base else "",
                         ";\n".join(getattr(args, "lake_schemas", None) or [])])
    history = SchemaHistory(initial)
    # one action over `tagged`: the counts, the applied DDL events and the column sets of the
    # applied rows (only when a schema can be known to compare them with)
    # counts also per commit-time bucket: the manifest's timeline (the monitoring page's chart)
    frame = manifest_mod.timeline_frame(partition_stats, args.since, args.upper, T.TIMELINE_BUCKETS)
    summary = _summarise(tagged, shapes=history.known or bool(ddl_statements),
                         bucket=T.commit_bucket(*frame) if frame else None, dictionary=schema_dictionary)
    # tables no DDL (nor --schema) describes get the schema their row events carry when a DDL
    # needs their columns (ddl.SchemaHistory.use_stream_schemas)
    history.use_stream_schemas(_stream_shapes(summary["shapes"], schema_dictionary))
    ddl_log, ddl_failures = _apply_ddl(history, summary["ddl"], args.protocol)
    for inferred in history.inferred:
        log.info("[replay %s] schema of %s taken from the stream: %s", run_id, inferred["table"], inferred["from"])
    if ddl_failures:
        manifest_mod.write_ddl_quarantine(quarantine_base, ddl_failures)
    conflicts = _schema_conflicts(history, summary["shapes"]) if history.known else []
    if starting and starting.versions:
        log.info("[replay %s] --schema: %d objects, %d TiCDC storage-sink table versions cross-checked",
                 run_id, starting.sources, len(starting.versions))
        conflicts += schema_files.version_conflicts(history, starting.versions)
    for conflict in conflicts[:5]:
        log.warning("[replay %s] schema conflict: %s", run_id, conflict)
    counts = summary["counts"]
    if args.emit != "topics":  # a topic carries every applied event, whatever its table's fate
        tagged, counts = _quarantine_missing_tables(spark, tagged, counts, history,
                                                    T.commit_bucket(*frame) if frame else None,
                                                    summary["row_ranges"])
    if args.require_schema:
        tagged, counts = _quarantine_unknown_tables(tagged, counts, history)
    lean = tagged
    tagged = T.full_images(lean, dictionary, decoded_columns)

    # 4. counts, and the quarantine (records that could not be read or decoded) next to the output
    # laid out by object and line, so a rerun writes byte-identical quarantine objects
    # (no Spark job when the counts say nothing is quarantined)
    quarantine_objects = [r.asDict() for r in tagged.where(F.col("status") == Status.QUARANTINED)
                          .repartition(spark.sparkContext.defaultParallelism, "object")
                          .sortWithinPartitions("object", "line", "event_index", "topic", "partition", "offset")
                          .mapInArrow(write_quarantine_fn(args.protocol, quarantine_base), WRITTEN_STRUCT).collect()
                          ] if any(c["status"] == Status.QUARANTINED and c["events"] for c in counts) else []
    reasons = _quarantine_reasons(summary["reasons"], counts, ddl_failures)

    # 5. the output
    progress.phase(f"writing the {args.emit} ({args.output_format})")
    applied = tagged.where(F.col("status") == Status.APPLIED)
    try:
        base_rows = outputs.base_rows(spark, base, args, tagged.columns, _decode) if base else None
    except outputs.OutputError as e:
        raise ReplayError(str(e)) from None
    target = codec_class(target_protocol)
    partitions = args.target_partitions or max(1, max((s["partition"] for s in partition_stats), default=0) + 1)
    output_plan = outputs.OutputPlan(spark, args, history, cut, target, target_protocol, target_options, partitions, staging)
    # old values some protocols leave out (Avro), taken from the key's previous change
    # identical rows of a table without a key are counted (transforms.latest_per_key)
    output_plan.multiset = bool(summary["keyless"]) or any(
        i.key_aliases == () for i in history.intervals())
    output_plan.fill_images = any(s["updates_without_before"] or s["rows_without_commit_ts"] for s in partition_stats)
    output_plan.run = {"run_id": run_id, "source": source, "output": output, "protocol": args.protocol}
    if kafka_io.is_kafka(output):
        output_plan.kafka_target(home, outputs.fingerprint(args, partition_stats, cut))
    try:
        if args.emit == "topics":
            written, table_rows = output_plan.topics(applied), None
        else:
            rows = applied.where(F.col("kind") == Kind.ROW)
            if base_rows is not None:
                rows = rows.unionByName(base_rows)
            elif args.emit == "snapshot":  # lean up to the last change per key, rebuilt after it
                # what only a record that could not be read carries is not carried through the
                # last change per key (every column there is sorted and aggregated)
                rows = lean.where((F.col("status") == Status.APPLIED) & (F.col("kind") == Kind.ROW)).drop(
                    *UNREADABLE_ONLY)
                output_plan.dictionary = dictionary
            written, table_rows = (output_plan.snapshot(rows) if args.emit == "snapshot" else output_plan.history(rows))
    except outputs.OutputError as e:
        raise ReplayError(str(e)) from e
    except Exception as e:  # an event the target protocol cannot carry fails the run, naming it
        text = str(e)
        if "UNENCODABLE " not in text:
            raise
        reason = text[text.index("UNENCODABLE ") + len("UNENCODABLE "):].splitlines()[0]
        raise ReplayError(f"the output was not written: {reason}. Choose a target protocol that carries it "
                          "(docs/protocols/README.md)") from None
    finally:
        for persisted in (duplicates, ready):
            persisted.unpersist()
        _release(decoded, files)

    manifest = manifest_mod.build(
        run_id=run_id, args=args, source=source, output=output, started=started,
        objects=objects, partition_stats=partition_stats, cut=cut, counts=counts,
        ddl_log=ddl_log, ddl_failures=ddl_failures, written=written,
        quarantine_objects=quarantine_objects, source_options=dict(source_codec.config),
        target_protocol=target_protocol, target_options=dict(get_codec(target_protocol, target_options).config),
        table_rows=table_rows, schemas=history.create_statements(),
        window={"since": args.since, "until": args.upper, "base_snapshot": args.base_snapshot,
                "base_cut": base["cut"]["commit_ts"] if base else None},
        schema_conflicts=conflicts, coverage=_coverage(args, history, table_rows, base),
        inferred_schemas=history.inferred,
        gaps=(offset_gaps, gap_count),
    )
    if layout_plan is not None:
        manifest["layout"] = layout_plan.manifest()
    manifest["decoder"] = decoder
    if manifest_mod.decoder_fell_back(decoder):
        manifest["warnings"].append(manifest_mod.decoder_fell_back(decoder))
    if output_plan.lake_tables is not None:
        manifest["output"]["lakehouse"] = output_plan.lake_tables
    if output_plan.kafka is not None:
        outputs.kafka_manifest(manifest, output_plan.kafka, home)
    manifest["quarantine"]["reasons"] = reasons
    manifest["timeline"] = manifest_mod.timeline(counts, frame, T.TIMELINE_BUCKETS)
    progress.phase(f"committing {home}")
    # lakehouse tables are committed already, table by table; the rest of the output stays
    manifest_mod.commit(home, staging, manifest, replace=output_plan.lake_tables is None)
    log.info("[replay %s] committed %s", run_id, home)
    return manifest


def _quarantine_reasons(summary_reasons: list[dict], counts: list[dict], ddl_failures: list[dict]) -> list[dict]:
    """Why records were quarantined, a sample each (the monitoring page and the summary show
    them): the summary's reason classes, plus what the driver moved (--require-schema) or
    refused (DDL) after it, masked like the quarantine objects."""
    reasons = [{**r, "reason": masking.mask_text(r["reason"]),
                "sample": {**r["sample"], "error": masking.mask_text(r["sample"]["error"])}} for r in summary_reasons]
    moved = sum(c["events"] for c in counts if c["status"] == Status.QUARANTINED and c["error_stage"] == "schema")
    if moved and not any(r["stage"] == "schema" for r in reasons):
        reasons.append({"stage": "schema", "reason": "no schema is known for the table (--require-schema)",
                        "records": moved, "sample": {}})
    missing = sum(c["events"] for c in counts if c["status"] == Status.QUARANTINED and c["error_stage"] == "table")
    if missing:
        reasons.append({"stage": "table", "reason": "row events of a table that does not exist at their point in the "
                        "DDL history (dropped, truncated, renamed or not yet created)", "records": missing,
                        "sample": {}})
    if ddl_failures:
        first = ddl_failures[0]
        reasons.append({"stage": "ddl", "reason": "DDL not applied", "records": len(ddl_failures),
                        "sample": {k: first.get(k) for k in ("object", "line", "topic", "partition", "offset", "error")}})
    return reasons


def _coverage(args: ReplayArgs, history: SchemaHistory, table_rows, base) -> dict | None:
    """Whether a snapshot holds every row of its tables, or only the rows the archive
    changed: a table whose CREATE (or TRUNCATE) is not in the archive existed before it, and
    its rows the archive never touched are not known (unless a base snapshot holds them)."""
    if table_rows is None or args.emit != "snapshot":  # history and topics are changes by definition
        return None
    partial = []
    if base is None:
        for r in table_rows:
            schema = history.tables.get(((r["database"] or "").lower(), (r["table"] or "").lower()))
            if schema is None or not schema.start:
                partial.append(f"{r['database']}.{r['table']}")
    return {"complete": not partial, "changed_rows_only": sorted(partial)}


SUMMARY_GROUPS_IN_MEMORY = 65536  # per task; each group's buffers are a few counters and rows


def _summarise(tagged, shapes: bool, bucket=None, dictionary: dict | None = None) -> dict:
    """The small aggregates the run needs from the tagged events, from one Spark action:

    * `counts`: events, lowest and highest commit ts per (status, kind, database, table,
      error_stage, bucket), `bucket` being the commit-time bucket of the timeline (a column,
      transforms.commit_bucket; null without one);
    * `ddl`: the applied DDL events, in timeline order (DDL events are few);
    * `keyless`: the (database, table) of applied row events whose message names no key
      columns (a table without a key, or one the messages do not say: the DDL history may);
    * `shapes` (when `shapes`): the distinct column sets (lower-case name, type) of the applied
      rows' new images per table, with the first and last timeline point and events of each.

    One group-by whose key also holds the row's column set (applied rows only; null for every
    other event, so the groups stay few); the applied DDL events are collected per group. The
    column set is the image's names and types as they come (field extraction, no per-row
    lambda); lower-casing, sorting and merging the sets is done here on the driver. Collecting
    the DDL (a typed aggregate) lets Spark aggregate in a hash map (ObjectHashAggregate) instead
    of sorting every event by the group key, which the array and struct buffers (`first`,
    `last`, the sample) would force (SortAggregate): docs/engine.md, Part 2."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T

    applied = F.col("status") == Status.APPLIED
    ddl = F.when(applied & (F.col("kind") == Kind.DDL), F.struct(
        "ddl_query", "commit_ts", "timeline", "object", "line", "topic", "partition", "offset", "event_index"))
    # the column set: the new image's schema id (lean rows: names and types are in `dictionary`)
    lean = dictionary is not None
    shape = F.lit(None) if not shapes else F.when(
        applied & (F.col("kind") == Kind.ROW) & F.col("after_schema" if lean else "after").isNotNull(),
        F.col("after_schema") if lean else
        F.struct(F.col("after.name").alias("names"), F.col("after.mysql_type").alias("types")))
    bucket = F.lit(None).cast("int") if bucket is None else bucket
    # quarantined records: their reason class is a key, their first record (by place) a sample
    quarantined = F.col("status") == Status.QUARANTINED
    reason = F.when(quarantined, T.reason_class(F.col("error")))
    sample = F.min_by(F.when(quarantined, F.struct("object", "line", "topic", "partition", "offset", "error")),
                      F.when(quarantined, F.struct("object", "line", "offset")))
    aggregated = tagged.groupBy("status", "kind", "database", "table", "error_stage", bucket.alias("_bucket"),
                                shape.alias("_shape"), reason.alias("_reason")).agg(
        F.count(F.lit(1)).alias("events"), F.collect_list(ddl).alias("_ddl"),
        F.min("commit_ts").alias("min_commit_ts"), F.max("commit_ts").alias("max_commit_ts"),
        F.min("timeline").alias("first"), F.max("timeline").alias("last"), sample.alias("_sample"),
        F.count(F.when(applied & (F.col("kind") == Kind.ROW)
                       & (F.size(F.coalesce("key_columns", F.array().cast("array<string>"))) == 0), 1)
                ).alias("_keyless"),
    )
    # the groups (tables x timeline buckets x column sets) can be thousands per task: past
    # this many (Spark's default is 128) the hash map would fall back to sorting the events;
    # a value given with --spark-conf is kept
    conf = tagged.sparkSession.conf
    threshold = "spark.sql.objectHashAggregate.sortBased.fallbackThreshold"
    given = conf.get(threshold, None) is not None
    if not given:
        conf.set(threshold, str(SUMMARY_GROUPS_IN_MEMORY))
    try:
        groups = _collected(aggregated)
    finally:
        if not given:
            conf.unset(threshold)

    def lowest(a, b):
        return b if a is None else a if b is None else min(a, b)

    def highest(a, b):
        return b if a is None else a if b is None else max(a, b)

    counts, by_shape, ddl_rows, reasons = {}, {}, [], {}
    keyless = {(g["database"], g["table"]) for g in groups if g["_keyless"]}
    # per table, the lowest and highest point of its applied row events
    row_ranges: dict = {}
    for g in groups:
        if g["status"] == Status.APPLIED and g["kind"] == Kind.ROW and g["first"] is not None:
            key = ((g["database"] or "").lower(), (g["table"] or "").lower())
            lo, hi = row_ranges.get(key, (g["first"], g["last"]))
            row_ranges[key] = (min(lo, g["first"]), max(hi, g["last"]))
    for g in groups:
        if g["status"] == Status.QUARANTINED and g["_sample"] is not None:
            r = reasons.setdefault((g["error_stage"], g["_reason"]), {"stage": g["error_stage"], "reason": g["_reason"],
                                                                     "records": 0, "sample": g["_sample"]})
            r["records"] += g["events"]
            place = g["_sample"]
            if (place["object"] or "", place["line"] or 0, place["offset"] or 0) < (
                    r["sample"]["object"] or "", r["sample"]["line"] or 0, r["sample"]["offset"] or 0):
                r["sample"] = place
        key = (g["status"], g["kind"], g["database"], g["table"], g["error_stage"], g["_bucket"])
        c = counts.setdefault(key, {"status": key[0], "kind": key[1], "database": key[2], "table": key[3],
                                    "error_stage": key[4], "bucket": key[5], "events": 0, "min_commit_ts": None,
                                    "max_commit_ts": None})
        c["events"] += g["events"]
        c["min_commit_ts"] = lowest(c["min_commit_ts"], g["min_commit_ts"])
        c["max_commit_ts"] = highest(c["max_commit_ts"], g["max_commit_ts"])
        ddl_rows += [{**d, "database": g["database"], "table": g["table"]} for d in g["_ddl"]]
        if g["_shape"] is not None:
            columns = _shape_of(*dictionary[g["_shape"]][:2]) if lean else _shape_columns(g["_shape"])
            skey = (g["database"], g["table"], tuple((col["name"], col["type"]) for col in columns))
            s = by_shape.setdefault(skey, {"database": g["database"], "table": g["table"], "columns": columns,
                                           "first": g["first"], "last": g["last"], "events": 0,
                                           "schema": g["_shape"] if lean else None})
            if lean and g["first"] < s["first"]:  # the column list (order, flags) of its first event
                s["schema"] = g["_shape"]
            s["first"], s["last"] = min(s["first"], g["first"]), max(s["last"], g["last"])
            s["events"] += g["events"]

    def nulls_first(value):
        return (value is not None, value if value is not None else 0)

    ddl_rows.sort(key=lambda r: (list(r["timeline"]), nulls_first(r["partition"]), nulls_first(r["offset"]),
                                 nulls_first(r["event_index"])))
    listed = sorted(reasons.values(), key=lambda r: (-r["records"], r["stage"] or "", r["reason"] or ""))
    return {"counts": list(counts.values()), "ddl": ddl_rows, "shapes": list(by_shape.values()),
            "reasons": listed[:T.REASONS_LISTED], "keyless": keyless, "row_ranges": row_ranges}


@functools.lru_cache(maxsize=65536)
def _shape_of(names: tuple, types: tuple) -> list:
    """`_shape_columns` of one column list of the dictionary (many summary groups share one)."""
    return _shape_columns({"names": names, "types": types})


def _shape_columns(shape) -> list:
    """An image's column set as (lower-case name, type) rows in the order Spark's `array_sort`
    of those structs gives (by name, then type; a null field first)."""

    def nulls_first(value):
        return (value is not None, value or "")

    pairs = [((n.lower() if n is not None else None), t) for n, t in zip(shape["names"], shape["types"])]
    return [_column_row(n, t) for n, t in sorted(pairs, key=lambda p: (nulls_first(p[0]), nulls_first(p[1])))]


@functools.lru_cache(maxsize=65536)
def _column_row(name: str | None, mysql_type: str | None):
    """One (name, type) row, shared by every column set that has it (thousands of sets share
    most columns; a Row is an immutable tuple)."""
    from pyspark.sql import Row

    return Row("name", "type")(name, mysql_type)


def _stream_shapes(shapes: list[dict], dictionary: dict | None) -> list[dict]:
    """`_summarise`'s column sets as `SchemaHistory.use_stream_schemas` takes them: each with
    its columns (name, type, flags) in the order of the message (the schema dictionary's
    column list of its first event)."""
    out = []
    for shape in shapes:
        entry = (dictionary or {}).get(shape.get("schema"))
        if entry is not None:
            names, types, flags = entry
            columns = list(zip(names, types, flags))
        else:
            columns = [(c["name"], c["type"], 0) for c in shape["columns"]]
        out.append({"database": shape["database"], "table": shape["table"], "columns": columns,
                    "first": list(shape["first"] or []), "last": list(shape["last"] or []), "events": shape["events"]})
    return out


def _apply_ddl(history: SchemaHistory, rows: list[dict], protocol: str) -> tuple[list, list]:
    """Apply the applied DDL events (`_summarise`'s `ddl`, in timeline order) to the history."""
    applied, failures = [], []
    for row in rows:
        try:
            outcome = history.apply(row["ddl_query"], list(row["timeline"]), row["database"])
            applied.append({"commit_ts": row["commit_ts"], "query": row["ddl_query"], "applied": outcome})
        except DDLError as e:
            failures.append({**{k: row[k] for k in ("object", "line", "topic", "partition", "offset")},
                             "protocol": protocol, "error_stage": "ddl",
                             "error": f"{protocol}: DDL not applied ({e}): {row['ddl_query']}"})
    return applied, failures


def _quarantine_unknown_tables(tagged, counts: list[dict], history: SchemaHistory):
    """--require-schema: row events of tables neither the archive's DDL nor --schema (nor a
    base snapshot) describes are quarantined instead of read with their in-band schema.
    Returns the events and the counts (`_summarise`'s) with those rows moved to quarantined."""
    from pyspark.sql import functions as F

    tables = {(c["database"], c["table"]) for c in counts if c["status"] == Status.APPLIED and c["kind"] == Kind.ROW}
    unknown = sorted(((d, t) for d, t in tables if not history.is_described(d, t or "")),
                     key=lambda k: (k[0] or "", k[1] or ""))
    if not unknown:
        return tagged, counts
    condition = F.lit(False)
    for database, table in unknown:
        condition = condition | ((F.col("database") == database) & (F.col("table") == table))
    hit = (F.col("status") == Status.APPLIED) & (F.col("kind") == Kind.ROW) & condition
    reason = F.concat(F.lit("no known schema for "), F.col("database"), F.lit("."), F.col("table"),
                      F.lit(" (no CREATE TABLE in the archive, none in --schema; --require-schema is set)"))
    tagged = (tagged.withColumn("error", F.when(hit, reason).otherwise(F.col("error")))
              .withColumn("error_stage", F.when(hit, F.lit("schema")).otherwise(F.col("error_stage")))
              .withColumn("status", F.when(hit, F.lit(Status.QUARANTINED)).otherwise(F.col("status"))))
    # the same move in the counts (a null database or table matches no condition above)
    moved = {(d, t) for d, t in unknown if d is not None and t is not None}
    merged: dict = {}
    for c in counts:
        if c["status"] == Status.APPLIED and c["kind"] == Kind.ROW and (c["database"], c["table"]) in moved:
            c = {**c, "status": Status.QUARANTINED, "error_stage": "schema"}
        key = (c["status"], c["kind"], c["database"], c["table"], c["error_stage"], c.get("bucket"))
        if key in merged:
            m = merged[key]
            m["events"] += c["events"]
            for name, pick in (("min_commit_ts", min), ("max_commit_ts", max)):
                values = [v for v in (m[name], c[name]) if v is not None]
                m[name] = pick(values) if values else None
        else:
            merged[key] = dict(c)
    return tagged, list(merged.values())


def _quarantine_missing_tables(spark, tagged, counts: list[dict], history: SchemaHistory, bucket,
                               row_ranges: dict):
    """Row events of a table that does not exist at their point (`SchemaHistory.existence`,
    `transforms.mark_missing_tables`) are quarantined, and the counts moved with them: one
    small aggregate over the marked events (grouped like `_summarise`'s counts). Nothing to do
    when the applied rows of every name lie within one stretch of it (`row_ranges`: per
    lower-case (database, table), the lowest and highest point, `_summarise`'s)."""
    from pyspark.sql import functions as F

    from spark_apps import transforms as T
    from spark_apps.local_data import local_frame

    stretches = history.existence()
    if not _rows_may_lack_tables(stretches, row_ranges):
        return tagged, counts  # no row can be outside its table: no job, no join
    frame = local_frame(spark, [(d, t, list(after), None if until is None else list(until), d, t, None, None)
                                for d, t, after, until in stretches],
                        "database string, table string, after array<bigint>, until array<bigint>, "
                        "final_database string, final_table string, key_aliases array<array<string>>, "
                        "row_columns array<struct<names: array<string>, default: binary>>")
    names = sorted({(d, t) for d, t, _, _ in stretches})
    if len(names) > T.plan_literal_max():  # many tables: a broadcast join, not a search of a literal per row
        names = local_frame(spark, names, "database string, table string")
    tagged = T.mark_missing_tables(tagged, frame, names)
    bucket = F.lit(None).cast("int") if bucket is None else bucket
    moved = [r.asDict() for r in tagged.where(
        (F.col("status") == Status.QUARANTINED) & (F.col("error_stage") == T.MISSING_TABLE_STAGE)).groupBy(
        "database", "table", bucket.alias("bucket")).agg(
        F.count(F.lit(1)).alias("events"), F.min("commit_ts").alias("min_commit_ts"),
        F.max("commit_ts").alias("max_commit_ts")).collect()]
    return tagged, _moved_counts(counts, moved, T.MISSING_TABLE_STAGE)


def _rows_may_lack_tables(stretches: list[tuple], row_ranges: dict) -> bool:
    """Whether some name's applied row events reach outside every one stretch of it (the
    missing-table check is needed); False when each name's rows lie within one stretch."""
    def inside(d, t):
        lo, hi = row_ranges[(d, t)]
        return any(list(after) < list(lo) and (until is None or list(hi) <= list(until))
                   for sd, st, after, until in stretches if (sd, st) == (d, t))

    return not all((d, t) not in row_ranges or inside(d, t) for d, t, _, _ in stretches)


def _moved_counts(counts: list[dict], moved: list[dict], stage: str) -> list[dict]:
    """`counts` (`_summarise`'s) with the `moved` applied row events (per database, table,
    bucket: events, lowest and highest commit ts) counted as quarantined at `stage`."""
    result = [dict(c) for c in counts]
    for m in moved:
        for c in result:
            if (c["status"] == Status.APPLIED and c["kind"] == Kind.ROW and c["database"] == m["database"]
                    and c["table"] == m["table"] and c.get("bucket") == m["bucket"]):
                c["events"] -= m["events"]
                break
        result.append({"status": Status.QUARANTINED, "kind": Kind.ROW, "database": m["database"],
                       "table": m["table"], "error_stage": stage, "bucket": m["bucket"], "events": m["events"],
                       "min_commit_ts": m["min_commit_ts"], "max_commit_ts": m["max_commit_ts"]})
    return [c for c in result if c["events"]]


def _schema_conflicts(history: SchemaHistory, shapes: list[dict]) -> list[str]:
    """Distinct column sets the applied rows carry (`_summarise`'s `shapes`), compared with the
    DDL history."""
    from spark_apps.ddl import schema_conflicts

    shapes = sorted(shapes, key=lambda r: (r["database"] or "", r["table"] or "", list(r["first"] or []), str(r["columns"])))
    return schema_conflicts(history, [
        {"database": r["database"], "table": r["table"], "columns": [(c["name"], c["type"]) for c in r["columns"]],
         "first": r["first"], "last": r["last"], "events": r["events"]} for r in shapes])


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
