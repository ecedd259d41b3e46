"""Intake and recovery: how an admitted message reaches its chat's lane, and how the entries left
unfinished (by a crash, a stop, a replica that lost the chat) are taken up again. One object per
mode behind one seam, so the runner (gateway.runtime.runner) only routes.

- `SoloIntake` (one process per home, SQLite): an admitted message joins its lane at once (so a
  chat's order is the order of arrival) and the lane waits for its commit before it runs it
  (`accepted`). On start the adapters start, the replies not delivered are sent, then every entry
  not done is taken up, in inbox order; what arrives meanwhile is held and queued behind them.
- `SharedIntake` (replicas on Postgres, gateway.runtime.leases): a chat's entries run on the
  replica holding its lease. An admitted message is not queued at once: the receiver runs the chat
  if it holds or can claim the lease, else it wakes the holder. Either way the holder reads the
  chat's unfinished entries from the inbox in order (`take_up`, its `LeaseHost` side), so entries
  admitted on any replica run in the order they were committed. There is no start-up pass over the
  whole inbox: the first poll claims the chats nobody live holds.

Both take entries up through one loop (`Intake._take_up`): the attachments are reopened from the
platform, an entry accepted under an earlier process is never refused for the pending cap, and a
turn that had stored the person's message was cut short: the runner reruns or reports it.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import logging
from typing import Any, Coroutine, Iterable, Protocol

from gateway.commands import parse_command
from gateway.runtime.conversations import ConversationCache
from gateway.runtime.delivery import Inbox, Outbox
from gateway.runtime.leases import ChatLeases
from gateway.storage.health import storage_fault
from platforms.base import InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)

Entries = Iterable[tuple[dict, InboundMessage]]


class IntakeHost(Protocol):
    """What intake needs of the runner: its parts, and the lanes."""

    adapters: dict[str, PlatformAdapter]
    inbox: Inbox
    outbox: Outbox
    conversations: ConversationCache

    @property
    def stopping(self) -> bool: ...

    async def handle_inbound(self, msg: InboundMessage) -> None:
        """The adapters' callback."""

    def enqueue(self, key: str, msg: InboundMessage) -> None:
        """Queue `msg` in its chat's lane."""

    def drop_queue(self, key: str) -> None:
        """Drop what waits in the chat's lane (another replica runs it now)."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` beside the lanes (drain waits for it)."""


class Intake(abc.ABC):
    """What both modes share: the take-up loop and the marks it leaves for the runner."""

    def __init__(self, host: IntakeHost, leases: ChatLeases) -> None:
        self.host = host
        self.leases = leases
        self.interrupted: dict[int, dict] = {}  # inbox id -> entry, for turns a crash cut short
        self._taken_up: set[int] = set()  # entries taken up, until their lane accepts them

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the adapters' intake, then take up what was left unfinished."""

    @abc.abstractmethod
    async def admit(self, key: str, msg: InboundMessage) -> bool:
        """Commit `msg` to the inbox and route it to its chat; False for a redelivery."""

    @abc.abstractmethod
    def committed(self, key: str, msg: InboundMessage) -> None:
        """Route `msg`, committed to the inbox by someone else (a claimed scheduled run), to its chat."""

    async def accepted(self, msg: InboundMessage) -> bool:
        """Asked by the lane before it runs `msg`: is it committed (not a redelivery)?"""
        return True

    def taken_up(self, msg: InboundMessage) -> bool:
        """Was `msg` taken up (accepted before, by this process or another)? Asked once."""
        taken = msg.inbox_id in self._taken_up
        self._taken_up.discard(msg.inbox_id or 0)
        return taken

    def lease_lost(self, key: str) -> None:
        """Another replica runs this chat now. What waits here is dropped (not finished: the
        holder runs it); a running turn is refused at its next commit."""
        self.host.drop_queue(key)

    def _take_up(self, entries: Entries, fresh: bool) -> None:
        """The one take-up loop: queue unfinished entries in their lanes, in inbox order. `fresh`:
        accepted under an earlier holder, so never refused for the cap."""
        for row, msg in entries:
            adapter = self.host.adapters.get(msg.source.platform.value)
            if adapter is not None:
                for attachment in msg.attachments:
                    attachment.open = adapter.reopen(msg, attachment)
            if fresh or row["started_at"] is not None:
                self._taken_up.add(row["id"])
            if row["started_at"] is not None and parse_command(msg.text) is None:
                self.interrupted[row["id"]] = row  # cut short where it ran
            self.host.enqueue(row["chat_key"], msg)


class SoloIntake(Intake):
    """One process per home: it runs every chat (see the module doc)."""

    def __init__(self, host: IntakeHost, leases: ChatLeases) -> None:
        super().__init__(host, leases)
        # intake during start-up waits here, behind the entries being taken up again
        self._holding: list[tuple[str, InboundMessage, asyncio.Future]] | None = None
        self._resumed: set[int] = set()
        self._admissions: dict[int, asyncio.Future] = {}  # id(msg) -> its commit

    async def start(self) -> None:
        self._holding = []
        try:
            for adapter in self.host.adapters.values():
                await adapter.start(self.host.handle_inbound)
            await self.host.outbox.deliver_unsent()
            await self._resume()
        finally:
            # What arrived meanwhile goes behind what was taken up, in arrival order; new arrivals
            # keep joining the held list until it is empty, so none overtakes an older one.
            while self._holding:
                key, msg, admission = self._holding.pop(0)
                try:
                    stored = await admission
                except Exception:
                    stored = False  # not acknowledged: the platform sends it again
                if stored and msg.inbox_id not in self._resumed:
                    self.host.enqueue(key, msg)
            self._holding = None
            self._resumed = set()

    async def _resume(self) -> None:
        """Take up the entries a previous process left unfinished, oldest first."""
        entries = await asyncio.to_thread(self.host.inbox.unfinished)
        self._resumed.update(row["id"] for row, _ in entries)
        self._take_up(entries, True)
        if entries:
            log.info(
                "taking up %d message(s) left unanswered by the previous run (%d cut short)",
                len(entries),
                len(self.interrupted),
            )

    async def admit(self, key: str, msg: InboundMessage) -> bool:
        # The commit starts now; the message joins its lane at once and the lane waits for the
        # commit before it runs it (`accepted`).
        admission = asyncio.ensure_future(self.host.inbox.admit(msg, key))
        if self.host.stopping:
            pass  # stored, not run: the next start answers it
        elif self._holding is not None:
            self._holding.append((key, msg, admission))
        else:
            self._admissions[id(msg)] = admission
            self.host.enqueue(key, msg)
        return await admission

    def committed(self, key: str, msg: InboundMessage) -> None:
        if not self.host.stopping:  # else stored, not run: the next start takes it up
            self.host.enqueue(key, msg)

    async def accepted(self, msg: InboundMessage) -> bool:
        admission = self._admissions.pop(id(msg), None)
        if admission is None:
            return True
        try:
            return await admission  # False: a redelivery, the inbox refused it
        except Exception:
            return False  # not stored (the adapter did not acknowledge it): the platform sends it again


class SharedIntake(Intake):
    """Replicas: the `LeaseHost` of the leases (see the module doc). A turn whose lease went
    elsewhere is dropped at its next commit (LeaseLost); its chat's queue here is dropped when the
    leases give the lease up (`lease_lost`), not by that turn: the chat may be held here again."""

    def __init__(self, host: IntakeHost, leases: ChatLeases) -> None:
        super().__init__(host, leases)
        self._pushed: dict[str, set[int]] = {}  # chat key -> entries read into its lane
        self._pumps: dict[str, asyncio.Lock] = {}

    async def start(self) -> None:
        """Register, then start the adapters: those that must run once per bot (a Telegram poller, a
        Discord shard) only while this replica holds their leadership. The beat loop's first poll
        takes up the chats nobody live holds (a dead replica's, this one's before a restart)."""
        await self.leases.start(self)
        for adapter in self.host.adapters.values():
            name = adapter.leader_key()
            if name is None:
                await adapter.start(self.host.handle_inbound)
                continue
            adapter.await_leadership()
            if not adapter.led_by_start:
                await adapter.start(self.host.handle_inbound)  # sending now; its intake once it leads
            self.leases.lead(name, functools.partial(self._lead, adapter))

    async def _lead(self, adapter: PlatformAdapter, leading: bool) -> None:
        log.info("%s %s on this replica", adapter.leader_key(), "starts" if leading else "stops")
        if not adapter.led_by_start:
            await adapter.lead(leading)
        elif leading:
            await adapter.start(self.host.handle_inbound)
        else:
            await adapter.stop()

    async def admit(self, key: str, msg: InboundMessage) -> bool:
        stored = await self.host.inbox.admit(msg, key)
        if stored and not self.host.stopping:
            self.host.spawn(self._arrived(key))
        return stored

    def committed(self, key: str, msg: InboundMessage) -> None:
        if not self.host.stopping:  # the holder reads it from the inbox
            self.host.spawn(self._arrived(key))

    async def _arrived(self, key: str) -> None:
        """An entry of `key` was admitted here. Storage failing now is left to the lease poll: it
        takes up a held chat's entries it has not seen, and claims a chat nobody live holds."""
        try:
            if self.leases.holds(key):
                await self.take_up(key, False)
            elif await self.leases.claim(key):
                await self.take_up(key, True)
            else:
                await self.leases.nudge(key)
        except Exception as exc:
            if not storage_fault(exc):
                raise
            log.info("chat %s: an entry admitted here waits for the lease poll (%s)", key, " ".join(str(exc).split()))

    async def take_up(self, key: str, fresh: bool) -> None:
        """LeaseHost: read the chat's unfinished entries into its lane, in inbox order, skipping
        those already there. `fresh` (the lease was just claimed): the warm copy of its conversation
        may be behind what another replica wrote, and its unsent replies go out first."""
        if self.host.stopping:
            return
        lock = self._pumps.setdefault(key, asyncio.Lock())
        async with lock:
            if fresh:
                self.host.conversations.drop_owner(key)
                await self.host.outbox.deliver_unsent_of(key)
            entries = await self.host.inbox.unfinished_of(key)
            if not self.leases.holds(key) or self.host.stopping:
                return
            pushed = self._pushed.setdefault(key, set())
            pushed &= {row["id"] for row, _ in entries}  # the others are done: never read again
            new = [(row, msg) for row, msg in entries if row["id"] not in pushed]
            pushed.update(row["id"] for row, _ in new)
            self._take_up(new, fresh)
            if not pushed:
                self._pushed.pop(key, None)
                self._pumps.pop(key, None)

    def lease_lost(self, key: str) -> None:
        super().lease_lost(key)
        self._pushed.pop(key, None)


def intake_for(host: IntakeHost, leases: ChatLeases) -> Intake:
    """The intake of the mode `leases` serve."""
    return SharedIntake(host, leases) if leases.shared else SoloIntake(host, leases)
