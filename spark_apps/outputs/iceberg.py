"""The Apache Iceberg target (`--target-format iceberg`): one table per source table, written by
the tasks as spark_apps.outputs.lake says; committed, merged and read back here through pyiceberg
and a catalog (by default SQLite beside the output; `--catalog type=filesystem` is ours,
spark_apps.iceberg_fs_catalog). A changed schema is Iceberg's own schema update (renamed
columns keep their field ids), in the same transaction as the data."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from .lake import LakeFormat, LakehouseError, LakeTables, table_parts


def iceberg_catalog_properties(output: str, given: dict[str, str]) -> dict[str, str]:
    """pyiceberg catalog properties: --catalog K=V, by default a SQL catalog on SQLite in
    <output>/_catalog.sqlite (local outputs only) with the output as warehouse."""
    props = {"type": "sql", "warehouse": output}
    if given.get("type") in FILESYSTEM_CATALOG:
        if storage.is_s3(output):
            raise LakehouseError("--catalog type=filesystem writes local (or mounted) paths only: an object store "
                                 "has no exclusive create for its version files (docs/lakehouse.md)")
        return {**given, "warehouse": output}
    if not given.get("uri") and not os.environ.get("PYICEBERG_CATALOG__CDC_REPLAY__URI") and given.get("type", "sql") == "sql":
        if storage.is_s3(output):
            raise LakehouseError("--target-format iceberg on s3:// needs a catalog: --catalog uri=sqlite:////path/"
                                 "catalog.sqlite or uri=postgresql+psycopg2://... (docs/lakehouse.md)")
        os.makedirs(output, exist_ok=True)
        props["uri"] = f"sqlite:///{os.path.join(output, '_catalog.sqlite')}"
    props.update(given)
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        props.setdefault("s3.endpoint", endpoint)
    for env, key in (("AWS_ACCESS_KEY_ID", "s3.access-key-id"), ("AWS_SECRET_ACCESS_KEY", "s3.secret-access-key"),
                     ("AWS_SESSION_TOKEN", "s3.session-token")):
        if os.environ.get(env):
            props.setdefault(key, os.environ[env])
    props.setdefault("s3.region", os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    return props


FILESYSTEM_CATALOG = ("filesystem", "hadoop")


def load_catalog(output: str, given: dict[str, str]):
    from pyiceberg.catalog import load_catalog as _load

    props = iceberg_catalog_properties(output, given)
    if props.get("type") in FILESYSTEM_CATALOG:  # ours: pyiceberg has no writable Hadoop catalog
        from ..iceberg_fs_catalog import FilesystemCatalog

        return FilesystemCatalog("cdc_replay", **{k: v for k, v in props.items() if k != "type"})
    return _load("cdc_replay", **props)


class IcebergFormat(LakeFormat):
    """Iceberg tables in a catalog (namespace.table), their files at `<output>/<name parts>/`."""

    format = "iceberg"

    def __init__(self, output: str, template: str, catalog: dict[str, str] | None = None):
        super().__init__(output, template, catalog)
        self.catalog = load_catalog(output, catalog or {})

    @classmethod
    def check_output(cls, output: str, catalog: dict[str, str]) -> None:
        iceberg_catalog_properties(output, catalog)

    def _ident(self, database, table) -> tuple[str, ...]:
        return tuple(table_parts(self.template, database, table))

    def _uri(self, location: str) -> str:
        return location if storage.is_s3(location) else f"file://{location}"

    def last_commit(self, database, table) -> dict | None:
        ident = self._ident(database, table)
        if not self.catalog.table_exists(ident):
            return None
        snapshot = self.catalog.load_table(ident).current_snapshot()
        if snapshot is None:
            return None
        return self._ours(_summary(snapshot), snapshot.snapshot_id)

    def row_count(self, database, table) -> int:
        snapshot = self.catalog.load_table(self._ident(database, table)).current_snapshot()
        return int(_summary(snapshot).get("total-records", 0))

    def current_schema(self, database, table) -> pa.Schema:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(self.catalog.load_table(self._ident(database, table)).schema(),
                                 include_field_ids=False)

    def schema_at(self, database, table, version) -> list[str]:
        table = self.catalog.load_table(self._ident(database, table))
        schema_id = table.snapshot_by_id(int(version)).schema_id
        return [f.name for f in next(s for s in table.schemas().values() if s.schema_id == schema_id).fields]

    def batches_at(self, database, table, version):
        table = self.catalog.load_table(self._ident(database, table))
        yield from table.scan(snapshot_id=int(version)).to_arrow_batch_reader()

    def _commit(self, database, table, schema, files, props, renames) -> dict:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        ident = self._ident(database, table)
        namespace = ident[:-1]
        self.catalog.create_namespace_if_not_exists(namespace)
        location = self.location(database, table)
        if not self.catalog.table_exists(ident):
            tx = self.catalog.create_table_transaction(ident, schema=schema, location=self._uri(location))
            new = True
        else:
            tx = self.catalog.load_table(ident).transaction()
            new = False
            _evolve_schema(tx, schema, renames)
        # the data files carry no Iceberg field ids: readers map their columns by name
        tx.set_properties({"schema.name-mapping.default": _name_mapping(tx.table_metadata)})
        io = tx._table.io
        with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
            if not new:
                for task in tx._table.scan().plan_files():
                    overwrite.delete_data_file(task.file)
            for f in files:
                overwrite.append_data_file(parquet_file_to_data_file(io, tx.table_metadata, self._uri(f["uri"])))
        tx.commit_transaction()
        snapshot = self.catalog.load_table(ident).current_snapshot()
        return {"table": ".".join(ident), "location": location, "version": snapshot.snapshot_id if snapshot else None}

    def _touched_batches(self, database, table, changes, keys):
        scan = self.catalog.load_table(self._ident(database, table)).scan(row_filter=_key_filter(changes, keys[0]))
        yield from scan.to_arrow_batch_reader()

    def _merge(self, database, table, changes, keys, props) -> dict:
        """Copy-on-write in one `overwrite` snapshot: the data files holding a key of the window
        are replaced by their other rows, and the window's upserts are added. (pyiceberg's own
        delete + append, or upsert, would commit two snapshots: a reader as of the cut could
        see the table between them.)"""
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

        ident = self._ident(database, table)
        tx = self.catalog.load_table(ident).transaction()
        metadata, io = tx.table_metadata, tx._table.io
        arrow_schema = self.current_schema(database, table)
        window = set(zip(*(changes.column(k).to_pylist() for k in keys)))
        upserts = changes.filter(pc.not_equal(changes.column("_op"), "delete")).select(arrow_schema.names)
        upserts = upserts.cast(arrow_schema)
        deleted = replaced = 0
        with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
            for task in tx._table.scan(row_filter=_key_filter(changes, keys[0])).plan_files():
                data = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue()).to_table([task])
                keep = [values not in window for values in zip(*(data.column(k).to_pylist() for k in keys))]
                if all(keep):
                    continue
                overwrite.delete_data_file(task.file)
                replaced += 1
                kept = data.filter(pa.array(keep, pa.bool_()))
                deleted += data.num_rows - kept.num_rows
                if kept.num_rows:
                    for data_file in _dataframe_to_data_files(metadata, kept.cast(arrow_schema), io):
                        overwrite.append_data_file(data_file)
            if upserts.num_rows:
                for data_file in _dataframe_to_data_files(metadata, upserts, io):
                    overwrite.append_data_file(data_file)
        tx.commit_transaction()
        snapshot = self.catalog.load_table(ident).current_snapshot()
        return {"table": ".".join(ident), "location": self.location(database, table),
                "version": snapshot.snapshot_id if snapshot else None, "rows": int(_summary(snapshot).get("total-records", 0)),
                "merged": {"upserted": upserts.num_rows, "removed": deleted, "files_rewritten": replaced}}


def _summary(snapshot) -> dict:
    """A snapshot's summary properties (empty for no snapshot)."""
    return snapshot.summary.additional_properties if snapshot and snapshot.summary else {}


def _name_mapping(metadata) -> str:
    """The current columns by name, plus every earlier column's name for its (never reused)
    field id, so the files of earlier snapshots still read after a rename or drop."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping, create_mapping_from_schema

    current = create_mapping_from_schema(metadata.schema())
    taken = {n for f in current.root for n in f.names}
    names = {f.field_id: list(f.names) for f in current.root}
    for schema in reversed(metadata.schemas):
        for field in schema.fields:
            if field.name not in taken:  # a renamed field keeps its old name too
                names.setdefault(field.field_id, []).append(field.name)
                taken.add(field.name)
    return NameMapping([MappedField(field_id=i, names=n) for i, n in names.items()]).model_dump_json()


def _key_filter(changes: pa.Table, column: str):
    """Prunes the data files to read by the window's values of the first key column (file
    statistics); any failure to express them just reads every file."""
    from pyiceberg.expressions import AlwaysTrue, In, IsNull, Or

    try:
        values = changes.column(column).to_pylist()
        present = sorted({v for v in values if v is not None})
        expr = In(column, present) if present else None
        if any(v is None for v in values):
            expr = IsNull(column) if expr is None else Or(expr, IsNull(column))
        return expr if expr is not None else AlwaysTrue()
    except Exception:  # a type pyiceberg's literals do not take: no pruning, same result
        return AlwaysTrue()


def _evolve_schema(tx, schema: pa.Schema, renames: dict[str, str] | None = None) -> None:
    """The table's columns become the cut's: renamed ones keep their field id (`renames`
    {old: new}), new ones added, gone ones dropped, widened types taken (pyiceberg's
    union_by_name), and a type no widening reaches dropped and added again (called for a full
    rewrite only: no old data file stays). Each step is a schema update of the same
    transaction: one commit."""
    current = {f.name for f in tx.table_metadata.schema().fields}
    renames = {old: new for old, new in (renames or {}).items()
               if old in current and old != new and (new not in current or new in renames)}
    if renames:
        try:
            with tx.update_schema() as update:
                for old, new in renames.items():
                    update.rename_column(old, new)
        except ValueError:  # names swapped or reused: a drop plus an add (the data is rewritten anyway)
            pass
        current = {f.name for f in tx.table_metadata.schema().fields}
    wanted = set(schema.names)
    if current == wanted and _same_types(tx, schema):
        return
    narrowed = _not_promotable(tx, schema)
    if narrowed:  # every data file is replaced: the column is dropped and added again with the cut's type
        with tx.update_schema(allow_incompatible_changes=True) as update:
            for name in narrowed:
                update.delete_column(name)
        current -= set(narrowed)
    with tx.update_schema(allow_incompatible_changes=True) as update:
        for name in sorted(current - wanted):
            update.delete_column(name)
        update.union_by_name(schema)


def _not_promotable(tx, schema: pa.Schema) -> list[str]:
    """The table's columns whose type the cut's is no promotion of (Iceberg only widens: a
    decimal(38,18) an export-less canal-json run inferred cannot become an export's
    decimal(12,2) in place; union_by_name would fail on it)."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import promote
    from pyiceberg.table.name_mapping import create_mapping_from_schema

    current = tx.table_metadata.schema()
    have = {f.name: f.field_type for f in current.fields}
    # only the columns the table has are compared; they get their ids from the table's names
    shared = pa.schema([f for f in schema if f.name in have])
    if not len(shared):
        return []
    new = pyarrow_to_schema(shared, name_mapping=create_mapping_from_schema(current),
                            format_version=tx.table_metadata.format_version)
    out = []
    for field in new.fields:
        old = have.get(field.name)
        if old is None or old == field.field_type:
            continue
        try:
            promote(old, field.field_type)
        except ResolveError:
            out.append(field.name)
    return sorted(out)


def _same_types(tx, schema: pa.Schema) -> bool:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    have = schema_to_pyarrow(tx.table_metadata.schema(), include_field_ids=False)
    return all(have.field(f.name).type == f.type for f in schema)


class IcebergTables(LakeTables):
    format = "iceberg"
