"""TiCDC's csv protocol (tiflow pkg/sink/codec/csv csv_message.go): rows written here by the
encoder's rules - op, table, schema, [commit ts], [is-updated], columns; NULL bare, strings
quoted with doubled quotes, or backslash-escaped without a quote; numbers bare (%v);
binary base64/hex - and read back with the table's columns from its schema file."""

from __future__ import annotations

import base64

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_codecs import DecodeError, KafkaRecord, get_codec
from cdc_codecs.events import Op
from cdc_codecs.ticdc_csv import COLUMNS_HEADER, split_fields

COLUMNS = [["id", "int", True], ["name", "varchar(20)", False], ["blob", "varbinary(8)", False],
           ["price", "double", False], ["state", "enum", False], ["big", "bigint unsigned", False]]


def tidb_field(value, quote='"', delimiter=",", null="\\N") -> str:
    """formatValue: nil -> null string; strings quoted (or escaped); others %v."""
    if value is None:
        return null
    if not isinstance(value, str):
        return str(value)
    if quote:
        return quote + value.replace(quote, quote + quote) + quote
    out, i = [], 0
    while i < len(value):
        if value.startswith(delimiter, i):
            out.append("".join("\\" + ch for ch in delimiter))
            i += len(delimiter)
            continue
        ch = value[i]
        out.append({"\n": "\\n", "\r": "\\r", "\\": "\\\\"}.get(ch, ch))
        i += 1
    return "".join(out)


def row(values, **kw) -> bytes:
    delimiter = kw.get("delimiter", ",")
    return delimiter.join(tidb_field(v, **kw) for v in values).encode() + b"\r\n"


def record(value: bytes, columns=COLUMNS) -> KafkaRecord:
    return KafkaRecord("shop.t", 0, 7, None, None, value, ((COLUMNS_HEADER, orjson.dumps(columns)),), "x.csv")


def values(event, image="after"):
    return {c["name"]: c["value"] for c in event[image]}


def test_insert_with_commit_ts_null_binary_and_float():
    codec = get_codec("csv", {"include-commit-ts": "true"})
    line = row(["I", "t", "shop", 449_000_000_000_000_001, 1, 'say "hi", ok', base64.b64encode(b"\x00\xff").decode(),
                "1e+21", "paid", 18446744073709551615])
    [event] = codec.decode(record(line))
    assert (event["op"], event["commit_ts"], event["database"], event["table"]) == (
        Op.INSERT, 449_000_000_000_000_001, "shop", "t")
    assert event["key_columns"] == ["id"]
    assert values(event) == {"id": b"1", "name": b'say "hi", ok', "blob": b"\x00\xff",
                             "price": b"1000000000000000000000", "state": b"paid",
                             "big": b"18446744073709551615"}
    assert next(c for c in event["after"] if c["name"] == "state")["label"] == "paid"


def test_null_is_bare():
    [event] = get_codec("csv").decode(record(b"D,t,shop,2,\\N,\\N,\\N,\\N,\\N\r\n"))
    assert event["op"] == Op.DELETE and event["commit_ts"] is None and event["after"] is None
    assert values(event, "before") == {"id": b"2", "name": None, "blob": None, "price": None, "state": None,
                                       "big": None}


def test_quoted_null_text_is_the_string():
    codec = get_codec("csv")
    [event] = codec.decode(record(row(["I", "t", "shop", 3, "\\N", None, None, None, None])))
    assert values(event)["name"] == b"\\N" and values(event)["blob"] is None


def test_output_old_value_update_is_a_delete_and_an_insert_and_hex_binary():
    codec = get_codec("csv", {"include-commit-ts": "true", "output-old-value": "true",
                              "binary-encoding-method": "hex"})
    old = row(["D", "t", "shop", 5, True, 1, "a", "00ff", 1.5, "new", 1])
    new = row(["I", "t", "shop", 5, True, 1, "b", "0102", 2.5, "paid", 2])
    [d], [i] = codec.decode(record(old)), codec.decode(record(new))
    assert (d["op"], i["op"], d["commit_ts"], i["commit_ts"]) == (Op.DELETE, Op.INSERT, 5, 5)
    assert values(d, "before")["blob"] == b"\x00\xff" and values(i)["blob"] == b"\x01\x02"


def test_update_without_old_value_has_no_before():
    [event] = get_codec("csv").decode(record(row(["U", "t", "shop", 1, "x", None, 0.1, None, 3])))
    assert event["op"] == Op.UPDATE and event["before"] is None and values(event)["price"] == b"0.1"


def test_escapes_without_quote_and_a_custom_delimiter_and_null():
    codec = get_codec("csv", {"quote": "", "delimiter": "|", "null": "NULL"})
    line = row(["I", "t", "shop", 4, "a|b\nc\\d", None, None, None, None], quote="", delimiter="|", null="NULL")
    [event] = codec.decode(record(line))
    assert values(event)["name"] == b"a|b\nc\\d" and values(event)["blob"] is None


def test_rows_that_do_not_fit_are_decode_errors():
    codec = get_codec("csv")
    with pytest.raises(DecodeError, match="columns, its schema file"):
        codec.decode(record(row(["I", "t", "shop", 1, "x"])))
    with pytest.raises(DecodeError, match="no table schema"):
        codec.decode(KafkaRecord("shop.t", 0, 1, None, None, row(["I", "t", "shop", 1])))
    with pytest.raises(DecodeError, match="not I, U or D"):
        codec.decode(record(row(["X", "t", "shop", 1, "x", None, None, None, None])))
    with pytest.raises(DecodeError, match="not base64"):
        codec.decode(record(row(["I", "t", "shop", 1, "x", "%%%", None, None, None])))


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(st.lists(st.one_of(st.none(), texts, st.integers(-10**20, 10**20)), min_size=1, max_size=8),
       st.sampled_from([('"', ","), ("'", ";"), ("", ","), ("", "|#")]))
def test_fields_round_trip_through_the_encoders_rules(items, style):
    quote, delimiter = style
    line = delimiter.join(tidb_field(v, quote=quote, delimiter=delimiter) for v in items)
    got = split_fields(line, delimiter, quote)
    assert got == [None if v is None else str(v) for v in items]
