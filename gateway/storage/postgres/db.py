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
  rows: a `Conn`, gateway/storage/conn.py), so `db.read(fn)` callers' plain SQL and the shared
  reads of gateway/storage/queries.py run as written;
- a server that went away: the pool's retries of a lost connection give up after
  RECONNECT_SECONDS, and the next request for a connection tries again at once. psycopg's default
  retries with a backoff doubling from 1 s for 5 minutes, so after N seconds down its next try
  came up to N seconds after the server was back (8 s down: 6-9 s more of refused work; 16 s
  down, 15 s). Once those retries have given up (the server is unreachable) a request waits at
  most a moment for a connection instead of psycopg's 30 s, until a connection is made again:
  under load every worker thread sat in that wait while the server was down, each webhook was
  refused only after it, and what queued behind the threads (the lease poll, the claims, the
  storage probe) waited on top (tests/storage/postgres/test_readiness.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

import psycopg
import psycopg_pool
from psycopg import errors

from gateway.redact import redact_dsn
from gateway.storage import fence, queries
from gateway.storage.base import CommitListener, StorageFace
from gateway.storage.conn import Conn
from gateway.storage.events import Events
from gateway.storage.fts import ident_text
from gateway.storage.postgres import notes
from gateway.storage.postgres.connection import Connection, configure, own
from gateway.storage.postgres.dialect import DATABASE_BYTES, POSTGRES
from gateway.storage.postgres.files import DatabaseFiles
from gateway.storage.postgres.schema import current_version, migrate
from gateway.storage.postgres.tokens import words_vector
from gateway.storage.schema import MESSAGE_FIELDS

log = logging.getLogger(__name__)
T = TypeVar("T")
MESSAGE_COLUMNS = ("id", "session_id", "role", "content", *MESSAGE_FIELDS, "active", "compacted")
_SELECT_MESSAGE = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages"
RETRIES = 5  # a write losing a deadlock or serialization race is run again this many times
REBUILD_BATCH = 1000
RECONNECT_SECONDS = 2.0  # a lost connection's retries (after 0 and 1 s) stop here: see the module doc
POOL_WAIT_SECONDS = 30.0  # psycopg's default wait for a connection: a burst beyond the pool's size queues
WAIT_STEP_SECONDS = 1.0  # ...in steps, each ending the wait if the server is unreachable by then


class PostgresSessionDB(StorageFace):
    backend = "postgres"
    dialect = POSTGRES
    notes_in_database = True  # MEMORY.md / USER.md are rows here (notes.py): replicas share them
    mirrors_in_home = False  # replicas share no disk: no transcript files, no sessions.json
    message_select = _SELECT_MESSAGE

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        if not dsn:
            raise ValueError("storage.postgres.dsn is empty")
        self.dsn = dsn
        self.path = redact_dsn(dsn)
        with psycopg.connect(dsn, autocommit=True) as setup:
            migrate(setup, where=self.path)
        self.unreachable = False  # the pool's retries gave up, and no connection was made since
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            # no server-side prepared statements: a generic plan cannot know how rare a tsquery is, and
            # would walk the primary key for a word that is not there (measured: 12 ms vs 0.3 ms)
            kwargs={"autocommit": True, "prepare_threshold": None},
            configure=self._connected,
            reconnect_timeout=RECONNECT_SECONDS,
            reconnect_failed=self._unreachable,
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

    def _point(self, fn: Callable[[Conn], T]) -> T:
        return self._run(fn)

    def _connected(self, raw: psycopg.Connection[Any]) -> None:
        configure(raw)
        if self.unreachable:
            self.unreachable = False
            log.info("the database at %s answers again", self.path)

    def _unreachable(self, pool: psycopg_pool.ConnectionPool) -> None:
        if not self.unreachable:
            self.unreachable = True
            log.warning("the database at %s cannot be reached; requests for a connection fail fast", self.path)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection, as the pool's `connection()`; the wait for one ends early once the
        server is unreachable (see the module doc)."""
        deadline = time.monotonic() + POOL_WAIT_SECONDS
        while True:
            try:
                raw = self._pool.getconn(timeout=min(WAIT_STEP_SECONDS, max(0.01, deadline - time.monotonic())))
                break
            except psycopg_pool.PoolTimeout:
                if self.unreachable or time.monotonic() >= deadline:
                    raise
        try:
            with raw:
                yield raw
        finally:
            self._pool.putconn(raw)

    def _run(self, fn: Callable[[Connection], T]) -> T:
        """fn on a pooled connection in autocommit (each statement its own snapshot)."""
        with self._connection() as raw:
            return fn(Connection(raw))

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run fn(conn) in one read-only snapshot. The BEGIN says so itself: a SET TRANSACTION after
        it was a round trip of its own, one of six in a search."""
        with self._connection() as raw:
            raw.isolation_level, raw.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
            try:
                with raw.transaction():
                    return fn(Connection(raw))
            finally:
                if not raw.closed:  # writes on this pooled connection begin as the server's default
                    raw.isolation_level = raw.read_only = None

    def search_read(self, fn: Callable[[Conn], T]) -> T:
        """`read`: here the word and identifier columns are written with their message, in its
        transaction, so every committed message is already searchable (SQLite defers them)."""
        return self.read(fn)

    def wal_stats(self) -> dict[str, int]:
        """SessionDB's keys, all 0: no WAL file or checkpoints of chinwag's own on Postgres."""
        keys = ("wal_bytes", "wal_peak_bytes", "wal_written_bytes", "checkpoints", "checkpoints_busy")
        return dict.fromkeys(keys, 0)

    def write(self, op: Callable[[Conn, Events], T]) -> T:
        """Run op(conn, events) in one transaction; return once committed. Inside a chat's job the
        chat's fence is checked first, in the same transaction (gateway.storage.fence)."""
        op = fence.bind(op)
        for attempt in range(RETRIES):
            events: Events = []
            try:
                with self._connection() as raw:
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

    async def awrite(self, op: Callable[[Conn, Events], T]) -> T:
        return await asyncio.to_thread(self.write, op)

    def add_commit_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    @property
    def commit_stats(self) -> tuple[int, int]:
        """(commits, writes): one transaction per write here."""
        return self.commits, self.commits

    # -- upkeep ----------------------------------------------------------------------------------
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

            def update(conn: Conn, events: Events) -> None:
                conn.executemany("UPDATE messages SET words = ?::tsvector, idents = ? WHERE id = ?", values)

            self.write(update)
            done += len(batch)
            last = batch[-1][0]
            if progress:
                progress(done)

    # -- MEMORY.md / USER.md (files in the home on SQLite; see notes.py) ---------------------------
    def read_notes(self, name: str) -> str:
        """The text of MEMORY.md or USER.md ("" when never written)."""
        return self._run(lambda c: notes.read(c, name))[0]

    def edit_notes(self, name: str, change: Callable[[str], str | None]) -> int:
        """Replace a notes file's text by change(text), the row locked from read to commit (two
        replicas' edits both land); change may raise to refuse. Returns the file's version."""
        return self.write(lambda conn, events: notes.edit(own(conn), name, change))

    # -- readiness -------------------------------------------------------------------------------
    def ping(self, timeout: float = 2.0) -> int:
        """The schema version, read through the pool within `timeout` seconds; raises when the
        database cannot be reached (`/readyz`, `chinwag doctor`)."""
        with self._pool.connection(timeout=timeout) as raw:
            return int(current_version(Connection(raw)))

    def stats(self) -> dict:
        # no wal_bytes: the server's write-ahead log is its own business, not chinwag's to report
        return {"path": self.path, **self.read(queries.stats)}

    def shared_files(self) -> DatabaseFiles:
        return DatabaseFiles(self)

    def disk_usage(self) -> dict[str, int]:
        return {"db_bytes": int(self._point(lambda conn: conn.execute(DATABASE_BYTES).fetchone()[0]))}
