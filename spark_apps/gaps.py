"""Holes in the Kafka offsets of each source partition (a missing archive object, a truncated
upload): Kafka gives every record of a partition the next offset, so between the lowest and
the highest offset the archive holds, every offset should be there.

Two small Spark steps, nothing per offset reaches the driver:

* per partition, the lowest and highest offset (in the partition statistics the decode tasks
  gather: spark_apps/lean_decode.py) and the number of distinct offsets (`count_offsets`); a
  partition whose distinct count is `max - min + 1` has no hole, and one read twice
  (overlapping objects) is not counted twice. The distinct count comes without a shuffle from
  the decode tasks' runs of strictly increasing offsets (spark_apps/lean_decode.py): runs whose
  ranges do not overlap hold distinct offsets, and overlapping runs with no hole cover their
  union (runs with holes inside that union add nothing); only a partition where neither proves
  the count is counted by a Spark job;
* only for partitions with holes, a window over their distinct offsets gives each hole's
  `from` / `to` (`gaps`), at most `limit` of them (the total is counted all the same).

A producer that writes transactions or a compacted topic also leaves offsets without records
(transaction markers, compacted-away keys): such holes are reported the same way, which is why
they fail the run only with `--require-contiguous`.
"""

from __future__ import annotations

GAPS_LISTED = 1000  # holes listed in the manifest; more are counted, not listed


def proven_offsets(runs: list[dict]) -> int | None:
    """The distinct offsets in one partition's runs ({lo, hi, n}: n strictly increasing offsets
    from lo to hi; n < 0: not known), or None when the runs do not prove it. A run alone holds n;
    where runs overlap, the ones without a hole cover exactly their union, and a run with holes
    (or an unknown n) adds nothing when that union contains it: a partition read by several decode
    tasks, or an object read twice, is proven as long as every run with holes lies inside
    hole-free ones (docs/engine.md, "Where a 300k replay's time goes")."""
    total, cluster = 0, []
    for run in sorted(runs, key=lambda r: (r["lo"], r["hi"])) + [None]:
        if run is not None and cluster and run["lo"] <= max(r["hi"] for r in cluster):
            cluster.append(run)
            continue
        if len(cluster) == 1 and cluster[0]["n"] >= 0:
            total += cluster[0]["n"]
        elif cluster:
            covered = _covered(cluster)
            if covered is None:
                return None
            total += covered
        cluster = [run]
    return total


def _covered(cluster: list[dict]) -> int | None:
    """Offsets in the union of the hole-free runs of `cluster` (sorted by lo), when every other
    run lies inside one stretch of that union; else None."""
    whole: list[list[int]] = []
    for r in cluster:
        if r["n"] == r["hi"] - r["lo"] + 1:
            if whole and r["lo"] <= whole[-1][1] + 1:
                whole[-1][1] = max(whole[-1][1], r["hi"])
            else:
                whole.append([r["lo"], r["hi"]])
    import bisect

    starts = [lo for lo, _ in whole]  # disjoint and sorted: the one stretch that could hold a run
    for r in cluster:
        if r["n"] != r["hi"] - r["lo"] + 1:
            i = bisect.bisect_right(starts, r["lo"]) - 1
            if i < 0 or r["hi"] > whole[i][1]:
                return None
    return sum(hi - lo + 1 for lo, hi in whole)


def count_offsets(records, partition_stats: list[dict], runs: list[dict]) -> None:
    """Set each partition's `offsets` (distinct offsets of its records): from the decode tasks'
    `runs` where they prove it, else by one Spark job over `records` for the partitions they
    do not (overlapping archive objects with holes, or very scattered offsets)."""
    from pyspark.sql import functions as F

    by_partition: dict[tuple, list[dict]] = {}
    for run in runs:
        by_partition.setdefault((run["topic"], run["partition"]), []).append(run)
    unproven = []
    for s in partition_stats:
        s["offsets"] = proven_offsets(by_partition.get((s["topic"], s["partition"]), []))
        if s["offsets"] is None:
            unproven.append(s)
    if not unproven:
        return
    condition = F.lit(False)
    for s in unproven:
        condition = condition | ((F.col("topic") == s["topic"]) & F.col("partition").eqNullSafe(s["partition"]))
    counted = {(r["topic"], r["partition"]): r["offsets"] for r in records.where(
        condition & (F.col("event_index") == 0) & F.col("offset").isNotNull()).groupBy("topic", "partition").agg(
        F.countDistinct("offset").alias("offsets")).collect()}
    for s in unproven:
        s["offsets"] = counted.get((s["topic"], s["partition"]), 0)


def missing_offsets(stats: dict) -> int:
    """Offsets between the partition's lowest and highest that no record holds (as the
    statistics say when the layout numbers offsets per object: `layout_holes`)."""
    if "missing_offsets" in stats:
        return stats["missing_offsets"]
    if stats.get("min_offset") is None:
        return 0
    return stats["max_offset"] - stats["min_offset"] + 1 - stats["offsets"]


def layout_holes(partition_stats: list[dict], holes, limit: int = GAPS_LISTED) -> tuple[list[dict], int]:
    """The holes of a layout whose offsets are numbered per object (TiCDC's storage sink: line
    numbers, which jump from one data file to the next): the objects it knows are missing,
    each where its records would be. The partitions' offsets between are not holes: each
    partition's statistics say so (`missing_offsets` 0: how many records a missing file held
    is not known)."""
    for s in partition_stats:
        s["missing_offsets"] = 0
    listed = sorted(holes, key=lambda h: (h["topic"], h["partition"], h["from"]))
    return [{**h, "missing": None} for h in listed[:limit]], len(listed)


def gaps(decoded, partition_stats: list[dict], limit: int = GAPS_LISTED, layout=None) -> tuple[list[dict], int]:
    """([{topic, partition, from, to, missing}], number of holes) for the partitions whose
    statistics show missing offsets; ([], 0) without touching the data when none do.
    `layout`: the source's layout plan (spark_apps.layouts.base.Plan); when it numbers offsets
    per object, its missing objects are the holes (`layout_holes`)."""
    if layout is not None and layout.per_file_offsets:
        return layout_holes(partition_stats, layout.holes, limit)
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    holed = [(s["topic"], s["partition"]) for s in partition_stats if missing_offsets(s) > 0]
    if not holed:
        return [], 0
    condition = F.lit(False)
    for topic, partition in holed:
        condition = condition | ((F.col("topic") == topic) & (F.col("partition") == partition))
    offsets = (decoded.where(condition & (F.col("event_index") == 0) & F.col("offset").isNotNull())
               .select("topic", "partition", "offset").distinct())
    previous = F.lag("offset").over(Window.partitionBy("topic", "partition").orderBy("offset"))
    holes = (offsets.withColumn("_previous", previous)
             .where(F.col("offset") - F.col("_previous") > 1)
             .select("topic", "partition", (F.col("_previous") + 1).alias("from"), (F.col("offset") - 1).alias("to"))
             .withColumn("missing", F.col("to") - F.col("from") + 1)
             .persist())
    try:
        total = holes.count()
        listed = [r.asDict() for r in holes.orderBy("topic", "partition", "from").limit(limit).collect()]
    finally:
        holes.unpersist()
    return listed, total
