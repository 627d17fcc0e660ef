"""Reading a row with the schema of the cut: the projection applied to each snapshot row
while it is written (pure Python, in the writer tasks)."""

from __future__ import annotations

from cdc_codecs.events import Kind
from cdc_codecs.mysql_types import declared_fsp, enum_set_label, parse_type, with_fsp

from .ddl import UNKNOWN_COLUMNS, StreamType, TableSchema


def project_image(image: list[dict], point, schema: TableSchema, schema_types: bool = False) -> list[dict]:
    """The row's columns as the table has them at the cut, in table order: a column added
    after the row was written takes its default; a renamed column keeps its value; a dropped
    column disappears. Columns the row carries keep their own type and flags, unless
    `schema_types` (Parquet output: one type per column across all files)."""
    by_name = {c["name"].lower(): c for c in image}
    point = list(point) if point is not None else None
    projected = []
    for col in schema.columns:
        source = None
        if point is None or point > col.added:
            source = by_name.get(col.name_at(point).lower()) if point is not None else by_name.get(col.name.lower())
        if source is not None:
            if source["label"] is None and source["value"] is not None and parse_type(col.mysql_type).labels:
                # the DDL knows the ENUM/SET labels the message did not carry
                source = {**source, "label": enum_set_label(parse_type(col.mysql_type), source["value"])}
            source = declared_precision(source, col.mysql_type)
            if schema_types:
                projected.append({**source, "name": col.name, "mysql_type": col.mysql_type})
            else:
                projected.append(source if source["name"] == col.name else {**source, "name": col.name})
        else:
            projected.append({"name": col.name, "mysql_type": col.mysql_type, "flags": col.flags,
                              "value": col.default, "label": col.default_label})
    return projected



def declared_precision(column: dict, schema_type: str | None) -> dict:
    """The column with its DATETIME / TIMESTAMP / TIME value rendered at the fractional
    precision the schema declares, when the column's own type does not state it (OceanBase
    records carry no fsp: DATETIME(3) `…27.735` arrives as `…27.735000`). A source that
    rendered the value at the column's precision (TiCDC, Canal) is left as it is, and so is a
    value whose schema type was taken from the stream (ddl.StreamType: a bare `datetime` there
    says nothing of the precision)."""
    value = column["value"]
    if value is None or isinstance(schema_type, StreamType) or parse_type(column["mysql_type"]).params:
        return column
    fsp = declared_fsp(parse_type(schema_type))
    if fsp is None:
        return column
    rendered = with_fsp(value, fsp)
    return column if rendered == value else {**column, "value": rendered}


def precision_from_history(history):
    """Writer hook for re-encoded topics: every row image's temporal values at the precision
    its table declares at the event's point (the schema history's `columns_at`)."""

    def prepare(event: dict) -> dict:
        if event["kind"] != Kind.ROW or not history.versions:
            return event
        point = event.get("sort_point")
        signature = history.columns_at(event["database"], event["table"] or "", list(point or []))
        if not signature or signature == UNKNOWN_COLUMNS:  # not described: no declared precision
            return event
        types = dict(signature)
        for side in ("before", "after"):
            if event[side]:
                event[side] = [declared_precision(c, types.get(c["name"].lower())) for c in event[side]]
        return event

    return prepare


def projector(schemas: dict[tuple[str, str], TableSchema], schema_types: bool = False):
    """Writer hook: project rows (after image, or before image of a deletion) of tables
    whose schema the DDL history knows."""

    def prepare(event: dict) -> dict:
        point = event.pop("timeline", None)
        if event["kind"] != Kind.ROW or not schemas:
            return event
        schema = schemas.get(((event["database"] or "").lower(), (event["table"] or "").lower()))
        if schema is not None:
            side = "after" if event["after"] is not None else "before"
            event[side] = project_image(event[side], point, schema, schema_types)
            event["key_columns"] = schema.identity_columns()
        return event

    return prepare
