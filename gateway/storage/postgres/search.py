"""Message search and recall's match reads on Postgres, with the plan and the answers of
gateway/storage/search.py (read its docstring for the plan: strict, then identifier substrings,
then relaxed; strict hits first).

The query side is shared: `parse_query` and `Query.expression` (search) and recall's units write
FTS5 expressions; tokens.tsquery_of_fts turns each into a tsquery over the `words` column, and an
identifier expression into LIKE patterns over `idents` (pg_trgm). Ranking is `ts_rank` (normalised by 1 + log(length)) over the
newest CANDIDATE_CAP matches, negated so that lower is better, as FTS5's bm25 rank is. Each pass
asks for "matches, newest first, LIMIT n": with the raised statistics target on `words`, the
planner reads a rare word from the GIN index and walks the primary key backwards for a common
one, stopping after n rows.

No driver import here: recall (gateway/recall/read.py) calls `recall_matches` with the
connection `db.read` gave it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from gateway.storage.fts import Query, make_snippet, parse_query
from gateway.storage.postgres.schema import BUCKET_IDS
from gateway.storage.postgres.tokens import like_patterns_of_fts, phrase_query, tsquery_of_fts
from gateway.storage.schema import visible_sql
from gateway.storage.search import CANDIDATE_CAP, MIN_SESSIONS_BEFORE_RELAXING, build_filters

if TYPE_CHECKING:
    from gateway.storage.postgres.connection import Connection

VISIBLE = visible_sql("m")
_COLUMNS = "m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.user_id, s.source, s.title AS session_title"
_CANDIDATE = "id, session_id, role, timestamp, tool_name, user_id, active, compacted, words"
FIRST_WINDOW = 2  # id buckets (2 x 8,192 messages) the newest matches are looked for in first


def newest_matches(
    conn: Connection,
    tsquery: str,
    limit: int,
    before_id: int | None = None,
    columns: str = "m.id",
    column_params: Sequence[Any] = (),
) -> list[Any]:
    """`columns` of the newest `limit` messages whose words match `tsquery` (below `before_id`),
    newest first: what "WHERE words @@ q ORDER BY id DESC LIMIT n" means, read window by window
    over the id buckets (schema.py v4) so that the GIN scan visits only the matches of the newest
    buckets. The first window is FIRST_WINDOW buckets; each next one is sized from the density seen
    so far to hold what is still missing (x4 when nothing was found), and the one that would reach
    the oldest bucket is the plain query below the windows read."""
    top = before_id - 1 if before_id is not None else conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    if top is None or top < 1:
        return []
    rows: list[Any] = []
    newest, below, size = top // BUCKET_IDS, top + 1, FIRST_WINDOW
    while newest >= 0 and len(rows) < limit:
        oldest = max(0, newest - size + 1)
        if oldest == 0:
            where = tsquery
        else:
            buckets = " | ".join(f"'~{b}'" for b in range(newest, oldest - 1, -1))
            where = f"({tsquery}) & ({buckets})"
        found = conn.execute(
            f"SELECT {columns} FROM messages m WHERE m.words @@ ?::tsquery AND m.id < ? ORDER BY m.id DESC LIMIT ?",
            (*column_params, where, below, limit - len(rows)),
        ).fetchall()
        rows.extend(found)
        read = newest - oldest + 1
        density = len(found) / read  # matches per bucket in this window
        missing = limit - len(rows)
        size = math.ceil(missing / density * 1.25) if density else size * 4
        newest, below = oldest - 1, oldest * BUCKET_IDS
    return rows


def word_hits(
    conn: Connection,
    tsquery: str | None,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
    ranked: bool = True,
) -> list[Any]:
    """Visible messages matching a tsquery: best ts_rank first over the newest `cap` matches, or
    (not ranked: exact strings, where every match is as good) newest first."""
    if not tsquery:
        return []
    ids = [row[0] for row in newest_matches(conn, tsquery, cap)]
    if not ids:
        return []
    # 1: divided by 1 + log(length), as BM25 favours the shorter match
    score = "-ts_rank(m.words, ?::tsquery, 1)" if ranked else "0.0"
    sql = f"""
        SELECT {_COLUMNS}, {score} AS score
        FROM messages m JOIN sessions s ON s.id = m.session_id
        WHERE m.id = ANY(?) AND {VISIBLE} {filters[0]}
        ORDER BY {"score, m.id DESC" if ranked else "m.id DESC"} LIMIT ?"""
    params = [*([tsquery] if ranked else []), ids, *filters[1], limit]
    return conn.execute(sql, params).fetchall()


def substring_hits(
    conn: Connection,
    query: Query,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
) -> list[Any]:
    """Messages where identifier terms occur as substrings and the other terms as words."""
    idents = [t for t in query.content_terms if t.identifier and len(t.text) >= 3]
    if not idents:
        return []
    patterns = like_patterns_of_fts(" AND ".join('"' + t.text.lower().replace('"', '""') + '"' for t in idents))
    if not patterns:
        return []
    others = [t for t in query.content_terms if t not in idents]
    word_clause, word_params = "", []
    if others:
        word_query = " & ".join(q for t in others if (q := phrase_query(t.tokens, t.prefix)))
        if word_query:
            word_clause, word_params = "AND m.words @@ ?::tsquery", [word_query]
    like = " AND ".join("idents LIKE ?" for _ in patterns)
    sql = f"""
        SELECT {_COLUMNS}, 0.0 AS score
        FROM (SELECT {_CANDIDATE} FROM messages WHERE {like} ORDER BY id DESC LIMIT ?) AS m
        JOIN sessions s ON s.id = m.session_id
        WHERE {VISIBLE} {word_clause} {filters[0]}
        ORDER BY m.id DESC LIMIT ?"""
    return conn.execute(sql, [*patterns, cap, *word_params, *filters[1], limit]).fetchall()


def search_messages(
    conn: Connection,
    query: str | bytes | None,
    role_filter: Iterable[str] | None = None,
    exclude_sources: Iterable[str] | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[dict]:
    """gateway.storage.search.search_messages, on this schema: the same plan, arguments and hits."""
    parsed = parse_query(query)
    if not parsed.terms:
        return []
    limit, offset = max(0, int(limit)), max(0, int(offset))
    want = limit + offset
    if want == 0:
        return []
    filters = build_filters(role_filter, exclude_sources)
    found: dict[int, dict] = {}

    def take(rows: list[Any], match: str) -> None:
        for row in rows:
            if row["id"] not in found:
                found[row["id"]] = dict(row) | {"match": match}

    take(word_hits(conn, tsquery_of_fts(parsed.expression("all")), filters, want, ranked=not parsed.exact), "all")
    if len(found) < want:
        take(substring_hits(conn, parsed, filters, want), "substring")
    sessions = {hit["session_id"] for hit in found.values()}
    terms = parsed.content_terms
    relaxable = len(terms) > 1 or any(t.cjk and len(t.tokens) > 2 for t in terms)
    if relaxable and (len(sessions) < MIN_SESSIONS_BEFORE_RELAXING or len(found) < want):
        take(word_hits(conn, tsquery_of_fts(parsed.expression("any")), filters, want), "any")

    page = list(found.values())[offset:want]
    if page:
        ids = [hit["id"] for hit in page]
        contents = dict(conn.execute("SELECT id, content FROM messages WHERE id = ANY(?)", (ids,)).fetchall())
        words = parsed.highlight_words()
        for hit in page:
            hit["snippet"] = make_snippet(contents.get(hit["id"]) or "", words)
    return page


def recall_matches(
    conn: Connection, table: str, expr: str, roles: list[str], before_id: int | None, limit: int
) -> list[tuple[int, str, bool, int]]:
    """Recall's read of one unit (gateway/recall/read.py Matches): (message id, session id,
    visible and of a wanted role, length) of the newest `limit` matches below `before_id`.
    `table` names the SQLite index the expression is for: messages_fts (words) or messages_ident
    (identifier substrings)."""
    role_sql = f" AND m.role IN ({','.join('?' * len(roles))})" if roles else ""
    if table == "messages_ident":
        patterns = like_patterns_of_fts(expr)
        if not patterns:
            return []
        where, params = " AND ".join("m.idents LIKE ?" for _ in patterns), list(patterns)
    else:
        tsquery = tsquery_of_fts(expr)
        if not tsquery:
            return []
        columns = f"m.id, m.session_id, ({VISIBLE}{role_sql}) AS wanted, length(m.content)"
        rows = newest_matches(conn, tsquery, limit, before_id, columns, roles)
        return [tuple(row) for row in rows]
    before = " AND m.id < ?" if before_id is not None else ""
    sql = f"""
        SELECT m.id, m.session_id, ({VISIBLE}{role_sql}) AS wanted, length(m.content)
        FROM messages m WHERE {where}{before} ORDER BY m.id DESC LIMIT ?"""
    rows = conn.execute(sql, [*roles, *params, *([before_id] if before_id is not None else []), limit]).fetchall()
    return [tuple(row) for row in rows]
