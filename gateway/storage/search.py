"""Message search over the two full-text indexes (see gateway/storage/fts.py for what they hold).

Plan for a query:
1. every term must occur (explicit ORs honoured), ranked by BM25 over the word index (newest
   first when the query is only exact strings: quoted phrases, URLs, paths, error codes);
2. identifier terms also match as substrings (trigram index) when the word index has too few;
3. when the strict pass finds too few sessions, relax to any term, still ranked by BM25.
Strict hits always come first. Ranking is done over the newest `CANDIDATE_CAP` matches of a pass,
which bounds the cost of very common words on large stores.

SQLite's `Dialect` (gateway/storage/dialect.py) offers this module's passes and recall's match
reads over the FTS5 indexes to the shared code, beside gateway/storage/postgres/search.py's over
the word and identifier columns.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable

from gateway.storage.conn import Conn, RecallMatch
from gateway.storage.fts import Query, Term, make_snippet, parse_query
from gateway.storage.schema import visible_sql

CANDIDATE_CAP = 2000
MIN_SESSIONS_BEFORE_RELAXING = 3
VISIBLE = visible_sql("m")


def build_filters(role_filter: Iterable[str] | None, exclude_sources: Iterable[str] | None) -> tuple[str, list]:
    sql, params = "", []
    roles = [r for r in (role_filter or []) if r]
    if roles:
        sql += f" AND m.role IN ({','.join('?' * len(roles))})"
        params += roles
    sources = [s for s in (exclude_sources or []) if s]
    if sources:
        sql += f" AND s.source NOT IN ({','.join('?' * len(sources))})"
        params += sources
    return sql, params


def word_hits(
    conn: Conn,
    expression: str,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
    ranked: bool = True,
) -> list[Any]:
    """Visible messages matching an FTS5 expression on the word index.

    Ranked: best BM25 first, computed for the newest `cap` matches only; the join to messages and
    sessions (visibility, filters) is done for the best few of those first, and for all of them
    only when the filters threw too many away. Not ranked: newest first. BM25 needs each phrase's
    document frequency, which FTS5 gets by walking every match of the phrase: for an exact string
    made of common words (a URL, a quoted phrase) that walk is the whole cost of the query, and
    every match is as good as another anyway.
    """
    if not expression:
        return []
    score = "rank" if ranked else "0.0"
    order = "score" if ranked else "rowid DESC"
    for shortlist in (limit * 4 + 20, cap):
        sql = f"""
            SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.user_id,
                   s.source, s.title AS session_title, c.score
            FROM (SELECT rowid, score FROM
                    (SELECT rowid, {score} AS score FROM messages_fts
                     WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?)
                  ORDER BY {order} LIMIT ?) AS c
            JOIN messages m ON m.id = c.rowid
            JOIN sessions s ON s.id = m.session_id
            WHERE {VISIBLE} {filters[0]}
            ORDER BY {"c.score" if ranked else "m.id DESC"} LIMIT ?"""
        rows = conn.execute(sql, [expression, cap, shortlist, *filters[1], limit]).fetchall()
        if len(rows) >= limit or shortlist >= cap:
            return rows
        candidates = conn.execute(
            "SELECT count(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
            "ORDER BY rowid DESC LIMIT ?)",
            (expression, shortlist),
        ).fetchone()[0]
        if candidates < shortlist:  # the shortlist already held every match: nothing more to find
            return rows
    return rows


def split_identifiers(query: Query) -> tuple[str, list[Term]]:
    """The substring pass's terms: an FTS5 expression of the identifier terms of 3+ characters
    ("" when there are none), and the other terms, which must occur as words."""
    idents = [t for t in query.content_terms if t.identifier and len(t.text) >= 3]
    expr = " AND ".join('"' + t.text.lower().replace('"', '""') + '"' for t in idents)
    return expr, [t for t in query.content_terms if t not in idents]


def substring_hits(
    conn: Conn,
    query: Query,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
) -> list[Any]:
    """Messages where identifier terms occur as substrings and the other terms as words."""
    ident_expr, others = split_identifiers(query)
    if not ident_expr:
        return []
    word_clause, params = "", [ident_expr, cap]
    if others:
        word_clause = "AND m.id IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?)"
        params.append(" AND ".join(t.phrase() for t in others))
    sql = f"""
        SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.user_id,
               s.source, s.title AS session_title, 0.0 AS score
        FROM (SELECT rowid FROM messages_ident
              WHERE messages_ident MATCH ? ORDER BY rowid DESC LIMIT ?) AS c
        JOIN messages m ON m.id = c.rowid
        JOIN sessions s ON s.id = m.session_id
        WHERE {VISIBLE} {word_clause} {filters[0]}
        ORDER BY m.id DESC LIMIT ?"""
    return conn.execute(sql, [*params, *filters[1], limit]).fetchall()


def search_messages(
    conn: Conn,
    query: str | bytes | None,
    role_filter: Iterable[str] | None = None,
    exclude_sources: Iterable[str] | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[dict]:
    """The plan of the module docstring, on either database: the passes are the dialect's
    (`word_hits`, `substring_hits`); a hit may carry its content (Postgres reads it with the hit,
    one statement fewer), else the page's contents are read after, for the snippets."""
    parsed = parse_query(query)
    if not parsed.terms:
        return []
    limit, offset = max(0, int(limit)), max(0, int(offset))
    want = limit + offset
    if want == 0:
        return []
    dialect = conn.dialect
    filters = build_filters(role_filter, exclude_sources)
    found: dict[int, dict] = {}
    contents: dict[int, str] = {}

    def take(rows: list[Any], match: str) -> None:
        for row in rows:
            if row["id"] not in found:
                hit = dict(row)
                if "content" in hit:
                    contents[row["id"]] = hit.pop("content") or ""
                found[row["id"]] = hit | {"match": match}

    take(dialect.word_hits(conn, parsed.expression("all"), filters, want, not parsed.exact), "all")
    if len(found) < want:
        take(dialect.substring_hits(conn, parsed, filters, want), "substring")
    sessions = {hit["session_id"] for hit in found.values()}
    terms = parsed.content_terms
    relaxable = len(terms) > 1 or any(t.cjk and len(t.tokens) > 2 for t in terms)
    if relaxable and (len(sessions) < MIN_SESSIONS_BEFORE_RELAXING or len(found) < want):
        take(dialect.word_hits(conn, parsed.expression("any"), filters, want, True), "any")

    page = list(found.values())[offset:want]
    missing = [hit["id"] for hit in page if hit["id"] not in contents]
    if missing:
        contents.update(
            conn.execute(
                f"SELECT id, content FROM messages WHERE id IN ({','.join('?' * len(missing))})", missing
            ).fetchall()
        )
    words = parsed.highlight_words()
    for hit in page:
        hit["snippet"] = make_snippet(contents.get(hit["id"]) or "", words)
    return page


def recall_matches(
    conn: Conn, table: str, expr: str, roles: list[str], before_id: int | None, limit: int
) -> list[RecallMatch]:
    """Recall's read of one unit (gateway/recall/read.py Matches): (message id, session id,
    visible and of a wanted role, length) of the newest `limit` matches of an FTS5 expression on
    `table` (messages_fts or messages_ident) below `before_id`."""
    role_sql = f" AND m.role IN ({','.join('?' * len(roles))})" if roles else ""
    before = " AND rowid < ?" if before_id is not None else ""
    sql = f"""
        SELECT c.rowid, m.session_id, ({VISIBLE}{role_sql}) AS wanted, length(m.content)
        FROM (SELECT rowid FROM {table} WHERE {table} MATCH ?{before}
              ORDER BY rowid DESC LIMIT ?) AS c
        JOIN messages m ON m.id = c.rowid"""
    params = [*roles, expr, *([before_id] if before_id is not None else []), limit]
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: thousands of rows per query on a large store
    try:
        return cursor.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # an expression the index cannot take: no evidence
        return []


def matches_among(conn: Conn, expr: str, ids: list[int], limit: int) -> list[int]:
    """The newest `limit` matches of a word expression: the index is walked, no message row is
    looked up (the caller keeps those among `ids`, whose rows it has)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    try:
        found = cursor.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?", (expr, limit)
        ).fetchall()
    except sqlite3.OperationalError:  # an expression the index cannot take: no evidence
        return []
    return [mid for (mid,) in found]
