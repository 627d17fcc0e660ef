"""An Iceberg catalog that is just the file system: Iceberg's Hadoop table layout, written by
pyiceberg (`--catalog type=filesystem`, docs/lakehouse.md).

Why hand-written: pyiceberg 0.12 reads such tables (StaticTable finds the current metadata
through `metadata/version-hint.text`) but has no catalog that writes them (its catalogs are
REST, SQL, Hive, Glue, DynamoDB, BigQuery and in-memory; apache/iceberg-python#3897 asks for one).
Spark, Trino, DuckDB and Java's HadoopCatalog read the layout without any metastore:

    <warehouse>/<namespace...>/<table>/metadata/v<N>.metadata.json
    <warehouse>/<namespace...>/<table>/metadata/version-hint.text      (holds N)

A commit writes v<N+1>.metadata.json only if no such file exists yet (a hard link of a fully
written temporary file: atomic and exclusive on a local or POSIX file system), then rewrites the
version hint; a writer that loses the race fails with CommitFailedException, as with Java's
HadoopTableOperations. Readers take the highest v<N> when the hint lags. Object stores have no
exclusive create here, so warehouses are local paths (or mounted file systems) only.
Namespaces are folders; namespace properties are not kept. Each part of an identifier is
one folder as spark_apps.paths.segment makes it (ordinary names unchanged).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from pyiceberg.catalog import Catalog, MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table import CommitTableResponse, Table

from .paths import segment, unsegment

HINT = "version-hint.text"
_VERSION = re.compile(r"^v(\d+)\.metadata\.json$")


class FilesystemCatalog(MetastoreCatalog):
    def __init__(self, name: str, **properties: str):
        super().__init__(name, **properties)
        warehouse = properties.get("warehouse") or ""
        if warehouse.startswith("file://"):
            warehouse = warehouse[len("file://"):]
        if not warehouse or "://" in warehouse:
            raise ValueError(f"the filesystem catalog needs a local warehouse path (got {warehouse!r})")
        self.warehouse = os.path.abspath(warehouse)

    # ------------------------------------------------------------- layout
    def _table_dir(self, identifier) -> str:
        parts = Catalog.identifier_to_tuple(identifier)
        if len(parts) < 2:
            raise NoSuchTableError(f"{identifier}: a table identifier is namespace.table")
        return os.path.join(self.warehouse, *map(segment, parts))

    def _namespace_dir(self, namespace) -> str:
        return os.path.join(self.warehouse, *map(segment, Catalog.identifier_to_tuple(namespace)))

    @staticmethod
    def current_version(table_dir: str) -> int | None:
        """The highest committed version (the hint, or a later v<N> file a crashed writer left)."""
        metadata = os.path.join(table_dir, "metadata")
        if not os.path.isdir(metadata):
            return None
        versions = [int(m.group(1)) for m in map(_VERSION.match, os.listdir(metadata)) if m]
        return max(versions) if versions else None

    @staticmethod
    def _is_table(path: str) -> bool:
        return FilesystemCatalog.current_version(path) is not None

    # ------------------------------------------------------------- tables
    def load_table(self, identifier) -> Table:
        table_dir = self._table_dir(identifier)
        version = self.current_version(table_dir)
        if version is None:
            raise NoSuchTableError(f"no Iceberg table at {table_dir}")
        location = os.path.join(table_dir, "metadata", f"v{version}.metadata.json")
        io = self._load_file_io(location=location)
        metadata = FromInputFile.table_metadata(io.new_input(location))
        return Table(identifier=Catalog.identifier_to_tuple(identifier), metadata=metadata,
                     metadata_location=location, io=self._load_file_io(metadata.properties, location), catalog=self)

    def create_table(self, identifier, schema, location=None, partition_spec=None, sort_order=None,
                     properties=None) -> Table:
        if self.table_exists(identifier):
            raise TableAlreadyExistsError(f"table {identifier} exists")
        kwargs = {k: v for k, v in (("partition_spec", partition_spec), ("sort_order", sort_order),
                                    ("properties", properties)) if v is not None}
        self.create_table_transaction(identifier, schema, location or self._table_dir(identifier), **kwargs
                                      ).commit_transaction()
        return self.load_table(identifier)

    def commit_table(self, table, requirements, updates) -> CommitTableResponse:
        identifier = table.name()
        table_dir = self._table_dir(identifier)
        try:
            current = self.load_table(identifier)
        except NoSuchTableError:
            current = None
        staged = self._update_and_stage_table(current, identifier, requirements, updates)
        if current is not None and staged.metadata == current.metadata:
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)
        if os.path.realpath(staged.metadata.location.removeprefix("file://")) != os.path.realpath(table_dir):
            raise CommitFailedException(f"table {'.'.join(identifier)} must live at {table_dir} in a filesystem "
                                        f"catalog, not {staged.metadata.location}")
        version = (self.current_version(table_dir) or 0) + 1 if current is not None else 1
        metadata_dir = os.path.join(table_dir, "metadata")
        os.makedirs(metadata_dir, exist_ok=True)
        final = os.path.join(metadata_dir, f"v{version}.metadata.json")
        fd, temp = tempfile.mkstemp(prefix=".v", suffix=".tmp", dir=metadata_dir)
        os.close(fd)
        try:
            ToOutputFile.table_metadata(staged.metadata, staged.io.new_output(temp), overwrite=True)
            try:
                os.link(temp, final)  # exclusive: fails when another writer made this version first
            except FileExistsError:
                raise CommitFailedException(f"{final} exists: {'.'.join(identifier)} was committed by another "
                                            "writer meanwhile") from None
        finally:
            os.unlink(temp)
        fd, hint = tempfile.mkstemp(prefix=".hint", dir=metadata_dir)
        with os.fdopen(fd, "w") as f:
            f.write(str(version))
        os.replace(hint, os.path.join(metadata_dir, HINT))
        return CommitTableResponse(metadata=staged.metadata, metadata_location=final)

    def drop_table(self, identifier) -> None:
        metadata = os.path.join(self._table_dir(identifier), "metadata")
        if not self._is_table(self._table_dir(identifier)):
            raise NoSuchTableError(f"no Iceberg table {identifier}")
        shutil.rmtree(metadata)  # the data files stay (purge_table removes them)

    def rename_table(self, from_identifier, to_identifier) -> Table:
        raise NotImplementedError("a filesystem catalog's table location is its name: rename by copying")

    def register_table(self, identifier, metadata_location: str) -> Table:
        raise NotImplementedError("the filesystem catalog registers nothing: its tables are its folders")

    def list_tables(self, namespace) -> list:
        base = self._namespace_dir(namespace)
        if not os.path.isdir(base):
            raise NoSuchNamespaceError(f"no namespace {namespace}")
        prefix = Catalog.identifier_to_tuple(namespace)
        return [(*prefix, _name(name)) for name in sorted(os.listdir(base)) if self._is_table(os.path.join(base, name))]

    # ------------------------------------------------------------- namespaces
    def create_namespace(self, namespace, properties=None) -> None:
        path = self._namespace_dir(namespace)
        if os.path.isdir(path):
            raise NamespaceAlreadyExistsError(f"namespace {namespace} exists")
        os.makedirs(path)

    def drop_namespace(self, namespace) -> None:
        path = self._namespace_dir(namespace)
        if not os.path.isdir(path):
            raise NoSuchNamespaceError(f"no namespace {namespace}")
        if os.listdir(path):
            raise NamespaceNotEmptyError(f"namespace {namespace} is not empty")
        os.rmdir(path)

    def list_namespaces(self, namespace=()) -> list:
        base = self._namespace_dir(namespace) if namespace else self.warehouse
        prefix = Catalog.identifier_to_tuple(namespace) if namespace else ()
        if not os.path.isdir(base):
            return []
        return [(*prefix, _name(name)) for name in sorted(os.listdir(base))
                if os.path.isdir(os.path.join(base, name)) and not name.startswith(("_", "."))
                and not self._is_table(os.path.join(base, name))]

    def load_namespace_properties(self, namespace) -> dict:
        if not os.path.isdir(self._namespace_dir(namespace)):
            raise NoSuchNamespaceError(f"no namespace {namespace}")
        return {"location": self._namespace_dir(namespace)}

    def update_namespace_properties(self, namespace, removals=None, updates=None) -> PropertiesUpdateSummary:
        raise NotImplementedError("the filesystem catalog keeps no namespace properties")

    # ------------------------------------------------------------- views: none
    def list_views(self, namespace) -> list:
        return []

    def view_exists(self, identifier) -> bool:
        return False

    def drop_view(self, identifier) -> None:
        raise NotImplementedError("the filesystem catalog has no views")

    def load_view(self, identifier):
        raise NotImplementedError("the filesystem catalog has no views")

    def register_view(self, identifier, metadata_location: str):
        raise NotImplementedError("the filesystem catalog has no views")


def _name(folder: str) -> str:
    """The identifier part a folder holds (a folder not made by `segment`: its own name)."""
    try:
        return unsegment(folder) or folder
    except ValueError:
        return folder
