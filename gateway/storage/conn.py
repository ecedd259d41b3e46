"""The connection the shared SQL is written against: `Conn`, the part of a DB-API connection that
gateway/storage's plain SQL (rows, queries, inbox, outbox, media, vectors ...) and `db.read(fn)`
callers use, and `Dialect`, the few statements the two databases spell differently.

Why a Protocol and not a wrapper: SQLite's connection is sqlite3's own (a subclass adding only
`dialect`, gateway/storage/connect.py), so the SQLite path pays nothing for being typed; Postgres's
is gateway/storage/postgres/connection.py's, which takes the same `?` placeholders and gives rows
that index by position and by name. Code above storage asks `conn.dialect` for what differs and
never which backend runs (the whiteboard's "never" arrows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence

if TYPE_CHECKING:
    from gateway.storage.fts import Query

# a recall match: message id, session id, visible and of a wanted role, length in characters
RecallMatch = tuple[int, str, bool, int]


class Cursor(Protocol):
    """What the shared SQL reads from a statement: rows (tuples that also index by column name),
    the count of rows changed, the columns. `row_factory = None` asks for plain tuples where the
    backend can give them (thousands of rows per recall query)."""

    row_factory: Any

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def execute(self, sql: str, params: Any = ..., /) -> Cursor: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Dialect(Protocol):
    """What one database does its own way, for the shared SQL and recall: its name, whether prefix
    terms are expanded against a vocabulary before matching (FTS5) or answered by the index
    (Postgres), the filter on a vector window's model, how a title is compared in any letter case
    (`same_title`, `exact_title`: one `?` each; `other_id`: `id` differs from `?`, NULL included),
    the larger of two values (`greatest`, a function name), the writes that differ (a statement a
    unique index may refuse, the message insert: gateway/storage/rows.py), message search, and
    recall's two match reads, and what a claim of rows needs (gateway/storage/schedules.py:
    `claim_lock` after a SELECT skips rows another transaction claims; `serialize` orders the
    transactions that take one name)."""

    name: str
    schema_version: int
    expands_prefixes: bool
    indexes_after_commit: bool  # the word indexes are written after the commit (SQLite: indexer.py)
    model_filter: str
    same_title: str
    exact_title: str
    other_id: str
    greatest: str

    def sizes(self, conn: Conn) -> dict[str, Any]:
        """`sessions stats`' sizes: db_bytes, and bytes_by_part where the database can tell."""
        ...

    def unless_duplicate(self, conn: Conn, sql: str, params: Sequence[Any]) -> Cursor | None:
        """Run a write; None when a unique index refused it, the transaction still usable."""
        ...

    def prepare_message(self, content: str | None, row: dict[str, Any]) -> tuple[Any, ...]:
        """What the message insert needs besides the row, made in the caller's thread before the
        transaction (it may adjust `row`, which is also what the commit event carries)."""
        ...

    def insert_message(self, conn: Conn, values: Sequence[Any], extra: tuple[Any, ...]) -> int:
        """Insert a message (`values`: session_id, role, content, then MESSAGE_FIELDS; `extra`:
        prepare_message's); returns its new id, never one given before."""
        ...

    claim_lock: str

    def serialize(self, conn: Conn, name: str) -> None:
        """Hold `name` until the transaction ends: another transaction taking it waits."""
        ...

    def id_prefix(self, prefix: str) -> tuple[str, tuple[str, ...]]:
        """A condition on `id` starting with `prefix` that an index answers, and its parameters."""
        ...

    def word_hits(self, conn: Conn, expression: str, filters: tuple[str, list], limit: int, ranked: bool) -> list[Any]:
        """Search's word pass (gateway/storage/search.py): visible messages matching an FTS5
        expression, best first (`ranked`) or newest first; hit rows as search returns them."""
        ...

    def substring_hits(self, conn: Conn, query: Query, filters: tuple[str, list], limit: int) -> list[Any]:
        """Search's identifier pass: identifier terms as substrings, the other terms as words."""
        ...

    def recall_matches(
        self, conn: Conn, table: str, expr: str, roles: list[str], before_id: int | None, limit: int
    ) -> list[RecallMatch]:
        """The newest `limit` matches of one expression below `before_id` (`table` names the
        index: messages_fts for words, messages_ident for identifier substrings)."""
        ...

    def matches_among(self, conn: Conn, expr: str, ids: list[int], limit: int) -> list[int]:
        """Ids of messages matching the word expression, newest first, at most `limit`: every one
        of `ids` that matches is among them (others may be too; the caller keeps those it knows)."""
        ...


class Conn(Protocol):
    """A connection as the shared SQL uses it (sqlite3's spelling: `?` placeholders)."""

    @property
    def dialect(self) -> Dialect: ...

    def cursor(self) -> Cursor: ...

    def execute(self, sql: str, params: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, params: Any, /) -> Any: ...

    def tuples(self, sql: str, params: Any = ..., /) -> list[Any]:
        """Every row as a plain tuple, for reads of thousands of rows (no by-name rows to build)."""
        ...
