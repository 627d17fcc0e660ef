"""Archive layouts: how the objects under `--source` hold Kafka-like records.

A layout has two halves, one module each (kafka_records, ticdc_storage, kafka_connect_s3):

* `plan(source, objects, options)` runs on the driver over the object listing (and at most a
  few small metadata objects): which objects are read, with which parameters (`Item`), which
  are deliberately left unread (not yet visible), and what was found, for the log and the
  manifest;
* `read(uri, params)` runs in a Spark task for one item and yields `(KafkaRecord, line)` pairs,
  which the protocol codec decodes exactly as records read from Kafka, or finished rows of
  DECODED_ARROW_SCHEMA (quarantine rows, and events the layout itself carries, such as the
  storage sink's checkpoint as a watermark).

So deduplication, the cut and the quarantine work the same whatever the layout. Each record
has a stable (topic, partition, offset) coordinate; layouts without Kafka offsets define one
(see docs/layouts.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import orjson

from .. import storage
from . import kafka_connect_s3, kafka_records, ticdc_storage
from .base import LayoutError, Plan

log = logging.getLogger("cdc_replay")

MODULES = {
    "kafka-records": kafka_records,
    "ticdc-storage": ticdc_storage,
    "kafka-connect-s3": kafka_connect_s3,
}
LAYOUTS = ("auto", *MODULES)

__all__ = ["LAYOUTS", "LayoutError", "Plan", "detect", "plan", "read"]


def detect(relatives: list[str]) -> tuple[str, str]:
    """The layout the relative object names look like, and why (for the log)."""
    scores = {name: module.matches(relatives) for name, module in MODULES.items()}
    best = max(scores, key=lambda name: scores[name])
    if scores[best] == 0:
        raise LayoutError(
            "no archive objects found: looked for Kafka-record archives (*.jsonl[.gz|.zst|.lz4|.snappy]), "
            "a TiCDC storage sink (<schema>/<table>/<version>/.../CDC*.json|csv, root `metadata`) and "
            "Kafka Connect S3 sink objects (<topic>+<partition>+<start offset>.<ext>)")
    others = ", ".join(f"{name}: {count}" for name, count in scores.items() if name != best and count)
    return best, f"{scores[best]} objects look like {best}" + (f" (also {others})" if others else "")


def plan(source: str, layout: str, options: dict[str, str] | None = None, protocol: str | None = None,
         protocol_options: dict[str, str] | None = None) -> Plan:
    """List `source` and plan its reading with `layout` (`auto`: detect it) for `protocol`
    (checked against what the layout holds; its options can matter for splitting records)."""
    source = storage.normalize(source)
    objects = storage.list_objects(source)
    relatives = []
    for o in objects:
        rel = storage.relative(o.uri, source) if o.uri != source else o.uri.rsplit("/", 1)[-1]
        relatives.append(rel)
    reason = f"--layout {layout}"
    if layout == "auto":
        layout, reason = detect(relatives)
        reason = f"--layout auto: {reason}"
    elif layout not in MODULES:
        raise LayoutError(f"unknown layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    result = MODULES[layout].plan(source, list(zip(objects, relatives)), dict(options or {}), protocol,
                                  dict(protocol_options or {}))
    result = dataclasses.replace(result, layout=layout, found=f"{reason}; {result.found}")
    log.info("layout %s", result.found)
    return result


def read(uri: str, params: str) -> Iterator:
    """Records (and finished rows) of one planned item, in a Spark task."""
    decoded = orjson.loads(params)
    return MODULES[decoded["layout"]].read(uri, decoded)
