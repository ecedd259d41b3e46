"""`SQLITE`: SQLite's `Dialect` (gateway/storage/conn.py), the few things this database does its
own way under the SQL both backends share. Every SQLite connection carries it (connect.py), as a
class attribute, so a statement costs what it did.

What is SQLite's own: FTS5 prefix queries are expanded from the vocabulary first (recall's
PrefixTerms); `+model` keeps the planner off the (model, last_id) index (vectors.py); titles
compare with NOCASE (the unique index's collation); an id prefix is a range of the primary key;
the larger of two values is the two-argument `MAX`; a statement a unique index refuses leaves the
transaction usable (no savepoint); a message's id is allocated above a floor and its words are
indexed after its commit, in batches (gateway/storage/indexer.py says why); sizes come from the
pages (and dbstat where it is compiled in). Search and recall's reads are gateway/storage/search.py.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Sequence, cast

from gateway.storage import search
from gateway.storage.conn import Conn, Cursor
from gateway.storage.schema import MESSAGE_FIELDS, SCHEMA_VERSION

# The id: one above any id the table holds or ever held (message_ids.floor, raised on delete:
# gateway/storage/schema.py v9), so an id is never given twice. Two lookups, no write.
_INSERT_MESSAGE = (
    f"INSERT INTO messages (id, session_id, role, content, {', '.join(MESSAGE_FIELDS)}) "
    "VALUES ((SELECT max(COALESCE((SELECT max(id) FROM messages), 0), floor) + 1 FROM message_ids), "
    f"?, ?, ?, {', '.join('?' * len(MESSAGE_FIELDS))})"
)


class SqliteDialect:
    """SQLite's `Dialect` (see the module docstring)."""

    name = "sqlite"
    schema_version = SCHEMA_VERSION
    expands_prefixes = True
    indexes_after_commit = True
    model_filter = "+model"
    same_title = "title = ? COLLATE NOCASE"
    exact_title = "title = ? COLLATE BINARY"
    other_id = "id IS NOT ?"
    claim_lock = ""  # one writer: a write transaction is alone
    greatest = "MAX"
    substring_hits = staticmethod(search.substring_hits)
    recall_matches = staticmethod(search.recall_matches)
    matches_among = staticmethod(search.matches_among)

    def serialize(self, conn: Conn, name: str) -> None:
        pass  # one writer: every write transaction is serialized already

    def id_prefix(self, prefix: str) -> tuple[str, tuple[str, ...]]:
        return "id >= ? AND id < ?", (prefix, prefix + "\uffff")

    def word_hits(self, conn: Conn, expression: str, filters: tuple[str, list], limit: int, ranked: bool) -> list[Any]:
        return search.word_hits(conn, expression, filters, limit, ranked=ranked)

    def unless_duplicate(self, conn: Conn, sql: str, params: Sequence[Any]) -> Cursor | None:
        try:
            return conn.execute(sql, params)
        except sqlite3.IntegrityError:
            return None

    def prepare_message(self, content: str | None, row: dict[str, Any]) -> tuple[Any, ...]:
        return ()

    def insert_message(self, conn: Conn, values: Sequence[Any], extra: tuple[Any, ...]) -> int:
        cur = conn.execute(_INSERT_MESSAGE, values)
        return int(cast(sqlite3.Cursor, cur).lastrowid or 0)  # a SQLite connection's cursor

    def sizes(self, conn: Conn) -> dict[str, Any]:
        count = lambda sql: conn.execute(sql).fetchone()[0]
        out: dict[str, Any] = {"db_bytes": count("PRAGMA page_size") * count("PRAGMA page_count")}
        try:
            parts = conn.execute(
                "SELECT CASE WHEN name LIKE 'messages_fts%' THEN 'word_index' "
                "WHEN name LIKE 'messages_ident%' THEN 'substring_index' ELSE 'tables' END AS part, "
                "SUM(pgsize) FROM dbstat GROUP BY part"
            ).fetchall()
            out["bytes_by_part"] = {r[0]: r[1] for r in parts}
        except sqlite3.Error:  # dbstat not compiled in
            pass
        return out


SQLITE = SqliteDialect()
