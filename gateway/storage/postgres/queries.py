"""The reads and upkeep whose SQL differs on Postgres; every other read is gateway/storage/queries.py
run as written through the qmark connection (connection.py), so each rule keeps one home.

What differs: sizes come from pg_relation_size, and a deletion needs no index upkeep (the word and
identifier columns go with their row). The title rule's `ascii_fold` and `IS DISTINCT FROM` are
the dialect's (search.py `PostgresDialect`), used by the one rule in gateway/storage/queries.py.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gateway.storage.events import Events, KeyDeleted, SessionDeleted
from gateway.storage.media import delete_attachments_of_session
from gateway.storage.postgres.connection import Connection
from gateway.storage.postgres.schema import SCHEMA_VERSION
from gateway.storage.retention import EVENT_TTL_SECONDS, FORGET_BATCH


def stats(conn: Connection) -> dict[str, Any]:
    count = lambda sql: conn.execute(sql).fetchone()[0]
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "sessions": count("SELECT COUNT(*) FROM sessions"),
        "messages": count("SELECT COUNT(*) FROM messages"),
        "hidden_messages": count("SELECT COUNT(*) FROM messages WHERE active = 0"),
        "keys": count("SELECT COUNT(*) FROM session_keys"),
        "db_bytes": int(count("SELECT pg_database_size(current_database())")),
        "bytes_by_part": {
            "word_index": int(count("SELECT pg_relation_size('idx_messages_words')")),
            "substring_index": int(count("SELECT pg_relation_size('idx_messages_idents')")),
            "tables": int(
                count(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relkind = 'r' AND n.nspname = current_schema()"
                )
                - count("SELECT pg_relation_size('idx_messages_words') + pg_relation_size('idx_messages_idents')")
            ),
        },
    }
    return out


def message_bytes(conn: Connection) -> float:
    """Bytes on disk per message: every table, index and TOAST of the schema over the messages."""
    total = conn.execute(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = current_schema()"
    ).fetchone()[0]
    n = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    return float(total) / max(1, n)


# -- deletion and retention (gateway/storage/retention.py's ops, for this schema) ----------------
def delete_session_rows(conn: Connection, session_id: str, events: Events) -> bool:
    """Delete a session, its messages and their attachment rows, participants and key entries; its children hang from its
    parent instead. False if there was no such session."""
    delete_attachments_of_session(conn, session_id)  # files go at the next sweep
    conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM session_participants WHERE session_id = ?", (session_id,))
    parent = conn.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
    conn.execute(
        "UPDATE sessions SET parent_session_id = ? WHERE parent_session_id = ?",
        (parent[0] if parent else None, session_id),
    )
    for (key,) in conn.execute("DELETE FROM session_keys WHERE session_id = ? RETURNING session_key", (session_id,)):
        events.append(KeyDeleted(key))
    if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
        return False
    events.append(SessionDeleted(session_id))
    return True


def op_delete(session_id: str) -> Callable[[Connection, Events], bool]:
    return lambda conn, events: delete_session_rows(conn, session_id, events)


def op_delete_batch(batch: list[str]) -> Callable[[Connection, Events], int]:
    return lambda conn, events: sum(delete_session_rows(conn, sid, events) for sid in batch)


def op_forget_seen_batch(now: float | None = None) -> Callable[[Connection, Events], int]:
    cutoff = (time.time() if now is None else now) - EVENT_TTL_SECONDS

    def op(conn: Connection, events: Events) -> int:
        return conn.execute(
            "DELETE FROM processed_events WHERE (platform, event_id) IN "
            "(SELECT platform, event_id FROM processed_events WHERE seen_at < ? LIMIT ?)",
            (cutoff, FORGET_BATCH),
        ).rowcount

    return op
