"""Reading a row with the schema of the cut: the projection applied to each snapshot row
while it is written (pure Python, in the writer tasks)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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

    def unchanged(batch, labels: bool = False) -> np.ndarray:
        """Per row of an Arrow batch of the writer: True where `prepare` would leave the event
        as it is (it fills no label: `labels` changes nothing): not a row event, no history, a table not described at the row's point or
        described with no DATETIME / TIMESTAMP / TIME column, or whose temporal values are
        already at the declared precision (checked on those cells only, no dict per row)."""
        n = batch.num_rows
        out = np.ones(n, dtype=bool)
        if not history.versions:
            return out
        fsps: dict[int, dict] = {}  # row -> {lower-case column name: declared fsp}
        for (database, table), rows in _rows_by_table(batch):
            key = (database.lower(), table.lower())
            if key not in some_temporal:  # no version with a temporal column: no point to look up
                some_temporal[key] = any(fsps_of(sig) for _, sig in history.versions.get(key, ())
                                         if sig and sig != UNKNOWN_COLUMNS)
            if not some_temporal[key]:
                continue
            for row, signature in zip(rows.tolist(), history.columns_at_each(database, table, _points(batch, rows)),
                                      strict=True):
                if signature and signature != UNKNOWN_COLUMNS:
                    fsp = fsps_of(signature)
                    if fsp:
                        fsps[row] = fsp
        if fsps:
            for side in ("before", "after"):
                out &= ~_renders(batch.column(side), fsps)
        return out

    of_signature: dict = {}
    some_temporal: dict = {}  # (database, table) lower-case -> whether a version has a temporal column

    def fsps_of(signature) -> dict:
        """`_fsps` of a signature of the history, once per signature (the history keeps its
        signatures, so their ids stay theirs); one dict per signature lets `_renders` take
        the rows that share it together."""
        known = of_signature.get(id(signature))
        if known is None or known[0] is not signature:
            known = of_signature[id(signature)] = (signature, _fsps(dict(signature)))
        return known[1]

    prepare.unchanged = unchanged
    return prepare


def _rows_by_table(batch) -> list:
    """[((database, table), indexes of the batch's row events of that table)]: null names as
    "", the names as written (columnar: the pairs are told apart by their dictionary codes)."""
    import pyarrow.compute as pc

    is_row = pc.fill_null(pc.equal(batch.column("kind"), Kind.ROW), False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(is_row)
    if not len(rows):
        return []
    codes, names = [], []
    for c in ("database", "table"):
        encoded = pc.fill_null(batch.column(c), "").dictionary_encode()
        codes.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)[rows])
        names.append(encoded.dictionary.to_pylist())
    pair = codes[0] * len(names[1]) + codes[1]
    order = np.argsort(pair, kind="stable")
    bounds = np.flatnonzero(np.diff(pair[order])) + 1
    return [((names[0][pair[group[0]] // len(names[1])], names[1][pair[group[0]] % len(names[1])]), rows[group])
            for group in np.split(order, bounds)]


def _points(batch, rows: np.ndarray):
    """The `sort_point`s of `rows`: an int64 array when each has one element (commit ts),
    else a list of lists (`SchemaHistory.columns_at_each` takes either)."""
    import pyarrow.compute as pc

    points = batch.column("sort_point").take(pa.array(rows))
    if points.null_count == 0 and len(points) and pc.min(pc.list_value_length(points)).as_py() == 1 \
            and pc.max(pc.list_value_length(points)).as_py() == 1:
        return pc.list_flatten(points).to_numpy(zero_copy_only=False).astype(np.int64)
    return points.to_pylist()


def _fsps(types: dict) -> dict:
    """{column: declared fsp} of a {column: schema type} map's temporal columns that
    `declared_precision` may render (a type taken from the stream declares nothing)."""
    out = {}
    for name, typ in types.items():
        if not isinstance(typ, StreamType):
            fsp = declared_fsp(parse_type(typ))
            if fsp is not None:
                out[name] = fsp
    return out


def _renders(image, fsps: dict[int, dict]) -> np.ndarray:
    """Per row of an image column (Arrow list<struct>): True where `declared_precision` would
    change a value of one of the rows of `fsps` ({row: {lower-case column name: fsp}}, rows
    of one table version sharing one dict); only the cells of those rows' temporal columns not
    already at their precision become Python values (the names are matched per distinct name
    and dict)."""
    import pyarrow.compute as pc

    n = len(image)
    changes = np.zeros(n, dtype=bool)
    lengths = _lengths(image)
    row_of = np.repeat(np.arange(n), lengths)
    group = np.full(n, -1, dtype=np.int64)  # row -> index of its fsps dict in `dicts`
    dicts, at = [], {}
    for row, fsp in fsps.items():
        g = at.get(id(fsp))
        if g is None:
            g = at[id(fsp)] = len(dicts)
            dicts.append(fsp)
        group[row] = g
    cells = np.flatnonzero(group[row_of] >= 0)
    if not len(cells):
        return changes
    flat = image.flatten()
    take = pa.array(cells)
    names = pc.struct_field(flat, "name").take(take).dictionary_encode()
    lower = [name.lower() for name in names.dictionary.to_pylist()]
    declared = np.array([[fsp.get(name, -1) for name in lower] for fsp in dicts], dtype=np.int64)  # [dict, name]
    at_fsp = declared[group[row_of[cells]], names.indices.to_numpy(zero_copy_only=False)]
    cells, at_fsp = cells[at_fsp >= 0], at_fsp[at_fsp >= 0]
    if not len(cells):
        return changes
    # `with_fsp` leaves a value with exactly `fsp` digits after its first dot, or with no dot at
    # fsp 0, as it is (the usual case: the source rendered the declared precision); only the
    # other cells become Python values and are rendered
    values = pc.struct_field(flat, "value").take(pa.array(cells))
    dot = pc.fill_null(pc.find_substring(values, "."), -1).to_numpy(zero_copy_only=False)
    size = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False)
    maybe = values.is_valid().to_numpy(zero_copy_only=False) & np.where(dot < 0, at_fsp != 0, size - dot - 1 != at_fsp)
    cells, at_fsp = cells[maybe], at_fsp[maybe]
    if not len(cells):
        return changes
    take = pa.array(cells)
    types, values = (pc.struct_field(flat, f).take(take).to_pylist() for f in ("mysql_type", "value"))
    for row, fsp, own, value in zip(row_of[cells].tolist(), at_fsp.tolist(), types, values, strict=True):
        if not parse_type(own).params and with_fsp(value, fsp) != value:
            changes[row] = True
    return changes


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

    plain = {}  # (database, table) -> (column names, identity, {column: fsp})

    def unchanged(batch, labels: bool = False) -> np.ndarray:
        """Per row of an Arrow batch of the writer: True where `prepare` would leave what the
        canal-json encoders read as it is (`timeline` goes, an ENUM/SET `label` may be filled:
        neither is encoded; with `labels`, for an encoder that writes labels, a label to fill
        is a change): not a row event, a table the history does not describe, or one
        whose columns are all there at the row's point under their final names, with the
        row's image carrying exactly those names in that order, its key the table's identity
        and its temporal values already at the declared precision."""
        n = batch.num_rows
        out = np.ones(n, dtype=bool)
        if not schemas:
            return out
        kinds, dbs, tables = (batch.column(c).to_pylist() for c in ("kind", "database", "table"))
        names = keys = points = image = fills = None
        fsps: dict[int, dict] = {}
        for i in range(n):
            if kinds[i] != Kind.ROW:
                continue
            key = ((dbs[i] or "").lower(), (tables[i] or "").lower())
            schema = schemas.get(key)
            if schema is None:
                continue
            if key not in plain:
                plain[key] = ([c.name for c in schema.columns], schema.identity_columns(),
                              _fsps({c.name.lower(): c.mysql_type for c in schema.columns}), _labelled(schema))
            if names is None:
                image = _image(batch)
                names, keys = _names(image), batch.column("key_columns").to_pylist()
                points = batch.column("timeline").to_pylist()
            point = list(points[i]) if points[i] is not None else None
            columns, identity, fsp, labelled = plain[key]
            out[i] = (names[i] == columns and keys[i] == identity
                      and all(point is None or (point > c.added and c.name_at(point) == c.name)
                              for c in schema.columns))
            if out[i] and labels and labelled:  # the image's cells are the table's columns, in order
                if fills is None:
                    fills = _fills(image)
                out[i] = not any(fills[0][fills[1][i] + j] for j in labelled)
            if out[i] and fsp:
                fsps[i] = fsp
        if fsps:
            out &= ~_renders(image, fsps)
        return out

    def project(batch, rows, labels: bool = False) -> tuple[list[int], pa.RecordBatch | None]:
        """Of `rows` (indexes of row events `unchanged` declined), those whose projection needs
        no value rendered (their temporal cells at the declared precision) nor, with `labels`,
        an ENUM/SET label filled, projected without dicts: (their indexes, a batch of the encoders' fields with the projected image and
        key, in that order). The others stay for `prepare`."""
        import pyarrow.compute as pc

        from cdc_codecs.events import COLUMN_TYPE

        if not schemas or not len(rows):
            return [], None
        dbs, tables = (batch.column(c).to_pylist() for c in ("database", "table"))
        image = _image(batch)
        names, points = _names(image), batch.column("timeline").to_pylist()
        lengths = _lengths(image)
        starts = (np.cumsum(lengths) - lengths).tolist()
        flat = image.flatten()
        cells = len(flat)
        defaults: list[dict] = []  # default cells, after the image's cells
        default_at: dict = {}
        taken, out_names, offsets, keys, fsps = [], [], [0], [], {}
        fills = None
        for i in rows:
            schema = schemas.get(((dbs[i] or "").lower(), (tables[i] or "").lower()))
            if schema is None or names[i] is None:
                continue
            point = list(points[i]) if points[i] is not None else None
            by_name = {n.lower(): j for j, n in enumerate(names[i])}
            picks, sources = [], {}
            fill = False
            for col in schema.columns:
                j = None
                if point is None or point > col.added:
                    j = by_name.get((col.name_at(point) if point is not None else col.name).lower())
                if labels and j is not None and parse_type(col.mysql_type).labels:
                    if fills is None:
                        fills = _fills(image)
                    fill = fill or bool(fills[0][starts[i] + j])
                if j is None:
                    at = default_at.get(id(col))
                    if at is None:
                        at = default_at[id(col)] = cells + len(defaults)
                        defaults.append({"name": col.name, "mysql_type": col.mysql_type, "flags": col.flags,
                                         "value": col.default, "label": col.default_label})
                    picks.append(at)
                else:
                    picks.append(starts[i] + j)
                    sources[names[i][j].lower()] = col.mysql_type
            if fill:  # a label to fill: left to `prepare`
                continue
            fsp = _fsps(sources)
            if fsp:
                fsps[len(keys)] = (i, fsp)
            taken.append(picks)
            out_names.append([c.name for c in schema.columns])
            offsets.append(offsets[-1] + len(picks))
            keys.append((i, schema.identity_columns()))
        if fsps:  # a value to render: left to `prepare`
            render = _renders(image, {i: fsp for i, fsp in fsps.values()})
            keep = [k for k in range(len(keys)) if not render[keys[k][0]]]
        else:
            keep = list(range(len(keys)))
        if not keep:
            return [], None
        extended = pa.concat_arrays([flat.cast(COLUMN_TYPE), pa.array(defaults, COLUMN_TYPE)]) if defaults \
            else flat.cast(COLUMN_TYPE)
        picks = pa.array([j for k in keep for j in taken[k]], pa.int64())
        cells_out = extended.take(picks)
        new_offsets = np.cumsum([0] + [len(taken[k]) for k in keep]).astype(np.int32)
        projected = pa.ListArray.from_arrays(pa.array(new_offsets), pa.StructArray.from_arrays(
            [pa.array([n for k in keep for n in out_names[k]], pa.string()), *(
                cells_out.field(f) for f in ("mysql_type", "flags", "value", "label"))],
            fields=list(COLUMN_TYPE)))
        index = [keys[k][0] for k in keep]
        chosen = batch.take(pa.array(index, pa.int64()))
        has_after = chosen.column("after").is_valid()
        projected = projected.cast(chosen.column("after").type)
        columns = {name: chosen.column(name) for name in chosen.schema.names}
        columns["after"] = pc.if_else(has_after, projected, chosen.column("after"))
        columns["before"] = pc.if_else(has_after, chosen.column("before"), projected)
        columns["key_columns"] = pa.array([keys[k][1] for k in keep], chosen.column("key_columns").type)
        return index, pa.RecordBatch.from_pydict(columns)

    if not schema_types:  # what the encoders read of a Kafka-record re-encode (types kept)
        prepare.unchanged = unchanged
        prepare.project = project
    return prepare


def _labelled(schema: TableSchema) -> list[int]:
    """The indexes of the table's columns with ENUM/SET labels (`project_image` may fill their
    cells' labels)."""
    return [j for j, c in enumerate(schema.columns) if parse_type(c.mysql_type).labels]


def _fills(image) -> tuple:
    """(per cell of the flattened image: a label `project_image` would fill there if its column
    has labels — no label, a value; per row, its first cell's index)."""
    import pyarrow.compute as pc

    flat = image.flatten()
    fill = pc.and_(pc.struct_field(flat, "label").is_null(),
                   pc.struct_field(flat, "value").is_valid()).to_numpy(zero_copy_only=False)
    lengths = _lengths(image)
    return fill, (np.cumsum(lengths) - lengths).tolist()


def _image(batch):
    """The image the projection reads, per row: after, else before."""
    import pyarrow.compute as pc

    after, before = batch.column("after"), batch.column("before")
    return after if after.null_count == 0 else pc.if_else(after.is_valid(), after, before)


def _lengths(image) -> np.ndarray:
    """Per row, how many columns an image (Arrow list<struct>) holds (0 for no image)."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.list_value_length(image), 0).to_numpy(zero_copy_only=False)


def _names(image) -> list:
    """Per row, an image's column names (None for no image)."""
    import pyarrow.compute as pc

    lengths = _lengths(image)
    ends = np.cumsum(lengths).tolist()
    valid = image.is_valid().to_numpy(zero_copy_only=False)
    flat = pc.struct_field(image.flatten(), "name").to_pylist()
    return [flat[end - length:end] if ok else None
            for end, length, ok in zip(ends, lengths.tolist(), valid.tolist(), strict=True)]
