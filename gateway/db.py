"""`SessionDB`: the SQLite source of truth for sessions and messages.

Writes go through one `GroupCommitWriter` thread (see gateway/writer.py): a write returns once it is
committed, and concurrent writes from many chats share one transaction. Reads use one connection
per thread, so they never wait for the writer (WAL). Sync methods block the calling thread; the
`a…` variants await the same write without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import sqlite3
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from gateway.storage import queries, retention, search, transfer
from gateway.storage.fts import ident_text, index_text
from gateway.storage.schema import MESSAGE_FIELDS, ROLES, SESSION_FIELDS, TITLE_MAX, SchemaTooNew, migrate
from gateway.storage.writer import Checkpointer, CommitListener, GroupCommitWriter

__all__ = ["SessionDB", "UnknownSession", "TitleTaken", "SchemaTooNew", "new_session_id"]

MAX_CONTENT_CHARS = 4_000_000
PREVIEW_CHARS = 200


class UnknownSession(KeyError):
    def __str__(self) -> str:
        return f"no session with id {self.args[0]!r}"


class TitleTaken(ValueError):
    pass


def new_session_id(now: float | None = None) -> str:
    stamp = datetime.fromtimestamp(now if now is not None else time.time(), tz=timezone.utc)
    return f"{stamp:%Y%m%d_%H%M%S}_{secrets.token_hex(4)}"


def sanitize_title(title: str | None) -> str | None:
    if title is None:
        return None
    text = re.sub(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\ufeff]", " ", str(title))
    text = " ".join(text.split())[:TITLE_MAX].strip()
    return text or None


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    for pragma in (
        "busy_timeout = 30000",
        "foreign_keys = ON",
        "synchronous = FULL",  # WAL + FULL: a committed append survives power loss
        "cache_size = -32000",
        "temp_store = MEMORY",
    ):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def mark_seen(conn: sqlite3.Connection, platform: str, event_id: str) -> bool:
    """Remember an inbound event id (in the caller's transaction); True if it was new."""
    return (
        conn.execute(
            "INSERT OR IGNORE INTO processed_events (platform, event_id, seen_at) VALUES (?, ?, ?)",
            (str(platform), str(event_id), time.time()),
        ).rowcount
        == 1
    )


def _json_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class SessionDB:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        if self.path != ":memory:":
            # Owner-only: it holds conversations. SQLite gives the -wal and -shm files the mode
            # of the database file, so making that one 0600 covers all three.
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True, mode=0o700)
            if not os.path.exists(self.path):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        setup = _connect(self.path)
        try:
            setup.execute("PRAGMA journal_mode = WAL")
            migrate(setup, path=self.path)
        finally:
            setup.close()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer = GroupCommitWriter(self._writer_connection)
        self._checkpointer = Checkpointer(lambda: _connect(self.path))
        self._closed = False

    # -- plumbing --------------------------------------------------------------------------------
    def _writer_connection(self) -> sqlite3.Connection:
        conn = _connect(self.path)
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # the Checkpointer thread does it, off the commit path
        return conn

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        self._checkpointer.close()
        with self._readers_lock:
            for conn in self._readers:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._readers.clear()

    def __enter__(self) -> "SessionDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn(conn) on this thread's read connection, in one snapshot."""
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    async def aread(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Await any read method in a worker thread: `await db.aread("get_session", sid)`."""
        return await asyncio.to_thread(getattr(self, method), *args, **kwargs)

    def write(self, op: Callable[[sqlite3.Connection, list], Any]) -> Any:
        """Run op(conn, events) in the writer's transaction; return once committed."""
        return self._writer.submit(op).result()

    async def awrite(self, op: Callable[[sqlite3.Connection, list], Any]) -> Any:
        return await self._writer.submit_async(op)

    def add_commit_listener(self, listener: CommitListener) -> None:
        self._writer.add_listener(listener)

    @property
    def commit_stats(self) -> tuple[int, int]:
        """(commits, writes): writes / commits is the group-commit batching factor."""
        return self._writer.batches, self._writer.ops

    # -- sessions: writes ------------------------------------------------------------------------
    def op_create_session(self, session_id: str, source: str, fields: dict) -> Callable:
        unknown = set(fields) - set(SESSION_FIELDS)
        if unknown:
            raise TypeError(f"unknown session field(s): {', '.join(sorted(unknown))}")
        if not session_id or not isinstance(session_id, str):
            raise ValueError("session_id must be a non-empty string")
        values = dict(fields)
        if "title" in values:
            values["title"] = sanitize_title(values["title"])
        now = time.time()
        started = float(values.pop("started_at", None) or now)
        source = str(getattr(source, "value", source))

        def op(conn: sqlite3.Connection, events: list) -> None:
            cols = ["id", "source", "started_at", "last_active_at", *values]
            params = [session_id, source, started, started, *values.values()]
            updates = ", ".join(["source = excluded.source", *(f"{c} = excluded.{c}" for c in values)])
            try:
                conn.execute(
                    f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
                    f"ON CONFLICT(id) DO UPDATE SET {updates}",
                    params,
                )
            except sqlite3.IntegrityError as exc:
                raise TitleTaken(f"title {values.get('title')!r} is already used") from exc
            if values.get("user_id"):
                conn.execute(
                    "INSERT OR IGNORE INTO session_participants (session_id, user_id) VALUES (?, ?)",
                    (session_id, values["user_id"]),
                )
            events.append(("session", {"id": session_id}))

        return op

    def create_session(self, session_id: str, source: str, **fields: Any) -> None:
        self.write(self.op_create_session(session_id, source, fields))

    async def acreate_session(self, session_id: str, source: str, **fields: Any) -> None:
        await self.awrite(self.op_create_session(session_id, source, fields))

    def _update_session(self, session_id: str, sql: str, params: Iterable) -> Callable:
        def op(conn: sqlite3.Connection, events: list) -> None:
            if conn.execute(sql, (*params, session_id)).rowcount == 0:
                raise UnknownSession(session_id)
            events.append(("session", {"id": session_id}))

        return op

    def _op_end(self, session_id: str, reason: str) -> Callable:
        return self._update_session(
            session_id, "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ?", (time.time(), reason)
        )

    def end_session(self, session_id: str, reason: str = "ended") -> None:
        self.write(self._op_end(session_id, reason))

    async def aend_session(self, session_id: str, reason: str = "ended") -> None:
        await self.awrite(self._op_end(session_id, reason))

    def _op_reopen(self, session_id: str) -> Callable:
        return self._update_session(
            session_id, "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", ()
        )

    def reopen_session(self, session_id: str) -> None:
        self.write(self._op_reopen(session_id))

    def _op_tokens(self, session_id: str, input_tokens: int, output_tokens: int) -> Callable:
        return self._update_session(
            session_id,
            "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
            (int(input_tokens or 0), int(output_tokens or 0)),
        )

    def add_tokens(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.write(self._op_tokens(session_id, input_tokens, output_tokens))

    async def aadd_tokens(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        await self.awrite(self._op_tokens(session_id, input_tokens, output_tokens))

    def set_title(self, session_id: str, title: str | None) -> str | None:
        clean = sanitize_title(title)

        def op(conn: sqlite3.Connection, events: list) -> str | None:
            try:
                changed = conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id)).rowcount
            except sqlite3.IntegrityError:
                raise TitleTaken(f"another session is already titled {clean!r}") from None
            if not changed:
                raise UnknownSession(session_id)
            events.append(("session", {"id": session_id}))
            return clean

        return self.write(op)

    # -- messages: writes ------------------------------------------------------------------------
    def op_append(
        self, session_id: str, role: str, content: Any, fields: dict, seen_event: tuple[str, str] | None = None
    ) -> Callable:
        """The write of one message; `seen_event` = (platform, event id) is marked seen in the same
        transaction (see gateway.sessions.dedup)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        unknown = set(fields) - set(MESSAGE_FIELDS)
        if unknown:
            raise TypeError(f"unknown message field(s): {', '.join(sorted(unknown))}")
        if content is not None and not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        if content is not None and len(content) > MAX_CONTENT_CHARS:
            raise ValueError(f"message content is {len(content):,} characters; the limit is {MAX_CONTENT_CHARS:,}")
        row = {k: fields.get(k) for k in MESSAGE_FIELDS}
        row["tool_calls"] = _json_or_none(row["tool_calls"])
        row["timestamp"] = float(row["timestamp"] or time.time())
        words, idents = index_text(content), ident_text(content)  # computed off the writer thread
        preview = " ".join(content.split())[:PREVIEW_CHARS] if role == "user" and content else None

        def op(conn: sqlite3.Connection, events: list) -> int:
            updated = conn.execute(
                "UPDATE sessions SET last_active_at = MAX(last_active_at, ?), "
                "message_count = message_count + 1, preview = COALESCE(preview, ?) WHERE id = ?",
                (row["timestamp"], preview, session_id),
            ).rowcount
            if not updated:
                raise UnknownSession(session_id)
            cur = conn.execute(
                f"INSERT INTO messages (session_id, role, content, {', '.join(MESSAGE_FIELDS)}) "
                f"VALUES (?, ?, ?, {', '.join('?' * len(MESSAGE_FIELDS))})",
                (session_id, role, content, *row.values()),
            )
            message_id = cur.lastrowid
            if words:
                conn.execute("INSERT INTO messages_fts (rowid, content) VALUES (?, ?)", (message_id, words))
            if idents:
                conn.execute("INSERT INTO messages_ident (rowid, content) VALUES (?, ?)", (message_id, idents))
            if role == "user" and row["user_id"]:
                conn.execute(
                    "INSERT OR IGNORE INTO session_participants (session_id, user_id) VALUES (?, ?)",
                    (session_id, row["user_id"]),
                )
            if seen_event is not None:
                mark_seen(conn, *seen_event)
            events.append(
                (
                    "message",
                    {
                        "id": message_id,
                        "session_id": session_id,
                        "role": role,
                        "content": content,
                        **row,
                        "active": 1,
                        "compacted": 0,
                    },
                )
            )
            return message_id

        return op

    def append_message(
        self, session_id: str, role: str, content: Any, *, seen_event: tuple[str, str] | None = None, **fields: Any
    ) -> int:
        return self.write(self.op_append(session_id, role, content, fields, seen_event))

    async def aappend_message(
        self, session_id: str, role: str, content: Any, *, seen_event: tuple[str, str] | None = None, **fields: Any
    ) -> int:
        return await self.awrite(self.op_append(session_id, role, content, fields, seen_event))

    def _flag_op(self, session_id: str, where: str, params: tuple, active: int, compacted: int | None) -> Callable:
        def op(conn: sqlite3.Connection, events: list) -> int:
            sets = "active = ?" + (", compacted = ?" if compacted is not None else "")
            values = (active,) if compacted is None else (active, compacted)
            changed = conn.execute(
                f"UPDATE messages SET {sets} WHERE session_id = ? AND active = 1 {where}",
                (*values, session_id, *params),
            ).rowcount
            if changed:
                conn.execute(
                    "UPDATE sessions SET message_count = MAX(0, message_count - ?) WHERE id = ?",
                    (changed, session_id),
                )
                events.append(("rewrite", {"session_id": session_id}))
            return changed

        return op

    def rewind(self, session_id: str, exchanges: int = 1) -> int:
        """`/undo`: hide the last `exchanges` user turns and all that followed. They stay stored."""
        exchanges = max(1, int(exchanges))

        def op(conn: sqlite3.Connection, events: list) -> int:
            users = conn.execute(
                "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND role = 'user' "
                "ORDER BY id DESC LIMIT ?",
                (session_id, exchanges),
            ).fetchall()
            if not users:
                return 0
            return self._flag_op(session_id, "AND id >= ?", (users[-1]["id"],), 0, None)(conn, events)

        return self.write(op)

    def supersede_after(self, session_id: str, message_id: int) -> int:
        """`/retry`: hide what followed `message_id` from the conversation; it stays searchable."""
        return self.write(self._flag_op(session_id, "AND id > ?", (int(message_id),), 0, 1))

    def mark_compacted(self, session_id: str, up_to_id: int | None = None) -> int:
        where, params = ("AND id <= ?", (int(up_to_id),)) if up_to_id is not None else ("", ())
        return self.write(self._flag_op(session_id, where, params, 0, 1))

    # -- deletion and retention, in gateway/retention.py ------------------------------------------
    def delete_session(self, session_id: str) -> bool:
        return self.write(retention.delete_op(session_id))

    def prune(self, older_than_days: float, keep: Iterable[str] = ()) -> int:
        """Delete sessions whose last activity is older than the cutoff (not those in `keep`), and
        forget seen event ids past their redelivery window."""
        deleted = retention.prune(self, older_than_days, keep)
        retention.forget_seen_events(self)
        return deleted

    def optimize(self) -> None:
        """Merge FTS segments and refresh the planner's statistics."""
        self.write(retention.optimize_op)

    def vacuum(self) -> None:
        # VACUUM cannot run inside the writer's transaction; use a private connection.
        retention.vacuum(_connect(self.path))

    def rebuild_fts(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild both full-text indexes from messages.content (after a tokenizer change)."""
        return self.write(retention.rebuild_fts_op(progress))

    # -- routing entries and inbound de-duplication ---------------------------------------------
    def _op_set_key(self, session_key: str, session_id: str, origin: dict | None, reason: str | None) -> Callable:
        now = time.time()

        def op(conn: sqlite3.Connection, events: list) -> None:
            conn.execute(
                "INSERT INTO session_keys (session_key, session_id, origin, created_at, updated_at, reason) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(session_key) DO UPDATE SET "
                "session_id = excluded.session_id, origin = COALESCE(excluded.origin, origin), "
                "updated_at = excluded.updated_at, reason = excluded.reason",
                (session_key, session_id, _json_or_none(origin), now, now, reason),
            )
            events.append(("key", self._key_row(conn, session_key)))

        return op

    def set_key_entry(
        self, session_key: str, session_id: str, origin: dict | None = None, reason: str | None = None
    ) -> None:
        self.write(self._op_set_key(session_key, session_id, origin, reason))

    async def aset_key_entry(
        self, session_key: str, session_id: str, origin: dict | None = None, reason: str | None = None
    ) -> None:
        await self.awrite(self._op_set_key(session_key, session_id, origin, reason))

    async def amove_key(
        self,
        session_key: str,
        session_id: str,
        origin: dict | None = None,
        reason: str | None = None,
        *,
        create: tuple[str, dict] | None = None,
        reopen: bool = False,
        end_previous: str | None = None,
    ) -> dict:
        """Point a key at a session in ONE transaction: create it first (`create` = (source,
        fields)) or reopen it, then move the key, then end the previous session with `reason`.
        All or nothing, and one commit instead of three on the path of a chat's first message.
        Returns the key entry."""
        steps = []
        if create is not None:
            steps.append(self.op_create_session(session_id, create[0], dict(create[1])))
        elif reopen:
            steps.append(self._op_reopen(session_id))
        steps.append(self._op_set_key(session_key, session_id, origin, reason))
        end = self._op_end(end_previous, reason or "ended") if end_previous and end_previous != session_id else None

        def op(conn: sqlite3.Connection, events: list) -> dict:
            for step in steps:
                step(conn, events)
            if end is not None:
                try:
                    end(conn, events)
                except UnknownSession:  # deleted meanwhile: nothing to end
                    pass
            return self._key_row(conn, session_key)

        return await self.awrite(op)

    def delete_key_entry(self, session_key: str) -> None:
        def op(conn: sqlite3.Connection, events: list) -> None:
            if conn.execute("DELETE FROM session_keys WHERE session_key = ?", (session_key,)).rowcount:
                events.append(("key_deleted", {"session_key": session_key}))

        self.write(op)

    def mark_event_seen(self, platform: str, event_id: str) -> bool:
        """True the first time this (platform, event id) is seen; persisted across restarts."""
        return self.write(lambda conn, events: mark_seen(conn, platform, event_id))

    async def amark_event_seen(self, platform: str, event_id: str) -> bool:
        return await self.awrite(lambda conn, events: mark_seen(conn, platform, event_id))

    # -- the import/export format (DESIGN §10), in gateway/transfer.py -------------------------
    def import_records(self, records: list[dict], skip_existing: bool = False) -> int:
        """Import `{"session": {...}, "messages": [...]}` records in one transaction: all or nothing."""
        return self.write(transfer.import_op(self, records, skip_existing))

    def export_session(self, session_id: str) -> dict:
        """`{"session": {...}, "messages": [...]}` with every row (hidden ones and flags included)."""

        def snapshot(conn: sqlite3.Connection) -> dict:
            session = self.session_row(conn, session_id)
            if session is None:
                raise UnknownSession(session_id)
            return transfer.export_record(conn, session)

        return self.read(snapshot)

    # -- reads -----------------------------------------------------------------------------------
    @staticmethod
    def session_row(conn: sqlite3.Connection, session_id: str) -> dict | None:
        return queries.session_row(conn, session_id)

    @staticmethod
    def _key_row(conn: sqlite3.Connection, session_key: str) -> dict | None:
        return queries.key_row(conn, session_key)

    def get_session(self, session_id: str) -> dict | None:
        return self.session_row(self._reader(), session_id)

    def get_key_entry(self, session_key: str) -> dict | None:
        return self._key_row(self._reader(), session_key)

    def get_key_entry_and_session(self, session_key: str) -> tuple[dict | None, dict | None]:
        return queries.key_row_with_session(self._reader(), session_key)

    def is_event_seen(self, platform: str, event_id: str) -> bool:
        return queries.event_seen(self._reader(), str(platform), str(event_id))

    def list_key_entries(self) -> list[dict]:
        return queries.key_rows(self._reader())

    def find_session(self, ref: str) -> dict | None:
        """An exact id, a unique id prefix (>= 6 characters), or an exact title (any case)."""
        return queries.find_session(self._reader(), ref)

    def list_sessions_rich(
        self,
        source: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
        exclude_sources: Iterable[str] | None = None,
        titled_only: bool = False,
    ) -> list[dict]:
        """Sessions by last activity: title, source, times, message count, first-message preview."""
        return queries.list_sessions(self._reader(), source, user_id, limit, offset, exclude_sources, titled_only)

    def get_messages(self, session_id: str, include_inactive: bool = False) -> list[dict]:
        sql = "SELECT * FROM messages WHERE session_id = ?" + ("" if include_inactive else " AND active = 1")
        return [dict(r) for r in self._reader().execute(sql + " ORDER BY id", (session_id,))]

    def get_messages_as_conversation(self, session_id: str) -> list[dict]:
        out = []
        for row in self.get_messages(session_id):
            msg: dict[str, Any] = {"role": row["role"], "content": row["content"]}
            if row["tool_calls"]:
                try:
                    msg["tool_calls"] = json.loads(row["tool_calls"])
                except ValueError:
                    pass
            if row["role"] == "tool":
                msg["tool_call_id"] = row["tool_call_id"]
                if row["tool_name"]:
                    msg["name"] = row["tool_name"]
            out.append(msg)
        return out

    def search_messages(
        self,
        query: str,
        role_filter: Iterable[str] | None = None,
        exclude_sources: Iterable[str] | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict]:
        return self.read(lambda conn: search.search_messages(conn, query, role_filter, exclude_sources, limit, offset))

    def session_participants(self, session_id: str) -> set[str]:
        rows = self._reader().execute("SELECT user_id FROM session_participants WHERE session_id = ?", (session_id,))
        return {r[0] for r in rows}

    def children(self, session_id: str) -> list[str]:
        return queries.children(self._reader(), session_id)

    def get_root(self, session_id: str) -> str:
        """The first session of a compression/delegation chain. A cycle stops the walk."""
        return queries.root_of(self._reader(), session_id)

    def get_lineage(self, session_id: str) -> list[str]:
        """The whole chain `session_id` belongs to: its root and every descendant, root first."""
        return queries.chain_of(self._reader(), session_id)

    def title_exists(self, title: str) -> bool:
        return queries.title_exists(self._reader(), title)

    def next_lineage_title(self, title: str) -> str:
        """ "x" -> "x #2", "x #2" -> "x #3", skipping numbers already taken."""
        return queries.next_lineage_title(self._reader(), title)

    def count_sessions(self) -> int:
        return self._reader().execute("SELECT COUNT(*) FROM sessions").fetchone()[0]

    def count_messages(self) -> int:
        return self._reader().execute("SELECT COUNT(*) FROM messages").fetchone()[0]

    def stats(self) -> dict:
        return {"path": self.path, **queries.stats(self._reader())}
