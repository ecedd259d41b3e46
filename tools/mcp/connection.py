"""One MCP server, kept connected: `ServerConnection`.

A supervisor task owns the connection (the SDK's transports and `ClientSession` are anyio context
managers that must be entered and left by the same task): it starts the stdio process or opens the
Streamable HTTP session, initializes, lists the tools, and then waits until the connection is lost.
Lost means the transport's read stream ended (a dead stdio process, a closed HTTP session: watched
through the SDK's `ReadStream` protocol, so it is seen at once, not at the next call) or a call
failed on the transport. Then it
retries: the first retry after `first_retry` (1 s), doubling up to `max_retry` (60 s), back to 1 s
once a connection has stayed up for `max_retry`. `notifications/tools/list_changed` lists the tools
again.

Calls never hang: a call waits for the server only while it is starting (at most 5 s, the wait a
turn gives a server), a down server answers `Unavailable` at once, and each call runs under
`asyncio.timeout(timeout_seconds)` around the whole exchange (also a write stuck on a stopped
process's full pipe), which cancels the request on the server too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Callable

import anyio
import mcp_types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tools.mcp.settings import McpServerSettings

log = logging.getLogger(__name__)

STARTING, READY, DOWN, CLOSED = "starting", "ready", "down", "closed"
READY_WAIT_SECONDS = 5.0  # how long a call or a turn waits for a server that is starting
CONNECT_TIMEOUT_SECONDS = 30.0  # start + initialize + list: past this the attempt counts as failed


class Unavailable(Exception):
    """The server is not connected; the call was not sent."""


class CallTimeout(Exception):
    """No answer within timeout_seconds; the server may or may not have run the tool."""


class ConnectionLost(Exception):
    """The connection ended while the call was in flight; the tool may or may not have run."""


OnTools = Callable[[str, list[mcp_types.Tool]], None]


class ServerConnection:
    def __init__(
        self, settings: McpServerSettings, on_tools: OnTools, *, first_retry: float = 1.0, max_retry: float = 60.0
    ) -> None:
        self.settings = settings
        self.state = STARTING
        self.error: str | None = None
        self.restarts = 0
        self.tools: list[mcp_types.Tool] = []
        self._on_tools = on_tools
        self._first_retry, self._max_retry = first_retry, max_retry
        self._session: ClientSession | None = None
        self._lost = asyncio.Event()
        self._ready = asyncio.Event()
        self._settled = asyncio.Event()  # the first attempt ended, either way
        self._task: asyncio.Task[None] | None = None
        self._relist: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.settings.name

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")

    async def wait_settled(self, timeout: float) -> None:
        """Until the first connection attempt ended (ready or down), at most `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._settled.wait()

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        if self.state == STARTING:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(READY_WAIT_SECONDS):
                    await self._ready.wait()
        session, lost = self._session, self._lost  # a late failure must not end the next connection
        if self.state != READY or session is None:
            raise Unavailable(self.error or f"it is {self.state}")
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                return await session.call_tool(tool, arguments)
        except TimeoutError:
            raise CallTimeout(f"no answer within {self.settings.timeout_seconds:g} s") from None
        except MCPError as exc:
            if exc.code != mcp_types.CONNECTION_CLOSED:
                raise
            lost.set()
            raise ConnectionLost(exc.message) from None
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            lost.set()
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        for task in (self._relist, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._set(CLOSED, None)
        self._settled.set()

    def _set(self, state: str, error: str | None) -> None:
        self.state, self.error = state, error
        if state == READY:
            self._ready.set()
        else:
            self._ready.clear()
            self._session = None

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._first_retry
        while True:
            up_since: float | None = None
            try:
                async with self._connected() as tools:
                    up_since = loop.time()
                    self.tools = tools
                    self._on_tools(self.name, tools)
                    self._set(READY, None)
                    self._settled.set()
                    log.info("MCP server %s ready: %d tool(s)", self.name, len(tools))
                    await self._lost.wait()
                reason = "the connection was lost"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure to start or stay up is retried; the log says which
                reason = _describe(exc)
            if up_since is not None and loop.time() - up_since >= self._max_retry:
                delay = self._first_retry
            self._set(DOWN, reason)
            self._settled.set()
            log.warning("MCP server %s is down (%s); retrying in %g s", self.name, reason, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_retry)
            self.restarts += 1
            self._set(STARTING, reason)

    @contextlib.asynccontextmanager
    async def _connected(self) -> Any:
        """A connected, initialized session, its tools listed; yields the tools."""
        self._lost = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                read, write = await stack.enter_async_context(self._transport(stack))
                watched = _EndWatched(read, self._lost.set)
                session = await stack.enter_async_context(
                    ClientSession(watched, write, message_handler=self._on_message)
                )
                await session.initialize()
                tools = await _list_tools(session)
            self._session = session
            yield tools

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        s = self.settings
        if s.command:
            params = StdioServerParameters(command=s.command, args=list(s.args), env=dict(s.env) or None, cwd=s.cwd)
            return stdio_client(params)
        assert s.url is not None
        client = create_mcp_http_client(headers=dict(s.headers) or None)
        stack.push_async_callback(client.aclose)
        return streamable_http_client(s.url, http_client=client)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            if self._relist is None or self._relist.done():
                self._relist = asyncio.create_task(self._list_again())
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport error: %s", self.name, _describe(message))

    async def _list_again(self) -> None:
        session = self._session
        if session is None:
            return
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                tools = await _list_tools(session)
        except Exception as exc:  # the old list stays; the next change or restart lists again
            log.warning("MCP server %s: listing tools again failed: %s", self.name, _describe(exc))
            return
        self.tools = tools
        self._on_tools(self.name, tools)
        log.info("MCP server %s: tool list changed: %d tool(s)", self.name, len(tools))


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class _EndWatched:
    """The transport's read stream (the SDK's `ReadStream` protocol), telling `on_end` when it ends:
    a dead stdio process or a closed HTTP session is seen at once, without a relay task's extra hop."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream, self._on_end = stream, on_end

    def __getattr__(self, name: str) -> Any:  # `last_context` and anything else the SDK reads
        return getattr(self._stream, name)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _EndWatched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s while starting"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
