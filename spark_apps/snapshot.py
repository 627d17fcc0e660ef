"""Reading a row with the schema of the cut: the projection applied to each snapshot row
while it is written (pure Python, in the writer tasks)."""

from __future__ import annotations

import numpy as np

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

    def unchanged(batch) -> np.ndarray:
        """Per row of an Arrow batch of the writer: True where `prepare` would leave the event
        as it is, decided from (kind, database, table, sort_point) and the history alone: not a
        row event, no history, a table not described at the row's point, or described with no
        DATETIME / TIMESTAMP / TIME column (nothing to render). The rest go through `prepare`."""
        n = batch.num_rows
        if not history.versions:
            return np.ones(n, dtype=bool)
        kinds, dbs, tables = (batch.column(c).to_pylist() for c in ("kind", "database", "table"))
        points = None
        out = np.ones(n, dtype=bool)
        temporal_tables: dict = {}
        for i in range(n):
            if kinds[i] != Kind.ROW:
                continue
            key = ((dbs[i] or "").lower(), (tables[i] or "").lower())
            some = temporal_tables.get(key)
            if some is None:  # any version of the table with a temporal column: else no point is needed
                some = temporal_tables[key] = any(
                    _temporal(sig) for _, sig in history.versions.get(key, ()) if sig and sig != UNKNOWN_COLUMNS)
            if not some:
                continue
            if points is None:
                points = batch.column("sort_point").to_pylist()
            signature = history.columns_at(dbs[i], tables[i] or "", list(points[i] or []))
            out[i] = not signature or signature == UNKNOWN_COLUMNS or not _temporal(signature)
        return out

    prepare.unchanged = unchanged
    return prepare


def _temporal(signature) -> bool:
    """Whether a column signature ((name, type), ...) has a column whose declared precision
    `declared_precision` may apply (a type from the stream says none)."""
    return any(not isinstance(t, StreamType) and declared_fsp(parse_type(t)) is not None for _, t in signature)


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

    plain = {}  # (database, table) -> (column names, identity) when only names can make a projection differ

    def unchanged(batch) -> np.ndarray:
        """Per row of an Arrow batch of the writer: True where `prepare` would leave the event
        as it is (but for `timeline`, which the encoders do not read): not a row event, a table
        the history does not describe, or one whose columns (no ENUM/SET labels to fill, no
        temporal precision to render) are all there at the row's point under their final names,
        with the row's image carrying exactly those names in that order and its key the
        table's identity. The rest go through `prepare`."""
        n = batch.num_rows
        out = np.ones(n, dtype=bool)
        if not schemas:
            return out
        kinds, dbs, tables = (batch.column(c).to_pylist() for c in ("kind", "database", "table"))
        names = keys = points = None
        for i in range(n):
            if kinds[i] != Kind.ROW:
                continue
            key = ((dbs[i] or "").lower(), (tables[i] or "").lower())
            schema = schemas.get(key)
            if schema is None:
                continue
            if key not in plain:
                plain[key] = _plain_schema(schema)
            if plain[key] is None:
                out[i] = False
                continue
            if names is None:
                names, keys, points = _image_names(batch), batch.column("key_columns").to_pylist(), \
                    batch.column("timeline").to_pylist()
            point = list(points[i]) if points[i] is not None else None
            columns, identity = plain[key]
            out[i] = (names[i] == columns and keys[i] == identity
                      and all(point is None or (point > c.added and c.name_at(point) == c.name)
                              for c in schema.columns))
        return out

    prepare.unchanged = unchanged
    return prepare


def _plain_schema(schema: TableSchema):
    """(column names, identity) of a schema whose projection can change only names, order and
    missing columns (no ENUM/SET label to fill, no temporal precision to render); else None."""
    for col in schema.columns:
        typ = parse_type(col.mysql_type)
        if typ.labels or (not isinstance(col.mysql_type, StreamType) and declared_fsp(typ) is not None):
            return None
    return [c.name for c in schema.columns], schema.identity_columns()


def _image_names(batch) -> list:
    """Per row, the column names of the image the projection reads (after, else before)."""
    import pyarrow.compute as pc

    after, before = batch.column("after"), batch.column("before")
    image = after if after.null_count == 0 else pc.if_else(after.is_valid(), after, before)
    offsets = image.offsets.to_numpy()
    valid = image.is_valid().to_numpy(zero_copy_only=False)
    flat = pc.struct_field(image.values, "name").to_pylist()
    return [flat[offsets[i]:offsets[i + 1]] if valid[i] else None for i in range(len(image))]
