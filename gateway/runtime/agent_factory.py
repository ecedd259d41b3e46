"""Building the agent of a session: frozen system prompt, tools, and the model client.

The system prompt carries a snapshot of MEMORY.md and USER.md taken when the agent is built for a
session (DESIGN.md §7), so a conversation keeps a stable prefix; the agent cache keeps it warm.

One model client is shared by every agent of the gateway. Creating an `AsyncOpenAI` costs ~25 ms
(it builds an SSL context and a connection pool) and holds sockets; one per cached agent would make
a cache miss slow and the pool count grow with the cache. Agents therefore borrow the shared client,
and `SessionAgent.close()` closes only what the agent owns (a client made just for it, when the
factory is told not to share). The factory closes the shared client at shutdown.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import httpx2
import openai

from agent.llm import DEFAULT_MODEL, ModelNotConfigured, ModelSettings, make_client
from agent.loop import Agent
from agent.prompts import build_system_prompt
from agent.tools import Tool, ToolRegistry, ToolSource
from gateway.config.sections import MemoryConfig, ModelConfig, RecallConfig
from gateway.source import SessionSource
from tools.memory import NotePlace, make_memory_tool, read_snapshot
from tools.session_search import SearchSettings, make_session_search_tool

log = logging.getLogger(__name__)


FROZEN_SESSIONS = 50_000


@dataclass(frozen=True)
class _Frozen:
    notes: tuple[str, str]  # (MEMORY.md, USER.md) as read when the session's first agent was built
    title: str | None
    started: float


@dataclass
class SessionAgent:
    """The cached unit: one session's agent plus what must be closed with it."""

    agent: Agent
    session_id: str
    owned_clients: list[Any] = field(default_factory=list)
    closed: bool = False

    async def close(self) -> None:
        self.closed = True
        for client in self.owned_clients:
            await client.close()
        self.owned_clients.clear()


def model_settings(model: ModelConfig) -> ModelSettings:
    """The client settings of a resolved model section (the config consulted the environment
    already, so it is not read twice)."""
    return ModelSettings(
        base_url=model.base_url or None,
        api_key=model.api_key or None,
        name=model.name or DEFAULT_MODEL,
        timeout=float(model.timeout_seconds),
        context_window=model.context_window,
        max_tokens=model.max_tokens or None,  # 0: the endpoint's default
    )


def default_tools(
    memory_limits: dict[str, int] | None = None,
    search: SearchSettings | None = None,
    schedule: Tool | None = None,
    source: ToolSource | None = None,
) -> ToolRegistry:
    """session_search and memory, built with what they need (None: their defaults), `schedule`
    when the gateway gives one (it needs the schedules table: tools/schedule.py), and the tools of
    `source` (MCP servers: gateway.runtime.mcp_calls)."""
    tools = [make_session_search_tool(search), make_memory_tool(memory_limits)]
    return ToolRegistry(tools + ([schedule] if schedule is not None else []), source)


class AgentFactory:
    """Builds session agents over one shared model client (see the module doc). `http_client`
    reaches the openai client's transport (bench/ answers the model in-process through it).
    Without `tools`, the agents get session_search and memory built with `recall.*` and `memory.*`
    (defaults when not given), the auxiliary model and the factory's recap client, `schedule`
    (the gateway's schedule tool) when given, and those of `tool_source`."""

    def __init__(
        self,
        settings: ModelSettings,
        home: Path,
        tools: ToolRegistry | None = None,
        *,
        max_iterations: int = 8,
        instructions: str | None = None,
        share_client: bool = True,
        clock: Callable[[], float] | None = None,
        auxiliary: ModelSettings | None = None,
        http_client: httpx2.AsyncClient | None = None,
        notes: NotePlace | None = None,
        memory: MemoryConfig | None = None,
        recall: RecallConfig | None = None,
        observe: Callable[[str, float], None] | None = None,
        tool_source: ToolSource | None = None,
        schedule: Tool | None = None,
    ) -> None:
        self.settings = settings
        self.notes = notes  # where MEMORY.md/USER.md are read from; None: the files in `home`
        self.http_client = http_client
        self.home = Path(home)
        self.max_iterations = max_iterations
        self.instructions = instructions
        self.share_client = share_client
        self.clock = clock
        self.auxiliary = auxiliary
        if tools is None:
            recall = recall or RecallConfig()
            search = SearchSettings(
                deadline=float(recall.deadline_seconds),
                recaps=recall.recaps,
                recap_model=auxiliary,
                recap_client=lambda: self.recap_client,
                observe=observe,
            )
            tools = default_tools((memory or MemoryConfig()).limits(), search, schedule, tool_source)
        self.tools = tools
        self._client: openai.AsyncOpenAI | None = None
        self._aux_client: openai.AsyncOpenAI | None = None
        self.built = 0
        # session -> what its system prompt was built from, so an agent rebuilt after eviction gets
        # the same prompt (DESIGN §7: the snapshot is taken when the session starts). Identical
        # snapshots are shared, so this costs a few hundred bytes per session; bounded LRU.
        self._frozen: OrderedDict[str, _Frozen] = OrderedDict()
        self._interned: dict[tuple[str, str], tuple[str, str]] = {}

    @property
    def client(self) -> openai.AsyncOpenAI | None:
        """The shared client (None when no model is configured)."""
        if self._client is None and self.settings.is_configured:
            self._client = make_client(self.settings, self.http_client)
        return self._client

    @property
    def recap_client(self) -> openai.AsyncOpenAI | None:
        """The client for the auxiliary model (session_search recaps): the main one when the
        endpoint and key are the same, else its own, made once."""
        aux = self.auxiliary
        if aux is None or not aux.is_configured:
            return None
        if (aux.base_url, aux.api_key) == (self.settings.base_url, self.settings.api_key):
            return self.client
        if self._aux_client is None:
            self._aux_client = make_client(aux, self.http_client)
        return self._aux_client

    def has_snapshot(self, session_id: str) -> bool:
        return session_id in self._frozen

    def _snapshot(self, session_id: str, title: str | None) -> "_Frozen":
        frozen = self._frozen.get(session_id)
        if frozen is not None:
            self._frozen.move_to_end(session_id)
            return frozen
        # Two small files or rows (bounded by the memory tool's budget), once per session: read inline.
        memory, user = read_snapshot(self.notes or self.home)
        notes = self._interned.setdefault((memory, user), (memory, user))
        if len(self._interned) > 64:  # memory edited many times: forget old versions' sharing
            self._interned = {notes: notes}
        frozen = _Frozen(notes, title, self.clock() if self.clock else time.time())
        self._frozen[session_id] = frozen
        while len(self._frozen) > FROZEN_SESSIONS:
            self._frozen.popitem(last=False)
        return frozen

    async def build(self, session_id: str, source: SessionSource | None, title: str | None) -> SessionAgent:
        frozen = self._snapshot(session_id, title)
        (memory, user), now = frozen.notes, datetime.fromtimestamp(frozen.started, timezone.utc)
        prompt = build_system_prompt(memory, user, source, frozen.title, now=now, extra=self.instructions)
        owned: list[Any] = []
        if self.share_client:
            client = self.client
        else:
            try:
                client = make_client(self.settings, self.http_client)
                owned.append(client)
            except ModelNotConfigured:
                client = None
        self.built += 1
        agent = Agent(client, self.settings, self.tools, prompt, self.max_iterations)
        return SessionAgent(agent, session_id, owned)

    async def close(self) -> None:
        for client in (self._client, self._aux_client):
            if client is not None:
                await client.close()
        self._client = self._aux_client = None
