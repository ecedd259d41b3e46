"""The outbox: a reply, committed with the assistant message it carries, until the platform has it.

A turn's reply is one row, written in the transaction that stores the assistant message and marks
its inbox entry done (gateway.storage.inbox). A sender then delivers it part by part (a reply
longer than the platform's limit is several messages) and records, after each part the platform
accepted, how many parts are out and their platform message ids. On start, rows not sent are
sent from the first part not recorded. The one duplicate window is a crash between the platform
accepting a part and that record. Each row carries a random `send_key`; part i goes out with the
idempotency key `send_key-i` (platforms.base.part_key) where the platform takes one (Feishu `uuid`, Discord
`nonce`), so the repeat is a no-op there. Where it does not (Telegram), `sending` says which part
was being sent: a restart counts that send as uncertain (`chinwag_uncertain_sends_total`) and sends
it again, so doubles are bounded by the sends in flight at the crash.

A streamed answer's messages are known before the answer commits (gateway.storage.inbox
`record_reply_ids`); the row committed with the answer starts from them (`platform_ids`, with
`parts_sent` 0: none shows its final text yet), so a restart edits them instead of sending anew.

Plain SQL functions of a connection, run in the single writer's transaction.
"""

from __future__ import annotations

import json
import secrets
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
    shown_ids: list[str] | None = None,
    send_key: str | None = None,
    now: float | None = None,
) -> int:
    """Queue one reply (`target`: the chat to send to, as JSON); returns its row id. `shown_ids`:
    the messages a streamed answer already shows (edited to the final text, not sent anew)."""
    row = conn.execute(  # RETURNING: the same statement on SQLite and on Postgres (no lastrowid there)
        "INSERT INTO outbox (inbox_id, platform, chat_key, target, reply_to, text, message_id, created_at, "
        "platform_ids, send_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            inbox_id,
            platform,
            chat_key,
            target,
            reply_to,
            text,
            message_id,
            now or time.time(),
            json.dumps(shown_ids) if shown_ids else None,
            send_key or new_send_key(),
        ),
    ).fetchone()
    return int(row[0])


def new_send_key() -> str:
    return secrets.token_hex(8)


def sending(conn: Conn, row_id: int, part: int) -> None:
    """Part `part` of the reply is about to be sent: until its record, that send is uncertain."""
    conn.execute("UPDATE outbox SET sending = ? WHERE id = ?", (part, row_id))


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
        "UPDATE outbox SET parts_sent = ?, platform_ids = ?, sending = NULL, "
        "sent_at = CASE WHEN ? = 1 THEN ? ELSE sent_at END WHERE id = ?",
        (parts_sent, json.dumps(platform_ids), int(done), now or time.time(), row_id),
    )


def unsent(conn: Conn) -> list[dict]:
    """The replies not (fully) sent, oldest first, each with its inbox entry's `trace_context`."""
    rows = conn.execute(
        "SELECT o.*, i.trace_context FROM outbox o LEFT JOIN inbox i ON i.id = o.inbox_id "
        "WHERE o.sent_at IS NULL ORDER BY o.id"
    )
    return [dict(r) for r in rows]


def unsent_of_chat(conn: Conn, chat_key: str) -> list[dict]:
    """The unsent replies answering one chat's inbox entries (`chat_key` as the inbox has it),
    oldest first: what a replica taking the chat over sends before anything else."""
    rows = conn.execute(
        "SELECT o.*, i.trace_context FROM outbox o JOIN inbox i ON i.id = o.inbox_id "
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
