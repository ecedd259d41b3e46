"""The `mcp` config section, declared once: one frozen dataclass per server and one for the section.

The shape follows platforms/settings.py (a frozen dataclass whose fields are the keys, defaults in
one place), but parsing is written here because MCP keys are not flat scalars: `require_approval`
is a bool or a list of the server's own tool names, `env`/`headers` are maps, and a server is either
stdio (`command`) or Streamable HTTP (`url`), never both. Every problem raises `McpConfigError`
naming the full key (`mcp.servers.orders.timeout_seconds: ...`), so a typo fails at start, not at
the first tool call. Secrets (`env`, `headers`) stay out of `repr`, hence out of logs.

`${VAR}` is expanded by gateway.config's loader for every string of config.yaml; `env=` here is for
a section that did not go through it (a test's dict, `chinwag doctor` on a raw file), using the same
one expander, so the two can never disagree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from agent.tools import MAX_RESULT_CHARS
from gateway.envvars import expand_env
from gateway.errors import ChinwagError

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_RESULT_CHARS = MAX_RESULT_CHARS  # the agent's one bound on a tool result
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 300.0


class McpConfigError(ChinwagError, ValueError):
    """A key of the `mcp` section is wrong; the message names it."""


@dataclass(frozen=True)
class McpServerSettings:
    """`mcp.servers.<name>`: how to reach one server and which of its tools the agent gets."""

    name: str
    command: str | None = None  # stdio: the program to start (one process per server)
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # merged over the daemon's environment
    cwd: str | None = None
    url: str | None = None  # Streamable HTTP endpoint
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    tools: tuple[str, ...] | None = None  # allow-list of the server's tool names; None: all
    exclude_tools: tuple[str, ...] = ()
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    enabled: bool = True
    require_approval: bool | tuple[str, ...] = False  # True: every tool; a tuple: those tools
    idempotent: bool = False  # a call interrupted by a crash may be sent again

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def offers(self, tool: str) -> bool:
        """Whether the agent gets this tool of the server (allow-list, then exclusions)."""
        if self.tools is not None and tool not in self.tools:
            return False
        return tool not in self.exclude_tools

    def needs_approval(self, tool: str) -> bool:
        if isinstance(self.require_approval, bool):
            return self.require_approval
        return tool in self.require_approval


@dataclass(frozen=True)
class McpSettings:
    """The `mcp` section."""

    servers: tuple[McpServerSettings, ...] = ()
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS  # a longer result is cut with a note
    approval_timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS  # no answer means denied

    def enabled_servers(self) -> tuple[McpServerSettings, ...]:
        return tuple(s for s in self.servers if s.enabled)


_SERVER_KEYS = {f.name for f in dataclasses.fields(McpServerSettings)} - {"name"}
_SECTION_KEYS = {f.name for f in dataclasses.fields(McpSettings)}


def mcp_settings_from(section: Mapping[str, Any] | None, *, env: Mapping[str, str] | None = None) -> McpSettings:
    """`McpSettings` from the `mcp` mapping of config.yaml; `env` given: `${VAR}` is expanded."""
    section = section or {}
    _mapping(section, "mcp")
    _no_unknown(section, _SECTION_KEYS, "mcp")
    servers_raw = section.get("servers") or {}
    _mapping(servers_raw, "mcp.servers")
    return McpSettings(
        servers=tuple(_server(str(name), raw, env) for name, raw in servers_raw.items()),
        max_result_chars=int(
            _number(section.get("max_result_chars"), DEFAULT_MAX_RESULT_CHARS, "mcp.max_result_chars")
        ),
        approval_timeout_seconds=_number(
            section.get("approval_timeout_seconds"), DEFAULT_APPROVAL_TIMEOUT_SECONDS, "mcp.approval_timeout_seconds"
        ),
    )


def _server(name: str, raw: Any, env: Mapping[str, str] | None) -> McpServerSettings:
    where = f"mcp.servers.{name}"
    if not name.strip():
        raise McpConfigError(f"{where}: a server needs a name")
    raw = raw or {}
    _mapping(raw, where)
    _no_unknown(raw, _SERVER_KEYS, where)

    def text(key: str) -> str | None:
        value = raw.get(key)
        if value is None:
            return None
        if not isinstance(value, (str, int, float)):
            raise McpConfigError(f"{where}.{key}: expected a string, got {type(value).__name__}")
        return _expand(str(value), env, f"{where}.{key}")

    command, url = text("command"), text("url")
    if bool(command) == bool(url):
        raise McpConfigError(f"{where}: set either `command` (a stdio server) or `url` (Streamable HTTP), not both")
    if url and not url.startswith(("http://", "https://")):
        raise McpConfigError(f"{where}.url: expected an http:// or https:// URL, got {url!r}")
    if url and (raw.get("args") or raw.get("env") or raw.get("cwd")):
        raise McpConfigError(f"{where}: `args`, `env` and `cwd` are for stdio servers (`command`), not `url`")
    if command and raw.get("headers"):
        raise McpConfigError(f"{where}.headers: headers are for Streamable HTTP servers (`url`), not `command`")
    if raw.get("tools") is not None and raw.get("exclude_tools"):
        raise McpConfigError(f"{where}: set `tools` (an allow-list) or `exclude_tools`, not both")
    timeout = _number(raw.get("timeout_seconds"), DEFAULT_TIMEOUT_SECONDS, f"{where}.timeout_seconds")
    if timeout <= 0:
        raise McpConfigError(f"{where}.timeout_seconds: must be above 0, got {timeout}")
    approval = raw.get("require_approval", False)
    if not isinstance(approval, bool):
        approval = _names(approval, f"{where}.require_approval", "true, false or a list of the server's tool names")
    tools = raw.get("tools")
    return McpServerSettings(
        name=name,
        command=command,
        args=tuple(_expand(a, env, f"{where}.args") for a in _names(raw.get("args") or [], f"{where}.args")),
        env=_string_map(raw.get("env"), env, f"{where}.env"),
        cwd=text("cwd"),
        url=url,
        headers=_string_map(raw.get("headers"), env, f"{where}.headers"),
        tools=None if tools is None else _names(tools, f"{where}.tools"),
        exclude_tools=_names(raw.get("exclude_tools") or [], f"{where}.exclude_tools"),
        timeout_seconds=timeout,
        enabled=_flag(raw.get("enabled", True), f"{where}.enabled"),
        require_approval=approval,
        idempotent=_flag(raw.get("idempotent", False), f"{where}.idempotent"),
    )


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise McpConfigError(f"{where}: expected a mapping, got {type(value).__name__}")


def _no_unknown(raw: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise McpConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


def _number(value: Any, default: float, where: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool):
        raise McpConfigError(f"{where}: expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise McpConfigError(f"{where}: expected a number, got {value!r}") from None


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise McpConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def _names(value: Any, where: str, expected: str = "a list of strings") -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise McpConfigError(f"{where}: expected {expected}, got {value!r}")
    if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        raise McpConfigError(f"{where}: expected {expected}, got {value!r}")
    return tuple(str(v) for v in value)


def _string_map(value: Any, env: Mapping[str, str] | None, where: str) -> dict[str, str]:
    if value is None:
        return {}
    _mapping(value, where)
    out: dict[str, str] = {}
    for key, item in value.items():
        if item is None or isinstance(item, (dict, list)):
            raise McpConfigError(f"{where}.{key}: expected a string, got {item!r}")
        out[str(key)] = _expand(str(item), env, f"{where}.{key}")
    return out


def _expand(text: str, env: Mapping[str, str] | None, where: str) -> str:
    if env is None:
        return text
    problems: list[str] = []
    value = expand_env(text, env, lambda name, is_set: problems.append(f"{name} is {'empty' if is_set else 'not set'}"))
    if problems:
        raise McpConfigError(f"{where}: environment variable {'; '.join(problems)}")
    return value
