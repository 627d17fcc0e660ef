"""Snapshots and SCD2 histories as lakehouse tables: Delta Lake (delta-rs, `deltalake`) and
Apache Iceberg (`pyiceberg`), one table per source table, one table version per run.

The Spark tasks write the Parquet data files (pyarrow, spark_apps.outputs.parquet) straight into
each table's `data/` folder; the driver then commits them, one atomic commit per table, that
replaces the table's content and records the cut (commit ts), run id, source and row count in
the commit metadata. Files of a run that dies before its commit are never referenced, so the
table stays at its previous version (they are orphans a VACUUM / remove_orphan_files removes).

Why the Python libraries and not Spark's connectors: measured on the pinned Spark 4.3.0,
delta-spark 4.4.0 (built for 4.2.0) fails writing (NoSuchMethodError LogicalRDD.<init>) and
iceberg-spark-runtime-4.1 1.12.0 fails creating a table (IncompatibleClassChangeError on
SparkView); docs/lakehouse.md has the details.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable

import pyarrow as pa

from cdc_codecs.mysql_types import MySQLType, parse_type

from . import storage
from .outputs.parquet import UNSTATED_DECIMAL, history_columns
from .paths import segment

FORMATS = ("delta", "iceberg")
META = "cdc-replay."  # prefix of our keys in commit metadata / snapshot summaries

HISTORY_COLUMNS = history_columns("us")


class LakehouseError(RuntimeError):
    pass


def arrow_type(mysql_type: MySQLType) -> pa.DataType:
    """The column type in a lakehouse table (the table in docs/lakehouse.md): only types both
    Delta and Iceberg have, so a table reads the same in either format."""
    base = mysql_type.base
    if base in ("tinyint", "smallint", "mediumint"):
        return pa.int32()
    if base == "int":
        return pa.int64() if mysql_type.unsigned else pa.int32()
    if base == "bigint":
        return pa.decimal128(20, 0) if mysql_type.unsigned else pa.int64()
    if base == "bit":
        width = int(mysql_type.params[0]) if mysql_type.params and mysql_type.params[0].isdigit() else 1
        return pa.int64() if width < 64 else pa.decimal128(20, 0)
    if base == "year":
        return pa.int32()
    if base == "float":
        return pa.float32()
    if base == "double":
        return pa.float64()
    if base == "decimal":
        if not mysql_type.params:  # precision unknown: as Parquet snapshots type it
            return UNSTATED_DECIMAL
        precision = int(mysql_type.params[0])
        scale = int(mysql_type.params[1]) if len(mysql_type.params) > 1 else 0
        return pa.decimal128(precision, scale) if precision <= 38 else pa.string()
    if base == "date":
        return pa.date32()
    if base in ("datetime", "timestamp"):
        return pa.timestamp("us")  # wall clock as the producer wrote it (no zone)
    if mysql_type.is_binary or base == "geometry":
        return pa.binary()
    return pa.string()  # char, varchar, text, time, json, enum/set (labels)


def table_schema(columns: Iterable[tuple[str, str]], history: bool) -> pa.Schema:
    """The Arrow schema of a table from its (name, MySQL type) columns at the cut."""
    fields = [pa.field(n, t) for n, t in HISTORY_COLUMNS] if history else []
    fields += [pa.field(name, arrow_type(parse_type(mysql_type or ""))) for name, mysql_type in columns]
    return pa.schema(fields)


def table_parts(template: str, database: str | None, table: str | None) -> list[str]:
    """`--target-table` rendered: the parts of the table's name (Iceberg namespace.table; for
    Delta the folders below the output). The template is split at its dots before the names
    go in, so a name holding a dot stays one part (`a.b`.`c` and `a`.`b.c` are two tables)."""
    parts = [p for p in template.split(".") if p]
    if len(parts) < 2:
        raise LakehouseError(f"--target-table {template!r} must give at least namespace.table (e.g. {{schema}}.{{table}})")
    return [p.replace("{schema}", "_" if database is None else database).replace("{table}", "_" if table is None else table)
            for p in parts]


def table_key(template: str, database: str | None, table: str | None) -> str:
    """The table's key in the manifest (`output.lakehouse`): its name's parts, each a path
    segment (spark_apps.paths) whose dots are escaped too (`!2E`), joined by `.`. Unambiguous
    (`a.b`.`c` is `a!2Eb.c`, `a`.`b.c` is `a.b!2Ec`); ordinary names read as before (`shop.orders`).
    Readers of the manifest take the entries' `source_database`/`source_table`, never the key,
    so manifests keyed by the older dotted names read the same."""
    return ".".join(segment(p).replace(".", "!2E") for p in table_parts(template, database, table))


def without_tables(df, tables):
    """`df`'s rows not of the (database, table) pairs `tables`, compared as pairs (a dotted
    `db.table` string cannot tell `a.b`.`c` from `a`.`b.c`)."""
    from pyspark.sql import functions as F

    if not tables:
        return df
    pairs = [F.struct(F.lit(d).cast("string").alias("database"), F.lit(t).cast("string").alias("table"))
             for d, t in sorted(tables, key=lambda k: (k[0] or "", k[1] or ""))]
    return df.where(~F.struct("database", "table").isin(*pairs))


def table_location(output: str, template: str, database: str | None, table: str | None) -> str:
    """The table's folder: each part of its name one path segment (spark_apps.paths)."""
    return storage.join(output, *(segment(p) for p in table_parts(template, database, table)))


def data_uri_fn(output: str, template: str, run_id: str):
    """Where a task writes its files: <table location>/data/<run id>-<task>-<part>.parquet."""

    def uri(database, table, task, part):
        return storage.join(table_location(output, template, database, table), "data",
                            f"{run_id}-{task:05d}-{part:04d}.parquet")

    return uri


# ------------------------------------------------------------------ storage settings
def delta_storage_options() -> dict[str, str]:
    """object_store settings for S3 from the same environment storage.py uses."""
    options = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(name):
            options[name] = os.environ[name]
    options["AWS_REGION"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return options


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
        from .iceberg_fs_catalog import FilesystemCatalog

        return FilesystemCatalog("cdc_replay", **{k: v for k, v in props.items() if k != "type"})
    return _load("cdc_replay", **props)


# ------------------------------------------------------------------ tables
class Target:
    """One lakehouse format at one output: last commit metadata, and the commit of a run."""

    def __init__(self, fmt: str, output: str, template: str, catalog: dict[str, str] | None = None):
        if fmt not in FORMATS:
            raise LakehouseError(f"unknown lakehouse format {fmt}")
        self.fmt, self.output, self.template = fmt, output, template
        self.catalog = load_catalog(output, catalog or {}) if fmt == "iceberg" else None

    def name(self, database, table) -> str:
        return ".".join(table_parts(self.template, database, table))

    def key(self, database, table) -> str:
        return table_key(self.template, database, table)

    def location(self, database, table) -> str:
        return table_location(self.output, self.template, database, table)

    def _uri(self, location: str) -> str:
        return location if storage.is_s3(location) else f"file://{location}"

    # ----------------------------------------------------- the table's last commit
    def last_commit(self, database, table) -> dict | None:
        """Our metadata of the table's current version (None: no table, or not written by us)."""
        if self.fmt == "delta":
            from deltalake import DeltaTable

            location = self.location(database, table)
            if not DeltaTable.is_deltatable(location, storage_options=delta_storage_options()):
                return None
            info = DeltaTable(location, storage_options=delta_storage_options()).history(1)[0]
            meta = {k[len(META):]: v for k, v in info.items() if k.startswith(META)}
            return {**meta, "version": info.get("version")} if meta else None
        ident = tuple(table_parts(self.template, database, table))
        if not self.catalog.table_exists(ident):
            return None
        snapshot = self.catalog.load_table(ident).current_snapshot()
        if snapshot is None:
            return None
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        meta = {k[len(META):]: v for k, v in summary.items() if k.startswith(META)}
        return {**meta, "version": snapshot.snapshot_id} if meta else None

    def row_count(self, database, table) -> int:
        """Rows in the current version, from the table's own statistics (a merged version
        records no row count in its commit metadata: it is known only after the merge)."""
        if self.fmt == "delta":
            from deltalake import DeltaTable

            actions = DeltaTable(self.location(database, table), storage_options=delta_storage_options()
                                 ).get_add_actions(flatten=True)
            return sum(n or 0 for n in pa.table(actions).column("num_records").to_pylist())
        snapshot = self.catalog.load_table(tuple(table_parts(self.template, database, table))).current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        return int(summary.get("total-records", 0))

    def current_schema(self, database, table) -> pa.Schema:
        if self.fmt == "delta":
            from deltalake import DeltaTable

            return pa.schema(DeltaTable(self.location(database, table), storage_options=delta_storage_options())
                             .schema().to_arrow())
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        table = self.catalog.load_table(tuple(table_parts(self.template, database, table)))
        return schema_to_pyarrow(table.schema(), include_field_ids=False)

    def schema_at(self, database, table, version) -> list[str]:
        """The column names of the table at `version` (Delta version / Iceberg snapshot id)."""
        if self.fmt == "delta":
            from deltalake import DeltaTable

            return [f.name for f in DeltaTable(self.location(database, table), version=int(version),
                                               storage_options=delta_storage_options()).schema().fields]
        table = self.catalog.load_table(tuple(table_parts(self.template, database, table)))
        schema_id = table.snapshot_by_id(int(version)).schema_id
        return [f.name for f in next(s for s in table.schemas().values() if s.schema_id == schema_id).fields]

    def batches_at(self, database, table, version):
        """The table's rows at `version`, batch by batch (a window rebuilding the table)."""
        if self.fmt == "delta":
            from deltalake import DeltaTable

            dataset = DeltaTable(self.location(database, table), version=int(version),
                                 storage_options=delta_storage_options()).to_pyarrow_dataset()
            yield from dataset.to_batches()
            return
        table = self.catalog.load_table(tuple(table_parts(self.template, database, table)))
        yield from table.scan(snapshot_id=int(version)).to_arrow_batch_reader()

    # ----------------------------------------------------- commit
    def commit(self, database, table, schema: pa.Schema, files: list[dict], properties: dict[str, str],
               renames: dict[str, str] | None = None) -> dict:
        """Replace the table's content with `files` (WRITTEN rows) in one atomic commit.
        `renames` {old: new}: columns Iceberg renames (same field id) rather than drops and adds."""
        props = {META + k: str(v) for k, v in properties.items()}
        if self.fmt == "delta":
            return self._commit_delta(database, table, schema, files, props)
        return self._commit_iceberg(database, table, schema, files, props, renames or {})

    def _commit_delta(self, database, table, schema, files, props) -> dict:
        from deltalake import DeltaTable, Schema
        from deltalake.transaction import AddAction, CommitProperties, create_table_with_add_actions

        location = self.location(database, table)
        now = int(time.time() * 1000)
        adds = [AddAction(storage.relative(f["uri"], location), f["bytes"], {}, now, True,
                          json.dumps({"numRecords": f["rows"]})) for f in files]
        # userMetadata is the commit field Spark's DESCRIBE HISTORY and delta-rs show as such
        commit = CommitProperties(custom_metadata={**props, "userMetadata": json.dumps(props, sort_keys=True)})
        options = delta_storage_options()
        schema = Schema.from_arrow(schema)
        if not DeltaTable.is_deltatable(location, storage_options=options):
            create_table_with_add_actions(location, schema, adds, mode="overwrite", name=self.name(database, table),
                                          storage_options=options, commit_properties=commit)
        else:
            current = DeltaTable(location, storage_options=options)
            current.create_write_transaction(adds, mode="overwrite", schema=schema, commit_properties=commit)
        version = DeltaTable(location, storage_options=options).version()
        return {"table": self.name(database, table), "location": location, "version": version}

    def _commit_iceberg(self, database, table, schema, files, props, renames=None) -> dict:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        ident = tuple(table_parts(self.template, database, table))
        namespace = ident[:-1]
        self.catalog.create_namespace_if_not_exists(namespace)
        location = self.location(database, table)
        if not self.catalog.table_exists(ident):
            tx = self.catalog.create_table_transaction(ident, schema=schema, location=self._uri(location))
            new = True
        else:
            tx = self.catalog.load_table(ident).transaction()
            new = False
            _evolve_iceberg_schema(tx, schema, renames or {})
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


    # ----------------------------------------------------- an incremental window
    def merge(self, database, table, changes: pa.Table, keys: list[str], properties: dict[str, str]) -> dict:
        """Apply a window's last change per key in one commit: rows whose `_op` is `delete`
        remove the key, the others upsert it. `keys`: the row identity (docs/semantics.md);
        compared null-safely, since a keyless table is identified by all its (nullable) values."""
        props = {META + k: str(v) for k, v in properties.items()}
        if self.fmt == "delta":
            return self._merge_delta(database, table, changes, keys, props)
        return self._merge_iceberg(database, table, changes, keys, props)

    def _merge_delta(self, database, table, changes, keys, props) -> dict:
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties

        location = self.location(database, table)
        options = delta_storage_options()
        quote = lambda name: '"' + name.replace('"', '""') + '"'  # noqa: E731
        predicate = " AND ".join(f"target.{quote(k)} IS NOT DISTINCT FROM source.{quote(k)}" for k in keys)
        columns = {c: f"source.{quote(c)}" for c in changes.column_names if c != "_op"}
        commit = CommitProperties(custom_metadata={**props, "userMetadata": json.dumps(props, sort_keys=True)})
        metrics = (DeltaTable(location, storage_options=options)
                   .merge(changes, predicate, source_alias="source", target_alias="target", commit_properties=commit)
                   .when_matched_delete("source._op = 'delete'")
                   .when_matched_update(columns, "source._op <> 'delete'")
                   .when_not_matched_insert(columns, "source._op <> 'delete'")
                   .execute())
        current = DeltaTable(location, storage_options=options)
        rows = self.row_count(database, table)
        return {"table": self.name(database, table), "location": location, "version": current.version(), "rows": rows,
                "merged": {"inserted": metrics["num_target_rows_inserted"],
                           "updated": metrics["num_target_rows_updated"],
                           "deleted": metrics["num_target_rows_deleted"]}}

    def _merge_iceberg(self, database, table, changes, keys, props) -> dict:
        """Copy-on-write in one `overwrite` snapshot: the data files holding a key of the window
        are replaced by their other rows, and the window's upserts are added. (pyiceberg's own
        delete + append, or upsert, would commit two snapshots: a reader as of the cut could
        see the table between them.)"""
        import pyarrow.compute as pc
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

        ident = tuple(table_parts(self.template, database, table))
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
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        return {"table": ".".join(ident), "location": self.location(database, table),
                "version": snapshot.snapshot_id if snapshot else None, "rows": int(summary.get("total-records", 0)),
                "merged": {"upserted": upserts.num_rows, "removed": deleted, "files_rewritten": replaced}}


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


def same_columns(have: pa.Schema, want: pa.Schema) -> bool:
    """The same column names and types, large/view string and binary counted as plain."""
    def norm(t):
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        return t
    return have.names == want.names and all(norm(a.type) == norm(b.type) for a, b in zip(have, want))


def _modified(values: pa.Array, field: pa.Field, table: str) -> pa.Array:
    """A column of the table at --since in its type at the cut (MODIFY COLUMN). FLOAT widened to
    DOUBLE goes through its shortest text, as a full replay parses it (1.1, not 1.100000023...)."""
    if values.type == field.type:
        return values
    try:
        if pa.types.is_float32(values.type) and pa.types.is_float64(field.type):
            return values.cast(pa.string()).cast(field.type)
        return values.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise LakehouseError(f"table {table}: column {field.name} cannot be converted to {field.type} as the window's "
                             f"MODIFY COLUMN asks ({e}); replay without --since to write the table in full") from e


def _evolve_iceberg_schema(tx, schema: pa.Schema, renames: dict[str, str] | None = None) -> None:
    """The table's columns become the cut's: renamed ones keep their field id (`renames`
    {old: new}), new ones added, gone ones dropped, widened types taken (pyiceberg's
    union_by_name). Each step is a schema update of the same transaction: one commit."""
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
    with tx.update_schema(allow_incompatible_changes=True) as update:
        for name in sorted(current - wanted):
            update.delete_column(name)
        update.union_by_name(schema)


def _same_types(tx, schema: pa.Schema) -> bool:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    have = schema_to_pyarrow(tx.table_metadata.schema(), include_field_ids=False)
    return all(have.field(f.name).type == f.type for f in schema)


# ------------------------------------------------------------------ a run's tables
class TablePlan:
    """The tables one run writes: those with rows at the cut and those the DDL history knows
    (empty at the cut: still a version), minus those whose current version is already this
    cut of this source (a rerun adds no version: `skip`)."""

    def __init__(self, target: Target, run: dict, cut: dict, emit: str, schemas: dict, tables: list[tuple],
                 dropped: list[tuple] = ()):
        self.target, self.run, self.cut, self.emit, self.schemas = target, run, cut, emit, schemas
        self.dropped = set(dropped)  # tables an earlier snapshot wrote that no longer exist at this cut
        self.tables = list(tables) + sorted(self.dropped - set(tables))
        self.last = {key: target.last_commit(*key) for key in tables}
        cut_ts = cut.get("commit_ts")
        self.skip = {key for key, last in self.last.items()
                     if last is not None and cut_ts is not None and last.get("cut_commit_ts") == str(cut_ts)
                     and last.get("source") == run["source"] and last.get("emit") == emit}

    def _schema(self, key, files: list[dict], history: bool) -> pa.Schema | None:
        known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
        if known is not None:
            return table_schema([(c.name, c.mysql_type) for c in known.columns], history)
        if not files:
            return None
        import io

        import pyarrow.parquet as pq

        return pq.read_schema(io.BytesIO(storage.read_bytes(files[0]["uri"])))

    def _by_table(self, files: list[dict], window: bool) -> dict[tuple, list]:
        """Files per table, by the folder they were written to (a table's `data/`, or the
        window's `<db>/<table>/`), not by their `db.table` label, which is ambiguous when a name
        holds a dot (`a.b`.`c`, `a`.`b.c`)."""
        by_table: dict[tuple, list] = {key: [] for key in self.tables}
        if window:
            folders = {(segment(d), segment(t)): (d, t) for d, t in self.tables}
        else:
            folders = {storage.join(self.target.location(d, t), "data"): (d, t) for d, t in self.tables}
        names = {f"{d}.{t}": (d, t) for d, t in self.tables}
        for w in files:
            folder = tuple(w["uri"].rsplit("/", 3)[1:3]) if window else w["uri"].rsplit("/", 1)[0]
            key = folders.get(folder) or names.get(w["topic"]) or tuple(w["topic"].split(".", 1))
            by_table.setdefault(key, []).append(w)
        return by_table

    def commit(self, written: list[dict], history: bool) -> dict:
        by_table = self._by_table(written, window=False)
        result = {}
        for key in sorted(by_table, key=lambda k: (k[0] or "", k[1] or "")):
            name, entry = self.target.name(*key), self.target.key(*key)
            if key in self.skip:
                last = self.last[key]
                result[entry] = {"source_database": key[0], "source_table": key[1], "table": name, "location": self.target.location(*key), "version": last.get("version"),
                                "cut_commit_ts": self.cut.get("commit_ts"), "rows": int(last.get("rows", 0)),
                                "unchanged": True, "committed_by": last.get("run_id"),
                                "dropped": last.get("dropped") == "true"}
                continue
            files = by_table[key]
            schema = self.target.current_schema(*key) if key in self.dropped else self._schema(key, files, history)
            if schema is None:
                continue
            rows = sum(f["rows"] for f in files)
            props = {"cut_commit_ts": self.cut.get("commit_ts"), "cut": self.cut.get("description", ""),
                     "run_id": self.run["run_id"], "source": self.run["source"], "protocol": self.run.get("protocol"),
                     "emit": self.emit, "rows": rows, "source_database": key[0], "source_table": key[1]}
            if key in self.dropped:
                props["dropped"] = "true"  # dropped or renamed away by the cut: an empty version
            done = self.target.commit(key[0], key[1], schema, files, props, self._renames_since(key, self.last.get(key)))
            result[entry] = {"source_database": key[0], "source_table": key[1], **done, "cut_commit_ts": self.cut.get("commit_ts"), "rows": rows, "unchanged": False,
                            "committed_by": self.run["run_id"], "dropped": key in self.dropped}
        return result


    # ----------------------------------------------------- an incremental window (--since)
    def commit_window(self, changes: list[dict], since: int) -> dict:
        """Apply a window's changes (files of the last change per key, `_op` upsert/delete) to
        each table with MERGE semantics, one version per table; a table whose columns changed
        in the window, or renamed into its name, is rebuilt (`_rebuild`). Every table is checked
        before any is committed; what cannot be applied stops the run (ReplayError via
        LakehouseError)."""
        import io as _io

        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        by_table = self._by_table(changes, window=True)
        cut_ts = self.cut.get("commit_ts")
        actions = {}
        for key in sorted(by_table, key=lambda k: (k[0] or "", k[1] or "")):
            name, last = self.target.name(*key), self.last.get(key)
            known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
            last_cut = int(last["cut_commit_ts"]) if last and last.get("cut_commit_ts") not in (None, "None") else None
            started_in_window = known is not None and bool(known.start) and list(known.start) > [since]
            if key in self.dropped:
                gone = self.target.last_commit(*key) or {}
                same = gone.get("dropped") == "true" and gone.get("cut_commit_ts") == str(cut_ts)
                if same:
                    self.last[key] = gone
                actions[key] = "unchanged" if same else "dropped"
            elif last_cut is not None and last_cut == cut_ts and last.get("emit") == self.emit:
                actions[key] = "unchanged"
            elif last_cut is not None and cut_ts is not None and last_cut > cut_ts:
                raise LakehouseError(f"table {name} is at cut {last_cut}, after this run's cut {cut_ts}: "
                                     "a window cannot take it back")
            elif last is None and known is not None and not started_in_window:
                earlier = self._renamed_from(key, known, since, cut_ts)
                if earlier is None:
                    raise LakehouseError(f"table {name} existed before --since {since} (renamed to this name in "
                                         "the window?) but has no table at the output: its earlier rows are not "
                                         "in the window; replay without --since to write the tables in full")
                actions[key] = ("rebuild", earlier)  # RENAME TABLE in the window: the old table's rows
            elif last is None or started_in_window:
                # created or truncated in the window (its rows are all here), or a table no DDL
                # describes seen for the first time
                actions[key] = "replace"
            elif last_cut is None or last_cut < since:
                raise LakehouseError(f"table {name} is at cut {last_cut}, before --since {since}: the changes "
                                     f"in between are not in this window (replay from --since {last_cut})")
            else:
                want = self._schema(key, [], False)
                if want is not None and not same_columns(self.target.current_schema(*key), want):
                    actions[key] = ("rebuild", (key, last))  # columns changed in the window
                else:
                    actions[key] = "merge"
        result = {}
        # rebuilds first: a table renamed in the window reads the old name's table before the
        # old name's empty ("dropped") version is committed, so a failed run can be rerun
        for key, action in sorted(actions.items(), key=lambda item: not isinstance(item[1], tuple)):
            name, files = self.target.name(*key), by_table[key]
            if isinstance(action, tuple):
                action, (source, source_last) = action
            base = {"source_database": key[0], "source_table": key[1], "table": name,
                    "location": self.target.location(*key), "cut_commit_ts": cut_ts, "since": since}
            if action == "unchanged":
                last = self.last[key]
                rows = int(last["rows"]) if last.get("rows") not in (None, "None") else self.target.row_count(*key)
                result[self.target.key(*key)] = {**base, "version": last.get("version"), "rows": rows,
                                "unchanged": True, "committed_by": last.get("run_id"),
                                "dropped": last.get("dropped") == "true", "mode": last.get("mode") or "replace"}
                continue
            tables = [pq.read_table(_io.BytesIO(storage.read_bytes(f["uri"]))) for f in files]
            want = self.target.current_schema(*key) if action in ("merge", "dropped") else self._schema(key, files, False)
            if want is None:
                continue
            changes_table = (pa.concat_tables([t.select(["_op", *want.names]).cast(
                pa.schema([pa.field("_op", pa.string()), *want])) for t in tables])
                if tables else pa.table({"_op": pa.array([], pa.string()), **{f.name: pa.array([], f.type) for f in want}}))
            props = {"cut_commit_ts": cut_ts, "cut": self.cut.get("description", ""), "run_id": self.run["run_id"],
                     "source": self.run["source"], "protocol": self.run.get("protocol"), "emit": self.emit,
                     "since": since, "source_database": key[0], "source_table": key[1]}
            if action == "rebuild":
                props["mode"] = "rebuild"
                props["window_changes"] = changes_table.num_rows
                if source != key:
                    props["renamed_from"] = ".".join(s or "" for s in source)
                done = self._rebuild(key, source, source_last, since, want, changes_table, props)
            elif action == "merge":
                props["mode"] = "merge"
                props["window_changes"] = changes_table.num_rows
                done = self.target.merge(key[0], key[1], changes_table, self._keys(key, want), props)
            else:
                rows = changes_table.filter(pc.not_equal(changes_table.column("_op"), "delete")) \
                    if action == "replace" else changes_table.slice(0, 0)
                rows = rows.select(want.names)
                uri = storage.join(self.target.location(*key), "data", f"{self.run['run_id']}-window.parquet")
                sink = _io.BytesIO()
                pq.write_table(rows, sink, compression="zstd")
                storage.write_bytes(uri, sink.getvalue())
                props.update(mode="replace", rows=rows.num_rows)
                if action == "dropped":
                    props["dropped"] = "true"
                done = self.target.commit(key[0], key[1], want,
                                          [{"uri": uri, "bytes": len(sink.getvalue()), "rows": rows.num_rows}], props)
                done["rows"] = rows.num_rows
            result[self.target.key(*key)] = {**base, **done, "unchanged": False, "committed_by": self.run["run_id"],
                            "dropped": action == "dropped", "mode": props["mode"]}
        return result

    def _renames_since(self, key, last: dict | None) -> dict[str, str]:
        """{name at the table's last cut: name now} for columns RENAME COLUMN renamed since then
        (Iceberg keeps their field ids)."""
        known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
        if known is None or not last or last.get("cut_commit_ts") in (None, "None") or last.get("dropped") == "true":
            return {}
        at = [int(last["cut_commit_ts"]), 2**63]
        return {c.name_at(at): c.name for c in known.columns
                if list(c.added) <= at[:1] and c.aliases and c.name_at(at) != c.name}

    def _renamed_from(self, key, known, since: int, cut_ts) -> tuple | None:
        """(old key, its last commit) when the table had another name at --since (RENAME TABLE
        in the window) and that name's table at the output is at a cut in [since, this cut]."""
        at_since = [(d, t) for start, d, t in known.names if not start or list(start) <= [since]]
        if not at_since:
            return None
        old = at_since[-1]
        if ((old[0] or "").lower(), (old[1] or "").lower()) == ((key[0] or "").lower(), (key[1] or "").lower()):
            return None
        last = self.target.last_commit(*old)
        if last is None or last.get("dropped") == "true" or last.get("cut_commit_ts") in (None, "None"):
            return None
        if not since <= int(last["cut_commit_ts"]) <= (cut_ts if cut_ts is not None else 2**63):
            return None
        return old, last

    def _rebuild(self, key, source, source_last: dict, since: int, want: pa.Schema, changes: pa.Table,
                 props: dict) -> dict:
        """A window whose DDL changed the table's columns or renamed it: the rows of the table
        at --since (`source`, at its recorded version) are brought to the cut's columns as a
        full replay has them (renamed columns keep their values, columns added in the window
        take their DDL default, dropped ones go, types widened by a cast), the window's last
        change per key replaces or deletes its key, and everything is committed as one
        replacing version whose schema change is the format's own (Iceberg: rename/delete/add/
        update column in the same transaction; Delta: the new schema in the overwrite commit,
        since delta-rs writes no column-mapped tables). The table's files are rewritten (by
        the driver, streamed batch by batch): a DEFAULT for old rows needs rewriting anyway."""
        import io as _io

        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from .outputs.parquet import typed_column

        known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
        after_since = [since, 2**63]  # DDL at the --since commit ts is in the table already
        old_names = self.target.current_schema(*source).names if source == key else \
            self.target.schema_at(*source, source_last.get("version"))
        plan, renames = [], {}
        for field in want:
            column = known.column(field.name) if known is not None else None
            if column is not None and list(column.added) > [since]:
                default, _ = typed_column([column.default], parse_type(column.mysql_type),
                                          [column.default_label], arrow_type)
                plan.append((field, None, default[0].cast(field.type)))
                continue
            was = column.name_at(after_since) if column is not None else field.name
            match = next((n for n in old_names if n.lower() == was.lower()), None)
            if match is not None and match != field.name:
                renames[match] = field.name
            plan.append((field, match, pa.scalar(None, field.type)))
        keys = self._keys(key, want)
        window = set(zip(*(changes.column(k).to_pylist() for k in keys)))
        upserts = changes.filter(pc.not_equal(changes.column("_op"), "delete")).select(want.names).cast(want)

        files, batches, pending = [], [], 0

        def flush():
            nonlocal batches, pending
            if not batches:
                return
            part = pa.Table.from_batches(batches, want)
            uri = storage.join(self.target.location(*key), "data",
                               f"{self.run['run_id']}-rebuild-{len(files):04d}.parquet")
            sink = _io.BytesIO()
            pq.write_table(part, sink, compression="zstd")
            storage.write_bytes(uri, sink.getvalue())
            files.append({"uri": uri, "bytes": len(sink.getvalue()), "rows": part.num_rows})
            batches, pending = [], 0

        for batch in self.target.batches_at(*source, source_last.get("version")):
            n = batch.num_rows
            columns = [_modified(batch.column(batch.schema.get_field_index(match)), field, self.target.name(*key))
                       if match is not None else pa.repeat(fill, n) for field, match, fill in plan]
            converted = pa.RecordBatch.from_arrays(columns, schema=want)
            keep = [values not in window for values in zip(*(converted.column(k).to_pylist() for k in keys))]
            converted = converted.filter(pa.array(keep, pa.bool_()))
            if converted.num_rows:
                batches.append(converted)
                pending += converted.num_rows
            if pending >= 1_000_000:
                flush()
        batches += upserts.to_batches() or ([] if files else [pa.RecordBatch.from_pylist([], schema=want)])
        flush()
        rows = sum(f["rows"] for f in files)
        props["rows"] = rows
        done = self.target.commit(key[0], key[1], want, files, props, renames)
        done["rows"] = rows
        return done

    def _keys(self, key, schema: pa.Schema) -> list[str]:
        """The row identity at the cut: primary key, else a NOT NULL UNIQUE key, else every column."""
        known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
        identity = known.identity_columns() if known is not None else []
        by_lower = {n.lower(): n for n in schema.names}
        columns = [by_lower[c.lower()] for c in identity if c.lower() in by_lower]
        return columns if columns and len(columns) == len(identity) else list(schema.names)


def plan_tables(args, run: dict, cut: dict, schemas: dict, table_rows: list[dict]) -> TablePlan:
    import fnmatch

    from cdc_codecs import parse_option_pairs

    target = Target(args.output_format, run["output"], args.target_table, parse_option_pairs(args.catalog))
    keys = {((r["database"] or "").lower(), (r["table"] or "").lower()): (r["database"], r["table"]) for r in table_rows}
    patterns = [p.lower() for p in args.table_patterns()]
    for schema in schemas.values():
        lower = (schema.database.lower(), schema.name.lower())
        if lower in keys:
            continue
        if patterns and not any(fnmatch.fnmatchcase(f"{lower[0]}.{lower[1]}", p) for p in patterns):
            continue
        keys[lower] = (schema.database, schema.name)
    dropped = []
    if args.emit == "snapshot":
        for entry in _previous_tables(run["output"]):
            lower = ((entry["source_database"] or "").lower(), (entry["source_table"] or "").lower())
            if lower in keys or (patterns and not any(fnmatch.fnmatchcase(".".join(lower), p) for p in patterns)):
                continue
            keys[lower] = (entry["source_database"], entry["source_table"])
            dropped.append(keys[lower])
    return TablePlan(target, run, cut, args.emit, schemas, sorted(keys.values(), key=lambda k: (k[0] or "", k[1] or "")),
                     dropped)


def _previous_tables(output: str) -> list[dict]:
    """The tables the previous run at this output wrote (its manifest's output.lakehouse)."""
    from . import manifest as manifest_mod

    try:
        previous = manifest_mod.read_manifest(output)
    except Exception:  # no earlier run (or not readable): nothing to carry over
        return []
    return [t for t in (previous.get("output", {}).get("lakehouse") or {}).values() if "source_table" in t]
