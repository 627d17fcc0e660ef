"""MySQL type strings as protocols write them ("int(10) unsigned", "enum('a','b')",
"decimal(10, 4)", "varbinary") and the value rules that depend on them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

# Aliases MySQL/TiDB accept for the base names used everywhere else.
_ALIASES = {
    "integer": "int",
    "int4": "int",
    "int8": "bigint",
    "middleint": "mediumint",
    "bool": "tinyint",
    "boolean": "tinyint",
    "dec": "decimal",
    "numeric": "decimal",
    "fixed": "decimal",
    "real": "double",
    "double precision": "double",
    "character": "char",
}

BINARY_BASES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
TEXT_BASES = frozenset({"tinytext", "text", "mediumtext", "longtext"})
INTEGER_BASES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
TEMPORAL_BASES = frozenset({"date", "datetime", "timestamp", "time", "year"})


@dataclass(frozen=True)
class MySQLType:
    base: str  # lower-case base name: "int", "varchar", "enum", ...
    params: tuple[str, ...] = ()  # "(10,4)" -> ("10", "4"); enum/set -> the labels
    unsigned: bool = False
    zerofill: bool = False

    @property
    def is_binary(self) -> bool:
        return self.base in BINARY_BASES

    @property
    def labels(self) -> tuple[str, ...] | None:
        """ENUM/SET labels when the parameters are known."""
        if self.base in ("enum", "set") and self.params:
            return self.params
        return None


@functools.lru_cache(maxsize=4096)
def parse_type(text: str | None) -> MySQLType:
    """Parse a type string; tolerant: unknown words are kept as the base name."""
    if not text:
        return MySQLType("")
    s = text.strip()
    lower = s.lower()
    paren = lower.find("(")
    if paren >= 0:
        base = lower[:paren].strip()
        close = _matching_paren(s, paren)
        inner = s[paren + 1 : close]
        rest = lower[close + 1 :]
        params = tuple(_split_labels(inner)) if base in ("enum", "set") else tuple(
            p.strip() for p in inner.split(",") if p.strip()
        )
    else:
        words = lower.split()
        base = words[0] if words else ""
        if len(words) > 1 and " ".join(words[:2]) in _ALIASES:
            base = " ".join(words[:2])
        rest = lower[len(base):]
        params = ()
    base = _ALIASES.get(base, base)
    return MySQLType(base, params, "unsigned" in rest.split(), "zerofill" in rest.split())


def _matching_paren(s: str, start: int) -> int:
    quote = None
    i = start + 1
    while i < len(s):
        c = s[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                if i + 1 < len(s) and s[i + 1] == quote:
                    i += 1
                else:
                    quote = None
        elif c in "'\"":
            quote = c
        elif c == ")":
            return i
        i += 1
    return len(s)


def _split_labels(inner: str) -> list[str]:
    """Labels of enum('a','it''s','b\\,c'): quoted, with '' and backslash escapes."""
    labels: list[str] = []
    i, n = 0, len(inner)
    while i < n:
        while i < n and inner[i] in " ,\t\n":
            i += 1
        if i >= n:
            break
        quote = inner[i]
        if quote not in "'\"":  # unquoted label (seen in some Canal outputs)
            j = inner.find(",", i)
            j = n if j < 0 else j
            labels.append(inner[i:j].strip())
            i = j + 1
            continue
        i += 1
        out = []
        while i < n:
            c = inner[i]
            if c == "\\" and i + 1 < n:
                out.append(inner[i + 1])
                i += 2
                continue
            if c == quote:
                if i + 1 < n and inner[i + 1] == quote:
                    out.append(quote)
                    i += 2
                    continue
                i += 1
                break
            out.append(c)
            i += 1
        labels.append("".join(out))
    return labels


def enum_set_label(mysql_type: MySQLType, value: bytes | None) -> str | None:
    """The label(s) of an ENUM index or SET bitmask given as canonical text, when known."""
    labels = mysql_type.labels
    if labels is None or value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    if mysql_type.base == "enum":
        return labels[number - 1] if 1 <= number <= len(labels) else ("" if number == 0 else None)
    chosen = [label for bit, label in enumerate(labels) if number >> bit & 1]
    if number >> len(labels):
        return None
    return ",".join(chosen)


def enum_set_value(mysql_type: MySQLType, label: str) -> bytes | None:
    """Inverse of enum_set_label: the canonical index/bitmask text of a label."""
    labels = mysql_type.labels
    if labels is None:
        return None
    if mysql_type.base == "enum":
        if label == "":
            return b"0"
        try:
            return str(labels.index(label) + 1).encode()
        except ValueError:
            return None
    if label == "":
        return b"0"
    mask = 0
    for part in label.split(","):
        try:
            mask |= 1 << labels.index(part)
        except ValueError:
            return None
    return str(mask).encode()


FRACTIONAL_BASES = frozenset({"datetime", "timestamp", "time"})


def declared_fsp(mysql_type: MySQLType) -> int | None:
    """The fractional-seconds precision a DATETIME / TIMESTAMP / TIME type declares (0 when
    it states none, as in MySQL), or None for other types and unreadable parameters."""
    if mysql_type.base not in FRACTIONAL_BASES:
        return None
    if not mysql_type.params:
        return 0
    try:
        fsp = int(mysql_type.params[0])
    except ValueError:
        return None
    return fsp if 0 <= fsp <= 6 else None


def with_fsp(value: bytes, fsp: int) -> bytes:
    """A DATETIME / TIMESTAMP / TIME text with exactly `fsp` fractional digits, as TiCDC and
    Canal render a column of that precision (`…27.735` for fsp 3, `…27` for 0, `…27.000` for
    `…27` at fsp 3). Protocols that do not carry the precision (OceanBase's DateTimeObject)
    give 0, 6 or 9 digits whatever the column says. Digits beyond `fsp` are dropped only when
    they are zeros: a non-zero digit is never lost (the value is kept as it is)."""
    head, dot, fraction = value.partition(b".")
    if not dot:
        if fsp == 0 or not value[-1:].isdigit():
            return value
        return value + b"." + b"0" * fsp
    if not fraction.isdigit():
        return value
    if len(fraction) < fsp:
        return value + b"0" * (fsp - len(fraction))
    if fraction[fsp:].strip(b"0"):
        return value
    return head + (b"." + fraction[:fsp] if fsp else b"")
