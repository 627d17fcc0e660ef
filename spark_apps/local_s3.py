"""A real S3-compatible server on loopback (moto's server mode) for the demo and tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

DEMO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "cdc-replay-demo",
    "AWS_SECRET_ACCESS_KEY": "cdc-replay-demo-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_server(port: int | None = None, keep: bool = False):
    """Start `moto_server` on 127.0.0.1 and yield its endpoint URL; stop it afterwards."""
    port = port or free_port()
    binary = os.path.join(os.path.dirname(sys.executable), "moto_server")
    process = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on port {port}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        if not keep:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
