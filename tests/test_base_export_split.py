"""Large export files read as byte ranges, one task each (issue 30 point 6,
spark_apps/base_export/split.py): whatever the ranges, the rows (and their ordinals, byte
offsets in the file) are those of reading the file whole — the producers' fixtures at every
range size, Dumpling-shaped and mysqldump-shaped writers over random rows (strings holding
`;`, `INSERT INTO`, quotes, escaped newlines, binary) at random range sizes, a file on S3,
and export_rows in Spark."""

from __future__ import annotations

import gzip
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_apps import storage
from spark_apps.base_export import Converter, CsvDialect, ExportFormatError, discover, part_rows, parts
from spark_apps.base_export.discover import DataFile
from spark_apps.base_export.split import SPLIT_ENV, ranges, split_bytes, unsplittable
from tests.test_base_export import COLUMNS, FIXTURES, write_csv, write_sql


def read_all(files, converters, split, dialect=None, escape=True, chunk=None):
    """Every part's rows, in part order; `chunk`: the size of the pieces the bytes come in."""
    out = []
    for part in parts(files, split, escape, dialect):
        data = pathlib.Path(part.file.uri).read_bytes() if not part.file.uri.endswith(".gz") else None
        chunks_from = None
        if data is not None and chunk:
            def chunks_from(offset, data=data):
                return (data[i:i + chunk] for i in range(offset, len(data), chunk))
        out.extend((part.file.uri, *row) for row in part_rows(part, converters, dialect, escape, chunks_from))
    return out


def test_ranges_and_options(monkeypatch):
    assert ranges(100, 0) == [(0, None)] and ranges(100, 100) == [(0, None)]
    assert ranges(100, 30) == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert split_bytes() == 128 << 20
    monkeypatch.setenv(SPLIT_ENV, "4096")
    assert split_bytes() == 4096 and split_bytes(7) == 7
    assert unsplittable("s3://b/x.sql.gz", "sql", True) and unsplittable("x.sql.zst", "sql", True)
    assert "raw newlines" in unsplittable("x.csv", "csv", False, CsvDialect(escape_backslash=False))
    assert unsplittable("x.sql", "sql", True) is None


@pytest.mark.parametrize("fixture", ["dumpling-sql", "mysqldump-8.0", "mysqldump-5.7"])
def test_fixtures_at_every_range_size(fixture):
    export = discover(str(FIXTURES / fixture))
    converters = export.converters()
    whole = read_all(export.files, converters, 0)
    assert len(whole) >= 3
    for split in range(1, max(f.size for f in export.files) + 2):
        assert read_all(export.files, converters, split) == whole, split
    for chunk in (1, 7):
        assert read_all(export.files, converters, 97, chunk=chunk) == whole


def test_csv_at_every_range_size(tmp_path):
    """The gzip CSV fixture, decompressed: its records at every range size; the header is
    read by every range from byte 0. Compressed, the file is one part."""
    export = discover(str(FIXTURES / "dumpling-csv-gzip"))
    converter = export.converters()
    gz = export.files[0]
    assert len(parts([gz], 1)) == 1
    plain = tmp_path / "shop.items.000000000.csv"
    plain.write_bytes(gzip.decompress(pathlib.Path(gz.uri).read_bytes()))
    f = DataFile(str(plain), "shop", "items", "csv", "000000000", plain.stat().st_size)
    dialect = CsvDialect()
    whole = read_all([f], converter, 0, dialect)
    assert [row[4] for row in whole] == [row[4] for row in read_all([gz], converter, 0, dialect)]
    for split in range(1, f.size + 2):
        assert read_all([f], converter, split, dialect) == whole, split

    # a header naming the columns in another order: ranges after the first read it from byte 0
    header, _, rest = plain.read_bytes().partition(b"\r\n")
    swapped = tmp_path / "swapped" / plain.name
    swapped.parent.mkdir()
    records = [line for line in rest.split(b"\r\n") if line]
    fields = [line.split(b",", 1) for line in [header] + records]  # id (first) holds no separator
    swapped.write_bytes(b"".join(more + b"," + id_ + b"\r\n" for id_, more in fields))  # id moved last
    g = DataFile(str(swapped), "shop", "items", "csv", "000000000", swapped.stat().st_size)
    for split in (0, 1, 40, 200):
        assert [row[4] for row in read_all([g], converter, split, dialect)] == [row[4] for row in whole]


def test_mysqldump_two_databases_keep_their_use(tmp_path):
    """A dump of two databases: a range starting after `USE other` reads `other`'s rows
    (its INSERTs name only the table)."""
    text = (FIXTURES / "mysqldump-8.0" / "shop.sql").read_bytes()
    head, _, body = text.partition(b"--\n-- Current Database: `shop`")
    body = b"--\n-- Current Database: `shop`" + body.split(b"/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;")[0]
    (tmp_path / "all.sql").write_bytes(head + body + body.replace(b"`shop`", b"`other`") + b"-- Dump completed\n")
    export = discover(str(tmp_path))
    assert [name for _, name in export.files[0].uses] == ["shop", "other"]
    converters = export.converters()
    whole = read_all(export.files, converters, 0)
    assert [db for _, db, *_ in whole] == ["shop"] * 5 + ["other"] * 5
    for split in range(1, export.files[0].size + 2, 3):
        assert read_all(export.files, converters, split) == whole, split


def test_a_trigger_body_never_gives_wrong_rows(tmp_path):
    """mysqldump writes a trigger after the table's rows, its body inside `/*!50003 ... */`
    as the user wrote it; a body line shaped like an INSERT is no statement start. Where a
    range would begin there, the range before it ends inside the comment and fails, naming
    the file and the way out; every other range size reads the rows of the whole file."""
    text = (FIXTURES / "mysqldump-8.0" / "shop.sql").read_bytes()
    trigger = (b"DELIMITER ;;\n/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`%`*/ /*!50003 TRIGGER `items_ai` "
               b"AFTER INSERT ON `items` FOR EACH ROW\nINSERT INTO `items` VALUES (NEW.id + 1000) */;;\nDELIMITER ;\n")
    marker = b"UNLOCK TABLES;\n"
    (tmp_path / "shop.sql").write_bytes(text.replace(marker, marker + trigger, 1))
    export = discover(str(tmp_path))
    converters = export.converters()
    whole = read_all(export.files, converters, 0)
    assert len(whole) == 5
    failed = 0
    for split in range(1, export.files[0].size + 2):
        try:
            got = read_all(export.files, converters, split)
        except ExportFormatError as e:
            assert SPLIT_ENV in str(e) and "shop.sql, the part from byte" in str(e)
            failed += 1
            continue
        assert got == whole, split
    assert failed  # some range size begins a range at the body's INSERT line


# ----------------------------------------------------------------------------- the property

TRICKY = ["INSERT INTO `t` VALUES\n(1,'x');\n", ";", "'", "''", "\\", "\n", "\r\n", "\nINSERT INTO `t` VALUES",
          "),(", '"', "\x00", "\x1a", "\\N", "é"]
tricky_text = st.one_of(st.text(max_size=20), st.lists(st.sampled_from(TRICKY), max_size=6).map("".join))
rows_strategy = st.lists(st.tuples(
    st.integers(-2 ** 63, 2 ** 63 - 1).map(lambda n: str(n).encode()),
    st.one_of(st.none(), tricky_text.map(str.encode)),
    st.one_of(st.none(), st.binary(max_size=20), st.sampled_from([b"\n", b"\nINSERT INTO `t` ", b"';\n"])),
    st.one_of(st.none(), st.integers(-10 ** 11, 10 ** 11).map(lambda n: f"{n / 1000:.3f}".encode())),
), max_size=30)


def mysqldump_shaped(rows, statement_rows: int) -> bytes:
    """One extended INSERT per line, as mysqldump writes them, between its table lines."""
    sql = write_sql(rows, True, statement_rows)
    statements = [s for s in sql.split(b";\nINSERT INTO ") if s]
    lines = []
    for i, statement in enumerate(statements):
        statement = statement if i == 0 else b"INSERT INTO " + statement
        if i == 0:
            statement = statement.partition(b"\n")[2]  # drop Dumpling's SET NAMES line
        if statement:
            lines.append(statement.replace(b" VALUES\n", b" VALUES ").replace(b",\n(", b",(").rstrip(b";\n") + b";")
    return (b"-- MySQL dump 10.13\n--\n-- Dumping data for table `t`\n--\n\nLOCK TABLES `t` WRITE;\n"
            b"/*!40000 ALTER TABLE `t` DISABLE KEYS */;\n" + b"".join(line + b"\n" for line in lines)
            + b"/*!40000 ALTER TABLE `t` ENABLE KEYS */;\nUNLOCK TABLES;\n")


@settings(max_examples=150, deadline=None)
@given(rows=rows_strategy, statement_rows=st.integers(1, 6), split=st.integers(1, 400), chunk=st.integers(1, 64),
       shape=st.sampled_from(["dumpling", "mysqldump", "csv"]))
def test_split_reads_equal_whole_reads(tmp_path_factory, rows, statement_rows, split, chunk, shape):
    folder = tmp_path_factory.mktemp("split")
    converter = Converter(COLUMNS)
    dialect = CsvDialect() if shape == "csv" else None
    data = {"dumpling": lambda: write_sql(rows, True, statement_rows), "csv": lambda: write_csv(rows, True),
            "mysqldump": lambda: mysqldump_shaped(rows, statement_rows)}[shape]()
    path = folder / ("db.t.000000000." + ("csv" if shape == "csv" else "sql"))
    path.write_bytes(data)
    f = DataFile(str(path), "db", "t", "csv" if shape == "csv" else "sql", "000000000", len(data))
    converters = {("db", "t"): converter}
    whole = read_all([f], converters, 0, dialect)
    assert [r[4] for r in whole] == [dict(zip([n for n, _ in COLUMNS], row)) for row in rows]
    assert read_all([f], converters, split, dialect, chunk=chunk) == whole
    ordinals = [r[3] for r in whole]
    assert ordinals == sorted(set(ordinals))


# ----------------------------------------------------------------------------- storage, Spark

def big_dumpling(folder: pathlib.Path, count: int = 400) -> pathlib.Path:
    """A Dumpling SQL export of one table `db.t` in one file of several statements."""
    rows = [(str(i).encode(), f"row {i};\nINSERT INTO `t` VALUES ('x')".encode(), bytes([i % 256]) * 3,
             f"{i}.500".encode()) for i in range(count)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metadata").write_text("Started dump at: 2026-11-28 00:00:00\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
                                     "\tPos: 453817264815718401\n\tGTID:\n\nFinished dump at: 2026-11-28 00:00:01\n")
    (folder / "db-schema-create.sql").write_text("/*!40101 SET NAMES binary*/;\nCREATE DATABASE `db`;\n")
    (folder / "db.t-schema.sql").write_text("/*!40101 SET NAMES binary*/;\nCREATE TABLE `t` (`id` bigint NOT NULL, "
                                            "`s` varchar(255), `b` varbinary(255), `d` decimal(12,3), "
                                            "PRIMARY KEY (`id`));\n")
    path = folder / "db.t.000000000.sql"
    path.write_bytes(write_sql(rows, True, 37))
    return path


def test_ranges_read_from_s3(bucket, tmp_path):
    """Ranged reads of an object on S3 (storage.iter_range): the same rows as the local file."""
    path = big_dumpling(tmp_path / "export")
    data = path.read_bytes()
    uri = f"{bucket}/export/{path.name}"
    storage.write_bytes(uri, data)
    assert b"".join(storage.iter_range(uri, 1000)) == data[1000:]
    converters = discover(str(tmp_path / "export")).converters()
    local = DataFile(str(path), "db", "t", "sql", "000000000", len(data))
    remote = DataFile(uri, "db", "t", "sql", "000000000", len(data))
    want = [row for part in parts([local], 0) for row in part_rows(part, converters)]
    split = parts([remote], -(-len(data) // 5))
    assert len(split) == 5
    assert [row for part in split for row in part_rows(part, converters)] == want


def test_export_rows_splits_a_large_file(spark, tmp_path):
    from spark_apps.base_export.spark import export_rows

    big_dumpling(tmp_path / "export")
    export = discover(str(tmp_path / "export"))
    whole = export_rows(spark, export, split=0)
    split = export_rows(spark, export, split=-(-export.files[0].size // 6))
    assert whole.rdd.getNumPartitions() == 1 and split.rdd.getNumPartitions() == 6

    def rows(frame):
        return [(r["file"], r["ordinal"], sorted((k, bytes(v)) for k, v in r["values"].items()))
                for r in frame.orderBy("file", "ordinal").collect()]

    got = rows(split)
    assert got == rows(whole) and len(got) == 400 and len({ordinal for _, ordinal, _ in got}) == 400
    per_task = split.rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()
    assert len(per_task) == 6 and sum(per_task) == 400 and min(per_task) > 0
