"""A person's own settings, by their identity on a platform (DESIGN §17): today the language they
chose with `/language`. One row per person who chose something; the SQL is the same on SQLite and
PostgreSQL (an upsert both understand), so the face runs it for both backends."""

from __future__ import annotations

import time

from gateway.storage.conn import Conn

# Declared once for both databases (type names SQLite and PostgreSQL read alike:
# double precision REAL, text TEXT; DESIGN §4 storage/schema.py).
TABLE = """
    CREATE TABLE person_settings (
        platform text NOT NULL,
        person_id text NOT NULL,
        language text,
        updated_at double precision NOT NULL,
        PRIMARY KEY (platform, person_id)
    );
"""


def language(conn: Conn, platform: str, person_id: str) -> str | None:
    row = conn.execute(
        "SELECT language FROM person_settings WHERE platform = ? AND person_id = ?", (platform, person_id)
    ).fetchone()
    return row[0] if row else None


def set_language(conn: Conn, platform: str, person_id: str, chosen: str | None) -> None:
    """`chosen` None: back to automatic (the row stays, its language cleared)."""
    conn.execute(
        "INSERT INTO person_settings (platform, person_id, language, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (platform, person_id) DO UPDATE SET language = excluded.language, updated_at = excluded.updated_at",
        (platform, person_id, chosen, time.time()),
    )
