"""One large data file read by several tasks, each owning a byte range (issue 30 point 6).

A range [a, b) owns the statements (SQL) or records (CSV) that START in it: it reads from
byte a-1, skips to the first start at or after a (range 0: byte 0), and reads on past b to
the first start at or after b, where the next range's first statement begins. Both ends
are found by the same rule, so every start belongs to exactly one range.

A start is a line start, which needs a raw LF never to occur inside a value, as the
producers write them (docs/base-exports.md "Large exports" cites the sources):

* SQL (Dumpling with its default --escape-backslash, mysqldump): strings escape LF and CR
  as `\\n`/`\\r`, binary is `x'..'`/`0x..` or escaped `_binary '..'`. A statement start is
  a line beginning `INSERT INTO ``, `INSERT IGNORE INTO `` or `REPLACE INTO ``. Anything
  else that could put such a line inside a statement (a trigger or routine body in a
  `/*!50003 ... */` comment) makes the range before it end inside that statement, which the
  parser reports (ExportFormatError, naming the byte) instead of reading wrong rows.
* CSV (Dumpling, --escape-backslash): CR and LF inside values are escaped, so every line
  is one record; the header (line 0) belongs to range 0 and the others read it from byte 0.

Not split (one task reads the file): compressed files (gzip, zstd and snappy streams can
only be decoded from their beginning), and --escape-backslash=false output (values keep raw
newlines, in CSV and in SQL strings, so no byte tells a record start from a value's inside).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .discover import DataFile
from .rows import ExportFormatError, read_csv_rows_at, read_sql_rows_at

SPLIT_BYTES = 128 << 20
SPLIT_ENV = "CDC_REPLAY_EXPORT_SPLIT_BYTES"

SQL_START = re.compile(rb"\n(?=(?:INSERT (?:IGNORE )?|REPLACE )INTO `)")
LINE_START = re.compile(rb"\n")
_LOOKAHEAD = 24  # bytes after an LF that decide whether a statement starts there


def split_bytes(value: int | None = None) -> int:
    """The range size: `value`, else $CDC_REPLAY_EXPORT_SPLIT_BYTES, else 128 MiB; 0 or less
    reads every file whole."""
    if value is not None:
        return value
    env = os.environ.get(SPLIT_ENV, "").strip()
    return int(env) if env else SPLIT_BYTES


def unsplittable(uri: str, file_format: str, escape_backslash: bool, dialect=None) -> str | None:
    """Why the file must be read by one task, or None."""
    from spark_apps import storage

    if storage.compression_of(uri):
        return "compressed: the stream decodes only from its beginning"
    if not escape_backslash:
        return "--escape-backslash=false: values may hold raw newlines"
    if file_format == "csv" and dialect is not None and any(c in "\r\n" for c in dialect.separator + dialect.delimiter):
        return "the CSV separator or delimiter holds a newline"
    return None


def ranges(size: int, split: int) -> list[tuple[int, int | None]]:
    """[(start, end)] of equal ranges of about `split` bytes; [(0, None)] (the whole file)
    when the file is not larger than `split` or `split` <= 0."""
    if split <= 0 or size <= split:
        return [(0, None)]
    count = math.ceil(size / split)
    step = math.ceil(size / count)
    return [(start, min(start + step, size)) for start in range(0, size, step)]


class _Window:
    """The bytes of a file read from `base` on, of which `buf` is still held."""

    def __init__(self, chunks: Iterable[bytes], base: int):
        self.chunks = iter(chunks)
        self.buf = b""
        self.base = base
        self.eof = False

    def more(self) -> bool:
        for chunk in self.chunks:
            if chunk:
                self.buf += chunk
                return True
        self.eof = True
        return False

    def drop(self, upto: int) -> None:
        self.buf = self.buf[upto - self.base:]
        self.base = upto

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if close:
            close()


def _until_start(w: _Window, offset: int, start: re.Pattern):
    """Yield the window's bytes before the first start at or after `offset` (> 0), leaving
    the window there; returns whether one was found (False: the file ended)."""
    while w.base + len(w.buf) < offset:  # the byte before `offset` is not in yet
        yield w.buf
        w.drop(w.base + len(w.buf))
        if not w.more():
            return False
    if offset - 1 > w.base:
        yield w.buf[:offset - 1 - w.base]
        w.drop(offset - 1)
    pos = 0
    while True:
        m = start.search(w.buf, pos)
        if m is not None and (w.eof or m.start() + 1 + _LOOKAHEAD <= len(w.buf)):
            yield w.buf[:m.start() + 1]
            w.drop(w.base + m.start() + 1)
            return True
        if w.eof:
            yield w.buf
            w.drop(w.base + len(w.buf))
            return False
        keep = max(pos, len(w.buf) - _LOOKAHEAD - 1, 0)  # an LF after this may still start one
        yield w.buf[:keep]
        w.drop(w.base + keep)
        pos = 0
        w.more()


def _drain(gen) -> bool:
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


def owned(chunks_from: Callable[[int], Iterable[bytes]], start: int, end: int | None,
          pattern: re.Pattern) -> tuple[int, Iterator[bytes]]:
    """(c, the bytes [c, e)) of the range [start, end): c the first start at or after
    `start` (0 for the first range), e the first at or after `end` (or the file's end).
    `chunks_from(offset)` gives the file's bytes from `offset` on."""
    if start == 0:
        w = _Window(chunks_from(0), 0)
        c = 0
    else:
        w = _Window(chunks_from(start - 1), start - 1)
        if not _drain(_until_start(w, start, pattern)) or (end is not None and w.base >= end):
            w.close()
            return start, iter(())  # no start in the range: it owns nothing
        c = w.base

    def body():
        try:
            if end is None:
                yield w.buf
                yield from w.chunks
            else:
                yield from _until_start(w, end, pattern)
        finally:
            w.close()

    return c, body()


# ----------------------------------------------------------------------------- a task's part

@dataclass(frozen=True)
class Part:
    """One task's share of a data file: the whole file (`end` None) or the range [start, end)."""

    file: DataFile
    index: int
    start: int = 0
    end: int | None = None


def parts(files: Iterable[DataFile], split: int, escape_backslash: bool = True, dialect=None) -> list[Part]:
    """The parts of every file: ranges of about `split` bytes for a large file that can be
    split, else the whole file."""
    out = []
    for f in files:
        whole = unsplittable(f.uri, f.format, escape_backslash, dialect) is not None
        for i, (start, end) in enumerate([(0, None)] if whole else ranges(f.size, split)):
            out.append(Part(f, i, start, end))
    return out


def part_rows(part: Part, converters: dict, dialect=None, escape_backslash: bool = True,
              chunks_from: Callable[[int], Iterable[bytes]] | None = None) -> Iterator[tuple]:
    """(database, table, ordinal, {column: canonical bytes}) of the rows the part owns. The
    ordinal is the row's byte offset in the (decompressed) file: unique in the file, the same
    however the file is split. `chunks_from(offset)`: the file's bytes from `offset` (default:
    the stored object, decompressed when the part is the whole file)."""
    from spark_apps import storage

    f = part.file
    if chunks_from is None:
        if part.end is None:
            def chunks_from(offset):  # noqa: F811 - the whole (maybe compressed) file
                return storage.iter_pieces(f.uri)
        else:
            def chunks_from(offset):  # noqa: F811
                return storage.iter_range(f.uri, offset)
    c, pieces = (0, chunks_from(0)) if part.end is None else owned(
        chunks_from, part.start, part.end, LINE_START if f.format == "csv" else SQL_START)
    try:
        if f.format == "csv":
            converter = converters.get((f.database.lower(), f.table.lower()))
            if converter is None:
                raise ExportFormatError(f"{f.uri}: no schema for {f.database}.{f.table}")
            header = chunks_from(0) if c else None
            for at, values in read_csv_rows_at(pieces, converter, dialect, c, header):
                yield f.database, f.table, at, values
        else:
            for at, database, table, values in read_sql_rows_at(pieces, converters, _database_at(f, c),
                                                                escape_backslash, c):
                yield database, table, at, values
    except ExportFormatError as e:
        if part.end is None:
            raise
        raise ExportFormatError(f"{f.uri}, the part from byte {part.start} to {part.end}: {e} (the file was split "
                                f"into byte ranges; {SPLIT_ENV}=0 reads every file whole)") from e


def _database_at(f: DataFile, offset: int) -> str | None:
    """The database in effect at `offset`: the last USE before it (mysqldump), else the file's."""
    database = f.database or None
    for at, name in f.uses:
        if at >= offset:
            break
        database = name
    return database
