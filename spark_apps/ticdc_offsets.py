"""The offsets of TiCDC storage-sink data files, shared by the layout that reads them
(spark_apps.layouts.ticdc_storage) and the target that writes them (spark_apps.outputs.ticdc_storage),
so neither imports the other.

A record's offset is `file × 2^32 + line`: `file` numbers the table's data files from 0 in the
sink's own order, `line` is the 1-based line in the file (docs/layouts.md)."""

from __future__ import annotations

LINE_BITS = 32  # lines per data file; the file number takes the 31 bits above (a signed 64-bit offset)
MAX_LINE = (1 << LINE_BITS) - 1
MAX_FILES = 1 << (63 - LINE_BITS)  # data files per table


def offset(file: int, line: int) -> int:
    """The offset of line `line` (1-based) of the table's data file number `file` (from 0)."""
    return (file << LINE_BITS) | min(line, MAX_LINE)
