"""How every connection to the database is opened: the pragmas, and why.

- `synchronous = FULL` (the default): in WAL mode each COMMIT fsyncs the log, so an append that
  returned survives a power loss. `storage.synchronous: normal` (opt-in, the writer's connection
  only) skips that fsync: the log is synced only when the writer checkpoints it (past 8 MB, and
  after a second idle). A crash of chinwag itself loses nothing (the OS has the log), but a power
  loss or a kernel crash can lose every commit since the last checkpoint, though never corrupt the
  file, and an inbound event acknowledged in that window is gone with its reply. The group-commit
  writer already shares one fsync among every write of a batch, so FULL costs only chats that write
  one message at a time: one chat appending 3,000 corpus messages, 306-335/s FULL vs 3,138-3,233/s
  NORMAL while other jobs kept this machine's disk busy (an fsync then takes ~3 ms; ~1,900/s FULL
  when it was quiet).
- `busy_timeout`: another process (the CLI beside the daemon) may hold the write lock briefly.
- `cache_size` 32 MB: the FTS and message b-trees' upper levels stay in memory for searches.
- `page_size` 2048 for a NEW database (`PAGE_SIZE`; an existing one keeps its own: changing it takes a
  VACUUM, and none is done on open). A one-message commit wrote ~5.5 pages (the message's leaf and
  its session index entry, the sessions row and its last-activity index entry, the AUTOINCREMENT
  counter; 4.6 since schema v9 dropped the counter), so the WAL bytes per message follow the page size: one chat appending sequentially,
  measured from the WAL frames (600 appends), 21.4 KB per message at 4096, 11.4 KB at 2048, 6.2 KB at
  1024. 1024 would split the FTS5 leaves (~4 KB blobs) over four overflow pages each; 2048 kept
  queries and size where they were (bench/store.py --sizes 20000: every query shape's p99 within
  noise of 4096, worst 12.2 vs 10.4 ms; 1,382 vs 1,415 bytes per message). Appends/s did not move
  measurably: a commit's cost is its fsync, not its bytes.
- WAL size: the writer's connection turns the automatic checkpoint off and checkpoints itself
  between batches (gateway/storage/writer.py); readers keep the defaults, and must never hold a
  read transaction or an unfinished statement open (a snapshot held open keeps the log from
  restarting): `SessionDB.read` ends its transaction, and read helpers fetch their rows whole.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from gateway.storage.dialect import SQLITE, SqliteDialect

BUSY_TIMEOUT_MS = 30_000
PAGE_SIZE = 2048  # for new databases only: see the module docstring
PRAGMAS = (
    f"busy_timeout = {BUSY_TIMEOUT_MS}",
    "foreign_keys = ON",
    "synchronous = FULL",
    "cache_size = -32000",
    "temp_store = MEMORY",
)


SYNCHRONOUS = ("full", "normal")


def check_synchronous(level: str) -> str:
    level = str(level).lower()
    if level not in SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, got {level!r}")
    return level


class Connection(sqlite3.Connection):
    """sqlite3's connection, carrying its `Dialect` (gateway/storage/conn.py): a class attribute,
    so statements cost what they did."""

    dialect: SqliteDialect = SQLITE

    def tuples(self, sql: str, params: Any = ()) -> list[Any]:
        cursor = self.cursor()
        cursor.row_factory = None
        return cursor.execute(sql, params).fetchall()


def connect(path: str, synchronous: str = "full") -> Connection:
    """An autocommit connection (transactions are explicit) usable from any one thread at a time."""
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000, factory=Connection
    )
    conn.row_factory = sqlite3.Row
    for pragma in PRAGMAS:
        conn.execute(f"PRAGMA {pragma}")
    if check_synchronous(synchronous) != "full":
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    return conn


def set_new_page_size(conn: sqlite3.Connection) -> None:
    """Give a database that has nothing in it yet `PAGE_SIZE`; a no-op on any other (SQLite fixes
    the page size when the first page is written, and a WAL database cannot change it at all).
    Call before `journal_mode = WAL`, which writes the first page."""
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
