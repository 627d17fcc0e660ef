"""Stage 1, validate (driver, before Spark): the request contract's checks, the locations
reachable, the output writable and free, the window against a base snapshot or the lake
tables; then, once the run holds its lease, the source listed (`list_source`).
In: the arguments. Out: the source codec, target protocol and options, the base manifest; the
object list and layout plan on the run context."""

from __future__ import annotations

from cdc_codecs import get_codec, parse_option_pairs
from cdc_codecs.errors import CodecError

from spark_apps import contract, kafka_io, storage
from spark_apps import manifest as manifest_mod
from spark_apps.contract import LAST_CUT
from spark_apps.ddl import DDLError, SchemaHistory
from spark_apps.options import ReplayArgs
from spark_apps.stages import base as base_stage
from spark_apps.stages import engine as engine_stage
from spark_apps.stages.context import ReplayError, RunContext, log
from spark_apps.stages.history import starting_schemas


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
    from spark_apps.outputs import lake

    try:
        lake.format_class(args.output_format).check_output(storage.normalize(args.output),
                                                           parse_option_pairs(args.catalog))
    except lake.LakehouseError as e:
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
    engine_stage.check(args)  # --engine v1 is refused (v1 was removed)
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
                        ("--schema", args.schema), ("--manifest-uri", args.manifest_uri),
                        ("--base-export", getattr(args, "base_export", None))):
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
    # the export's position, schemas and files (its small files only; rows are read in tasks)
    args._base_export = base_stage.read_export(args)
    if args.schema:
        starting = starting_schemas(args.schema)
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
    home = home_of(args, args.output if kafka_io.is_kafka(args.output) else storage.normalize(args.output))
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
    from spark_apps.outputs import lake

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
            target = lake.open_format(args.output_format, output, args.target_table, parse_option_pairs(args.catalog))
            cuts = {target.key(t["source_database"], t["source_table"]): (target.last_commit(t["source_database"], t["source_table"]) or {}).get("cut_commit_ts")
                    for t in tables}
        except lake.LakehouseError as e:
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


def home_of(args: ReplayArgs, output: str) -> str:
    """Where the manifest, quarantine and staging go: the output, or for a Kafka output --manifest-uri."""
    return storage.normalize(args.manifest_uri) if kafka_io.is_kafka(output) else output


def plan_layout(args: ReplayArgs, source: str):
    """The source's layout plan (spark_apps.layouts): what is read, how, and what was found."""
    from spark_apps import layouts

    try:
        return layouts.plan(source, args.layout, parse_option_pairs(args.layout_option), args.protocol,
                            parse_option_pairs(args.protocol_option))
    except (layouts.LayoutError, CodecError) as e:
        raise ReplayError(str(e)) from e



def list_source(ctx: RunContext) -> None:
    """What the run reads: for an archive, its layout plan and objects (`ctx.layout_plan`,
    `ctx.objects`; a layout that carries table schemas, the TiCDC storage sink, gives --schema);
    a Kafka source is read by Spark's Kafka source instead (no objects)."""
    args = ctx.args
    if kafka_io.is_kafka(ctx.source):
        ctx.say("Kafka %s from %s to %s; protocol %s", ctx.source, args.starting_offsets, args.ending_offsets,
                args.protocol)
        return
    layout_plan = ctx.layout_plan = plan_layout(args, ctx.source)
    ctx.objects = list(layout_plan.items)
    if not ctx.objects:
        raise ReplayError(f"no archive objects to read under {ctx.source} ({layout_plan.found})")
    if layout_plan.not_visible:
        ctx.say("%d objects are not yet visible and are left for a later run (e.g. %s)", len(layout_plan.not_visible),
                layout_plan.not_visible[0], warn=True)
    if not args.schema and layout_plan.schema_uri:  # the layout carries table schemas (storage sink)
        args.schema = layout_plan.schema_uri
    ctx.say("%d objects, %.1f MB under %s; protocol %s; %s", len(ctx.objects),
            sum(o.size for o in ctx.objects) / 1e6, ctx.source, args.protocol, layout_plan.found)
