"""The Delta Lake target (`--target-format delta`): one table per source table, written by the
tasks as spark_apps.outputs.lake says; committed, merged and read back here through delta-rs
(`deltalake`), which writes no column-mapped tables: a changed schema is the new schema of an
overwrite commit."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

from .. import storage
from .lake import LakeFormat, LakeTables


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


def _commit_properties(props: dict[str, str]):
    """Our metadata on a commit; userMetadata is the field Spark's DESCRIBE HISTORY and delta-rs show as such."""
    from deltalake.transaction import CommitProperties

    return CommitProperties(custom_metadata={**props, "userMetadata": json.dumps(props, sort_keys=True)})


def _quote(name: str) -> str:
    """A column name as a SQL identifier (any name: keywords, dots, quotes)."""
    return '"' + name.replace('"', '""') + '"'


def key_predicate(keys: list[str]) -> str:
    """The MERGE condition: every key column equal, null-safely. Each comparison is in its own
    parentheses: delta-rs parses the text with sqlparser-rs, which (in deltalake 1.6.6) reads the
    right side of `IS [NOT] DISTINCT FROM` at the lowest precedence, so `a IS NOT DISTINCT FROM
    b AND c ...` would mean `a IS NOT DISTINCT FROM (b AND c ...)` — a planning error ("Utf8 AND
    Boolean") for most two-column keys, and a wrong match for boolean ones
    (apache/datafusion-sqlparser-rs#2436)."""
    return " AND ".join(f"(target.{_quote(k)} IS NOT DISTINCT FROM source.{_quote(k)})" for k in keys)


class DeltaFormat(LakeFormat):
    """Delta tables at `<output>/<name parts>/`, no catalog."""

    format = "delta"

    def _table(self, database, table, version=None):
        from deltalake import DeltaTable

        return DeltaTable(self.location(database, table), version=version, storage_options=delta_storage_options())

    def last_commit(self, database, table) -> dict | None:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.location(database, table), storage_options=delta_storage_options()):
            return None
        info = self._table(database, table).history(1)[0]
        return self._ours(info, info.get("version"))

    def row_count(self, database, table) -> int:
        actions = self._table(database, table).get_add_actions(flatten=True)
        return sum(n or 0 for n in pa.table(actions).column("num_records").to_pylist())

    def current_schema(self, database, table) -> pa.Schema:
        return pa.schema(self._table(database, table).schema().to_arrow())

    def schema_at(self, database, table, version) -> list[str]:
        return [f.name for f in self._table(database, table, int(version)).schema().fields]

    def batches_at(self, database, table, version):
        yield from self._table(database, table, int(version)).to_pyarrow_dataset().to_batches()

    def _commit(self, database, table, schema, files, props, renames) -> dict:
        from deltalake import DeltaTable, Schema
        from deltalake.transaction import AddAction, create_table_with_add_actions

        location = self.location(database, table)
        now = int(time.time() * 1000)
        adds = [AddAction(storage.relative(f["uri"], location), f["bytes"], {}, now, True,
                          json.dumps({"numRecords": f["rows"]})) for f in files]
        commit = _commit_properties(props)
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

    def _touched_batches(self, database, table, changes, keys):
        yield from self._table(database, table).to_pyarrow_dataset().to_batches(filter=_key_filter(changes, keys[0]))

    def _merge(self, database, table, changes, keys, props) -> dict:
        """`insert` changes (a keyless table's copies, lake.with_copies) match nothing: each is
        one more row, next to the `delete` that removes the row's earlier copies."""
        columns = {c: f"source.{_quote(c)}" for c in changes.column_names if c != "_op"}
        metrics = (self._table(database, table)
                   .merge(changes, f"{key_predicate(keys)} AND (source._op <> 'insert')", source_alias="source",
                          target_alias="target",
                          commit_properties=_commit_properties(props))
                   .when_matched_delete("source._op = 'delete'")
                   .when_matched_update(columns, "source._op <> 'delete'")
                   .when_not_matched_insert(columns, "source._op <> 'delete'")
                   .execute())
        version = self._table(database, table).version()
        rows = self.row_count(database, table)
        return {"table": self.name(database, table), "location": self.location(database, table), "version": version,
                "rows": rows,
                "merged": {"inserted": metrics["num_target_rows_inserted"],
                           "updated": metrics["num_target_rows_updated"],
                           "deleted": metrics["num_target_rows_deleted"]}}


def _key_filter(changes: pa.Table, column: str):
    """Prunes the rows read to those whose first key column holds one of the window's values
    (or null when one is); None (read everything) for a type the filter does not take."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    values = changes.column(column)
    try:
        expr = ds.field(column).isin(pc.unique(values.drop_null()))
        return expr | ds.field(column).is_null() if values.null_count else expr
    except (pa.ArrowException, TypeError):
        return None


class DeltaTables(LakeTables):
    format = "delta"
