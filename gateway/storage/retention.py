"""Deleting sessions and retention on either backend (the storage face's `delete_session`, `prune`,
`forget_seen_events`), and SQLite's index upkeep (`SessionDB`'s `optimize`, `vacuum` and
`rebuild_fts`). Each write is an op for the DB's
single writer: a function of (connection, events) that runs inside its transaction. Long work is
offered as batch ops (PRUNE_BATCH sessions, FORGET_BATCH event ids) that SessionDB loops over, a
transaction each, so chats keep writing between them: a first upkeep of a big old database once
held the writer for seconds."""

from __future__ import annotations

import sqlite3
import time
from typing import Callable, Iterable

from gateway.storage.conn import Conn
from gateway.storage.events import Events, KeyDeleted, SessionDeleted, WriteOp
from gateway.storage.fts import index_texts
from gateway.storage.indexer import indexed_upto, remove_from_indexes, set_indexed_upto
from gateway.storage.media import delete_attachments_of_session

EVENT_TTL_SECONDS = 8 * 24 * 3600  # Feishu redelivers for up to ~7 h; keep a week of ids
PRUNE_BATCH = 200  # sessions deleted per transaction
FORGET_BATCH = 5000  # seen event ids forgotten per transaction


def delete_session_rows(conn: Conn, session_id: str, events: Events) -> bool:
    """Delete a session, its messages (and their index entries), participants and key entries;
    its children hang from its parent instead. False if there was no such session."""
    if conn.dialect.indexes_after_commit:  # SQLite's word indexes are tables of their own
        indexed = conn.execute(  # messages above the mark were never indexed (gateway/storage/indexer.py)
            "SELECT id, content FROM messages WHERE session_id = ? AND id <= ?", (session_id, indexed_upto(conn))
        ).fetchall()
        for row in indexed:
            remove_from_indexes(conn, row["id"], row["content"])
    delete_attachments_of_session(conn, session_id)  # their files go at the next media sweep
    conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM session_participants WHERE session_id = ?", (session_id,))
    parent = conn.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
    conn.execute(
        "UPDATE sessions SET parent_session_id = ? WHERE parent_session_id = ?",
        (parent[0] if parent else None, session_id),
    )
    keys = conn.execute("SELECT session_key FROM session_keys WHERE session_id = ?", (session_id,)).fetchall()
    for (key,) in keys:
        events.append(KeyDeleted(key))
    conn.execute("DELETE FROM session_keys WHERE session_id = ?", (session_id,))
    if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
        return False
    events.append(SessionDeleted(session_id))
    return True


def op_delete(session_id: str) -> WriteOp[bool]:
    return lambda conn, events: delete_session_rows(conn, session_id, events)


def prune_cutoff(older_than_days: float, now: float | None = None) -> float:
    return (time.time() if now is None else now) - float(older_than_days) * 86400


def prune_batches(idle: Iterable[str], keep: Iterable[str] = ()) -> list[list[str]]:
    """The idle sessions not in `keep`, in batches of PRUNE_BATCH (one transaction each)."""
    keep_set = set(keep)
    victims = [sid for sid in idle if sid not in keep_set]
    return [victims[i : i + PRUNE_BATCH] for i in range(0, len(victims), PRUNE_BATCH)]


def op_delete_batch(batch: list[str]) -> WriteOp[int]:
    """Delete a batch of sessions; the op returns how many existed."""
    return lambda conn, events: sum(delete_session_rows(conn, sid, events) for sid in batch)


def op_forget_seen_batch(now: float | None = None) -> WriteOp[int]:
    """Forget up to FORGET_BATCH seen inbound event ids older than any platform redelivers
    (EVENT_TTL_SECONDS); the op returns how many. Fewer than FORGET_BATCH: none are left."""
    cutoff = (time.time() if now is None else now) - EVENT_TTL_SECONDS
    limit = FORGET_BATCH

    def op(conn: Conn, events: Events) -> int:
        return conn.execute(
            "DELETE FROM processed_events WHERE (platform, event_id) IN "
            "(SELECT platform, event_id FROM processed_events WHERE seen_at < ? LIMIT ?)",
            (cutoff, limit),
        ).rowcount

    return op


def optimize_op(conn: Conn, events: Events) -> None:
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
    conn.execute("INSERT INTO messages_ident (messages_ident) VALUES ('optimize')")
    conn.execute("PRAGMA optimize")


def vacuum(conn: sqlite3.Connection) -> None:
    """VACUUM on a private connection (it cannot run inside the writer's transaction), then
    truncate the WAL; closes the connection."""
    try:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def rebuild_fts_op(progress: Callable[[int], None] | None = None) -> WriteOp[int]:
    def op(conn: Conn, events: Events) -> int:
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')")
        conn.execute("INSERT INTO messages_ident (messages_ident) VALUES ('delete-all')")
        n = 0
        for row in conn.execute("SELECT id, content FROM messages WHERE content IS NOT NULL"):
            words, idents = index_texts(row["content"])
            if words:
                conn.execute("INSERT INTO messages_fts (rowid, content) VALUES (?, ?)", (row["id"], words))
            if idents:
                conn.execute("INSERT INTO messages_ident (rowid, content) VALUES (?, ?)", (row["id"], idents))
            n += 1
            if progress and n % 1000 == 0:
                progress(n)
        set_indexed_upto(conn, conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])
        return n

    return op
