"""`SessionDB`: the SQLite source of truth for sessions and messages, and the face of storage
(`SessionDB(path)`, `open_db`: DESIGN §10). Its public methods are gateway/storage/base.py's
`StorageFace`, shared with the Postgres backend; this class adds only SQLite's mechanisms.

Writes go through one `GroupCommitWriter` thread (see gateway/storage/writer.py): a write returns
once it is committed, and concurrent writes from many chats share one transaction. Reads use one
connection per thread, so they never wait for the writer (WAL). Sync methods block the calling
thread; the `a…` variants await the same write without blocking the event loop.

The SQL lives below this face, as functions of a connection: reads in gateway/storage/queries.py,
writes in gateway/storage/rows.py (retention, import/export beside them). This class owns the
connections and the writer and runs those functions on them; it adds no rule of its own.
`open_db` returns the configured backend as a `StorageFace`.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar

from gateway.errors import SchemaTooNew, TitleTaken, UnknownSession
from gateway.storage import fence, queries, retention
from gateway.storage.base import StorageFace
from gateway.storage.conn import Conn
from gateway.storage.connect import Connection, check_synchronous, set_new_page_size
from gateway.storage.connect import connect as _connect
from gateway.storage.dialect import SQLITE
from gateway.storage.events import INDEXER_EVENTS, CommitEvent, WriteOp
from gateway.storage.indexer import DeferredIndex, run_catch_up
from gateway.storage.queries import Session
from gateway.storage.rows import MAX_CONTENT_CHARS, PREVIEW_CHARS, mark_seen, sanitize_title
from gateway.storage.schema import IN_CONVERSATION, ROLES, VISIBLE, current_version, is_visible, migrate, visible_sql
from gateway.storage.writer import CommitListener, GroupCommitWriter, wal_file_bytes

__all__ = [
    "SessionDB",
    "StorageFace",
    "open_db",
    "StorageUnavailable",
    "StorageUnreachable",
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


def _close_quietly(conn: Connection) -> None:
    try:
        conn.close()
    except sqlite3.Error:
        pass


class SessionDB(StorageFace):
    """The SQLite backend: one file, one group-commit writer, a read connection per thread."""

    backend = "sqlite"
    dialect = SQLITE

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
        # Each thread's read connection, by thread: a thread that has ended can no longer use its own,
        # so opening a new one closes those (asyncio.run's executor threads die with every loop: the
        # synchronous session_search left one connection per call open, 200 calls -> 201).
        self._readers: dict[threading.Thread, Connection] = {}
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

    def ping(self, timeout: float = 2.0) -> int:
        """The schema version, read on this thread's connection; raises when the database file cannot
        be read or its writer has stopped (`/readyz`). `timeout` is for the Postgres face's pool."""
        if self._closed or not self._writer.thread.is_alive():
            raise sqlite3.OperationalError("the database writer has stopped")
        return current_version(self._reader())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers.values():
                _close_quietly(conn)
            self._readers.clear()

    def _reader(self) -> Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._readers_lock:
                ended = [thread for thread in self._readers if not thread.is_alive()]
                for thread in ended:
                    _close_quietly(self._readers.pop(thread))
                self._readers[threading.current_thread()] = conn
        return conn

    def _point(self, fn: Callable[[Conn], T]) -> T:
        return fn(self._reader())

    def read(self, fn: Callable[[Conn], T]) -> T:
        """Run fn(conn) on this thread's read connection, in one snapshot. For a read that uses
        the full-text indexes, `search_read`."""
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    def search_read(self, fn: Callable[[Conn], T]) -> T:
        """`read`, in a snapshot whose full-text indexes hold every message committed so far (the
        indexer fills them in batches after the commit: gateway/storage/indexer.py). Point reads
        use `read`, which never waits for the indexer."""
        if self._index.needed and threading.current_thread() is not self._writer.thread:
            self.write(self._index.catch_up)
        return self.read(fn)

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

    # -- upkeep of this file (gateway/storage/retention.py) -----------------------------------------
    def optimize(self) -> None:
        """Merge FTS segments and refresh the planner's statistics."""
        self.write(retention.optimize_op)

    def vacuum(self) -> None:
        # VACUUM cannot run inside the writer's transaction; use a private connection.
        retention.vacuum(_connect(self.path))

    def rebuild_fts(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild both full-text indexes from messages.content (after a tokenizer change)."""
        return self.write(retention.rebuild_fts_op(progress))

    def stats(self) -> dict:
        return {"path": self.path, **queries.stats(self._reader()), "wal_bytes": self.wal_bytes()}

    def disk_usage(self) -> dict[str, int]:
        """The file's size and its log's (a stat each: no page is read)."""
        if self.path == ":memory:":
            return {"db_bytes": 0, "wal_bytes": 0}
        return {"db_bytes": os.path.getsize(self.path), "wal_bytes": self.wal_bytes()}


class StorageUnavailable(RuntimeError):
    """The configured database cannot be opened (unreachable server, bad DSN, driver missing)."""


class StorageUnreachable(StorageUnavailable):
    """The database server cannot be reached for now (down, restarting, the network): worth waiting for."""


def open_db(
    backend: str = "sqlite", path: str | os.PathLike | None = None, dsn: str = "", synchronous: str = "full"
) -> StorageFace:
    """The storage face for `storage.backend`: SessionDB on the SQLite file at `path`, or
    gateway.storage.postgres's PostgresSessionDB on `dsn`: both are gateway/storage/base.py's
    `StorageFace`, whose public methods are the face. StorageUnavailable says why Postgres could
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
            f"PostgreSQL needs {exc.name}, which is not installed: pip install 'chinwag[postgres]'"
        ) from None
    try:
        return PostgresSessionDB(dsn)  # the same face (DESIGN §14): both are SessionStores
    except psycopg.OperationalError as exc:
        # A connection's failure carries no SQLSTATE: the server's own refusal is told by its FATAL
        # line (no such database, authentication), which waiting would not change — unless it says
        # "the database system is starting up / shutting down".
        text = str(exc)
        if "FATAL:" in text and "the database system is" not in text:
            raise StorageUnavailable(
                f"cannot open the Postgres database {redact_dsn(dsn)}: {str(exc).strip()}"
            ) from None
        raise StorageUnreachable(f"cannot reach the Postgres database {redact_dsn(dsn)}: {str(exc).strip()}") from None
    except psycopg.Error as exc:
        raise StorageUnavailable(f"cannot open the Postgres database {redact_dsn(dsn)}: {str(exc).strip()}") from None
