"""A small Confluent-compatible schema registry served over real HTTP on loopback, for tests.

It implements the part of the Confluent Schema Registry REST API that producers and consumers of
the Confluent wire format use, with the registry's semantics:

* `GET /` → `{}` (TiCDC probes the registry this way);
* `POST /subjects/{subject}/versions` with `{"schema": "<avsc>"}` → `{"id": N}`. Schemas are
  parsed (fastavro) and rejected with 422 / error_code 42201 when invalid. Ids are global: an
  identical schema (same parsed JSON) gets the id it already has, under any subject; a subject
  gains a new version only for a schema it does not hold yet;
* `GET /schemas/ids/{id}` → `{"schema": "<avsc>"}`, 404 / error_code 40403 when unknown;
* `GET /subjects`, `GET /subjects/{subject}/versions`,
  `GET /subjects/{subject}/versions/{version|latest}` → `{"subject", "version", "id", "schema"}`.

Not implemented: compatibility checks (every new schema is accepted, as with compatibility
NONE), deletes, schema types other than Avro, references. Optional HTTP basic auth
(`credentials=("user", "password")`) answers 401 without the right Authorization header.
`requests` records `(method, path)` of every request so tests can prove caching.
`fail_next(n, status)` makes the next n requests fail with `status` (to test retries).
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fastavro


class SchemaRegistryServer:
    def __init__(self, credentials: tuple[str, str] | None = None):
        self.credentials = credentials
        self.schemas: list[str] = []  # id - 1 -> schema text
        self.by_canonical: dict[str, int] = {}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids, one per version
        self.requests: list[tuple[str, str]] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> "SchemaRegistryServer":
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                registry._handle(self, "GET")

            def do_POST(self):  # noqa: N802
                registry._handle(self, "POST")

            def log_message(self, format, *args):  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> "SchemaRegistryServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    # -- registry semantics
    def register(self, subject: str, schema: str) -> int:
        fastavro.parse_schema(json.loads(schema))  # raises on an invalid schema
        canonical = json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
        with self._lock:
            schema_id = self.by_canonical.get(canonical)
            if schema_id is None:
                self.schemas.append(schema)
                schema_id = len(self.schemas)
                self.by_canonical[canonical] = schema_id
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    # -- HTTP
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = urllib.parse.urlsplit(handler.path).path
        with self._lock:
            self.requests.append((method, path))
            failure = self._failures.pop(0) if self._failures else None
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        if failure is not None:
            return self._send(handler, failure, {"error_code": failure * 100, "message": "injected failure"})
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if handler.headers.get("Authorization") != expected:
                return self._send(handler, 401, {"error_code": 401, "message": "Unauthorized"})
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        try:
            status, answer = self._route(method, parts, body)
        except Exception as e:  # a bug here must show up as a 500, not hang the client
            status, answer = 500, {"error_code": 50001, "message": f"{type(e).__name__}: {e}"}
        self._send(handler, status, answer)

    def _route(self, method: str, parts: list[str], body: bytes) -> tuple[int, object]:
        if method == "GET" and not parts:
            return 200, {}
        if method == "GET" and len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
            if parts[2].isdigit() and 1 <= int(parts[2]) <= len(self.schemas):
                return 200, {"schema": self.schemas[int(parts[2]) - 1]}
            return 404, {"error_code": 40403, "message": f"Schema {parts[2]} not found"}
        if method == "GET" and parts == ["subjects"]:
            return 200, sorted(self.subjects)
        if len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
            subject = parts[1]
            if method == "POST" and len(parts) == 3:
                try:
                    schema = json.loads(body)["schema"]
                    if not isinstance(schema, str):
                        raise TypeError("schema is not a string")
                except (ValueError, KeyError, TypeError) as e:
                    return 422, {"error_code": 42201, "message": f"Invalid request: {e}"}
                try:
                    return 200, {"id": self.register(subject, schema)}
                except Exception as e:
                    return 422, {"error_code": 42201, "message": f"Invalid schema: {e}"}
            versions = self.subjects.get(subject)
            if versions is None:
                return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
            if method == "GET" and len(parts) == 3:
                return 200, list(range(1, len(versions) + 1))
            if method == "GET" and len(parts) == 4:
                version = len(versions) if parts[3] == "latest" else int(parts[3]) if parts[3].isdigit() else 0
                if not 1 <= version <= len(versions):
                    return 404, {"error_code": 40402, "message": f"Version {parts[3]} not found."}
                schema_id = versions[version - 1]
                return 200, {"subject": subject, "version": version, "id": schema_id,
                             "schema": self.schemas[schema_id - 1]}
        return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, answer: object) -> None:
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
