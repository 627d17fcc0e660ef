"""System tools some tests need (headless Chromium, Debian's docker-compose): found on PATH, or
installed with apt-get when the test runs as root on Debian, or the test fails saying why.
And a small Chrome DevTools Protocol client to take a screenshot of an authenticated page."""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from tests.support.system_parts import CHROMIUM, apt_install  # noqa: F401  (CHROMIUM re-exported)


def require_tool(names: tuple[str, ...], package: str) -> str:
    """The path of the first of `names` on PATH, installing `package` if none is; else the
    test fails saying why (a skip would let a missing part pass unnoticed)."""
    for name in names:
        if shutil.which(name):
            return shutil.which(name)
    why = apt_install(package)
    for name in names:
        if shutil.which(name):
            return shutil.which(name)
    pytest.fail(f"{names[0]} is not installed and could not be installed: {why or 'not found after install'}")


class Chromium:
    """Headless Chromium driven through the DevTools protocol (websockets, already in the venv)."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="cdc-replay-chromium-")
        self.process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--hide-scrollbars",
             # this machine's network is closed: no background requests to Google's hosts
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-quic", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            line = self.process.stderr.readline()
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                url = match.group(1)
            elif (not line and self.process.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start its DevTools endpoint")
        from websockets.sync.client import connect

        self._connection = connect(url, max_size=64 * 1024 * 1024, open_timeout=30)
        self.ws = self._connection.__enter__()
        self._ids = itertools.count(1)
        self.events: list[dict] = []

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params) -> dict:
        message_id = next(self._ids)
        message = {"id": message_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.append(json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic()))))

    def screenshot(self, url: str, path: str, *, cookies: dict[str, str], width: int = 1400,
                   settle_s: float = 0.0, min_height: int = 600, evaluate: str | None = None):
        """Open `url` with `cookies` set for its origin, wait for load (and `settle_s`), save a
        full-page PNG to `path`, and return the page's HTML as the browser has it (or, with
        `evaluate`, the value of that JavaScript expression in the page)."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Network.enable", session)
        for name, value in cookies.items():
            self.call("Network.setCookie", session, name=name, value=value, url=url)
        self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=min_height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.enable", session)
        self.events.clear()
        self.call("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired")
        time.sleep(settle_s)
        size = self.call("Page.getLayoutMetrics", session)["cssContentSize"]
        height = max(min_height, int(size["height"]) + 20)
        self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        png = base64.b64decode(self.call("Page.captureScreenshot", session, format="png",
                                         captureBeyondViewport=True)["data"])
        with open(path, "wb") as f:
            f.write(png)
        html = self.call("Runtime.evaluate", session, expression=evaluate or "document.documentElement.outerHTML",
                         returnByValue=True)["result"]["value"]
        self.call("Target.closeTarget", targetId=target)
        return html

    def close(self) -> None:
        try:
            self._connection.__exit__(None, None, None)
        finally:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
