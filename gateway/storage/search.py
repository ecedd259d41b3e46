"""Message search over the two full-text indexes (see gateway/fts.py for what they hold).

Plan for a query:
1. every term must occur (explicit ORs honoured), ranked by BM25 over the word index (newest
   first when the query is only exact strings: quoted phrases, URLs, paths, error codes);
2. identifier terms also match as substrings (trigram index) when the word index has too few;
3. when the strict pass finds too few sessions, relax to any term, still ranked by BM25.
Strict hits always come first. Ranking is done over the newest `CANDIDATE_CAP` matches of a pass,
which bounds the cost of very common words on large stores.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

from gateway.storage.fts import Query, make_snippet, parse_query
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
    conn: sqlite3.Connection,
    expression: str,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
    ranked: bool = True,
) -> list[sqlite3.Row]:
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


def substring_hits(
    conn: sqlite3.Connection,
    query: Query,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
) -> list[sqlite3.Row]:
    """Messages where identifier terms occur as substrings and the other terms as words."""
    idents = [t for t in query.content_terms if t.identifier and len(t.text) >= 3]
    if not idents:
        return []
    ident_expr = " AND ".join('"' + t.text.lower().replace('"', '""') + '"' for t in idents)
    others = [t for t in query.content_terms if t not in idents]
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
    conn: sqlite3.Connection,
    query: str | bytes | None,
    role_filter: Iterable[str] | None = None,
    exclude_sources: Iterable[str] | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[dict]:
    parsed = parse_query(query)
    if not parsed.terms:
        return []
    limit, offset = max(0, int(limit)), max(0, int(offset))
    want = limit + offset
    if want == 0:
        return []
    filters = build_filters(role_filter, exclude_sources)
    found: dict[int, dict] = {}

    def take(rows: list[sqlite3.Row], match: str) -> None:
        for row in rows:
            if row["id"] not in found:
                found[row["id"]] = dict(row) | {"match": match}

    take(word_hits(conn, parsed.expression("all"), filters, want, ranked=not parsed.exact), "all")
    if len(found) < want:
        take(substring_hits(conn, parsed, filters, want), "substring")
    sessions = {hit["session_id"] for hit in found.values()}
    terms = parsed.content_terms
    relaxable = len(terms) > 1 or any(t.cjk and len(t.tokens) > 2 for t in terms)
    if relaxable and (len(sessions) < MIN_SESSIONS_BEFORE_RELAXING or len(found) < want):
        take(word_hits(conn, parsed.expression("any"), filters, want), "any")

    page = list(found.values())[offset:want]
    if page:
        ids = [hit["id"] for hit in page]
        contents = dict(
            conn.execute(f"SELECT id, content FROM messages WHERE id IN ({','.join('?' * len(ids))})", ids).fetchall()
        )
        words = parsed.highlight_words()
        for hit in page:
            hit["snippet"] = make_snippet(contents.get(hit["id"]) or "", words)
    return page
