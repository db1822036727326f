"""Headless Chromium driven over the DevTools protocol, for tests that look at a page as a
person would (docs/report.md).

websocket-client carries the protocol's JSON messages; nothing else sits between the test
and the browser (a driver library that downloads its own browser cannot work here, and
the protocol's few calls we need are plain JSON). The browser is the system's
(`chromium`, Debian's package; .ci/run installs it), started with a fresh profile, no
network (every request is also recorded, so a test can assert that none left the page).
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def why_unavailable() -> str | None:
    """None when a headless Chromium and websocket-client can be used here, else why not."""
    if chromium_path() is None:
        return "no chromium on PATH (apt-get install chromium; .ci/run installs it)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        return "websocket-client is not installed (the dev extra)"
    return None


class Browser:
    """One headless Chromium and a connection to its one page."""

    def __init__(self, width: int = 1280, height: int = 900, timeout_s: float = 60.0) -> None:
        import websocket

        self.profile = Path(tempfile.mkdtemp(prefix="evalrig-chromium-"))
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [chromium_path() or "chromium", *FLAGS, f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)  # polling a file the browser writes once, not synchronising with a test
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout_s) as r:
            targets = json.load(r)
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout_s,
                                              suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        # No network: a request that tries to leave fails, and is recorded all the same.
        self.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1,
                  uploadThroughput=-1)

    def _note(self, msg: dict[str, Any]) -> None:
        self.events.append(msg)
        if msg.get("method") == "Network.requestWillBeSent":
            self.requests.append(msg["params"]["request"]["url"])
        if msg.get("method") == "Page.javascriptDialogOpening":
            self.dialogs.append(msg["params"].get("message", ""))
            self.send("Page.handleJavaScriptDialog", accept=False)

    def send(self, method: str, **params: Any) -> int:
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        return n

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = self.send(method, **params)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._note(msg)

    def wait_for(self, method: str) -> dict[str, Any]:
        for msg in self.events:
            if msg.get("method") == method:
                return msg
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self._note(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(method)

    def open(self, path: Path) -> None:
        self.events.clear()
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def emulate(self, width: int, height: int, mobile: bool = False) -> None:
        """The page laid out at width x height CSS pixels, as a phone shows it when `mobile`."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=mobile)

    def eval(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, full_page: bool = True) -> bytes:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            m = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": m["width"], "height": min(m["height"], 6000), "scale": 1}
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])

    def console_errors(self) -> list[str]:
        out = []
        for m in self.events:
            if m.get("method") == "Log.entryAdded" and m["params"]["entry"].get("level") == "error":
                out.append(m["params"]["entry"].get("text", ""))
            if m.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(m["params"]["exceptionDetails"])[:300])
        return out

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def not_blank(png: bytes) -> tuple[float, float]:
    """(standard deviation of the grey levels, share of pixels that are not white) of a PNG."""
    import io

    from matplotlib import image

    img = image.imread(io.BytesIO(png), format="png")
    grey = img[..., :3].mean(axis=2)
    return float(grey.std()), float((grey < 0.95).mean())


__all__ = ["Browser", "chromium_path", "not_blank", "why_unavailable"]
