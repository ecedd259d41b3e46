"""MCP tool names as model function names: `mcp__<server>__<tool>`, and the way back.

OpenAI-style function APIs accept `^[A-Za-z0-9_-]{1,64}$`; MCP tool names may hold dots, slashes
and spaces and run longer. Every other character becomes `_`, and a name past 64 characters keeps
its first 55 and ends with `_` + 8 hex digits of a SHA-1 of the full, unsanitised `server/tool`, so the
same tool gets the same name after every restart (a stored tool call still resolves) and two long
names that share a prefix do not collide. Sanitising can make two names equal (`a.b` and `a_b`);
`FunctionNames` gives the later one the hashed form, and keeps the reverse map.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "mcp__"
MAX_NAME = 64
_HASH_CHARS = 8
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")


def _hashed(name: str, server: str, tool: str) -> str:
    digest = hashlib.sha1(f"{server}/{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[: MAX_NAME - _HASH_CHARS - 1]}_{digest}"


def function_name(server: str, tool: str) -> str:
    """The function name the model sees for `tool` of `server`."""
    name = _OUTSIDE.sub("_", f"{PREFIX}{server}__{tool}")
    return name if len(name) <= MAX_NAME else _hashed(name, server, tool)


class FunctionNames:
    """Function name <-> (server, tool) for the tools currently offered."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[str, str]] = {}
        self._by_tool: dict[tuple[str, str], str] = {}

    def add(self, server: str, tool: str) -> str:
        key = (server, tool)
        if key in self._by_tool:
            return self._by_tool[key]
        name = function_name(server, tool)
        if name in self._by_name:  # two tools sanitise alike: the later one is told apart by its hash
            name = _hashed(name, server, tool)
        self._by_name[name] = key
        self._by_tool[key] = name
        return name

    def drop_server(self, server: str) -> None:
        for key in [k for k in self._by_tool if k[0] == server]:
            del self._by_name[self._by_tool.pop(key)]

    def resolve(self, name: str) -> tuple[str, str] | None:
        """(server, tool) for a function name, or None when no offered tool has it."""
        return self._by_name.get(name)

    def name_of(self, server: str, tool: str) -> str | None:
        return self._by_tool.get((server, tool))
