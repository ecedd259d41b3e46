"""The `schedules` table (DESIGN §16): plain SQL of a connection, the same on both backends.

A row is a scheduled job with one column per field of gateway.schedules.model.Schedule: the chat as
JSON (it is only ever read whole), its session key beside it (deleting a session finds its jobs
by an index), instants as epoch seconds (REAL / double precision, as the inbox keeps them). The
due-run poll reads `(enabled, next_run_at)` by an index: a poll a second over any number of jobs
costs one index probe.

What differs by database is the dialect's: `claim_lock`, the clause that makes two replicas'
claims skip each other's rows instead of waiting (Postgres FOR UPDATE SKIP LOCKED; SQLite has one
writer), and `serialize`, which makes the per-person count and the insert one step on Postgres (a
row lock cannot hold back a row not yet inserted).
"""

from __future__ import annotations

from typing import Any, Literal

from gateway.storage.conn import Conn

# The table once for both databases: type names each reads the same way (SQLite gives bigint and
# integer INTEGER affinity, double precision REAL, text TEXT; DESIGN §4 storage/schema.py).
TABLE = """
    CREATE TABLE schedules (
        id text PRIMARY KEY,
        owner text NOT NULL,
        chat text NOT NULL,
        session_key text NOT NULL,
        kind text NOT NULL,
        timezone text NOT NULL,
        prompt text NOT NULL,
        created_at double precision NOT NULL,
        next_run_at double precision,
        at double precision,
        cron text,
        every_minutes integer,
        last_run_at double precision,
        runs integer NOT NULL DEFAULT 0,
        enabled integer NOT NULL DEFAULT 1
    );
    CREATE INDEX idx_schedules_due ON schedules (enabled, next_run_at);
    CREATE INDEX idx_schedules_owner ON schedules (owner);
    CREATE INDEX idx_schedules_session_key ON schedules (session_key);
"""

COLUMNS = (
    "id",
    "owner",
    "chat",
    "session_key",
    "kind",
    "timezone",
    "prompt",
    "created_at",
    "next_run_at",
    "at",
    "cron",
    "every_minutes",
    "last_run_at",
    "runs",
    "enabled",
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM schedules"
# by next run; finished one-offs (no next run) last, by creation
_ORDER = " ORDER BY next_run_at IS NULL, COALESCE(next_run_at, created_at), id"

Created = Literal["created", "limit", "taken"]


def insert(conn: Conn, row: dict[str, Any], limit: int) -> Created:
    """Insert `row` unless its owner has `limit` unfinished jobs ("limit") or its id is used ("taken")."""
    conn.dialect.serialize(conn, f"schedules:{row['owner']}")
    count = conn.execute(
        "SELECT COUNT(*) FROM schedules WHERE owner = ? AND next_run_at IS NOT NULL", (row["owner"],)
    ).fetchone()[0]
    if count >= limit:
        return "limit"
    marks = ", ".join("?" * len(COLUMNS))
    inserted = conn.execute(
        f"INSERT INTO schedules ({', '.join(COLUMNS)}) VALUES ({marks}) ON CONFLICT (id) DO NOTHING RETURNING id",
        tuple(row[name] for name in COLUMNS),
    ).fetchone()
    return "created" if inserted else "taken"


def get(conn: Conn, schedule_id: str) -> dict[str, Any] | None:
    row = conn.execute(f"{_SELECT} WHERE id = ?", (schedule_id,)).fetchone()
    return dict(row) if row else None


def listing(conn: Conn, owner: str | None, include_finished: bool) -> list[dict[str, Any]]:
    """Jobs by next run, of one owner (None: everyone's); finished one-offs only when asked."""
    where, params = [], []
    if owner is not None:
        where.append("owner = ?")
        params.append(owner)
    if not include_finished:
        where.append("next_run_at IS NOT NULL")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return [dict(row) for row in conn.execute(_SELECT + clause + _ORDER, tuple(params))]


def set_enabled(conn: Conn, schedule_id: str, enabled: bool, next_run_at: float | None) -> dict[str, Any] | None:
    conn.execute(
        "UPDATE schedules SET enabled = ?, next_run_at = ? WHERE id = ?", (int(enabled), next_run_at, schedule_id)
    )
    return get(conn, schedule_id)


def due(conn: Conn, now: float, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` enabled jobs due at `now`, oldest first, locked for this transaction's claim."""
    rows = conn.execute(
        f"{_SELECT} WHERE enabled = 1 AND next_run_at <= ? ORDER BY next_run_at, id LIMIT ?{conn.dialect.claim_lock}",
        (now, limit),
    )
    return [dict(row) for row in rows]


def record_claim(conn: Conn, row: dict[str, Any]) -> None:
    """Write what a claim changed: the next run, the last run and the count of runs."""
    conn.execute(
        "UPDATE schedules SET next_run_at = ?, last_run_at = ?, runs = ? WHERE id = ?",
        (row["next_run_at"], row["last_run_at"], row["runs"], row["id"]),
    )


def delete(conn: Conn, column: Literal["id", "owner", "session_key"], value: str) -> int:
    """Delete the jobs whose `column` is `value`; how many."""
    return conn.execute(f"DELETE FROM schedules WHERE {column} = ?", (value,)).rowcount
