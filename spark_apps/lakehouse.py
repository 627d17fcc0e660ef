"""The lakehouse writer's former home: it is spark_apps.outputs.lake (what Delta and Iceberg
share), .delta and .iceberg now (names kept for callers; `Target(fmt, output, template,
catalog)` is `lake.open_format`)."""

from spark_apps.outputs.delta import delta_storage_options  # noqa: F401
from spark_apps.outputs.iceberg import FILESYSTEM_CATALOG, iceberg_catalog_properties, load_catalog  # noqa: F401
from spark_apps.outputs.lake import (  # noqa: F401
    FORMATS, HISTORY_COLUMNS, META, LakehouseError, TablePlan, _modified, arrow_type, data_uri_fn, plan_tables,
    same_columns, table_key, table_location, table_parts, table_schema, without_tables)
from spark_apps.outputs.lake import open_format as Target  # noqa: F401
