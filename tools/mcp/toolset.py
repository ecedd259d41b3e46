"""`McpTools`: every configured MCP server's tools, as the agent loop takes them.

It owns one `ServerConnection` per enabled server and the catalogue of what they offer: for each
tool its function name (`mcp__<server>__<tool>`), description, simplified schema and policy
(approval, idempotence). `specs()` gives the OpenAI `tools` entries, `call()` runs one and never
raises (an unknown name, bad arguments, a down server, a timeout, a lost connection each become a
`ToolOutcome` saying so), `states()` feeds /readyz and doctor.

The SDK is imported only when a server is enabled (`start()`): importing it cost 0.9 s of CPU here
(`python -m bench.mcp` prints the figure; pydantic models of two protocol revisions), which a daemon
without MCP servers should not pay at start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from agent.tools import parse_arguments
from tools.mcp.naming import FunctionNames
from tools.mcp.results import (
    BAD_ARGUMENTS,
    INTERRUPTED,
    TIMEOUT,
    UNAVAILABLE,
    UNKNOWN_TOOL,
    ToolOutcome,
    failure,
    from_result,
)
from tools.mcp.schema import simplify
from tools.mcp.settings import McpServerSettings, McpSettings

if TYPE_CHECKING:
    import mcp_types

    from tools.mcp.connection import ServerConnection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class McpTool:
    """One tool offered to the model."""

    function_name: str
    server: str
    tool: str
    description: str
    parameters: dict[str, Any]  # the simplified JSON schema
    requires_approval: bool
    idempotent: bool
    schema_changes: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        """The OpenAI `tools` entry (the shape of agent.tools.Tool.schema)."""
        return {
            "type": "function",
            "function": {"name": self.function_name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ServerState:
    """What /readyz and doctor show of a server."""

    state: str  # starting | ready | down | closed | disabled
    transport: str  # stdio | http
    tools: int = 0
    error: str | None = None
    restarts: int = 0
    tool_names: tuple[str, ...] = field(default=(), repr=False)


class McpTools:
    def __init__(
        self, settings: McpSettings, *, vision: bool = False, first_retry: float = 1.0, max_retry: float = 60.0
    ) -> None:
        self.settings = settings
        self.vision = vision
        self._retry = (first_retry, max_retry)
        self._servers: dict[str, McpServerSettings] = {s.name: s for s in settings.servers}
        self._connections: dict[str, ServerConnection] = {}
        self._names = FunctionNames()
        self._tools: dict[str, McpTool] = {}

    async def start(self) -> None:
        """Start every enabled server (returns at once; each connects in its own task)."""
        enabled = self.settings.enabled_servers()
        if not enabled or self._connections:
            return
        from tools.mcp.connection import ServerConnection  # the SDK loads here, only when needed

        first, cap = self._retry
        for server in enabled:
            connection = ServerConnection(server, self._listed, first_retry=first, max_retry=cap)
            self._connections[server.name] = connection
            connection.start()

    async def wait_ready(self, timeout: float = 5.0) -> None:
        """Until every server's first attempt ended (listed or failed), at most `timeout` seconds:
        a turn that starts with the daemon sees the tools of the servers that come up in time."""
        if self._connections:
            await asyncio.gather(*(c.wait_settled(timeout) for c in self._connections.values()))

    def tools(self) -> list[McpTool]:
        """Every tool offered now, in server then listing order."""
        return list(self._tools.values())

    def get(self, function_name: str) -> McpTool | None:
        return self._tools.get(function_name)

    def specs(self, allowed: Callable[[McpTool], bool] | None = None) -> list[dict[str, Any]]:
        """OpenAI `tools` entries for the tools `allowed` keeps (all when None)."""
        return [t.spec() for t in self._tools.values() if allowed is None or allowed(t)]

    async def call(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        """Run the tool the model named; every failure is an outcome whose text says what happened."""
        tool = self._tools.get(name)
        if tool is None:
            return failure("", "", UNKNOWN_TOOL, f"unknown tool {name!r}")
        server, remote = tool.server, tool.tool
        args, problem = parse_arguments(arguments)
        if problem:
            return failure(server, remote, BAD_ARGUMENTS, f"arguments for {name} are not valid JSON ({problem})")
        from tools.mcp.connection import CallTimeout, ConnectionLost, Unavailable

        connection = self._connections[server]
        try:
            result = await connection.call(remote, args)
        except Unavailable as exc:
            return failure(server, remote, UNAVAILABLE, f"MCP server {server!r} is unavailable ({exc}); not run")
        except CallTimeout as exc:
            return failure(server, remote, TIMEOUT, f"{server}.{remote} timed out ({exc}); it may or may not have run")
        except ConnectionLost as exc:
            return failure(
                server,
                remote,
                INTERRUPTED,
                f"interrupted: {server}.{remote} lost its connection to the server ({exc}); it may or may not have run",
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a protocol error from the server, a result the SDK rejects, ...
            log.warning("MCP %s.%s failed: %s: %s", server, remote, type(exc).__name__, exc)
            return failure(server, remote, "error", f"{server}.{remote} failed: {type(exc).__name__}: {exc}")
        return from_result(
            result, server=server, tool=remote, vision=self.vision, max_chars=self.settings.max_result_chars
        )

    def states(self) -> dict[str, ServerState]:
        """Each configured server's state (disabled ones too), for /readyz and doctor."""
        out: dict[str, ServerState] = {}
        for name, server in self._servers.items():
            connection = self._connections.get(name)
            if connection is None:
                state = "disabled" if not server.enabled else "starting"
                out[name] = ServerState(state, server.transport)
                continue
            offered = tuple(t.tool for t in self._tools.values() if t.server == name)
            out[name] = ServerState(
                connection.state, server.transport, len(offered), connection.error, connection.restarts, offered
            )
        return out

    async def close(self) -> None:
        """Stop every server (states say `closed`; nothing is offered any more)."""
        await asyncio.gather(*(c.close() for c in self._connections.values()))
        self._tools = {}

    def _listed(self, server: str, listed: list[mcp_types.Tool]) -> None:
        """A server's tool list arrived (start, restart or list_changed): rebuild its part."""
        settings = self._servers[server]
        self._names.drop_server(server)
        others = {k: v for k, v in self._tools.items() if v.server != server}
        mine: dict[str, McpTool] = {}
        for tool in listed:
            if not settings.offers(tool.name):
                continue
            parameters, changes = simplify(tool.input_schema)
            name = self._names.add(server, tool.name)
            if changes:
                log.info("MCP %s.%s: schema simplified for the model API: %s", server, tool.name, "; ".join(changes))
            mine[name] = McpTool(
                function_name=name,
                server=server,
                tool=tool.name,
                description=tool.description or tool.title or tool.name,
                parameters=parameters,
                requires_approval=settings.needs_approval(tool.name),
                idempotent=settings.idempotent,
                schema_changes=tuple(changes),
            )
        self._tools = {**others, **mine}
