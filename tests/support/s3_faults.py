"""A fault-injecting HTTP proxy on loopback in front of the moto S3 server.

For a seeded fraction of requests it answers 503 SlowDown with S3's XML error body (the
request never reaches the server, as when S3 throttles), and for a seeded fraction of
object GETs it forwards the request, sends the response head and part of the body, then
resets the connection (RST, as a dropped connection looks to the client). Everything else
is relayed unchanged. `counts` says what it did, so a test can prove faults happened.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import struct
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message><RequestId>FAULT</RequestId>"
             b"<HostId>fault-proxy</HostId></Error>")
ACCESS_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
                 b"<Message>Access Denied</Message><RequestId>FAULT</RequestId>"
                 b"<HostId>fault-proxy</HostId></Error>")
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class FaultProxy:
    def __init__(self, upstream: str, slow_down: float, reset: float, seed: int, min_body: int = 1024,
                 deny_writes: str | None = None):
        parsed = urlparse(upstream)
        # requests writing below this path (`/bucket/prefix`: PUT, POST, DELETE) are answered
        # 403 AccessDenied with S3's XML body, as a bucket policy denying writes answers them
        self.deny_writes = deny_writes
        self.upstream = (parsed.hostname, parsed.port)
        self.slow_down, self.reset, self.min_body = slow_down, reset, min_body
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.reset_paths: list[str] = []  # the GETs whose bodies were cut
        self.enabled = True
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                else:
                    body = self.rfile.read(length) if length else b""
                with proxy.lock:
                    proxy.counts["requests"] += 1
                    roll = proxy.random.random() if proxy.enabled else 1.0
                    cut_roll = proxy.random.random() if proxy.enabled else 1.0
                if (proxy.deny_writes and self.command in ("PUT", "POST", "DELETE")
                        and self.path.startswith(proxy.deny_writes)):
                    with proxy.lock:
                        proxy.counts["denied"] += 1
                    self.send_response(403, "Forbidden")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(ACCESS_DENIED)))
                    self.end_headers()
                    self.wfile.write(ACCESS_DENIED)
                    return
                if roll < proxy.slow_down:
                    with proxy.lock:
                        proxy.counts["slow_down"] += 1
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST")
                                     else None, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                finally:
                    upstream.close()
                cut = (self.command == "GET" and response.status in (200, 206) and len(data) >= proxy.min_body
                       and cut_roll < proxy.reset)
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP and (key.lower() != "content-length" or self.command == "HEAD"):
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cut:
                    with proxy.lock:
                        proxy.counts["reset"] += 1
                        proxy.reset_paths.append(self.path)
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    # SO_LINGER 0: close() sends RST, the client sees "connection reset by peer"
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _read_chunked(self) -> bytes:
                out = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def fault_proxy(upstream: str, slow_down: float = 0.15, reset: float = 0.3, seed: int = 14, min_body: int = 1024,
                deny_writes: str | None = None):
    proxy = FaultProxy(upstream, slow_down, reset, seed, min_body, deny_writes).start()
    try:
        yield proxy
    finally:
        proxy.stop()
