"""Task-side reading of base-export data: the rows of one data file, streamed.

A data file arrives as decompressed pieces (`pieces_of` for bytes in memory, or
`spark_apps.storage.iter_pieces` for a URI); the readers keep only the unparsed tail of the
text in memory, so a file of any size is read in pieces of about one megabyte.

Text is handled as Latin-1 (one character per byte) so binary values and any character set
survive unchanged: a value's bytes are its characters encoded back to Latin-1.

Formats, as their producers write them (docs/base-exports.md has the sources):

* SQL (Dumpling's `.sql`, mysqldump): `INSERT INTO `t` [(`a`,...)] VALUES (..),(..);`. Values are
  `NULL`, bare numbers, quoted strings with MySQL's backslash escapes (and `''`), `x'..'`
  (Dumpling's binary), `_binary '..'` (mysqldump's binary and BIT), `0x..` (mysqldump
  `--hex-blob`), `b'..'`. Other statements (SET, LOCK TABLES, `/*!...*/`, comments) are skipped;
  `USE` switches the database (mysqldump).
* CSV (Dumpling's `.csv`): fields separated by `,`, strings and binary enclosed in `"`, numbers
  bare, NULL the bare `\\N`, lines ended by `\\r\\n`, a header line of quoted column names.
  With `--escape-backslash` (Dumpling's default) `\\`, the enclosure, NUL, CR and LF are
  backslash-escaped; without it the enclosure is doubled and values may span lines. Python's
  csv module is not used: it cannot tell the bare `\\N` (NULL) from a quoted "\\N" (a string),
  and its escapechar drops the backslash without turning `\\n`/`\\0` back into LF/NUL.

Values become the canonical bytes of cdc_codecs.events (see `Converter`).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator

from cdc_codecs.canal_common import canonical_float
from cdc_codecs.mysql_types import enum_set_value, parse_type

PIECE = 1 << 20
_MAX_PENDING = 256 << 20  # unparsed text held before a value is called malformed

# kinds of a value token
NULL, TEXT, BARE, HEX, BITS = "null", "text", "bare", "hex", "bits"


class ExportFormatError(ValueError):
    """A data file that is not what its producer writes; says where."""


# ----------------------------------------------------------------------------- decompression

def pieces_of(name: str, data: bytes) -> Iterator[bytes]:
    """Decompressed pieces of one file held in memory, by its name's suffix (`.gz`, `.zst`,
    `.snappy` as Dumpling's `--compress` names them; `.lz4` too)."""
    from spark_apps import storage

    def chunks():
        for i in range(0, len(data), PIECE):
            yield data[i:i + PIECE]

    method = storage.compression_of(name)
    if method is None:
        return chunks()
    if method == "gzip":
        return storage._gunzip(chunks())
    from spark_apps.damage import decode

    return decode(method, chunks, storage.DamagedObject)


# ----------------------------------------------------------------------------- streaming text

class _Text:
    """The unparsed tail of a stream of pieces, as Latin-1 text."""

    def __init__(self, pieces: Iterable[bytes], start: int = 0):
        self._pieces = iter(pieces)
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.consumed = start  # the file's bytes before buf (`start`: where the pieces begin)

    def more(self) -> bool:
        """Append the next piece (dropping what was parsed); False at the end."""
        if self.eof:
            return False
        for piece in self._pieces:
            if not piece:
                continue
            self.consumed += self.pos
            self.buf = self.buf[self.pos:] + piece.decode("latin-1")
            self.pos = 0
            if len(self.buf) > _MAX_PENDING:
                raise ExportFormatError(f"no complete value in {_MAX_PENDING} bytes at byte {self.consumed}")
            return True
        self.eof = True
        return False

    def where(self, pos: int | None = None) -> str:
        at = self.pos if pos is None else pos
        return f"byte {self.consumed + at}: {self.buf[at:at + 40]!r}"


# ----------------------------------------------------------------------------- SQL

_STRING = r"[^'\\]*(?:(?:\\.|'')[^'\\]*)*"  # a quoted string's body
_STRING_NO_BACKSLASH = r"[^']*(?:''[^']*)*"  # Dumpling --escape-backslash=false


def _alternatives(string: str, group: str) -> str:
    """The kinds of a value; `group` "(" captures each kind's text, "(?:" does not."""
    g = group
    return (g + "NULL)|'" + g + string + ")'|_binary\\s*'" + g + string + ")'|[xX]'" + g + "[0-9a-fA-F]*)'"
            "|0x" + g + "[0-9a-fA-F]+)|[bB]'" + g + "[01]*)'|" + g + "[-+]?[0-9.][0-9.eE+-]*)")


def _value_pattern(string: str) -> re.Pattern:
    """One value and what ends it: NULL (1), string (2), _binary string (3), x'..' (4), 0x.. (5),
    b'..' (6), bare (7), `,` or `)` (8)."""
    return re.compile(r"\s*(?:" + _alternatives(string, "(") + r")\s*([,)])", re.S | re.I)


def _row_pattern(string: str) -> re.Pattern:
    """A whole row, `(` (group 1) to what ends it (2), in one match exactly where `_tuples`
    reads one value by value: each value is atomic (no other reading of it is tried, as
    `_tuples` takes the first) and the row goes on only after a `,`."""
    value = r"(?>\s*(?:" + _alternatives(string, "(?:") + r")\s*[,)])"
    return re.compile(r"\s*(\((?:" + value + r"(?<=,))*+" + value + r"(?<=\)))\s*([,;])", re.S | re.I)


@functools.lru_cache(maxsize=64)
def _row_of(count: int, escape_backslash: bool) -> re.Pattern:
    """`_row_pattern` for a row of exactly `count` values: `(` (group 1), each value's written
    text (2..count+1) and what ends the row (count+2), in one pass. Strings and numbers are
    tried first: no two kinds match the same text, so the order changes nothing but speed."""
    s = _STRING if escape_backslash else _STRING_NO_BACKSLASH
    kinds = (r"'" + s + r"'|[-+]?[0-9.][0-9.eE+-]*|NULL|[xX]'[0-9a-fA-F]*'|0x[0-9a-fA-F]+|[bB]'[01]*'"
             r"|_binary\s*'" + s + "'")

    def value(end: str) -> str:
        return r"(?>\s*(" + kinds + r")\s*[,)])(?<=" + end + ")"
    return re.compile(r"\s*(\()" + value(",") * (count - 1) + value(r"\)") + r"\s*([,;])", re.S | re.I)


def _token_pattern(string: str) -> re.Pattern:
    """Each value's written text (group 1) in a row `_row_pattern` matched."""
    return re.compile(r"\s*(" + _alternatives(string, "(?:") + r")\s*[,)]", re.S | re.I)


_VALUE = _value_pattern(_STRING)
_VALUE_NO_BACKSLASH = _value_pattern(_STRING_NO_BACKSLASH)
_ROW = _row_pattern(_STRING)
_ROW_NO_BACKSLASH = _row_pattern(_STRING_NO_BACKSLASH)
_TOKEN = _token_pattern(_STRING)
_TOKEN_NO_BACKSLASH = _token_pattern(_STRING_NO_BACKSLASH)
_IDENT = r"(?:`((?:[^`]|``)*)`|([A-Za-z0-9_$]+))"
_INSERT = re.compile(
    r"(?:INSERT(?:\s+IGNORE)?|REPLACE)\s+INTO\s+" + _IDENT + r"(?:\s*\.\s*" + _IDENT + r")?"
    r"\s*(?:\(([^)]*)\))?\s*VALUES\s*",
    re.I,
)
_USE = re.compile(r"USE\s+" + _IDENT + r"\s*;", re.I)
# a statement that is not an INSERT: everything to its `;`, quotes and comments respected
_OTHER = re.compile(r"(?:[^;'\"`/-]|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`|/(?!\*)|-(?!-)|/\*.*?\*/|--[^\n]*\n)*;", re.S)
_SPACE = re.compile(r"\s*")
_SEMICOLON = re.compile(r"\s*;")
_ROW_END = re.compile(r"\s*([,;])")
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}
_ESCAPE = re.compile(r"\\(.)|''", re.S)


def _unescape_sql(s: str) -> str:
    """MySQL string-literal escapes (`\\0 \\n \\r \\t \\b \\Z`, `\\%`/`\\_` keep their
    backslash, any other `\\x` is x) and the doubled quote."""
    if "\\" not in s and "''" not in s:
        return s
    return _ESCAPE.sub(lambda m: "'" if m.group(1) is None else _ESCAPES.get(m.group(1), m.group(1)), s)


_PAIRS = (("\\'", "'"), ('\\"', '"'), ("\\n", "\n"), ("\\r", "\r"), ("\\t", "\t"), ("\\0", "\0"),
          ("\\b", "\b"), ("\\Z", "\x1a"))
_PAIR = re.compile(r"\\(.)", re.S)


def _unescape_fast(s: str) -> str:
    """`_unescape_sql` with str methods instead of a Python call per escape. Without `''`,
    the escapes are pairs read from the left, so splitting at each `\\\\` leaves pieces in
    which every backslash starts a pair with the character after it."""
    if "\\" not in s:
        return s.replace("''", "'") if "''" in s else s
    if "''" in s:
        return _unescape_sql(s)
    if "\\\\" in s:
        return "\\".join(map(_unescape_pairs, s.split("\\\\")))
    return _unescape_pairs(s)


def _unescape_pairs(s: str) -> str:
    if "\\" not in s:
        return s
    for pair, char in _PAIRS:
        if pair in s:
            s = s.replace(pair, char)
    if "\\" in s:  # `\\%`, `\\_` (kept) or a letter that stands for itself
        s = _PAIR.sub(lambda e: _ESCAPES.get(e.group(1), e.group(1)), s)
    return s


def _ident(quoted: str | None, bare: str | None) -> str:
    return quoted.replace("``", "`") if quoted is not None else bare


def _columns_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [_ident(q, b) for q, b in re.findall(_IDENT, text)]


def _inserts(t: _Text, database: str | None) -> Iterator[tuple]:
    """(database, table, column names or None) of each INSERT, with `t` at its first row; the
    caller reads the rows (up to the statement's `;`) before asking for the next."""
    while True:
        m = _SPACE.match(t.buf, t.pos)
        t.pos = m.end()
        if t.pos >= len(t.buf):
            if not t.more():
                return
            continue
        head = t.buf[t.pos:t.pos + 2]
        if head == "/*":
            end = t.buf.find("*/", t.pos + 2)
            if end < 0:
                if not t.more():
                    raise ExportFormatError(f"unterminated comment at {t.where()}")
                continue
            t.pos = end + 2
            m = _SEMICOLON.match(t.buf, t.pos)
            if m:
                t.pos = m.end()
            continue
        if head == "--" or head[:1] == "#":
            end = t.buf.find("\n", t.pos)
            if end < 0:
                if not t.more():
                    return
                continue
            t.pos = end + 1
            continue
        if t.buf[t.pos:t.pos + 7].upper() in ("INSERT ", "REPLACE") or t.buf[t.pos:t.pos + 6].upper() == "INSERT":
            m = _INSERT.match(t.buf, t.pos)
            if m is None or m.end() == len(t.buf):
                if not t.more():
                    raise ExportFormatError(f"an INSERT without VALUES at {t.where()}")
                continue
            t.pos = m.end()
            first, second = _ident(m.group(1), m.group(2)), _ident(m.group(3), m.group(4))
            db, table = (first, second) if second is not None else (database, first)
            yield db, table, _columns_list(m.group(5))
            continue
        m = _USE.match(t.buf, t.pos)
        if m:
            database = _ident(m.group(1), m.group(2))
            t.pos = m.end()
            continue
        m = _OTHER.match(t.buf, t.pos)
        if m is None or (m.end() == len(t.buf) and not t.eof):
            if not t.more():
                if m is not None:
                    t.pos = m.end()
                    continue
                rest = t.buf[t.pos:].strip()
                if rest:
                    raise ExportFormatError(f"a statement without its `;` at {t.where()}")
                return
            continue
        t.pos = m.end()


def _tuples(t: _Text, db, table, columns, escape_backslash: bool) -> Iterator[tuple]:
    value = (_VALUE if escape_backslash else _VALUE_NO_BACKSLASH).match
    unescape = _unescape_sql if escape_backslash else (lambda s: s.replace("''", "'"))
    while True:
        start = t.pos
        row = None
        while True:  # one tuple; on a cut, read more and start the tuple again
            m = _SPACE.match(t.buf, t.pos)
            pos = m.end()
            if pos < len(t.buf) and t.buf[pos] == "(":
                row_at = pos
                pos += 1
                row = []
                while True:
                    m = value(t.buf, pos)
                    if m is None:
                        row = None
                        break
                    null, text, binary, hex_, hex0x, bits, bare, end = m.groups()
                    if null is not None:
                        row.append((NULL, None))
                    elif text is not None:
                        row.append((TEXT, unescape(text)))
                    elif binary is not None:
                        row.append((TEXT, unescape(binary)))
                    elif hex_ is not None:
                        row.append((HEX, hex_))
                    elif hex0x is not None:
                        row.append((HEX, hex0x))
                    elif bits is not None:
                        row.append((BITS, bits))
                    else:
                        row.append((BARE, bare))
                    pos = m.end()
                    if end == ")":
                        break
                if row is not None:
                    m = _ROW_END.match(t.buf, pos)
                    if m is not None:
                        t.pos = m.end()
                        yield t.consumed + row_at, db, table, columns, row
                        if m.group(1) == ";":
                            return
                        break
            elif pos < len(t.buf):
                raise ExportFormatError(f"expected a `(` row in INSERT INTO {table} at {t.where(pos)}")
            t.pos = start
            if not t.more():
                raise ExportFormatError(f"INSERT INTO {table} ends inside a row at {t.where()}")
            start = t.pos


# ----------------------------------------------------------------------------- CSV

class CsvDialect:
    """Dumpling's CSV options (defaults: `--csv-separator ,`, `--csv-delimiter "`,
    `--csv-null-value \\N`, `--escape-backslash true`, a header line, binary written as it is
    (`--csv-output-dialect` hex/base64 for the others))."""

    def __init__(self, separator: str = ",", delimiter: str = '"', null: str = "\\N",
                 escape_backslash: bool = True, header: bool = True, binary: str = "raw"):
        if not separator:
            raise ValueError("the CSV separator must not be empty")
        if binary not in ("raw", "hex", "base64"):
            raise ValueError(f"binary format {binary!r} is not raw, hex or base64")
        self.separator, self.delimiter, self.null = separator, delimiter, null
        self.escape_backslash, self.header, self.binary = escape_backslash, header, binary
        sep, d = re.escape(separator), re.escape(delimiter)
        if delimiter:
            body = (rf"[^{d}\\]*(?:\\.[^{d}\\]*)*" if escape_backslash
                    else rf"[^{d}]*(?:{d}{d}[^{d}]*)*")
            quoted = rf"{d}({body}){d}"
        else:
            body, quoted = "", r"(?!)()"
        # a bare field (a number, the null text) never starts with the enclosure: a quoted
        # field the buffer cuts must not read as a bare one
        bare = (r"(?:[^\r\n\\]|\\.)*?" if escape_backslash and not delimiter
                else rf"(?!{d})[^\r\n]*?" if delimiter else r"[^\r\n]*?")
        self.field = re.compile(rf"(?:{quoted}|({bare}))({sep}|\r?\n)", re.S)
        # the same without groups, for `_record_of`; a separator or delimiter holding a
        # newline would make a field's end ambiguous to its lookbehind: no record regex then
        if len(separator) == 1:  # the same fields, in fewer steps: the bare field's end is its first separator
            bare = (rf"(?:[^\r\n\\{sep}]|\\.)*+" if escape_backslash and not delimiter
                    else rf"(?!{d})[^\r\n{sep}]*+" if delimiter else rf"[^\r\n{sep}]*+")
        self._parts = (rf"{d}{body}{d}" if delimiter else r"(?!)", bare, sep)
        self.batch = not any(c in "\r\n" for c in separator + delimiter)

    def token_value(self, token: str) -> tuple:
        """(kind, text) of a field as written (`_record_of`'s group: quotes included), as
        `csv_records_at` reads it."""
        d = self.delimiter
        if d and token.startswith(d):
            text = token[len(d):-len(d)]
            if self.escape_backslash:
                return TEXT, _unescape_csv(text)
            return TEXT, text.replace(d + d, d) if d + d in text else text
        if token == self.null:
            return NULL, None
        if self.escape_backslash and not d and "\\" in token:
            return BARE, _unescape_csv(token)
        return BARE, token


_CSV_ESCAPE = re.compile(r"\\(.)", re.S)
_CSV_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "b": "\b"}
_CSV_PAIRS = tuple(("\\" + k, v) for k, v in _CSV_ESCAPES.items())


def _unescape_csv_reference(s: str) -> str:
    """A CSV field's backslash escapes (`\\0 \\n \\r \\t \\Z \\b`, any other `\\x` is x)."""
    return _CSV_ESCAPE.sub(lambda e: _CSV_ESCAPES.get(e.group(1), e.group(1)), s)


def _unescape_csv(s: str) -> str:
    """`_unescape_csv_reference` of a field the reader matched (its backslashes pair up) with
    str methods: split at each `\\\\`, every backslash left starts a pair; the named pairs are
    replaced and the backslash of any other pair is dropped."""
    if "\\" not in s:
        return s
    if "\\\\" in s:
        return "\\".join(map(_csv_pairs, s.split("\\\\")))
    return _csv_pairs(s)


def _csv_pairs(s: str) -> str:
    if "\\" not in s:
        return s
    for pair, char in _CSV_PAIRS:
        if pair in s:
            s = s.replace(pair, char)
    return s.replace("\\", "")


@functools.lru_cache(maxsize=64)
def _record_of(count: int, quoted: str, bare: str, sep: str) -> re.Pattern:
    """A CSV record of exactly `count` fields, each field's text (quotes included) a group, in
    one match exactly where `csv_records_at` reads field by field: each field and its end is
    an atomic group (no other reading of it is tried, as `field.match` takes the first) and
    the record goes on only after a separator."""
    def field(end: str) -> str:
        return rf"(?>({quoted}|{bare})(?:{sep}|\r?\n))(?<={end})"
    return re.compile(field(sep) * (count - 1) + field(r"\n"), re.S)


@functools.lru_cache(maxsize=64)
def _records_of(count: int, quoted: str, bare: str, sep: str) -> re.Pattern:
    """`_record_of` with the whole record as group 1 (for `findall`)."""
    return re.compile("(" + _record_of(count, quoted, bare, sep).pattern + ")", re.S)


def csv_records(pieces: Iterable[bytes], dialect: CsvDialect) -> Iterator[list[tuple]]:
    """The records of Dumpling CSV text: lists of (kind, text); the header is a record too."""
    for _, record in csv_records_at(pieces, dialect):
        yield record


def csv_records_at(pieces: Iterable[bytes], dialect: CsvDialect, start: int = 0) -> Iterator[tuple]:
    """(byte offset in the file, record) of Dumpling CSV text whose pieces begin at `start`."""
    t = _Text(pieces, start)
    t.more()
    while True:
        record = _csv_record(t, dialect)
        if record is None:
            return
        yield record


def _csv_record(t: _Text, dialect: CsvDialect) -> tuple | None:
    """(byte offset, record) of the next record, field by field, with `t` after it; None at
    the end. An empty line is a record only when fields have no enclosure (see below)."""
    field = dialect.field.match
    d = dialect.delimiter
    while True:
        if t.pos >= len(t.buf) and not t.more():
            return None
        if t.eof and not t.buf.endswith("\n"):
            t.buf += "\n"  # the last line without its terminator
        begin = t.pos
        record = []
        pos = begin
        while True:
            m = field(t.buf, pos)
            if m is None:
                record = None
                break
            quoted, bare, end = m.groups()
            if quoted is not None:
                if dialect.escape_backslash:
                    if "\\" in quoted:
                        quoted = _unescape_csv_reference(quoted)
                elif d and d + d in quoted:
                    quoted = quoted.replace(d + d, d)
                record.append((TEXT, quoted))
            elif bare == dialect.null:
                record.append((NULL, None))
            else:
                if dialect.escape_backslash and not d and "\\" in bare:
                    bare = _unescape_csv_reference(bare)
                record.append((BARE, bare))
            pos = m.end()
            if end != dialect.separator:
                break
        if record is not None:
            t.pos = pos
            # an empty line: without an enclosure (`--csv-delimiter ''`) Dumpling writes a
            # one-column row whose value is the empty string so (pingcap/tidb dumpling
            # `WriteInsertInCsv` → dumpformat `csvfile`): a record of one empty field, which
            # a table of more columns refuses by its field count; with one it is nothing
            if record != [(BARE, "")] or not d:
                return t.consumed + begin, record
            continue
        if not t.more():
            if t.eof and not t.buf.endswith("\n"):
                t.buf += "\n"
                continue
            raise ExportFormatError(f"a CSV record that does not end at {t.where(begin)}")
        # t.more() moved the buffer: the record starts again at the new t.pos


# ----------------------------------------------------------------------------- values

class Converter:
    """Canonical bytes (cdc_codecs.events) from dump values, per column type: text and
    numbers as written (DECIMAL keeps its scale, temporal values their digits), FLOAT/DOUBLE
    as the shortest text, binary types as raw bytes, BIT as its unsigned number, ENUM as its
    1-based index and SET as its bitmask (the labels are returned too)."""

    def __init__(self, columns: list[tuple[str, str]], binary: str = "raw"):
        """`columns`: [(name, mysql type text)] in table order."""
        self.names = [name for name, _ in columns]
        self._by_name = {name.lower(): i for i, (name, _) in enumerate(columns)}
        self._parsed = [parse_type(type_text) for _, type_text in columns]
        self._convert: list[Callable] = [self._for(mysql_type, binary) for mysql_type in self._parsed]
        self.types = [type_text for _, type_text in columns]
        self.binary = binary
        self._token_fns: dict[bool, list[Callable]] = {}
        self.bulk = [self._bulk(t, binary) for t in self._parsed]

    def index(self, name: str) -> int:
        try:
            return self._by_name[name.lower()]
        except KeyError:
            raise ExportFormatError(f"column {name!r} is not in the table's schema ({', '.join(self.names)})") from None

    @staticmethod
    def _bulk(mysql_type, binary: str) -> tuple[bool, bool, bool, bool]:
        """What `_column` may do at once for a column of the type, as `_for` converts them: (a
        quoted string's value is its unescaped text's bytes, a bare number's is its text's,
        x'..' is its bytes, a bare number is a DOUBLE)."""
        base = mysql_type.base
        if mysql_type.is_binary:
            return binary == "raw", True, True, False
        if base in ("float", "double"):
            return False, False, False, base == "double"
        return not (base == "bit" or base in ("enum", "set") and mysql_type.labels is not None), True, False, False

    @staticmethod
    def _for(mysql_type, binary: str) -> Callable:
        base = mysql_type.base

        def raw(kind, text):
            if kind == HEX:
                return bytes.fromhex(text)
            if kind == BITS:
                n = int(text or "0", 2)
                return n.to_bytes((len(text) + 7) // 8, "big")
            if kind == TEXT and binary != "raw":
                import base64

                return bytes.fromhex(text) if binary == "hex" else base64.b64decode(text)
            return text.encode("latin-1")

        if mysql_type.is_binary:
            return raw
        if base == "bit":
            def bit(kind, text):
                if kind == BARE:
                    return text.encode("latin-1")
                if kind == TEXT and binary == "raw":
                    return str(int.from_bytes(text.encode("latin-1"), "big")).encode()
                return str(int.from_bytes(raw(kind, text), "big")).encode()
            return bit
        if base in ("float", "double"):
            single = base == "float"
            return lambda kind, text: canonical_float(text, single).encode()
        if base in ("enum", "set") and mysql_type.labels is not None:
            def label(kind, text):
                if kind == BARE:  # a number given for an ENUM/SET is its index/bitmask
                    return text.encode()
                value = enum_set_value(mysql_type, text.encode("latin-1").decode("utf-8"))
                if value is None:
                    raise ExportFormatError(f"{text!r} is not a label of {base}{mysql_type.labels}")
                return value
            return label
        return lambda kind, text: text.encode("latin-1") if kind != HEX else bytes.fromhex(text)

    def row(self, values: list[tuple], columns: list[str] | None = None) -> dict[str, bytes | None]:
        """{column name: canonical bytes or None} of one row; `columns` when the file names
        them (INSERT with a column list, a CSV header), else the table's order."""
        if columns is None:
            if len(values) != len(self.names):
                raise ExportFormatError(f"a row of {len(values)} values for {len(self.names)} columns "
                                        f"({', '.join(self.names)})")
            indexes = range(len(values))
        else:
            if len(values) != len(columns):
                raise ExportFormatError(f"a row of {len(values)} values for {len(columns)} named columns")
            indexes = [self.index(c) for c in columns]
        out = {}
        for i, (kind, text) in zip(indexes, values):
            out[self.names[i]] = None if kind == NULL else self._value(i, kind, text)
        return out

    def _value(self, i: int, kind: str, text: str) -> bytes:
        try:
            return self._convert[i](kind, text)
        except ExportFormatError:
            raise
        except (ValueError, TypeError) as e:
            raise ExportFormatError(f"column {self.names[i]} ({self.types[i]}): {text[:40]!r} is not a value of "
                                    f"it ({e})") from None

    def csv_converters(self, dialect: CsvDialect) -> list[Callable]:
        """Per column, a function from a CSV field as written (`_record_of`'s group) to what
        `row` gives for it."""
        value, token_value = self._value, dialect.token_value

        def converter(i):
            def convert(token):
                kind, text = token_value(token)
                return None if kind == NULL else value(i, kind, text)
            return convert
        return [converter(i) for i in range(len(self.names))]

    def token_converters(self, escape_backslash: bool = True) -> list[Callable]:
        """Per column, a function from a value as an INSERT writes it (`_TOKEN`'s text: `NULL`,
        `'it\\'s'`, `x'00'`, `12.5`, ...) to what `row` gives for it. The common shapes of a
        column's type are handled inline; anything else goes the way `row` goes (same value,
        same error)."""
        fns = self._token_fns.get(escape_backslash)
        if fns is None:
            fns = self._token_fns[escape_backslash] = [self._token_fn(i, escape_backslash)
                                                       for i in range(len(self.names))]
        return fns

    def _token_fn(self, i: int, escape_backslash: bool) -> Callable:
        unescape = _unescape_fast if escape_backslash else _unescape_doubled
        value = self._value

        def generic(tok):
            kind, text = _token_value(tok, unescape)
            return None if kind == NULL else value(i, kind, text)

        mysql_type = self._parsed[i]
        base = mysql_type.base
        if mysql_type.is_binary:
            if self.binary != "raw":
                return generic

            def binary(tok):
                c = tok[0]
                if c == "'":
                    s = tok[1:-1]
                    if "\\" in s or "''" in s:
                        s = unescape(s)
                    return s.encode("latin-1")
                if c == "x" or c == "X":
                    try:
                        return bytes.fromhex(tok[2:-1])
                    except ValueError:
                        return generic(tok)
                return None if c == "N" or c == "n" else generic(tok)
            return binary
        if base in ("float", "double"):
            text_of = functools.partial(canonical_float, single=True) if base == "float" else _double_text

            def number(tok):
                c = tok[0]
                if c == "'":
                    text = tok[1:-1]
                    if "\\" in text or "''" in text:
                        text = unescape(text)
                elif c in _BARE_FIRST or (c == "0" and tok[1:2] not in ("x", "X")):
                    text = tok
                elif c == "N" or c == "n":
                    return None
                else:
                    return generic(tok)
                try:
                    return text_of(text).encode()
                except (ValueError, TypeError):
                    return generic(tok)
            return number
        if base == "bit" or (base in ("enum", "set") and mysql_type.labels is not None):
            return generic

        def plain(tok):
            c = tok[0]
            if c == "'":
                s = tok[1:-1]
                if "\\" in s or "''" in s:
                    s = unescape(s)
                return s.encode("latin-1")
            if c in _BARE_FIRST or (c == "0" and tok[1:2] not in ("x", "X")):
                return tok.encode("latin-1")
            return None if c == "N" or c == "n" else generic(tok)
        return plain


_BARE_FIRST = frozenset("123456789+-.")


def _unescape_doubled(s: str) -> str:
    return s.replace("''", "'")


def _token_value(tok: str, unescape: Callable) -> tuple:
    """(kind, text) of a value as written, as `_tuples` reads it."""
    c = tok[0]
    if c == "'":
        return TEXT, unescape(tok[1:-1])
    if c == "N" or c == "n":
        return NULL, None
    if c == "_":
        return TEXT, unescape(tok[tok.index("'") + 1:-1])
    if c == "x" or c == "X":
        return HEX, tok[2:-1]
    if c == "b" or c == "B":
        return BITS, tok[2:-1]
    if c == "0" and tok[1:2] in ("x", "X"):
        return HEX, tok[2:]
    return BARE, tok


def _double_text(text: str) -> str:
    """canonical_float(text, single=False), without numpy for a number Python's repr already
    writes positionally (its shortest round-trip digits are the same)."""
    r = repr(float(text))
    if "e" in r or "n" in r:  # an exponent, inf, nan
        return canonical_float(text, False)
    return r[:-2] if r.endswith(".0") else r


def read_sql_rows(pieces: Iterable[bytes], tables: dict, database: str | None = None,
                  escape_backslash: bool = True) -> Iterator[tuple]:
    """(database, table, {column: canonical bytes}) for each row of SQL text. `tables` maps
    (database, table) lower-cased to a Converter; a row of a table without one is an error
    (nothing is dropped silently)."""
    for _, *row in read_sql_rows_at(pieces, tables, database, escape_backslash):
        yield tuple(row)


def read_sql_rows_at(pieces: Iterable[bytes], tables: dict, database: str | None = None,
                     escape_backslash: bool = True, start: int = 0) -> Iterator[tuple]:
    """`read_sql_rows` with each row's byte offset first (`start`: where the pieces begin).
    Each row is matched whole by one regex (`_ROW`), its values listed by another (`_TOKEN`)
    and converted by per-column functions (`Converter.token_converters`); a row that does not
    match (cut by a piece, or malformed) goes as in `_tuples`. `read_sql_rows_at_reference`
    reads value by value: the same rows and errors (tests/test_base_export_fast.py), slower."""
    t = _Text(pieces, start)
    t.more()
    plans: dict = {}  # the rows of an INSERT share its names: resolved once
    for db, table, columns in _inserts(t, database):
        key = (db, table, None if columns is None else tuple(columns))
        if key not in plans:
            plans[key] = _plan(tables, db, table, columns, escape_backslash)
        plan = plans[key]
        if plan is None:  # no schema, an unknown column, a name not UTF-8: the reference's error
            yield from _reference_rows(t, tables, db, table, columns, escape_backslash)
        else:
            yield from _fast_rows(t, table, plan, escape_backslash)


def _plan(tables: dict, db, table, columns, escape_backslash: bool):
    """(database, table, the values' column names, their converters, converter, file names) of
    an INSERT's rows, or None when `read_sql_rows_at_reference` would fail at its first row."""
    try:
        db_name, table_name = _utf8(db), _utf8(table)
        converter = tables.get(((db_name or "").lower(), table_name.lower()))
        if converter is None:
            return None
        names = [_utf8(c) for c in columns] if columns else None
        indexes = range(len(converter.names)) if names is None else [converter.index(c) for c in names]
    except (ExportFormatError, UnicodeDecodeError):
        return None
    fns = converter.token_converters(escape_backslash)
    return (db_name, table_name, [converter.names[i] for i in indexes], [fns[i] for i in indexes],
            converter, names, list(indexes))


def _fast_rows(t: _Text, table: str, plan: tuple, escape_backslash: bool) -> Iterator[tuple]:
    """The rows of one INSERT: the rows in the text at hand are matched first (a batch), then
    converted a column at a time (`_column`), then yielded; a row the batch cannot take
    (cut, malformed, another length) is read alone, as `_tuples` would."""
    db, table_name, out_names, fns, converter, names, indexes = plan
    count = len(fns)
    whole = _row_of(count, escape_backslash).match
    row = (_ROW if escape_backslash else _ROW_NO_BACKSLASH).match
    tokens = (_TOKEN if escape_backslash else _TOKEN_NO_BACKSLASH).findall
    unescape = _unescape_sql if escape_backslash else _unescape_doubled
    bulk = [converter.bulk[i] for i in indexes]
    bulk_unescape = _unescape_fast if escape_backslash else _unescape_doubled
    while True:
        buf, pos = t.buf, t.pos
        batch, ats = [], []
        m = whole(buf, pos) if count else None
        while m is not None:  # the usual rows: as many values as columns
            values = m.groups()
            batch.append(values)
            ats.append(m.start(1))
            pos = m.end()
            if values[-1] == ";":
                break
            m = whole(buf, pos)
        if batch:
            t.pos = pos
            base = t.consumed
            try:
                columns = list(zip(*batch))[1:count + 1]
                converted = [_column(col, fn, kinds, bulk_unescape) for col, fn, kinds in zip(columns, fns, bulk)]
            except Exception:  # noqa: BLE001 - the rows before the failing one first: row by row
                converted = None
            if converted is None:
                for at, values in zip(ats, batch):
                    yield base + at, db, table_name, {name: fn(v) for name, fn, v in
                                                      zip(out_names, fns, values[1:])}
            else:
                for at, values in zip(ats, zip(*converted)):
                    yield base + at, db, table_name, dict(zip(out_names, values))
            if batch[-1][-1] == ";":
                return
            continue
        m = row(buf, t.pos)
        if m is None:  # as `_tuples`: a row cut by the piece's end (read more), or not a row
            pos = _SPACE.match(buf, t.pos).end()
            if pos < len(buf) and buf[pos] != "(":
                raise ExportFormatError(f"expected a `(` row in INSERT INTO {table} at {t.where(pos)}")
            if not t.more():
                raise ExportFormatError(f"INSERT INTO {table} ends inside a row at {t.where()}")
            continue
        at = m.start(1)
        values = tokens(buf, at + 1, m.end(1))
        if len(values) != count:  # the reference's error
            converter.row([_token_value(v, unescape) for v in values], names)
        t.pos = m.end()
        yield t.consumed + at, db, table_name, {name: fn(v) for name, fn, v in zip(out_names, fns, values)}
        if m.group(2) == ";":
            return


_SEP, _SEP_BYTES = "\x01", b"\x01"
_BARE_ONLY = re.compile(r"[-+0-9.eE\x01]*")
_HEX_ONLY = re.compile(r"(?:[xX]'[0-9a-fA-F]*'\x01)*[xX]'[0-9a-fA-F]*'")


def _column(col: tuple, fn: Callable, kinds: tuple, unescape: Callable, quote: str = "'") -> list:
    """One column's values of a batch of rows: `[fn(v) for v in col]`, in a few str calls when
    every value is of one kind the column's type takes as it is (`Converter.bulk`): bare
    numbers (their text), quoted strings (their unescaped text; `quote`: `'` in SQL, the
    enclosure in CSV), x'..' (its bytes), DOUBLE numbers (`_double_text`). The values are
    joined by a character none holds (\\x01, which no escape yields), unescaped at once and
    split."""
    text_ok, bare_ok, hex_ok, double = kinds
    joined = _SEP.join(col)
    if joined.count(_SEP) == len(col) - 1:
        if (bare_ok or double) and _BARE_ONLY.fullmatch(joined):
            if bare_ok:
                return joined.encode("latin-1").split(_SEP_BYTES)
            texts = _SEP.join(map(repr, map(float, col))) + _SEP
            if "e" not in texts and "n" not in texts:  # positional and finite: as _double_text
                return texts.replace(".0" + _SEP, _SEP)[:-1].encode().split(_SEP_BYTES)
        elif (text_ok and quote and joined.startswith(quote) and joined.endswith(quote)
              and joined.count(quote + _SEP + quote) == len(col) - 1):
            body = unescape(joined[len(quote):-len(quote)].replace(quote + _SEP + quote, _SEP))
            return body.encode("latin-1").split(_SEP_BYTES)
        elif hex_ok and _HEX_ONLY.fullmatch(joined):
            return [bytes.fromhex(v[2:-1]) for v in col]
    if text_ok and quote and all(map(str.startswith, col, itertools.repeat(quote))):
        n = len(quote)  # quoted strings holding \x01 (binary): each unescaped alone
        return [unescape(v[n:-n]).encode("latin-1") for v in col]
    return [fn(v) for v in col]


def read_sql_rows_at_reference(pieces: Iterable[bytes], tables: dict, database: str | None = None,
                               escape_backslash: bool = True, start: int = 0) -> Iterator[tuple]:
    """`read_sql_rows_at`, value by value (`_tuples`, `Converter.row`): the reference the fast
    path is tested against."""
    t = _Text(pieces, start)
    t.more()
    for db, table, columns in _inserts(t, database):
        yield from _reference_rows(t, tables, db, table, columns, escape_backslash)


def _reference_rows(t: _Text, tables: dict, db, table, columns, escape_backslash: bool) -> Iterator[tuple]:
    named = None
    for at, _, _, _, values in _tuples(t, db, table, columns, escape_backslash):
        if named is None:
            db_name, table_name = _utf8(db), _utf8(table)
            converter = tables.get(((db_name or "").lower(), table_name.lower()))
            if converter is None:
                raise ExportFormatError(f"rows for {db_name}.{table_name}, which no schema in the export describes")
            named = (db_name, table_name, converter, [_utf8(c) for c in columns] if columns else None)
        db_name, table_name, converter, names = named
        yield at, db_name, table_name, converter.row(values, names)


def _utf8(text: str | None) -> str | None:
    """A name read as Latin-1 back to its UTF-8 text."""
    return None if text is None else text.encode("latin-1").decode("utf-8")


def read_csv_rows_at(pieces: Iterable[bytes], converter: Converter, dialect: CsvDialect | None = None,
                     start: int = 0, header: Iterable[bytes] | None = None) -> Iterator[tuple]:
    """(byte offset, {column: canonical bytes}) of each data line. From `start` > 0 (a range
    of the file) the header is not in `pieces`: `header` gives the file's pieces from byte 0,
    of which only the first line is read. The records in the text at hand are matched as a
    batch, one regex match each (`_record_of`), and converted a column at a time (`_column`);
    a record the batch cannot take (cut by a piece, an empty line, another number of fields,
    a newline inside a value) is read field by field. `read_csv_rows_at_reference` reads
    every record field by field: the same rows, offsets and errors
    (tests/test_base_export_fast.py), slower."""
    dialect = dialect or CsvDialect()
    t = _Text(pieces, start)
    t.more()
    found, columns = _csv_header(t, dialect, converter, start, header)
    if not found:
        return
    try:
        indexes = range(len(converter.names)) if columns is None else [converter.index(c) for c in columns]
    except ExportFormatError:
        indexes = None  # the reference's error at the first row
    if indexes is None or len(indexes) < 2 or not dialect.batch:
        while (record := _csv_record(t, dialect)) is not None:
            yield record[0], converter.row(record[1], columns)
        return
    yield from _fast_csv_rows(t, converter, columns, list(indexes), dialect)


def _csv_header(t: _Text, dialect: CsvDialect, converter: Converter, start: int, header) -> tuple:
    """(whether to read on, the header's column names or None when they are the table's)."""
    if not dialect.header:
        return True, None
    first = next(csv_records(header, dialect), None) if start else (_csv_record(t, dialect) or (0, None))[1]
    if first is None:
        return False, None
    columns = [_utf8(text) for _, text in first]
    if [c.lower() for c in columns] == [c.lower() for c in converter.names]:
        columns = None
    return True, columns


def _fast_csv_rows(t: _Text, converter: Converter, columns, indexes: list, dialect: CsvDialect) -> Iterator[tuple]:
    count = len(indexes)
    whole = _record_of(count, *dialect._parts).match
    every = _records_of(count, *dialect._parts).findall
    out_names = [converter.names[i] for i in indexes]
    fns = converter.csv_converters(dialect)
    fns = [fns[i] for i in indexes]
    d = dialect.delimiter
    # what `_column` may do at once: no x'..' in CSV, and no bare numbers when the null text or
    # a quoted field could look like one
    bare_null = _BARE_ONLY.fullmatch(dialect.null) is not None or (d and _BARE_ONLY.fullmatch(d[0]))
    bulk = [(text_ok, bare_ok and not bare_null, False, double and not bare_null)
            for text_ok, bare_ok, _, double in (converter.bulk[i] for i in indexes)]
    unescape = (_unescape_csv if dialect.escape_backslash
                else (lambda s: s.replace(d + d, d)) if d else (lambda s: s))
    while True:
        if t.pos >= len(t.buf) and not t.more():
            return
        if t.eof and not t.buf.endswith("\n"):
            t.buf += "\n"  # as `_csv_record`
        buf, pos = t.buf, t.pos
        end = buf.rfind("\n") + 1
        found = list(zip(*every(buf, pos, end))) if end > pos else None
        if found and sum(map(len, found[0])) == end - pos:
            # the usual text: records one after another up to the last line end at hand,
            # all found by one call (a gap would be a record the batch cannot take)
            ats = list(itertools.accumulate(map(len, found[0]), initial=pos))
            cols = found[1:]
            pos = end
        else:
            batch, ats = [], []
            m = whole(buf, pos)
            while m is not None:
                batch.append(m.groups())
                ats.append(pos)
                pos = m.end()
                m = whole(buf, pos)
            cols = list(zip(*batch))
        if cols:
            t.pos = pos
            base = t.consumed
            try:
                converted = [_column(col, fn, kinds, unescape, d) for col, fn, kinds in zip(cols, fns, bulk)]
            except Exception:  # noqa: BLE001 - the rows before the failing one first: row by row
                for at, values in zip(ats, zip(*cols)):
                    yield base + at, {name: fn(v) for name, fn, v in zip(out_names, fns, values)}
                continue
            for at, values in zip(ats, zip(*converted)):
                yield base + at, dict(zip(out_names, values))
            continue
        record = _csv_record(t, dialect)  # one the batch cannot take, field by field
        if record is None:
            return
        yield record[0], converter.row(record[1], columns)


def read_csv_rows_at_reference(pieces: Iterable[bytes], converter: Converter, dialect: CsvDialect | None = None,
                               start: int = 0, header: Iterable[bytes] | None = None) -> Iterator[tuple]:
    """`read_csv_rows_at`, field by field (`csv_records_at`, `Converter.row`): the reference
    the batch reader is tested against."""
    dialect = dialect or CsvDialect()
    records = csv_records_at(pieces, dialect, start)
    columns = None
    if dialect.header:
        first = next(csv_records(header, dialect), None) if start else next(records, (0, None))[1]
        if first is None:
            return
        columns = [_utf8(text) for _, text in first]
        if [c.lower() for c in columns] == [c.lower() for c in converter.names]:
            columns = None
    for at, record in records:
        yield at, converter.row(record, columns)
