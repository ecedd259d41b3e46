"""`POSTGRES`: Postgres's `Dialect` (gateway/storage/conn.py), the few things this database does
its own way under the SQL both backends share. Every connection carries it (connection.py).

What is Postgres's own: a prefix is answered by the GIN index (nothing to expand first); the
planner weighs the vector indexes by their statistics (no `+model`); titles compare through
`ascii_fold`, the unique index's expression (schema.py); the larger of two values is `GREATEST`;
a statement a unique index may refuse runs in a savepoint (an error aborts the whole transaction
otherwise, and the op still has to ask who holds the title); a message is inserted with its word
and identifier columns, so it is searchable once committed, and they are made in the caller's
thread before the transaction (1.6 s for a 4M-character message, against the 3 s
idle-in-transaction limit of connection.py); sizes come from pg_relation_size. Search and recall's
reads are gateway/storage/postgres/search.py.
"""

from __future__ import annotations

from typing import Any, Sequence

from psycopg import errors

from gateway.storage.conn import Conn, Cursor
from gateway.storage.fts import ident_text
from gateway.storage.postgres import search
from gateway.storage.postgres.schema import SCHEMA_VERSION
from gateway.storage.postgres.tokens import tsquery_pair_of_fts, words_vector
from gateway.storage.postgres.vocabulary import expand_pair
from gateway.storage.schema import MESSAGE_FIELDS

# The id is the column's identity (never given twice).
_INSERT_MESSAGE = (
    f"INSERT INTO messages (session_id, role, content, {', '.join(MESSAGE_FIELDS)}, words, idents) "
    f"VALUES (?, ?, ?, {', '.join('?' * len(MESSAGE_FIELDS))}, ?::tsvector, ?) RETURNING id"
)
_TABLES_BYTES = (
    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind = 'r' AND n.nspname = current_schema()"
)
DATABASE_BYTES = "SELECT pg_database_size(current_database())"


SERIALIZE_LOCK = 0x53434844  # the first key of `serialize`'s advisory locks: "SCHD"


class PostgresDialect:
    """Postgres's `Dialect` (see the module docstring)."""

    name = "postgres"
    schema_version = SCHEMA_VERSION
    expands_prefixes = False
    indexes_after_commit = False
    model_filter = "model"
    same_title = "ascii_fold(title) = ascii_fold(?)"  # the unique index's expression (schema.py)
    exact_title = "title = ?"
    other_id = "id IS DISTINCT FROM ?"
    claim_lock = " FOR UPDATE SKIP LOCKED"  # replicas claiming at once take different rows, never wait
    greatest = "GREATEST"
    substring_hits = staticmethod(search.substring_hits)
    recall_matches = staticmethod(search.recall_matches)

    def serialize(self, conn: Conn, name: str) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (SERIALIZE_LOCK, name))

    def id_prefix(self, prefix: str) -> tuple[str, tuple[str, ...]]:
        return "starts_with(id, ?)", (prefix,)

    def word_hits(self, conn: Conn, expression: str, filters: tuple[str, list], limit: int, ranked: bool) -> list[Any]:
        return search.word_hits(conn, expand_pair(conn, tsquery_pair_of_fts(expression)), filters, limit, ranked=ranked)

    def matches_among(self, conn: Conn, expr: str, ids: list[int], limit: int) -> list[int]:
        return [mid for (mid,) in search.matches_among(conn, expr, ids, limit)]

    def unless_duplicate(self, conn: Conn, sql: str, params: Sequence[Any]) -> Cursor | None:
        conn.execute("SAVEPOINT unless_duplicate")
        try:
            cur = conn.execute(sql, params)
        except errors.UniqueViolation:
            conn.execute("ROLLBACK TO SAVEPOINT unless_duplicate")
            return None
        conn.execute("RELEASE SAVEPOINT unless_duplicate")
        return cur

    def prepare_message(self, content: str | None, row: dict[str, Any]) -> tuple[Any, ...]:
        if row["platform_message_id"] is not None:
            row["platform_message_id"] = str(row["platform_message_id"])  # a text column, as ids are text
        return words_vector(content), ident_text(content) or None

    def insert_message(self, conn: Conn, values: Sequence[Any], extra: tuple[Any, ...]) -> int:
        return int(conn.execute(_INSERT_MESSAGE, (*values, *extra)).fetchone()[0])

    def sizes(self, conn: Conn) -> dict[str, Any]:
        count = lambda sql: conn.execute(sql).fetchone()[0]
        words, idents = "pg_relation_size('idx_messages_words')", "pg_relation_size('idx_messages_idents')"
        return {
            "db_bytes": int(count(DATABASE_BYTES)),
            "bytes_by_part": {
                "word_index": int(count(f"SELECT {words}")),
                "substring_index": int(count(f"SELECT {idents}")),
                "tables": int(count(_TABLES_BYTES) - count(f"SELECT {words} + {idents}")),
            },
        }


POSTGRES = PostgresDialect()


def message_bytes(conn: Conn) -> float:
    """Bytes on disk per message: every table, index and TOAST of the schema over the messages
    (bench/postgres.py)."""
    total, n = conn.execute(_TABLES_BYTES).fetchone()[0], conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    return float(total) / max(1, n)
