"""`PostgresSessionDB`: gateway/db.py's SessionDB face over PostgreSQL (`storage.backend: postgres`).

The same public methods, arguments, results, errors and commit events, so everything above
storage runs on either. What differs is plumbing, each for a reason:
- writes: each op runs in its own transaction on a pooled connection, from the caller's thread
  (the `a…` variants in a worker thread). No group-commit writer: Postgres commits concurrent
  transactions together itself (its WAL flush covers every commit waiting on it), and several
  replicas write at once anyway. A write that loses a deadlock or serialization race is run again
  (ops are plain SQL over their own arguments). Commit listeners hear each commit, one at a time;
- reads: a pooled connection in autocommit; `read(fn)` gives fn one REPEATABLE READ READ ONLY
  snapshot, as SessionDB gives one WAL snapshot;
- every connection is gateway/storage/postgres/connection.py's (`?` placeholders, sqlite3-shaped
  rows), so `db.read(fn)` callers' plain SQL and the shared reads of gateway/storage/queries.py run
  as written.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence, TypeVar

import psycopg
import psycopg_pool
from psycopg import errors

from gateway.errors import UnknownSession
from gateway.storage import fence, inbox, media, outbox, queries, retention, transfer
from gateway.storage.events import CommitEvent, Events
from gateway.storage.fts import ident_text
from gateway.storage.media import AttachmentRow
from gateway.storage.postgres import notes, rows, search
from gateway.storage.postgres import queries as pg_queries
from gateway.storage.postgres.connection import Connection, configure
from gateway.storage.postgres.schema import current_version, migrate
from gateway.storage.postgres.tokens import words_vector
from gateway.storage.queries import Session
from gateway.storage.schema import IN_CONVERSATION, MESSAGE_FIELDS

log = logging.getLogger(__name__)
T = TypeVar("T")
CommitListener = Callable[[list[CommitEvent]], None]
MESSAGE_COLUMNS = ("id", "session_id", "role", "content", *MESSAGE_FIELDS, "active", "compacted")
_SELECT_MESSAGE = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages"
RETRIES = 5  # a write losing a deadlock or serialization race is run again this many times
REBUILD_BATCH = 1000


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for messages and `stats()["path"]`."""
    dsn = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn)
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", dsn)


class PostgresSessionDB:
    backend = "postgres"
    ops = rows  # the write ops of this backend (the store composes them into one write)

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        if not dsn:
            raise ValueError("storage.postgres.dsn is empty")
        self.dsn = dsn
        self.path = redact_dsn(dsn)
        with psycopg.connect(dsn, autocommit=True) as setup:
            migrate(setup, where=self.path)
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            # no server-side prepared statements: a generic plan cannot know how rare a tsquery is, and
            # would walk the primary key for a word that is not there (measured: 12 ms vs 0.3 ms)
            kwargs={"autocommit": True, "prepare_threshold": None},
            configure=configure,
            open=True,
            name="chinwag-pg",
        )
        self._listeners: list[CommitListener] = []
        self._notify = threading.Lock()
        self._stats = threading.Lock()
        self.commits = 0
        self._closed = False

    # -- plumbing --------------------------------------------------------------------------------
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()

    def __enter__(self) -> "PostgresSessionDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, fn: Callable[[Connection], T]) -> T:
        """fn on a pooled connection in autocommit (each statement its own snapshot)."""
        with self._pool.connection() as raw:
            return fn(Connection(raw))

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run fn(conn) in one read-only snapshot. The BEGIN says so itself: a SET TRANSACTION after
        it was a round trip of its own, one of six in a search."""
        with self._pool.connection() as raw:
            raw.isolation_level, raw.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
            try:
                with raw.transaction():
                    return fn(Connection(raw))
            finally:
                if not raw.closed:  # writes on this pooled connection begin as the server's default
                    raw.isolation_level = raw.read_only = None

    def search_read(self, fn: Callable[[Connection], T]) -> T:
        """`read`: here the word and identifier columns are written with their message, in its
        transaction, so every committed message is already searchable (SQLite defers them)."""
        return self.read(fn)

    def wal_bytes(self) -> int:
        """0: the server manages its own write-ahead log (SessionDB reports its WAL file)."""
        return 0

    def wal_stats(self) -> dict[str, int]:
        """SessionDB's keys, all 0: no WAL file or checkpoints of chinwag's own on Postgres."""
        keys = ("wal_bytes", "wal_peak_bytes", "wal_written_bytes", "checkpoints", "checkpoints_busy")
        return dict.fromkeys(keys, 0)

    async def aread(self, read: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self, read) if isinstance(read, str) else read
        return await asyncio.to_thread(fn, *args, **kwargs)

    def write(self, op: Callable[[Connection, Events], T]) -> T:
        """Run op(conn, events) in one transaction; return once committed. Inside a chat's job the
        chat's fence is checked first, in the same transaction (gateway.storage.fence)."""
        op = fence.bind(op)
        for attempt in range(RETRIES):
            events: Events = []
            try:
                with self._pool.connection() as raw:
                    with raw.transaction():
                        result = op(Connection(raw), events)
                break
            except (errors.DeadlockDetected, errors.SerializationFailure):
                if attempt == RETRIES - 1:
                    raise
        with self._stats:
            self.commits += 1
        if events and self._listeners:
            with self._notify:
                for listener in self._listeners:
                    try:
                        listener(events)
                    except Exception:  # a listener failing must not fail a committed write
                        log.exception("commit listener failed")
        return result

    async def awrite(self, op: Callable[[Connection, Events], T]) -> T:
        return await asyncio.to_thread(self.write, op)

    def add_commit_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    @property
    def commit_stats(self) -> tuple[int, int]:
        """(commits, writes): one transaction per write here."""
        return self.commits, self.commits

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
        after: Callable[[Connection, int], Any] | None = None,
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
        after: Callable[[Connection, int], Any] | None = None,
        **fields: Any,
    ) -> int:
        return await self.awrite(rows.op_append(session_id, role, content, fields, seen_event, attachments, after))

    def rewind(self, session_id: str, exchanges: int = 1) -> int:
        return self.write(rows.op_rewind(session_id, exchanges))

    def supersede_after(self, session_id: str, message_id: int) -> int:
        return self.write(rows.op_supersede_after(session_id, message_id))

    def mark_compacted(self, session_id: str, up_to_id: int | None = None) -> int:
        return self.write(rows.op_mark_compacted(session_id, up_to_id))

    # -- deletion and retention --------------------------------------------------------------------
    def delete_session(self, session_id: str) -> bool:
        return self.write(pg_queries.op_delete(session_id))

    def idle_sessions(self, older_than_days: float) -> list[str]:
        cutoff = retention.prune_cutoff(older_than_days)
        return self._run(lambda c: queries.idle_sessions(c, cutoff))  # type: ignore[arg-type]

    def prune(
        self, older_than_days: float, keep: Iterable[str] = (), *, stop: Callable[[], bool] = lambda: False
    ) -> int:
        deleted = 0
        for batch in retention.prune_batches(self.idle_sessions(older_than_days), keep):
            if stop():
                return deleted
            deleted += self.write(pg_queries.op_delete_batch(batch))
        self.forget_seen_events()
        return deleted

    def forget_seen_events(self) -> int:
        total = 0
        while (n := self.write(pg_queries.op_forget_seen_batch())) > 0:
            total += n
            if n < retention.FORGET_BATCH:
                break
        return total

    def optimize(self) -> None:
        """Refresh the planner's statistics (the word column's target is raised: see schema.py)."""
        self._run(lambda c: c.execute("ANALYZE messages, sessions"))

    def vacuum(self) -> None:
        self._run(lambda c: c.execute("VACUUM (ANALYZE)"))

    def rebuild_fts(self, progress: Callable[[int], None] | None = None) -> int:
        """Recompute the word and identifier columns from messages.content (after a tokenizer
        change), a batch per transaction."""
        done, last = 0, 0
        while True:
            batch = self._run(
                lambda c: c.execute(
                    "SELECT id, content FROM messages WHERE id > ? ORDER BY id LIMIT ?", (last, REBUILD_BATCH)
                ).fetchall()
            )
            if not batch:
                return done
            values = [(words_vector(content), ident_text(content) or None, mid) for mid, content in batch]

            def update(conn: Connection, events: Events) -> None:
                with conn.raw.cursor() as cur:
                    cur.executemany("UPDATE messages SET words = %s::tsvector, idents = %s WHERE id = %s", values)

            self.write(update)
            done += len(batch)
            last = batch[-1][0]
            if progress:
                progress(done)

    # -- MEMORY.md / USER.md (files in the home on SQLite; see notes.py) ---------------------------
    notes_in_database = True

    def read_notes(self, name: str) -> str:
        """The text of MEMORY.md or USER.md ("" when never written)."""
        return self._run(lambda c: notes.read(c, name))[0]

    def edit_notes(self, name: str, change: Callable[[str], str | None]) -> int:
        """Replace a notes file's text by change(text), the row locked from read to commit (two
        replicas' edits both land); change may raise to refuse. Returns the file's version."""
        return self.write(lambda conn, events: notes.edit(conn, name, change))

    # -- readiness -------------------------------------------------------------------------------
    def ping(self, timeout: float = 2.0) -> int:
        """The schema version, read through the pool within `timeout` seconds; raises when the
        database cannot be reached (`/readyz`, `chinwag doctor`)."""
        with self._pool.connection(timeout=timeout) as raw:
            return int(current_version(Connection(raw)))

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
        return await self.awrite(
            rows.op_move_key(
                session_key, session_id, origin, reason, create=create, reopen=reopen, end_previous=end_previous
            )
        )

    def delete_key_entry(self, session_key: str) -> None:
        self.write(rows.op_delete_key(session_key))

    def mark_event_seen(self, platform: str, event_id: str) -> bool:
        return self.write(rows.op_mark_seen(platform, event_id))

    async def amark_event_seen(self, platform: str, event_id: str) -> bool:
        return await self.awrite(rows.op_mark_seen(platform, event_id))

    # -- delivery: the inbox and the outbox (their SQL, gateway/storage/inbox.py and outbox.py, runs
    # here as written: `INSERT ... ON CONFLICT DO NOTHING RETURNING id` is the inbox's dedup) ----
    async def ainbox_add(
        self, platform: str, event_id: str, chat_key: str, message: str, received_at: float
    ) -> int | None:
        """Commit one inbound event; its entry id, or None for a redelivery (the dedup)."""
        return await self.awrite(
            lambda conn, events: inbox.add(conn, platform, event_id, chat_key, message, received_at)  # type: ignore[arg-type]
        )

    async def ainbox_finish(self, entry_ids: Iterable[int], outcome: str = "answered") -> int:
        ids = list(entry_ids)
        return await self.awrite(lambda conn, events: inbox.finish(conn, ids, outcome)) if ids else 0  # type: ignore[arg-type]

    async def aoutbox_record(self, row_id: int, parts_sent: int, platform_ids: list[str], done: bool) -> None:
        with fence.unfenced():  # the parts were sent: refusing their record only sends them twice
            await self.awrite(
                lambda conn, events: outbox.record_parts(conn, row_id, parts_sent, list(platform_ids), done)  # type: ignore[arg-type]
            )

    def message_session(self, message_id: int) -> str | None:
        row = self._run(
            lambda c: c.execute("SELECT session_id FROM messages WHERE id = ?", (int(message_id),)).fetchone()
        )
        return row[0] if row else None

    def inbox_unfinished(self) -> list[dict]:
        return self._run(lambda c: inbox.unfinished(c))  # type: ignore[arg-type]

    def outbox_unsent(self) -> list[dict]:
        return self._run(lambda c: outbox.unsent(c))  # type: ignore[arg-type]

    def inbox_backlog(self) -> int:
        return int(self._run(lambda c: inbox.backlog(c)))  # type: ignore[arg-type]

    def outbox_backlog(self) -> int:
        return int(self._run(lambda c: outbox.backlog(c)))  # type: ignore[arg-type]

    # -- media attachments (gateway/storage/media.py's plain SQL, as written) ---------------------
    def attachments_of(self, message_ids: Iterable[int]) -> dict[int, list[dict]]:
        return self._run(lambda c: media.attachments_of(c, message_ids))  # type: ignore[arg-type]

    def session_attachment(self, session_id: str, sha256: str) -> dict | None:
        """A kept attachment of this session's messages with this file, or None."""
        return self._run(lambda c: media.attachment_in_session(c, session_id, sha256))  # type: ignore[arg-type]

    def referenced_media(self) -> set[str]:
        """Hashes of the files some kept attachment row still needs."""
        return self.read(media.referenced_hashes)  # type: ignore[arg-type]

    def media_bytes(self) -> int:
        return int(self.read(media.stored_bytes))  # type: ignore[arg-type]

    def drop_oldest_media(self, over_bytes: int) -> list[str]:
        """Let go of the oldest files of ended sessions until `over_bytes` are freed (the rows stay,
        marked dropped); returns the hashes no longer needed."""
        return self.write(lambda conn, events: media.drop_oldest_of_ended_sessions(conn, over_bytes))  # type: ignore[arg-type]

    # -- the import/export format (DESIGN §10) --------------------------------------------------
    def import_records(
        self, records: list[dict], skip_existing: bool = False, media_present: Collection[str] | None = None
    ) -> int:
        """`media_present`: the hashes whose files are in the store (others are imported as dropped)."""
        return self.write(transfer.import_op(records, skip_existing, media_present, ops=rows))  # type: ignore[arg-type]

    def export_session(self, session_id: str) -> dict:
        def snapshot(conn: Connection) -> dict:
            session = queries.session_row(conn, session_id)  # type: ignore[arg-type]
            if session is None:
                raise UnknownSession(session_id)
            attachments = transfer.export_attachments(conn, session_id)  # type: ignore[arg-type]
            messages = []
            for row in conn.execute(f"{_SELECT_MESSAGE} WHERE session_id = ? ORDER BY id", (session_id,)):
                msg = {k: v for k, v in dict(row).items() if v is not None and k != "session_id"}
                if "tool_calls" in msg:
                    try:
                        msg["tool_calls"] = json.loads(msg["tool_calls"])
                    except ValueError:
                        pass
                if msg["id"] in attachments:
                    msg["attachments"] = attachments[msg["id"]]
                messages.append(msg)
            return {"session": dict(session), "messages": messages}

        return self.read(snapshot)

    def iter_export(self, batch: int = 200) -> Iterator[dict]:
        """Every session as an export record, oldest first (`sessions migrate`)."""
        ids = self.session_ids()
        for start in range(0, len(ids), batch):
            for sid in ids[start : start + batch]:
                try:
                    yield self.export_session(sid)
                except UnknownSession:  # deleted meanwhile
                    continue

    # -- reads -------------------------------------------------------------------------------------
    def get_session(self, session_id: str) -> Session | None:
        return self._run(lambda c: queries.session_row(c, session_id))  # type: ignore[arg-type]

    def get_key_entry(self, session_key: str) -> dict | None:
        return self._run(lambda c: queries.key_row(c, session_key))  # type: ignore[arg-type]

    def get_key_entry_and_session(self, session_key: str) -> tuple[dict | None, dict | None]:
        return self._run(lambda c: queries.key_row_with_session(c, session_key))  # type: ignore[arg-type]

    def is_event_seen(self, platform: str, event_id: str) -> bool:
        return self._run(lambda c: queries.event_seen(c, str(platform), str(event_id)))  # type: ignore[arg-type]

    def list_key_entries(self) -> list[dict]:
        return self._run(lambda c: queries.key_rows(c))  # type: ignore[arg-type]

    def find_session(self, ref: str) -> Session | None:
        return self._run(lambda c: pg_queries.find_session(c, ref))

    def list_sessions_rich(
        self,
        source: str | None = None,
        user_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
        exclude_sources: Iterable[str] | None = None,
        titled_only: bool = False,
    ) -> list[Session]:
        return self._run(
            lambda c: queries.list_sessions(c, source, user_id, limit, offset, exclude_sources, titled_only)  # type: ignore[arg-type]
        )

    def session_ids(self, source: str | None = None) -> list[str]:
        return self._run(lambda c: queries.session_ids(c, source))  # type: ignore[arg-type]

    def count_by_source(self) -> dict[str, int]:
        return self._run(lambda c: queries.count_by_source(c))  # type: ignore[arg-type]

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
        return self._run(
            lambda c: queries.list_sessions_page(
                c,  # type: ignore[arg-type]
                source=source,
                user_id=user_id,
                titled=titled,
                active_from=active_from,
                active_before=active_before,
                after=after,
                limit=limit,
            )
        )

    def sessions_with_key(self, session_key: str, user_id: str | None = None, limit: int = 50) -> list[dict]:
        """The sessions one conversation key has pointed at, oldest first (its reset history)."""
        return self._run(lambda c: queries.sessions_with_key(c, session_key, user_id, limit))  # type: ignore[arg-type]

    def get_messages_by_id(self, message_ids: Iterable[int]) -> dict[int, dict]:
        return self._run(lambda c: queries.messages_by_id(c, message_ids))  # type: ignore[arg-type]

    def get_messages(self, session_id: str, include_inactive: bool = False) -> list[dict]:
        sql = f"{_SELECT_MESSAGE} WHERE session_id = ?" + ("" if include_inactive else f" AND {IN_CONVERSATION}")
        return self._run(lambda c: [dict(r) for r in c.execute(sql + " ORDER BY id", (session_id,))])

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
        return self.read(lambda c: search.search_messages(c, query, role_filter, exclude_sources, limit, offset))

    def session_participants(self, session_id: str) -> set[str]:
        return self._run(
            lambda c: {
                r[0] for r in c.execute("SELECT user_id FROM session_participants WHERE session_id = ?", (session_id,))
            }
        )

    def children(self, session_id: str) -> list[str]:
        return self._run(lambda c: queries.children(c, session_id))  # type: ignore[arg-type]

    def get_root(self, session_id: str) -> str:
        return self._run(lambda c: queries.root_of(c, session_id))  # type: ignore[arg-type]

    def get_lineage(self, session_id: str) -> list[str]:
        return self._run(lambda c: queries.chain_of(c, session_id))  # type: ignore[arg-type]

    def next_lineage_title(self, title: str) -> str:
        return self._run(lambda c: pg_queries.next_lineage_title(c, title))

    def count_sessions(self) -> int:
        return int(self._run(lambda c: c.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]))

    def count_messages(self) -> int:
        return int(self._run(lambda c: c.execute("SELECT COUNT(*) FROM messages").fetchone()[0]))

    def stats(self) -> dict:
        return {"path": self.path, **self.read(pg_queries.stats), "wal_bytes": self.wal_bytes()}
