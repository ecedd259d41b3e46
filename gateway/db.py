"""`SessionDB`: the SQLite source of truth for sessions and messages, and the face of storage.

Writes go through one `GroupCommitWriter` thread (see gateway/storage/writer.py): a write returns
once it is committed, and concurrent writes from many chats share one transaction. Reads use one
connection per thread, so they never wait for the writer (WAL). Sync methods block the calling
thread; the `a…` variants await the same write without blocking the event loop.

The SQL lives below this face, as functions of a connection: reads in gateway/storage/queries.py,
writes in gateway/storage/rows.py (retention, import/export beside them). This class owns the
connections and the writer and runs those functions on them; it adds no rule of its own.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Collection, Iterable, Sequence, TypeVar

from gateway.errors import SchemaTooNew, TitleTaken, UnknownSession
from gateway.storage import fence, inbox, media, outbox, queries, retention, rows, search, transfer
from gateway.storage.connect import check_synchronous, set_new_page_size
from gateway.storage.connect import connect as _connect
from gateway.storage.events import INDEXER_EVENTS, CommitEvent, WriteOp
from gateway.storage.indexer import DeferredIndex, run_catch_up
from gateway.storage.media import AttachmentRow
from gateway.storage.queries import Session
from gateway.storage.rows import MAX_CONTENT_CHARS, PREVIEW_CHARS, mark_seen, sanitize_title
from gateway.storage.schema import IN_CONVERSATION, ROLES, VISIBLE, current_version, is_visible, migrate, visible_sql
from gateway.storage.writer import CommitListener, GroupCommitWriter, wal_file_bytes

__all__ = [
    "SessionDB",
    "open_db",
    "StorageUnavailable",
    "Session",
    "CommitEvent",
    "UnknownSession",
    "TitleTaken",
    "SchemaTooNew",
    "new_session_id",
    "sanitize_title",
    "mark_seen",
    "MAX_CONTENT_CHARS",
    "PREVIEW_CHARS",
    "ROLES",
    "VISIBLE",
    "visible_sql",
    "is_visible",
    "IN_CONVERSATION",
]

T = TypeVar("T")


def new_session_id(now: float | None = None) -> str:
    stamp = datetime.fromtimestamp(now if now is not None else time.time(), tz=timezone.utc)
    return f"{stamp:%Y%m%d_%H%M%S}_{secrets.token_hex(4)}"


class SessionDB:
    ops = rows  # the write ops of this backend, for callers that compose them into one write (the store)

    def __init__(self, path: str | os.PathLike, synchronous: str = "full", **writer_options: Any) -> None:
        """`synchronous`: "full" (the default: an append returns once on disk) or "normal" (opt-in,
        storage.synchronous; what it risks: gateway/storage/connect.py). `writer_options`:
        GroupCommitWriter's `checkpoint_bytes` and `idle_seconds`."""
        self.path = os.fspath(path)
        self.synchronous = check_synchronous(synchronous)
        if self.path != ":memory:":
            # Owner-only: it holds conversations. SQLite gives the -wal and -shm files the mode
            # of the database file, so making that one 0600 covers all three.
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True, mode=0o700)
            if not os.path.exists(self.path):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        setup = _connect(self.path)
        try:
            set_new_page_size(setup)  # before the WAL switch writes the first page
            setup.execute("PRAGMA journal_mode = WAL")
            migrate(setup, path=self.path)
            run_catch_up(setup)  # messages a crash left unindexed (gateway/storage/indexer.py)
        finally:
            setup.close()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._index = DeferredIndex()
        self._writer = GroupCommitWriter(lambda: _connect(self.path, self.synchronous), **writer_options)
        self._writer.add_listener(self._index.on_commit)
        self._writer.add_upkeep(self._index.upkeep)
        self._writer.add_rider(self._index.rider)
        self._closed = False

    # -- plumbing --------------------------------------------------------------------------------
    def wal_bytes(self) -> int:
        """Size of the write-ahead log file (the writer keeps it bounded)."""
        return wal_file_bytes(self.path) if self.path != ":memory:" else 0

    def wal_stats(self) -> dict[str, int]:
        """The log file's size now, and what the writer did with it (gateway/storage/writer.py)."""
        w = self._writer
        return {
            "wal_bytes": self.wal_bytes(),
            "wal_peak_bytes": w.wal_peak_bytes,
            "wal_written_bytes": w.wal_written_bytes,
            "checkpoints": w.checkpoints,
            "checkpoints_busy": w.checkpoints_busy,
        }

    backend = "sqlite"
    # MEMORY.md / USER.md stay files in the home on SQLite (tools/memory.py); PostgresSessionDB keeps them
    notes_in_database = False

    def ping(self, timeout: float = 2.0) -> int:
        """The schema version, read on this thread's connection; raises when the database file cannot
        be read or its writer has stopped (`/readyz`). `timeout` is for the Postgres face's pool."""
        if self._closed or not self._writer.thread.is_alive():
            raise sqlite3.OperationalError("the database writer has stopped")
        return self.read(current_version)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
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

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn(conn) on this thread's read connection, in one snapshot. For a read that uses
        the full-text indexes, `search_read`."""
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    def search_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`read`, in a snapshot whose full-text indexes hold every message committed so far (the
        indexer fills them in batches after the commit: gateway/storage/indexer.py). Point reads
        use `read`, which never waits for the indexer."""
        if self._index.needed and threading.current_thread() is not self._writer.thread:
            self.write(self._index.catch_up)
        return self.read(fn)

    async def aread(self, read: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Await a read in a worker thread: a bound method (`await db.aread(db.get_session, sid)`,
        which type checkers can follow) or, as callers did before, its name (`"get_session"`)."""
        fn = getattr(self, read) if isinstance(read, str) else read
        return await asyncio.to_thread(fn, *args, **kwargs)

    def write(self, op: WriteOp[T]) -> T:
        """Run op(conn, events) in the writer's transaction; return once committed. Inside a chat's
        job the chat's fence is checked first, in the same transaction (gateway.storage.fence)."""
        return self._writer.submit(fence.bind(op)).result()

    async def awrite(self, op: WriteOp[T]) -> T:
        return await self._writer.submit_async(fence.bind(op))

    def add_commit_listener(self, listener: CommitListener) -> None:
        def public(events: list[CommitEvent]) -> None:  # the indexer's own events stay with it
            shown = [event for event in events if not isinstance(event, INDEXER_EVENTS)]
            if shown:
                listener(shown)

        self._writer.add_listener(public)

    @property
    def commit_stats(self) -> tuple[int, int]:
        """(commits, writes): writes / commits is the group-commit batching factor."""
        return self._writer.batches, self._writer.ops

    # -- sessions: writes ------------------------------------------------------------------------
    def create_session(self, session_id: str, source: str, **fields: Any) -> None:
        self.write(rows.op_create_session(session_id, source, fields))

    async def acreate_session(self, session_id: str, source: str, **fields: Any) -> None:
        await self.awrite(rows.op_create_session(session_id, source, fields))

    def end_session(self, session_id: str, reason: str = "ended") -> None:
        self.write(rows.op_end(session_id, reason))

    async def aend_session(self, session_id: str, reason: str = "ended") -> None:
        await self.awrite(rows.op_end(session_id, reason))

    def reopen_session(self, session_id: str) -> None:
        self.write(rows.op_reopen(session_id))

    def add_tokens(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.write(rows.op_add_tokens(session_id, input_tokens, output_tokens))

    async def aadd_tokens(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
        await self.awrite(rows.op_add_tokens(session_id, input_tokens, output_tokens))

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Set (None: clear) a title; returns it as stored. TitleTaken: another session has it in
        some letter case."""
        return self.write(rows.op_set_title(session_id, title))

    # -- messages: writes ------------------------------------------------------------------------
    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any,
        *,
        seen_event: tuple[str, str] | None = None,
        attachments: Sequence[AttachmentRow] = (),
        after: Callable[[sqlite3.Connection, int], Any] | None = None,
        **fields: Any,
    ) -> int:
        return self.write(rows.op_append(session_id, role, content, fields, seen_event, attachments, after))

    async def aappend_message(
        self,
        session_id: str,
        role: str,
        content: Any,
        *,
        seen_event: tuple[str, str] | None = None,
        attachments: Sequence[AttachmentRow] = (),
        after: Callable[[sqlite3.Connection, int], Any] | None = None,
        **fields: Any,
    ) -> int:
        return await self.awrite(rows.op_append(session_id, role, content, fields, seen_event, attachments, after))

    def rewind(self, session_id: str, exchanges: int = 1) -> int:
        """`/undo`: hide the last `exchanges` user turns and all that followed. They stay stored."""
        return self.write(rows.op_rewind(session_id, exchanges))

    def supersede_after(self, session_id: str, message_id: int) -> int:
        """`/retry`: hide what followed `message_id` from the conversation; it stays searchable."""
        return self.write(rows.op_supersede_after(session_id, message_id))

    def mark_compacted(self, session_id: str, up_to_id: int | None = None) -> int:
        return self.write(rows.op_mark_compacted(session_id, up_to_id))

    # -- deletion and retention, in gateway/storage/retention.py ----------------------------------
    def delete_session(self, session_id: str) -> bool:
        return self.write(retention.op_delete(session_id))

    def idle_sessions(self, older_than_days: float) -> list[str]:
        """Sessions idle for longer than that, longest idle first: what `prune` would delete (but
        for those it is told to keep)."""
        return queries.idle_sessions(self._reader(), retention.prune_cutoff(older_than_days))

    def prune(
        self, older_than_days: float, keep: Iterable[str] = (), *, stop: Callable[[], bool] = lambda: False
    ) -> int:
        """Delete sessions whose last activity is older than the cutoff (not those in `keep`), a batch
        per transaction so chats keep writing meanwhile, and forget seen event ids past their
        redelivery window. `stop()` is asked between batches: a shutdown need not wait for a long
        first prune (the rest is done next time). Returns how many sessions were deleted."""
        idle = queries.idle_sessions(self._reader(), retention.prune_cutoff(older_than_days))
        deleted = 0
        for batch in retention.prune_batches(idle, keep):
            if stop():
                return deleted
            deleted += self.write(retention.op_delete_batch(batch))
        self.forget_seen_events()
        return deleted

    def forget_seen_events(self) -> int:
        """Drop seen inbound event ids older than any platform redelivers, a batch per transaction
        (the first upkeep of a big, old database must not hold the writer for long)."""
        total = 0
        while (n := self.write(retention.op_forget_seen_batch())) > 0:
            total += n
            if n < retention.FORGET_BATCH:
                break
        return total

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
    def set_key_entry(
        self, session_key: str, session_id: str, origin: dict | None = None, reason: str | None = None
    ) -> None:
        self.write(rows.op_set_key(session_key, session_id, origin, reason))

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
        return await self.awrite(
            rows.op_move_key(
                session_key, session_id, origin, reason, create=create, reopen=reopen, end_previous=end_previous
            )
        )

    def delete_key_entry(self, session_key: str) -> None:
        self.write(rows.op_delete_key(session_key))

    def mark_event_seen(self, platform: str, event_id: str) -> bool:
        """True the first time this (platform, event id) is seen; persisted across restarts."""
        return self.write(rows.op_mark_seen(platform, event_id))

    async def amark_event_seen(self, platform: str, event_id: str) -> bool:
        return await self.awrite(rows.op_mark_seen(platform, event_id))

    # -- delivery: the inbox and the outbox (gateway/storage/inbox.py, outbox.py) ---------------
    async def ainbox_add(
        self, platform: str, event_id: str, chat_key: str, message: str, received_at: float
    ) -> int | None:
        """Commit one inbound event; its entry id, or None for a redelivery (the dedup)."""
        return await self.awrite(
            lambda conn, events: inbox.add(conn, platform, event_id, chat_key, message, received_at)
        )

    async def ainbox_finish(self, entry_ids: Iterable[int], outcome: str = "answered") -> int:
        ids = list(entry_ids)
        return await self.awrite(lambda conn, events: inbox.finish(conn, ids, outcome)) if ids else 0

    async def aoutbox_record(self, row_id: int, parts_sent: int, platform_ids: list[str], done: bool) -> None:
        with fence.unfenced():  # the parts were sent: refusing their record only sends them twice
            await self.awrite(
                lambda conn, events: outbox.record_parts(conn, row_id, parts_sent, list(platform_ids), done)
            )

    def message_session(self, message_id: int) -> str | None:
        row = self._reader().execute("SELECT session_id FROM messages WHERE id = ?", (int(message_id),)).fetchone()
        return row[0] if row else None

    def inbox_unfinished(self) -> list[dict]:
        return inbox.unfinished(self._reader())

    def outbox_unsent(self) -> list[dict]:
        return outbox.unsent(self._reader())

    def inbox_backlog(self) -> int:
        return inbox.backlog(self._reader())

    def outbox_backlog(self) -> int:
        return outbox.backlog(self._reader())

    # -- the import/export format (DESIGN §10), in gateway/storage/transfer.py -------------------
    def import_records(
        self, records: list[dict], skip_existing: bool = False, media_present: Collection[str] | None = None
    ) -> int:
        """Import `{"session": {...}, "messages": [...]}` records in one transaction: all or nothing.
        ImportRecordError or TitleTaken (a ValueError both) name the record; nothing is written.
        `media_present`: the hashes whose files are in the store (others are imported as dropped)."""
        return self.write(transfer.import_op(records, skip_existing, media_present))

    def export_session(self, session_id: str) -> dict:
        """`{"session": {...}, "messages": [...]}` with every row (hidden ones and flags included)."""

        def snapshot(conn: sqlite3.Connection) -> dict:
            session = queries.session_row(conn, session_id)
            if session is None:
                raise UnknownSession(session_id)
            return transfer.export_record(conn, dict(session))

        return self.read(snapshot)

    # -- reads, in gateway/storage/queries.py ----------------------------------------------------
    def get_session(self, session_id: str) -> Session | None:
        return queries.session_row(self._reader(), session_id)

    def get_key_entry(self, session_key: str) -> dict | None:
        return queries.key_row(self._reader(), session_key)

    def get_key_entry_and_session(self, session_key: str) -> tuple[dict | None, dict | None]:
        return queries.key_row_with_session(self._reader(), session_key)

    def is_event_seen(self, platform: str, event_id: str) -> bool:
        return queries.event_seen(self._reader(), str(platform), str(event_id))

    def list_key_entries(self) -> list[dict]:
        return queries.key_rows(self._reader())

    def find_session(self, ref: str) -> Session | None:
        """An exact id, a unique id prefix (>= 6 characters), or a title: the exact title first,
        then in any letter case."""
        return queries.find_session(self._reader(), ref)

    def list_sessions_rich(
        self,
        source: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
        exclude_sources: Iterable[str] | None = None,
        titled_only: bool = False,
    ) -> list[Session]:
        """Sessions by last activity (full rows: title, source, times, message count, first-message
        preview ...)."""
        return queries.list_sessions(self._reader(), source, user_id, limit, offset, exclude_sources, titled_only)

    def session_ids(self, source: str | None = None) -> list[str]:
        """Every session id (of one platform), oldest first."""
        return queries.session_ids(self._reader(), source)

    def count_by_source(self) -> dict[str, int]:
        return queries.count_by_source(self._reader())

    def list_sessions_page(
        self,
        *,
        source: str | None = None,
        user_id: str | None = None,
        titled: bool | None = None,
        active_from: float | None = None,
        active_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 50,
    ) -> list[dict]:
        """A keyset page of sessions by last activity (see queries.list_sessions_page)."""
        return queries.list_sessions_page(
            self._reader(),
            source=source,
            user_id=user_id,
            titled=titled,
            active_from=active_from,
            active_before=active_before,
            after=after,
            limit=limit,
        )

    def sessions_with_key(self, session_key: str, user_id: str | None = None, limit: int = 50) -> list[dict]:
        """The sessions one conversation key has pointed at, oldest first (its reset history)."""
        return queries.sessions_with_key(self._reader(), session_key, user_id, limit)

    def get_messages_by_id(self, message_ids: Iterable[int]) -> dict[int, dict]:
        return queries.messages_by_id(self._reader(), message_ids)

    # -- media (files under home/media/, rows in attachments: gateway/storage/media.py) ------------
    def attachments_of(self, message_ids: Iterable[int]) -> dict[int, list[dict]]:
        return media.attachments_of(self._reader(), message_ids)

    def session_attachment(self, session_id: str, sha256: str) -> dict | None:
        """A kept attachment of this session's messages with this file, or None (the console
        serves a file only to who may see a message that has it)."""
        return media.attachment_in_session(self._reader(), session_id, sha256)

    def referenced_media(self) -> set[str]:
        """Hashes of the files some kept attachment row still needs."""
        return self.read(media.referenced_hashes)

    def media_bytes(self) -> int:
        return self.read(media.stored_bytes)

    def drop_oldest_media(self, over_bytes: int) -> list[str]:
        """Let go of the oldest files of ended sessions until `over_bytes` are freed (the rows stay,
        marked dropped); returns the hashes no longer needed."""
        return self.write(lambda conn, events: media.drop_oldest_of_ended_sessions(conn, over_bytes))

    def get_messages(self, session_id: str, include_inactive: bool = False) -> list[dict]:
        sql = "SELECT * FROM messages WHERE session_id = ?" + ("" if include_inactive else f" AND {IN_CONVERSATION}")
        return [dict(r) for r in self._reader().execute(sql + " ORDER BY id", (session_id,))]

    def get_messages_as_conversation(self, session_id: str) -> list[dict]:
        return queries.as_conversation(self.get_messages(session_id))

    def search_messages(
        self,
        query: str,
        role_filter: Iterable[str] | None = None,
        exclude_sources: Iterable[str] | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict]:
        return self.search_read(
            lambda conn: search.search_messages(conn, query, role_filter, exclude_sources, limit, offset)
        )

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

    def next_lineage_title(self, title: str) -> str:
        """ "x" -> "x #2", "x #2" -> "x #3", skipping numbers already taken."""
        return queries.next_lineage_title(self._reader(), title)

    def count_sessions(self) -> int:
        return self._reader().execute("SELECT COUNT(*) FROM sessions").fetchone()[0]

    def count_messages(self) -> int:
        return self._reader().execute("SELECT COUNT(*) FROM messages").fetchone()[0]

    def stats(self) -> dict:
        return {"path": self.path, **queries.stats(self._reader()), "wal_bytes": self.wal_bytes()}


class StorageUnavailable(RuntimeError):
    """The configured database cannot be opened (unreachable server, bad DSN, driver missing)."""


def open_db(
    backend: str = "sqlite", path: str | os.PathLike | None = None, dsn: str = "", synchronous: str = "full"
) -> SessionDB:
    """The storage face for `storage.backend`: SessionDB on the SQLite file at `path`, or
    gateway.storage.postgres's PostgresSessionDB on `dsn` (the same public methods; typed as
    SessionDB for the callers, which use only those). StorageUnavailable says why Postgres could
    not be opened, without the DSN's password."""
    if backend != "postgres":
        if path is None:
            raise ValueError("the sqlite backend needs a path")
        return SessionDB(path, synchronous=synchronous)
    try:
        import psycopg

        from gateway.storage.postgres.db import PostgresSessionDB, redact_dsn
    except ImportError as exc:
        raise StorageUnavailable(
            f"storage.backend is postgres but {exc.name} is not installed (pip install 'chinwag[postgres]')"
        ) from None
    try:
        return PostgresSessionDB(dsn)  # type: ignore[return-value]  # the same face (DESIGN §14)
    except psycopg.Error as exc:
        raise StorageUnavailable(f"cannot open the Postgres database {redact_dsn(dsn)}: {str(exc).strip()}") from None
