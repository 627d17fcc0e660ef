"""TiCDC's `csv` protocol, written by its cloud storage sink (tiflow pkg/sink/codec/csv), read
one row per record.

A row is: operation (`I`, `U`, `D`), table, schema, [commit ts with `include-commit-ts`],
[is-updated `true`/`false` with `output-old-value`], [handle key with `output-handle-key`],
then the table's columns in table order. NULL is the `null` string (default `\\N`) written
bare; strings are quoted with `quote` (default `"`, doubled inside), or, with an empty
quote, escaped with backslashes (`\\n`, `\\r`, `\\\\`, each delimiter character); numbers are
bare. Binary columns are base64 or hex (`binary-encoding-method`).

CSV carries no types: the column names and types come with the record, from the table's
storage-sink schema file, as the header `ticdc-table-columns` (JSON `[[name, type, is_pk],
...]`, set by the ticdc-storage layout). Deliberate differences from the canonical event:
ENUM / SET arrive as their names, which the schema files cannot map back to indexes, so the
value is the name's text (label too); an UPDATE without `output-old-value` has no old values
(like Avro, the replay fills them from the key's previous change); with `output-old-value`
TiCDC writes an UPDATE as a `D` row and an `I` row at one commit ts, read as that DELETE +
INSERT pair (the replay orders DELETE first). Read only: encoding is not offered.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator

import orjson

from .base import Codec, EncodedMessage, KafkaRecord, Option, register
from .canal_common import TZ_OPTION, canonical_float
from .errors import ConfigError, EncodeError
from .events import ColumnFlag, Kind, Op, new_event
from .mysql_types import parse_type
from .tso import physical_ms

COLUMNS_HEADER = "ticdc-table-columns"
_OPS = {"I": Op.INSERT, "U": Op.UPDATE, "D": Op.DELETE}


def split_fields(line: str, delimiter: str, quote: str, null: str = "\\N") -> list[str | None]:
    """The fields of one CSV row as TiCDC's csv encoder writes them; None for SQL NULL (the
    bare `null` text: quoted or escaped, the same text is a string)."""
    fields: list[str | None] = []
    i, n = 0, len(line)
    while True:
        if quote and line.startswith(quote, i):
            i += len(quote)
            parts = []
            while True:
                end = line.find(quote, i)
                if end < 0:
                    raise ValueError(f"unterminated quoted field at character {i}")
                parts.append(line[i:end])
                i = end + len(quote)
                if line.startswith(quote, i):  # a doubled quote
                    parts.append(quote)
                    i += len(quote)
                    continue
                break
            fields.append("".join(parts))
            if i == n:
                return fields
            if not line.startswith(delimiter, i):
                raise ValueError(f"text after a closing quote at character {i}")
            i += len(delimiter)
            continue
        if quote:
            end = line.find(delimiter, i)
            end = n if end < 0 else end
            fields.append(None if line[i:end] == null else line[i:end])
        else:  # backslash escapes
            out, end = [], i
            while end < n and not line.startswith(delimiter, end):
                ch = line[end]
                if ch == "\\" and end + 1 < n:
                    nxt = line[end + 1]
                    out.append({"n": "\n", "r": "\r"}.get(nxt, nxt))
                    end += 2
                    continue
                out.append(ch)
                end += 1
            fields.append(None if line[i:end] == null else "".join(out))
        if end >= n:
            return fields
        i = end + len(delimiter)


@register
class TiCDCCsvCodec(Codec):
    name = "csv"
    writable = False
    description = "TiCDC's csv protocol (cloud storage sink), with table schemas from the sink's schema files"
    options = (
        Option("delimiter", ",", "field delimiter ([sink.csv] delimiter)"),
        Option("quote", '"', "quote character; empty: backslash escapes ([sink.csv] quote)"),
        Option("null", "\\N", "the text of SQL NULL ([sink.csv] null)"),
        Option("include-commit-ts", False, "rows carry the commit ts after the schema name", bool),
        Option("output-old-value", False, "rows carry is-updated, UPDATEs are a D row and an I row", bool),
        Option("output-handle-key", False, "rows carry the handle key before the columns", bool),
        Option("binary-encoding-method", "base64", "how binary columns are written", str, ("base64", "hex")),
        TZ_OPTION,
    )

    def validate(self) -> None:
        if not self.config["delimiter"]:
            raise ConfigError("option delimiter must not be empty")

    def decode(self, record: KafkaRecord) -> list[dict]:
        if record.value is None:
            return []
        try:
            line = record.value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"row is not UTF-8 ({e})") from None
        line = line.rstrip("\r\n")
        if not line:
            return []
        try:
            fields = split_fields(line, self.config["delimiter"], self.config["quote"], self.config["null"])
        except ValueError as e:
            raise self.error(f"not a csv row: {e}") from None
        columns = self._columns(record)
        meta = 3 + self.config["include-commit-ts"] + self.config["output-old-value"] + self.config["output-handle-key"]
        if len(fields) < meta + 1:
            raise self.error(f"a csv row has at least {meta + 1} fields with these options, this one {len(fields)}")
        op = _OPS.get(fields[0])
        if op is None:
            raise self.error(f"operation {fields[0]!r} is not I, U or D")
        table, database = fields[1], fields[2]
        commit_ts = None
        if self.config["include-commit-ts"]:
            try:
                commit_ts = int(fields[3])
            except (TypeError, ValueError):
                raise self.error(f"commit ts {fields[3]!r} is not a number") from None
        data = fields[meta:]
        if columns is None:
            raise self.error(f"no table schema for {database}.{table}: csv carries no column names or types "
                             "(read it with --layout ticdc-storage, which takes them from the schema files)")
        if len(data) != len(columns):
            raise self.error(f"{database}.{table} row has {len(data)} columns, its schema file {len(columns)}")
        image = [self._column(name, type_text, is_pk, text) for (name, type_text, is_pk), text in zip(columns, data)]
        keys = [name for name, _, is_pk in columns if is_pk]
        event = new_event(Kind.ROW, op=op, commit_ts=commit_ts,
                          execute_ts_ms=physical_ms(commit_ts) if commit_ts is not None else None,
                          database=database, table=table, key_columns=keys,
                          before=image if op == Op.DELETE else None,
                          after=None if op == Op.DELETE else image)
        return [event]

    def _columns(self, record: KafkaRecord):
        for name, value in record.headers:
            if name == COLUMNS_HEADER:
                return [tuple(c) for c in orjson.loads(value)]
        return None

    def _column(self, name: str, type_text: str, is_pk: bool, text: str | None) -> dict:
        mysql_type = parse_type(type_text)
        flags = int(ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY) if is_pk else 0
        if mysql_type.unsigned:
            flags |= int(ColumnFlag.UNSIGNED)
        label = None
        if text is None:
            value = None
        elif mysql_type.is_binary:
            flags |= int(ColumnFlag.BINARY)
            try:
                value = (base64.b64decode(text, validate=True) if self.config["binary-encoding-method"] == "base64"
                         else bytes.fromhex(text))
            except (binascii.Error, ValueError):
                raise self.error(f"column {name}: {text[:40]!r} is not {self.config['binary-encoding-method']}") from None
        elif mysql_type.base in ("float", "double"):
            try:
                value = canonical_float(text, mysql_type.base == "float").encode()  # Go's %v may use exponents
            except ValueError:
                raise self.error(f"column {name}: {text[:40]!r} is not a number") from None
        else:
            value = text.encode("utf-8")
            if mysql_type.base in ("enum", "set"):
                label = text
        return {"name": name, "mysql_type": type_text, "flags": flags, "value": value, "label": label}

    def encode(self, events: Iterable[dict], *, topic: str, partition: int) -> Iterator[EncodedMessage]:
        raise EncodeError("csv is read here, not written: choose another --target-protocol")
