"""MEMORY.md and USER.md as rows of the `notes` table: on Postgres the replicas share no disk, so the
memory tool's two files live in the database (on SQLite they stay files in the home).

One row per file (`name` is the file name, `body` its whole text, `version` how many edits it has
had). An edit is read-change-write of the whole text, so two replicas editing the same file at once
would lose one edit if each wrote what it had read; `edit` therefore reads the row `FOR UPDATE`
inside the write's transaction: the second editor waits for the first to commit and then changes
the text the first one wrote. The change function runs inside the transaction and may raise to
refuse the edit (nothing is written).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from gateway.storage.postgres.connection import Connection

NAMES = ("MEMORY.md", "USER.md")


def check_name(name: str) -> str:
    if name not in NAMES:
        raise ValueError(f"no notes file {name!r} (there are {', '.join(NAMES)})")
    return name


def read(conn: Connection, name: str) -> tuple[str, int]:
    """(text, version) of one file; ("", 0) when it was never written."""
    row = conn.execute("SELECT body, version FROM notes WHERE name = ?", (check_name(name),)).fetchone()
    return (row[0], int(row[1])) if row else ("", 0)


def edit(conn: Connection, name: str, change: Callable[[str], str | None]) -> int:
    """Replace the text of `name` by change(current text), holding the row locked from the read to
    the commit. change returns None to leave the file as it is. Returns the version now stored."""
    conn.execute(
        "INSERT INTO notes (name, body, version, updated_at) VALUES (?, '', 0, ?) ON CONFLICT (name) DO NOTHING",
        (check_name(name), time.time()),
    )
    body, version = conn.execute("SELECT body, version FROM notes WHERE name = ? FOR UPDATE", (name,)).fetchone()
    updated = change(body)
    if updated is None or updated == body:
        return int(version)
    conn.execute(
        "UPDATE notes SET body = ?, version = version + 1, updated_at = ? WHERE name = ?",
        (updated, time.time(), name),
    )
    return int(version) + 1
