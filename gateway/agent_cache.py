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
        self._slots: OrderedDict[str, _Slot] = OrderedDict()  # least recently used first
        self._doomed: dict[int, Any] = {}  # dropped while pinned: closed on release
        self._doomed_pins: dict[int, int] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._slots

    def session_ids(self) -> list[str]:
        return list(self._slots)

    def get(self, session_id: str) -> Any | None:
        slot = self._slots.get(session_id)
        if slot is None:
            return None
        self._touch(session_id, slot)
        return slot.agent

    def _touch(self, session_id: str, slot: _Slot) -> None:
        slot.last_used = self.clock()
        self._slots.move_to_end(session_id)

    async def put(self, session_id: str, agent: Any) -> None:
        """Cache `agent` for `session_id` (replacing and closing any other), then enforce the bounds."""
        old = self._slots.pop(session_id, None)
        same = old is not None and old.agent is agent
        self._slots[session_id] = _Slot(agent, self.clock(), pins=old.pins if same else 0)
        if old is not None and old.agent is not agent:
            await self._retire(old)
        await self.sweep(keep=session_id)  # never the one just put: its caller is about to use it

    def acquire(self, session_id: str) -> None:
        """Pin the session's agent for a running turn."""
        slot = self._slots.get(session_id)
        if slot is not None:
            slot.pins += 1
            self._touch(session_id, slot)

    async def release(self, session_id: str, agent: Any = None) -> None:
        slot = self._slots.get(session_id)
        if slot is not None and (agent is None or slot.agent is agent):
            slot.pins = max(0, slot.pins - 1)
            self._touch(session_id, slot)
        elif agent is not None and id(agent) in self._doomed:
            left = self._doomed_pins[id(agent)] - 1
            if left <= 0:
                self._doomed_pins.pop(id(agent))
                await _close(self._doomed.pop(id(agent)))
            else:
                self._doomed_pins[id(agent)] = left
        await self.sweep()

    def is_running(self, session_id: str) -> bool:
        slot = self._slots.get(session_id)
        return bool(slot and slot.pins)

    async def drop(self, session_id: str) -> bool:
        """Forget exactly this session's agent (and close it, now or when its turn ends)."""
        slot = self._slots.pop(session_id, None)
        if slot is None:
            return False
        await self._retire(slot)
        return True

    async def sweep(self, keep: str | None = None) -> int:
        """Evict idle agents past the TTL, then least recently used ones beyond the count bound.
        Pinned agents (and `keep`) stay, so the cache may briefly hold more than `max_agents`.

        Slots are kept in last-use order, so the scan stops at the first fresh slot once the
        count is within bounds: the cost is the number evicted (plus pinned ones skipped)."""
        now = self.clock()
        over = len(self._slots) - self.max_agents
        victims = []
        for sid, slot in self._slots.items():  # least recently used first
            if over <= 0 and now - slot.last_used < self.idle_ttl:
                break
            if slot.pins or sid == keep:
                continue
            victims.append(sid)
            over -= 1
        for sid in victims:
            slot = self._slots.pop(sid)
            self.evictions += 1
            await _close(slot.agent)
        return len(victims)

    async def close_all(self) -> None:
        slots = list(self._slots.values())
        self._slots.clear()
        for slot in slots:
            await _close(slot.agent)
        doomed = list(self._doomed.values())
        self._doomed.clear()
        self._doomed_pins.clear()
        for agent in doomed:
            await _close(agent)

    async def _retire(self, slot: _Slot) -> None:
        if slot.pins:
            self._doomed[id(slot.agent)] = slot.agent
            self._doomed_pins[id(slot.agent)] = slot.pins
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
