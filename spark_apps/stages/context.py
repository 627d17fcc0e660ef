"""What every stage of a replay shares (`RunContext`) and what each hands the next (one small
result dataclass per stage), so that no stage takes a long list of positional values."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("cdc_replay")


class ReplayError(RuntimeError):
    """A run that cannot proceed or must fail; the message says why and what to do."""


@dataclass
class RunContext:
    """One run: its request and the places and settings validated before Spark starts; `spark`,
    `progress`, `objects`, `layout_plan` and `files` are filled in as the driver sets them up."""

    args: Any  # spark_apps.options.ReplayArgs
    run_id: str
    started: float
    source: str  # normalized (or a kafka:// URI)
    output: str  # normalized (or a kafka:// URI)
    home: str  # where the manifest, quarantine and staging go
    staging: str
    source_codec: Any
    target_protocol: str
    target_options: dict
    base: dict | None  # the base snapshot's manifest
    spark: Any = None
    progress: Any = None  # spark_apps.progress.Progress
    objects: list = field(default_factory=list)  # what the decode tasks read (none for Kafka)
    layout_plan: Any = None  # spark_apps.layouts plan of an archive source
    files: str | None = None  # the decode tasks' Parquet folder (local mode), or None
    base_export: Any = None  # --base-export read by stages/base.py (spark_apps.base_export.BaseExport)
    base_topic: str | None = None  # the source topic its rows are given (the archive's one topic)
    base_start: dict | None = None  # how each partition continues the export (stages/base.py), counted

    def say(self, message: str, *values, warn: bool = False) -> None:
        """One log line of this run."""
        (log.warning if warn else log.info)("[replay %s] " + message, self.run_id, *values)


@dataclass
class Decoded:
    """The decode pass (stages/decode.py): the persisted lean rows and what the tasks gathered."""

    decoded: Any  # the persisted decode (released by `decode.release`)
    events: Any  # the lean event rows
    partition_stats: list[dict]
    schema_dictionary: dict  # column-list id -> (names, types, flags)
    ddl_events: list[dict]
    ddl_statements: set  # (database, table, query) of the DDL events with a place
    decoder: dict  # manifest.decoder_observed


@dataclass
class Tagged:
    """Dedupe and cut (stages/dedupe.py): every event with its status."""

    cut: dict  # manifest.compute_cut
    offset_gaps: list[dict]
    gap_count: int
    ready: Any  # the events ordered (persisted when a running event time orders them)
    duplicates: Any  # the duplicate places (persisted; None when collected: `marks` holds them)
    tagged: Any  # lean rows with `status`
    dictionary: Any  # transforms.plan_dictionary
    marks: Any = None  # `duplicates` as tag_status joined them (transforms.Duplicates; tag_effects joins them again)
    inferred: Any = None  # the tombstones' inferred commit ts (persisted; transforms.inferred_commit_ts) or None


@dataclass
class History:
    """Schema history (stages/history.py): the DDL applied, the summary of the tagged events,
    and the events and counts after rows of missing or unknown tables moved to quarantine."""

    history: Any  # ddl.SchemaHistory
    summary: dict  # summary.summarise
    frame: Any  # the timeline's (start, width) or None
    ddl_log: list[dict]
    ddl_failures: list[dict]
    conflicts: list[str]
    counts: list[dict]
    lean: Any  # the tagged lean rows
    dictionary: Any  # their column lists (transforms.plan_dictionary)
    latest: Any = None  # the last change per key (stages/engine.py; a frame the snapshot persists)
    versions: Any = None  # the SCD2 versions of every key (stages/engine.py; a frame the history persists)
    unknown: list = field(default_factory=list)  # --require-schema: (database, table) quarantined for lack of a schema

    @functools.cached_property
    def tagged(self):
        """The tagged rows with full images, built when an output or the quarantine reads them
        (a lean snapshot does not: each DataFrame step costs the driver an analysis)."""
        from spark_apps import transforms as T
        from spark_apps.schema import DECODED_FIELD_NAMES

        return T.full_images(self.lean, self.dictionary, list(DECODED_FIELD_NAMES))


@dataclass
class Written:
    """The output stage: what was written, and what the manifest adds about the target."""

    objects: list[dict]
    table_rows: list[dict] | None
    lake_tables: dict | None = None
    kafka: dict | None = None
