"""What the Delta and Iceberg targets share (spark_apps.outputs.delta, spark_apps.outputs.iceberg):
the Spark tasks write Parquet data files straight into each table's folder and the driver
commits them, one commit per table (spark_apps.lakehouse holds the table formats' commits,
merges and schema changes); a --since snapshot's window is merged into the tables instead."""

from __future__ import annotations

from .. import storage
from .base import HISTORY, WINDOW, OutputError, Target, written_rows
from .parquet import per_table, write_parquet_fn


class LakeTables(Target):
    """Rows per table committed into Delta or Iceberg tables; `committed` the tables' versions."""

    records = False
    merges_windows = True
    format: str | None = None  # the --target-format of a subclass

    @classmethod
    def chosen(cls, args) -> bool:
        return args.output_format == cls.format

    def write(self, df, kind, prepare=None, table_rows=None) -> list[dict]:
        from .. import lakehouse
        from ..snapshot import projector

        plan = self.plan
        tables = lakehouse.plan_tables(plan.args, plan.run, plan.cut, plan.schemas(), table_rows)
        project = projector(plan.schemas(), schema_types=True)
        if kind == WINDOW:
            return self._merge(df, tables, project)
        df = lakehouse.without_tables(df, tables.skip)  # a rerun's tables already at this cut
        fn = write_parquet_fn("", kind == HISTORY, project,
                              uri_fn=lakehouse.data_uri_fn(plan.run["output"], plan.args.target_table, plan.run["run_id"]),
                              type_fn=lakehouse.arrow_type, time_unit="us")
        written = written_rows(per_table(df), fn)
        self.committed = tables.commit(written, kind == HISTORY)
        return written

    def _merge(self, changes, tables, project) -> list[dict]:
        """Tasks write each key's last change in the window to staging files; the driver merges
        them into each table, one version per table. Nothing is left written: the tables hold the rows."""
        from .. import lakehouse

        base = storage.join(self.plan.staging, "_window")
        fn = write_parquet_fn(base, True, project, type_fn=lakehouse.arrow_type, time_unit="us")
        written = written_rows(per_table(changes), fn)
        try:
            self.committed = tables.commit_window(written, int(self.plan.args.since))
        except lakehouse.LakehouseError as e:
            raise OutputError(str(e)) from e
        finally:
            storage.delete_prefix(base)
        return []
