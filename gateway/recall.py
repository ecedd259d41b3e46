"""Recall: rank whole SESSIONS for a query (ground floor; no SDK, no tools/agent imports).

A message search answers "which messages contain these words"; recall answers "which earlier
conversation is this about". So the unit that is scored is the root of a lineage chain (a session
and its compression/delegation children), and the score is a session-level BM25:

    score(s) = sum over query units u of  idf(u) * tf(u, s) * (k1 + 1) / (tf(u, s) + k1 * norm(s))
               + CO_WEIGHT * best(s)

- a unit is one piece of evidence: an English word (also matched by a light stem as a prefix, so
  "painted" finds "painting"), an identifier (also matched as a substring), or a Chinese/Japanese/
  Korean bigram (a run of Han characters has no spaces, so a question like "上次部署网关超时是怎么
  解决的" is cut at stop words and then into overlapping character pairs);
- tf(u, s) is the number of messages of the session's lineage that contain u, saturated (k1), so
  one chatty session cannot win on a single word repeated;
- idf(u) is computed over sessions, not messages: a word found in every session tells nothing;
- norm(s) is BM25 length normalisation on the number of messages;
- best(s) is the largest idf mass that one single message of the session carries: several query
  words in the same message is the strongest sign that the session answers the question.

Every query is OR-shaped (a session with some of the words still ranks, below one with all of
them), so there is no separate "relax AND to OR" pass and no input yields nothing when a content
word occurs. Each unit looks at most CANDIDATE_CAP newest matching messages, which bounds the
cost of a very common word on a large store; its idf is then extrapolated from the full count.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from gateway.recall_dates import NEAR_DAYS, DateSpec, extract_dates
from gateway.fts import (
    MAX_QUERY_CHARS,
    CHINESE_STOP_CHARS,
    CHINESE_STOP_WORDS,
    ENGLISH_STOP_WORDS,
    Query,
    Term,
    clean,
    make_snippet,
    parse_query,
)

__all__ = ["SessionHit", "Plan", "Unit", "find_sessions", "recent_sessions", "plan_query", "MAX_SESSIONS"]

MAX_SESSIONS = 5
CANDIDATE_CAP = 3000  # newest matching messages looked at per unit
MAX_UNITS = 48
K1 = 1.2
B = 0.5  # sessions differ in length far less than documents do; normalise gently
CO_WEIGHT = 0.5
PAIR_WEIGHT = 0.5
PAIR_WINDOW = 4
PASSAGE = 2  # messages looked at together when judging the best evidence of a session
RERANK = 30  # sessions whose passages are examined
HIDDEN_SOURCES = ("tool",)
_VISIBLE = "(m.active = 1 OR m.compacted = 1)"
_STOP_WORD_LENGTHS = sorted({len(w) for w in CHINESE_STOP_WORDS}, reverse=True)
_SUFFIXES = ("ingly", "ings", "ing", "edly", "ed", "ies", "es", "s", "ly", "ment", "ments")


# ---------------------------------------------------------------------------------------------
# query -> units


@dataclass
class Unit:
    label: str  # what a person would call this piece of the query ("部署", "nginx.conf", "paint")
    word_expr: str  # FTS5 expression on the word index ("" = none)
    ident_expr: str = ""  # FTS5 expression on the identifier (trigram) index ("" = none)
    highlight: list[str] = field(default_factory=list)
    pair: bool = False  # a proximity unit: two adjacent query words close together
    date: bool = False  # a date the query names: the sessions active then hold it


@dataclass
class Plan:
    query: Query
    units: list[Unit]
    dates: list[DateSpec] = field(default_factory=list)

    @property
    def understood(self) -> str:
        """The query as recall used it: its content pieces, space separated."""
        return " ".join([*(u.label for u in self.units if not u.pair), *(d.label for d in self.dates)])

    def highlight_words(self) -> list[str]:
        words = {w for u in self.units for w in u.highlight if w}
        return sorted(words, key=len, reverse=True)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _stem(word: str) -> str | None:
    """A light English stem, used as a prefix ("painting" -> "paint"); None when not worth it."""
    if not word.isascii() or not word.isalpha() or len(word) < 4:
        return None
    lower = word.lower()
    for suffix in _SUFFIXES:
        if suffix == "s" and lower.endswith("ss"):
            continue
        if lower.endswith(suffix) and len(lower) - len(suffix) >= (3 if suffix == "s" else 4):
            return lower[: -len(suffix)]  # "stories" -> "stor*", which also matches "story"
    return lower if len(lower) >= 5 else None


def cjk_pieces(run: str, fallback: bool = True) -> list[str]:
    """Bigrams of a Han/kana/hangul run, after cutting it at stop words and stop characters.

    "上次部署网关超时是怎么解决的" -> 部署 署网 网关 关超 超时 解决. A content character left alone
    between stop material is kept as a one-character piece, plus its bigram with a neighbouring
    stop character ("有趣" -> "趣", "有趣"), so a word that contains a stop character is not lost.
    A run of nothing but stop material gives all its bigrams when `fallback`, else nothing.
    """
    n = len(run)
    if n <= 2:
        stop_only = run in CHINESE_STOP_WORDS or set(run) <= CHINESE_STOP_CHARS
        return [run] if fallback or not stop_only else []
    in_word = [False] * n  # part of a stop word
    i = 0
    while i < n:
        for length in _STOP_WORD_LENGTHS:
            if length > 1 and i + length <= n and run[i : i + length] in CHINESE_STOP_WORDS:
                for j in range(i, i + length):
                    in_word[j] = True
                i += length - 1
                break
        i += 1
    stop = [in_word[i] or ch in CHINESE_STOP_CHARS for i, ch in enumerate(run)]
    pieces: dict[str, None] = {}
    i = 0
    while i < n:
        if stop[i]:
            i += 1
            continue
        j = i
        while j < n and not stop[j]:
            j += 1
        if j - i >= 2:
            for k in range(i, j - 1):
                pieces[run[k : k + 2]] = None
        else:
            pieces[run[i]] = None
            if i > 0 and not in_word[i - 1]:
                pieces[run[i - 1 : i + 1]] = None
            if i + 1 < n and not in_word[i + 1]:
                pieces[run[i : i + 2]] = None
        i = j
    if not pieces and fallback:
        for k in range(n - 1):
            pieces[run[k : k + 2]] = None
    return list(pieces)


_OPERATOR_WORDS = re.compile(r"\b(?:OR|AND|NOT|NEAR)\b")
_POSSESSIVE = re.compile(r"['’][sS]$")


def _word_unit(word: str) -> Unit:
    """A plain word, also matched through its light stem as a prefix."""
    stem = _stem(word)
    expr = _quote(word) + (f" OR {_quote(stem)}*" if stem and stem != word.lower() else "")
    if stem == word.lower():
        expr = _quote(word) + "*"
    return Unit(label=word, word_expr=expr, highlight=[stem or word])


def _units_of(term: Term, fallback: bool = False) -> list[Unit]:
    if term.cjk:
        return [
            Unit(label=p, word_expr=_quote(" ".join(p)), highlight=[p])
            for p in cjk_pieces("".join(term.tokens), fallback)
        ]
    tokens = term.tokens
    if len(tokens) == 2 and tokens[1].lower() == "s" and _POSSESSIVE.search(term.text):
        tokens = tokens[:1]  # "Caroline's" is about Caroline
    if term.identifier and "/" in term.text and all(t.isalpha() for t in tokens):
        return [_word_unit(t) for t in tokens]  # "artists/bands": alternatives, not a path
    if term.identifier and len(tokens) > 1 or any(c.isdigit() for c in term.text):
        ident = term.text.lower().strip("-./:@#~+=%_")
        ident_expr = _quote(ident) if term.identifier and len(ident) >= 3 else ""
        return [Unit(label=term.text, word_expr=term.phrase(), ident_expr=ident_expr,
                     highlight=[term.text, *tokens])]
    if len(tokens) == 1 and not term.prefix:
        return [_word_unit(tokens[0])]
    return [Unit(label=term.text, word_expr=term.phrase(), highlight=[term.text, *tokens])]


def _pair_unit(a: Unit, b: Unit) -> Unit:
    """Two query words that stand next to each other, found close together in one message."""
    def side(u: Unit) -> str:
        stem = u.highlight[0] if u.highlight else u.label
        return _quote(stem.lower()) + "*"

    return Unit(label=f"{a.label} {b.label}", word_expr=f"NEAR({side(a)} {side(b)}, {PAIR_WINDOW})",
                highlight=[], pair=True)


def plan_query(query: str | bytes | None) -> Plan:
    """Parse any input into the units recall counts. Never raises."""
    dates, rest = extract_dates(_OPERATOR_WORDS.sub(" ", clean(query)[:MAX_QUERY_CHARS]))
    parsed = parse_query(rest)
    parsed.text = clean(query)[:MAX_QUERY_CHARS].strip()
    units: dict[str, Unit] = {}
    previous: Unit | None = None
    pairs: list[Unit] = []
    terms = parsed.content_terms
    # a query made only of stop material still searches for it (never an empty answer)
    fallback = not any(_units_of(t) for t in terms)
    for term in terms:
        for unit in _units_of(term, fallback):
            key = unit.word_expr + "|" + unit.ident_expr
            units.setdefault(key, unit)
            simple = not term.cjk and not unit.ident_expr and " " not in unit.label
            if simple and previous is not None and previous.label.lower() != unit.label.lower():
                pairs.append(_pair_unit(previous, unit))
            previous = unit if simple else None
    singles = list(units.values())[:MAX_UNITS]
    return Plan(parsed, singles + pairs[: max(0, MAX_UNITS - len(singles))], dates)


# ---------------------------------------------------------------------------------------------
# session metadata and lineage roots


class _Sessions:
    """Session rows loaded in batches, and cycle-safe lineage roots over them."""

    COLS = "id, source, user_id, parent_session_id, title, started_at, last_active_at, message_count, preview"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.rows: dict[str, dict | None] = {}
        self._roots: dict[str, str] = {}

    def load(self, ids: Iterable[str]) -> None:
        missing = [i for i in dict.fromkeys(ids) if i and i not in self.rows]
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            for row in self.conn.execute(
                f"SELECT {self.COLS} FROM sessions WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ):
                self.rows[row["id"]] = dict(row)
            for sid in chunk:
                self.rows.setdefault(sid, None)

    def get(self, sid: str) -> dict | None:
        if sid not in self.rows:
            self.load([sid])
        return self.rows[sid]

    def root(self, sid: str) -> str:
        """Follow parent_session_id to the first session. In a cycle, the smallest id of the cycle
        is the root, so every member of a broken chain maps to the same session."""
        if sid in self._roots:
            return self._roots[sid]
        path: list[str] = []
        index: dict[str, int] = {}
        current: str | None = sid
        result: str | None = None
        while current is not None:
            if current in self._roots:
                result = self._roots[current]
                break
            if current in index:  # cycle: path[index[current]:] loops
                result = min(path[index[current] :])
                break
            index[current] = len(path)
            path.append(current)
            row = self.get(current)
            parent = row["parent_session_id"] if row else None
            if not parent or self.get(parent) is None:
                result = current
                break
            current = parent
        assert result is not None
        for node in path:
            self._roots[node] = result
        return result

    def roots(self, ids: Iterable[str]) -> dict[str, str]:
        ids = list(dict.fromkeys(ids))
        self.load(ids)
        # load parents level by level so root walks rarely hit the database one row at a time
        frontier = {r["parent_session_id"] for i in ids if (r := self.rows.get(i)) and r["parent_session_id"]}
        while frontier - self.rows.keys():
            self.load(frontier)
            frontier = {
                r["parent_session_id"] for i in frontier if (r := self.rows.get(i)) and r["parent_session_id"]
            }
        return {i: self.root(i) for i in ids}


def allowed_sessions(conn: sqlite3.Connection, person_id: str) -> set[str]:
    """Sessions the person started or wrote in."""
    rows = conn.execute(
        "SELECT id FROM sessions WHERE user_id = ? UNION SELECT session_id FROM session_participants WHERE user_id = ?",
        (person_id, person_id),
    )
    return {r[0] for r in rows}


# ---------------------------------------------------------------------------------------------
# ranking


@dataclass
class SessionHit:
    session_id: str  # the lineage root
    title: str | None
    source: str
    started_at: float
    last_active_at: float
    message_count: int
    score: float
    snippet: str
    matched_message_ids: list[int]  # best evidence first
    matched: list[str] = field(default_factory=list)  # unit labels found in this session
    user_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _unit_hits(
    conn: sqlite3.Connection, unit: Unit, roles: list[str], cap: int
) -> tuple[list[tuple[int, str]], int]:
    """(message id, session id) of visible messages holding the unit, newest first; and the total
    number of index matches (an estimate of frequency beyond the cap)."""
    role_sql = f" AND m.role IN ({','.join('?' * len(roles))})" if roles else ""
    sources = []
    if unit.word_expr:
        sources.append(("messages_fts", unit.word_expr))
    if unit.ident_expr:
        sources.append(("messages_ident", unit.ident_expr))
    found: dict[int, str] = {}
    total = 0
    for table, expr in sources:
        sql = f"""
            SELECT m.id, m.session_id
            FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?) AS c
            JOIN messages m ON m.id = c.rowid
            WHERE {_VISIBLE}{role_sql}"""
        try:
            rows = conn.execute(sql, [expr, cap, *roles]).fetchall()
        except sqlite3.OperationalError:  # an expression the index cannot take: no evidence
            continue
        for mid, sid in rows:
            found.setdefault(mid, sid)
        n = len(rows)
        if n >= cap:
            try:
                n = conn.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", [expr]).fetchone()[0]
            except sqlite3.OperationalError:
                pass
        total = max(total, n)
    return list(found.items()), max(total, len(found))


def _rank(
    conn: sqlite3.Connection,
    plan: Plan,
    *,
    limit: int,
    exclude_session_ids: Iterable[str],
    exclude_sources: Iterable[str],
    person_id: str | None,
    see_all: bool,
    role_filter: Iterable[str] | None,
    cap: int,
) -> list[SessionHit]:
    roles = [r for r in (role_filter or []) if r]
    meta = _Sessions(conn)
    hidden = {s for s in (exclude_sources or []) if s}
    allowed = None if (see_all or not person_id) else allowed_sessions(conn, person_id)
    excluded = set(exclude_session_ids or ())
    excluded_roots = set(meta.roots(excluded).values()) if excluded else set()

    n_sessions = max(1, conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    avg_len = conn.execute("SELECT avg(message_count) FROM sessions").fetchone()[0] or 1.0

    # unit -> root -> [message ids]; df over roots before any exclusion (idf describes the corpus)
    per_unit: list[dict[str, list[int]]] = []
    idf: list[float] = []
    for unit in plan.units:
        hits, total = _unit_hits(conn, unit, roles, cap)
        roots = meta.roots(sid for _, sid in hits)
        by_root: dict[str, list[int]] = defaultdict(list)
        for mid, sid in hits:
            by_root[roots[sid]].append(mid)
        df = len(by_root)
        if hits and total > len(hits):
            df = min(n_sessions, df * total / len(hits))
        weight = math.log(1 + (n_sessions - df + 0.5) / (df + 0.5)) if by_root else 0.0
        idf.append(weight * (PAIR_WEIGHT if unit.pair else 1.0))
        per_unit.append(by_root)
    units = list(plan.units)
    if plan.dates:
        spans = conn.execute("SELECT id, started_at, last_active_at FROM sessions").fetchall()
        for spec in plan.dates:
            # the day itself, and (more weakly, through its lower idf) the week around it
            slacks = (0, NEAR_DAYS) if spec.day else (0,)
            for slack in slacks:
                on_date = [sid for sid, started, last in spans
                           if spec.covers(started, slack) or spec.covers(last, slack)]
                roots = meta.roots(on_date)
                by_root = {roots[sid]: [] for sid in on_date}
                df = len(by_root)
                idf.append(math.log(1 + (n_sessions - df + 0.5) / (df + 0.5)) if df else 0.0)
                per_unit.append(by_root)
                units.append(Unit(label=spec.label, word_expr="", date=True, pair=slack > 1))

    # filters are applied to roots, and to the session each hit lives in
    candidates: set[str] = set()
    for by_root in per_unit:
        candidates.update(by_root)
    keep: set[str] = set()
    for root in candidates:
        row = meta.get(root)
        if row is None or root in excluded_roots or root in excluded:
            continue
        if row["source"] in hidden:
            continue
        keep.add(root)
    if allowed is not None:
        # a lineage counts as the person's when they took part in any of its sessions that matched
        lineage_members: dict[str, set[str]] = defaultdict(set)
        for sid, row in meta.rows.items():
            if row is not None and meta.root(sid) in keep:
                lineage_members[meta.root(sid)].add(sid)
        keep = {r for r in keep if r in allowed or lineage_members[r] & allowed}

    # lengths of lineages (messages), from the sessions we have loaded
    lengths: dict[str, int] = defaultdict(int)
    for sid, row in meta.rows.items():
        if row is not None and (root := meta.root(sid)) in keep:
            lengths[root] += int(row["message_count"] or 0)

    scores: dict[str, float] = defaultdict(float)
    message_units: dict[int, dict[int, float]] = defaultdict(dict)  # message -> {unit index: weight}
    message_root: dict[int, str] = {}
    message_session: dict[int, str] = {}
    matched: dict[str, list[str]] = defaultdict(list)
    for index, (unit, by_root, weight) in enumerate(zip(units, per_unit, idf)):
        for root, mids in by_root.items():
            if root not in keep:
                continue
            tf = max(1, len(mids))
            norm = 1 - B + B * max(1, lengths[root]) / avg_len
            scores[root] += weight * tf * (K1 + 1) / (tf + K1 * norm)
            if not unit.pair:
                matched[root].append(unit.label)
            for mid in mids:
                message_units[mid][index] = weight
                message_root[mid] = root
    evidence: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for mid, found in message_units.items():
        evidence[message_root[mid]].append((sum(found.values()), mid))
    best = {root: max(e[0] for e in ev) for root, ev in evidence.items()}
    for root in scores:
        scores[root] += CO_WEIGHT * best.get(root, 0.0)
    if PASSAGE > 1 and scores:
        _passage_rerank(conn, scores, evidence, message_units, limit)

    ranked = sorted(scores, key=lambda r: (-scores[r], -(meta.get(r) or {}).get("last_active_at", 0), r))[:limit]
    out: list[SessionHit] = []
    words = plan.highlight_words()
    for root in ranked:
        row = meta.get(root) or {}
        ids = [mid for _, mid in sorted(evidence[root], key=lambda e: (-e[0], -e[1]))]
        content_row = conn.execute("SELECT content FROM messages WHERE id = ?", (ids[0],)).fetchone() if ids else None
        snippet = make_snippet(content_row[0] or "", words) if content_row else (row.get("preview") or "")
        out.append(
            SessionHit(
                session_id=root,
                title=row.get("title"),
                source=row.get("source") or "unknown",
                started_at=row.get("started_at") or 0.0,
                last_active_at=row.get("last_active_at") or 0.0,
                message_count=lengths.get(root) or int(row.get("message_count") or 0),
                score=round(scores[root], 4),
                snippet=snippet,
                matched_message_ids=ids[:200],
                matched=matched[root],
                user_id=row.get("user_id"),
            )
        )
    return out


def _passage_rerank(
    conn: sqlite3.Connection,
    scores: dict[str, float],
    evidence: dict[str, list[tuple[float, int]]],
    message_units: dict[int, dict[int, float]],
    limit: int,
) -> None:
    """For the leading sessions, let `best` look at PASSAGE consecutive messages instead of one:
    a question and its answer are often in a turn and the reply to it."""
    leaders = sorted(scores, key=lambda r: -scores[r])[: max(RERANK, limit)]
    for root in leaders:
        mids = [mid for _, mid in evidence.get(root, ())]
        if not mids:
            continue
        sessions = {r[0] for r in _chunked(conn, "SELECT DISTINCT session_id FROM messages WHERE id IN ({})", mids)}
        order = [r[0] for r in _chunked(
            conn, f"SELECT id FROM messages WHERE {_VISIBLE.replace('m.', '')} AND session_id IN ({{}}) ORDER BY id",
            sorted(sessions),
        )]
        order.sort()
        position = {mid: i for i, mid in enumerate(order)}
        single = max(mass for mass, _ in evidence[root])
        window_best = single
        for mid in mids:
            p = position.get(mid)
            if p is None:
                continue
            found: dict[int, float] = {}
            for q in order[p : p + PASSAGE]:
                found.update(message_units.get(q, {}))
            window_best = max(window_best, sum(found.values()))
        scores[root] += CO_WEIGHT * (window_best - single)


def _chunked(conn: sqlite3.Connection, sql: str, values: list) -> list[tuple]:
    out: list[tuple] = []
    for start in range(0, len(values), 500):
        chunk = values[start : start + 500]
        out.extend(conn.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall())
    return out


def find_sessions(
    db: Any,
    query: str | bytes | None,
    *,
    limit: int = MAX_SESSIONS,
    exclude_session_ids: Iterable[str] = (),
    exclude_sources: Iterable[str] | None = HIDDEN_SOURCES,
    person_id: str | None = None,
    see_all: bool = False,
    role_filter: Iterable[str] | str | None = None,
    cap: int = CANDIDATE_CAP,
) -> list[SessionHit]:
    """The sessions (lineage roots) that best answer `query`, best first, at most `limit` (<= 5).

    `person_id` without `see_all`: only lineages the person took part in. `exclude_session_ids`:
    pass the current session's lineage (`db.get_lineage(current)`); their roots are left out too.
    """
    plan = plan_query(query)
    limit = max(0, min(int(limit), MAX_SESSIONS))
    if not (plan.units or plan.dates) or limit == 0:
        return []
    if isinstance(role_filter, str):
        role_filter = [r.strip() for r in role_filter.split(",")]
    return db.read(
        lambda conn: _rank(
            conn,
            plan,
            limit=limit,
            exclude_session_ids=list(exclude_session_ids or ()),
            exclude_sources=list(exclude_sources or ()),
            person_id=person_id,
            see_all=see_all,
            role_filter=role_filter,
            cap=cap,
        )
    )


def recent_sessions(
    db: Any,
    *,
    limit: int = MAX_SESSIONS,
    exclude_session_ids: Iterable[str] = (),
    exclude_sources: Iterable[str] | None = HIDDEN_SOURCES,
    person_id: str | None = None,
    see_all: bool = False,
) -> list[dict]:
    """Most recently active lineage roots (children fold into their root), newest first."""
    limit = max(0, min(int(limit), MAX_SESSIONS))
    excluded = set(exclude_session_ids or ())
    user = None if see_all else person_id
    hidden = list(exclude_sources or ())
    out: dict[str, dict] = {}
    if limit == 0:
        return []
    excluded_roots: set[str] = (
        set(db.read(lambda conn: _Sessions(conn).roots(excluded)).values()) if excluded else set()
    )
    offset, page = 0, 50
    while len(out) < limit:
        rows = db.list_sessions_rich(user_id=user, limit=page, offset=offset, exclude_sources=hidden)
        if not rows:
            break
        offset += len(rows)

        def resolve(conn: sqlite3.Connection) -> tuple[dict[str, str], dict[str, dict | None]]:
            meta = _Sessions(conn)
            roots = meta.roots(r["id"] for r in rows)
            return roots, {root: meta.get(root) for root in set(roots.values())}

        roots, root_rows = db.read(resolve)
        for row in rows:
            root = roots[row["id"]]
            if root in out or root in excluded_roots or row["id"] in excluded:
                continue
            root_row = root_rows.get(root) or row
            if root_row.get("source") in hidden:
                continue
            out[root] = {
                "session_id": root,
                "title": root_row.get("title"),
                "source": root_row.get("source"),
                "started_at": root_row.get("started_at"),
                "last_active_at": row.get("last_active_at"),  # the newest activity in the lineage
                "message_count": root_row.get("message_count"),
                "preview": root_row.get("preview") or "",
            }
            if len(out) >= limit:
                break
    return list(out.values())
