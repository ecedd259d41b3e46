"""How every connection to the database is opened: the pragmas, and why.

- `synchronous = FULL`: in WAL mode each COMMIT fsyncs the log, so an append that returned survives
  a power loss. NORMAL would skip that fsync (syncing only at checkpoints) and a power loss could
  take the last commits with it, though never corrupt the file; the group-commit writer already
  shares one fsync among every write of a batch, so FULL is kept.
- `busy_timeout`: another process (the CLI beside the daemon) may hold the write lock briefly.
- `cache_size` 32 MB: the FTS and message b-trees' upper levels stay in memory for searches.
- WAL size: the writer's connection turns the automatic checkpoint off and checkpoints itself
  between batches (gateway/storage/writer.py); readers keep the defaults, and must never hold a
  read transaction or an unfinished statement open (a snapshot held open keeps the log from
  restarting): `SessionDB.read` ends its transaction, and read helpers fetch their rows whole.
"""

from __future__ import annotations

import sqlite3

BUSY_TIMEOUT_MS = 30_000
PRAGMAS = (
    f"busy_timeout = {BUSY_TIMEOUT_MS}",
    "foreign_keys = ON",
    "synchronous = FULL",
    "cache_size = -32000",
    "temp_store = MEMORY",
)


def connect(path: str) -> sqlite3.Connection:
    """An autocommit connection (transactions are explicit) usable from any one thread at a time."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    for pragma in PRAGMAS:
        conn.execute(f"PRAGMA {pragma}")
    return conn
