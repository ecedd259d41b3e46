"""Who runs a chat: the one seam between one process per home (SQLite) and N replicas (Postgres).

A chat's inbox entries are run by the one process holding its lease, and every commit of its
jobs checks a `guard` that refuses the commit once the lease has gone to another replica
(gateway.storage.fence carries it; gateway/storage/postgres/replicas.py has the SQL and the figures).

- `SoloLeases` (SQLite): the home lock already makes this the only process, so it holds every
  chat; no guard, no check, nothing stored (gateway.runtime.intake.SoloIntake takes messages in).
- `SharedLeases` (Postgres): a registry identity, then one beat loop on the registry connection:
  wait for notifications (an entry admitted elsewhere for a chat held here), and every heartbeat
  renew the held leases in one UPDATE (a lease missing from its answer was taken over: the runner
  drops that chat's queue) and try the leaderships wanted. Beside it, on the pool, a poll every
  heartbeat claims the chats with work left whose holder is gone or expired (a dead replica's
  work, taken over within a poll). When
  the registry connection is lost (this replica was frozen past idle_session_timeout, or cut
  off), every lease and leadership is given up and the replica registers again under a new id;
  its old guards can never match again.

Every write of a chat's job checks the guard, not only the turn's records: the runner sets it for
the job (gateway.storage.fence), so a stale replica's /new, /resume, /undo, /retry, /title,
/compress or reset move is refused like its turn. The poll re-reads a held chat when it has an
open entry no earlier poll saw (a set of ids: two replicas' concurrent admits commit out of id
order, so "an id above the newest seen" missed a late one whose NOTIFY was lost).

Streaming: a draft edit goes out only while `known_held` (no round trip): this replica holds the
chat by its own monotonic reckoning for SHOW_MARGIN more seconds, counted from when it sent the
claim or renewal (the lease's expiry) and its last beat (the registry's idle_session_timeout).
A replica frozen or cut off past that stops editing; on LeaseLost its draft is abandoned as
shown; the final text is shown only after the fenced commit and a `confirm`, else the new holder
sends the committed reply. What memory cannot know: the registry session ended abruptly (the
server restarted, the backend was terminated) lets a takeover start at once, and a draft edit
may then still go out within the margin; it is a draft (never the final text), as a crash mid-
stream leaves one. The duplicate window of a send and its record is unchanged.

The `LeaseHost` is the runner's intake (gateway.runtime.intake.SharedIntake): `take_up(key, fresh)`
reads the chat's unfinished entries into its lane (after sending the chat's unsent replies when
`fresh`: the lease was just claimed), and `lease_lost(key)` drops the chat's queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Protocol

from gateway.storage.fence import Guard  # run in a commit's transaction; raises gateway.errors.LeaseLost

log = logging.getLogger(__name__)

# Seconds of lease a streamed reply's draft edit needs left, by this process's own reckoning, to go
# out: the edit's trip to the platform, and a beat running late on a loaded machine (a live
# replica renews every heartbeat, so it normally has 2.5-4 s left).
SHOW_MARGIN = 1.0

OnLead = Callable[[bool], Awaitable[None]]


class LeaseHost(Protocol):
    async def take_up(self, key: str, fresh: bool) -> None:
        """Run the chat's unfinished entries (`fresh`: its lease was just claimed here)."""

    def lease_lost(self, key: str) -> None:
        """Another replica holds the chat now: drop what is queued for it here."""


class ChatLeases(Protocol):
    shared: bool

    def holds(self, key: str) -> bool: ...

    def known_held(self, key: str) -> bool:
        """Is the chat's lease held here for a while yet, by what this process knows (no round
        trip)? Asked before each draft edit of a streamed reply."""
        ...

    def guard(self, key: str) -> Guard | None:
        """The check for commits of `key`'s turns, bound to the lease held now; None: no check."""
        ...

    async def claim(self, key: str) -> bool:
        """Take the chat's lease if it is free; True when this process now holds it afresh."""
        ...

    async def confirm(self, key: str) -> bool:
        """Is the lease still held (asked just before a reply is sent)?"""
        ...

    async def nudge(self, key: str) -> None:
        """Tell the chat's holder that an entry is waiting for it."""
        ...

    def lead(self, name: str, on_change: OnLead) -> None:
        """Call `on_change(True)` once this process leads `name`, `on_change(False)` if it stops."""
        ...

    async def start(self, host: LeaseHost) -> None: ...

    async def stop(self) -> None: ...


class SoloLeases:
    """One process per home: it holds every chat and leads everything."""

    shared = False
    replica_id = ""

    def __init__(self) -> None:
        self._leads: list[tuple[str, OnLead]] = []

    def holds(self, key: str) -> bool:
        return True

    def known_held(self, key: str) -> bool:
        return True

    def guard(self, key: str) -> Guard | None:
        return None

    async def claim(self, key: str) -> bool:
        return True

    async def confirm(self, key: str) -> bool:
        return True

    async def nudge(self, key: str) -> None:
        return None

    def lead(self, name: str, on_change: OnLead) -> None:
        self._leads.append((name, on_change))

    async def start(self, host: LeaseHost) -> None:
        for _, on_change in self._leads:
            await on_change(True)

    async def stop(self) -> None:
        return None


class SharedLeases:
    """Leases on the Postgres database `db` shares with the other replicas (see the module doc)."""

    shared = True

    def __init__(
        self, db: Any, dsn: str, *, heartbeat: float | None = None, lease_seconds: float | None = None
    ) -> None:
        from gateway.storage.postgres import replicas  # psycopg: only when this backend is used

        self._sql = replicas
        self.db = db
        self.registry = replicas.Registry(dsn)
        self.heartbeat = heartbeat or replicas.HEARTBEAT_SECONDS
        self.lease_seconds = lease_seconds or replicas.LEASE_SECONDS
        self.replica_id = ""
        self._held: dict[str, int] = {}  # chat key -> fence
        self._claimed: dict[str, float] = {}  # chat key -> when (monotonic) it was claimed
        self._until: dict[str, float] = {}  # chat key -> (monotonic) before which no claim can take it
        self._alive_until = 0.0  # (monotonic) before which the server cannot have ended the registry
        self.idle_seconds = self.registry.idle_timeout_ms / 1000
        self._polled: dict[str, frozenset[int]] = {}  # held chat key -> open entries the last poll saw
        self._leads: dict[str, OnLead] = {}
        self._leading: set[str] = set()
        self._host: LeaseHost | None = None
        self._beat: asyncio.Task | None = None
        self._poller: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.takeovers = 0

    # -- what the runner and the delivery use ---------------------------------------------------
    def holds(self, key: str) -> bool:
        return key in self._held

    def known_held(self, key: str) -> bool:
        # The database's expiry is its clock at the statement + lease_seconds, and its idle
        # timeout counts from the end of the last statement: both are later than `started` +
        # the same seconds on this monotonic clock. A margin covers the edit's trip.
        until = min(self._until.get(key, 0.0), self._alive_until)
        return key in self._held and time.monotonic() + SHOW_MARGIN < until

    def guard(self, key: str) -> Guard | None:
        fence, replica, check = self._held.get(key), self.replica_id, self._sql.check_fence
        return lambda conn: check(conn, key, replica, fence)

    async def claim(self, key: str) -> bool:
        if not self.replica_id:
            return False
        replica = self.replica_id
        started = time.monotonic()
        try:
            fence = await self.db.awrite(self._sql.op_claim(key, replica, self.lease_seconds))
        except Exception as exc:  # a lock timeout behind a frozen commit, a lost connection: not now
            log.info("claiming chat %s failed (%s); the next poll tries again", key, exc)
            return False
        if fence is None or replica != self.replica_id:
            return False
        self._held[key] = fence
        self._claimed[key] = time.monotonic()
        self._until[key] = started + self.lease_seconds
        return True

    async def confirm(self, key: str) -> bool:
        fence, replica = self._held.get(key), self.replica_id
        if fence is None:
            return False
        return bool(await self.db.aread(self.db.read, lambda c: self._sql.holds(c, key, replica, fence)))

    async def nudge(self, key: str) -> None:
        await self.db.awrite(self._sql.op_notify(key))

    def lead(self, name: str, on_change: OnLead) -> None:
        self._leads[name] = on_change

    # -- life cycle -----------------------------------------------------------------------------
    async def start(self, host: LeaseHost) -> None:
        self._host = host
        started = time.monotonic()
        self.replica_id = await self.registry.open()
        self._alive_until = started + self.idle_seconds
        log.info("replica %s registered", self.replica_id)
        self._beat = asyncio.create_task(self._run(), name="replica beat")

    async def stop(self) -> None:
        for loop in (self._beat, self._poller):
            if loop is not None:
                loop.cancel()
                await asyncio.gather(loop, return_exceptions=True)
        self._beat = self._poller = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.replica_id:
            try:  # the next claim need not wait for the lease to expire
                await self.db.awrite(self._sql.op_release_all(self.replica_id))
            except Exception:
                log.warning("releasing the leases of replica %s failed; they expire", self.replica_id)
        await self.registry.close()
        self._held.clear()

    async def _run(self) -> None:
        """The registry connection's loop: notifications, the heartbeat with the renewal, the
        leaderships. Nothing here waits for the pool (see Registry.beat)."""
        last = 0.0
        while True:
            try:
                for key in await self.registry.wait_notifications(self.heartbeat):
                    if key in self._held:
                        self._spawn(self._take_up(key, False))
                if time.monotonic() - last >= self.heartbeat:
                    last = time.monotonic()
                    started = time.monotonic()
                    self._renewed(await self.registry.beat(self.lease_seconds), started)
                    await self._try_leads()
                    if self._poller is None or self._poller.done():
                        self._poller = asyncio.create_task(self._poll_loop(), name="replica poll")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "replica %s lost its registry (%s): giving up its chats, registering again", self.replica_id, exc
                )
                await self._lose_everything()
                await self._register_again()

    def _renewed(self, still: dict[str, int], started: float) -> None:
        self._alive_until = started + self.idle_seconds
        for key, fence in list(self._held.items()):
            if still.get(key) == fence:
                self._until[key] = max(self._until.get(key, 0.0), started + self.lease_seconds)
            elif self._claimed.get(key, 0.0) < started:
                log.info("chat %s was taken over by another replica", key)
                self._drop(key)

    async def _poll_loop(self) -> None:
        """Every heartbeat: the chats with work left that this replica holds or may claim."""
        while True:
            started = time.monotonic()
            try:
                if self.replica_id:
                    await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("polling the inbox failed (%s); trying again", exc)
            await asyncio.sleep(max(0.0, self.heartbeat - (time.monotonic() - started)))

    async def poll(self) -> None:
        """One poll (the loop runs one every heartbeat)."""
        replica = self.replica_id
        work = await self.db.aread(self.db.read, lambda c: self._sql.chats_to_run(c, replica))
        polled, self._polled = self._polled, {}
        for key, open_ids in work:
            if key in self._held:
                # a chat held here is read again only for an entry no earlier poll saw (its
                # wake-up may be lost): reading every busy chat every poll cost more than its
                # turns. By the set, not the newest id: a late commit can have a lower id.
                if open_ids:
                    self._polled[key] = open_ids
                    if not open_ids <= polled.get(key, frozenset()):
                        self._spawn(self._take_up(key, False))
            elif await self.claim(key):
                self.takeovers += 1
                log.info("replica %s took over chat %s", self.replica_id, key)
                self._spawn(self._take_up(key, True))

    async def settled(self) -> None:
        """Wait for the take-ups started so far (a test's poll, then what it read)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _try_leads(self) -> None:
        for name, on_change in self._leads.items():
            if name not in self._leading and await self.registry.try_lead(name):
                self._leading.add(name)
                log.info("replica %s leads %s", self.replica_id, name)
                self._spawn(on_change(True))

    async def _take_up(self, key: str, fresh: bool) -> None:
        assert self._host is not None
        try:
            await self._host.take_up(key, fresh)
        except BaseException:
            self._polled.pop(key, None)  # not read: the next poll tries its entries again
            raise

    def _drop(self, key: str) -> None:
        self._held.pop(key, None)
        self._claimed.pop(key, None)
        self._until.pop(key, None)
        if self._host is not None:
            self._host.lease_lost(key)

    async def _lose_everything(self) -> None:
        for key in list(self._held):
            self._drop(key)
        for name in list(self._leading):
            self._leading.discard(name)
            try:
                await self._leads[name](False)
            except Exception:
                log.exception("stopping %s after losing its leadership failed", name)
        self.replica_id = ""
        try:
            await self.registry.close()
        except Exception:
            pass

    async def _register_again(self) -> None:
        while True:
            try:
                started = time.monotonic()
                # A fresh id (Registry.open): the old one's leases are claimable once its lock is
                # gone, so nothing is released here. Nothing here waits for the pool either: the
                # new session must beat within idle_session_timeout, and under a Postgres restart
                # the worker threads are full of work waiting for connections.
                self.replica_id = await self.registry.open()
                self._alive_until = started + self.idle_seconds
                log.info("registered again as replica %s", self.replica_id)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("registering the replica failed (%s); trying again", exc)
                await asyncio.sleep(self.heartbeat)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("replica work failed", exc_info=task.exception())
