"""Which archive objects a data interval covers, and where an interval's output goes: pure
functions of the object listing and the interval (tests assert them without any server).

An object's archive time is read from Hive-style time partitions in its key when it has them
(`dt=2026-01-01/hour=00/...`, `year=2026/month=01/day=01/hour=00/...`, as Kafka Connect's
S3 sink and Secor write them), else its LastModified time. An interval [start, end) takes the
objects whose archive time t satisfies start <= t < end: every object belongs to exactly one
interval, so running every interval once reads every object once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import posixpath
import re

ARCHIVE_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".jsonl.lz4", ".jsonl.snappy", ".jsonl.sz")
_PART = re.compile(r"^(year|month|day|hour|hr|minute|dt|date)=([0-9][0-9\-:T]*)$")


@dataclasses.dataclass(frozen=True)
class ArchiveObject:
    uri: str
    size: int
    last_modified: dt.datetime | None = None

    @property
    def key(self) -> str:
        """The path below the bucket (or the absolute local path)."""
        if self.uri.startswith("s3://"):
            return self.uri[len("s3://"):].partition("/")[2]
        return self.uri


def is_archive_object(relative_path: str) -> bool:
    """As cdc_codecs.archive.is_archive_object (tests check they agree), without importing
    the codecs: record objects only, no `_*` / `.*` path segments."""
    if not relative_path.endswith(ARCHIVE_SUFFIXES):
        return False
    return not any(part.startswith(("_", ".")) for part in relative_path.split("/") if part)


def relative(uri: str, prefix: str) -> str:
    prefix = prefix.rstrip("/") + "/"
    if not uri.startswith(prefix):
        raise ValueError(f"{uri} is not under {prefix}")
    return uri[len(prefix):]


def path_time(relative_path: str) -> dt.datetime | None:
    """The start of the time partition named in the path, or None when it names none."""
    fields: dict[str, str] = {}
    for segment in relative_path.split("/")[:-1]:
        match = _PART.match(segment)
        if match:
            fields[match.group(1)] = match.group(2)
    if not fields:
        return None
    day = fields.get("dt") or fields.get("date")
    try:
        if day:
            moment = dt.datetime.fromisoformat(day[:10])
        elif "year" in fields:
            moment = dt.datetime(int(fields["year"]), int(fields.get("month", 1)), int(fields.get("day", 1)))
        else:
            return None
        hour = fields.get("hour") or fields.get("hr")
        if hour is not None:
            moment = moment.replace(hour=int(hour))
        if "minute" in fields:
            moment = moment.replace(minute=int(fields["minute"]))
    except ValueError:
        return None
    return moment.replace(tzinfo=dt.timezone.utc)


def archive_time(obj: ArchiveObject, source: str) -> tuple[dt.datetime | None, str]:
    """(time, "path" | "last-modified")."""
    moment = path_time(relative(obj.uri, source))
    if moment is not None:
        return moment, "path"
    return obj.last_modified, "last-modified"


def select_window(objects: list[ArchiveObject], source: str, start: dt.datetime,
                  end: dt.datetime) -> tuple[list[ArchiveObject], dict]:
    """The archive objects of [start, end), and counts of how their times were found."""
    chosen, how = [], {"path": 0, "last-modified": 0, "outside": 0, "not-archive": 0}
    for obj in objects:
        if not is_archive_object(relative(obj.uri, source)):
            how["not-archive"] += 1
            continue
        moment, kind = archive_time(obj, source)
        if moment is not None and start <= moment < end:
            chosen.append(obj)
            how[kind] += 1
        else:
            how["outside"] += 1
    return chosen, how


def common_prefix(uris: list[str]) -> str:
    """The deepest folder holding every URI."""
    folders = [posixpath.dirname(u) for u in uris]
    prefix = posixpath.commonpath([f.replace("s3://", "s3:/", 1) for f in folders])
    return prefix.replace("s3:/", "s3://", 1) if uris[0].startswith("s3://") else prefix


def direct_source(chosen: list[ArchiveObject], objects: list[ArchiveObject], source: str) -> str | None:
    """A prefix the app can read the window from directly (no copies): the deepest folder
    holding every chosen object, if it holds no other archive object. None otherwise."""
    if not chosen:
        return None
    prefix = common_prefix([o.uri for o in chosen])
    if not (prefix + "/").startswith(source.rstrip("/") + "/"):
        return None
    chosen_uris = {o.uri for o in chosen}
    for obj in objects:
        if obj.uri.startswith(prefix + "/") and obj.uri not in chosen_uris \
                and is_archive_object(relative(obj.uri, prefix)):
            return None
    return prefix


def interval_label(start: dt.datetime) -> str:
    return start.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def interval_output(base: str, start: dt.datetime) -> str:
    """Where the output of the interval starting at `start` goes: one prefix per interval,
    replaced as a whole when the interval is replayed again."""
    return f"{base.rstrip('/')}/{interval_label(start)}"
