"""A base export (--base-export, issue 30) in the replay: read on the driver before Spark
(`read_export`), its position checked against the decoded archive before the big passes
(`check_position`), and its rows handed to the snapshot as base rows (`export_base_rows`).

How positions join (docs/base-exports.md):

* Dumpling from TiDB: the export holds every transaction with commit ts at or below its TSO;
  archive events there are `in_base`. Needs commit ts in the archive (TiCDC protocols).
* mysqldump / Dumpling from MySQL: the export holds every binlog event before its position
  (file sequence, offset); archive events there are `in_base`. Needs Canal's per-event binlog
  position, which canal-protobuf carries ([file sequence, offset, row]); Canal's flat JSON
  message carries none, so it cannot be joined.

The archive must continue the export: a partition that starts at a later Kafka offset than 0
with nothing at or before the position may have lost changes in between (a gap), unless its
TiCDC storage sink's table version and date directories prove it complete after the TSO; and an
archive that does not reach the position cannot bring the export to its cut; both are refused.
How each partition was shown to continue the export is the manifest window's `base_start`.
"""

from __future__ import annotations

import datetime as _dt

from spark_apps import storage
from spark_apps.contract import BASE_EXPORT_BINLOG_PROTOCOLS, BASE_EXPORT_TSO_PROTOCOLS, Kind, Status
from spark_apps.paths import display
from spark_apps.stages.context import Decoded, ReplayError, RunContext, log
from spark_apps.stages.decode import release


def read_export(args):
    """The export (`spark_apps.base_export.BaseExport`) of --base-export, or None; ReplayError
    (one line) for an export that cannot be read or cannot be joined with this protocol."""
    uri = getattr(args, "base_export", None)
    if not uri:
        return None
    from spark_apps.base_export import ExportFormatError, ExportRefused, discover
    from spark_apps.ddl import DDLError

    try:
        export = discover(uri)
        if export.position.kind == "binlog":
            export.position.log_sequence()  # a file name without a sequence is refused here
        export.schema_history()
    except (ExportRefused, ExportFormatError, DDLError, UnicodeDecodeError) as e:
        text = str(e)
        raise ReplayError(text if text.startswith("--base-export") else f"--base-export {uri}: {text}") from None
    except (storage.AccessError, OSError) as e:
        raise ReplayError(f"--base-export {uri}: cannot read it ({type(e).__name__}: {e})") from None
    only_generated = _only_generated(export)
    if only_generated:
        raise ReplayError(f"--base-export {uri}: {only_generated}")
    given = getattr(args, "base_export_time_zone", None)
    if export.time_zone is not None:
        from cdc_codecs.errors import ConfigError

        try:
            _zone(export.time_zone)
        except ConfigError as e:
            raise ReplayError(f"--base-export {uri}: the dump's SET TIME_ZONE='{export.time_zone}': {e}") from None
    if given and export.time_zone is not None and _zone(given) != _zone(export.time_zone):
        raise ReplayError(f"--base-export-time-zone {given} differs from the zone the dump states (SET TIME_ZONE="
                          f"'{export.time_zone}', mysqldump --tz-utc): its TIMESTAMP values are in "
                          f"{export.time_zone}; leave the option out or give that zone")
    for warning in (generated_warning(export), timestamp_warning(export, args)):
        if warning:
            log.warning("%s", warning)
    position = export.position
    if position.kind == "tso" and args.protocol not in BASE_EXPORT_TSO_PROTOCOLS:
        raise ReplayError(f"--base-export {uri} is a TiDB export at {position.describe()}, which joins an archive by "
                          f"commit ts; --protocol {args.protocol} carries none (use a TiCDC protocol)")
    if position.kind == "binlog" and args.protocol not in BASE_EXPORT_BINLOG_PROTOCOLS:
        raise ReplayError(f"--base-export {uri} is a MySQL export at {position.describe()}, which joins an archive by "
                          f"binlog position; --protocol {args.protocol} carries none per event (Canal writes it "
                          "with canal.mq.flatMessage=false: --protocol canal-protobuf)")
    return export


def _only_generated(export) -> str | None:
    """Why a table whose columns are all generated cannot be read, or None: Dumpling selects
    no column of it and writes each row as an empty line (CSV) or `()` (SQL), which no
    reader can tell from nothing; rows would be lost or made up, so the export is refused."""
    tables = export.schema_history().tables
    for key, columns in sorted(export.generated_columns().items()):
        if key in tables and len(columns) == len(tables[key].columns):
            return (f"{key[0]}.{key[1]} has only generated columns ({', '.join(c for c, _ in columns)}): its rows "
                    "hold no value in an export; leave it out of the export (Dumpling --filter)")
    return None


def generated_warning(export) -> str | None:
    """The manifest/log line naming the export's generated columns, or None. No export holds
    them (Dumpling and mysqldump select only the other columns), and the replay does not
    evaluate their expressions, so a row the archive never rewrites has none (NULL in a
    table output); TiCDC's row events do carry STORED generated columns (not VIRTUAL ones),
    so rows the archive rewrote hold them."""
    found = export.generated_columns()
    if not found:
        return None
    tables = "; ".join(f"{db}.{table} ({', '.join(f'{c} {kind}' for c, kind in columns)})"
                       for (db, table), columns in sorted(found.items()))
    return (f"base export: generated columns are in no export's rows and are not computed, so rows the archive "
            f"never changed have none (NULL): {tables}; the archive's rows carry the stored ones (TiCDC)")


def _zone(name: str):
    from cdc_codecs.canal_common import time_zone

    return time_zone(name)


def time_zones(export, args) -> tuple[str | None, str | None]:
    """(the zone the export's TIMESTAMP text is in, the zone the archive's is in), None where
    not known. The export's: --base-export-time-zone, else what a mysqldump states (its
    default --tz-utc's SET TIME_ZONE='+00:00'); Dumpling states none. The archive's:
    canal-protobuf decodes TIMESTAMP to UTC text (`source-timezone` converts); the other
    protocols keep the producer's text, whose zone is the `tz` protocol option (TiCDC's
    --tz, Canal's JVM zone) when given."""
    from cdc_codecs import parse_option_pairs

    exported = getattr(args, "base_export_time_zone", None) or export.time_zone
    if args.protocol == "canal-protobuf":
        archived = "UTC"
    else:
        archived = parse_option_pairs(args.protocol_option).get("tz") or None
    return exported, archived


def timestamp_conversion(export, args) -> tuple[str, str] | None:
    """(from, to) when the export's TIMESTAMP values are to be brought to the archive's zone
    (both known, different zones), else None."""
    exported, archived = time_zones(export, args)
    if exported is None or archived is None or _zone(exported) == _zone(archived):
        return None
    return exported, archived


def time_zone_record(export, args) -> dict:
    """What the manifest's window says of the TIMESTAMP zones (docs/base-exports.md)."""
    exported, archived = time_zones(export, args)
    return {"base_time_zone": exported, "archive_time_zone": archived,
            "base_timestamps_converted": timestamp_conversion(export, args) is not None}


def timestamp_warning(export, args) -> str | None:
    """The manifest/log line naming the export's TIMESTAMP columns when their zone cannot be
    shown to be the archive's, or None. Both zones known (time_zones): the values agree or
    are converted (_as_events). Otherwise they are kept as written, and agree with the
    archive's only if the unknown zone happens to be the other one."""
    from cdc_codecs.mysql_types import parse_type

    exported, archived = time_zones(export, args)
    if exported is not None and archived is not None:
        return None
    columns = {key: [c.name for c in schema.columns if parse_type(c.mysql_type).base == "timestamp"]
               for key, schema in export.schema_history().tables.items()}
    tables = "; ".join(f"{db}.{table} ({', '.join(names)})" for (db, table), names in sorted(columns.items()) if names)
    if not tables:
        return None
    if exported is None and export.producer == "mysqldump":
        how = "as mysqldump wrote them, in the server's session zone (--skip-tz-utc: no SET TIME_ZONE in the dump)"
    elif exported is None:
        how = ("as Dumpling wrote them, in its session time_zone (the server's default unless --params "
               "time_zone=...), which the export does not record")
    else:
        how = f"as written, in {exported}"
    if archived is None:
        theirs = f"the archive's ({args.protocol}) are in its producer's zone (TiCDC's --tz; Canal's JVM zone)"
        fix = "--protocol-option tz=ZONE"
    else:
        theirs = f"the archive's are in {archived}"
        fix = ""
    if exported is None:
        fix = "--base-export-time-zone ZONE" + (f" and {fix}" if fix else "")
    return (f"base export: TIMESTAMP values are taken {how}; {theirs}: they agree only when the two zones are the "
            f"same ({fix} states it and converts): {tables}")


def bound(export) -> list[int]:
    """Archive events whose timeline is below this point are in the export (tag_status's
    `in_base`): [TSO + 1] (commit ts <= TSO), or [file sequence, offset] (a Canal position
    [sequence, offset, row] before the export's)."""
    p = export.position
    return [p.tso + 1] if p.kind == "tso" else [p.log_sequence(), p.log_pos]


def base_point(export) -> list[int]:
    """The timeline of the export's rows: the TSO, or the binlog position with row -1 (after
    every event in the export, before every event at or after its position)."""
    p = export.position
    return [p.tso] if p.kind == "tso" else [p.log_sequence(), p.log_pos, -1]


def check_position(ctx: RunContext, decoded: Decoded) -> None:
    """Before the big passes: the archive carries what the join needs, continues the export (no
    gap) and reaches it (the export is not newer than the cut). ReplayError in one line;
    the decode is released first."""
    try:
        _check(ctx, decoded)
    except ReplayError:
        release(decoded.decoded, ctx.files)
        raise


def _check(ctx: RunContext, decoded: Decoded) -> None:
    from spark_apps import manifest as manifest_mod

    export, stats, uri = ctx.base_export, decoded.partition_stats, ctx.args.base_export
    topics = sorted({s["topic"] for s in stats if s["topic"]})
    if len(topics) == 1:  # the export's rows go where the archive's rows go
        ctx.base_topic = topics[0]
    elif ctx.args.output_format == "kafka" and "{topic}" in ctx.args.target_topic:
        raise ReplayError(f"--base-export: the export's rows have no source topic and the archive has {len(topics)} "
                          "topics; give --target-topic without {topic} (e.g. {schema}_{table})")
    position = export.position
    if position.kind == "tso":
        if not any(s["max_commit_ts"] is not None for s in stats):
            raise ReplayError(f"--base-export {uri} is at {position.describe()}, but the archive's events carry no "
                              "commit ts (canal-json needs enable-tidb-extension=true): nothing tells which of them "
                              "the export holds")
        try:
            cut = manifest_mod.compute_cut(stats, ctx.args.upper)
        except manifest_mod.CutError as e:
            raise ReplayError(str(e)) from None
        if cut["commit_ts"] is None or cut["commit_ts"] < position.tso:
            raise ReplayError(f"--base-export {uri} at {position.describe()} is newer than the archive's cut "
                              f"({cut['description']}): the snapshot cannot be taken at the cut from it")
    sink = _sink_proven(ctx, stats, position)
    figures = _figures(ctx, decoded, bound(export), set(sink))
    if position.kind == "binlog" and not any(f["after"] for f in figures.values()):
        raise ReplayError(f"--base-export {uri} at {position.describe()} is newer than the archive's end: every "
                          "event of the archive lies before the export's position")
    starts = {"first_offset": 0, "event_at_or_before": 0, "sink_table_version": 0}
    unproven = []
    for s in stats:
        key = (s["topic"], s["partition"])
        if s.get("min_offset") == 0:
            starts["first_offset"] += 1
        elif figures.get(key, {}).get("below"):
            starts["event_at_or_before"] += 1
        elif key in sink:
            starts["sink_table_version"] += 1
        else:
            unproven.append((s["topic"] or "", s["partition"], s.get("min_offset")))
    ctx.base_start = starts
    if starts["sink_table_version"]:
        ctx.say("--base-export: %d storage-sink table(s) start at or before %s by their table version and first "
                "date directories (docs/base-exports.md, \"A gap\")", starts["sink_table_version"],
                position.describe())
    if unproven:
        shown = ", ".join(_unproven_text(ctx, t, p, o) for t, p, o in sorted(unproven)[:3])
        raise ReplayError(f"--base-export {uri} at {position.describe()}: the archive may start after it (a gap): "
                          f"{len(unproven)} partition(s) ({shown}{' ...' if len(unproven) > 3 else ''}) begin after "
                          "their topic's first offset with no event or watermark at or before the export's position, "
                          "so changes between the two may be missing")


def _sink_proven(ctx: RunContext, stats: list, position) -> dict:
    """{(topic, partition): evidence} of the partitions a TiCDC storage sink's own files prove
    complete after the export's TSO (`ticdc_storage.complete_after`: table version and earliest
    date directory at or before it)."""
    bounds = getattr(ctx.layout_plan, "complete_after", None) or {}
    if position.kind != "tso":
        return {}
    return {(s["topic"], s["partition"]): bounds[s["topic"]] for s in stats
            if s["topic"] in bounds and bounds[s["topic"]][0] <= position.tso}


def _unproven_text(ctx: RunContext, topic: str, partition: int, first_offset) -> str:
    """How the refusal names a partition: its first offset, or for a storage-sink table the ts
    its table version and earliest date directory prove it complete after."""
    evidence = (getattr(ctx.layout_plan, "complete_after", None) or {}).get(topic)
    if evidence is None:
        return f"{display(topic)}/{partition} from offset {first_offset if first_offset is not None else '(none)'}"
    from cdc_codecs.tso import to_datetime

    bound, version, days = evidence
    date = f", earliest date directory {_dt.date(1970, 1, 1) + _dt.timedelta(days=days)}" if days else ""
    return (f"{display(topic)}: storage-sink table version {version}{date}, so complete only after ts {bound} "
            f"({to_datetime(bound):%Y-%m-%d %H:%M:%S} UTC)")


def _figures(ctx: RunContext, decoded: Decoded, below_point: list[int], proven=frozenset()) -> dict:
    """{(topic, partition): {"below": events/watermarks at or before the export's position,
    "after": row/DDL events after it}} from one small aggregation over the decoded events;
    skipped (empty) when the export is a TSO and every partition starts at offset 0 or is
    `proven` by its storage sink's files."""
    from pyspark.sql import functions as F

    from spark_apps.transforms import point_literal

    position = ctx.base_export.position
    needed = position.kind == "binlog" or any(s.get("min_offset") != 0 and (s["topic"], s["partition"]) not in proven
                                              for s in decoded.partition_stats)
    if not needed:
        return {}
    events = decoded.events
    change = F.col("kind").isin(Kind.ROW, Kind.DDL)
    if position.kind == "tso":
        below = ((change & (F.col("commit_ts") < below_point[0]))
                 | ((F.col("kind") == Kind.WATERMARK) & (F.col("watermark_ts") < below_point[0])))
        after = change & (F.col("commit_ts") >= below_point[0])
    else:
        below = change & (F.col("position") < point_literal(below_point))
        after = change & (F.col("position") >= point_literal(below_point))
    rows = events.groupBy("topic", "partition").agg(
        F.count(F.when(below, 1)).alias("below"), F.count(F.when(after, 1)).alias("after")).collect()
    return {(r["topic"], r["partition"]): {"below": r["below"], "after": r["after"]} for r in rows}


def export_base_rows(ctx: RunContext, columns: list[str]):
    """The export's rows (base_export.spark.export_rows, read in tasks) as applied INSERT row
    events at the export's position, shaped as the replay's tagged rows (`columns`) so that
    the snapshot takes them as the state before the archive's first change, as it does a
    base snapshot's rows."""
    from pyspark.sql import functions as F

    from spark_apps.base_export.spark import export_rows
    from spark_apps.schema import DECODED_STRUCT

    export = ctx.base_export
    tables = {}
    for key, schema in export.schema_history().tables.items():
        tables[key] = ([(c.name, c.mysql_type, int(c.flags)) for c in schema.columns],
                       list(schema.identity_columns()) or None)
    point = base_point(export)
    commit_ts = point[0] if export.position.kind == "tso" else None
    position = point if export.position.kind == "binlog" else None
    # the task's closure holds values, not the run context
    place = (commit_ts, position, ctx.base_topic, timestamp_conversion(export, ctx.args))
    events = export_rows(ctx.spark, export).rdd.mapPartitions(lambda rows: _as_events(rows, tables, place))
    frame = ctx.spark.createDataFrame(events, DECODED_STRUCT)
    if ctx.args.table_patterns():  # --tables: the export's other tables are left out too
        from spark_apps.transforms import table_filter

        frame = frame.where(table_filter(ctx.args.table_patterns()))
    return (frame.withColumns({"inferred_ts": F.lit(None).cast("bigint"), "event_time": F.lit(None).cast("bigint"),
                               "timeline": F.array(*[F.lit(p).cast("bigint") for p in point]),
                               "status": F.lit(Status.APPLIED)})
            .select(*columns))


def _as_events(rows, tables: dict, place: tuple):
    """Export rows (database, table, file, ordinal, values) as INSERT events of DECODED_STRUCT:
    the after image in the CREATE TABLE's column order (generated columns, which no export
    holds, left out), ENUM/SET labels from the column type, TIMESTAMP values brought from
    the export's zone to the archive's when `place` names both (timestamp_conversion)."""
    from cdc_codecs.mysql_types import enum_set_label, parse_type
    from spark_apps.schema import DECODED_FIELD_NAMES

    commit_ts, position, topic, zones = place
    shift = None if zones is None else _shifter(*zones)
    types = {}
    for row in rows:
        columns, key = tables[(row["database"].lower(), row["table"].lower())]
        values = row["values"]
        image = []
        for name, mysql_type, flags in columns:
            if name not in values:
                continue
            value = values[name]
            value = None if value is None else bytes(value)
            parsed = types.get(mysql_type) or types.setdefault(mysql_type, parse_type(mysql_type))
            if shift is not None and value is not None and parsed.base == "timestamp":
                value = shift(value, row, name)
            image.append({"name": name, "mysql_type": mysql_type, "flags": flags, "value": value,
                          "label": enum_set_label(parsed, value) if parsed.labels else None})
        event = dict.fromkeys(DECODED_FIELD_NAMES)
        # its place in the export (file, byte offset) orders rows that share the export's point alike
        # in every output (the writers' last ties: offset, then object)
        event.update(kind=Kind.ROW, op="insert", commit_ts=commit_ts, position=position, database=row["database"],
                     table=row["table"], key_columns=key, after=image, topic=topic, object=row["file"],
                     offset=row["ordinal"], event_index=0)
        yield tuple(event[n] for n in DECODED_FIELD_NAMES)


def _shifter(source: str, target: str):
    """value bytes -> the same instant's text in `target` (cdc_codecs.canal_common
    timestamp_between: fraction digits kept, zero date kept); a value that is no TIMESTAMP
    text fails naming its file, table and column (nothing is kept unconverted silently)."""
    from cdc_codecs.canal_common import time_zone, timestamp_between

    from spark_apps.base_export import ExportFormatError

    src, dst = time_zone(source), time_zone(target)

    def shift(value: bytes, row, column: str) -> bytes:
        try:
            return timestamp_between(value.decode("ascii"), src, dst).encode("ascii")
        except (ValueError, OverflowError) as e:
            raise ExportFormatError(f"{row['file']}: {row['database']}.{row['table']} column {column}: cannot "
                                    f"convert the TIMESTAMP {value!r} from {source} to {target}: {e}") from None

    return shift
