"""The one interface of the output targets: a `Target` writes a frame the plan built
(spark_apps.outputs.plan) and returns the objects it wrote.

The plan decides *what* is written (the last change per key, the SCD2 versions, the topics'
changes with their watermarks); a target decides only *where and how*: it places, encodes and
writes the rows in Spark tasks and returns one WRITTEN row (spark_apps.schema) per object or
file, which the manifest lists. Adding an output is one module of this package with one
`Target` subclass (found by `target_for`, no list to edit), its option in the option table
(spark_apps.options, spark_apps.contract) and its docs.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

# what a frame handed to `Target.write` holds
SNAPSHOT = "snapshot"  # the rows live at the cut
HISTORY = "history"  # one version per change of every key, with the SCD2 columns
TOPICS = "topics"  # every applied change and watermark, placed in output topics
WINDOW = "window"  # each key's last change in a --since window, `_op` upsert or delete (merged into tables)


@dataclass(frozen=True)
class TargetSpec:
    """What the records are encoded as and spread over: the target protocol's codec class
    (cdc_codecs.codec_class: its `ddl_placement`), the protocol and its `--target-option`s,
    and the output partitions per topic (`--target-partitions`, else the source's)."""

    codec: Any
    protocol: str
    options: dict = field(default_factory=dict)
    partitions: int = 1


class OutputError(RuntimeError):
    """The output cannot be written as asked; the message says why (the driver reports it)."""


class Target(ABC):
    """One output target. `write(df, kind, ...)` gets one of two shapes of frame:

    * `records = True` (Kafka-record archive, Kafka, TiCDC storage sink): events with their
      place in the output (`out_topic`, `out_partition`) and their order there (`sort_point`,
      `sort_rank`), kinds SNAPSHOT and TOPICS; `prepare(event)` gives what is encoded (the
      snapshot's projection on the table schemas, the history's declared precisions) or None;
    * `records = False` (Parquet, Delta, Iceberg): the event columns and `timeline` (rows per
      table), kinds SNAPSHOT and HISTORY (with the SCD2 columns), and WINDOW for a target that
      `merges_windows` (a --since snapshot merged into the tables, not written whole);
      `table_rows` are the rows per table the plan counted.

    `plan` (an OutputPlan) is what every target may read: spark, args, cut, staging,
    partitions, target_protocol, target_options, schemas(), run, kafka. After `write`,
    `committed` holds what a target committed itself, per table (Delta/Iceberg: the
    manifest's `output.lakehouse`), else None."""

    records: ClassVar[bool]
    merges_windows: ClassVar[bool] = False
    _known: ClassVar[list[type[Target]]] = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Target._known.append(cls)

    def __init__(self, plan):
        self.plan = plan
        self.committed: dict | None = None

    @classmethod
    @abstractmethod
    def chosen(cls, args) -> bool:
        """Whether the options ask for this target (one target answers yes to any accepted request)."""

    @abstractmethod
    def write(self, df, kind: str, prepare: Callable[[dict], dict | None] | None = None,
              table_rows: list[dict] | None = None) -> list[dict]:
        """Write the frame of `kind`; the WRITTEN rows, as dicts."""


def target_for(args) -> type[Target]:
    """The one target the options choose, among the Target subclasses of this package's modules."""
    for module in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        importlib.import_module(f"{__package__}.{module.name}")
    chosen = [cls for cls in Target._known if cls.chosen(args)]
    if len(chosen) != 1:
        raise OutputError(f"--target-format {args.output_format} --target-layout {args.target_layout} to "
                          f"{args.output}: {len(chosen)} output targets take it ({', '.join(c.__name__ for c in chosen)})")
    return chosen[0]


def tasks(spark) -> int:
    """Write tasks for a frame written per table: two per core."""
    return max(1, spark.sparkContext.defaultParallelism * 2)


def written_rows(ordered, fn) -> list[dict]:
    """Run the writer `fn` (a mapInArrow function) over the ordered frame: its WRITTEN rows."""
    from ..schema import WRITTEN_STRUCT

    return [r.asDict() for r in ordered.mapInArrow(fn, WRITTEN_STRUCT).collect()]
