"""Events per table over commit time, for the monitoring page's chart.

The replay's manifest has per-table totals and commit ts ranges, not a time series. After a run,
the validate task reads the archive objects the run read once more (a plain decode with the
codec, no Spark), bounded: at most `max_bytes` of objects, spread over the list, the counts then
scaled up and the profile marked as sampled. Events are bucketed by commit time (within the run's
commit ts window, if it has one) per table. Undecodable records are skipped here: the replay
already quarantined and counted them.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable

BUCKETS = 60
MAX_BYTES = 16_000_000


def choose(objects: list[tuple[str, int]], max_bytes: int) -> list[tuple[str, int]]:
    """All objects if they fit in `max_bytes`, else a spread of them that does (at least one)."""
    total = sum(size for _, size in objects)
    if total <= max_bytes or not objects:
        return list(objects)
    chosen, used = [], 0
    step = total / max_bytes
    for i in range(0, len(objects)):
        if len(chosen) < max(1, int(i / step) + 1) and used + objects[i][1] <= max_bytes:
            chosen.append(objects[i])
            used += objects[i][1]
    return chosen or [min(objects, key=lambda o: o[1])]


def lines_of(data: bytes, uri: str) -> list[bytes]:
    if uri.endswith(".gz"):
        data = gzip.decompress(data)
    return [line for line in data.split(b"\n") if line.strip()]


def profile(objects: list[tuple[str, int]], read: Callable[[str], bytes], protocol: str, options: dict, *,
            window: tuple[int | None, int | None] = (None, None), buckets: int = BUCKETS,
            max_bytes: int = MAX_BYTES) -> dict | None:
    """{"start_ms", "bucket_ms", "buckets", "tables": {table: [events per bucket]}, "sampled": fraction
    of bytes read (1.0 = all), "objects_read"} or None when no event has a commit ts."""
    from cdc_codecs import get_codec
    from cdc_codecs.archive import parse_line

    codec = get_codec(protocol, options)
    since, until = window
    chosen = choose(sorted(objects), max_bytes)
    total = sum(size for _, size in objects) or 1
    read_bytes = sum(size for _, size in chosen)
    counts: Counter = Counter()
    for uri, _size in chosen:
        for line in lines_of(read(uri), uri):
            try:
                events = codec.decode(parse_line(line, uri))
            except Exception:  # noqa: BLE001 - quarantined by the replay already
                continue
            for event in events:
                ts = event.get("commit_ts")
                if event["kind"] not in ("row", "ddl") or not ts or not event.get("table"):
                    continue
                if (since is not None and ts <= since) or (until is not None and ts > until):
                    continue
                counts[(f"{event.get('database') or ''}.{event['table']}".strip("."), ts >> 18)] += 1
    if not counts:
        return None
    lo = min(ms for _, ms in counts)
    hi = max(ms for _, ms in counts) + 1
    if since is not None and until is not None:  # a window: the buckets tile it
        lo, hi = (since + 1) >> 18, (until >> 18) + 1
    width = max(1, -(-(hi - lo) // buckets))
    scale = total / read_bytes if read_bytes else 1.0
    tables: dict[str, list[float]] = {}
    for (table, ms), n in counts.items():
        index = min(buckets - 1, max(0, (ms - lo) // width))
        tables.setdefault(table, [0] * buckets)[index] += n * scale
    return {"start_ms": lo, "bucket_ms": width, "buckets": buckets,
            "tables": {t: [round(v, 2) for v in values] for t, values in sorted(tables.items())},
            "sampled": round(read_bytes / total, 4), "objects_read": len(chosen), "objects": len(objects)}
