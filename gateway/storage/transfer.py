"""The import/export format of DESIGN §10: one JSON object per session,
`{"session": {...}, "messages": [{...}, ...]}`, with every row, hidden ones and their flags included.
A message that had files carries `"attachments": [{kind, mime_type, bytes, sha256, file_name, ...}]`
(the metadata only); a message without any has no such key, so a text-only export is what it was.

`check_record` is the one statement of what a valid record is; the CLI calls it per line (to name
the line) and `import_op` calls it again on what it is given (callers other than the CLI exist).
An import is validated whole before anything is written and runs as one write: all or nothing.

The bytes travel only when asked (`export --with-media`): each kept file once, as its own line
`{"media": {"sha256": ..., "bytes": N, "base64": ...}}` placed before the first session that needs it.
A line per file, not a key inside the session's record, because a session with a hundred photos
would otherwise be one line of hundreds of megabytes that must be held whole; this way an import
holds one file at a time (at most media.max_bytes, 20 MB by default, and a third more as base64) and
a photo shared by many sessions travels once, as it is stored once. The export stays one
self-contained file (it can go to stdout or through a pipe), which a sidecar directory would not.
On import every file is decoded and its SHA-256 checked before it is put in the store; a file that
does not match refuses the whole import, and files the import placed are taken out again when the
import fails (`MediaImport.finish`). Rows whose file did not come with the import and is not in the
store are imported marked dropped, so the store's accounting (total cap, media bytes) stays true.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
from typing import Any, Collection, Iterable, Iterator

from gateway.errors import ImportRecordError, TitleTaken
from gateway.storage import rows
from gateway.storage.conn import Conn, Dialect
from gateway.storage.dialect import SQLITE
from gateway.storage.events import Events, SessionRewritten, WriteOp
from gateway.storage.home import is_safe_session_id
from gateway.storage.media import KINDS, MediaStore
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
ATTACHMENT_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "mime_type": (str, _NULL),
    "bytes": (int, _NULL),
    "sha256": (str, _NULL),
    "file_name": (str, _NULL),
    "platform_file_id": (str, _NULL),
    "created_at": (int, float, _NULL),
    "dropped_at": (int, float, _NULL),
}
ATTACHMENT_COLUMNS = tuple(ATTACHMENT_TYPES)
MAX_NAME_CHARS = 1000  # a file name or type longer than this is not one
_SHA256 = re.compile(r"[0-9a-f]{64}")
MEDIA_LINE = re.compile(r'\s*\{\s*"media"\s*:')  # how a line of file bytes starts (cheap to test)


def _type_problem(obj: dict[str, Any], types: dict[str, tuple[type, ...]], where: str) -> str | None:
    for key, allowed in types.items():
        if key in obj:
            value = obj[key]
            bad_bool = isinstance(value, bool) and bool not in allowed
            if bad_bool or not isinstance(value, allowed):
                names = " or ".join("null" if t is _NULL else t.__name__ for t in allowed)
                return f"{where}{key} must be {names}, got {json.dumps(value)[:40]}"
    return None


def _attachments_problem(attachments: Any, where: str) -> str | None:
    if not isinstance(attachments, list):
        return f"{where}attachments must be a list"
    for n, att in enumerate(attachments, 1):
        at = f"{where}attachment {n}: "
        if not isinstance(att, dict):
            return f"{at}must be an object"
        if att.get("kind") not in KINDS:
            return f"{at}kind must be one of {', '.join(KINDS)}, got {json.dumps(att.get('kind'))[:40]}"
        problem = _type_problem(att, ATTACHMENT_TYPES, at)
        if problem:
            return problem
        sha = att.get("sha256")
        if sha is not None and not _SHA256.fullmatch(sha):
            return f"{at}sha256 must be 64 lowercase hex digits, got {sha[:40]!r}"
        if (att.get("bytes") or 0) < 0:
            return f"{at}bytes must not be negative"
        for key in ("mime_type", "file_name", "platform_file_id"):
            if len(att.get(key) or "") > MAX_NAME_CHARS:
                return f"{at}{key} is longer than {MAX_NAME_CHARS} characters"
    return None


def check_record(record: Any) -> str | None:
    """What is wrong with one import record, or None."""
    if isinstance(record, dict) and "media" in record and "session" not in record:
        return "this line holds a file's bytes (written by `export --with-media`); import with --with-media"
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
        if "attachments" in msg:
            problem = _attachments_problem(msg["attachments"], f"message {n}: ")
            if problem:
                return problem
    return None


def has_hidden_messages(record: dict[str, Any]) -> bool:
    """Some message of the record is not in the conversation (undone, retried, compacted)."""
    return any(not m.get("active", 1) or m.get("compacted") for m in record.get("messages") or [])


def kept_hashes(record: dict[str, Any]) -> list[str]:
    """The files a record's attachments still need (kept, not dropped), each once, in order."""
    seen: dict[str, None] = {}
    for msg in record.get("messages") or []:
        for att in msg.get("attachments") or []:
            if att.get("sha256") and att.get("dropped_at") is None:
                seen.setdefault(att["sha256"], None)
    return list(seen)


def export_attachments(conn: Conn, session_id: str) -> dict[int, list[dict[str, Any]]]:
    """message id -> the export form of its attachment rows (plain SQL: both backends run it)."""
    attachments: dict[int, list[dict[str, Any]]] = {}
    for row in conn.execute(
        f"SELECT message_id, {', '.join(ATTACHMENT_COLUMNS)} FROM attachments"
        " WHERE message_id IN (SELECT id FROM messages WHERE session_id = ?) ORDER BY id",
        (session_id,),
    ):
        values = dict(zip(ATTACHMENT_COLUMNS, tuple(row)[1:]))
        attachments.setdefault(row[0], []).append({k: v for k, v in values.items() if v is not None})
    return attachments


def export_record(conn: Conn, session: dict[str, Any], select: str = "SELECT * FROM messages") -> dict[str, Any]:
    """A session's export record; `select` reads a message row as the backend's face returns it."""
    attachments = export_attachments(conn, session["id"])
    messages = []
    for row in conn.execute(f"{select} WHERE session_id = ? ORDER BY id", (session["id"],)):
        msg = {k: v for k, v in dict(row).items() if v is not None and k != "session_id"}
        if "tool_calls" in msg:
            try:
                msg["tool_calls"] = json.loads(msg["tool_calls"])
            except ValueError:
                pass
        if msg["id"] in attachments:
            msg["attachments"] = attachments[msg["id"]]
        messages.append(msg)
    return {"session": session, "messages": messages}


def import_op(
    records: list[dict[str, Any]],
    skip_existing: bool = False,
    media_present: Collection[str] | None = None,
    dialect: Dialect = SQLITE,
) -> WriteOp[int]:
    """Check `records` (ImportRecordError names the first bad one) and return the write op that
    imports them; the op returns how many sessions it imported. A title already taken raises
    TitleTaken with the record's number. With `media_present` (the hashes whose files are in the
    store), an attachment kept in the export but whose file is not there is imported as dropped;
    without it, attachment rows are imported as they were exported. `dialect`: the store's (for
    what a message insert prepares first; the rest of the SQL here is plain)."""
    now = time.time()
    plan = []
    for n, record in enumerate(records, 1):
        problem = check_record(record)
        if problem:
            raise ImportRecordError(n, problem)
        session = dict(record["session"])
        sid, source = session.pop("id"), session.pop("source")
        try:
            create = rows.op_create_session(sid, source, {k: v for k, v in session.items() if k in SESSION_FIELDS})
            extra = [session.get(k) for k in SESSION_EXTRAS]
            appends = []
            for msg in record.get("messages") or []:
                fields = {k: msg.get(k) for k in MESSAGE_FIELDS if msg.get(k) is not None}
                flags = (int(msg.get("active", 1)), int(msg.get("compacted", 0)))
                files = [_attachment_values(att, media_present, now) for att in msg.get("attachments") or []]
                appends.append((rows.op_append(dialect, sid, msg["role"], msg.get("content"), fields), flags, files))
        except (TypeError, ValueError) as exc:
            raise ImportRecordError(n, f"session {sid}: {exc}") from None
        plan.append((n, sid, create, extra, appends))

    def op(conn: Conn, events: Events) -> int:
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
            for append, flags, files in appends:
                message_id = append(conn, events)
                for values in files:
                    conn.execute(
                        f"INSERT INTO attachments (message_id, {', '.join(ATTACHMENT_COLUMNS)})"
                        f" VALUES (?, {', '.join('?' * len(ATTACHMENT_COLUMNS))})",
                        (message_id, *values),
                    )
                if flags != (1, 0):
                    flagged = True
                    conn.execute("UPDATE messages SET active = ?, compacted = ? WHERE id = ?", (*flags, message_id))
            if flagged:  # the MessageAppended events carried the default flags
                rows.refresh_preview(conn, sid)
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


def _attachment_values(att: dict[str, Any], present: Collection[str] | None, now: float) -> tuple[Any, ...]:
    values = {k: att.get(k) for k in ATTACHMENT_COLUMNS}
    values["created_at"] = float(values["created_at"] or now)
    if present is not None and values["sha256"] and values["dropped_at"] is None and values["sha256"] not in present:
        values["dropped_at"] = now  # its bytes are not in this home: say so, as upkeep would
    return tuple(values[k] for k in ATTACHMENT_COLUMNS)


def files_present(store: MediaStore, records: Iterable[dict[str, Any]]) -> set[str]:
    """The hashes `records` keep whose files are in `store` (import_op's `media_present`)."""
    return {sha for record in records for sha in kept_hashes(record) if store.exists(sha)}


# -- the bytes, with --with-media ---------------------------------------------------------------------
def media_line(sha256: str, data: bytes) -> str:
    """One file as a line of the export (newline included)."""
    body = {"sha256": sha256, "bytes": len(data), "base64": base64.b64encode(data).decode("ascii")}
    return json.dumps({"media": body}) + "\n"


def read_media_line(raw: str) -> tuple[str, bytes]:
    """The (sha256, bytes) of a media line, checked: ValueError says what is wrong."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg})") from None
    body = obj.get("media") if isinstance(obj, dict) and set(obj) == {"media"} else None
    if not isinstance(body, dict):
        raise ValueError('expected a file as {"media": {"sha256": ..., "bytes": N, "base64": ...}}')
    sha, size, text = body.get("sha256"), body.get("bytes"), body.get("base64")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise ValueError("media.sha256 must be 64 lowercase hex digits")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"media {sha[:12]}: bytes must be a whole number")
    if not isinstance(text, str):
        raise ValueError(f"media {sha[:12]}: base64 must be a string")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"media {sha[:12]}: base64 is not valid base64") from None
    if len(data) != size:
        raise ValueError(f"media {sha[:12]}: holds {len(data):,} bytes, the line says {size:,}")
    if hashlib.sha256(data).hexdigest() != sha:
        raise ValueError(f"media {sha[:12]}: the bytes do not match their sha256 (the file was changed or damaged)")
    return sha, data


class MediaExport:
    """The media lines to write before each record: every kept file once per export."""

    def __init__(self, store: MediaStore) -> None:
        self.store = store
        self.written: set[str] = set()
        self.bytes = 0
        self.missing: set[str] = set()  # kept by a row, absent from the store: exported as named only

    def lines_for(self, record: dict[str, Any]) -> Iterator[str]:
        for sha in kept_hashes(record):
            if sha in self.written or sha in self.missing:
                continue
            try:
                data = self.store.read(sha)
            except FileNotFoundError:
                self.missing.add(sha)
                continue
            self.written.add(sha)
            self.bytes += len(data)
            yield media_line(sha, data)


class MediaImport:
    """Files of an import put into the store as their lines are read (one in memory at a time), and
    taken out again by `finish` when the import did not commit rows that need them."""

    def __init__(self, store: MediaStore) -> None:
        self.store = store
        self.placed: set[str] = set()  # files this import added (they were not in the store before)
        self.received: set[str] = set()
        self.bytes = 0

    def split(self, lines: Iterable[str]) -> list[str]:
        """Take the media lines of `lines` into the store and return the rest, with an empty line in
        place of each media line (so line numbers still count from the top of the input).
        ValueError names the line of a file that is not right."""
        rest: list[str] = []
        for lineno, raw in enumerate(lines, 1):
            if not MEDIA_LINE.match(raw):
                rest.append(raw)
                continue
            try:
                sha, data = read_media_line(raw)
            except ValueError as exc:
                raise ValueError(f"line {lineno}: {exc}") from None
            rest.append("")
            if sha not in self.received:
                fresh = not self.store.exists(sha)
                self.store.save_bytes(data)
                if fresh:
                    self.placed.add(sha)
                self.received.add(sha)
                self.bytes += len(data)
        return rest

    def finish(self, referenced: Collection[str]) -> int:
        """Take out the files this import placed that no row references (all of them when the
        import failed); returns how many."""
        return self.store.remove(sha for sha in self.placed if sha not in referenced)
