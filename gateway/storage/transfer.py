"""The import/export format of DESIGN §10: one JSON object per session,
`{"session": {...}, "messages": [{...}, ...]}`, with every row, hidden ones and their flags included.

An import is validated whole before anything is written and runs as one write: all or nothing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Callable

from gateway.storage.schema import MESSAGE_FIELDS, ROLES, SESSION_FIELDS

if TYPE_CHECKING:
    from gateway.db import SessionDB

SESSION_EXTRAS = ("ended_at", "end_reason", "input_tokens", "output_tokens")


def export_record(conn: sqlite3.Connection, session: dict) -> dict:
    messages = []
    for row in conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session["id"],)):
        msg = {k: v for k, v in dict(row).items() if v is not None and k != "session_id"}
        if "tool_calls" in msg:
            try:
                msg["tool_calls"] = json.loads(msg["tool_calls"])
            except ValueError:
                pass
        messages.append(msg)
    return {"session": session, "messages": messages}


def import_op(db: "SessionDB", records: list[dict], skip_existing: bool = False) -> Callable:
    """Validate `records` and return the write op that imports them."""
    plan = []
    for n, record in enumerate(records, 1):
        session = dict(record.get("session") or {})
        sid, source = session.pop("id", None), session.pop("source", None)
        if not sid or not source:
            raise ValueError(f"record {n}: session needs 'id' and 'source'")
        create = db.op_create_session(sid, source, {k: v for k, v in session.items() if k in SESSION_FIELDS})
        extra = [session.get(k) for k in SESSION_EXTRAS]
        appends = []
        for m, msg in enumerate(record.get("messages") or [], 1):
            if not isinstance(msg, dict) or msg.get("role") not in ROLES:
                raise ValueError(f"record {n} ({sid}), message {m}: needs a role in {ROLES}")
            fields = {k: msg.get(k) for k in MESSAGE_FIELDS if msg.get(k) is not None}
            flags = (int(msg.get("active", 1)), int(msg.get("compacted", 0)))
            appends.append((db.op_append(sid, msg["role"], msg.get("content"), fields), flags))
        plan.append((sid, create, extra, appends))

    def op(conn: sqlite3.Connection, events: list) -> int:
        imported = 0
        for sid, create, extra, appends in plan:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
                if skip_existing:
                    continue
                raise ValueError(f"session {sid} already exists (use --skip-existing)")
            create(conn, events)
            flagged = False
            for append, flags in appends:
                message_id = append(conn, events)
                if flags != (1, 0):
                    flagged = True
                    conn.execute("UPDATE messages SET active = ?, compacted = ? WHERE id = ?", (*flags, message_id))
            if flagged:  # the "message" events carried the default flags
                events.append(("rewrite", {"session_id": sid}))
            conn.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ?, input_tokens = COALESCE(?, 0), "
                "output_tokens = COALESCE(?, 0), message_count = "
                "(SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1) WHERE id = ?",
                (*extra, sid, sid),
            )
            imported += 1
        return imported

    return op
