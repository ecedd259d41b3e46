"""Write ops over the schema, as plain functions: what `queries.py` is for reads, for both backends.

Each `op_*` checks and prepares its input in the caller's thread (validation, JSON encoding) and
returns a `WriteOp`, a function of (connection, events) that the single writer runs inside its
transaction, so a bad input fails its caller before it reaches the shared writer. The full-text
tokens are not prepared here: the deferred indexer makes them in its batches on the writer thread
(gateway/storage/indexer.py says why). Ops compose: `op_move_key` runs several in one transaction, and retention and
import build on them. Each op reports what it changed as typed events (gateway.storage.events).

The SQL is written once, in the spelling both databases take (`ON CONFLICT DO NOTHING`, an
aliased upsert target); what they spell differently is the connection's `Dialect`
(gateway/storage/conn.py): `greatest` (SQLite's two-argument MAX, Postgres's GREATEST), a
statement that may break a unique index (`unless_duplicate`: Postgres needs a savepoint to go on
after it), and the message insert (SQLite allocates the id above a floor and indexes later;
Postgres returns the id and writes the word columns with the row, made by `prepare_message`
in the caller's thread, before the transaction: 1.6 s for a 4M-character message, against a
3 s idle-in-transaction limit). `op_append` takes the store's dialect for that first step.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Iterable, Sequence

from gateway.errors import TitleTaken, UnknownSession
from gateway.storage import queries
from gateway.storage.conn import Conn, Dialect
from gateway.storage.events import (
    Events,
    IndexPending,
    KeyChanged,
    KeyDeleted,
    MessageAppended,
    SessionRewritten,
    WriteOp,
)
from gateway.storage.media import AttachmentRow, insert_attachments
from gateway.storage.schema import MESSAGE_FIELDS, ROLES, SESSION_FIELDS, TITLE_MAX, VISIBLE
from gateway.text import valid_or_none, valid_text

MAX_CONTENT_CHARS = 4_000_000
PREVIEW_CHARS = 200


def sanitize_title(title: str | None) -> str | None:
    """A title on one line: control and invisible characters become spaces, runs of space one,
    cut to TITLE_MAX; None when nothing is left."""
    if title is None:
        return None
    text = re.sub(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\ufeff]", " ", valid_text(str(title)))
    text = " ".join(text.split())[:TITLE_MAX].strip()
    return text or None


def json_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _title_taken(conn: Conn, title: str | None, session_id: str) -> TitleTaken:
    """The unique title index refused `title`: say which session holds it."""
    return TitleTaken(title, queries.title_holder(conn, title, except_id=session_id) if title else None)


def add_participant(conn: Conn, session_id: str, user_id: str) -> None:
    conn.execute(
        "INSERT INTO session_participants (session_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (session_id, user_id),
    )


# -- the checks of a write ---------------------------------------------------------------------
def check_session(session_id: str, source: Any, fields: dict[str, Any]) -> tuple[dict[str, Any], float, str]:
    """A session's fields checked and cleaned: (fields to store, started_at, source name)."""
    unknown = set(fields) - set(SESSION_FIELDS)
    if unknown:
        raise TypeError(f"unknown session field(s): {', '.join(sorted(unknown))}")
    if not session_id or not isinstance(session_id, str):
        raise ValueError("session_id must be a non-empty string")
    values = dict(fields)
    if "title" in values:
        values["title"] = sanitize_title(values["title"])
    started = float(values.pop("started_at", None) or time.time())
    return values, started, str(getattr(source, "value", source))


def check_message(role: str, content: Any, fields: dict[str, Any]) -> tuple[str | None, dict[str, Any], str | None]:
    """A message checked and encoded: (content, the MESSAGE_FIELDS row, the session preview it
    gives when it is the first user message)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    unknown = set(fields) - set(MESSAGE_FIELDS)
    if unknown:
        raise TypeError(f"unknown message field(s): {', '.join(sorted(unknown))}")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    content = valid_or_none(content)  # a lone surrogate (model output, an odd event) cannot be UTF-8
    if content is not None and len(content) > MAX_CONTENT_CHARS:
        raise ValueError(f"message content is {len(content):,} characters; the limit is {MAX_CONTENT_CHARS:,}")
    row = {k: fields.get(k) for k in MESSAGE_FIELDS}
    row["tool_calls"] = json_or_none(row["tool_calls"])
    for name in ("tool_calls", "tool_name", "reasoning", "finish_reason", "tool_call_id"):
        value = row[name]
        if isinstance(value, str):
            row[name] = valid_text(value)
    row["timestamp"] = float(row["timestamp"] or time.time())
    return content, row, preview_of(content) if role == "user" else None


def preview_of(content: str | None) -> str | None:
    """A session's preview from its first user message: one line, PREVIEW_CHARS at most."""
    line = " ".join((content or "").split())
    return line[:PREVIEW_CHARS] or None


def refresh_preview(conn: Conn, session_id: str) -> None:
    """Set the preview from the first user message still in the session: what /undo took back (or
    an import brought in hidden) must not stay on the lists (issue 28 item 12)."""
    first = conn.execute(
        f"SELECT content FROM messages WHERE session_id = ? AND role = 'user' AND {VISIBLE} "
        "AND content IS NOT NULL AND content <> '' ORDER BY id LIMIT 1",
        (session_id,),
    ).fetchone()
    conn.execute("UPDATE sessions SET preview = ? WHERE id = ?", (preview_of(first[0]) if first else None, session_id))


# -- sessions -------------------------------------------------------------------------------------
def op_create_session(session_id: str, source: Any, fields: dict[str, Any]) -> WriteOp[None]:
    """Create a session, or update the fields given of an existing one (upsert)."""
    values, started, source_name = check_session(session_id, source, fields)
    cols = ["id", "source", "started_at", "last_active_at", *values]
    params = [session_id, source_name, started, started, *values.values()]
    updates = ", ".join(["source = excluded.source", *(f"{c} = excluded.{c}" for c in values)])
    sql = (
        f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT (id) DO UPDATE SET {updates}"
    )

    def op(conn: Conn, events: Events) -> None:
        if conn.dialect.unless_duplicate(conn, sql, params) is None:
            raise _title_taken(conn, values.get("title"), session_id)
        if values.get("user_id"):
            add_participant(conn, session_id, values["user_id"])

    return op


def _op_update_session(session_id: str, sql: str, params: Iterable[Any]) -> WriteOp[None]:
    args = (*params, session_id)

    def op(conn: Conn, events: Events) -> None:
        if conn.execute(sql, args).rowcount == 0:
            raise UnknownSession(session_id)

    return op


def op_end(session_id: str, reason: str | None) -> WriteOp[None]:
    return _op_update_session(
        session_id, "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ?", (time.time(), reason)
    )


def op_reopen(session_id: str) -> WriteOp[None]:
    return _op_update_session(session_id, "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", ())


def op_add_tokens(session_id: str, input_tokens: int, output_tokens: int) -> WriteOp[None]:
    return _op_update_session(
        session_id,
        "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
        (int(input_tokens or 0), int(output_tokens or 0)),
    )


def op_touch(session_id: str, now: float) -> WriteOp[None]:
    """Count `now` as the session's activity (a /resume), never moving it back."""

    def op(conn: Conn, events: Events) -> None:
        sql = f"UPDATE sessions SET last_active_at = {conn.dialect.greatest}(last_active_at, ?) WHERE id = ?"
        conn.execute(sql, (now, session_id))

    return op


def op_set_title(session_id: str, title: str | None) -> WriteOp[str | None]:
    """Set (or with None clear) a title; the op returns it as stored (sanitised)."""
    clean = sanitize_title(title)

    def op(conn: Conn, events: Events) -> str | None:
        cur = conn.dialect.unless_duplicate(conn, "UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id))
        if cur is None:
            raise _title_taken(conn, clean, session_id)
        if not cur.rowcount:
            raise UnknownSession(session_id)
        return clean

    return op


# -- messages -------------------------------------------------------------------------------------
def op_append(
    dialect: Dialect,
    session_id: str,
    role: str,
    content: Any,
    fields: dict[str, Any],
    seen_event: tuple[str, str] | None = None,
    attachments: Sequence[AttachmentRow] = (),
    after: Callable[[Conn, int], Any] | None = None,
) -> WriteOp[int]:
    """The write of one message; the op returns its id. `seen_event` = (platform, event id) is
    marked seen, the message's `attachments` rows are added, and `after(conn, message_id)` runs
    (the inbox and outbox records that belong to this message: gateway.runtime.delivery), all in
    the same transaction. `dialect` is the store's, for what it prepares before the transaction."""
    content, row, preview = check_message(role, content, fields)
    extra = dialect.prepare_message(content, row)
    touch = (
        f"UPDATE sessions SET last_active_at = {dialect.greatest}(last_active_at, ?), "
        "message_count = message_count + 1, preview = COALESCE(preview, ?) WHERE id = ?"
    )

    def op(conn: Conn, events: Events) -> int:
        if not conn.execute(touch, (row["timestamp"], preview, session_id)).rowcount:
            raise UnknownSession(session_id)
        message_id = dialect.insert_message(conn, (session_id, role, content, *row.values()), extra)
        if dialect.indexes_after_commit:
            events.append(IndexPending(message_id))  # indexed in batches: gateway/storage/indexer.py
        if role == "user" and row["user_id"]:
            add_participant(conn, session_id, row["user_id"])
        if seen_event is not None:
            mark_seen(conn, *seen_event)
        if attachments:
            insert_attachments(conn, message_id, attachments)
        if after is not None:
            after(conn, message_id)
        stored = {"id": message_id, "session_id": session_id, "role": role, "content": content, **row}
        events.append(MessageAppended({**stored, "active": 1, "compacted": 0}))
        return message_id

    return op


def _hide(conn: Conn, events: Events, session_id: str, where: str, params: tuple, compacted: bool) -> int:
    """Take messages of the conversation (active ones matching `where`) out of it: compacted ones
    stay findable, the others (undone) do not. Returns how many."""
    sets = "active = 0, compacted = 1" if compacted else "active = 0"
    changed = conn.execute(
        f"UPDATE messages SET {sets} WHERE session_id = ? AND active = 1 {where}", (session_id, *params)
    ).rowcount
    if changed:
        conn.execute(
            f"UPDATE sessions SET message_count = {conn.dialect.greatest}(0, message_count - ?) WHERE id = ?",
            (changed, session_id),
        )
        if not compacted:  # undone: gone from the session, and from its preview
            refresh_preview(conn, session_id)
        events.append(SessionRewritten(session_id))
    return changed


def op_rewind(session_id: str, exchanges: int) -> WriteOp[int]:
    """`/undo`: hide the last `exchanges` user turns and all that followed."""
    exchanges = max(1, int(exchanges))

    def op(conn: Conn, events: Events) -> int:
        users = conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND active = 1 AND role = 'user' ORDER BY id DESC LIMIT ?",
            (session_id, exchanges),
        ).fetchall()
        if not users:
            return 0
        return _hide(conn, events, session_id, "AND id >= ?", (users[-1]["id"],), compacted=False)

    return op


def op_supersede_after(session_id: str, message_id: int) -> WriteOp[int]:
    """`/retry`: what followed `message_id` leaves the conversation; it stays searchable."""
    after = int(message_id)
    return lambda conn, events: _hide(conn, events, session_id, "AND id > ?", (after,), compacted=True)


def op_mark_compacted(session_id: str, up_to_id: int | None = None) -> WriteOp[int]:
    where, params = ("AND id <= ?", (int(up_to_id),)) if up_to_id is not None else ("", ())
    return lambda conn, events: _hide(conn, events, session_id, where, params, compacted=True)


# -- routing entries and inbound de-duplication -------------------------------------------------
def op_set_key(
    session_key: str, session_id: str, origin: dict[str, Any] | None, reason: str | None
) -> WriteOp[dict[str, Any]]:
    """Point a key at a session; the op returns the key's entry."""
    now = time.time()
    origin_json = json_or_none(origin)

    def op(conn: Conn, events: Events) -> dict[str, Any]:
        conn.execute(
            "INSERT INTO session_keys AS k (session_key, session_id, origin, created_at, updated_at, reason) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_key) DO UPDATE SET "
            "session_id = excluded.session_id, origin = COALESCE(excluded.origin, k.origin), "
            "updated_at = excluded.updated_at, reason = excluded.reason",
            (session_key, session_id, origin_json, now, now, reason),
        )
        entry = queries.key_row(conn, session_key)
        assert entry is not None  # just written, in this transaction
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
) -> WriteOp[dict[str, Any]]:
    """Create (`create` = (source, fields)) or reopen a session, point the key at it, then end the
    previous session with `reason`: one transaction, all or nothing."""
    first: WriteOp[None] | None = None
    if create is not None:
        first = op_create_session(session_id, create[0], dict(create[1]))
    elif reopen:
        first = op_reopen(session_id)
    move = op_set_key(session_key, session_id, origin, reason)
    end = op_end(end_previous, reason or "ended") if end_previous and end_previous != session_id else None

    def op(conn: Conn, events: Events) -> dict[str, Any]:
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


def op_delete_key(session_key: str) -> WriteOp[None]:
    def op(conn: Conn, events: Events) -> None:
        if conn.execute("DELETE FROM session_keys WHERE session_key = ?", (session_key,)).rowcount:
            events.append(KeyDeleted(session_key))

    return op


def mark_seen(conn: Conn, platform: str, event_id: str) -> bool:
    """Remember an inbound event id (in the caller's transaction); True if it was new."""
    return (
        conn.execute(
            "INSERT INTO processed_events (platform, event_id, seen_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (str(platform), str(event_id), time.time()),
        ).rowcount
        == 1
    )


def op_mark_seen(platform: str, event_id: str) -> WriteOp[bool]:
    return lambda conn, events: mark_seen(conn, platform, event_id)
