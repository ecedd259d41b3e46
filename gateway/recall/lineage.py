"""Conversations as recall sees them: lineage roots, who took part, and their order in time.

A session's compression and delegation children continue it, so recall counts a lineage (the
root and every session descending from it) as one conversation: `SessionRows` loads session rows
in batches (thousands per query on a large store, as plain tuples) and resolves each to its root,
cycle-safe. `allowed_sessions` is the privacy rule's set (sessions a person started or wrote in),
and `ordered_conversation` finds a person's first or latest conversation, for questions that name
one by its place in time ("the first time we talked", 上次我们聊; gateway/recall/dates.py).
"""

from __future__ import annotations

from typing import Iterable

from gateway.storage.conn import Conn


class SessionRows:
    """Session rows loaded in batches, and cycle-safe lineage roots over them."""

    COLS = "id, source, user_id, parent_session_id, title, started_at, last_active_at, message_count, preview"
    LEAN = "id, source, parent_session_id, last_active_at, message_count"  # what ranking needs
    NAMES = [c.strip() for c in COLS.split(",")]

    def __init__(self, conn: Conn, cols: str = COLS) -> None:
        self.conn = conn
        self.cols = cols
        self.names = [c.strip() for c in cols.split(",")]
        self.rows: dict[str, dict | None] = {}
        self._roots: dict[str, str] = {}

    def load(self, ids: Iterable[str]) -> None:
        missing = [i for i in dict.fromkeys(ids) if i and i not in self.rows]
        cursor = self.conn.cursor()
        cursor.row_factory = None  # plain tuples: thousands of rows per query on a large store
        names = self.names
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            for row in cursor.execute(
                f"SELECT {self.cols} FROM sessions WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ):
                self.rows[row[0]] = dict(zip(names, row))
            for sid in chunk:
                self.rows.setdefault(sid, None)

    def get(self, sid: str) -> dict | None:
        if sid not in self.rows:
            self.load([sid])
        return self.rows[sid]

    def root(self, sid: str) -> str:
        """Follow parent_session_id to the first session. In a cycle, the smallest id of the cycle
        is the root, so every member of a broken chain maps to the same session."""
        if sid in self._roots:
            return self._roots[sid]
        path: list[str] = []
        index: dict[str, int] = {}
        current: str | None = sid
        result: str | None = None
        while current is not None:
            if current in self._roots:
                result = self._roots[current]
                break
            if current in index:  # cycle: path[index[current]:] loops
                result = min(path[index[current] :])
                break
            index[current] = len(path)
            path.append(current)
            row = self.get(current)
            parent = row["parent_session_id"] if row else None
            if not parent or self.get(parent) is None:
                result = current
                break
            current = parent
        assert result is not None
        for node in path:
            self._roots[node] = result
        return result

    def known_roots(self) -> dict[str, str]:
        """Session -> root for every session resolved so far."""
        return self._roots

    def roots(self, ids: Iterable[str]) -> dict[str, str]:
        ids = list(dict.fromkeys(ids))
        self.load(ids)
        # load parents level by level so root walks rarely hit the database one row at a time
        frontier = {r["parent_session_id"] for i in ids if (r := self.rows.get(i)) and r["parent_session_id"]}
        while frontier - self.rows.keys():
            self.load(frontier)
            frontier = {r["parent_session_id"] for i in frontier if (r := self.rows.get(i)) and r["parent_session_id"]}
        out: dict[str, str] = {}
        for i in ids:
            row = self.rows.get(i)
            if row is None or not row["parent_session_id"]:  # no lineage: its own root (the common case)
                self._roots[i] = out[i] = i
            else:
                out[i] = self.root(i)
        return out


def allowed_sessions(conn: Conn, person_id: str) -> set[str]:
    """Sessions the person started or wrote in."""
    rows = conn.execute(
        "SELECT id FROM sessions WHERE user_id = ? UNION SELECT session_id FROM session_participants WHERE user_id = ?",
        (person_id, person_id),
    )
    return {r[0] for r in rows}


def recent_own(conn: Conn, person_id: str, messages: int) -> list[str]:
    """The person's sessions, most recently active first, until they hold `messages` messages
    together (the one that crosses it included): what recall's meaning stage compares for them, so
    a person with years of conversations costs a query no more than one with a few weeks."""
    rows = conn.execute(
        "SELECT id, message_count FROM sessions WHERE user_id = ? "
        "OR id IN (SELECT session_id FROM session_participants WHERE user_id = ?) ORDER BY last_active_at DESC",
        (person_id, person_id),
    )
    out: list[str] = []
    held = 0
    for sid, count in rows:
        if held >= messages:
            break
        out.append(sid)
        held += int(count or 0)
    return out


def ordered_conversation(
    conn: Conn, meta: SessionRows, order: str, person_id: str | None, hidden: set[str], excluded: set[str]
) -> str | None:
    """The root of the person's first conversation (order "first") or of their latest one that is
    not excluded (the current conversation is), or None. Without a person: of everyone's."""
    who = (
        "WHERE (user_id = ? OR id IN (SELECT session_id FROM session_participants WHERE user_id = ?))"
        if person_id
        else ""
    )
    by = "started_at ASC" if order == "first" else "last_active_at DESC"
    rows = conn.execute(
        f"SELECT id FROM sessions {who} ORDER BY {by} LIMIT 50", (person_id, person_id) if person_id else ()
    )
    ids = [r[0] for r in rows]
    roots = meta.roots(ids)
    for sid in ids:
        root = roots[sid]
        row = meta.get(root)
        if row is not None and row["source"] not in hidden and root not in excluded and sid not in excluded:
            return root
    return None
