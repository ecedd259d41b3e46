"""Plumbing the fake servers share: serving an aiohttp app on 127.0.0.1 (the only address tests
may use), and polling for a condition the fake records (`wait_until`, or `wait_until_blocking` outside a loop).

    self._served = await serve(app)          # any free port
    self._served.url                         # "http://127.0.0.1:<port>"
    await self._served.close()
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable, NamedTuple

from aiohttp import web

SHUTDOWN_SECONDS = 0.5


class Served(NamedTuple):
    runner: web.AppRunner
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        await self.runner.cleanup()


async def serve(app: web.Application, port: int = 0, **runner_options: Any) -> Served:
    """Start `app` on 127.0.0.1 (`port` 0: any free port) and report the port it got. Closing it
    waits SHUTDOWN_SECONDS for requests still being answered, not aiohttp's 60 s: a fake holding a
    reply a test never releases (a model answer hanging past a SIGTERM) kept its test a minute
    longer (tests/runtime/test_delivery_sigterm.py, 66 s to 6 s)."""
    runner = web.AppRunner(app, **{"shutdown_timeout": SHUTDOWN_SECONDS, **runner_options})
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return Served(runner, site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


async def wait_until(
    predicate: Callable[[], Any], timeout: float = 5.0, error: type[Exception] = AssertionError
) -> Any:
    """Poll `predicate` until truthy (returns its value); raise `error` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


def wait_until_blocking(
    predicate: Callable[[], Any], timeout: float = 5.0, error: type[Exception] = AssertionError
) -> Any:
    """`wait_until` for a test that is not async (a condition another thread or process makes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"condition not met within {timeout}s")
        time.sleep(0.01)


def free_port() -> int:
    """A port free on 127.0.0.1 right now (for a server whose URL must be known before it starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
