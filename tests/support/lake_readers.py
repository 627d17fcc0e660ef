"""Second, independent readers of Delta and Iceberg tables, written from the formats' specs
(Delta's PROTOCOL.md transaction log; Iceberg's table spec: metadata JSON -> manifest list ->
manifests -> data files), sharing no code with delta-rs or pyiceberg: JSON, fastavro and
pyarrow only. Local paths and s3:// (through spark_apps.storage, i.e. boto3)."""

from __future__ import annotations

import io
import json
import sqlite3

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from spark_apps import storage


def _read(uri: str) -> bytes:
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return storage.read_bytes(uri)


def _parquet(uri: str) -> pa.Table:
    return pq.read_table(io.BytesIO(_read(uri)))


def _concat(tables: list[pa.Table], schema_names: list[str]) -> list[dict]:
    rows = []
    for table in tables:
        for row in table.to_pylist():
            rows.append({name: row.get(name) for name in schema_names})
    return rows


# ------------------------------------------------------------------ Delta
def delta_commits(location: str) -> list[dict]:
    """[{version, commitInfo, adds, removes, metaData}] from _delta_log/<version>.json."""
    log = storage.join(location, "_delta_log")
    commits = []
    for info in storage.list_objects(log):
        name = storage.relative(info.uri, log)
        if not name.endswith(".json") or "/" in name:
            continue
        entry = {"version": int(name[:-5]), "adds": [], "removes": [], "commitInfo": {}, "metaData": None}
        for line in _read(info.uri).splitlines():
            action = json.loads(line)
            if "add" in action:
                entry["adds"].append(action["add"]["path"])
            elif "remove" in action:
                entry["removes"].append(action["remove"]["path"])
            elif "commitInfo" in action:
                entry["commitInfo"] = action["commitInfo"]
            elif "metaData" in action:
                entry["metaData"] = action["metaData"]
        commits.append(entry)
    return sorted(commits, key=lambda c: c["version"])


def delta_read(location: str, version: int | None = None) -> tuple[list[str], list[dict]]:
    """(column names, rows) of the table at `version` (default: the latest)."""
    live: set[str] = set()
    schema = None
    for commit in delta_commits(location):
        if version is not None and commit["version"] > version:
            break
        live -= set(commit["removes"])
        live |= set(commit["adds"])
        if commit["metaData"] is not None:
            schema = json.loads(commit["metaData"]["schemaString"])
    names = [f["name"] for f in schema["fields"]]
    from urllib.parse import unquote

    return names, _concat([_parquet(storage.join(location, unquote(p))) for p in sorted(live)], names)


def delta_schema(location: str, version: int | None = None) -> list[tuple[str, str]]:
    """[(column, Delta type)] of the table at `version`, from the last metaData action."""
    schema = None
    for commit in delta_commits(location):
        if version is not None and commit["version"] > version:
            break
        if commit["metaData"] is not None:
            schema = json.loads(commit["metaData"]["schemaString"])
    return [(f["name"], json.dumps(f["type"])) for f in schema["fields"]]


# ------------------------------------------------------------------ Iceberg
def iceberg_metadata_location(catalog_db: str, namespace: str, table: str) -> str:
    """The current metadata file, read from the SQL catalog's own table (the JDBC/SQL catalog
    layout: iceberg_tables(catalog_name, table_namespace, table_name, metadata_location))."""
    with sqlite3.connect(catalog_db) as db:
        row = db.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?",
                         (namespace, table)).fetchone()
    return row[0]


def iceberg_metadata_location_postgres(dsn: str, namespace: str, table: str) -> str:
    """The same, from a SQL catalog on PostgreSQL (psycopg2, not SQLAlchemy)."""
    import psycopg2

    with psycopg2.connect(dsn) as db, db.cursor() as cursor:
        cursor.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace = %s AND table_name = %s",
                       (namespace, table))
        return cursor.fetchone()[0]


def iceberg_hadoop_metadata_location(table_dir: str) -> str:
    """A Hadoop-layout table's current metadata file: metadata/version-hint.text holds N, the
    file is metadata/v<N>.metadata.json (Iceberg's HadoopTableOperations)."""
    version = _read(storage.join(table_dir, "metadata", "version-hint.text")).decode().strip()
    return storage.join(table_dir, "metadata", f"v{version}.metadata.json")


def iceberg_metadata(metadata_location: str) -> dict:
    return json.loads(_read(metadata_location))


def iceberg_read(metadata_location: str, snapshot_id: int | None = None) -> tuple[list[str], list[dict]]:
    metadata = iceberg_metadata(metadata_location)
    snapshot_id = snapshot_id if snapshot_id is not None else metadata["current-snapshot-id"]
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id)
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == snapshot.get("schema-id", metadata["current-schema-id"]))
    names = [f["name"] for f in schema["fields"]]
    files = []
    for manifest in fastavro.reader(io.BytesIO(_read(snapshot["manifest-list"]))):
        for entry in fastavro.reader(io.BytesIO(_read(manifest["manifest_path"]))):
            if entry["status"] != 2 and entry["data_file"].get("content", 0) == 0:  # 2 = DELETED
                files.append(entry["data_file"]["file_path"])
    return names, _concat([_parquet(f) for f in sorted(files)], names)


def iceberg_schema(metadata_location: str, snapshot_id: int | None = None) -> list[tuple[str, str]]:
    """[(column, Iceberg type)] of the schema the snapshot was written with."""
    metadata = iceberg_metadata(metadata_location)
    snapshot_id = snapshot_id if snapshot_id is not None else metadata["current-snapshot-id"]
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id)
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == snapshot.get("schema-id", metadata["current-schema-id"]))
    return [(f["name"], json.dumps(f["type"])) for f in schema["fields"]]
