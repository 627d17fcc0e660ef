"""What a replay wrote, in the forms two runs' outputs are compared in (local or S3 URIs)."""

from __future__ import annotations

import json

from spark_apps import storage

# the manifest keys that differ between two runs of the same replay by design
VOLATILE = ("run_id", "started_at", "finished_at", "duration_s")


def objects(output: str) -> dict[str, bytes]:
    """{path below output: bytes} of every object the run wrote."""
    return {info.uri[len(output) + 1:]: storage.read_bytes(info.uri) for info in storage.list_objects(output)}


def data(output: str) -> dict[str, bytes]:
    """`objects` but the manifest and other `_`-named objects."""
    return {path: data for path, data in objects(output).items() if not path.split("/")[-1].startswith("_")}


def manifest(output: str) -> dict:
    """The run's manifest with its output location as `<output>` and without `VOLATILE` keys."""
    text = storage.read_bytes(f"{output}/_manifest.json").decode()
    found = json.loads(text.replace(output, "<output>"))
    return {key: value for key, value in found.items() if key not in VOLATILE}


def lake_tables(fmt: str, output: str, manifest: dict) -> dict[str, tuple[list[str], list[dict]]]:
    """{table: (columns, rows)} of every Delta/Iceberg table a run's manifest names, read back
    by deltalake / pyiceberg (tests/support/lake_readers.py reads them without either)."""
    from deltalake import DeltaTable

    from spark_apps.outputs.delta import delta_storage_options
    from spark_apps.outputs.iceberg import load_catalog

    found = {}
    for name, entry in sorted(manifest["output"]["lakehouse"].items()):
        if fmt == "delta":
            table = DeltaTable(entry["location"], storage_options=delta_storage_options()).to_pyarrow_table()
        else:
            table = load_catalog(output, {}).load_table(tuple(entry["table"].split("."))).scan().to_arrow()
        found[name] = (table.schema.names, table.to_pylist())
    return found
