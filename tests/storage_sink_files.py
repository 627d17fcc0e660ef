"""TiCDC cloud storage sink table schema files, built the way the sink marshals them:
tiflow/ticdc pkg/sink/cloudstorage/table_definition.go (TableDefinition.MarshalWithQuery:
json.MarshalIndent with a 4-space indent; field order Table, Schema, Version, TableVersion,
Query, Type, TableColumns, TableColumnsTotal; TableCol fields ColumnId, ColumnName, ColumnType,
ColumnDefault, ColumnPrecision, ColumnScale, ColumnNullable, ColumnIsPk, all but ColumnName and
ColumnType omitted when empty), and its file name meta/schema_{TableVersion}_{checksum:010d}.json."""

from __future__ import annotations

import json
import zlib


def table_col(name: str, column_type: str, *, default=None, precision: int | None = None,
              scale: int | None = None, not_null: bool = False, pk: bool = False,
              column_id: int | None = None) -> dict:
    """One TableCol as TableCol.FromTiColumnInfo fills it: ColumnType is TiDB's type name upper
    case plus " UNSIGNED" when the unsigned flag is set (every BIT and YEAR column has it),
    numbers as strings, ColumnNullable "false" for NOT NULL, ColumnIsPk "true"."""
    col = {}
    if column_id is not None:
        col["ColumnId"] = str(column_id)
    col["ColumnName"] = name
    col["ColumnType"] = column_type
    if default is not None:
        col["ColumnDefault"] = default
    if precision is not None:
        col["ColumnPrecision"] = str(precision)
    if scale is not None:
        col["ColumnScale"] = str(scale)
    if not_null or pk:
        col["ColumnNullable"] = "false"
    if pk:
        col["ColumnIsPk"] = "true"
    return col


def table_definition(schema: str, table: str, table_version: int, columns: list[dict], query: str = "",
                     action: int = 0) -> bytes:
    """A table schema file's bytes (Query "" and Type 0 when the sink wrote it for a table that
    existed before the changefeed: TableDefinition.FromTableInfo, no DDL event)."""
    doc = {"Table": table, "Schema": schema, "Version": 1, "TableVersion": table_version, "Query": query,
           "Type": action, "TableColumns": columns, "TableColumnsTotal": len(columns)}
    return json.dumps(doc, indent=4).encode()


def schema_path(schema: str, table: str, table_version: int, data: bytes) -> str:
    """Where the sink writes it: {schema}/{table}/meta/schema_{version}_{checksum}.json (the
    checksum is a 32-bit hash of the file without Query; any 10-digit number reads the same)."""
    return f"{schema}/{table}/meta/schema_{table_version}_{zlib.crc32(data):010d}.json"
