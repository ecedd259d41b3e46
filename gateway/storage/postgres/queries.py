"""The reads and upkeep whose SQL differs on Postgres; every other read is gateway/storage/queries.py
run as written through the qmark connection (connection.py), so each rule keeps one home.

What differs: the title rule compares with `ascii_fold` (SQLite: COLLATE NOCASE, ASCII letters
only, the same fold), `IS NOT ?` is `IS DISTINCT FROM`, sizes come from pg_relation_size, and a
deletion needs no index upkeep (the word and identifier columns go with their row).
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from gateway.storage import queries
from gateway.storage.events import Events, KeyDeleted, SessionDeleted
from gateway.storage.media import delete_attachments_of_session
from gateway.storage.postgres.connection import Connection
from gateway.storage.postgres.schema import SCHEMA_VERSION
from gateway.storage.queries import Session
from gateway.storage.retention import EVENT_TTL_SECONDS, FORGET_BATCH
from gateway.storage.schema import TITLE_MAX


def title_holder(conn: Connection, title: str, except_id: str | None = None) -> str | None:
    """The session (other than `except_id`) that has `title` in any letter case (see
    gateway.storage.queries.title_holder: the same rule; the unique index enforces it)."""
    row = conn.execute(
        "SELECT id FROM sessions WHERE ascii_fold(title) = ascii_fold(?) AND id IS DISTINCT FROM ? LIMIT 1",
        (title, except_id),
    ).fetchone()
    return row[0] if row else None


def next_lineage_title(conn: Connection, title: str) -> str:
    m = re.fullmatch(r"(.*?) #(\d+)", title.strip())
    base, n = (m.group(1), int(m.group(2)) + 1) if m else (title.strip(), 2)
    base = base[: TITLE_MAX - 8]
    while title_holder(conn, f"{base} #{n}") is not None:
        n += 1
    return f"{base} #{n}"


def find_session(conn: Connection, ref: str) -> Session | None:
    """An exact id, a unique id prefix (>= 6 characters), or a title: exact first, then any case."""
    ref = (ref or "").strip()
    if not ref:
        return None
    row = queries.session_row(conn, ref)  # type: ignore[arg-type]
    if row:
        return row
    if len(ref) >= 6 and re.fullmatch(r"[0-9a-f_]+", ref):
        ids = conn.execute("SELECT id FROM sessions WHERE starts_with(id, ?) LIMIT 2", (ref,)).fetchall()
        if len(ids) == 1:
            return queries.session_row(conn, ids[0][0])  # type: ignore[arg-type]
    hit = conn.execute(
        "SELECT id FROM sessions WHERE ascii_fold(title) = ascii_fold(?) ORDER BY title = ? DESC, started_at LIMIT 1",
        (ref, ref),
    ).fetchone()
    return queries.session_row(conn, hit[0]) if hit else None  # type: ignore[arg-type]


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
    delete_attachments_of_session(conn, session_id)  # type: ignore[arg-type]  # files go at the next sweep
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
