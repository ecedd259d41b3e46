"""Write ops over the Postgres schema: the same names, arguments, results and typed commit events
as gateway/storage/rows.py, so the store composes either backend's ops (`db.ops`) the same way.

As there, each `op_*` checks and prepares its input in the caller's thread (the shared checks in
gateway.storage.rows, the tsvector literal and identifiers) and returns a function of
(connection, events) that `PostgresSessionDB.write` runs in one transaction. The connection is
gateway/storage/postgres/connection.py's (sqlite3's `?` placeholders). A statement that may hit a
unique index runs in a savepoint: Postgres aborts the whole transaction on an error, and the op
still has to ask who holds the title.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence, TypeVar

from psycopg import errors

from gateway.errors import TitleTaken, UnknownSession
from gateway.storage import queries
from gateway.storage.events import Events, KeyChanged, KeyDeleted, MessageAppended, SessionRewritten
from gateway.storage.fts import ident_text
from gateway.storage.media import AttachmentRow, insert_attachments
from gateway.storage.postgres.connection import Connection
from gateway.storage.postgres.tokens import words_vector
from gateway.storage.queries import title_holder
from gateway.storage.rows import (
    MAX_CONTENT_CHARS,
    PREVIEW_CHARS,
    check_message,
    check_session,
    json_or_none,
    sanitize_title,
)
from gateway.storage.schema import MESSAGE_FIELDS

__all__ = [
    "MAX_CONTENT_CHARS",
    "PREVIEW_CHARS",
    "PgWriteOp",
    "op_create_session",
    "op_end",
    "op_reopen",
    "op_add_tokens",
    "op_touch",
    "op_set_title",
    "op_append",
    "op_rewind",
    "op_supersede_after",
    "op_mark_compacted",
    "op_set_key",
    "op_move_key",
    "op_delete_key",
    "mark_seen",
    "op_mark_seen",
]

T = TypeVar("T")
PgWriteOp = Callable[[Connection, Events], T]


def _title_taken(conn: Connection, title: str | None, session_id: str) -> TitleTaken:
    return TitleTaken(title, title_holder(conn, title, except_id=session_id) if title else None)


# -- sessions -------------------------------------------------------------------------------------
def op_create_session(session_id: str, source: Any, fields: dict[str, Any]) -> PgWriteOp[None]:
    """Create a session, or update the fields given of an existing one (upsert)."""
    values, started, source_name = check_session(session_id, source, fields)
    cols = ["id", "source", "started_at", "last_active_at", *values]
    params = [session_id, source_name, started, started, *values.values()]
    updates = ", ".join(["source = excluded.source", *(f"{c} = excluded.{c}" for c in values)])
    sql = (
        f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT (id) DO UPDATE SET {updates}"
    )

    def op(conn: Connection, events: Events) -> None:
        try:
            with conn.raw.transaction():
                conn.execute(sql, params)
        except errors.UniqueViolation:
            raise _title_taken(conn, values.get("title"), session_id) from None
        if values.get("user_id"):
            conn.execute(
                "INSERT INTO session_participants (session_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (session_id, values["user_id"]),
            )

    return op


def _op_update_session(session_id: str, sql: str, params: tuple[Any, ...]) -> PgWriteOp[None]:
    args = (*params, session_id)

    def op(conn: Connection, events: Events) -> None:
        if conn.execute(sql, args).rowcount == 0:
            raise UnknownSession(session_id)

    return op


def op_end(session_id: str, reason: str) -> PgWriteOp[None]:
    return _op_update_session(
        session_id, "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ?", (time.time(), reason)
    )


def op_reopen(session_id: str) -> PgWriteOp[None]:
    return _op_update_session(session_id, "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", ())


def op_add_tokens(session_id: str, input_tokens: int, output_tokens: int) -> PgWriteOp[None]:
    return _op_update_session(
        session_id,
        "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
        (int(input_tokens or 0), int(output_tokens or 0)),
    )


def op_touch(session_id: str, now: float) -> PgWriteOp[None]:
    """Count `now` as the session's activity (a /resume), never moving it back."""

    def op(conn: Connection, events: Events) -> None:
        conn.execute("UPDATE sessions SET last_active_at = GREATEST(last_active_at, ?) WHERE id = ?", (now, session_id))

    return op


def op_set_title(session_id: str, title: str | None) -> PgWriteOp[str | None]:
    clean = sanitize_title(title)

    def op(conn: Connection, events: Events) -> str | None:
        try:
            with conn.raw.transaction():
                changed = conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id)).rowcount
        except errors.UniqueViolation:
            raise _title_taken(conn, clean, session_id) from None
        if not changed:
            raise UnknownSession(session_id)
        return clean

    return op


# -- messages -------------------------------------------------------------------------------------
_INSERT_MESSAGE = (
    f"INSERT INTO messages (session_id, role, content, {', '.join(MESSAGE_FIELDS)}, words, idents) "
    f"VALUES (?, ?, ?, {', '.join('?' * len(MESSAGE_FIELDS))}, ?::tsvector, ?) RETURNING id"
)


def op_append(
    session_id: str,
    role: str,
    content: Any,
    fields: dict[str, Any],
    seen_event: tuple[str, str] | None = None,
    attachments: Sequence[AttachmentRow] = (),
    after: Callable[[Connection, int], Any] | None = None,
) -> PgWriteOp[int]:
    """The write of one message; the op returns its id. `seen_event` = (platform, event id) is
    marked seen, the message's `attachments` rows are added, and `after(conn, message_id)` runs
    (delivery's inbox and outbox records), all in the same transaction."""
    content, row, preview = check_message(role, content, fields)
    if row["platform_message_id"] is not None:
        row["platform_message_id"] = str(row["platform_message_id"])  # a text column, as ids are text
    words, idents = words_vector(content), ident_text(content) or None  # off the transaction

    def op(conn: Connection, events: Events) -> int:
        updated = conn.execute(
            "UPDATE sessions SET last_active_at = GREATEST(last_active_at, ?), "
            "message_count = message_count + 1, preview = COALESCE(preview, ?) WHERE id = ?",
            (row["timestamp"], preview, session_id),
        ).rowcount
        if not updated:
            raise UnknownSession(session_id)
        message_id = int(
            conn.execute(_INSERT_MESSAGE, (session_id, role, content, *row.values(), words, idents)).fetchone()[0]
        )
        if role == "user" and row["user_id"]:
            conn.execute(
                "INSERT INTO session_participants (session_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (session_id, row["user_id"]),
            )
        if seen_event is not None:
            mark_seen(conn, *seen_event)
        if attachments:
            insert_attachments(conn, message_id, attachments)  # plain SQL
        if after is not None:
            after(conn, message_id)
        stored = {"id": message_id, "session_id": session_id, "role": role, "content": content, **row}
        events.append(MessageAppended({**stored, "active": 1, "compacted": 0}))
        return message_id

    return op


def _hide(conn: Connection, events: Events, session_id: str, where: str, params: tuple, compacted: bool) -> int:
    sets = "active = 0, compacted = 1" if compacted else "active = 0"
    changed = conn.execute(
        f"UPDATE messages SET {sets} WHERE session_id = ? AND active = 1 {where}", (session_id, *params)
    ).rowcount
    if changed:
        conn.execute(
            "UPDATE sessions SET message_count = GREATEST(0, message_count - ?) WHERE id = ?", (changed, session_id)
        )
        events.append(SessionRewritten(session_id))
    return changed


def op_rewind(session_id: str, exchanges: int) -> PgWriteOp[int]:
    exchanges = max(1, int(exchanges))

    def op(conn: Connection, events: Events) -> int:
        users = conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND role = 'user' ORDER BY id DESC LIMIT ?",
            (session_id, exchanges),
        ).fetchall()
        if not users:
            return 0
        return _hide(conn, events, session_id, "AND id >= ?", (users[-1]["id"],), compacted=False)

    return op


def op_supersede_after(session_id: str, message_id: int) -> PgWriteOp[int]:
    after = int(message_id)
    return lambda conn, events: _hide(conn, events, session_id, "AND id > ?", (after,), compacted=True)


def op_mark_compacted(session_id: str, up_to_id: int | None = None) -> PgWriteOp[int]:
    where, params = ("AND id <= ?", (int(up_to_id),)) if up_to_id is not None else ("", ())
    return lambda conn, events: _hide(conn, events, session_id, where, params, compacted=True)


# -- routing entries and inbound de-duplication -------------------------------------------------
def op_set_key(
    session_key: str, session_id: str, origin: dict[str, Any] | None, reason: str | None
) -> PgWriteOp[dict[str, Any]]:
    now = time.time()
    origin_json = json_or_none(origin)

    def op(conn: Connection, events: Events) -> dict[str, Any]:
        conn.execute(
            "INSERT INTO session_keys AS k (session_key, session_id, origin, created_at, updated_at, reason) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_key) DO UPDATE SET "
            "session_id = excluded.session_id, origin = COALESCE(excluded.origin, k.origin), "
            "updated_at = excluded.updated_at, reason = excluded.reason",
            (session_key, session_id, origin_json, now, now, reason),
        )
        entry = queries.key_row(conn, session_key)  # portable SQL
        assert entry is not None
        events.append(KeyChanged(entry))
        return entry

    return op


def op_move_key(
    session_key: str,
    session_id: str,
    origin: dict[str, Any] | None,
    reason: str | None,
    *,
    create: tuple[str, dict[str, Any]] | None = None,
    reopen: bool = False,
    end_previous: str | None = None,
) -> PgWriteOp[dict[str, Any]]:
    first: PgWriteOp[None] | None = None
    if create is not None:
        first = op_create_session(session_id, create[0], dict(create[1]))
    elif reopen:
        first = op_reopen(session_id)
    move = op_set_key(session_key, session_id, origin, reason)
    end = op_end(end_previous, reason or "ended") if end_previous and end_previous != session_id else None

    def op(conn: Connection, events: Events) -> dict[str, Any]:
        if first is not None:
            first(conn, events)
        entry = move(conn, events)
        if end is not None:
            try:
                end(conn, events)
            except UnknownSession:  # deleted meanwhile: nothing to end
                pass
        return entry

    return op


def op_delete_key(session_key: str) -> PgWriteOp[None]:
    def op(conn: Connection, events: Events) -> None:
        if conn.execute("DELETE FROM session_keys WHERE session_key = ?", (session_key,)).rowcount:
            events.append(KeyDeleted(session_key))

    return op


def mark_seen(conn: Connection, platform: str, event_id: str) -> bool:
    """Remember an inbound event id (in the caller's transaction); True if it was new."""
    return (
        conn.execute(
            "INSERT INTO processed_events (platform, event_id, seen_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (str(platform), str(event_id), time.time()),
        ).rowcount
        == 1
    )


def op_mark_seen(platform: str, event_id: str) -> PgWriteOp[bool]:
    return lambda conn, events: mark_seen(conn, platform, event_id)
