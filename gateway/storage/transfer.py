"""The import/export format of DESIGN §10: one JSON object per session,
`{"session": {...}, "messages": [{...}, ...]}`, with every row, hidden ones and their flags included.

`check_record` is the one statement of what a valid record is; the CLI calls it per line (to name
the line) and `import_op` calls it again on what it is given (callers other than the CLI exist).
An import is validated whole before anything is written and runs as one write: all or nothing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from gateway.errors import ImportRecordError, TitleTaken
from gateway.storage import rows
from gateway.storage.events import Events, SessionRewritten, WriteOp
from gateway.storage.home import is_safe_session_id
from gateway.storage.schema import IN_CONVERSATION, MESSAGE_FIELDS, ROLES, SESSION_FIELDS

SESSION_EXTRAS = ("ended_at", "end_reason", "input_tokens", "output_tokens")

_NULL = type(None)
SESSION_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "source": (str,),
    "title": (str, _NULL),
    "user_id": (str, _NULL),
    "session_key": (str, _NULL),
    "parent_session_id": (str, _NULL),
    "model": (str, _NULL),
    "started_at": (int, float, _NULL),
    "ended_at": (int, float, _NULL),
    "end_reason": (str, _NULL),
    "input_tokens": (int, _NULL),
    "output_tokens": (int, _NULL),
}
MESSAGE_TYPES: dict[str, tuple[type, ...]] = {
    "content": (str, _NULL),
    "timestamp": (int, float, _NULL),
    "tool_call_id": (str, _NULL),
    "tool_name": (str, _NULL),
    "token_count": (int, _NULL),
    "active": (int, bool),
    "compacted": (int, bool),
    "user_id": (str, _NULL),
    "platform_message_id": (str, int, _NULL),
    "tool_calls": (list, dict, str, _NULL),
}


def _type_problem(obj: dict[str, Any], types: dict[str, tuple[type, ...]], where: str) -> str | None:
    for key, allowed in types.items():
        if key in obj:
            value = obj[key]
            bad_bool = isinstance(value, bool) and bool not in allowed
            if bad_bool or not isinstance(value, allowed):
                names = " or ".join("null" if t is _NULL else t.__name__ for t in allowed)
                return f"{where}{key} must be {names}, got {json.dumps(value)[:40]}"
    return None


def check_record(record: Any) -> str | None:
    """What is wrong with one import record, or None."""
    if not isinstance(record, dict) or not isinstance(record.get("session"), dict):
        return 'expected an object like {"session": {...}, "messages": [...]}'
    session = record["session"]
    for key in ("id", "source"):
        if not session.get(key):
            return f"session.{key} is missing"
    problem = _type_problem(session, SESSION_TYPES, "session.")
    if problem:
        return problem
    if not is_safe_session_id(session["id"]):
        return f"session.id {session['id'][:40]!r} may only hold letters, digits, '_', '-' and '.'"
    messages = record.get("messages", [])
    if not isinstance(messages, list):
        return "messages must be a list"
    for n, msg in enumerate(messages, 1):
        if not isinstance(msg, dict):
            return f"message {n} must be an object"
        if msg.get("role") not in ROLES:
            return f"message {n}: role must be one of {', '.join(ROLES)}, got {json.dumps(msg.get('role'))}"
        problem = _type_problem(msg, MESSAGE_TYPES, f"message {n}: ")
        if problem:
            return problem
        if len(msg.get("content") or "") > rows.MAX_CONTENT_CHARS:
            return (
                f"message {n}: content is {len(msg['content']):,} characters; the limit is {rows.MAX_CONTENT_CHARS:,}"
            )
    return None


def has_hidden_messages(record: dict[str, Any]) -> bool:
    """Some message of the record is not in the conversation (undone, retried, compacted)."""
    return any(not m.get("active", 1) or m.get("compacted") for m in record.get("messages") or [])


def export_record(conn: sqlite3.Connection, session: dict[str, Any]) -> dict[str, Any]:
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


def import_op(records: list[dict[str, Any]], skip_existing: bool = False, ops: Any = rows) -> WriteOp[int]:
    """Check `records` (ImportRecordError names the first bad one) and return the write op that
    imports them; the op returns how many sessions it imported. A title already taken raises
    TitleTaken with the record's number. `ops`: the backend's write ops (its SQL here is plain)."""
    plan = []
    for n, record in enumerate(records, 1):
        problem = check_record(record)
        if problem:
            raise ImportRecordError(n, problem)
        session = dict(record["session"])
        sid, source = session.pop("id"), session.pop("source")
        try:
            create = ops.op_create_session(sid, source, {k: v for k, v in session.items() if k in SESSION_FIELDS})
            extra = [session.get(k) for k in SESSION_EXTRAS]
            appends = []
            for msg in record.get("messages") or []:
                fields = {k: msg.get(k) for k in MESSAGE_FIELDS if msg.get(k) is not None}
                flags = (int(msg.get("active", 1)), int(msg.get("compacted", 0)))
                appends.append((ops.op_append(sid, msg["role"], msg.get("content"), fields), flags))
        except (TypeError, ValueError) as exc:
            raise ImportRecordError(n, f"session {sid}: {exc}") from None
        plan.append((n, sid, create, extra, appends))

    def op(conn: sqlite3.Connection, events: Events) -> int:
        imported = 0
        for n, sid, create, extra, appends in plan:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
                if skip_existing:
                    continue
                raise ImportRecordError(n, f"session {sid} already exists (use --skip-existing)")
            try:
                create(conn, events)
            except TitleTaken as exc:
                raise TitleTaken(exc.title, exc.holder, record=n) from None
            flagged = False
            for append, flags in appends:
                message_id = append(conn, events)
                if flags != (1, 0):
                    flagged = True
                    conn.execute("UPDATE messages SET active = ?, compacted = ? WHERE id = ?", (*flags, message_id))
            if flagged:  # the MessageAppended events carried the default flags
                events.append(SessionRewritten(sid))
            conn.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ?, input_tokens = COALESCE(?, 0), "
                "output_tokens = COALESCE(?, 0), message_count = "
                f"(SELECT COUNT(*) FROM messages WHERE session_id = ? AND {IN_CONVERSATION}) WHERE id = ?",
                (*extra, sid, sid),
            )
            imported += 1
        return imported

    return op
