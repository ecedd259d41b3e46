"""Tools the agent can call: a name, a JSON-schema, and an async handler.

The registry is the only thing the agent loop knows about tools. `ToolRegistry.call` never raises:
whatever goes wrong (bad JSON from the model, an unknown tool, a handler bug) becomes an error
string that is fed back to the model, so one broken tool call cannot kill a turn.

Tools from outside the process (MCP servers, DESIGN §15) join the registry as a `ToolSource`: it
offers its specs per turn (only to people allowed to use them) and answers with a `ToolOutcome`,
the one result type of a tool call (text for the model and the store, images for a model that can
see, files to keep). One cut rule (`cut_result`) bounds every result.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

from gateway.source import SessionSource

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 50_000  # a tool result larger than this is cut: it would crowd out the context
OK = "ok"  # a ToolOutcome that did not fail (the other outcomes: tools.mcp.results)


def cut_result(text: str, max_chars: int = MAX_RESULT_CHARS) -> str:
    """The one rule for a result too long for the context: cut, with a note saying how much went."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[... cut: {len(text) - max_chars} more characters; the tool's result was longer]"


@dataclass(frozen=True)
class Attachment:
    data: bytes
    mime: str


@dataclass
class ToolOutcome:
    """One tool call's result: `text` is the tool message's content for the model and the store."""

    text: str
    outcome: str = OK
    server: str = ""
    tool: str = ""
    image_parts: list[dict[str, Any]] = field(default_factory=list)  # for the model, when it can see
    attachments: list[Attachment] = field(default_factory=list)  # kept with the message

    @property
    def is_error(self) -> bool:
        return self.outcome != OK


@dataclass
class ToolContext:
    """What a tool may know about the turn that called it. What a tool needs beyond the turn (its
    settings, a model client) it is given when it is built, typed, not through the context."""

    session_id: str
    source: SessionSource | None = None
    session_key: str | None = None  # the conversation the turn belongs to (a scheduled job answers there)
    db: Any = None  # gateway.db.StorageFace (typed loosely: tools must not depend on its import)
    is_admin: bool = False
    single_owner: bool = False  # one person owns this install: they may see every session
    home: Path | None = None  # the chinwag home directory (MEMORY.md, USER.md live here)
    inbox_id: int | None = None  # the turn's inbox entry: a ToolSource journals its calls under it
    may_use_sources: bool = False  # the person may talk to the bot: a ToolSource's tools are offered
    journaled: int = 0  # calls a ToolSource has journaled in this turn (the next one's position)
    rerun: bool = False  # an earlier run of this turn (cut short, or too long) may have journaled calls


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


class ToolSource(Protocol):
    """Tools the registry does not hold itself (MCP servers: gateway.runtime.mcp_calls)."""

    def specs(self, ctx: ToolContext) -> list[dict[str, Any]]: ...

    def handles(self, name: str) -> bool: ...

    async def ready(self) -> None:
        """Wait (briefly) for tools still being listed, before a turn's first model call."""

    async def run(
        self, name: str, raw_args: str | dict[str, Any] | None, ctx: ToolContext, call_id: str
    ) -> ToolOutcome:
        """Never raises but for cancellation."""
        ...


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    handler: Handler

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None, source: ToolSource | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self.source = source
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self, ctx: ToolContext | None = None) -> list[dict[str, Any]]:
        """The value for the OpenAI `tools` parameter (with the source's, for a turn's `ctx`)."""
        own = [tool.schema() for tool in self._tools.values()]
        return own + (self.source.specs(ctx) if self.source is not None and ctx is not None else [])

    async def ready(self) -> None:
        if self.source is not None:
            await self.source.ready()

    async def run(
        self, name: str, raw_args: str | dict[str, Any] | None, ctx: ToolContext, call_id: str
    ) -> ToolOutcome:
        """A call the model made, by whoever holds the tool; never raises but for cancellation."""
        if name not in self._tools and self.source is not None and self.source.handles(name):
            return await self.source.run(name, raw_args, ctx, call_id)
        return ToolOutcome(await self.call(name, raw_args, ctx), tool=name)

    async def call(self, name: str, raw_args: str | dict[str, Any] | None, ctx: ToolContext) -> str:
        """Run a tool; any failure becomes an "error: ..." string for the model. Cancellation propagates."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return f"error: unknown tool {name!r}; available tools: {known}"
        args, problem = parse_arguments(raw_args)
        if problem:
            return f"error: arguments for {name} are not valid JSON ({problem}); send a JSON object"
        try:
            result = await tool.handler(args, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool bug must not end the turn; the model sees what failed
            log.exception("tool %s failed", name)
            return f"error: {name} failed: {type(exc).__name__}: {exc}"
        if not isinstance(result, str):
            result = json.dumps(result, ensure_ascii=False, default=str)
        return cut_result(result)


def parse_arguments(raw: str | dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """Model-written arguments -> (dict, None) or ({}, reason). Empty means no arguments."""
    if raw is None:
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"{exc.msg} at position {exc.pos}"
    if not isinstance(value, dict):
        return {}, f"expected an object, got {type(value).__name__}"
    return value, None
