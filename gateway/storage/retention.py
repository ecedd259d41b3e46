"""Deleting sessions, retention, and index upkeep for `SessionDB` (its `delete_session`, `prune`,
`optimize`, `vacuum` and `rebuild_fts`). Each write is an op for the DB's single writer: a function
of (connection, events) that runs inside its transaction."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Callable, Iterable

from gateway.storage.fts import ident_text, index_text
from gateway.storage.indexer import indexed_upto, remove_from_indexes, set_indexed_upto

if TYPE_CHECKING:
    from gateway.db import SessionDB

EVENT_TTL_SECONDS = 8 * 24 * 3600  # Feishu redelivers for up to ~7 h; keep a week of ids
PRUNE_BATCH = 200  # sessions deleted per transaction
FORGET_BATCH = 5000  # seen event ids forgotten per transaction


def delete_session_rows(conn: sqlite3.Connection, session_id: str, events: list) -> bool:
    """Delete a session, its messages (and their index entries), participants and key entries;
    its children hang from its parent instead. False if there was no such session."""
    indexed = conn.execute(  # messages above the mark were never indexed (gateway/storage/indexer.py)
        "SELECT id, content FROM messages WHERE session_id = ? AND id <= ?", (session_id, indexed_upto(conn))
    ).fetchall()
    for row in indexed:
        remove_from_indexes(conn, row["id"], row["content"])
    conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM session_participants WHERE session_id = ?", (session_id,))
    parent = conn.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
    conn.execute(
        "UPDATE sessions SET parent_session_id = ? WHERE parent_session_id = ?",
        (parent[0] if parent else None, session_id),
    )
    keys = conn.execute("SELECT session_key FROM session_keys WHERE session_id = ?", (session_id,)).fetchall()
    for (key,) in keys:
        events.append(("key_deleted", {"session_key": key}))
    conn.execute("DELETE FROM session_keys WHERE session_id = ?", (session_id,))
    if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
        return False
    events.append(("session_deleted", {"id": session_id}))
    return True


def delete_op(session_id: str) -> Callable[[sqlite3.Connection, list], bool]:
    return lambda conn, events: delete_session_rows(conn, session_id, events)


def prune(
    db: "SessionDB", older_than_days: float, keep: Iterable[str] = (), stop: Callable[[], bool] = lambda: False
) -> int:
    """Delete sessions idle since before the cutoff, except `keep`, a batch per transaction (so
    chats keep writing meanwhile); `stop()` is asked between batches (a shutdown need not wait for
    a long first prune: the rest is done next time)."""
    cutoff = time.time() - float(older_than_days) * 86400
    keep_set = set(keep)
    victims = [
        sid
        for sid in db.read(
            lambda c: [
                r[0]
                for r in c.execute(
                    "SELECT id FROM sessions WHERE last_active_at < ? ORDER BY last_active_at", (cutoff,)
                )
            ]
        )
        if sid not in keep_set
    ]

    def op_for(batch: list[str]) -> Callable[[sqlite3.Connection, list], int]:
        return lambda conn, events: sum(delete_session_rows(conn, sid, events) for sid in batch)

    deleted = 0
    for i in range(0, len(victims), PRUNE_BATCH):
        if stop():
            break
        deleted += db.write(op_for(victims[i : i + PRUNE_BATCH]))
    return deleted


def forget_seen_events(db: "SessionDB") -> int:
    """Drop seen inbound event ids older than any platform redelivers (EVENT_TTL_SECONDS), a batch
    per transaction: the first upkeep of a big, old database must not hold the writer for long."""
    cutoff = time.time() - EVENT_TTL_SECONDS

    def op(conn: sqlite3.Connection, events: list) -> int:
        return conn.execute(
            "DELETE FROM processed_events WHERE (platform, event_id) IN "
            "(SELECT platform, event_id FROM processed_events WHERE seen_at < ? LIMIT ?)",
            (cutoff, FORGET_BATCH),
        ).rowcount

    total = 0
    while (n := db.write(op)) > 0:
        total += n
        if n < FORGET_BATCH:
            break
    return total


def optimize_op(conn: sqlite3.Connection, events: list) -> None:
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


def rebuild_fts_op(progress: Callable[[int], None] | None = None) -> Callable[[sqlite3.Connection, list], int]:
    def op(conn: sqlite3.Connection, events: list) -> int:
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')")
        conn.execute("INSERT INTO messages_ident (messages_ident) VALUES ('delete-all')")
        n = 0
        for row in conn.execute("SELECT id, content FROM messages WHERE content IS NOT NULL"):
            words, idents = index_text(row["content"]), ident_text(row["content"])
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
