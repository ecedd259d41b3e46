"""Tools the agent can call: a name, a JSON-schema, and an async handler.

The registry is the only thing the agent loop knows about tools. `ToolRegistry.call` never raises:
whatever goes wrong (bad JSON from the model, an unknown tool, a handler bug) becomes an error
string that is fed back to the model, so one broken tool call cannot kill a turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from gateway.source import SessionSource

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 50_000  # a tool result larger than this is cut: it would crowd out the context


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


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


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
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
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

    def schemas(self) -> list[dict[str, Any]]:
        """The value for the OpenAI `tools` parameter."""
        return [tool.schema() for tool in self._tools.values()]

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
        if len(result) > MAX_RESULT_CHARS:
            result = result[:MAX_RESULT_CHARS] + f"\n[... cut: {len(result) - MAX_RESULT_CHARS} more characters]"
        return result


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
