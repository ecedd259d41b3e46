"""The tool-call journal (DESIGN §15): an agent tool call is committed before it is sent and its
result when it returns, so a turn rerun after a crash reuses what was done and never silently
repeats a call that may have had an effect (an order cancelled, a mail sent).

A call is keyed by its turn's inbox entry and its position among the turn's journaled calls, not
by the model's tool_call id: a rerun asks the model again, and the model (or a server that omits
ids) names the same call differently; the position and the call itself (server, tool, arguments)
are what a rerun repeats. A rerun whose call at a position differs writes over the old row. The
rows go with their inbox entry when upkeep prunes it (gateway.storage.inbox.prune).

Plain SQL that runs as written on SQLite and PostgreSQL (the caller runs it in the single
writer's transaction, fenced by the turn's scope like every write of a turn).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.storage.conn import Conn

# The table once for both databases: type names each reads the same way (SQLite gives bigint and
# integer INTEGER affinity, double precision REAL, text TEXT; DESIGN §4 storage/schema.py).
TABLE = """
    CREATE TABLE tool_calls (
        inbox_id bigint NOT NULL,
        position integer NOT NULL,
        call_id text NOT NULL,
        server text NOT NULL,
        tool text NOT NULL,
        arguments text NOT NULL,
        state text NOT NULL,
        result text,
        outcome text,
        approval text,
        started_at double precision NOT NULL,
        done_at double precision,
        PRIMARY KEY (inbox_id, position)
    );
"""

STARTED, DONE = "started", "done"


def start(conn: Conn, inbox_id: int, position: int, call_id: str, server: str, tool: str, arguments: str) -> None:
    """The call is about to be sent (a rerun's different call at this position replaces the row)."""
    conn.execute(
        "INSERT INTO tool_calls (inbox_id, position, call_id, server, tool, arguments, state, started_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (inbox_id, position) DO UPDATE SET "
        "call_id = excluded.call_id, server = excluded.server, tool = excluded.tool, "
        "arguments = excluded.arguments, state = excluded.state, started_at = excluded.started_at, "
        "result = NULL, outcome = NULL, done_at = NULL",
        (inbox_id, position, call_id, server, tool, arguments, STARTED, time.time()),
    )


def finish(conn: Conn, inbox_id: int, position: int, result: str, outcome: str, approval: str | None) -> None:
    """The call returned (or was denied, or failed on the way): its result as the model got it."""
    conn.execute(
        "UPDATE tool_calls SET state = ?, result = ?, outcome = ?, approval = ?, done_at = ? "
        "WHERE inbox_id = ? AND position = ?",
        (DONE, result, outcome, approval, time.time(), inbox_id, position),
    )


def find(conn: Conn, inbox_id: int, position: int) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM tool_calls WHERE inbox_id = ? AND position = ?", (inbox_id, position)).fetchone()
    return dict(row) if row is not None else None


def of_entry(conn: Conn, inbox_id: int) -> list[dict[str, Any]]:
    """A turn's journaled calls in order (tests and the console read them)."""
    rows = conn.execute("SELECT * FROM tool_calls WHERE inbox_id = ? ORDER BY position", (inbox_id,))
    return [dict(r) for r in rows]
