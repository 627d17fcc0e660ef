"""What the Delta and Iceberg targets share (spark_apps.outputs.delta, spark_apps.outputs.iceberg):
snapshots and SCD2 histories as lakehouse tables, one table per source table, one table version
per run.

The Spark tasks write the Parquet data files (pyarrow, spark_apps.outputs.parquet) straight into
each table's `data/` folder; the driver then commits them, one atomic commit per table, that
replaces the table's content and records the cut (commit ts), run id, source and row count in
the commit metadata. Files of a run that dies before its commit are never referenced, so the
table stays at its previous version (they are orphans a VACUUM / remove_orphan_files removes).
A --since snapshot's window is merged into the tables instead (`TablePlan.commit_window`).

Here: the table names, locations and column types both formats have, the plan of a run's tables
(which to write, skip, merge or rebuild) and the `LakeTables` target; what a format does itself
(commit, merge, read back, schema change) is a `LakeFormat` subclass in its own module.

Why the Python libraries and not Spark's connectors: measured on the pinned Spark 4.3.0,
delta-spark 4.4.0 (built for 4.2.0) fails writing (NoSuchMethodError LogicalRDD.<init>) and
iceberg-spark-runtime-4.1 1.12.0 fails creating a table (IncompatibleClassChangeError on
SparkView); docs/lakehouse.md has the details.
"""

from __future__ import annotations

import importlib
import io
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_codecs.mysql_types import MySQLType, parse_type

from .. import storage
from ..paths import segment
from .base import HISTORY, WINDOW, OutputError, Target, written_rows
from .parquet import arrow_type as parquet_type
from .parquet import WINDOW_COPY_COLUMNS, history_columns, per_table, typed_column, write_parquet_fn

FORMATS = ("delta", "iceberg")  # each the name of its module in this package
META = "cdc-replay."  # prefix of our keys in commit metadata / snapshot summaries
# a run from a --base-export records the export in each commit: a rerun at the same cut is the
# same version only from the same export (a run without one holds only the rows the archive touched)
BASE_KEYS = ("base_export", "base_position")

HISTORY_COLUMNS = history_columns("us")


class LakehouseError(RuntimeError):
    pass


def arrow_type(mysql_type: MySQLType) -> pa.DataType:
    """The column type in a lakehouse table (the table in docs/lakehouse.md): only types both
    Delta and Iceberg have, so a table reads the same in either format. Neither has unsigned
    integers (Parquet's types differ there only); the other types are Parquet's."""
    base = mysql_type.base
    if base in ("tinyint", "smallint", "mediumint"):
        return pa.int32()
    if base == "int":
        return pa.int64() if mysql_type.unsigned else pa.int32()
    if base == "bigint" and mysql_type.unsigned:
        return pa.decimal128(20, 0)
    if base == "bit":
        width = int(mysql_type.params[0]) if mysql_type.params and mysql_type.params[0].isdigit() else 1
        return pa.int64() if width < 64 else pa.decimal128(20, 0)
    return parquet_type(mysql_type)


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


# ------------------------------------------------------------------ a table format
class LakeFormat(ABC):
    """One lakehouse format at one output: the tables' last commit metadata, what they hold, and
    the commits of a run. A subclass (spark_apps.outputs.delta, .iceberg) says how its format
    does each; `open_format` picks it by name."""

    format: ClassVar[str]
    _formats: ClassVar[dict[str, type[LakeFormat]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        LakeFormat._formats[cls.format] = cls

    def __init__(self, output: str, template: str, catalog: dict[str, str] | None = None):
        self.output, self.template = output, template

    @classmethod
    def check_output(cls, output: str, catalog: dict[str, str]) -> None:
        """What the worker's environment decides, checked before Spark starts (LakehouseError)."""

    def name(self, database, table) -> str:
        return ".".join(table_parts(self.template, database, table))

    def key(self, database, table) -> str:
        return table_key(self.template, database, table)

    def location(self, database, table) -> str:
        return table_location(self.output, self.template, database, table)

    @staticmethod
    def _ours(metadata: dict, version) -> dict | None:
        """Our keys of a commit's metadata, unprefixed, with the version (None: not our commit)."""
        meta = {k[len(META):]: v for k, v in metadata.items() if k.startswith(META)}
        return {**meta, "version": version} if meta else None

    # ----------------------------------------------------- the table's last commit
    @abstractmethod
    def last_commit(self, database, table) -> dict | None:
        """Our metadata of the table's current version (None: no table, or not written by us)."""

    @abstractmethod
    def row_count(self, database, table) -> int:
        """Rows in the current version, from the table's own statistics (a merged version
        records no row count in its commit metadata: it is known only after the merge)."""

    @abstractmethod
    def current_schema(self, database, table) -> pa.Schema:
        """The table's columns now, as Arrow."""

    @abstractmethod
    def schema_at(self, database, table, version) -> list[str]:
        """The column names of the table at `version` (Delta version / Iceberg snapshot id)."""

    @abstractmethod
    def batches_at(self, database, table, version) -> Iterator[pa.RecordBatch]:
        """The table's rows at `version`, batch by batch (a window rebuilding the table)."""

    # ----------------------------------------------------- commit
    def commit(self, database, table, schema: pa.Schema, files: list[dict], properties: dict[str, str],
               renames: dict[str, str] | None = None) -> dict:
        """Replace the table's content with `files` (WRITTEN rows) in one atomic commit.
        `renames` {old: new}: columns a format that can renames (same field id) rather than drops and adds."""
        return self._commit(database, table, schema, files, {META + k: str(v) for k, v in properties.items()},
                            renames or {})

    @abstractmethod
    def _commit(self, database, table, schema: pa.Schema, files: list[dict], props: dict[str, str],
                renames: dict[str, str]) -> dict:
        """`commit` with our metadata keys prefixed: {table, location, version}."""

    # ----------------------------------------------------- an incremental window
    def merge(self, database, table, changes: pa.Table, keys: list[str], properties: dict[str, str]) -> dict:
        """Apply a window's last change per key in one commit: rows whose `_op` is `delete`
        remove the key, `insert` adds one more row (a keyless table's copies, `with_copies`),
        the others upsert it. `keys`: the row identity (docs/semantics.md);
        compared null-safely, since a keyless table is identified by all its (nullable) values."""
        return self._merge(database, table, changes, keys, {META + k: str(v) for k, v in properties.items()})

    @abstractmethod
    def _merge(self, database, table, changes: pa.Table, keys: list[str], props: dict[str, str]) -> dict:
        """`merge` with our metadata keys prefixed: {table, location, version, rows, merged}."""

    def copy_counts(self, database, table, changes: pa.Table, keys: list[str]) -> dict[tuple, int]:
        """{row: how many identical copies the table holds now} for the rows of `changes` (a
        table without a key), from the table's rows that may hold them (`_touched_batches`)."""
        touched = set(zip(*(changes.column(k).to_pylist() for k in keys)))
        counts: dict[tuple, int] = {}
        for batch in self._touched_batches(database, table, changes, keys):
            for values in zip(*(batch.column(k).to_pylist() for k in keys)):
                if values in touched:
                    counts[values] = counts.get(values, 0) + 1
        return counts

    @abstractmethod
    def _touched_batches(self, database, table, changes: pa.Table, keys: list[str]) -> Iterator[pa.RecordBatch]:
        """The table's current rows, batch by batch, pruned (where the format can) to those that
        may equal a row of `changes` on `keys`."""


def _has_copies(changes: pa.Table) -> bool:
    """Whether a window's changes carry copy steps (a table without a key, transforms.copy_steps)."""
    return WINDOW_COPY_COLUMNS[0] in changes.column_names and changes.column(WINDOW_COPY_COLUMNS[0]).null_count < len(changes)


def with_copies(changes: pa.Table, keys: list[str], counts: dict[tuple, int], unchanged: bool = False) -> pa.Table:
    """A keyless table's window changes (one per identical row, with its copy steps) as the
    merge applies them: a `delete` that removes every copy of the row, then one `insert` per
    copy the window leaves, max(count + add, floor) for the table's `counts` before it. A row
    whose count does not change is left out (kept by `unchanged`: a rebuild removed its copies)."""
    add, floor = (changes.column(n).to_pylist() for n in WINDOW_COPY_COLUMNS)
    given = changes.column("_op").to_pylist()
    indices, ops = [], []
    for i, values in enumerate(zip(*(changes.column(k).to_pylist() for k in keys))):
        if add[i] is None:  # no steps: applied as the change itself
            indices.append(i)
            ops.append(given[i])
            continue
        count = counts.get(values, 0)
        final = max(count + add[i], floor[i])
        if final == count and not unchanged:
            continue
        indices += [i] * (1 + final)
        ops += ["delete"] + ["insert"] * final
    out = changes.take(pa.array(indices, pa.int64()))
    return out.set_column(out.schema.get_field_index("_op"), "_op", pa.array(ops, pa.string()))


def format_class(fmt: str) -> type[LakeFormat]:
    """The LakeFormat subclass of `fmt`, from its module of this package."""
    if fmt not in FORMATS:
        raise LakehouseError(f"unknown lakehouse format {fmt}")
    importlib.import_module(f"{__package__}.{fmt}")
    return LakeFormat._formats[fmt]


def open_format(fmt: str, output: str, template: str, catalog: dict[str, str] | None = None) -> LakeFormat:
    """The tables of format `fmt` at `output`, named by the --target-table `template`."""
    return format_class(fmt)(output, template, catalog)


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


# ------------------------------------------------------------------ a run's tables
class TablePlan:
    """The tables one run writes: those with rows at the cut and those the DDL history knows
    (empty at the cut: still a version), minus those whose current version is already this
    cut of this source (a rerun adds no version: `skip`)."""

    def __init__(self, target: LakeFormat, run: dict, cut: dict, schemas: dict, tables: list[tuple],
                 dropped: list[tuple] = ()):
        # `run`: run_id, source, output, protocol and the emit mode
        self.target, self.run, self.cut, self.emit, self.schemas = target, run, cut, run["emit"], schemas
        self.dropped = set(dropped)  # tables an earlier snapshot wrote that no longer exist at this cut
        self.tables = list(tables) + sorted(self.dropped - set(tables))
        self.last = {key: target.last_commit(*key) for key in tables}
        cut_ts = cut.get("commit_ts")
        base = {k: run.get(k) for k in BASE_KEYS}
        self.skip = {key for key, last in self.last.items()
                     if last is not None and cut_ts is not None and last.get("cut_commit_ts") == str(cut_ts)
                     and last.get("source") == run["source"] and last.get("emit") == self.emit
                     and {k: last.get(k) for k in BASE_KEYS} == base}

    def _schema(self, key, files: list[dict], history: bool) -> pa.Schema | None:
        known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
        if known is not None:
            return table_schema([(c.name, c.mysql_type) for c in known.columns], history)
        if not files:
            return None
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
                     "emit": self.emit, "rows": rows, "source_database": key[0], "source_table": key[1],
                     **{k: self.run[k] for k in BASE_KEYS if self.run.get(k) is not None}}
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
            tables = [pq.read_table(io.BytesIO(storage.read_bytes(f["uri"]))) for f in files]
            want = self.target.current_schema(*key) if action in ("merge", "dropped") else self._schema(key, files, False)
            if want is None:
                continue
            steps = [pa.field(n, pa.int32()) for n in WINDOW_COPY_COLUMNS]
            changes_table = (pa.concat_tables([t.select(["_op", *WINDOW_COPY_COLUMNS, *want.names]).cast(
                pa.schema([pa.field("_op", pa.string()), *steps, *want])) for t in tables])
                if tables else pa.table({"_op": pa.array([], pa.string()), **{f.name: pa.array([], f.type)
                                                                                for f in [*steps, *want]}}))
            props = {"cut_commit_ts": cut_ts, "cut": self.cut.get("description", ""), "run_id": self.run["run_id"],
                     "source": self.run["source"], "protocol": self.run.get("protocol"), "emit": self.emit,
                     "since": since, "source_database": key[0], "source_table": key[1]}
            if action == "rebuild":
                props["mode"] = "rebuild"
                props["window_changes"] = changes_table.num_rows
                if source != key:
                    props["renamed_from"] = ".".join(s or "" for s in source)
                done = self._rebuild(key, (source, source_last), since, want, changes_table, props)
            elif action == "merge":
                props["mode"] = "merge"
                props["window_changes"] = changes_table.num_rows
                keys = self._keys(key, want)
                if _has_copies(changes_table):  # a table without a key: the window's copies on the table's
                    changes_table = with_copies(changes_table, keys,
                                                self.target.copy_counts(key[0], key[1], changes_table, keys))
                done = self.target.merge(key[0], key[1], changes_table.drop_columns(list(WINDOW_COPY_COLUMNS)),
                                         keys, props)
            else:
                if _has_copies(changes_table):  # created in the window: its copies counted from none
                    changes_table = with_copies(changes_table, self._keys(key, want), {})
                rows = changes_table.filter(pc.not_equal(changes_table.column("_op"), "delete")) \
                    if action == "replace" else changes_table.slice(0, 0)
                rows = rows.select(want.names)
                uri = storage.join(self.target.location(*key), "data", f"{self.run['run_id']}-window.parquet")
                sink = io.BytesIO()
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

    def _rebuild(self, key, origin: tuple, since: int, want: pa.Schema, changes: pa.Table, props: dict) -> dict:
        """A window whose DDL changed the table's columns or renamed it: the rows of the table
        at --since (`source`, at its recorded version) are brought to the cut's columns as a
        full replay has them (renamed columns keep their values, columns added in the window
        take their DDL default, dropped ones go, types widened by a cast), the window's last
        change per key replaces or deletes its key, and everything is committed as one
        replacing version whose schema change is the format's own (Iceberg: rename/delete/add/
        update column in the same transaction; Delta: the new schema in the overwrite commit,
        since delta-rs writes no column-mapped tables). The table's files are rewritten (by
        the driver, streamed batch by batch): a DEFAULT for old rows needs rewriting anyway.
        `origin`: the table at --since and its last commit (another table when renamed)."""
        source, source_last = origin
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
        removed: dict[tuple, int] = {}  # a table without a key: its copies of each row the window touches

        files, batches, pending = [], [], 0

        def flush():
            nonlocal batches, pending
            if not batches:
                return
            part = pa.Table.from_batches(batches, want)
            uri = storage.join(self.target.location(*key), "data",
                               f"{self.run['run_id']}-rebuild-{len(files):04d}.parquet")
            sink = io.BytesIO()
            pq.write_table(part, sink, compression="zstd")
            storage.write_bytes(uri, sink.getvalue())
            files.append({"uri": uri, "bytes": len(sink.getvalue()), "rows": part.num_rows})
            batches, pending = [], 0

        for batch in self.target.batches_at(*source, source_last.get("version")):
            n = batch.num_rows
            columns = [_modified(batch.column(batch.schema.get_field_index(match)), field, self.target.name(*key))
                       if match is not None else pa.repeat(fill, n) for field, match, fill in plan]
            converted = pa.RecordBatch.from_arrays(columns, schema=want)
            keep = []
            for values in zip(*(converted.column(k).to_pylist() for k in keys)):
                keep.append(values not in window)
                if not keep[-1]:
                    removed[values] = removed.get(values, 0) + 1
            converted = converted.filter(pa.array(keep, pa.bool_()))
            if converted.num_rows:
                batches.append(converted)
                pending += converted.num_rows
            if pending >= 1_000_000:
                flush()
        if _has_copies(changes):
            changes = with_copies(changes, keys, removed, unchanged=True)
        upserts = changes.filter(pc.not_equal(changes.column("_op"), "delete")).select(want.names).cast(want)
        batches += upserts.to_batches() or ([] if files else [pa.RecordBatch.from_pylist([], schema=want)])
        flush()
        rows = sum(f["rows"] for f in files)
        props["rows"] = rows
        done = self.target.commit(key[0], key[1], want, files, props, renames)
        done["rows"] = rows
        return done

    def _keys(self, key, schema: pa.Schema) -> list[str]:
        """The row identity at the cut: primary key, else a NOT NULL UNIQUE key, else every column
        (also for a table that had no key at some point: `TableSchema.row_identity`)."""
        known = self.schemas.get(((key[0] or "").lower(), (key[1] or "").lower()))
        identity = known.row_identity() if known is not None else []
        by_lower = {n.lower(): n for n in schema.names}
        columns = [by_lower[c.lower()] for c in identity if c.lower() in by_lower]
        return columns if columns and len(columns) == len(identity) else list(schema.names)


def plan_tables(args, run: dict, cut: dict, schemas: dict, table_rows: list[dict]) -> TablePlan:
    import fnmatch

    from cdc_codecs import parse_option_pairs

    target = open_format(args.output_format, run["output"], args.target_table, parse_option_pairs(args.catalog))
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
    return TablePlan(target, {**run, "emit": args.emit}, cut, schemas, sorted(keys.values(), key=lambda k: (k[0] or "", k[1] or "")),
                     dropped)


def _previous_tables(output: str) -> list[dict]:
    """The tables the previous run at this output wrote (its manifest's output.lakehouse)."""
    from .. import manifest as manifest_mod

    try:
        previous = manifest_mod.read_manifest(output)
    except Exception:  # no earlier run (or not readable): nothing to carry over
        return []
    return [t for t in (previous.get("output", {}).get("lakehouse") or {}).values() if "source_table" in t]


class LakeTables(Target):
    """The target: rows per table committed into Delta or Iceberg tables; `committed` the tables'
    versions. A subclass names its format (`format`, a --target-format and a LakeFormat)."""

    records = False
    merges_windows = True
    format: str | None = None  # the --target-format of a subclass

    @classmethod
    def chosen(cls, args) -> bool:
        return args.output_format == cls.format

    def write(self, df, kind, prepare=None, table_rows=None) -> list[dict]:
        from ..snapshot import projector

        plan = self.plan
        tables = plan_tables(plan.args, plan.run, plan.cut, plan.schemas(), table_rows)
        project = projector(plan.schemas(), schema_types=True)
        if kind == WINDOW:
            return self._merge(df, tables, project)
        df = without_tables(df, tables.skip)  # a rerun's tables already at this cut
        fn = write_parquet_fn("", kind == HISTORY, project,
                              uri_fn=data_uri_fn(plan.run["output"], plan.args.target_table, plan.run["run_id"]),
                              type_fn=arrow_type, time_unit="us")
        written = written_rows(per_table(df), fn)
        self.committed = tables.commit(written, kind == HISTORY)
        return written

    def _merge(self, changes, tables, project) -> list[dict]:
        """Tasks write each key's last change in the window to staging files; the driver merges
        them into each table, one version per table. Nothing is left written: the tables hold the rows."""
        base = storage.join(self.plan.staging, "_window")
        fn = write_parquet_fn(base, True, project, type_fn=arrow_type, time_unit="us")
        written = written_rows(per_table(changes), fn)
        try:
            self.committed = tables.commit_window(written, int(self.plan.args.since))
        except LakehouseError as e:
            raise OutputError(str(e)) from e
        finally:
            storage.delete_prefix(base)
        return []
