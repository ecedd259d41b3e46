"""A psycopg connection that reads and writes like the sqlite3 ones chinwag's SQL was written for.

Much of chinwag's SQL is plain SQL that both databases run as written (sessions, keys, lineage,
recall's reads), and callers above storage pass functions of a connection to `db.read`. Rather
than keep a second copy of each, `Connection.execute` takes the same `?` placeholders (turned
into psycopg's `%s`, outside string literals) and gives rows that are tuples and mappings at once,
as sqlite3.Row is (`row[0]`, `row["id"]`, `dict(row)`, `for (a,) in ...`). Postgres `numeric`
(what `avg` and `sum(bigint)` return) is read as float, as SQLite gives REAL. SQL only one of
the two databases understands lives with its backend; this file adds no rule of its own.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Iterator, Sequence

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.numeric import FloatLoader

from gateway.storage.conn import Conn
from gateway.storage.postgres.dialect import POSTGRES, PostgresDialect


class Row(tuple):
    """A result row: a tuple that is also indexable by column name, with keys()."""

    _index: dict[str, int]

    def __new__(cls, values: Sequence[Any], index: dict[str, int]) -> "Row":
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> Any:
    description = cursor.description
    if description is None:
        return None
    index = {column.name: i for i, column in enumerate(description)}
    return lambda values: Row(values, index)


@functools.lru_cache(maxsize=2048)
def to_pyformat(sql: str) -> str:
    """`?` -> `%s` and `%` -> `%%`, outside quoted literals and identifiers."""
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if quote:
            if ch == quote:
                quote = None
            out.append("%%" if ch == "%" else ch)
        elif ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


class Cursor:
    """The part of sqlite3.Cursor chinwag uses: execute, fetchone, fetchall, iteration, rowcount,
    description. `row_factory` is accepted and ignored (rows are always `Row`)."""

    def __init__(self, raw: psycopg.Cursor[Any]) -> None:
        self.raw = raw
        self.row_factory: Any = None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> "Cursor":
        self.raw.execute(to_pyformat(sql), list(params))
        return self

    def fetchone(self) -> Any:
        return self.raw.fetchone() if self.raw.description is not None else None

    def fetchall(self) -> list[Any]:
        return self.raw.fetchall() if self.raw.description is not None else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return self.raw.rowcount

    @property
    def description(self) -> Any:
        return self.raw.description


class Connection:
    """A psycopg connection with sqlite3's `?` placeholders and row shape (see the module doc).
    `raw` is the psycopg connection, for what has no sqlite3 spelling (COPY, transactions)."""

    dialect: PostgresDialect = POSTGRES

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def cursor(self) -> Cursor:
        return Cursor(self.raw.cursor())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self.cursor().execute(sql, params)

    def executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        with self.raw.cursor() as cur:
            cur.executemany(to_pyformat(sql), [list(p) for p in params])

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of `sql` as a plain tuple, for reads of thousands of rows (search's candidates,
        recall's matches): a Row and its indexing cost ~4 us of Python per row, 7-9 ms of a 17 ms
        search for a common word at 1M messages (2,000 candidates; cProfile of bench/postgres.py's)."""
        with self.raw.cursor(row_factory=tuple_row) as cur:
            cur.execute(to_pyformat(sql), list(params))
            return cur.fetchall()


def own(conn: Conn) -> Connection:
    """A `Conn` this backend handed out, as its own class (for `raw` and `tuples`, which only
    Postgres has): every connection whose dialect is POSTGRES is one."""
    assert isinstance(conn, Connection), conn
    return conn


# A transaction left idle this long is ended by the server: a replica frozen inside a commit
# would otherwise keep its locks (the lease row's share lock: see replicas.py) until it woke.
IDLE_IN_TRANSACTION_MS = 3000


def configure(raw: psycopg.Connection[Any]) -> None:
    """Set up a new pool connection: rows as `Row`, numeric as float, idle transactions ended, no
    parallel plans (search's windows, search.py newest_matches, are UNION ALL branches that must run
    in order under one LIMIT, which a Parallel Append does not; every read here is a page)."""
    raw.row_factory = _row_factory
    raw.adapters.register_loader("numeric", FloatLoader)
    raw.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
    raw.execute("SET max_parallel_workers_per_gather = 0")
