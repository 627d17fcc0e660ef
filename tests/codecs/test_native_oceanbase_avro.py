"""The compiled oceanbase-avro decoder (native/cdc_replay_native/src/oceanbase_avro.rs) against
the Python codec, the reference: golden records, hand-written edge cases (every value member in
every kind of column, odd type_infos and codes, time zones, tags and indexes, framing), a
generated archive, mutated records and hypothesis-generated events and AvroRecords decoded by
both paths must give identical DECODED_ARROW_SCHEMA rows, quarantine rows included."""

from __future__ import annotations

import random
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import get_codec
from spark_apps import native_decode

from .. import strategies
from . import native_paths as paths
from . import test_oceanbase as golden
from .test_native_canal_json import records_batch
from .test_oceanbase import ALL_MEMBERS_RECORD, GOLDEN_INSERT, GOLDEN_INSERT_BYTES, NS, avro, base_record, cv

pytestmark = pytest.mark.skipif(
    native_decode.cdc_replay_native is None,
    reason=f"{native_decode.UNAVAILABLE} (scripts/bootstrap builds it with maturin; needs cargo)")

_ADDRESS = re.compile(r" object at 0x[0-9a-f]+>")


def _rows(values, mode, options) -> list[dict]:
    """One path's rows; a fastavro message naming a BytesIO by its address is masked."""
    rows = paths.decode("oceanbase-avro", records_batch(values), mode, options).to_pylist()
    for row in rows:
        if row["error"]:
            row["error"] = _ADDRESS.sub(" object>", row["error"])
    return rows


def assert_same(values, options=None) -> list[dict]:
    python, native = _rows(values, "python", options), _rows(values, "native", options)
    assert len(native) == len(python)
    for a, b in zip(python, native):
        assert b == a
    return python


def native_share(values, options=None) -> tuple[int, int]:
    return paths.native_share("oceanbase-avro", records_batch(values), options)


def row(fields: list[tuple[str, int]], after=None, before=None, **changes) -> bytes:
    """An AvroRecord of one row written by fastavro: `fields` (name, dataTypeNumber)."""
    op = "UPDATE" if after is not None and before is not None else "DELETE" if before is not None else "INSERT"
    record = base_record(operation=op, fields=[{"name": n, "dataTypeNumber": c} for n, c in fields],
                         afterImages=after, beforeImages=before)
    record.update(changes)
    return avro(record)


def one(code: int, value: dict, **changes) -> bytes:
    """An INSERT of one column `c` of type code `code` holding ColumnValue `value`."""
    return row([("c", code)], [value], **changes)


# ----------------------------------------------------------------------------- golden records

BAD = [value for value, _, _ in golden.test_bad_records_raise_a_decode_error_naming_protocol_and_location
       .pytestmark[0].args[1]]
FIELDS = [{"name": "id", "dataTypeNumber": 3}, {"name": "v", "dataTypeNumber": 15}]
UPDATE = avro(base_record(operation="UPDATE", fields=FIELDS, pkIndexes=[0],
                          beforeImages=[cv("INTEGER", 1, "int"), cv("STRING", "old", "string")],
                          afterImages=[cv("INTEGER", 1, "int"), cv("STRING", "new", "string")]))
DELETE = avro(base_record(operation="DELETE", fields=FIELDS, pkIndexes=None,
                          beforeImages=[cv("INTEGER", 2, "int"), cv("STRING")]))
DDL = avro(base_record(operation="DDL", sql="ALTER TABLE `t` ADD COLUMN `c` INT", timestamp=1700000000))
BOUNDARIES = [avro(base_record(id=10, operation=op, xid="tx-9", txind=txind, schemaName=None, tableName=None))
              for op, txind in (("BEGIN", "B"), ("COMMIT", "E"), ("HEARTBEAT", None))]
RAW_CODES = avro(base_record(
    fields=[{"name": n, "dataTypeNumber": code} for n, code in
            [("a", 253), ("b", 253), ("c", 254), ("d", 251), ("e", 251), ("f", 252)]],
    afterImages=[cv("STRING", "x", "string"), cv("BINARY", b"\x00", "bytes"), cv("STRING", "y", "string"),
                 cv("STRING", "z", "string"), cv("BINARY", b"\x01", "bytes"), cv("STRING")]))
ROWS = [avro(ALL_MEMBERS_RECORD), GOLDEN_INSERT_BYTES, UPDATE, DELETE, RAW_CODES,
        b"\x00" + struct.pack(">I", 42) + GOLDEN_INSERT_BYTES]
GOLDEN = [*ROWS, DDL, *BOUNDARIES, avro(base_record(id=0, operation="DDL", sql="DROP TABLE t")), None, *BAD]


@pytest.mark.parametrize("options", [None, {"timestamp-unit": "ms"}, {"time-zone": "+08:00"},
                                     {"time-zone": "Asia/Shanghai"}, {"avro-framing": "plain"},
                                     {"avro-framing": "confluent"}])
def test_golden_records_decode_the_same(options):
    python = assert_same(GOLDEN, options)
    kinds = {r["kind"] for r in python}
    # with avro-framing=confluent only the framed record is one
    assert kinds == ({"row", "quarantine"} if options == {"avro-framing": "confluent"} else
                     {"row", "ddl", "empty", "quarantine"})


def test_the_compiled_path_takes_rows_and_leaves_the_rest_to_python():
    # rows are taken here; DDL, transaction boundaries and heartbeats (no event), a tombstone
    # and the bad records go to the Python codec
    assert native_share(GOLDEN) == (len(ROWS), len(GOLDEN) - len(ROWS))
    # ALL_MEMBERS_RECORD's TIMESTAMP in +08:00 and the UTC default: both fixed offsets
    assert native_share([avro(ALL_MEMBERS_RECORD)], {"time-zone": "Asia/Shanghai"}) == (0, 1)
    assert native_share([GOLDEN_INSERT_BYTES], {"time-zone": "Asia/Shanghai"}) == (1, 0)
    assert native_decode.choose("oceanbase-avro", {}, "auto") == (
        "native", "compiled oceanbase-avro decoder (records it cannot take exactly go to the Python codec)")
