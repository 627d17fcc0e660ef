"""The Parquet writer's former home: it is spark_apps.outputs.parquet now (names kept for callers)."""

from spark_apps.outputs.parquet import (  # noqa: F401
    HISTORY_COLUMNS, UNSTATED_DECIMAL, arrow_type, typed_column, write_parquet_fn)
