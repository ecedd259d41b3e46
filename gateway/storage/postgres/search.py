"""Message search's passes and recall's match reads on Postgres: the plan is gateway/storage/search.py's
`search_messages` (strict, then identifier substrings, then relaxed; strict hits first), which runs
this module's `word_hits` and `substring_hits` through `PostgresDialect`.

The query side is shared: `parse_query` and `Query.expression` (search) and recall's units write
FTS5 expressions; tokens.tsquery_pair_of_fts turns each into a tsquery over the `words` column
(with the lexemes-only form the index can answer), and an identifier expression into LIKE patterns
over `idents` (pg_trgm). Ranking is `ts_rank` (normalised by 1 + log(length)) over the newest
CANDIDATE_CAP matches, negated so that lower is better, as FTS5's bm25 rank is.

Every word pass asks for "matches, newest first, LIMIT n", which a GIN index cannot answer in
order. Left to the planner, at 1M messages (bench/postgres.py) that was 240 ms for a Chinese word
in 1.8 % of messages (the primary key walked backwards over 110k rows), 1.8 s for a URL in 80k of
them (every match fetched and sorted: the planner took the phrase for 3 rows), 1.8 s per NEAR pair
of recall. `newest_matches` reads windows of the newest id buckets instead (schema.py v5), so each
statement's work is bounded by the matches of its window. A prefix ('fix':*) is replaced by the
whole words it stands for first (vocabulary.py): a GIN index collects every match of a prefix
before it returns one, so a window could not skip to its own buckets (90-330 ms per window for
recall's "fix* docker*" pair at 1M messages).

No driver import here. Postgres's `Dialect` (gateway/storage/postgres/dialect.py), carried by
every connection, offers these passes and recall's `recall_matches` and `matches_among`
(gateway/recall/read.py) to the shared code.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

from gateway.storage.conn import Conn, RecallMatch
from gateway.storage.fts import Query
from gateway.storage.postgres.schema import BUCKET_IDS
from gateway.storage.postgres.tokens import like_patterns_of_fts, phrase_query, tsquery_pair_of_fts
from gateway.storage.postgres.vocabulary import expand_pair, expand_tsquery
from gateway.storage.schema import visible_sql
from gateway.storage.search import CANDIDATE_CAP, split_identifiers

VISIBLE = visible_sql("m")
# a hit's columns, and its text for the snippet (one statement fewer per search than reading it after)
_COLUMNS = (
    "m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.user_id, s.source, s.title AS session_title, m.content"
)
_CANDIDATE = "id, session_id, role, timestamp, tool_name, user_id, active, compacted, words, content"
FIRST_WINDOW = 2  # id buckets (2 x 8,192 messages) the newest matches are looked for in first
# a GIN scan advances every OR'ed bucket entry past each candidate: 28 of them took 29 ms for a word
# in 4,141 messages of the window; wider windows are bounded by their ids alone (the index then
# answers the words, the primary key the range)
MAX_BUCKET_TERMS = 8
# a read of a few rows looks at the newest HEAD_IDS messages first: a window's heap visits are all its
# matches (a bitmap has no order), 875 of them for "nginx.conf" (in 10 % of messages) to return 20,
# 4.4 of its 5.9 ms at 1M messages; recall's probes (40-150 rows) are such reads too
HEAD_IDS = 2048
HEAD_LIMIT = 200
REACH_IDS = 4 * BUCKET_IDS  # search ranks the matches of the newest 32,768 messages when they hold a page


def windows(top: int) -> list[tuple[int, int]]:
    """The bucket windows (newest bucket, oldest bucket) from id `top` down, newest first: the
    first FIRST_WINDOW buckets, each next one as wide as all before it, so the reach doubles per
    window and a word that is nowhere is looked for in log2(buckets) of them."""
    newest = top // BUCKET_IDS
    out = [(newest, max(0, newest - FIRST_WINDOW + 1))]
    while out[-1][1] > 0:
        read = newest - out[-1][1] + 1
        out.append((out[-1][1] - 1, max(0, out[-1][1] - read)))
    return out


def id_windows(top: int, limit: int) -> list[tuple[int, int]]:
    """The windows of `windows` as id ranges (below, low), newest first; a read of at most
    HEAD_LIMIT rows begins with the newest HEAD_IDS ids alone."""
    out, below = [], top + 1
    for _, oldest in windows(top):
        out.append((below, oldest * BUCKET_IDS))
        below = oldest * BUCKET_IDS
    if limit <= HEAD_LIMIT and out[0][1] < top + 1 - HEAD_IDS:
        out[0:1] = [(top + 1, top + 1 - HEAD_IDS), (top + 1 - HEAD_IDS, out[0][1])]
    return out


def _window_sql(columns: str, check: str, below: int, low: int) -> tuple[str, str]:
    """One window's SELECT (its tsquery, window-ids and limit as parameters), and the bucket terms
    its presence is ANDed with ("" for a wide window, bounded by its ids alone)."""
    buckets = ""
    newest, oldest = (below - 1) // BUCKET_IDS, low // BUCKET_IDS
    if 0 < oldest and newest - oldest < MAX_BUCKET_TERMS:
        buckets = " & (" + " | ".join(f"'~{b}'" for b in range(newest, oldest - 1, -1)) + ")"
    sql = f"""(SELECT {columns} FROM messages m
        WHERE m.words @@ ?::tsquery{check} AND m.id < ? AND m.id >= ? ORDER BY m.id DESC LIMIT ?)"""
    return sql, buckets


def newest_matches(
    conn: Conn,
    query: tuple[str, str],
    limit: int,
    before_id: int | None = None,
    columns: str = "m.id",
    column_params: Sequence[Any] = (),
    enough: tuple[int, int] | None = None,
) -> list[Any]:
    """`columns` (the first one m.id) of the newest `limit` messages whose words match `query` =
    (tsquery, presence) below `before_id`, newest first: what "WHERE words @@ q ORDER BY id DESC
    LIMIT n" means.

    It is read window by window over the id buckets (schema.py v5, `id_windows`), each window one GIN
    scan for "presence AND one of these buckets" bounded by the window's ids, so neither plan the
    planner may pick (the index, or the primary key backwards) visits rows outside the window. All
    windows are one statement, `(window 1) UNION ALL (window 2) ... LIMIT n`: Postgres runs the
    branches of an Append in order and stops at the limit, so a window is read only when the ones
    before it held too few, without a round trip per window (a rare word took 8 statements, a
    third of its search, at 1M messages). The index answers `presence` (lexemes only: it stores
    no positions); the phrase distances of the full tsquery are checked on the rows it returns,
    through ts_match_vq, which the planner cannot hand to the index (a NEAR pair is 22 phrase
    alternatives: evaluated inside the GIN scan for every entry, 0.5 s at 1M messages).
    `enough` = (rows, ids): when the windows reaching that many ids back hold that many rows, their
    rows (up to `limit`) are the answer, else the newest `rows` matches however far back (ranked
    search: a rare phrase of common words is not chased through every message, rechecking each one
    holding both words); those first windows are a statement of their own."""
    tsquery, presence = query
    top = before_id - 1 if before_id is not None else conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    if top is None or top < 1 or limit <= 0:
        return []
    check, check_params = ("", []) if presence == tsquery else (" AND ts_match_vq(m.words, ?::tsquery)", [tsquery])
    spans = id_windows(top, limit)

    def read(spans: list[tuple[int, int]], want: int) -> list[Any]:
        parts, params = [], []
        for below, low in spans:
            sql, buckets = _window_sql(columns, check, below, low)
            parts.append(sql)
            params += [*column_params, f"({presence}){buckets}", *check_params, below, low, want]
        sql = "SELECT * FROM (" + " UNION ALL ".join(parts) + ") AS w LIMIT ?"
        found = conn.tuples(sql, [*params, want])
        ids = [row[0] for row in found]
        if len(spans) > 1 and not all(map(operator.gt, ids, ids[1:])):
            # an Append not run in order (connection.configure turns parallel plans off): window by window
            found = []
            for span in spans:
                found += read([span], want - len(found))
                if len(found) >= want:
                    break
        return found

    if not enough:
        return read(spans, limit)
    # the windows reaching enough[1] ids back; too few in them: the newest enough[0], however far back
    reach = next((i + 1 for i, (_, low) in enumerate(spans) if top + 1 - low >= enough[1]), len(spans))
    rows = read(spans[:reach], limit)
    if len(rows) >= min(enough[0], limit) or reach == len(spans):
        return rows
    return rows + read(spans[reach:], min(enough[0], limit) - len(rows))


def word_hits(
    conn: Conn,
    query: tuple[str, str] | None,
    filters: tuple[str, list] = ("", []),
    limit: int = 20,
    cap: int = CANDIDATE_CAP,
    ranked: bool = True,
) -> list[Any]:
    """Visible messages matching a (tsquery, presence): best ts_rank first over the newest `cap`
    matches, or over those of the newest REACH_IDS messages when they hold `limit` (a phrase of two
    common words found in 1,400 of 1M messages, each of the 60,000 holding both words rechecked,
    took 0.7-1.5 s to gather its 2,000 newest; the newest 32k messages hold a page of them), or
    (not ranked: exact strings, where every match is as good) newest first.

    The rank is computed by the window scans themselves, on the rows they already fetched, and the
    join to sessions (visibility, filters) is done for a shortlist of the best first, as on SQLite:
    ranking the 2,000 newest matches of a common word in a second statement joined to sessions
    fetched every row again and hashed all 50,000 sessions, 36-57 ms of a 60-78 ms search at 1M
    messages (bench/postgres.py; EXPLAIN ANALYZE in the commit)."""
    if not query:
        return []
    if not ranked:  # the newest `limit` matches are the answer unless the filters drop some
        first = [(row[0], 0.0) for row in newest_matches(conn, query, limit)]
    else:
        rank = ("m.id, -ts_rank(m.words, ?::tsquery, 1)", [query[0]])  # 1: divided by 1 + log(length), as BM25
        first = newest_matches(conn, query, cap, columns=rank[0], column_params=rank[1], enough=(limit, REACH_IDS))
        first.sort(key=operator.itemgetter(1))  # stable: ties stay newest first, as they were read
    if not first:
        return []
    order = "score, m.id DESC" if ranked else "m.id DESC"
    sql = f"""
        SELECT {_COLUMNS}, c.score
        FROM unnest(?::bigint[], ?::float8[]) AS c (id, score)
        JOIN messages m ON m.id = c.id JOIN sessions s ON s.id = m.session_id
        WHERE {VISIBLE} {filters[0]}
        ORDER BY {order} LIMIT ?"""

    def joined(candidates: Sequence[Any]) -> list[Any]:
        ids, scores = [row[0] for row in candidates], [float(row[1]) for row in candidates]
        return conn.execute(sql, [ids, scores, *filters[1], limit]).fetchall()

    shortlist = limit * 4 + 20
    rows = joined(first[:shortlist])
    if len(rows) < limit and shortlist < len(first):  # the filters dropped many: join them all
        rows = joined(first)
    if len(rows) < limit and limit <= len(first) < cap:  # still too few: read up to the cap
        if ranked:
            first = newest_matches(conn, query, cap, columns=rank[0], column_params=rank[1])
        else:
            first = [(row[0], 0.0) for row in newest_matches(conn, query, cap)]
        rows = joined(first)
    return rows


def substring_hits(
    conn: Conn, query: Query, filters: tuple[str, list], limit: int, cap: int = CANDIDATE_CAP
) -> list[Any]:
    """The identifier pass over `idents` (pg_trgm LIKE patterns), the other terms over `words`."""
    ident_expr, others = split_identifiers(query)
    patterns = like_patterns_of_fts(ident_expr) if ident_expr else []
    if not patterns:
        return []
    word_clause, word_params = "", []
    if others:
        word_query = " & ".join(q for t in others if (q := phrase_query(t.tokens, t.prefix)))
        if word_query:
            word_clause, word_params = "AND m.words @@ ?::tsquery", [expand_tsquery(conn, word_query)]
    like = " AND ".join("idents LIKE ?" for _ in patterns)
    sql = f"""
        SELECT {_COLUMNS}, 0.0 AS score
        FROM (SELECT {_CANDIDATE} FROM messages WHERE {like} ORDER BY id DESC LIMIT ?) AS m
        JOIN sessions s ON s.id = m.session_id
        WHERE {VISIBLE} {word_clause} {filters[0]}
        ORDER BY m.id DESC LIMIT ?"""
    return conn.execute(sql, [*patterns, cap, *word_params, *filters[1], limit]).fetchall()


def recall_matches(
    conn: Conn, table: str, expr: str, roles: list[str], before_id: int | None, limit: int
) -> list[RecallMatch]:
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
        query = expand_pair(conn, tsquery_pair_of_fts(expr))
        if not query:
            return []
        columns = f"m.id, m.session_id, ({VISIBLE}{role_sql}) AS wanted, length(m.content)"
        return newest_matches(conn, query, limit, before_id, columns, roles)
    before = " AND m.id < ?" if before_id is not None else ""
    sql = f"""
        SELECT m.id, m.session_id, ({VISIBLE}{role_sql}) AS wanted, length(m.content)
        FROM messages m WHERE {where}{before} ORDER BY m.id DESC LIMIT ?"""
    return conn.tuples(sql, [*roles, *params, *([before_id] if before_id is not None else []), limit])


def matches_among(conn: Conn, expr: str, ids: list[int], limit: int) -> list[tuple[int]]:
    """(id,) of the messages among `ids` that match the word-index expression, newest first, at most
    `limit`: recall's read beside its anchor (gateway/recall/read.py read_within), whose matches are
    all among the anchor's rows, read in full. Reading them through the windows instead checked the
    phrase distances of every message holding the words: 12,000 of them, 156 ms, for
    "fix docker" beside its anchor at 100k messages."""
    query = expand_pair(conn, tsquery_pair_of_fts(expr))
    if not query or not ids:
        return []
    sql = (
        "SELECT m.id FROM messages m WHERE m.id = ANY(?::bigint[]) AND m.words @@ ?::tsquery ORDER BY m.id DESC LIMIT ?"
    )
    return conn.tuples(sql, [ids, query[0], limit])
