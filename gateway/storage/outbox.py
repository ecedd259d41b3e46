"""The outbox: a reply, committed with the assistant message it carries, until the platform has it.

A turn's reply is one row, written in the transaction that stores the assistant message and marks
its inbox entry done (gateway.storage.inbox). A sender then delivers it part by part (a reply
longer than the platform's limit is several messages) and records, after each part the platform
accepted, how many parts are out and their platform message ids. On start, rows not sent are
sent from the first part not recorded. The one duplicate window is a crash between the platform
accepting a part and that record: that part is sent again (at most one message per crash).

Streaming replies (DESIGN §12) use the same record: `record_parts` as soon as the first send of a
stream returns (the message that is then edited in place), so a restart finds the platform id
and edits or completes that message instead of sending a second one.

Plain SQL functions of a connection, run in the single writer's transaction.
"""

from __future__ import annotations

import json
import time

from gateway.storage.conn import Conn

SENT_TTL_SECONDS = 2 * 24 * 3600
PRUNE_BATCH = 5000


def add(
    conn: Conn,
    *,
    platform: str,
    chat_key: str,
    target: str,
    text: str,
    reply_to: str | None = None,
    inbox_id: int | None = None,
    message_id: int | None = None,
    now: float | None = None,
) -> int:
    """Queue one reply (`target`: the chat to send to, as JSON); returns its row id."""
    row = conn.execute(  # RETURNING: the same statement on SQLite and on Postgres (no lastrowid there)
        "INSERT INTO outbox (inbox_id, platform, chat_key, target, reply_to, text, message_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (inbox_id, platform, chat_key, target, reply_to, text, message_id, now or time.time()),
    ).fetchone()
    return int(row[0])


def record_parts(
    conn: Conn,
    row_id: int,
    parts_sent: int,
    platform_ids: list[str],
    done: bool,
    now: float | None = None,
) -> None:
    """`parts_sent` parts of the reply are out (their platform ids); `done`: nothing left to send."""
    conn.execute(
        "UPDATE outbox SET parts_sent = ?, platform_ids = ?, sent_at = CASE WHEN ? = 1 THEN ? ELSE sent_at END "
        "WHERE id = ?",
        (parts_sent, json.dumps(platform_ids), int(done), now or time.time(), row_id),
    )


def unsent(conn: Conn) -> list[dict]:
    rows = conn.execute("SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY id")
    return [dict(r) for r in rows]


def unsent_of_chat(conn: Conn, chat_key: str) -> list[dict]:
    """The unsent replies answering one chat's inbox entries (`chat_key` as the inbox has it),
    oldest first: what a replica taking the chat over sends before anything else."""
    rows = conn.execute(
        "SELECT o.* FROM outbox o JOIN inbox i ON i.id = o.inbox_id "
        "WHERE o.sent_at IS NULL AND i.chat_key = ? ORDER BY o.id",
        (chat_key,),
    )
    return [dict(r) for r in rows]


def backlog(conn: Conn) -> int:
    return conn.execute("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL").fetchone()[0]


def prune(conn: Conn, cutoff: float, limit: int = PRUNE_BATCH) -> int:
    """Forget up to `limit` rows sent before `cutoff` (one batch of upkeep)."""
    return conn.execute(
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE sent_at IS NOT NULL AND sent_at < ? LIMIT ?)",
        (cutoff, limit),
    ).rowcount
