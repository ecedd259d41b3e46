"""Agents kept warm per session: least-recently-used by count, plus an idle time-to-live.

An agent holds the session's frozen system prompt (the memory snapshot taken when the session
started) and its model client. Keeping every one forever is how the reference implementation grew
to gigabytes; so the cache is bounded, and an evicted agent has its clients closed. An agent that is
running a turn is never evicted: it is pinned (`acquire`/`release`) and only considered again once
released. Dropping a pinned agent (e.g. `/new` racing a turn) closes it when the turn releases it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Protocol

log = logging.getLogger(__name__)


class Closable(Protocol):
    async def close(self) -> None: ...


@dataclass
class _Slot:
    agent: Any
    last_used: float
    pins: int = 0


class AgentCache:
    def __init__(
        self,
        max_agents: int = 64,
        idle_ttl: float = 1800.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_agents < 1:
            raise ValueError("max_agents must be at least 1")
        if idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive")
        self.max_agents = max_agents
        self.idle_ttl = idle_ttl
        self.clock = clock
        # Idle agents in last-use order (least recent first) — the only ones eviction looks at —
        # and running (pinned) ones apart, so a thousand running turns cost nothing to skip.
        self._idle: OrderedDict[str, _Slot] = OrderedDict()
        self._running: dict[str, _Slot] = {}
        self._doomed: dict[int, tuple[Any, int]] = {}  # dropped while pinned: closed on last release
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._idle) + len(self._running)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._idle or session_id in self._running

    def session_ids(self) -> list[str]:
        """Least recently used first; running agents last."""
        return [*self._idle, *self._running]

    def _slot(self, session_id: str) -> _Slot | None:
        return self._idle.get(session_id) or self._running.get(session_id)

    def get(self, session_id: str) -> Any | None:
        slot = self._slot(session_id)
        if slot is None:
            return None
        slot.last_used = self.clock()
        if session_id in self._idle:
            self._idle.move_to_end(session_id)
        return slot.agent

    async def put(self, session_id: str, agent: Any) -> None:
        """Cache `agent` for `session_id` (replacing and closing any other), then enforce the bounds."""
        old = self._idle.pop(session_id, None) or self._running.pop(session_id, None)
        if old is not None and old.agent is agent:
            old.last_used = self.clock()
            (self._running if old.pins else self._idle)[session_id] = old
        else:
            self._idle[session_id] = _Slot(agent, self.clock())
            if old is not None:
                await self._retire(old)
        await self.sweep(keep=session_id)  # never the one just put: its caller is about to use it

    def acquire(self, session_id: str) -> None:
        """Pin the session's agent for a running turn."""
        slot = self._idle.pop(session_id, None) or self._running.get(session_id)
        if slot is not None:
            slot.pins += 1
            slot.last_used = self.clock()
            self._running[session_id] = slot

    async def release(self, session_id: str, agent: Any = None) -> None:
        slot = self._running.get(session_id)
        if slot is not None and (agent is None or slot.agent is agent):
            slot.pins -= 1
            slot.last_used = self.clock()
            if slot.pins <= 0:
                slot.pins = 0
                del self._running[session_id]
                self._idle[session_id] = slot
        elif agent is not None and id(agent) in self._doomed:
            doomed, pins = self._doomed.pop(id(agent))
            if pins > 1:
                self._doomed[id(agent)] = (doomed, pins - 1)
            else:
                await _close(doomed)
        await self.sweep()

    def is_running(self, session_id: str) -> bool:
        return session_id in self._running

    async def drop(self, session_id: str) -> bool:
        """Forget exactly this session's agent (and close it, now or when its turn ends)."""
        slot = self._idle.pop(session_id, None) or self._running.pop(session_id, None)
        if slot is None:
            return False
        await self._retire(slot)
        return True

    async def sweep(self, keep: str | None = None) -> int:
        """Evict idle agents past the TTL, then least recently used ones beyond the count bound.
        Running agents (and `keep`) stay, so the cache may briefly hold more than `max_agents`.
        The scan stops at the first fresh agent once within bounds: it costs what it evicts."""
        now = self.clock()
        over = len(self) - self.max_agents
        victims = []
        for sid, slot in self._idle.items():  # least recently used first
            if over <= 0 and now - slot.last_used < self.idle_ttl:
                break
            if sid == keep:
                continue
            victims.append(sid)
            over -= 1
        for sid in victims:
            slot = self._idle.pop(sid)
            self.evictions += 1
            await _close(slot.agent)
        return len(victims)

    async def close_all(self) -> None:
        slots = [*self._idle.values(), *self._running.values()]
        self._idle.clear()
        self._running.clear()
        doomed = [agent for agent, _ in self._doomed.values()]
        self._doomed.clear()
        for agent in [s.agent for s in slots] + doomed:
            await _close(agent)

    async def _retire(self, slot: _Slot) -> None:
        if slot.pins:
            self._doomed[id(slot.agent)] = (slot.agent, slot.pins)
        else:
            await _close(slot.agent)


async def _close(agent: Any) -> None:
    close = getattr(agent, "close", None)
    if close is None:
        return
    try:
        result = close()
        if asyncio.iscoroutine(result):
            await result
    except Exception:  # a failing close must not break the caller's turn
        log.exception("closing a cached agent failed")
