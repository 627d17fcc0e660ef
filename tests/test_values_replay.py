"""Values as the column declares them, through a whole replay (issue 12, points 4 and 5).

An OceanBase archive (AvroRecords built by hand with fastavro, not by the codec) whose DDL
declares DATETIME(3), DATETIME, TIMESTAMP(6), TIME(2) and a VARBINARY the records carry under
OMS's VARCHAR code. OceanBase records carry no fractional precision, so the replay renders the
values with the fsp of the schema history; the expected canal-json strings are written out by
hand, as TiCDC's canal-json writes such columns (TiDB prints a DATETIME(3) with exactly three
digits, a DATETIME with none).
"""

from __future__ import annotations

import orjson
import pytest

from cdc_codecs import KafkaRecord
from cdc_codecs.archive import is_archive_object, parse_line
from cdc_codecs.mysql_types import declared_fsp, parse_type, with_fsp
from spark_apps import storage
from spark_apps.generate import write_archive
from spark_apps.options import ReplayArgs, parser
from spark_apps.replay import run

from .codecs.test_oceanbase import avro, base_record, cv

DDL = ("CREATE TABLE `shop`.`times` (`id` int(11) NOT NULL, `d3` datetime(3) DEFAULT NULL, "
       "`d0` datetime DEFAULT NULL, `ts6` timestamp(6) NULL DEFAULT NULL, `t2` time(2) DEFAULT NULL, "
       "`bin` varbinary(300) DEFAULT NULL, PRIMARY KEY (`id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
FIELDS = [{"name": "id", "dataTypeNumber": 3}, {"name": "d3", "dataTypeNumber": 12},
          {"name": "d0", "dataTypeNumber": 12}, {"name": "ts6", "dataTypeNumber": 7},
          {"name": "t2", "dataTypeNumber": 11}, {"name": "bin", "dataTypeNumber": 15}]
ALL_BYTES = bytes(range(256))


def dt(nanos: int, seconds: int = 27) -> dict:
    return cv("DATETIME", {"year": 2002, "month": 7, "day": 10, "hours": 22, "minutes": 52, "seconds": seconds,
                           "nanos": nanos}, "DateTimeObject")


def row(record_id: int, key: int, d3, d0, ts6, t2, binary) -> bytes:
    return avro(base_record(
        id=record_id, timestamp=1_700_000_000 + record_id, schemaName="shop", tableName="times",
        fields=FIELDS, pkIndexes=[0],
        afterImages=[cv("INTEGER", key, "int"), d3, d0, ts6, t2, cv("BINARY", binary, "bytes")]))


# (key, the values as OMS sends them, what TiCDC's canal-json writes for the declared types)
ROWS = [
    (1, dt(735_000_000), dt(0), cv("TIMESTAMP", {"seconds": 1026341547, "nanos": 735_000, "timezone": "UTC"},
                                   "TimestampObject"),
     cv("TIME", {"negative": False, "hours": 1, "minutes": 2, "seconds": 3, "nanos": 450_000_000}, "TimeObject"),
     ALL_BYTES,
     {"d3": "2002-07-10 22:52:27.735", "d0": "2002-07-10 22:52:27", "ts6": "2002-07-10 22:52:27.000735",
      "t2": "01:02:03.45"}),
    (2, dt(0), dt(0, 1), cv("TIMESTAMP", {"seconds": 1026341547, "nanos": 0, "timezone": "UTC"}, "TimestampObject"),
     cv("TIME", {"negative": True, "hours": 838, "minutes": 59, "seconds": 59, "nanos": 0}, "TimeObject"),
     b"",
     {"d3": "2002-07-10 22:52:27.000", "d0": "2002-07-10 22:52:01", "ts6": "2002-07-10 22:52:27.000000",
      "t2": "-838:59:59.00"}),
]


def archive(path: str) -> None:
    records = [avro(base_record(id=1, operation="DDL", sql=DDL, schemaName="shop", tableName="times",
                                timestamp=1_700_000_000))]
    records += [row(i + 2, key, d3, d0, ts6, t2, b) for i, (key, d3, d0, ts6, t2, b, _) in enumerate(ROWS)]
    write_archive([KafkaRecord("ob", 0, i, None, None, value) for i, value in enumerate(records)], path)


def replay(spark, source: str, output: str, emit: str) -> dict:
    argv = ["--source", source, "--protocol", "oceanbase-avro", "--output", output, "--emit", emit,
            "--target-protocol", "canal-json", "--target-option", "enable-tidb-extension=true"]
    return run(ReplayArgs.from_namespace(parser().parse_args(argv)), spark=spark)


def canal_rows(output: str) -> dict:
    """{id: data row} of the canal-json output, as the JSON text has it."""
    rows = {}
    for info in storage.list_objects(output):
        if is_archive_object(storage.relative(info.uri, output)):
            for line in storage.iter_lines(info.uri):
                message = orjson.loads(parse_line(line).value)
                if not message["isDdl"] and message["data"]:
                    for data in message["data"]:
                        rows[int(data["id"])] = data
    return rows


@pytest.mark.spark
@pytest.mark.parametrize("emit", ["snapshot", "topics"])
def test_oceanbase_values_come_out_at_the_declared_precision_and_bytes_intact(spark, tmp_path, emit):
    archive(str(tmp_path / "archive"))
    manifest = replay(spark, str(tmp_path / "archive"), str(tmp_path / "out"), emit)
    assert manifest["counts"]["quarantined"] == 0
    rows = canal_rows(str(tmp_path / "out"))
    assert set(rows) == {key for key, *_ in ROWS}
    for key, *_, binary, want in ROWS:
        assert {name: rows[key][name] for name in want} == want
        # canal-json carries binary as one ISO-8859-1 character per byte
        assert rows[key]["bin"].encode("latin-1") == binary


# ------------------------------------------------------------------------------ the rule itself

@pytest.mark.parametrize("value, fsp, want", [
    ("2002-07-10 22:52:27.735000", 3, "2002-07-10 22:52:27.735"),
    ("2002-07-10 22:52:27.735000", 6, "2002-07-10 22:52:27.735000"),
    ("2002-07-10 22:52:27", 3, "2002-07-10 22:52:27.000"),
    ("2002-07-10 22:52:27.000000", 0, "2002-07-10 22:52:27"),
    ("2002-07-10 22:52:27", 0, "2002-07-10 22:52:27"),
    ("0000-00-00 00:00:00", 2, "0000-00-00 00:00:00.00"),
    ("-838:59:59", 1, "-838:59:59.0"),
    ("12:00:00.500000000", 1, "12:00:00.5"),
    # a digit the declared precision cannot hold is never dropped
    ("2002-07-10 22:52:27.735000", 2, "2002-07-10 22:52:27.735000"),
    ("12:00:00.000000001", 6, "12:00:00.000000001"),
])
def test_values_are_rendered_at_the_precision_without_losing_digits(value, fsp, want):
    assert with_fsp(value.encode(), fsp) == want.encode()


@pytest.mark.parametrize("type_text, fsp", [
    ("datetime", 0), ("datetime(3)", 3), ("timestamp(6)", 6), ("time(2)", 2), ("time", 0),
    ("date", None), ("varchar(3)", None), ("datetime(x)", None),
])
def test_declared_fsp(type_text, fsp):
    assert declared_fsp(parse_type(type_text)) == fsp


def test_the_precision_hooks_columnar_check_finds_the_values_with_fsp_renders():
    """`snapshot._renders` (the precision hook's `unchanged`, per batch) takes only the cells not
    already at their declared precision to `with_fsp`: a row is flagged exactly when `with_fsp`
    changes one of its values, for every fsp and values with no dot, a short, exact or long
    fraction (zeros or not), an empty or non-digit fraction, several dots, a non-digit end,
    bytes that are not UTF-8, nulls; a type that states its precision is never rendered."""
    import itertools

    import pyarrow as pa

    from spark_apps.outputs.kafka_records import _IMAGE_ARROW_TYPE
    from spark_apps.snapshot import _renders

    texts = [b"2002-07-10 22:52:27", b"22:52:27.7", b"22:52:27.735", b"22:52:27.735000", b"22:52:27.735001",
             b"22:52:27.", b"22:52:27.000000000", b"22:52:27.12a", b"1.2.3", b"22:52:2x", b"", b"7", b"\xff.00",
             b"-838:59:59.000", None]
    rows, fsps, want = [], {}, []
    for (value, fsp, own) in itertools.product(texts, range(7), ("datetime", "datetime(3)")):
        rows.append([{"name": "other", "mysql_type": "int", "flags": 0, "value": b"1.", "label": None},
                     {"name": "At", "mysql_type": own, "flags": 0, "value": value, "label": None}])
        fsps[len(rows) - 1] = {"at": fsp}  # lower-case names, as the hook gives them
        want.append(value is not None and own == "datetime" and with_fsp(value, fsp) != value)
    rows.append(None)  # a row with no image
    want.append(False)
    image = pa.array(rows, _IMAGE_ARROW_TYPE)
    assert _renders(image, fsps).tolist() == want
    assert sum(want) > 20
