"""Schema registries for the Avro codecs: a Confluent-compatible REST registry or a directory
holding an exported one.

`open_registry(spec)` takes the codec option `schema-registry=`:

* `http://host:port` / `https://user:pass@host` — a Confluent-compatible registry.
  `schema(id)` is `GET /schemas/ids/{id}`; `register(subject, schema)` is
  `POST /subjects/{subject}/versions` with `{"schema": "<avsc>"}` and returns the registry's id
  (a registry answers an identical schema with the id it already has). Transport failures and
  5xx answers are retried with backoff (TiCDC retries the same way); a 4xx answer is final.
* `file://DIR` — an exported registry: `DIR/ids/<id>.json` holds `{"schema": "<avsc>"}`.
  `register` reuses the id of an identical schema (compared as parsed JSON) or allocates the
  next id, creating the file atomically (written aside, then hard-linked into place, so
  concurrent writers — Spark executors sharing the directory — never overwrite each other), and
  records the subject's versions as `DIR/subjects/<subject>/versions/<n>.json` =
  `{"subject", "version", "id", "schema"}`, the shape of the Confluent REST answer.

HTTP uses the standard library (urllib) so the codecs need no HTTP client dependency. A
registry object only holds its location and an in-memory index; it is cheap to rebuild, which
is how the codecs stay picklable for Spark (they drop and rebuild it).

Errors: an unknown id is `None` from `schema()` (the codec turns it into a DecodeError naming
the record); a registry that cannot be reached or answers nonsense is a `RegistryError`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Protocol

import orjson

from .errors import CodecError, ConfigError

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(CodecError):
    """The schema registry could not be reached, refused a request or answered nonsense."""


class SchemaRegistry(Protocol):
    location: str  # where the registry is, without credentials (for messages)

    def schema(self, schema_id: int) -> str | None:
        """The schema text registered under `schema_id`, None when the id is unknown."""

    def register(self, subject: str, schema: str) -> int:
        """Register `schema` under `subject` (idempotent) and return its id."""


def open_registry(spec: str) -> SchemaRegistry:
    """A registry from the `schema-registry=` option value."""
    text = (spec or "").strip()
    if text.startswith("file://"):
        path = text[len("file://"):]
        if not path:
            raise ConfigError("schema-registry=file:// needs a directory: file:///abs/dir or file://rel/dir")
        return DirectoryRegistry(path)
    scheme = urllib.parse.urlsplit(text).scheme
    if scheme in ("http", "https"):
        return ConfluentRegistry(text)
    raise ConfigError(
        f"schema-registry={spec!r}: expected a Confluent registry URL (http://host:port) "
        "or an exported registry directory (file://DIR)"
    )


def canonical(schema: str) -> str:
    """A schema's identity for id reuse: its JSON re-serialised with sorted keys (orjson: a
    directory registry's first lookup canonicalises every id it holds, a tenth of json's time;
    json for what orjson refuses: NaN, integers beyond 64 bits). Only compared with itself."""
    try:
        return orjson.dumps(orjson.loads(schema), option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ConfluentRegistry:
    """A Confluent-compatible schema registry over HTTP (standard library only)."""

    def __init__(self, url: str, *, timeout: float = 10.0, attempts: int = 5, backoff: float = 0.2):
        parts = urllib.parse.urlsplit(url.strip())
        self._auth = None
        netloc = parts.netloc
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self._auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            netloc = netloc.rpartition("@")[2]
        self.base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.location = self.base
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff

    def schema(self, schema_id: int) -> str | None:
        status, body = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        if status == 404:
            return None
        if status != 200:
            raise RegistryError(f"registry {self.location}: GET schema id {schema_id} answered HTTP {status}: {_short(body)}")
        schema = body.get("schema") if isinstance(body, dict) else None
        if not isinstance(schema, str):
            raise RegistryError(f"registry {self.location}: schema id {schema_id}: answer has no schema string: {_short(body)}")
        return schema

    def register(self, subject: str, schema: str) -> int:
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        status, body = self._request("POST", path, {"schema": schema})
        if status != 200:
            what = {409: "incompatible with the subject's earlier versions", 422: "rejected as invalid"}.get(status, "refused")
            raise RegistryError(
                f"registry {self.location}: registering under subject {subject!r} {what} (HTTP {status}): {_short(body)}"
            )
        schema_id = body.get("id") if isinstance(body, dict) else None
        if isinstance(schema_id, bool) or not isinstance(schema_id, int) or schema_id <= 0:
            raise RegistryError(f"registry {self.location}: subject {subject!r}: illegal schema id in {_short(body)}")
        return schema_id

    def _request(self, method: str, path: str, payload: dict | None = None) -> tuple[int, object]:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Accept": _ACCEPT}
        if data is not None:
            headers["Content-Type"] = _CONTENT_TYPE
        if self._auth:
            headers["Authorization"] = self._auth
        last: Exception | None = None
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return response.status, _json_or_text(response.read())
            except urllib.error.HTTPError as e:
                body = _json_or_text(e.read())
                if e.code < 500:
                    return e.code, body
                last = RegistryError(f"HTTP {e.code}: {_short(body)}")
            except (urllib.error.URLError, OSError) as e:
                last = e
        raise RegistryError(
            f"registry {self.location}: {method} {path} failed after {self.attempts} attempts: {last}"
        ) from last


class DirectoryRegistry:
    """An exported registry in a directory: `ids/<id>.json` = `{"schema": "<avsc>"}`."""

    def __init__(self, path: str | os.PathLike):
        self.root = Path(path)
        self.location = f"file://{self.root}"
        self._index: dict[str, int] = {}  # canonical schema -> id
        self._known: set[int] = set()  # ids already read into the index
        self._max_id = 0
        # per subject: the highest version read and the ids its versions hold. Versions are
        # never removed, so a subject's files are read once and then only the ones added after
        # (reading them all for every new schema made a long Avro stream quadratic)
        self._subjects: dict[str, tuple[int, set[int]]] = {}

    @property
    def _ids(self) -> Path:
        return self.root / "ids"

    def schema(self, schema_id: int) -> str | None:
        name = f"{int(schema_id)}.json"
        try:  # a plain path, not pathlib: an Avro decode task reads thousands of ids
            with open(os.path.join(self.root, "ids", name), "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RegistryError(f"registry {self.location}: cannot read {name}: {e}") from e
        try:  # orjson: a third of json's time; json for what it refuses (not UTF-8, NaN, ...)
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            try:
                doc = json.loads(raw)
            except ValueError as e:
                raise RegistryError(f"registry {self.location}: {name} is not JSON: {e}") from e
        schema = doc.get("schema") if isinstance(doc, dict) else None
        if not isinstance(schema, str):
            raise RegistryError(f'registry {self.location}: {name} is not {{"schema": "<avsc>"}}')
        return schema

    def register(self, subject: str, schema: str) -> int:
        try:
            key = canonical(schema)
        except ValueError as e:
            raise RegistryError(f"registry {self.location}: schema for {subject!r} is not JSON: {e}") from e
        schema_id = self._lookup(key)
        if schema_id is None:
            schema_id = self._allocate(key, schema)
        self._add_version(subject, schema_id, schema)
        return schema_id

    # -- ids
    def _scan(self) -> None:
        for schema_id in _numbered(self._ids):
            self._max_id = max(self._max_id, schema_id)
            if schema_id in self._known:
                continue
            self._read_id(schema_id)

    def _read_id(self, schema_id: int) -> None:
        self._known.add(schema_id)
        text = self.schema(schema_id)
        if text is not None:
            try:
                self._index.setdefault(canonical(text), schema_id)
            except ValueError:
                pass  # a foreign, broken file: never equal to a schema we write

    def _scan_newer(self) -> None:
        """The ids after the highest one read: writers allocate them one after the other
        (`_allocate`), so after the first `_scan` only these can be new."""
        while (self._ids / f"{self._max_id + 1}.json").exists():
            self._max_id += 1
            self._read_id(self._max_id)

    def _lookup(self, key: str) -> int | None:
        if key not in self._index and not self._known:  # other writers may have added it
            self._scan()
        elif key not in self._index:
            self._scan_newer()
        return self._index.get(key)

    def _allocate(self, key: str, schema: str) -> int:
        self._ids.mkdir(parents=True, exist_ok=True)
        content = json.dumps({"schema": schema}, ensure_ascii=False).encode()
        while True:
            candidate = self._max_id + 1
            if _create_exclusive(self._ids / f"{candidate}.json", content):
                self._index[key] = candidate
                self._known.add(candidate)
                self._max_id = candidate
                return candidate
            self._scan_newer()  # someone took that id: maybe with this very schema
            found = self._index.get(key)
            if found is not None:
                return found
            self._max_id = max(self._max_id, candidate)

    # -- subjects
    def _add_version(self, subject: str, schema_id: int, schema: str) -> None:
        versions = self.root / "subjects" / _subject_dir(subject) / "versions"
        latest, ids = self._subjects.get(subject) or self._read_versions(versions)
        while schema_id not in ids:
            doc = {"subject": subject, "version": latest + 1, "id": schema_id, "schema": schema}
            if _create_exclusive(versions / f"{latest + 1}.json", json.dumps(doc, ensure_ascii=False).encode()):
                latest += 1
                ids.add(schema_id)
            else:  # another writer took that version: read what it and any others added
                latest = _read_newer(versions, latest, ids)
        self._subjects[subject] = (latest, ids)

    @staticmethod
    def _read_versions(versions: Path) -> tuple[int, set[int]]:
        """(highest version, the ids of every version) of a subject's directory, made if absent."""
        versions.mkdir(parents=True, exist_ok=True)
        latest, ids = 0, set()
        for version in _numbered(versions):
            latest = max(latest, version)
            _note_id(versions / f"{version}.json", ids)
        return latest, ids


def _numbered(folder: Path) -> list[int]:
    """The numbers of a folder's `<n>.json` files (none when it is absent). os.scandir, not
    Path.glob: a registry's first lookup lists every id and every version of a subject."""
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [int(name[:-5]) for name in names if name.endswith(".json") and name[:-5].isdigit()]


def _note_id(file: Path, ids: set[int]) -> None:
    """Add the id a version file names to `ids` (a file that is not one is skipped)."""
    try:
        raw = file.read_bytes()
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = json.loads(raw)
        ids.add(doc.get("id"))
    except (ValueError, AttributeError, OSError):
        pass


def _read_newer(versions: Path, latest: int, ids: set[int]) -> int:
    """The versions after `latest` (written one after the other by `_create_exclusive`) into
    `ids`; the new highest version."""
    while (versions / f"{latest + 1}.json").exists():
        latest += 1
        _note_id(versions / f"{latest}.json", ids)
    return latest


_SAFE_SUBJECT = re.compile(r"^[A-Za-z0-9._-]+$")


def _subject_dir(subject: str) -> str:
    """Kafka topic names (and so TiCDC subjects) are [A-Za-z0-9._-]; anything else is quoted."""
    if _SAFE_SUBJECT.match(subject) and subject not in (".", ".."):
        return subject
    return urllib.parse.quote(subject, safe="")


def _create_exclusive(target: Path, content: bytes) -> bool:
    """Create `target` with `content` unless it exists; never leaves a partial file."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


def _json_or_text(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _short(body: object, limit: int = 300) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return text if len(text) <= limit else text[:limit] + "..."
