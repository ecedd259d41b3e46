"""The PostgreSQL storage backend (DESIGN §14): the same face as gateway/db.py's SessionDB, the same
write ops and typed commit events, over one database that several `chinwag run` replicas share.

Importing this package needs no driver; `gateway.storage.postgres.db` (PostgresSessionDB) needs
psycopg 3 and psycopg_pool (the `postgres` extra).
"""

from __future__ import annotations

from typing import Any

DIALECT = "postgres"


def is_postgres(conn: Any) -> bool:
    """Whether a connection handed to `db.read(fn)` is this backend's: the few callers above
    storage with one backend-specific statement ask this."""
    return getattr(conn, "dialect", "sqlite") == DIALECT
