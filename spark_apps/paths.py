"""Names from the input as path segments: the one rule every output uses (docs/layouts.md).

A topic, database, table or partition name read from the archive decides a folder or file
name of the output (the Kafka-record archive's `{topic}/{partition}/...`, TiCDC's
`{schema}/{table}/{version}/...`, the Parquet, Delta and Iceberg tables' folders, the Kafka
output's markers). Such a name is hostile input: `../../x`, `/etc`, `a/b`, NUL, a newline,
300 characters. `segment(name)` turns any name into one path segment that

- never holds a separator (`/`, `\\`) and is never `.` or `..` (nothing lands outside the
  folder it is joined to, on a filesystem or in an S3 key);
- is injective: distinct names give distinct segments (so `a/b`.`c` and `a`.`b/c` never
  share a folder); `unsegment` gives the name back (names cut to length: see below);
- leaves ordinary names as they are (`shop`, `orders_2024`, `tidb_test.t1`, `订单`), so the
  layouts stay byte-identical to TiCDC's and to earlier runs for them.

The encoding is percent-style with `!` as the escape character: each UTF-8 byte of an unsafe
character becomes `!XX` (two upper-case hex digits). `%` is not used because delta-rs decodes
`%XX` in a table's path (a folder `a%2Fb` is written as `a/b`, measured with deltalake 1.6.6)
and S3 lists `%` among the characters to avoid in keys; `!` is in S3's safe set, is valid on
every common filesystem and no URL or path layer decodes it.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata

ESCAPE = "!"
MAX_BYTES = 200  # per segment: a file name built from it (+ offsets, suffix) stays below 255 bytes
NONE = "_"  # an absent name (a row event's database or table is never absent; DDL's may be)
EMPTY = "!"  # the empty name: `!` alone, which no escape produces
_HASH = "!!"  # a name cut to MAX_BYTES ends with `!!` and 32 hex digits of its SHA-256
_HASH_HEX = 32
# characters invalid or special on Windows / macOS / Linux filesystems, in S3 keys (AWS's
# "characters to avoid"), in URLs (`#`, `?`) and in Hadoop/Spark path globs (`{}[]`); `!` itself
_UNSAFE = frozenset('/\\%!<>:"|?*#{}[]^`~')
_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))  # controls, invisible format, surrogates, line breaks


def _unsafe(ch: str, first: bool, last: bool) -> bool:
    if ch in _UNSAFE or unicodedata.category(ch) in _UNSAFE_CATEGORIES:
        return True
    if first and ch in "._":  # `.`/`..`, hidden files; `_` is the output's own (`_manifest.json`, `_staging/`)
        return True
    return last and ch in ". "  # Windows drops a trailing dot or space


def _escape(ch: str) -> str:
    return "".join(f"{ESCAPE}{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def segment(name: str | None) -> str:
    """`name` as one safe path segment (the module's rule). None -> `_`, "" -> `!`."""
    if name is None:
        return NONE
    if name == "":
        return EMPTY
    last = len(name) - 1
    units = [_escape(ch) if _unsafe(ch, i == 0, i == last) else ch for i, ch in enumerate(name)]
    text = "".join(units)
    if len(text.encode("utf-8")) <= MAX_BYTES:
        return text
    # too long: the longest prefix of whole units, then `!!` and a hash of the whole name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_HEX]
    room, kept = MAX_BYTES - len(_HASH) - _HASH_HEX, []
    for unit in units:
        size = len(unit.encode("utf-8"))
        if size > room:
            break
        kept.append(unit)
        room -= size
    return "".join(kept) + _HASH + digest


def unsegment(text: str) -> str | None:
    """The name a segment was made from (None for `_`). A name that was cut (`!!<hash>`) cannot
    be given back: ValueError, like any text `segment` does not produce."""
    if text == NONE:
        return None
    if text == EMPTY:
        return ""
    if _HASH in text:
        raise ValueError(f"{text!r} is a cut name: only a hash of its end is kept")
    out, i = bytearray(), 0
    while i < len(text):
        ch = text[i]
        if ch == ESCAPE:
            hexa = text[i + 1:i + 3]
            if len(hexa) != 2 or not all(c in "0123456789ABCDEF" for c in hexa):
                raise ValueError(f"{text!r}: {ESCAPE} at {i} is not followed by two hex digits")
            out.append(int(hexa, 16))
            i += 3
        else:
            out += ch.encode("utf-8", "surrogatepass")
            i += 1
    name = out.decode("utf-8", "surrogatepass")
    if segment(name) != text:
        raise ValueError(f"{text!r} is not a segment this rule produces")
    return name


def display(name) -> str:
    """A name for a line of the summary or the log: control, invisible and line-breaking
    characters (and `\\` itself) as Python escapes, so a name cannot break or forge lines;
    ordinary names unchanged. Names over 200 characters are shortened with `...`."""
    if name is None:
        return "-"
    name = str(name)
    if any(ch == "\\" or unicodedata.category(ch) in _UNSAFE_CATEGORIES for ch in name):
        name = "".join(ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                       if ch == "\\" or unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch for ch in name)
    return name if len(name) <= 200 else name[:197] + "..."


# --- joining and comparing locations (the contract's naming rules; storage uses them too) -------


def join(base: str, *parts: str) -> str:
    """`base/part/...` without doubled slashes (S3 URIs and local paths alike)."""
    result = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            result = f"{result}/{part}"
    return result


def _local(uri: str) -> str:
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return os.path.realpath(os.path.abspath(uri))


def overlaps(a: str, b: str) -> bool:
    """True when one location is the other or lies inside it (symlinks resolved locally), so
    writing or replacing one would touch the other."""
    if a.startswith("s3://") != b.startswith("s3://"):
        return False
    if not a.startswith("s3://"):
        a, b = _local(a), _local(b)
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)
