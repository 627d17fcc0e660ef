"""The fast SQL row reader (spark_apps/base_export/rows.py `read_sql_rows_at`: one regex match
per row, per-column converters) against the value-by-value reader it replaced
(`read_sql_rows_at_reference`): over generated INSERTs holding hostile values — quotes,
backslashes and every escape, `''`, commas, parentheses, semicolons, raw and escaped newlines,
`\\N`, NULL in any case, `x'..'`, `0x..`, `b'..'`, `_binary '..'`, unicode, floats in any
notation, spaces between tokens, malformed values and rows of the wrong length — in both
escaping modes, cut into random pieces, the same rows (values, offsets) and the same error."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdc_codecs.canal_common import canonical_float
from spark_apps.base_export import Converter, CsvDialect, ExportFormatError
from spark_apps.base_export.rows import (_double_text, _unescape_csv, _unescape_csv_reference, _unescape_fast,
                                         _unescape_sql, read_csv_rows_at, read_csv_rows_at_reference, read_sql_rows_at,
                                         read_sql_rows_at_reference)

COLUMNS = [("id", "bigint"), ("s", "varchar(64)"), ("b", "varbinary(64)"), ("f", "float"), ("d", "double"),
           ("n", "decimal(10,3)"), ("bits", "bit(12)"), ("e", "enum('a','b''c','\\\\')"), ("set", "set('x','y')"),
           ("dt", "datetime(3)"), ("j", "json"), ("bl", "blob")]
HOSTILE = ["'", "''", "\\", "\\\\", "\\'", '\\"', "\\0", "\\n", "\\r", "\\t", "\\Z", "\\b", "\\%", "\\_", "\\z",
           "\\N", ",", "(", ")", "),(", ";", "\n", "\r\n", "NULL", "x'00'", "é", "中", "😀", "\x00", "\x1a", "a", " "]
body = st.lists(st.sampled_from(HOSTILE), max_size=8).map("".join) | st.text(max_size=6)
number = st.one_of(
    st.integers(-10 ** 20, 10 ** 20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda x: f"{x:.9g}"),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:.17e}"),
    st.sampled_from(["0", "-0", "+1", ".5", "1.", "1e5", "1E-7", "-0.0", "12.500", "1.5e+300", "3.4e38", "1e-320",
                     "9007199254740993", "0.1", "1e16", "123456789012345678", "1-2", "..", "1e", "5e-324"]),
)


def quoted(text: str, escape: bool) -> str:
    """A string value as the test writes it: escapes chosen at random are already in `text`;
    without --escape-backslash only `''` escapes a quote."""
    if escape:
        return text
    return text.replace("\\", "").replace("'", "''")


def string(escape: bool, texts=body):
    return texts.map(lambda b: "'" + quoted(b, escape) + "'").filter(lambda t: _wellformed(t, escape))


def tokens(escape: bool) -> dict:
    """Per column, the values a dump writes for it (any kind a reader may meet there)."""
    hexdigits = st.binary(max_size=4).map(bytes.hex) | st.binary(max_size=4).map(lambda b: b.hex().upper())
    null = st.sampled_from(["NULL", "null", "Null"])
    text = string(escape) | string(escape).map(lambda t: "_binary " + t)
    binary = st.one_of(hexdigits.map(lambda h: f"x'{h}'"), hexdigits.map(lambda h: f"X'{h}'"),
                       hexdigits.filter(bool).map(lambda h: f"0x{h}"), text)
    bits = st.text("01", max_size=12).map(lambda b: f"b'{b}'") | st.integers(0, 4095).map(str) | binary
    quoted_number = string(escape, number)
    label = string(escape, st.sampled_from(["a", "b'c", "\\\\", "b\\'c"] * 3 + ["A"])) | st.sampled_from(["1", "2", "3"])
    labels = string(escape, st.sampled_from(["x", "y", "x,y", ""] * 3 + ["Y,x"])) | st.sampled_from(["0", "3"])
    when = string(escape, st.sampled_from(["2026-11-28 10:00:00.123", "0000-00-00 00:00:00", "2024-02-29 23:59:59"]))
    kinds = {"id": st.integers(-2 ** 63, 2 ** 63 - 1).map(str), "s": text | number | binary, "b": binary,
             "f": number | quoted_number, "d": number | quoted_number, "n": number | quoted_number, "bits": bits,
             "e": label, "set": labels, "dt": when, "j": text, "bl": binary}
    return {name: st.one_of(null, strategy, strategy, strategy) for name, strategy in kinds.items()}


FITS = {"id": ["integer"], "b": ["hex", "string"], "f": ["number"], "d": ["number", "integer"], "n": ["number"],
        "bits": ["integer", "hex"], "e": ["integer"], "set": ["integer"], "dt": ["string"], "j": ["string"],
        "bl": ["hex", "string", "integer"]}


def uniform(escape: bool) -> dict:
    """Per column, values of one kind only (the fast reader converts such a column at once)."""
    hexes = st.binary(max_size=6).map(lambda b: f"x'{b.hex()}'")
    return {"number": number, "string": string(escape), "hex": hexes, "integer": st.integers(-99, 10 ** 12).map(str)}


BAD = st.sampled_from(["NUL", "'open", "x'0g'", "0x", "b'2'", "(", "abc", "'a'b'", "--", "1 2", "x'abc'"])


def _wellformed(text: str, escape: bool) -> bool:
    import re

    from spark_apps.base_export.rows import _STRING, _STRING_NO_BACKSLASH
    return re.fullmatch("'" + (_STRING if escape else _STRING_NO_BACKSLASH) + "'", text, re.S) is not None


space = st.sampled_from(["", "", "", " ", "\n", " \t "])


@st.composite
def sql_text(draw, escape: bool) -> str:
    out = [draw(st.sampled_from(["", "/*!40101 SET NAMES binary*/;\n", "USE `db`;\n"]))]
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(["t"] * 7 + ["ghost"]))
        names = None
        if draw(st.integers(0, 4)) == 3:
            names = draw(st.lists(st.sampled_from([n for n, _ in COLUMNS] * 3 + ["S", "nope"]), min_size=1, max_size=5))
        columns = names or [n for n, _ in COLUMNS]
        if draw(st.booleans()):  # a column of one kind of value over many rows
            same = uniform(escape)
            kinds = dict(tokens(escape), **{n: same[draw(st.sampled_from(FITS.get(n.lower(), sorted(same))))]
                                            for n in columns})
        else:
            kinds = tokens(escape)
        rows = []
        for _ in range(draw(st.integers(1, 12))):
            count = len(columns) if draw(st.integers(0, 9)) != 7 else draw(st.integers(0, len(columns) + 1))
            bad = draw(st.integers(0, len(columns) + 1)) if draw(st.integers(0, 9)) == 7 else -1
            values = []
            for i in range(count):
                kind = kinds.get((columns + ["s"])[min(i, len(columns))].lower(), kinds["s"])
                values.append(draw(space) + draw(BAD if i == bad else kind) + draw(space))
            rows.append(draw(space) + "(" + ",".join(values) + ")")
        head = f"INSERT INTO `{table}`" + (" (" + ",".join(f"`{n}`" for n in names) + ")" if names else "")
        out.append(head + " VALUES" + draw(space) + ",".join(rows) + draw(st.sampled_from([";\n", ";", " ;\n"])))
    return "".join(out)


def outcome(reader, pieces, escape):
    """(rows read, the error's text or None): the rows before an error count too."""
    rows = []
    tables = {("db", "t"): Converter(COLUMNS)}
    try:
        for row in reader(iter(pieces), tables, "db", escape, 7):
            rows.append(row)
    except ExportFormatError as e:
        return rows, str(e)
    return rows, None


def cut(data: bytes, points: list[int]) -> list[bytes]:
    at = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in zip(at, at[1:])]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), escape=st.booleans(), points=st.lists(st.integers(0, 10 ** 6), max_size=6))
@example(data=None, escape=True, points=[])  # the bench's orders row
def test_fast_reader_equals_the_reference(data, escape, points):
    if data is None:
        text = ("INSERT INTO `t` VALUES\n(1,'it\\'s a \\\"note\\\"\\nsecond; INSERT INTO x',x'00ff',1.5,2.25,12.500,"
                "b'101',2,3,'2026-11-28 10:00:00.123','[]',_binary 'a\\0b'),\n(2,NULL,NULL,NULL,NULL,NULL,NULL,NULL,"
                "NULL,NULL,NULL,NULL);\n")
    else:
        text = data.draw(sql_text(escape))
    raw = text.encode("utf-8")
    fast, reference = outcome(read_sql_rows_at, cut(raw, points), escape), outcome(
        read_sql_rows_at_reference, cut(raw, points), escape)
    assert fast == reference
    if data is None:
        assert fast[1] is None and len(fast[0]) == 2 and fast[0][0][3]["s"] == b"it's a \"note\"\nsecond; INSERT INTO x"


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(HOSTILE + ["\\", "'"]), max_size=12).map("".join))
def test_unescape_equals_the_reference(text):
    assert _unescape_fast(text) == _unescape_sql(text)


@settings(max_examples=2000, deadline=None)
@given(number | st.floats(allow_nan=False, allow_infinity=False).map(str))
def test_double_text_equals_canonical_float(text):
    try:
        want = canonical_float(text, False)
    except ValueError:
        with pytest.raises(ValueError):
            _double_text(text)
        return
    assert _double_text(text) == want


# ----------------------------------------------------------------------------- CSV

CSV_COLUMNS = [("id", "bigint"), ("s", "varchar(64)"), ("b", "varbinary(64)"), ("d", "double"), ("f", "float"),
               ("e", "enum('a','b')"), ("bits", "bit(8)")]
DIALECTS = [{}, {}, {}, {"escape_backslash": False}, {"separator": "|"}, {"separator": "||", "delimiter": "'"},
            {"delimiter": ""}, {"delimiter": "", "escape_backslash": False}, {"null": "NULL", "header": False},
            {"null": ""}, {"delimiter": "1"}, {"binary": "hex"}, {"separator": "\t", "null": "1"}]
CSV_HOSTILE = ["\\", "\\\\", '\\"', '""', '"', "'", "\\'", "\\0", "\\n", "\\r", "\\t", "\\Z", "\\b", "\\N", "\\,",
               ",", "|", "\t", "\n", "\r\n", "\r", "\x01", "\x00", "\xff", "é", "中", "a", "1", " ", "N"]
csv_body = st.lists(st.sampled_from(CSV_HOSTILE), max_size=6).map("".join)
csv_number = number | st.sampled_from(["", "1e5", "-0", "abc", "a\"b", "\\N", "N", "NULL"])


def csv_field(dialect: dict, kind: str):
    """A field's text as written (any kind may be met in any column; `kind` picks the usual one)."""
    d = dialect.get("delimiter", '"')
    null = st.just(dialect.get("null", "\\N"))
    quoted = csv_body.map(lambda b: d + b + d)
    usual = {"number": csv_number, "string": quoted, "hex": st.binary(max_size=4).map(lambda b: d + b.hex() + d),
             "label": st.sampled_from(["a", "b", "c", "1"]).map(lambda b: d + b + d)}[kind]
    return st.one_of(usual, usual, usual, usual, null, quoted, csv_number)


CSV_KINDS = {"id": "number", "s": "string", "b": "string", "d": "number", "f": "number", "e": "label", "bits": "number"}


def written(value: str, dialect: dict) -> str:
    """A string field as Dumpling writes it (pkg/dumpformat/csvfile appendField: enclosed;
    with --escape-backslash NUL, CR, LF, the backslash and the enclosure's first byte (without
    an enclosure the separator's) backslash-escaped, else the enclosure doubled)."""
    d, sep = dialect.get("delimiter", '"'), dialect.get("separator", ",")
    if dialect.get("escape_backslash", True):
        special = (d or sep)[0]
        value = "".join("\\" + {"\0": "0", "\r": "r", "\n": "n"}.get(c, c) if c in "\0\r\n\\" + special else c
                        for c in value)
    elif d:
        value = value.replace(d, d + d)
    return d + value + d


@st.composite
def csv_text(draw, dialect: dict) -> str:
    sep = dialect.get("separator", ",")
    d = dialect.get("delimiter", '"')
    names = [n for n, _ in CSV_COLUMNS]
    lines = []
    if dialect.get("header", True):
        header = draw(st.sampled_from([names, names, names[::-1], names[:3], ["ID", "S"], ["id", "nope"], []]))
        names = header or names
        lines.append(sep.join(d + n + d for n in header))
    uniform = draw(st.booleans())  # one kind of value per column over many rows (the batch's bulk paths)
    fixed = {n: draw(csv_field(dialect, CSV_KINDS.get(n.lower(), "string"))) for n in names}
    for _ in range(draw(st.integers(0, 14))):
        if draw(st.integers(0, 30 if uniform else 10)) == 0:
            lines.append("")  # an empty line
            continue
        count = len(names) if draw(st.integers(0, 30 if uniform else 9)) else draw(st.integers(1, len(names) + 1))
        fields = []
        for i in range(count):
            name = names[min(i, len(names) - 1)]
            kind = CSV_KINDS.get(name.lower(), "string")
            if uniform and draw(st.integers(0, 15)):
                fields.append(fixed[name] if draw(st.integers(0, 3)) == 0 else draw(
                    {"number": number, "string": st.text(max_size=6).map(lambda v: written(v, dialect)),
                     "label": st.sampled_from(["a", "b"]).map(lambda v: written(v, dialect))}[kind]))
            else:
                fields.append(draw(csv_field(dialect, kind)))
        lines.append(sep.join(fields))
    ends = [draw(st.sampled_from(["\r\n"] * 6 + ["\n"])) for _ in lines]
    text = "".join(line + end for line, end in zip(lines, ends))
    if text and draw(st.integers(0, 4)) == 0:
        text = text[:-len(ends[-1])]  # the last line without its terminator
    return text


def csv_outcome(reader, raw: bytes, dialect: dict, start: int, points: list[int]):
    """(rows read, the error or None) of the part of `raw` from `start`, as split.part_rows
    hands it: the pieces from `start`, and the whole file for the header."""
    converter = Converter(CSV_COLUMNS, dialect.get("binary", "raw"))
    rows = []
    try:
        for row in reader(iter(cut(raw[start:], points)), converter, CsvDialect(**dialect), start,
                          iter(cut(raw, points)) if start else None):
            rows.append(row)
    except Exception as e:  # noqa: BLE001 - any error must be the same error
        return rows, f"{type(e).__name__}: {e}"
    return rows, None


@settings(max_examples=400, deadline=None)
@given(data=st.data(), which=st.integers(0, len(DIALECTS) - 1), points=st.lists(st.integers(0, 10 ** 6), max_size=6),
       start=st.integers(0, 10 ** 6))
@example(data=None, which=0, points=[], start=0)  # the bench's orders row
def test_fast_csv_reader_equals_the_reference(data, which, points, start):
    dialect = DIALECTS[which]
    if data is None:
        text = ('"id","s","b","d","f","e","bits"\r\n'
                '1,"it\'s a \\"note\\"\\nsecond, line","\\0\x01\\\\",1.5,2.25,"b",5\r\n'
                '2,\\N,\\N,\\N,\\N,\\N,\\N\r\n3,"\\N","",1e300,0.1,"a",0\r\n')
    else:
        text = data.draw(csv_text(dialect))
    raw = text.encode("latin-1", "replace") if which % 2 else text.encode("utf-8")
    if start:  # a line start, as split.owned finds them (after an LF)
        starts = [i + 1 for i, c in enumerate(raw) if c == 10 and i + 1 < len(raw)]
        start = starts[start % len(starts)] if starts else 0
    fast = csv_outcome(read_csv_rows_at, raw, dialect, start, points)
    assert fast == csv_outcome(read_csv_rows_at_reference, raw, dialect, start, points)
    if data is None:
        line_starts = [i + 2 for i in range(len(raw)) if raw[i:i + 2] == b"\r\n"][:3]
        assert fast[1] is None and [at for at, _ in fast[0]] == line_starts == [33, 91, 112]
        assert fast[0][0][1]["s"] == b"it's a \"note\"\nsecond, line" and fast[0][0][1]["b"] == b"\0\x01\\"
        assert fast[0][1][1] == dict.fromkeys(("id", "s", "b", "d", "f", "e", "bits")) | {"id": b"2"}
        assert fast[0][2][1]["s"] == b"N" and fast[0][2][1]["b"] == b""


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(CSV_HOSTILE), max_size=12).map("".join))
def test_csv_unescape_equals_the_reference(text):
    if len(text) - len(text.rstrip("\\")) % 2:
        text += "a"  # a field's backslashes pair up (the reader's regex)
    assert _unescape_csv(text) == _unescape_csv_reference(text)
