"""`cdc-replay`: the command line.

    cdc-replay replay --source URI --protocol P [--protocol-option K=V ...] --output URI
                      --emit snapshot|topics [--target-protocol Q] [--target-option K=V ...]
                      [--as-of COMMIT_TS] [--tables db.table,...]
    cdc-replay demo        # the whole job on the embedded default, end to end, through Airflow
    cdc-replay generate    # write a generated archive (for trying things out)
    cdc-replay protocols   # protocols and their options
    cdc-replay summary URI # the summary of a finished run from its manifest

`replay` runs the Spark app through spark-submit (local mode unless --master says otherwise),
exactly as the Airflow DAGs do.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .options import add_replay_arguments

EPILOG = """\
examples:
  cdc-replay replay --source s3://archive/tidb/shop --protocol canal-json \\
      --protocol-option enable-tidb-extension=true --output s3://lake/shop-snapshot --emit snapshot
  cdc-replay replay --source ./archive --protocol canal-json --output ./topics --emit topics \\
      --target-protocol canal-json --target-option enable-tidb-extension=true --tables 'shop.*'

S3 is reached through boto3: set AWS_ENDPOINT_URL for MinIO or a local server, and the usual
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_DEFAULT_REGION.
exit status: 0 success, 2 bad arguments or input (or an output that cannot be written, or one another run
holds), 1 a fault during the run (one line; the trace in the log file it names), 3 more quarantined
records than --max-bad-records.
"""


class _Parser(argparse.ArgumentParser):
    """Refusals of an option's value worded as the request contract words them (the same text
    the app and the Airflow form give), then exit 2 as argparse does."""

    def error(self, message):
        from .contract import argparse_refusal

        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {argparse_refusal(message).message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc-replay",
        description="Replay archived CDC messages (TiCDC, Canal, OceanBase) with Spark: decode any supported "
                    "protocol, drop at-least-once duplicates, order by commit ts per row key, re-apply DDL, and "
                    "emit point-in-time snapshots or re-encoded topics in any protocol.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    replay = sub.add_parser("replay", help="replay an archive (runs the Spark app)", epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            description="Replay a CDC archive (Kafka-record JSON lines, TiCDC's cloud storage "
                                        "sink, Kafka Connect S3: --layout) or Kafka topics with Spark and print "
                                        "a summary.")
    add_replay_arguments(replay)

    demo = sub.add_parser("demo", help="run the main job end to end on the embedded default, through Airflow",
                          description="Start a local S3-compatible server (moto) on loopback, write a generated "
                                      "canal-json archive to a bucket, run the manual backfill DAG with `airflow dags "
                                      "test` (embedded SQLite metadata DB, Spark local mode), print the summary and "
                                      "sample rows, check them against the generator's truth, say how to open the "
                                      "Airflow UI on the run, and stop the server.")
    demo.add_argument("--transactions", type=int, default=2000, help="size of the generated history (default: %(default)s)")
    demo.add_argument("--keep-server", action="store_true", help="leave the S3 server running at the end")
    demo.add_argument("--airflow-home", metavar="DIR",
                      help="AIRFLOW_HOME to use (default: .airflow in the repository; created when missing)")

    gen = sub.add_parser(
        "generate", help="write a generated CDC archive",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Simulate a small TiDB database (tables `orders` and `customers`) and write what TiCDC\n"
                    "would have sent, as a Kafka-record archive (gzip JSON lines, 500 records per object):\n"
                    "row changes dispatched by key, DDL (ADD/DROP COLUMN, TRUNCATE; a table never holds\n"
                    "more than 8 added columns), watermarks every 10 transactions, 5% redelivered\n"
                    "messages and 5 pending transactions above the last watermark. Progress goes to stderr.",
        epilog="examples:\n"
               "  cdc-replay generate --output s3://archive/shop --transactions 10000 --partitions 4\n"
               "  cdc-replay replay --source s3://archive/shop --protocol canal-json \\\n"
               "      --protocol-option enable-tidb-extension=true --emit snapshot --output /tmp/snap\n"
               "\n"
               "  # Alibaba Canal flat messages with the shapes of real captures: a keyless table with\n"
               "  # identical rows, rows in the same second as the DDL before them, es going backwards\n"
               "  cdc-replay generate --output /tmp/canal --protocol-option flat-message-flavor=canal \\\n"
               "      --keyless --same-second-ddl --backward-es-rate 0.1 --ddl-rate 0.05\n"
               "  cdc-replay replay --source /tmp/canal --protocol canal-json \\\n"
               "      --protocol-option flat-message-flavor=canal --emit snapshot --output /tmp/canal-snap\n"
               "\n"
               "  # a mid-stream archive whose tables get ALTERed, YEAR/BIT columns, storage-sink schema files\n"
               "  cdc-replay generate --output /tmp/mid --mid-stream --mid-stream-ddl --year-bit \\\n"
               "      --schema-files /tmp/mid-schemas\n"
               "  cdc-replay replay --source /tmp/mid --protocol canal-json --schema /tmp/mid-schemas \\\n"
               "      --protocol-option enable-tidb-extension=true --emit snapshot --output /tmp/mid-snap")
    gen.add_argument("--output", required=True, metavar="URI",
                     help="where to write the archive: a local directory or s3://bucket/prefix (the bucket is "
                          "created when missing)")
    gen.add_argument("--protocol", default="canal-json",
                     help="protocol of the record values (default: %(default)s; `cdc-replay protocols` lists them)")
    gen.add_argument("--protocol-option", action="append", default=None, metavar="K=V",
                     help="codec option, repeatable (default: enable-tidb-extension=true where the protocol has it)")
    gen.add_argument("--transactions", type=int, default=1000, metavar="N",
                     help="transactions below the cut, each 1-4 row changes (default: %(default)s; ~3 records "
                          "per transaction; 100,000 take about a minute)")
    gen.add_argument("--partitions", type=int, default=3, metavar="N",
                     help="Kafka partitions of the topic (default: %(default)s)")
    gen.add_argument("--seed", type=int, default=7,
                     help="random seed: the same seed writes the same archive (default: %(default)s)")
    gen.add_argument("--mid-stream", action="store_true",
                     help="an archive that starts after the tables exist: no DDL, rows from before it (first "
                          "changed by an UPDATE or a DELETE), partitions starting at arbitrary offsets")
    gen.add_argument("--mid-stream-ddl", action="store_true",
                     help="with --mid-stream, DDL all the same (at --ddl-rate): ALTER / TRUNCATE of tables the "
                          "archive never created, each after the table's first row event; write no --schema-files "
                          "to replay it without a schema dump")
    gen.add_argument("--ddl-rate", type=float, default=None, metavar="P",
                     help="share of transactions that are a DDL: ADD/DROP COLUMN, TRUNCATE (default: 0.02; 0 with "
                          "--mid-stream unless --mid-stream-ddl; a rate with --mid-stream gives ALTERs of tables "
                          "the archive never created)")
    gen.add_argument("--keyless", action="store_true",
                     help="add a table `ledger` (item, qty) without any key whose rows repeat: INSERT of a copy, "
                          "DELETE and UPDATE of one copy (MySQL keeps identical rows of a keyless table)")
    gen.add_argument("--year-bit", action="store_true",
                     help="add a table `devices` with YEAR and BIT(8) columns (TiDB flags both UNSIGNED)")
    gen.add_argument("--same-second-ddl", action="store_true",
                     help="the 3 transactions after each DDL (CREATE TABLE included) commit in the DDL's "
                          "millisecond and mostly change its table: rows in the same second (Canal's `es`) as "
                          "the CREATE TABLE / ADD COLUMN before them")
    gen.add_argument("--backward-es-rate", type=float, default=0.0, metavar="P",
                     help="fraction of row transactions whose event time (`es`) is 1-3 s earlier than the "
                          "transaction before (never before the last DDL), as a later binlog transaction can "
                          "carry; commit ts stay in order (default: %(default)s)")
    gen.add_argument("--schema-files", metavar="URI",
                     help="also write the tables as they were before the archive as TiCDC storage-sink table "
                          "schema files ({db}/{table}/meta/schema_<version>_<crc>.json, usable as --schema); "
                          "YEAR and BIT columns are `YEAR UNSIGNED` / `BIT UNSIGNED` there, as TiDB writes them")
    gen.add_argument("--base-export", choices=["dumpling-sql", "dumpling-csv", "mysqldump"], metavar="KIND",
                     help="with --mid-stream, also write a full export of every table at the position just before "
                          "the archive's first event: dumpling-sql | dumpling-csv (Dumpling of TiDB, its metadata "
                          "Pos the TSO, for protocols with commit ts; of MySQL, a binlog position, for "
                          "canal-protobuf) or mysqldump (--source-data=2, canal-protobuf only). The archive starts "
                          "with some copies of changes the export already holds. Protocols carrying neither a "
                          "commit ts nor a binlog position are refused")
    gen.add_argument("--base-export-output", metavar="URI",
                     help="where to write the export (default: the --output URI with `-export` appended, beside "
                          "the archive)")
    gen.add_argument("--base-export-compress", choices=["gzip", "zstd", "snappy"], default=None, metavar="C",
                     help="compress the export's files as Dumpling's --compress does (gzip, zstd, snappy); a "
                          "mysqldump file only with gzip (`mysqldump ... | gzip`)")

    sub.add_parser("protocols", help="list protocols and their options")

    summary = sub.add_parser("summary", help="print the summary of a finished run")
    summary.add_argument("output", metavar="URI", help="the --output of the run")
    summary.add_argument("--json", action="store_true", help="print the run's manifest as JSON instead")
    return parser


def replay_command(argv: list[str], say=lambda text: None, args=None) -> list[str]:
    """The spark-submit command for `cdc-replay replay <argv>`; `say` gets the line that says
    which driver JVM and Spark settings were chosen for the source's size, and why. `args`:
    argv already parsed (ReplayArgs), so that this process parses it once."""
    from .launch import build_native_archive, build_py_files, is_local, small_run_options, spark_submit_command

    if args is None:
        from .contract import parse

        args = parse(argv)
    py_files, archives = None, ()
    if not is_local(args.master):  # our code, and the compiled decoders, shipped to the executors
        folder = tempfile.mkdtemp(prefix="cdc-replay-")
        py_files = build_py_files(folder)
        native, shipped = build_native_archive(folder)
        say(shipped)
        archives = (native,) if native else ()
    app_args = [a for a in argv]
    from cdc_codecs import parse_option_pairs

    conf = with_packages(args, parse_option_pairs(args.spark_conf))
    java_options, small_conf, why = small_run_options(args.master, source_bytes(args.source, args.master, conf), conf,
                                                      source_records=kafka_records(args, conf))
    say(why)
    return spark_submit_command(_strip_master(app_args), master=args.master, py_files=py_files,
                                conf={**small_conf, **conf}, driver_java_options=java_options, archives=archives)


def source_bytes(source: str, master: str, conf: dict[str, str]) -> int | None:
    """The archive's size for launch.small_run_options, listed only when it can matter (a local
    master, no driver Java options given) and only up to the threshold; None for a kafka://
    source or a listing that fails (the app reports that itself)."""
    from . import storage
    from .kafka_io import is_kafka
    from .launch import DRIVER_JAVA_OPTIONS, is_local, small_run_threshold

    if is_kafka(source) or not is_local(master) or DRIVER_JAVA_OPTIONS in conf:
        return None
    try:
        return storage.total_size(source, stop_above=small_run_threshold())
    except Exception:  # noqa: BLE001 - sizing is an optimisation; the run itself says what is wrong
        return None


def kafka_records(args, conf: dict[str, str]) -> int | None:
    """A kafka:// source's size for launch.small_run_options: at most how many records its
    offsets hold (kafka_io.records_in_range), asked only when it can matter (a local master, no
    driver Java options given); None otherwise."""
    from .kafka_io import client_config, is_kafka, records_in_range
    from .launch import DRIVER_JAVA_OPTIONS, is_local

    if not is_kafka(args.source) or not is_local(args.master) or DRIVER_JAVA_OPTIONS in conf:
        return None
    try:
        return records_in_range(args.source, args.starting_offsets, args.ending_offsets, client_config())
    except Exception:  # noqa: BLE001 - sizing is an optimisation; the run itself says what is wrong
        return None


def with_packages(args, conf: dict[str, str]) -> dict[str, str]:
    """A kafka:// source is read by Spark's Kafka connector, a Spark package (spark_apps.packages):
    its settings go to spark-submit, merged with any packages --spark-conf already names."""
    from .kafka_io import is_kafka
    from .packages import spark_conf

    if not is_kafka(args.source):
        return conf
    merged = {**spark_conf(["kafka"]), **conf}
    if "spark.jars.packages" in conf:
        merged["spark.jars.packages"] = ",".join([spark_conf(["kafka"])["spark.jars.packages"], conf["spark.jars.packages"]])
    return merged


def _strip_master(argv: list[str]) -> list[str]:
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--master":
            skip = True
            continue
        if arg.startswith("--master="):
            continue
        out.append(arg)
    return out


def spark_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def check_replay(argv: list[str], args=None) -> str | None:
    """Why `cdc-replay replay <argv>` is refused before Spark starts (None: it is not): the
    request contract's rules (spark_apps.contract), then what needs the network, each once.
    `args`: argv already parsed (ReplayArgs)."""
    from .contract import RequestError, parse
    from .replay import ReplayError, validate

    try:
        validate(parse(argv) if args is None else args)
    except (RequestError, ReplayError) as e:
        return str(e)
    return None


def run_replay(argv: list[str], args=None) -> int:
    """Check the arguments here (no JVM needed to refuse a typo), then run spark-submit. `args`:
    argv already parsed (main parses it once, with the whole command line)."""
    from . import masking
    from .contract import RequestError, parse

    if args is None:
        try:
            args = parse(argv)
        except RequestError as e:
            print(f"cdc-replay: error: {masking.mask_text(str(e))}", file=sys.stderr)
            return 2
    refused = check_replay(argv, args)
    if refused is not None:
        print(f"cdc-replay: error: {masking.mask_text(refused)}", file=sys.stderr)
        return 2
    # credentials in option values go through the environment, not spark-submit's arguments
    kept, secret = masking.split_argv(argv)
    try:
        command = replay_command(kept, say=lambda text: print(f"cdc-replay: {text}", file=sys.stderr, flush=True),
                                 args=args)
    except ValueError as e:  # a bad $CDC_REPLAY_SMALL_RUN_MB, $CDC_REPLAY_LOCAL_JIT or $CDC_REPLAY_NATIVE_WHEEL
        print(f"cdc-replay: error: {e}", file=sys.stderr)
        return 2
    from .faults import LOG_ENV, new_log_file
    from .launch import SUMMARY_ENV, finish_class_archive

    env = {**spark_env(), **masking.environment(secret)}
    env.setdefault(LOG_ENV, new_log_file())  # a failed run's trace and Spark's task failures (spark_apps/faults.py)
    # spark-submit merges the driver's stderr into its stdout: all of it is the run's log and
    # goes to stderr; the app writes the summary to a file, printed on stdout once it exits
    summary = env[SUMMARY_ENV] = os.path.join(tempfile.mkdtemp(prefix="cdc-replay-summary-"), "summary.txt")
    try:
        log_to = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (captured in-process)
        log_to = None
    status = subprocess.call(command, env=env, stdout=log_to)
    if os.path.exists(summary):
        with open(summary, encoding="utf-8") as f:
            sys.stdout.write(f.read())
        sys.stdout.flush()
    shutil.rmtree(os.path.dirname(summary), ignore_errors=True)
    finish_class_archive(command, status)
    return status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "replay":  # parsed once, here: its options are the app's (spark_apps.options)
        from .options import ReplayArgs

        return run_replay(argv[argv.index("replay") + 1:], ReplayArgs.from_namespace(args))
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args.transactions, keep_server=args.keep_server, airflow_home=args.airflow_home)
    if args.command == "generate":
        from cdc_codecs import parse_option_pairs

        from .generate import generate, write_archive
        from . import storage

        options = parse_option_pairs(args.protocol_option) if args.protocol_option else None
        if args.base_export:
            from .generate import export_position_kind

            if not args.mid_stream:
                parser.error("--base-export goes with --mid-stream (an archive that starts after its tables exist)")
            try:
                if export_position_kind(args.protocol, options) == "tso" and args.base_export == "mysqldump":
                    parser.error("--base-export mysqldump goes with canal-protobuf's binlog positions; an archive "
                                 "of TiCDC starts from a Dumpling export's TSO: use dumpling-sql or dumpling-csv")
            except ValueError as e:
                parser.error(f"--base-export: {e}")
            if args.base_export == "mysqldump" and args.base_export_compress not in (None, "gzip"):
                parser.error("--base-export mysqldump: only --base-export-compress gzip")
        started = time.monotonic()

        def progress(done, records):
            print(f"generated {done:,}/{args.transactions:,} transactions ({records:,} records) "
                  f"in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)

        generated = generate(transactions=args.transactions, partitions=args.partitions, seed=args.seed,
                             protocol=args.protocol, options=options, mid_stream=args.mid_stream,
                             mid_stream_ddl=args.mid_stream_ddl, ddl_rate=args.ddl_rate, keyless=args.keyless,
                             year_bit=args.year_bit, same_second_ddl=args.same_second_ddl,
                             backward_es_rate=args.backward_es_rate, base_export=bool(args.base_export),
                             progress=progress)
        output = storage.normalize(args.output)
        if storage.is_s3(output):
            storage.ensure_bucket(output)
        print(f"writing {len(generated.records):,} records to {output}", file=sys.stderr, flush=True)
        objects = write_archive(generated.records, output)
        print(f"wrote {len(generated.records):,} records in {len(objects)} objects to {output} "
              f"(cut at commit ts {generated.cut_ts}) in {time.monotonic() - started:.1f} s")
        if args.schema_files:
            from .generate import write_schema_files

            schema_root = storage.normalize(args.schema_files)
            if storage.is_s3(schema_root):
                storage.ensure_bucket(schema_root)
            files = write_schema_files(generated, schema_root)
            print(f"wrote {len(files)} table schema files to {schema_root}")
        if args.base_export:
            from .generate import write_base_export

            export_root = storage.normalize(args.base_export_output or output.rstrip("/") + "-export")
            if storage.is_s3(export_root):
                storage.ensure_bucket(export_root)
            files = write_base_export(generated, args.base_export, export_root,
                                      compression=args.base_export_compress)
            position = generated.base.position
            at = (f"TSO {position['tso']}" if "tso" in position
                  else f"binlog {position['log_file']}:{position['log_pos']}")
            print(f"wrote a {args.base_export} export ({len(files)} files, {at}) to {export_root}; the archive "
                  f"starts with {generated.base.resent} copies of changes it holds")
        return 0
    if args.command == "protocols":
        import cdc_codecs

        for name in cdc_codecs.protocols():
            cls = cdc_codecs.codec_class(name)
            print(f"{name}: {cls.description}")
            print(f"  DDL on {'partition 0' if cls.ddl_placement == 'first' else 'every partition'}, "
                  f"watermarks on {'partition 0' if cls.watermark_placement == 'first' else 'every partition'}")
            for option in cls.options:
                print(f"  {option.describe()}")
        return 0
    if args.command == "summary":
        return summary_command(args.output, as_json=args.json)
    parser.error(f"unknown command {args.command}")
    return 2


def summary_command(output: str, as_json: bool = False) -> int:
    """Print a finished run's summary (`as_json`: its manifest, as JSON on stdout); a missing,
    incomplete or unreadable output is one line on stderr and exit 2 (no traceback)."""
    import orjson

    from . import storage
    from .manifest import MANIFEST, ManifestError, read_manifest, summary

    output = storage.normalize(output)

    def refuse(message: str) -> int:
        print(f"cdc-replay summary: {message}", file=sys.stderr)
        return 2

    try:
        storage.check_bucket(output, "output")
        if not storage.exists(storage.join(output, MANIFEST)):
            left = storage.list_objects(output)
            if left:
                return refuse(f"{output} is incomplete: {len(left):,} objects but no {MANIFEST} (a run was "
                              "interrupted or is still running; the next successful run completes it)")
            return refuse(f"no output at {output} (no {MANIFEST}; is this the --output of a replay?)")
        manifest = read_manifest(output)
        text = orjson.dumps(manifest, option=orjson.OPT_INDENT_2).decode() if as_json else summary(manifest)
    except storage.AccessError as e:
        return refuse(str(e))
    except ManifestError as e:
        return refuse(f"{storage.join(output, MANIFEST)} {e}")
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        return refuse(f"{storage.join(output, MANIFEST)} is not a cdc-replay manifest this version reads "
                      f"({type(e).__name__}: {e})")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
