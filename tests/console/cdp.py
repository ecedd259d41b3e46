"""A minimal Chrome DevTools Protocol client over aiohttp's websocket, for the browser tests.

Starts Debian's `chromium` headless with a fresh profile and no network features of its own,
reads the port it chose from DevToolsActivePort, and drives its one page: navigate, evaluate
JavaScript, wait for a condition, take a screenshot. Log entries (CSP violations among them) are
collected so a test can assert there were none.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
]


class Browser:
    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="chinwag-chromium-")
        self.proc: subprocess.Popen | None = None
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self.log: list[dict] = []

    async def start(self, timeout: float = 60.0) -> "Browser":
        try:
            self.proc = subprocess.Popen(
                [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise RuntimeError(
                f"the console's browser tests need Debian's chromium, and there is none at {CHROMIUM}: "
                "run .ci/install-chromium (apt-get install chromium), as .ci/run does"
            ) from None
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before opening DevTools")
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not open its DevTools port")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json(content_type=None)
        page = next(t for t in targets if t["type"] == "page")
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send("Log.enable")
        await self.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._pending:
                self._pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Log.entryAdded":
                self.log.append(data["params"]["entry"])
            elif data.get("method") == "Runtime.exceptionThrown":
                self.log.append({"level": "error", "text": json.dumps(data["params"]["exceptionDetails"])[:500]})

    async def send(self, method: str, **params: Any) -> dict:
        assert self.ws is not None
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def js(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = await self.js(expression)
            except RuntimeError:  # the page is between documents
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout}s for {expression}")
            await asyncio.sleep(0.1)

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def screenshot_dir(default: Path) -> Path:
    """Where the test run saves its screenshots: $CHINWAG_SCREENSHOTS, else the test's tmp dir."""
    return Path(os.environ.get("CHINWAG_SCREENSHOTS") or default)
