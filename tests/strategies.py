"""Hypothesis strategies for canonical events, shared by every codec's round-trip tests.

Values follow docs/canonical-events.md: bytes of the canonical text, raw bytes for binary
types. `table_schemas()` draws a table (columns with MySQL types, some of them the key);
`row_events(schema)` draws INSERT / UPDATE / DELETE events of it; `events()` mixes rows, DDL
and watermarks. Codec tests adapt the drawn events to what their protocol can carry.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
from hypothesis import strategies as st

from cdc_codecs.events import ColumnFlag, Kind, Op, new_event
from cdc_codecs.mysql_types import enum_set_label, parse_type

U64_MAX = (1 << 64) - 1

_INT_RANGES = {
    "tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64,
}

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFFF),
    max_size=24,
) | st.sampled_from(["<a href=\"x\">&amp;</a>", "line\nbreak\ttab\r", "\x00\x01\x1f", "é中文😀", "\u2028\u2029", ""])


def _int_type(base: str, unsigned: bool):
    bits = _INT_RANGES[base]
    lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    values = st.integers(lo, hi) | st.sampled_from([lo, hi, 0])
    return values.map(lambda v: str(v).encode())


def _decimal(precision: int, scale: int):
    """DECIMAL(precision, scale) as MySQL prints it: plain digits, exactly `scale` decimals."""
    limit = 10 ** precision - 1

    def render(n: int) -> bytes:
        sign = "-" if n < 0 else ""
        digits = str(abs(n)).rjust(scale + 1, "0")
        text = digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"
        return (sign + text).encode()

    return st.integers(-limit, limit).map(render)


def _float32():
    return st.floats(width=32, allow_nan=False, allow_infinity=False).map(
        lambda f: np.format_float_positional(np.float32(f), unique=True, trim="-").encode()
    )


def _float64():
    return st.floats(allow_nan=False, allow_infinity=False).map(
        lambda f: np.format_float_positional(np.float64(f), unique=True, trim="-").encode()
    )


def _datetime(fsp: int):
    def render(d: dt.datetime) -> bytes:
        text = d.strftime("%Y-%m-%d %H:%M:%S")
        if fsp:
            text += "." + f"{d.microsecond:06d}"[:fsp]
        return text.encode()

    return st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)).map(render) | st.just(
        b"0000-00-00 00:00:00" + (b"." + b"0" * fsp if fsp else b"")
    )


def _time():
    return st.tuples(st.booleans(), st.integers(0, 838), st.integers(0, 59), st.integers(0, 59)).map(
        lambda t: f"{'-' if t[0] and t[1] else ''}{t[1]:02d}:{t[2]:02d}:{t[3]:02d}".encode()
    )


_LABELS = ("a", "b", "c,d", "it's", "é")


def column_types():
    """Strategy of (mysql_type text, extra flags, value strategy)."""
    options = []
    for base in _INT_RANGES:
        options.append(st.just((base, 0, _int_type(base, False))))
        options.append(st.just((f"{base} unsigned", ColumnFlag.UNSIGNED, _int_type(base, True))))
    options += [
        st.just(("float", 0, _float32())),
        st.just(("double", 0, _float64())),
        st.tuples(st.integers(1, 30), st.integers(0, 10)).map(
            lambda ps: (f"decimal({ps[0] + ps[1]},{ps[1]})", 0, _decimal(ps[0] + ps[1], ps[1]))
        ),
        st.just(("date", 0, st.dates().map(lambda d: d.isoformat().encode()))),
        st.sampled_from([0, 3, 6]).map(lambda f: (f"datetime({f})" if f else "datetime", 0, _datetime(f))),
        st.just(("timestamp", 0, _datetime(0))),
        st.just(("time", 0, _time())),
        st.just(("year", 0, st.integers(1901, 2155).map(lambda y: str(y).encode()))),
        st.just(("varchar(64)", 0, TEXT.map(lambda s: s.encode()))),
        st.just(("char(16)", 0, TEXT.map(lambda s: s.encode()))),
        st.just(("text", 0, TEXT.map(lambda s: s.encode()))),
        st.just(("varbinary(64)", ColumnFlag.BINARY, st.binary(max_size=32))),
        st.just(("binary(8)", ColumnFlag.BINARY, st.binary(min_size=8, max_size=8))),
        st.just(("blob", ColumnFlag.BINARY, st.binary(max_size=64))),
        st.just((
            "enum('a','b','c,d','it''s','é')", 0,
            st.integers(1, len(_LABELS)).map(lambda i: str(i).encode()),
        )),
        st.just((
            "set('a','b','x','y')", 0,
            st.integers(0, 15).map(lambda i: str(i).encode()),
        )),
        st.just(("bit(64)", ColumnFlag.UNSIGNED, st.integers(0, U64_MAX).map(lambda v: str(v).encode()))),
        st.just(("json", 0, st.dictionaries(st.text(max_size=5), st.integers(), max_size=3).map(
            lambda d: ("{" + ", ".join(f'"{k}": {v}' for k, v in d.items()) + "}").encode()
        ))),
    ]
    return st.one_of(options)


@st.composite
def table_schemas(draw, min_columns: int = 1, max_columns: int = 6):
    """A table: database, name, and columns [(name, mysql_type, flags, value strategy)]."""
    n = draw(st.integers(min_columns, max_columns))
    columns = [("id", "bigint", ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY, _int_type("bigint", False))]
    for i in range(n):
        type_text, flags, values = draw(column_types())
        columns.append((f"c{i}", type_text, int(flags), values))
    database = draw(st.sampled_from(["test", "shop", "db-1"]))
    table = draw(st.sampled_from(["t", "orders", "Weird Table"]))
    return {"database": database, "table": table, "columns": columns}


@st.composite
def images(draw, schema):
    image = []
    for name, type_text, flags, values in schema["columns"]:
        nullable = not flags & ColumnFlag.PRIMARY_KEY
        value = draw(st.none() | values) if nullable else draw(values)
        mysql_type = parse_type(type_text)
        image.append({
            "name": name,
            "mysql_type": type_text,
            "flags": flags,
            "value": value,
            "label": enum_set_label(mysql_type, value) if mysql_type.labels else None,
        })
    return image


@st.composite
def row_events(draw, schema=None, commit_ts: bool = True):
    schema = schema or draw(table_schemas())
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
    before = draw(images(schema)) if op != Op.INSERT else None
    after = draw(images(schema)) if op != Op.DELETE else None
    ts = draw(st.integers(1 << 40, (1 << 62) - 1)) if commit_ts else None
    return new_event(
        Kind.ROW, op=op, commit_ts=ts, execute_ts_ms=(ts >> 18) if ts else None,
        database=schema["database"], table=schema["table"], key_columns=["id"],
        before=before, after=after,
    )


DDL_QUERIES = [
    ("create table", "CREATE TABLE `t` (`id` BIGINT PRIMARY KEY, `c0` VARCHAR(10))"),
    ("add column", "ALTER TABLE `t` ADD COLUMN `c9` INT DEFAULT 5"),
    ("drop column", "ALTER TABLE `t` DROP COLUMN `c9`"),
    ("truncate table", "TRUNCATE TABLE `t`"),
    ("drop table", "DROP TABLE `t`"),
    ("create schema", "CREATE DATABASE `test`"),
    ("add index", "CREATE INDEX i ON t (c0)"),
]


@st.composite
def ddl_events(draw, commit_ts: bool = True):
    ddl_type, query = draw(st.sampled_from(DDL_QUERIES))
    ts = draw(st.integers(1 << 40, (1 << 62) - 1)) if commit_ts else None
    return new_event(
        Kind.DDL, commit_ts=ts, execute_ts_ms=(ts >> 18) if ts else None, database="test",
        table=None if ddl_type == "create schema" else "t", ddl_query=query, ddl_type=ddl_type,
    )


def watermark_events():
    return st.integers(1 << 40, (1 << 62) - 1).map(
        lambda ts: new_event(Kind.WATERMARK, watermark_ts=ts, execute_ts_ms=ts >> 18)
    )


def events(commit_ts: bool = True, watermarks: bool = True):
    choices = [row_events(commit_ts=commit_ts), ddl_events(commit_ts=commit_ts)]
    if watermarks:
        choices.append(watermark_events())
    return st.one_of(choices)
