"""Read queries over the schema, as plain SQL functions of a connection: session and key rows,
finding a session by what a person types, listing, lineage chains and their titles, and stats.
`SessionDB` calls them on its per-thread read connection.

A session row crosses floors as `Session`, a TypedDict: still the plain dict §10 callers index,
with one set of key names (the table's columns) wherever it comes from.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, TypedDict, cast

from gateway.storage.conn import Conn
from gateway.storage.schema import TITLE_MAX


class Session(TypedDict):
    """A row of `sessions`."""

    id: str
    source: str
    user_id: str | None
    session_key: str | None
    chat_id: str | None
    chat_type: str | None
    chat_name: str | None
    thread_id: str | None
    user_name: str | None
    model: str | None
    title: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    last_active_at: float
    message_count: int  # messages in the conversation (schema.IN_CONVERSATION)
    input_tokens: int
    output_tokens: int
    preview: str | None


def session_row(conn: Conn, session_id: str) -> Session | None:
    row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return cast(Session, dict(row)) if row else None


def _key_entry(row: Any) -> dict:
    entry = dict(row)
    entry["origin"] = json.loads(entry["origin"]) if entry["origin"] else None
    return entry


def key_row(conn: Conn, session_key: str) -> dict | None:
    row = conn.execute("SELECT * FROM session_keys WHERE session_key = ?", (session_key,)).fetchone()
    return _key_entry(row) if row else None


KEY_COLUMNS = ("session_key", "session_id", "origin", "created_at", "updated_at", "reason")


def key_row_with_session(conn: Conn, session_key: str) -> tuple[dict | None, dict | None]:
    """A key's entry and its session's row in one lookup (the runner's per-message read)."""
    cur = conn.execute(
        f"SELECT {', '.join('k.' + c for c in KEY_COLUMNS)}, s.* FROM session_keys k "
        "LEFT JOIN sessions s ON s.id = k.session_id WHERE k.session_key = ?",
        (session_key,),
    )
    row = cur.fetchone()
    if row is None:
        return None, None
    names = [d[0] for d in cur.description]
    n = len(KEY_COLUMNS)
    entry = _key_entry(dict(zip(KEY_COLUMNS, row[:n])))
    session = dict(zip(names[n:], row[n:])) if row[n] is not None else None  # s.id: NULL if gone
    return entry, session


def event_seen(conn: Conn, platform: str, event_id: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM processed_events WHERE platform = ? AND event_id = ?", (platform, event_id)
        ).fetchone()
        is not None
    )


def key_rows(conn: Conn) -> list[dict]:
    """Every routing entry, by key (one query: sessions.json is written from this)."""
    return [_key_entry(row) for row in conn.execute("SELECT * FROM session_keys ORDER BY session_key")]


def find_session(conn: Conn, ref: str) -> tuple[Session | None, list[str]]:
    """THE rule for the session a person names (the face's find_session, the CLI, /resume): an
    exact id, a unique id prefix (>= 6 characters), a title (the exact title first, then the same
    title in another letter case: titles are unique in any case; the exact match comes first for a
    database that held case-duplicates before they were made unique), else the unique random part
    at an id's end (>= 4 hex digits) that no id starts with. With no session: the ids a prefix or
    an end matched several of (prefix first), for the caller to name; else []."""
    ref = (ref or "").strip()
    if not ref:
        return None, []
    row = session_row(conn, ref)
    if row:
        return row, []
    d = conn.dialect
    if len(ref) >= 6 and re.fullmatch(r"[0-9a-f_]+", ref):
        prefix, params = d.id_prefix(ref)
        ids = conn.execute(f"SELECT id FROM sessions WHERE {prefix} LIMIT 2", params).fetchall()
        if len(ids) == 1:
            return session_row(conn, ids[0][0]), []
    hit = conn.execute(
        f"SELECT id FROM sessions WHERE {d.same_title} ORDER BY {d.exact_title} DESC, started_at LIMIT 1", (ref, ref)
    ).fetchone()
    if hit:
        return session_row(conn, hit[0]), []
    if not re.fullmatch(r"[0-9a-f_]{4,}", ref):
        return None, []
    prefix, params = d.id_prefix(ref)
    prefixed = [r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE {prefix} ORDER BY id", params)]
    suffixed = (
        [r[0] for r in conn.execute("SELECT id FROM sessions WHERE id LIKE '%' || ? ORDER BY id", (ref,))]
        if re.fullmatch(r"[0-9a-f]{4,}", ref)
        else []
    )
    if not prefixed and len(suffixed) == 1:
        return session_row(conn, suffixed[0]), []
    several = prefixed if len(prefixed) > 1 else suffixed
    return None, several if len(several) > 1 else []


def list_sessions(
    conn: Conn,
    source: str | None = None,
    user_id: str | None = None,
    limit: int = 20,
    offset: int = 0,
    exclude_sources: Iterable[str] | None = None,
    titled_only: bool = False,
) -> list[Session]:
    """By last activity. `user_id`: sessions the person started or took part in."""
    where, params = [], []
    if source:
        where.append("s.source = ?")
        params.append(str(getattr(source, "value", source)))
    excluded = [s for s in (exclude_sources or []) if s]
    if excluded:
        where.append(f"s.source NOT IN ({','.join('?' * len(excluded))})")
        params += excluded
    if user_id:
        where.append("(s.user_id = ? OR s.id IN (SELECT session_id FROM session_participants WHERE user_id = ?))")
        params += [user_id, user_id]
    if titled_only:
        where.append("s.title IS NOT NULL")
    sql = (
        "SELECT s.* FROM sessions s"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY s.last_active_at DESC, s.id DESC LIMIT ? OFFSET ?"
    )
    return [cast(Session, dict(r)) for r in conn.execute(sql, [*params, int(limit), int(offset)])]


def count_by_source(conn: Conn) -> dict[str, int]:
    """Sessions per platform, most first."""
    return dict(conn.execute("SELECT source, COUNT(*) FROM sessions GROUP BY source ORDER BY 2 DESC").fetchall())


def session_ids(conn: Conn, source: str | None = None) -> list[str]:
    """Every session id (of one platform), oldest first."""
    sql, params = "SELECT id FROM sessions", []
    if source:
        sql, params = sql + " WHERE source = ?", [str(getattr(source, "value", source))]
    return [r[0] for r in conn.execute(sql + " ORDER BY started_at, id", params)]


def idle_sessions(conn: Conn, cutoff: float) -> list[str]:
    """Sessions whose last activity is before `cutoff` (epoch seconds), longest idle first."""
    rows = conn.execute("SELECT id FROM sessions WHERE last_active_at < ? ORDER BY last_active_at", (cutoff,))
    return [r[0] for r in rows]


def children(conn: Conn, session_id: str) -> list[str]:
    rows = conn.execute("SELECT id FROM sessions WHERE parent_session_id = ? ORDER BY started_at, id", (session_id,))
    return [r[0] for r in rows]


def root_of(conn: Conn, session_id: str) -> str:
    """The first session of a compression/delegation chain. A cycle stops the walk."""
    seen, current = {session_id}, session_id
    while True:
        row = conn.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (current,)).fetchone()
        parent = row[0] if row else None
        if not parent or parent in seen:
            return current
        seen.add(parent)
        current = parent


def chain_of(conn: Conn, session_id: str) -> list[str]:
    """The whole chain `session_id` belongs to: its root and every descendant, root first."""
    root = root_of(conn, session_id)
    chain, seen, frontier = [root], {root}, [root]
    while frontier:
        nxt = []
        for sid in frontier:
            for child in children(conn, sid):
                if child not in seen:
                    seen.add(child)
                    chain.append(child)
                    nxt.append(child)
        frontier = nxt
    if session_id not in seen:  # a cycle that does not lead back to the walked root
        chain.append(session_id)
    return chain


def title_holder(conn: Conn, title: str, except_id: str | None = None) -> str | None:
    """THE title rule: the session (other than `except_id`) that has `title` in any letter case, so
    that a title typed to /resume or the CLI names one session. The unique index on
    sessions(title COLLATE NOCASE) enforces the same rule on every write."""
    d = conn.dialect
    row = conn.execute(
        f"SELECT id FROM sessions WHERE {d.same_title} AND {d.other_id} LIMIT 1", (title, except_id)
    ).fetchone()
    return row[0] if row else None


def next_lineage_title(conn: Conn, title: str) -> str:
    """ "x" -> "x #2", "x #2" -> "x #3", skipping numbers already taken."""
    m = re.fullmatch(r"(.*?) #(\d+)", title.strip())
    base, n = (m.group(1), int(m.group(2)) + 1) if m else (title.strip(), 2)
    base = base[: TITLE_MAX - 8]
    while title_holder(conn, f"{base} #{n}") is not None:
        n += 1
    return f"{base} #{n}"


def stats(conn: Conn) -> dict[str, Any]:
    count = lambda sql: conn.execute(sql).fetchone()[0]
    out: dict[str, Any] = {
        "schema_version": conn.dialect.schema_version,
        "sessions": count("SELECT COUNT(*) FROM sessions"),
        "messages": count("SELECT COUNT(*) FROM messages"),
        "hidden_messages": count("SELECT COUNT(*) FROM messages WHERE active = 0"),
        "keys": count("SELECT COUNT(*) FROM session_keys"),
        **conn.dialect.sizes(conn),
    }
    return out


PAGE_COLUMNS = (
    "s.id, s.title, s.source, s.user_id, s.user_name, s.session_key, s.chat_type, s.chat_name, "
    "s.started_at, s.last_active_at, s.ended_at, s.end_reason, s.message_count, s.preview, s.parent_session_id"
)


def list_sessions_page(
    conn: Conn,
    *,
    source: str | None = None,
    user_id: str | None = None,
    titled: bool | None = None,
    active_from: float | None = None,
    active_before: float | None = None,
    after: tuple[float, str] | None = None,
    limit: int = 50,
) -> list[dict]:
    """One page of sessions by last activity, newest first, continuing strictly after the
    (last_active_at, id) of the previous page's last row (keyset paging: page 2,000 costs what
    page 1 costs, where OFFSET re-reads every skipped row). `user_id`: sessions the person
    started or took part in; `titled`: True titled only, False untitled only; the dates bound
    last activity, `active_before` exclusive."""
    where: list[str] = []
    params: list[Any] = []
    if source:
        where.append("s.source = ?")
        params.append(source)
    if user_id:
        where.append("(s.user_id = ? OR s.id IN (SELECT session_id FROM session_participants WHERE user_id = ?))")
        params += [user_id, user_id]
    if titled is True:
        where.append("s.title IS NOT NULL")
    elif titled is False:
        where.append("s.title IS NULL")
    if active_from is not None:
        where.append("s.last_active_at >= ?")
        params.append(float(active_from))
    if active_before is not None:
        where.append("s.last_active_at < ?")
        params.append(float(active_before))
    if after is not None:
        # spelt as a range plus a tie-break so SQLite walks the index from the cursor and stops at
        # LIMIT; "(a < ? OR (a = ? AND id < ?))" became a MULTI-INDEX OR that collected and sorted
        # every older row before the first one was returned
        where.append("s.last_active_at <= ? AND (s.last_active_at < ? OR s.id < ?)")
        params += [float(after[0]), float(after[0]), str(after[1])]
    sql = (
        f"SELECT {PAGE_COLUMNS} FROM sessions s"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY s.last_active_at DESC, s.id DESC LIMIT ?"
    )
    return [dict(r) for r in conn.execute(sql, [*params, int(limit)])]


def sessions_with_key(conn: Conn, session_key: str, user_id: str | None = None, limit: int = 50) -> list[dict]:
    """The newest `limit` sessions a conversation key has pointed at, oldest first: its reset
    history. sessions.session_key has no index of its own; pass the session's `user_id` (a key
    belongs to one person's chat) and the walk is over that person's sessions only."""
    narrow, params = ("user_id = ? AND ", [user_id]) if user_id else ("", [])
    rows = conn.execute(
        "SELECT id, title, started_at, last_active_at, ended_at, end_reason, message_count FROM sessions "
        f"WHERE {narrow}session_key = ? ORDER BY started_at DESC, id DESC LIMIT ?",
        (*params, session_key, int(limit)),
    ).fetchall()
    return [dict(r) for r in reversed(rows)]


def messages_by_id(conn: Conn, message_ids: Iterable[int]) -> dict[int, dict]:
    """Messages by id (session, role, content, time, flags); ids that do not exist are left out."""
    ids = [int(i) for i in message_ids][:500]
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT id, session_id, role, content, timestamp, active, compacted FROM messages "
        f"WHERE id IN ({','.join('?' * len(ids))})",
        ids,
    )
    return {r["id"]: dict(r) for r in rows}


def as_conversation(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stored message rows as the model's conversation: role and content, tool calls decoded,
    a tool result's call id and tool name (one rule for both storage backends)."""
    out = []
    for row in rows:
        msg: dict[str, Any] = {"role": row["role"], "content": row["content"]}
        if row["tool_calls"]:
            try:
                msg["tool_calls"] = json.loads(row["tool_calls"])
            except ValueError:
                pass
        if row["role"] == "tool":
            msg["tool_call_id"] = row["tool_call_id"]
            if row["tool_name"]:
                msg["name"] = row["tool_name"]
        out.append(msg)
    return out


def message_session(conn: Conn, message_id: int) -> str | None:
    row = conn.execute("SELECT session_id FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row[0] if row else None


def participants(conn: Conn, session_id: str) -> set[str]:
    return {r[0] for r in conn.execute("SELECT user_id FROM session_participants WHERE session_id = ?", (session_id,))}
