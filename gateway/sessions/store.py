"""`SessionStore`: which session a chat is in right now, and when it rolls over.

A session key (gateway.source) maps to one current session id, persisted in the DB table
`session_keys` (mirrored to sessions.json by gateway.sessions.mirrors). On each inbound message the runner
asks `get_or_create(source)`: the store finds the key's session, applies the reset policy (unless
the session has background work running), and starts a new session when needed, returning why so
the person can be told.

Every session move is one transaction here (all or nothing, one commit): a chat's first message and
a reset (create + move the key + end the previous), `/new` (the same), `/resume` (reopen + touch +
move + end) and compression (create the child + its summary + compact and end the parent + move
the key). Each is one method of the storage face (gateway/storage/base.py `amove_key`,
`aswitch_key`, `acontinue_in_child`): the store composes no SQL of its own.

Concurrency: the runner holds `store.lock(key)` for a whole turn, so one chat runs one turn at a
time. `get_or_create` is also single-flight per key on its own: two concurrent calls for a new key
create one session. Writes go through the DB's async methods. The hot path's reads (the key's
entry and its session row) are primary-key lookups run inline: a hop to a worker thread costs more
than the read itself, and under load it also waits for the GIL.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from gateway.db import StorageFace, UnknownSession, new_session_id
from gateway.language import _
from gateway.sessions.reset import ResetPolicies
from gateway.source import SessionSource, build_session_key

__all__ = ["SessionStore", "SessionEntry", "SessionLookup", "ResetNotice", "SUMMARY_PREFIX"]

log = logging.getLogger(__name__)

# The first message of a session continued by compression (the summary follows it).
SUMMARY_PREFIX = "Summary of the earlier part of this conversation (continued from session {parent}):\n\n"
# What a compressed session's child carries over from it.
_CARRIED = ("user_id", "session_key", "chat_id", "chat_type", "chat_name", "thread_id", "user_name", "model")


@dataclass(frozen=True)
class SessionEntry:
    session_key: str
    session_id: str
    origin: SessionSource | None
    created_at: float
    updated_at: float
    reason: str | None

    @classmethod
    def from_row(cls, row: dict) -> "SessionEntry":
        origin = None
        if row.get("origin"):
            try:
                origin = SessionSource.from_dict(row["origin"])
            except (TypeError, ValueError):  # an entry written by another version: keep the key usable
                origin = None
        return cls(
            row["session_key"], row["session_id"], origin, row["created_at"], row["updated_at"], row.get("reason")
        )


@dataclass(frozen=True)
class ResetNotice:
    reason: str  # "idle" | "daily"
    previous_session_id: str
    previous_title: str | None
    previous_last_active: float | None = None

    def text(self) -> str:
        """What the runner tells the person when the conversation rolled over."""
        ref = self.previous_title or self.previous_session_id
        if self.reason == "idle":
            return _(
                "Started a new conversation: the previous one had been idle for a while. "
                "To continue the previous one, send /resume {ref}",
                ref=ref,
            )
        if self.reason == "daily":
            return _(
                "Started a new conversation: it is a new day. To continue the previous one, send /resume {ref}",
                ref=ref,
            )
        return _(
            "Started a new conversation: the previous one was reset ({reason}). "
            "To continue the previous one, send /resume {ref}",
            reason=self.reason,
            ref=ref,
        )


@dataclass(frozen=True)
class SessionLookup:
    entry: SessionEntry
    created: bool
    reset: ResetNotice | None


class SessionStore:
    def __init__(
        self,
        db: StorageFace,
        policies: ResetPolicies | None = None,
        *,
        group_sessions_per_user: bool = True,
        thread_sessions_per_user: bool = False,
        clock: Callable[[], float] = time.time,
        is_busy: Callable[[str], bool] = lambda session_id: False,
    ) -> None:
        self.db = db
        self.policies = policies or ResetPolicies()
        self.group_sessions_per_user = group_sessions_per_user
        self.thread_sessions_per_user = thread_sessions_per_user
        self.clock = clock
        self.is_busy = is_busy
        # A lock lives as long as someone holds or awaits it; idle keys cost nothing.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._inflight: dict[str, asyncio.Future] = {}

    # -- keys and locks --------------------------------------------------------------------------
    def key_for(self, source: SessionSource) -> str:
        return build_session_key(source, self.group_sessions_per_user, self.thread_sessions_per_user)

    def lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    @property
    def live_locks(self) -> int:
        return len(self._locks)

    # -- reads -----------------------------------------------------------------------------------
    def get(self, key: str) -> SessionEntry | None:
        row = self.db.get_key_entry(key)
        return SessionEntry.from_row(row) if row else None

    def entries(self) -> list[SessionEntry]:
        return [SessionEntry.from_row(row) for row in self.db.list_key_entries()]

    def _current(self, key: str) -> tuple[dict | None, dict | None]:
        """The key's entry and its session row (one primary-key lookup)."""
        return self.db.get_key_entry_and_session(key)

    # -- the hot path ----------------------------------------------------------------------------
    async def get_or_create(self, source: SessionSource, model: str | None = None) -> SessionLookup:
        """The key's current session, starting one if there is none or the policy says it is over."""
        key = self.key_for(source)
        while (pending := self._inflight.get(key)) is not None:
            try:
                leader = await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and task is not None and not task.cancelling():
                    continue  # the leader was cancelled, not us: try again ourselves
                raise
            # Joined someone else's lookup: they created / reset and will tell the person.
            return SessionLookup(leader.entry, created=False, reset=None)

        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved"
        self._inflight[key] = future
        try:
            result = await self._get_or_create(key, source, model)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            future.set_result(result)
            return result
        finally:
            if self._inflight.get(key) is future:
                del self._inflight[key]

    async def _get_or_create(self, key: str, source: SessionSource, model: str | None) -> SessionLookup:
        entry, session = self._current(key)
        if entry and session and session.get("ended_at") is None:
            policy = self.policies.for_source(source)
            last_active = float(session["last_active_at"])
            reason = policy.should_reset(last_active, self.clock())
            if reason is None or self.is_busy(session["id"]):
                return SessionLookup(SessionEntry.from_row(entry), created=False, reset=None)
            new_entry = await self._start(key, source, model, reason=reason, previous=session["id"])
            notice = ResetNotice(reason, session["id"], session.get("title"), last_active)
            return SessionLookup(new_entry, created=True, reset=notice)
        # No entry, its session was deleted, or it was ended elsewhere: start afresh, quietly.
        new_entry = await self._start(key, source, model, reason="created", previous=None)
        return SessionLookup(new_entry, created=True, reset=None)

    async def _start(
        self,
        key: str,
        source: SessionSource,
        model: str | None,
        reason: str,
        previous: str | None,
        title: str | None = None,
    ) -> SessionEntry:
        """Create a session, point the key at it and end the previous one, in one transaction
        (a crash leaves either the old session current and intact, or the new one)."""
        now = self.clock()
        session_id = new_session_id(now)
        fields: dict[str, Any] = {
            "user_id": source.person_id,
            "session_key": key,
            "chat_id": source.chat_id,
            "chat_type": source.chat_type,
            "chat_name": source.chat_name,
            "thread_id": source.thread_id,
            "user_name": source.user_name,
            "started_at": now,
        }
        if model:
            fields["model"] = model
        if title:
            fields["title"] = title
        row = await self.db.amove_key(
            key, session_id, source.to_dict(), reason, create=(source.platform.value, fields), end_previous=previous
        )
        return SessionEntry.from_row(row)

    async def _end(self, session_id: str, reason: str) -> None:
        try:
            await self.db.aend_session(session_id, reason)
        except UnknownSession:  # deleted meanwhile: nothing to end
            pass

    # -- commands --------------------------------------------------------------------------------
    # The runner calls these while holding `lock(key)`, so they do not race a turn of the same chat.
    async def reset(self, source: SessionSource, reason: str = "new", title: str | None = None) -> SessionEntry:
        """`/new`: end the current session (if any) and start a fresh one."""
        key = self.key_for(source)
        entry, _ = self._current(key)
        previous = entry["session_id"] if entry else None
        return await self._start(key, source, None, reason=reason, previous=previous, title=title)

    async def switch(self, source: SessionSource, session_id: str, reason: str = "resume") -> SessionEntry:
        """`/resume`: point the key at an existing session, reopening it, ending the one it leaves,
        and counting the move as the session's activity (an idle-reset policy would otherwise end
        the resumed session on the very next message: its last activity is old by definition).
        One transaction. Raises UnknownSession."""
        key = self.key_for(source)
        target = await self.db.aread(self.db.get_session, session_id)
        if target is None:
            raise UnknownSession(session_id)
        entry, _ = self._current(key)
        previous = entry["session_id"] if entry else None
        row = await self.db.aswitch_key(
            key,
            session_id,
            source.to_dict(),
            reason,
            now=self.clock(),
            reopen=target.get("ended_at") is not None,
            end_previous=previous,
        )
        return SessionEntry.from_row(row)

    async def compress(
        self,
        session_id: str,
        summarise: Callable[[list[dict[str, Any]]], Awaitable[str]],
        *,
        key: str | None = None,
        origin: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> str:
        """Continue `session_id` in a child session that starts from a summary; returns the child's id.

        `summarise(conversation)` is awaited before anything is written (a failed model call changes
        nothing). Then, in ONE transaction: the child is created (same source, key, chat and person;
        title "x" -> "x #2"), its first message is the summary (role "system": the agent loop folds
        it into its system prompt), the summarised messages of the parent are marked compacted
        (hidden from the conversation, still searchable), the parent ends with reason "compressed",
        and the key (`key`, else the parent's own) moves to the child if it still points at the
        parent. Raises UnknownSession, or ValueError when there is nothing to compress."""
        db = self.db
        session = await db.aread(db.get_session, session_id)
        if session is None:
            raise UnknownSession(session_id)
        messages = await db.aread(db.get_messages, session_id)
        if not messages:
            raise ValueError(f"session {session_id} has no messages to compress")
        conversation = await db.aread(db.get_messages_as_conversation, session_id)
        summary = await summarise(conversation)

        child = new_session_id(self.clock())
        title = session.get("title")
        fields = {k: session[k] for k in _CARRIED if session.get(k) is not None}
        if model:
            fields["model"] = model
        if title:
            fields["title"] = await db.aread(db.next_lineage_title, title)
        key = key or session.get("session_key")
        await db.acontinue_in_child(
            session_id,
            child,
            session["source"],
            fields,
            SUMMARY_PREFIX.format(parent=session_id) + summary,
            messages[-1]["id"],
            key,
            origin,
        )
        log.info("compressed session %s into %s (%d messages)", session_id, child, len(messages))
        return child

    async def suspend(self, source: SessionSource, reason: str = "suspended") -> None:
        """Forget the key's current session; the next message starts a new one."""
        key = self.key_for(source)
        entry, _ = self._current(key)
        await asyncio.to_thread(self.db.delete_key_entry, key)
        if entry:
            await self._end(entry["session_id"], reason)
