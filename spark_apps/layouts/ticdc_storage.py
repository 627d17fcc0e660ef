"""`ticdc-storage`: what TiCDC's cloud storage sink writes (tiflow pkg/sink/cloudstorage,
ticdc cmd/storage-consumer), read as the storage consumer reads it.

    metadata                                          {"checkpoint-ts":N}: the cut
    {schema}/meta/schema_{version}_{crc32:010d}.json  database schema files
    {schema}/{table}/meta/schema_{version}_{crc32:010d}.json   table schema files
    {schema}/{table}/{version}/schema.json            the older place of table schema files
    {schema}/{table}/{version}/[{partition id}/][{date}/]CDC{index}.{json|csv}
    {schema}/{table}/{version}/[{partition id}/][{date}/]CDC_{dispatcher}_{index}.{json|csv}
    .../meta/CDC.index, .../meta/CDC_{dispatcher}.index   the last data file's name + "\\n"

A data file is visible once the index file of its directory (and dispatcher) names it or a
later one: files beyond the index are still being written and are left unread (reported).
The date directory (date-separator year/month/day) comes from the TiCDC node's clock and the
file index restarts in each one; file-index-width only pads the index.

Records: one per line (`\\r\\n` or `\\n` terminated); topic `{schema}.{table}`, partition 0 and
offset `file × 2^32 + line`, where `file` numbers the table's data files from 0 in the sink's
own order (table version, partition id, date, dispatcher, file index) and `line` is the 1-based
line: unique in the table, below 2^63, the same on every run over the same files. Changes are
ordered by their commit ts; the offset only breaks ties and names where a record was read.
Offsets jump from one file to the next (a file's line count is not known before it is read),
so the holes of such an archive are not holes in the offsets but data files missing from a
directory: an index file names the directory's last file and the sink numbers its files from 1
without gaps, so a number up to the index that has no file is a missing file (`Plan.holes`,
numbered among the table's files like the file it stands for).

Schemas come from the schema files: the earliest of each table is its starting schema (the
source becomes `--schema`), and a file whose columns differ from the table's previous one
gives the DDL it records (`Query`) as a DDL event at its table version, since the data files
carry none. A new table-version directory alone is not a schema change (TiCDC also starts one
when a table moves between nodes). csv files get their table's columns (the file of their
directory's version, or the latest before it) with each record, for the csv codec.

The root `metadata` checkpoint-ts becomes a watermark of every table read: everything at or
below it is complete, and changes above it are pending.

Where a table's changes provably begin (`complete_after`, for a base export's gap check,
docs/base-exports.md "A gap"): TiCDC names a data directory by a table version that is never
below the start ts of the table sink (dispatcher) writing it, which delivers every commit after
its start ts, so the table's lowest version bounds its start. Files TiCDC expires
(file-expiration-days) are whole date directories before a cut, in the TiCDC node's zone, which
the files do not state: a commit after a ts T cannot have been in one when T is at or after the
start of the table's earliest date directory in every zone (UTC-12 at the latest).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import orjson

from cdc_codecs.base import KafkaRecord
from cdc_codecs.tso import compose
from cdc_codecs.ticdc_csv import COLUMNS_HEADER

from .. import storage
from ..ticdc_offsets import LINE_BITS, MAX_FILES, MAX_LINE, offset  # noqa: F401  (the offsets, shared with the writer)
from .base import LayoutError, Plan, ddl_row, item, long_line_row, watermark_row

NAME = "ticdc-storage"
METADATA = "metadata"
FORMATS = {"json": "canal-json", "csv": "csv"}  # file extension -> protocol

_COMPRESSION = r"(?:\.(?:gz|zst|zstd|lz4|snappy|sz))?"
_DATA = re.compile(
    r"^(?P<schema>[^/]+)/(?P<table>[^/]+)/(?P<version>\d+)/(?:(?P<extra>[^/]+(?:/[^/]+)?)/)?"
    r"CDC(?:_(?P<dispatcher>[^/]+)_)?(?P<index>\d+)\.(?P<ext>json|csv)" + _COMPRESSION + "$")
_INDEX = re.compile(r"^(?P<dir>.+)/meta/CDC(?:_(?P<dispatcher>[^/]+))?\.index$")
_TABLE_SCHEMA = re.compile(r"^[^/]+/[^/]+/meta/schema_\d+_\d{10}\.json$|^[^/]+/[^/]+/\d+/schema\.json$")
_DB_SCHEMA = re.compile(r"^[^/]+/meta/schema_\d+_\d{10}\.json$")
_DATE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")



def _date_days(segment: str) -> int | None:
    """Days since 1970-01-01 of a date directory (year, year-month or day), else None."""
    m = _DATE.match(segment)
    if not m:
        return None
    year, month, day = int(m[1]), int(m[2] or 1), int(m[3] or 1)
    if m[2] is None and not 1970 <= year <= 2200:  # a bare number: a partition id, not a year
        return None
    try:
        return (dt.date(year, month, day) - dt.date(1970, 1, 1)).days
    except ValueError:
        return None


def parse_data_path(rel: str) -> dict | None:
    """The parts of a data file's relative path, or None if it is not one."""
    m = _DATA.match(rel)
    if not m:
        return None
    extra = m["extra"].split("/") if m["extra"] else []
    days = 0
    if extra and (last_days := _date_days(extra[-1])) is not None:  # [partition id/]date
        days, extra = last_days, extra[:-1]
    if len(extra) > 1 or any(not part.isdigit() for part in extra):
        return None
    directory = rel.rsplit("/", 1)[0]
    return {"schema": m["schema"], "table": m["table"], "version": int(m["version"]),
            "partition_id": int(extra[0]) if extra else None, "days": days,
            "dispatcher": m["dispatcher"], "index": int(m["index"]), "ext": m["ext"], "dir": directory}


def base_offset(params: dict) -> int:
    """The offset of a data file item's line 0 (its lines add their number)."""
    return offset(params["file"], 0)


def _file_order(d: dict, rel: str) -> tuple:
    """The sink's own order of a table's data files: table version, partition id, date,
    dispatcher, file index (the directory and name only make it total)."""
    return (d["version"], -1 if d["partition_id"] is None else d["partition_id"], d["days"], d["dir"],
            d["dispatcher"] or "", d["index"], rel)


def number_files(files: list[tuple], visible_up_to: dict) -> tuple[dict, list[tuple]]:
    """Number each table's data files in the sink's order, counting the files missing from a
    directory (a number up to the directory's index file without a data file): ({relative path:
    file number}, [(topic, file number, relative path of the missing file)]). `files`: (relative
    path, parsed path) of the visible data files."""
    by_topic: dict[str, list] = defaultdict(list)
    present: dict[tuple, set] = defaultdict(set)
    for rel, d in files:
        by_topic[f"{d['schema']}.{d['table']}"].append((_file_order(d, rel), rel))
        present[(d["dir"], d["dispatcher"])].add(d["index"])
    for rel, d in files:  # one stand-in per missing number, placed where that file would be
        group = (d["dir"], d["dispatcher"])
        if group not in present:
            continue
        have = present.pop(group)
        width = len(re.search(r"(\d+)\.\w+" + _COMPRESSION + "$", rel)[1])
        name = rel.rsplit("/", 1)[-1]
        prefix = name[:name.rindex(f"{d['index']:0{width}d}")]
        suffix = name[len(prefix) + width:]
        for index in sorted(set(range(1, visible_up_to[group] + 1)) - have):
            missing = f"{d['dir']}/{prefix}{index:0{width}d}{suffix}"
            by_topic[f"{d['schema']}.{d['table']}"].append((_file_order({**d, "index": index}, missing), None, missing))
    numbers, holes = {}, []
    for topic, entries in by_topic.items():
        if len(entries) > MAX_FILES:
            raise LayoutError(f"{topic}: {len(entries)} data files, more than the {MAX_FILES} a table's offsets can number")
        for number, entry in enumerate(sorted(entries, key=lambda e: e[0])):
            if entry[1] is None:
                holes.append((topic, number, entry[2]))
            else:
                numbers[entry[1]] = number
    return numbers, holes


_LATEST_MIDNIGHT_MS = 12 * 3600 * 1000  # a date's midnight in UTC-12, the latest zone, after its UTC midnight
ZONE_OPTION = "time-zone"  # --layout-option: the TiCDC server's local zone, which names the date directories


def _date_start_ms(days: int, zone) -> int:
    """When a date directory's period began: its midnight in `zone`, else the latest of any zone."""
    if zone is None:
        return days * 86_400_000 + _LATEST_MIDNIGHT_MS
    day = dt.date(1970, 1, 1) + dt.timedelta(days=days)
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=zone).timestamp() * 1000)


def complete_after(files: list[tuple], zone=None) -> dict:
    """{topic: [commit ts, table version, earliest date (days since 1970) or None]}: per table,
    the ts after which its data files hold every change: the highest, over its partition
    directories, of the lowest table version (at or above the start ts of the table sink that
    wrote it: tiflow cdc/sink/dmlsink/event_appender.go `createSingleTableTxn`, ticdc
    downstreamadapter/eventcollector/dispatcher_stat.go) and of the latest moment its earliest
    date directory can have begun (nothing after it can lie in an expired earlier date:
    tiflow pkg/sink/cloudstorage/path.go `GenerateDateStr`, `RemoveExpiredFiles`), in
    `zone` (the TiCDC server's, `--layout-option time-zone`) when known.
    `files`: (relative path, parsed path) of the data files."""
    first: dict = {}
    for _, d in files:
        key = (f"{d['schema']}.{d['table']}", d["partition_id"])
        version, days = first.get(key, (d["version"], d["days"]))
        first[key] = (min(version, d["version"]), min(days, d["days"]))
    bounds: dict = {}
    for (topic, _), (version, days) in first.items():
        bound = max(version, compose(_date_start_ms(days, zone))) if days else version
        if topic not in bounds or bound > bounds[topic][0]:
            bounds[topic] = [bound, version, days or None]
    return bounds


def _server_zone(name: str | None):
    """The tzinfo of `--layout-option time-zone` (UTC, an IANA name, +hh:mm), or None."""
    if not name:
        return None
    from cdc_codecs.canal_common import time_zone
    from cdc_codecs.errors import ConfigError

    try:
        return time_zone(name)
    except ConfigError as e:
        raise LayoutError(f"--layout-option {ZONE_OPTION}={name}: {e}") from None


def matches(relatives: list[str]) -> int:
    return sum(1 for rel in relatives if rel == METADATA or _DATA.match(rel) or _INDEX.match(rel))


def _index_number(text: bytes, uri: str) -> int:
    name = text.decode("utf-8", "replace").strip()
    m = re.match(r"^CDC(?:_.+_)?(\d+)\.\w+", name)
    if not m:
        raise LayoutError(f"{uri}: not a TiCDC index file (it holds {name[:80]!r})")
    return int(m[1])


def _read_all(uris: list[str]) -> dict[str, bytes]:
    if not uris:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(uris))) as pool:
        return dict(zip(uris, pool.map(storage.read_bytes, uris)))


def _schemas(uris: list[str]) -> tuple[dict, dict]:
    """(database, table) lower case -> its storage-sink schema versions, oldest first; and
    each schema file's recorded DDL `Query` by URI."""
    from ..schema_files import SchemaFileError, parse_schema_file

    versions: dict = defaultdict(list)
    queries = {}
    for uri, data in _read_all(uris).items():
        try:
            version = parse_schema_file(data, uri)
            queries[uri] = orjson.loads(data).get("Query") or None
        except (SchemaFileError, ValueError) as e:
            raise LayoutError(str(e)) from e
        if version is not None:
            versions[(version.database.lower(), version.table.lower())].append(version)
    return {key: sorted(vs, key=lambda v: v.version) for key, vs in versions.items()}, queries


def schema_changes(schemas: dict, queries: dict) -> list[list]:
    """[database, table, table version, query, schema file] for every schema file whose
    columns differ from the table's previous one: the data files carry no DDL, so the DDL a
    file records (`Query`) is the schema change at its table version. A version whose columns
    are unchanged (a table moved between nodes, a DDL that changes no column) is none."""
    changes = []
    for versions in schemas.values():
        for previous, current in zip(versions, versions[1:]):
            if (previous.columns, previous.keys) != (current.columns, current.keys) and queries.get(current.uri):
                changes.append([current.database, current.table, current.version, queries[current.uri], current.uri])
    return changes


def _columns_at(versions: list, table_version: int) -> list | None:
    """[[name, type, is_pk], ...] of the schema file for a data directory's table version:
    that version's file, else the latest before it (TiCDC reuses an unchanged schema's file)."""
    if not versions:
        return None
    chosen = versions[0]
    for v in versions:
        if v.version <= table_version:
            chosen = v
    keys = set(chosen.keys)
    return [[name, type_text, name in keys] for name, type_text in chosen.columns]


def split_csv_records(data: bytes, quote: str) -> Iterator[bytes]:
    """CSV rows of a file: a quoted value may hold a line break (TiCDC quotes, never escapes,
    when a quote character is set), so rows end at a line break outside quotes."""
    if not quote:
        yield from data.splitlines()
        return
    q = quote.encode()
    start, in_quote, i, n = 0, False, 0, len(data)
    while i < n:
        if data.startswith(q, i):
            in_quote = not in_quote
            i += len(q)
            continue
        if data[i] == 0x0A and not in_quote:
            yield data[start:i].rstrip(b"\r")
            start = i + 1
        i += 1
    if start < n:
        yield data[start:].rstrip(b"\r\n")


def plan(source: str, objects: list, options: dict, protocol: str | None = None,
         protocol_options: dict | None = None) -> Plan:
    unknown = sorted(set(options) - {ZONE_OPTION})
    if unknown:
        raise LayoutError(f"--layout-option {', '.join(unknown)} is not used by {NAME} (it takes {ZONE_OPTION})")
    zone = _server_zone(options.get(ZONE_OPTION))
    data, indexes, table_schemas, db_schemas, metadata = [], {}, [], 0, None
    for o, rel in objects:
        if rel == METADATA:
            metadata = o
        elif (parsed := parse_data_path(rel)) is not None:
            data.append((o, parsed, rel))
        elif m := _INDEX.match(rel):
            indexes[(m["dir"], m["dispatcher"])] = o.uri
        elif _TABLE_SCHEMA.match(rel):
            table_schemas.append(o.uri)
        elif _DB_SCHEMA.match(rel):
            db_schemas += 1
    if not data:
        raise LayoutError(f"{source}: no TiCDC storage-sink data files (<schema>/<table>/<version>/.../CDC*.json|csv)")
    formats = sorted({d["ext"] for _, d, _ in data})
    if len(formats) > 1:
        raise LayoutError(f"{source}: holds both .json and .csv data files; replay one changefeed's output at a time")
    expected = FORMATS[formats[0]]
    if protocol is not None and protocol != expected:
        raise LayoutError(f"{source}: the storage sink wrote .{formats[0]} files, which are the {expected} "
                          f"protocol; run with --protocol {expected}")

    contents = _read_all(sorted(set(indexes.values())) + ([metadata.uri] if metadata else []))
    visible_up_to = {key: _index_number(contents[uri], uri) for key, uri in indexes.items()}
    checkpoint = None
    if metadata is not None:
        try:
            checkpoint = int(orjson.loads(contents[metadata.uri])["checkpoint-ts"])
        except (ValueError, KeyError, TypeError) as e:
            raise LayoutError(f"{metadata.uri}: not a storage-sink metadata file ({type(e).__name__}: {e})") from e

    schemas, queries = _schemas(table_schemas)
    changes = schema_changes(schemas, queries)
    quote = (protocol_options or {}).get("quote", '"')
    items, not_visible, topics = [], [], set()
    by_group = defaultdict(int)
    visible = []
    for o, d, rel in data:
        last = visible_up_to.get((d["dir"], d["dispatcher"]))
        if last is None or d["index"] > last:
            not_visible.append(o.uri)
        else:
            visible.append((o, d, rel))
    numbers, missing = number_files([(rel, d) for _, d, rel in visible], visible_up_to)
    root = data[0][0].uri[:len(data[0][0].uri) - len(data[0][2])]  # the objects' URIs are root + relative path
    holes = tuple({"topic": topic, "partition": 0, "from": offset(number, 1), "to": offset(number, MAX_LINE),
                   "object": root + rel} for topic, number, rel in missing)
    for o, d, rel in visible:
        topic = f"{d['schema']}.{d['table']}"
        topics.add(topic)
        by_group[(d["dir"], d["dispatcher"])] += 1
        extra = {}
        if expected == "csv":
            extra = {"csv_quote": quote,
                     "columns": _columns_at(schemas.get((d["schema"].lower(), d["table"].lower()), []), d["version"])}
        items.append(item(o.uri, o.size, NAME, topic=topic, file=numbers[rel], **extra))
    data_files = len(items)
    if (checkpoint is not None and topics) or changes:
        where = metadata if metadata is not None else data[0][0]
        marked = topics | {f"{c[0]}.{c[1]}" for c in changes}  # every topic read gets the checkpoint
        items.append(item(where.uri, 0, NAME, checkpoint=checkpoint, topics=sorted(marked), changes=changes))
    found = (f"TiCDC storage sink, {expected} ({formats[0]}) files: {data_files} data "
             f"files in {len(by_group)} directories of {len(topics)} tables; {len(not_visible)} files not yet "
             f"visible (beyond their index file), {len(holes)} missing (numbered up to their index file, absent); "
             f"{len(table_schemas)} table and {db_schemas} database schema files, "
             f"{len(changes)} schema changes between them; "
             + (f"checkpoint-ts {checkpoint}" if checkpoint is not None else
                "no root metadata file (no checkpoint: the cut is the archive's end)"))
    return Plan(NAME, tuple(items), found, tuple(not_visible),
                schema_uri=source if table_schemas else None, per_file_offsets=True, holes=holes,
                complete_after=complete_after([(rel, d) for _, d, rel in data], zone),
                info={"protocol": expected, "checkpoint_ts": checkpoint, "tables": len(topics),
                      "missing_files": len(holes), "missing_objects": [h["object"] for h in holes[:100]],
                      "table_schema_files": len(table_schemas), "database_schema_files": db_schemas,
                      "schema_changes": len(changes)})


def read(uri: str, params: dict) -> Iterator:
    if "topics" in params:  # the sink's own events: schema changes and the checkpoint
        for database, table, version, query, schema_uri in params["changes"]:
            yield ddl_row(schema_uri, f"{database}.{table}", database, table, version, query)
        if params["checkpoint"] is not None:
            for topic in params["topics"]:
                yield watermark_row(uri, topic, 0, params["checkpoint"])
        return
    if "columns" in params:  # csv: the table's columns travel with each row (csv has no types)
        headers = () if params["columns"] is None else ((COLUMNS_HEADER, orjson.dumps(params["columns"])),)
        stream = storage.open_stream(uri)
        try:
            lines = split_csv_records(stream.read(), params["csv_quote"])
        finally:
            stream.close()
    else:
        headers, lines = (), storage.iter_lines(uri)
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if isinstance(line, storage.LongLine):
            yield long_line_row(uri, line_no, line, {"topic": params["topic"], "partition": 0,
                                                      "offset": offset(params["file"], line_no)})
            continue
        yield line_record(uri, params, line_no, line, headers), line_no


def line_record(uri: str, params: dict, line_no: int, line: bytes, headers=()) -> KafkaRecord:
    """The record of one non-blank line of a data file (json or csv; also for the compiled line reader's
    leftovers, spark_apps.archive_io)."""
    return KafkaRecord(params["topic"], 0, offset(params["file"], line_no), None, None, line,
                       headers, uri)
