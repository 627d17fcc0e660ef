"""Base exports (issue 30, first step): discovering Dumpling and mysqldump exports and reading
their rows as canonical values, from fixtures shaped as the producers write them
(tests/fixtures/base_exports/README.md), plus a property: rows written by a writer that
follows Dumpling's escaping rules (below, sharing no code with the reader) read back equal."""

from __future__ import annotations

import gzip
import pathlib

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_apps import storage
from spark_apps.base_export import (Converter, CsvDialect, ExportFormatError, ExportRefused, discover,
                                    pieces_of, read_csv_rows_at, read_sql_rows)
from spark_apps.base_export.discover import parse_dumpling_metadata, unescape_name

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "base_exports"

# the rows every fixture of `shop.items` holds, as canonical values (cdc_codecs.events):
# ENUM as its index, SET as its bitmask, BIT as its number, binary as raw bytes
ITEMS = [
    {"id": b"1", "name": b"plain", "price": b"9.99", "weight": b"1.5", "ratio": b"2.25", "data": b"\x00\xff\x10",
     "flags": b"5", "kind": b"1", "tags": b"5", "created": b"2026-11-20 10:00:00.123", "day": b"2026-11-20",
     "note": b"line1\nline2 'single' \"double\" back\\slash \x1a ctrl-z", "doc": b'{"k": [1, 2]}'},
    dict.fromkeys(["id", "name", "price", "weight", "ratio", "data", "flags", "kind", "tags", "created", "day",
                   "note", "doc"]) | {"id": b"2"},
    {"id": b"3", "name": "café ☕".encode(), "price": b"0.00", "weight": b"-0.5", "ratio": b"0.0000001", "data": b"",
     "flags": b"0", "kind": b"3", "tags": b"0", "created": b"2024-02-29 23:59:59.999", "day": b"2024-02-29",
     "note": b"tab\there NUL\x00end CR\rLF", "doc": b"null"},
    {"id": b"4", "name": b"),('; not a row end", "price": b"-12345678.90", "weight": b"34028235" + b"0" * 31,
     "ratio": b"-17976931348623157" + b"0" * 292, "data": b"'", "flags": b"255", "kind": b"2", "tags": b"2",
     "created": b"1000-01-01 00:00:00.000", "day": b"1000-01-01", "note": b"", "doc": b"[]"},
    {"id": b"5", "name": b"", "price": b"0.01", "weight": b"0", "ratio": b"0", "data": b"\\", "flags": b"128",
     "kind": b"1", "tags": b"7", "created": b"9999-12-31 23:59:59.000", "day": b"9999-12-31", "note": b"\\N",
     "doc": b'"str"'},
]
# MySQL prints FLOAT with 6 significant digits in a dump (mysqldump-8.0 fixture)
ITEMS_MYSQL = [dict(r, weight=b"340282" + b"0" * 33) if r["id"] == b"4" else r for r in ITEMS]


def sql_rows(export, pieces_for=None):
    converters = export.converters()
    out = []
    for f in export.files:
        pieces = pieces_for(f) if pieces_for else storage.iter_pieces(f.uri)
        out.extend(read_sql_rows(pieces, converters, f.database or None))
    return out


def one_byte_pieces(f):
    """The decompressed file one byte at a time: every place a piece can cut a row."""
    data = b"".join(storage.iter_pieces(f.uri))
    return (data[i:i + 1] for i in range(len(data)))


# ----------------------------------------------------------------------------- discovery

def test_dumpling_sql_discovery():
    export = discover(str(FIXTURES / "dumpling-sql"))
    assert export.producer == "dumpling"
    assert export.position.kind == "tso" and export.position.tso == 453817264815718401
    assert [(f.database, f.table, f.index, f.format) for f in export.files] == [
        ("shop", "items", "000000000", "sql"), ("shop", "items", "000000001", "sql"),
        ("shop", "odd.name", "000000000", "sql")]
    # the view: its -schema-view.sql is skipped and its placeholder CREATE TABLE is no table
    assert [pathlib.Path(uri).name for uri, _ in export.skipped] == ["shop.v-schema-view.sql"]
    history = export.schema_history()
    assert sorted(history.tables) == [("shop", "items"), ("shop", "odd.name")]
    items = history.tables[("shop", "items")]
    assert items.key_columns == ["id"]
    assert [c.name for c in items.columns][:3] == ["id", "name", "price"]
    assert history.tables[("shop", "odd.name")].key_columns == []


def test_dumpling_metadata_positions():
    text = (FIXTURES / "dumpling-mysql-zstd" / "metadata").read_text()
    position = parse_dumpling_metadata(text)
    assert (position.kind, position.log_file, position.log_pos) == ("binlog", "binlog.000007", 1543)
    assert position.gtid == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57"
    assert position.log_sequence() == 7
    # newer servers: SHOW BINARY LOG STATUS; the replica section is not the export's position
    newer = ("Started dump at: 2026-01-01 00:00:00\nSHOW SLAVE STATUS:\n\tHost: src\n\tLog: b.000001\n\tPos: 9\n"
             "\tGTID:\n\nSHOW BINARY LOG STATUS:\n\tLog: tidb-binlog\n\tPos: 42\n\tGTID:\n\n")
    assert parse_dumpling_metadata(newer).tso == 42
    with pytest.raises(ExportRefused, match="no SHOW MASTER STATUS"):
        parse_dumpling_metadata("Started dump at: 2026-01-01 00:00:00\nFinished dump at: 2026-01-01 00:00:01\n")


def test_dumpling_file_names_unescape():
    # writer.go's fn: control characters and %"*./:<>?\| as %XX, -schema as %2Dschema
    assert unescape_name("odd%2Ename") == "odd.name"
    assert unescape_name("a%2Dschema") == "a-schema"
    assert unescape_name("100%25") == "100%"


def test_dumpling_without_table_schema_is_refused(tmp_path):
    for name in ("metadata", "shop-schema-create.sql", "shop.items.000000000.sql"):
        (tmp_path / name).write_bytes((FIXTURES / "dumpling-sql" / name).read_bytes())
    with pytest.raises(ExportRefused, match=r"no shop\.items-schema\.sql"):
        discover(str(tmp_path))


def test_mysqldump_discovery():
    export = discover(str(FIXTURES / "mysqldump-8.0"))
    assert export.producer == "mysqldump"
    p = export.position
    assert (p.kind, p.log_file, p.log_pos, p.log_sequence()) == ("binlog", "binlog.000003", 4711, 3)
    assert p.gtid == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57"
    assert sorted(export.schema_history().tables) == [("shop", "items")]
    old = discover(str(FIXTURES / "mysqldump-5.7"))
    assert (old.position.log_file, old.position.log_pos) == ("mysql-bin.000012", 154)
    assert old.files[0].database == "legacy"  # no --databases: the header names it
    blobs = old.schema_history().tables[("legacy", "blobs")]
    assert [c.name for c in blobs.columns] == ["id", "payload", "bits", "label"]


def test_mysqldump_without_position_is_refused(tmp_path):
    text = (FIXTURES / "mysqldump-5.7" / "legacy.sql").read_bytes()
    (tmp_path / "legacy.sql").write_bytes(text.replace(b"-- CHANGE MASTER TO", b"-- nothing"))
    with pytest.raises(ExportRefused, match="--source-data=2"):
        discover(str(tmp_path))


def test_nothing_there_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ExportRefused, match="no Dumpling metadata file and no mysqldump file"):
        discover(str(tmp_path))


# ----------------------------------------------------------------------------- rows

def test_dumpling_sql_rows():
    export = discover(str(FIXTURES / "dumpling-sql"))
    rows = sql_rows(export)
    assert [r for db, t, r in rows if t == "items"] == ITEMS
    # complete-insert names the columns (a generated column is not dumped); keyless duplicates stay
    assert [r for db, t, r in rows if t == "odd.name"] == [
        {"a": b"1", "b": b"one"}, {"a": b"1", "b": b"one"}, {"a": None, "b": b"n"}]
    assert sql_rows(export, one_byte_pieces) == rows


def test_dumpling_csv_gzip_rows():
    export = discover(str(FIXTURES / "dumpling-csv-gzip"))
    assert [f.format for f in export.files] == ["csv"]
    converter = export.converters()[("shop", "items")]
    f = export.files[0]
    data = pathlib.Path(f.uri).read_bytes()
    assert [r for _, r in read_csv_rows_at(pieces_of(f.uri, data), converter)] == ITEMS
    plain = gzip.decompress(data)
    assert [r for _, r in read_csv_rows_at((plain[i:i + 1] for i in range(len(plain))), converter)] == ITEMS


@pytest.mark.parametrize("reader", ["batch", "reference"])
def test_an_empty_line_without_enclosure_is_an_empty_string(reader):
    """Dumpling with `--csv-delimiter ''` writes a one-column row holding '' as a bare line
    terminator, NULL as the null text (pingcap/tidb dumpling `WriteInsertInCsv` → dumpformat
    `csvfile`: an empty field, then the line end): the row is read, not skipped as an empty
    line. A table of two columns never gets such a line from Dumpling: refused by its count."""
    from spark_apps.base_export.rows import read_csv_rows_at, read_csv_rows_at_reference

    read = read_csv_rows_at if reader == "batch" else read_csv_rows_at_reference
    bare = CsvDialect(delimiter="")
    one = Converter([("s", "varchar(8)")])
    text = b"s\r\na\r\n\r\n\\N\r\n\r\nb\r\n"
    for cuts in ([text], [text[i:i + 1] for i in range(len(text))]):
        assert [row for _, row in read(iter(cuts), one, bare)] == [
            {"s": b"a"}, {"s": b""}, {"s": None}, {"s": b""}, {"s": b"b"}]
    # with the default enclosure Dumpling writes '' as "", so an empty line is no row
    assert [row for _, row in read(iter([b'"s"\r\n"a"\r\n\r\n""\r\n']), one)] == [{"s": b"a"}, {"s": b""}]
    two = Converter([("a", "int"), ("b", "varchar(8)")])
    with pytest.raises(ExportFormatError, match="a row of 1 values for 2 columns"):
        list(read(iter([b"a,b\r\n1,x\r\n\r\n2,y\r\n"]), two, CsvDialect(delimiter="")))


def test_dumpling_zstd_and_snappy_rows(tmp_path):
    export = discover(str(FIXTURES / "dumpling-mysql-zstd"))
    assert [r for _, _, r in sql_rows(export)][0] == {"a": b"1", "b": b"one"}
    # --compress snappy: the framed format (snappy.NewBufferedWriter), suffix .snappy
    for name in ("metadata", "shop-schema-create.sql", "shop.items-schema.sql"):
        (tmp_path / name).write_bytes((FIXTURES / "dumpling-sql" / name).read_bytes())
    for name in ("shop.items.000000000.sql", "shop.items.000000001.sql"):
        data = (FIXTURES / "dumpling-sql" / name).read_bytes()
        (tmp_path / (name + ".snappy")).write_bytes(snappy.StreamCompressor().compress(data))
    snappy_export = discover(str(tmp_path))
    assert [f.uri.endswith(".snappy") for f in snappy_export.files] == [True, True]
    assert [r for _, _, r in sql_rows(snappy_export)] == ITEMS
    bytes_pieces = [r for _, _, r in sql_rows(
        snappy_export, lambda f: pieces_of(f.uri, pathlib.Path(f.uri).read_bytes()))]
    assert bytes_pieces == ITEMS


def test_mysqldump_rows():
    export = discover(str(FIXTURES / "mysqldump-8.0"))
    rows = sql_rows(export)
    assert [(db, t) for db, t, _ in rows] == [("shop", "items")] * 5
    assert [r for _, _, r in rows] == ITEMS_MYSQL
    assert sql_rows(export, one_byte_pieces) == rows
    old = sql_rows(discover(str(FIXTURES / "mysqldump-5.7")))
    assert old == [("legacy", "blobs", {"id": b"1", "payload": b"\x00\xff\n'", "bits": b"2748", "label": b"a"}),
                   ("legacy", "blobs", {"id": b"2", "payload": b"", "bits": b"0", "label": None}),
                   ("legacy", "blobs", {"id": b"3", "payload": None, "bits": None, "label": b"it's"})]


def test_truncated_and_foreign_rows_fail_loudly():
    export = discover(str(FIXTURES / "dumpling-sql"))
    converters = export.converters()
    data = (FIXTURES / "dumpling-sql" / "shop.items.000000001.sql").read_bytes()
    with pytest.raises(ExportFormatError, match="ends inside a row"):
        list(read_sql_rows([data[:-20]], converters, "shop"))
    with pytest.raises(ExportFormatError, match="no schema in the export describes"):
        list(read_sql_rows([b"INSERT INTO `ghost` VALUES\n(1);\n"], converters, "shop"))
    with pytest.raises(ExportFormatError, match="a row of 2 values for 13 columns"):
        list(read_sql_rows([b"INSERT INTO `items` VALUES\n(1,2);\n"], converters, "shop"))
    with pytest.raises(ExportFormatError, match="is not a label"):
        list(read_sql_rows([data.replace(b"'b','y'", b"'q','y'")], converters, "shop"))


# ----------------------------------------------------------------------------- the property
# A writer shaped by Dumpling's rules (pkg/dumpformat/sqlfile, csvfile; dumpling/export/sql_type.go):
# strings in '' with escapeBackslashSQL (or '' doubled with --escape-backslash=false), binary as
# x'%x', numbers bare, NULL; CSV: strings and raw binary in "", escapeBackslashCSV (or "" doubled),
# numbers bare, \N, \r\n, a quoted header.

SQL_ESCAPES = {0: b"\\0", 10: b"\\n", 13: b"\\r", 92: b"\\\\", 39: b"\\'", 34: b'\\"', 26: b"\\Z"}
CSV_ESCAPES = {0: b"\\0", 13: b"\\r", 10: b"\\n", 92: b"\\\\", 34: b'\\"'}
COLUMNS = [("id", "bigint"), ("s", "varchar(255)"), ("b", "varbinary(255)"), ("d", "decimal(12,3)")]


def write_sql(rows, escape_backslash: bool, statement_rows: int) -> bytes:
    out = [b"/*!40101 SET NAMES binary*/;\n"]
    for start in range(0, len(rows), statement_rows):
        tuples = []
        for row in rows[start:start + statement_rows]:
            values = []
            for (_, type_text), value in zip(COLUMNS, row):
                if value is None:
                    values.append(b"NULL")
                elif type_text.startswith("varbinary"):
                    values.append(b"x'" + value.hex().encode() + b"'")
                elif type_text.startswith("varchar"):
                    body = (b"".join(SQL_ESCAPES.get(c, bytes([c])) for c in value) if escape_backslash
                            else value.replace(b"'", b"''"))
                    values.append(b"'" + body + b"'")
                else:
                    values.append(value)
            tuples.append(b"(" + b",".join(values) + b")")
        out.append(b"INSERT INTO `t` VALUES\n" + b",\n".join(tuples) + b";\n")
    return b"".join(out)


def write_csv(rows, escape_backslash: bool) -> bytes:
    def field(value, quoted):
        if value is None:
            return b"\\N"
        if not quoted:
            return value
        body = (b"".join(CSV_ESCAPES.get(c, bytes([c])) for c in value) if escape_backslash
                else value.replace(b'"', b'""'))
        return b'"' + body + b'"'

    lines = [b",".join(b'"' + name.encode() + b'"' for name, _ in COLUMNS)]
    for row in rows:
        lines.append(b",".join(field(v, not t.startswith(("bigint", "decimal"))) for (_, t), v in zip(COLUMNS, row)))
    return b"".join(line + b"\r\n" for line in lines)


def pieces(data: bytes, cuts: list[int]):
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


row_values = st.tuples(
    st.integers(-2 ** 63, 2 ** 63 - 1).map(lambda n: str(n).encode()),
    st.one_of(st.none(), st.text(max_size=30).map(str.encode)),
    st.one_of(st.none(), st.binary(max_size=30)),
    st.one_of(st.none(), st.decimals(min_value=-10 ** 8, max_value=10 ** 8, places=3, allow_nan=False)
              .map(lambda d: f"{d:.3f}".encode())),
)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(row_values, max_size=12), escape=st.booleans(), statement_rows=st.integers(1, 5),
       cuts=st.lists(st.integers(0, 10 ** 6), max_size=8))
def test_dumpling_shaped_rows_read_back_equal(rows, escape, statement_rows, cuts):
    converter = Converter(COLUMNS)
    want = [dict(zip([name for name, _ in COLUMNS], row)) for row in rows]
    sql = write_sql(rows, escape, statement_rows)
    got = [r for _, _, r in read_sql_rows(pieces(sql, cuts), {("db", "t"): converter}, "db", escape)]
    assert got == want
    csv = write_csv(rows, escape)
    dialect = CsvDialect(escape_backslash=escape)
    assert [r for _, r in read_csv_rows_at(pieces(csv, cuts), converter, dialect)] == want


# ----------------------------------------------------------------------------- in Spark

@pytest.mark.parametrize("fixture, expected", [("dumpling-sql", ITEMS), ("dumpling-csv-gzip", ITEMS),
                                               ("mysqldump-8.0", ITEMS_MYSQL)])
def test_export_rows_in_spark(spark, fixture, expected):
    from spark_apps.base_export.spark import export_rows

    export = discover(str(FIXTURES / fixture))
    frame = export_rows(spark, export)
    rows = frame.where("`table` = 'items'").orderBy("file", "ordinal").collect()
    assert [{k: (None if v is None else bytes(v)) for k, v in r["values"].items()} for r in rows] == expected
    assert {r["database"] for r in rows} == {"shop"}
    assert frame.count() == len(expected) + (3 if fixture == "dumpling-sql" else 0)
    assert frame.rdd.getNumPartitions() == len(export.files)


def test_export_on_s3(spark, bucket):
    """The same export under an S3 prefix: listed, its metadata and schemas read on the
    driver, its rows in tasks."""
    from spark_apps.base_export.spark import export_rows

    prefix = f"{bucket}/exports/2026-11-20"
    for path in sorted((FIXTURES / "dumpling-csv-gzip").iterdir()):
        storage.write_bytes(f"{prefix}/{path.name}", path.read_bytes())
    export = discover(prefix)
    assert export.position.tso == 453817264815718401
    assert [f.uri for f in export.files] == [f"{prefix}/shop.items.000000000.csv.gz"]
    rows = export_rows(spark, export).orderBy("ordinal").collect()
    assert [{k: (None if v is None else bytes(v)) for k, v in r["values"].items()} for r in rows] == ITEMS
