"""The inbox: every inbound platform event, committed before the platform is told it arrived.

One row per (platform, event id): that unique key is the de-duplication, so a redelivery (Feishu
retries an event for hours, Telegram resends every update it got no 2xx for) is refused by the
INSERT itself, whether the first copy is still queued, running, or long answered. A row is
`queued` until its turn stores the person's message (`started_at`, `user_message_id`), and done
when the turn is finished (`done_at`, with the reply's outbox row in the same transaction). On
start, rows without `done_at` are taken up again, in `id` order (arrival order).

Plain SQL functions of a connection; the caller runs them in the single writer's transaction
(gateway.storage.writer), so with group commit an inbound event costs a share of one fsync
(bench/gateway.py measures it). Done rows are kept for DONE_TTL_SECONDS, past any platform's
redelivery horizon, then pruned in batches.
"""

from __future__ import annotations

import json
import time
from typing import Iterable

from gateway.storage.conn import Conn

DONE_TTL_SECONDS = 2 * 24 * 3600  # Feishu redelivers for ~6 h, Telegram keeps an update 24 h
PRUNE_BATCH = 5000


def add(
    conn: Conn,
    platform: str,
    event_id: str,
    chat_key: str,
    message: str,
    received_at: float | None = None,
    trace_context: str | None = None,
) -> int | None:
    """Store one inbound event; its row id, or None when (platform, event id) was seen before
    (here, or in the pre-inbox `processed_events` table of an upgraded database). `trace_context`:
    its trace's W3C traceparent (gateway.telemetry), so a later process's work on it links there."""
    # ON CONFLICT DO NOTHING RETURNING: the same statement on SQLite and on Postgres (no lastrowid there)
    row = conn.execute(
        "INSERT INTO inbox (platform, event_id, chat_key, message, received_at, trace_context) "
        "SELECT ?, ?, ?, ?, ?, ? WHERE NOT EXISTS "
        "(SELECT 1 FROM processed_events WHERE platform = ? AND event_id = ?) "
        "ON CONFLICT DO NOTHING RETURNING id",
        (
            platform,
            event_id,
            chat_key,
            message,
            float(received_at or time.time()),
            trace_context,
            platform,
            event_id,
        ),
    ).fetchone()
    return int(row[0]) if row else None


def start(conn: Conn, entry_id: int, user_message_id: int | None, now: float | None = None) -> None:
    """The entry's turn stored the person's message (`user_message_id`): from here a crash leaves
    a turn cut short, which start-up reruns or reports (gateway.interrupted_turns)."""
    conn.execute(
        "UPDATE inbox SET started_at = ?, user_message_id = COALESCE(?, user_message_id), attempts = attempts + 1 "
        "WHERE id = ?",
        (now or time.time(), user_message_id, entry_id),
    )


def finish(conn: Conn, entry_ids: Iterable[int], outcome: str = "answered", now: float | None = None) -> int:
    """Mark entries done (answered, refused, stopped ...); returns how many were still open."""
    ids = [int(i) for i in entry_ids]
    if not ids:
        return 0
    marks = ", ".join("?" * len(ids))
    return conn.execute(
        f"UPDATE inbox SET done_at = ?, outcome = ? WHERE done_at IS NULL AND id IN ({marks})",
        (now or time.time(), outcome, *ids),
    ).rowcount


def entry(conn: Conn, entry_id: int) -> dict | None:
    row = conn.execute("SELECT * FROM inbox WHERE id = ?", (entry_id,)).fetchone()
    return dict(row) if row else None


def unfinished(conn: Conn) -> list[dict]:
    """Every entry not done, oldest first: the work a start-up takes up again."""
    rows = conn.execute("SELECT * FROM inbox WHERE done_at IS NULL ORDER BY id")
    return [dict(r) for r in rows]


def unfinished_of_chat(conn: Conn, chat_key: str) -> list[dict]:
    """One chat's entries not done, oldest first (what a replica runs when it holds the chat)."""
    rows = conn.execute("SELECT * FROM inbox WHERE done_at IS NULL AND chat_key = ? ORDER BY id", (chat_key,))
    return [dict(r) for r in rows]


def record_reply_ids(conn: Conn, entry_id: int, platform_ids: list[str]) -> None:
    """The messages a streamed answer to this entry shows so far, recorded as soon as the platform
    returns each: a turn cut short edits them when it runs again, never sends a second answer."""
    conn.execute("UPDATE inbox SET reply_ids = ? WHERE id = ?", (json.dumps(platform_ids), entry_id))


def latest_per_chat(conn: Conn, platform: str) -> list[dict]:
    """The newest entry of each chat of `platform` (kept DONE_TTL_SECONDS once done): what the
    gateway last took in there, committed, so a history read after it misses nothing acknowledged."""
    rows = conn.execute(
        "SELECT * FROM inbox WHERE id IN (SELECT MAX(id) FROM inbox WHERE platform = ? GROUP BY chat_key) ORDER BY id",
        (platform,),
    )
    return [dict(r) for r in rows]


def backlog(conn: Conn) -> int:
    return conn.execute("SELECT COUNT(*) FROM inbox WHERE done_at IS NULL").fetchone()[0]


def prune(conn: Conn, cutoff: float, limit: int = PRUNE_BATCH) -> int:
    """Forget up to `limit` done entries finished before `cutoff` (one batch of upkeep), and the
    tool-call journal of each (gateway.storage.tool_calls): it serves only a rerun of its entry's
    turn, which a done entry never has. The batch is chosen twice alike (ordered by id, in one
    transaction), so the journal goes with exactly the entries deleted."""
    batch = "SELECT id FROM inbox WHERE done_at IS NOT NULL AND done_at < ? ORDER BY id LIMIT ?"
    conn.execute(f"DELETE FROM tool_calls WHERE inbox_id IN ({batch})", (cutoff, limit))
    return conn.execute(f"DELETE FROM inbox WHERE id IN ({batch})", (cutoff, limit)).rowcount
