"""One canonical schema: the Spark schema is derived from the Arrow one and they agree."""

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from cdc_codecs.events import EVENT_SCHEMA, Kind, Op, column, new_event
from spark_apps.schema import EVENT_STRUCT

from .support.canonical import to_record_batch


def _strip(schema: pa.Schema) -> pa.Schema:
    """Field names and types without nullability (Spark tracks it only at the top level)."""

    def strip_type(t):
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, strip_type(f.type)) for f in t])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(strip_type(t.value_type))
        if pa.types.is_map(t):
            return pa.map_(strip_type(t.key_type), strip_type(t.item_type))
        return t

    return pa.schema([pa.field(f.name, strip_type(f.type)) for f in schema])


def test_spark_schema_converts_back_to_the_arrow_schema():
    assert _strip(to_arrow_schema(EVENT_STRUCT)) == _strip(EVENT_SCHEMA)
    assert [f.name for f in EVENT_STRUCT.fields] == EVENT_SCHEMA.names


def test_events_pass_through_spark_unchanged(spark):
    events = [
        new_event(Kind.ROW, op=Op.INSERT, commit_ts=(1 << 62) + 5, database="d", table="t", key_columns=["id"],
                  after=[column("id", "18446744073709551615", "bigint unsigned", 136),
                         column("b", bytes(range(256)), "blob", 1),
                         column("d", "-12345678901234567890.123456789", "decimal(40,9)"),
                         column("e", "2", "enum('a','b')", label="b"), column("n", None, "int")],
                  extras={"canal.ts": "1"}, topic="t", partition=3, offset=9, event_index=1),
        new_event(Kind.DDL, commit_ts=1, ddl_query="CREATE TABLE t (id INT)", ddl_type="create table"),
        new_event(Kind.WATERMARK, watermark_ts=7, position=[1, 2, 3]),
    ]
    batch = to_record_batch(events)
    df = spark.range(1).mapInArrow(lambda _: iter([batch]), EVENT_STRUCT)
    back = df.toArrow().to_pylist()
    for original, row in zip(events, back):
        row["extras"] = dict(row["extras"]) if row["extras"] is not None else None
        assert row == original
