"""Recall: rank whole SESSIONS for a query (ground floor; no SDK, no tools/agent imports).

A message search answers "which messages contain these words"; recall answers "which earlier
conversation is this about". The unit scored is the root of a lineage chain (a session and its
compression/delegation children), with a session-level BM25 over the query's units (see
gateway/recall_query.py for how a question becomes units):

    score(s) = sum over units u of  idf(u) * tf(u, s) * (k1 + 1) / (tf(u, s) + k1 * norm(s))
               + CO_WEIGHT * best(s)

- tf(u, s): how many messages of the lineage hold u, saturated by k1, so one chatty session
  cannot win on a single word said over and over;
- idf(u): over sessions, not messages: a word found in every conversation tells nothing;
- norm(s): BM25 length normalisation on the lineage's message count (gentle: B = 0.5);
- best(s): the largest idf mass carried by PASSAGE consecutive messages of the session, each hit
  discounted BM25-style by its message's length: several query words in one short turn and its
  reply is the strongest sign the session answers the question.
- a date in the query is a unit held by the sessions active that day (or, more weakly, that week).
  A DAY the question names ("4月27号我们聊了什么", "what did we decide on Monday?") weighs
  DAY_OVER_WORDS times all the query's word units together, about what a session can earn from
  words at most (BM25 saturates at k1 + 1 per unit), so that day's sessions come first, ordered by
  their words: a person who names the day remembers when, and the words of such a question are
  often the least telling ("topics", "what did we talk about"). A session much longer than the
  day (a conversation kept going for weeks) gets that weight by its share: day / its length. A
  month or a year keeps its idf: it more often dates the event than the conversation ("camping
  in July"). Measured
  (bench/recall.py, + the local model): MemoryBank-CN dev, all 56 questions, scoped any@1 0.911
  -> 0.982, pooled any@1 0.839 -> 0.946 and any@5 0.929 -> 0.964 (0.5x changes nothing, 1x
  half of it, 2x all; 10x the day's own idf the same); LoCoMo unchanged on both halves (48 of
  its questions name a day); the same weight on months and years cost LoCoMo held 3 questions.
  The asker's first or latest conversation, when the question names it that way ("the first
  time we talked", 上次我们聊; gateway/recall/dates.py), weighs the same.

Every query is OR-shaped (a session with some of the words still ranks, below one with more of
them), so there is no separate "relax AND to OR" pass, and no input yields nothing when a content
word occurs.

Cost on a large store is bounded by how many matches are read (gateway/recall/read.py, which
says why the budgets are what they are), newest first: every unit reads a PROBE, then the units
still unfinished share HIT_BUDGET more in proportion to their estimated idf (a word found in nearly every session carries almost no
evidence, so a few hundred of its newest matches do; a rarer unit reads up to `cap`). A unit not read to its end has its idf extrapolated
from how far back its matches reach. When all matches fit the budget (any small store) all are
read. The units not read to their end are also read beside the anchor, the weightiest unit that
was read in full ("anchor AND unit" costs a walk over the anchor's few matches): so an old
conversation holding the rare word of a question together with its common ones still shows all
of them. Prefixes ("paint"*) are first expanded into the index terms they match
(gateway/recall_query.expand_prefixes): FTS5 answers a prefix by merging every match of every
such term, however few rows are asked for.
Exclusions (current lineage, hidden sources, sessions the person took no part in) are applied to
lineage roots after idf is computed, so they never change how the rest is ranked.

Measured and not done: pseudo-relevance feedback (RM3-style: the words of the top 1-5 sessions'
evidence messages or whole text, weighted by their scores and by an idf over the leaders, 5-30 of
them re-ordering only the top 10 with weight 0.1-0.3 of the best score). With feedback from
several sessions the leader reinforces itself and any@1 falls on one half or both (LoCoMo raw
pooled lexical, tune 0.745 -> 0.719-0.745, held 0.764 -> 0.735-0.764); from the top session's
whole text alone it raises only any@5 (tune 0.918 -> 0.922, held 0.928 -> 0.936), and with the
semantic stage held MRR drops 0.836 -> 0.834, for reading the whole text of ten sessions a query.
Nor is evidence in a message that asks a question ("What's your best camping memory?") worth less
than in a statement: discounting it by 0.3 or 0.5 in the passages lowered LoCoMo tune any@1
0.749 -> 0.714-0.723 by words alone (held 0.760-0.764): people answer in their questions too.

Measured and not done: who says the evidence, without knowing names. A name of the question
said as an address ("Thanks, Caroline!", "Hey Mel,") marks its message as said TO that person, so
"What did Caroline research?" is answered by the other side's words: with that message's other
words counting 0.4 - 0.8 in the passages, lexical held any@1 rises (0.767 -> 0.769) but + the
local model falls a question on both halves (tune 0.753 -> 0.749); a first-person message ("I",
"my", "we") beside one addressing the named person, counted 1.2 - 1.7x as that person's own
account, lowers every figure (tune + local 0.753 -> 0.749 - 0.732).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from gateway.recall import answers, semantic
from gateway.recall import read as recall_read
from gateway.recall.dates import NEAR_DAYS
from gateway.recall.lineage import SessionRows, allowed_sessions, ordered_conversation
from gateway.recall.query import Plan, Unit, cjk_pieces, plan_query
from gateway.storage.conn import Conn
from gateway.storage.fts import make_snippet

__all__ = [
    "SessionHit",
    "Plan",
    "Unit",
    "find_sessions",
    "recent_sessions",
    "plan_query",
    "cjk_pieces",
    "MAX_SESSIONS",
]

MAX_SESSIONS = 5
CANDIDATE_CAP = 3000  # newest matching messages looked at per unit, at most
LENGTH_SAMPLE = 2000  # sessions the average lineage length is taken over
K1 = 1.2
B = 0.5  # sessions differ in length far less than documents do; normalise gently
CO_WEIGHT = 0.5
MSG_K1 = 1.2
MSG_B = 0.5
PASSAGE = 2  # messages looked at together when judging the best evidence of a session
RERANK = 30  # sessions whose passages are examined
HIDDEN_SOURCES = ("tool",)
DAY_OVER_WORDS = 2.0  # a named day's weight against all the query's words together (module docstring)
OWN_WEIGHT = 2.0  # the asker's own sessions, in pooled recall: chosen on the tune split (1.5 -> 3 plateau)


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


def _rank(
    conn: Conn,
    plan: Plan,
    *,
    limit: int,
    exclude_session_ids: Iterable[str],
    exclude_sources: Iterable[str],
    person_id: str | None,
    see_all: bool,
    role_filter: Iterable[str] | None,
    cap: int,
    query_vector: semantic.QueryVector | None = None,
) -> list[SessionHit]:
    roles = [r for r in (role_filter or []) if r]
    meta = SessionRows(conn, SessionRows.LEAN)
    hidden = {s for s in (exclude_sources or []) if s}
    own = allowed_sessions(conn, person_id) if person_id else None
    allowed = None if see_all else own
    excluded = set(exclude_session_ids or ())
    excluded_roots = set(meta.roots(excluded).values()) if excluded else set()

    n_sessions = max(1, conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    # the typical length, from the most recently active sessions (a full scan costs ms on a large store)
    avg_len = (
        conn.execute(
            "SELECT avg(message_count) FROM (SELECT message_count FROM sessions ORDER BY last_active_at DESC LIMIT ?) AS recent",
            (LENGTH_SAMPLE,),
        ).fetchone()[0]
        or 1.0
    )
    newest_id = conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0

    # unit -> root -> [message ids]; df over roots before any exclusion (idf describes the corpus)
    per_unit: list[dict[str, list[int]]] = []
    idf: list[float] = []
    sizes: dict[int, int] = {}  # message id -> length in characters
    session_of: dict[int, str] = {}  # message id -> its session
    readers = recall_read.read_units(conn, plan.units, roles, cap, newest_id, n_sessions)
    unit_hits = [recall_read.unit_hits(sources, newest_id, sizes) for sources in readers]
    for hits, _, _ in unit_hits:
        session_of.update(hits)
    roots = meta.roots(session_of.values())  # every session hit, in one batch
    unseen = {sid for sid in roots if (meta.rows.get(sid) or {}).get("source") in hidden}
    for unit, (hits, total, sampled) in zip(plan.units, unit_hits):
        by_root: dict[str, list[int]] = defaultdict(list)
        for mid, sid in hits:
            if sid not in unseen:  # a hidden child adds nothing
                by_root[roots[sid]].append(mid)
        df: float = len({roots[sid] for _, sid in hits[:sampled]})
        if sampled and total > sampled:
            df = min(n_sessions, df * total / sampled)
        idf.append(recall_read.session_idf(df, n_sessions) * (recall_read.PAIR_WEIGHT if unit.pair else 1.0))
        per_unit.append(by_root)
    units = list(plan.units)
    spans: list | None = None
    day_share: dict[int, tuple[float, dict[str, float]]] = {}  # named day's unit -> (idf, root -> share)
    for spec in plan.dates:
        # the day itself, and (more weakly, through its lower idf) the week around it
        for slack in (0, NEAR_DAYS) if spec.day else (0,):
            window = spec.bounds(slack)
            if window is not None:  # sessions whose active span meets the window
                on_date = conn.execute(
                    "SELECT id, started_at, last_active_at FROM sessions WHERE last_active_at >= ? AND started_at < ?",
                    window,
                ).fetchall()
            else:  # no year given: any year; check each session's ends
                if spans is None:
                    spans = conn.execute("SELECT id, started_at, last_active_at FROM sessions").fetchall()
                on_date = [span for span in spans if spec.covers(span[1], slack) or spec.covers(span[2], slack)]
            roots = meta.roots(sid for sid, _, _ in on_date)
            by_root = {roots[sid]: [] for sid, _, _ in on_date}
            df = len(by_root)
            weight = math.log(1 + (n_sessions - df + 0.5) / (df + 0.5)) if df else 0.0
            if spec.day and slack == 0 and df:  # a day the question names outweighs its words
                share: dict[str, float] = {}
                for sid, started, last in on_date:  # ... for a session about as long as the day
                    part = min(1.0, spec.days * 86400 / max(1.0, (last or 0) - (started or 0)))
                    share[roots[sid]] = max(part, share.get(roots[sid], 0.0))
                day_share[len(idf)] = (weight, share)
                weight = max(weight, DAY_OVER_WORDS * sum(idf[: len(plan.units)]))
            idf.append(weight)
            per_unit.append(by_root)
            units.append(Unit(label=spec.label, word_expr="", date=True, pair=slack > 1))

    if plan.order:  # "the first time we talked", 上次聊天: that conversation of the asker's comes first
        named = ordered_conversation(conn, meta, plan.order, person_id, hidden, excluded | excluded_roots)
        if named is not None:
            idf.append(max(math.log(1 + n_sessions), DAY_OVER_WORDS * sum(idf[: len(plan.units)])))
            per_unit.append({named: []})
            units.append(Unit(label=f"{plan.order} conversation", word_expr="", date=True))

    # filters are applied to roots, and to the session each hit lives in
    candidates: set[str] = set()
    for by_root in per_unit:
        candidates.update(by_root)

    def visible(roots: set[str]) -> set[str]:
        keep: set[str] = set()
        for root in roots:
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
        return keep

    keep = visible(candidates)
    vector_only: dict[str, float] = {}
    if not keep and query_vector is not None:  # no word of the query occurs where it may: meaning alone
        scanned = semantic.scan_newest(conn, query_vector)
        scanned_roots = meta.roots(scanned)  # the sessions' rows in one batch, not one query each
        for sid, sim in scanned.items():
            if (meta.get(sid) or {}).get("source") not in hidden:
                root = scanned_roots[sid]
                vector_only[root] = max(sim, vector_only.get(root, -1.0))
        keep = visible(set(vector_only))

    # lengths of lineages (messages), from the sessions we have loaded
    lengths: dict[str, int] = defaultdict(int)
    root_of = meta.known_roots()
    for sid, row in meta.rows.items():
        if row is not None and (root := root_of.get(sid) or meta.root(sid)) in keep:
            lengths[root] += int(row["message_count"] or 0)

    # in `best`, a hit in a short message says more than one in a long one (BM25-style, tf = 1)
    mean_size = sum(sizes.values()) / len(sizes) if sizes else 1.0
    short = {mid: (MSG_K1 + 1) / (1 + MSG_K1 * (1 - MSG_B + MSG_B * size / mean_size)) for mid, size in sizes.items()}
    scores: dict[str, float] = defaultdict(float)
    mass: dict[int, float] = {}  # message -> the weight of the units it holds
    message_root: dict[int, str] = {}
    matched: dict[str, list[str]] = defaultdict(list)
    for index, (unit, by_root, weight) in enumerate(zip(units, per_unit, idf)):
        own_idf, share = day_share.get(index, (weight, {}))
        for root, mids in by_root.items():
            if root not in keep:
                continue
            tf = max(1, len(mids))
            norm = 1 - B + B * max(1, lengths[root]) / avg_len
            unit_weight = own_idf + (weight - own_idf) * share.get(root, 1.0)  # a named day: by its share
            scores[root] += unit_weight * tf * (K1 + 1) / (tf + K1 * norm)
            if not unit.pair:
                matched[root].append(unit.label)
            for mid in mids:
                mass[mid] = mass.get(mid, 0.0) + weight * short[mid]
                message_root[mid] = root
    best: dict[str, float] = {}
    for mid, m in mass.items():
        root = message_root[mid]
        if m > best.get(root, -1.0):
            best[root] = m
    for root in scores:
        scores[root] += CO_WEIGHT * best.get(root, 0.0)
    if PASSAGE > 1 and scores:
        leaders = heapq.nsmallest(max(RERANK, limit), scores, key=lambda r: -scores[r])
        evidence_of = {r: _root_mids(r, per_unit) for r in leaders}
        # each leader's weightiest evidence: where meaning and the asked-for answer are looked up
        heavy = {
            mid: session_of[mid]
            for mids in evidence_of.values()
            for mid in heapq.nlargest(semantic.PASSAGE_MESSAGES, mids, key=lambda m: (mass[m], m))
        }
        bonus: dict[int, float] = {}
        if query_vector is not None:  # meaning where the words are (semantic.passage_bonus)
            scale = max((best.get(r, 0.0) for r in leaders), default=0.0)
            bonus = semantic.passage_bonus(conn, query_vector, heavy, scale)
        _passage_rerank(
            conn,
            scores,
            evidence_of,
            _message_units(leaders, per_unit, idf, short),
            session_of,
            best,
            bonus,
            answers.asked(plan.query.text),
            set(heavy),
        )

    if see_all and own:
        # pooled recall (an admin, a single owner with many chats): the asker's own conversations
        # first, unless another's is much the better match
        members_of: dict[str, set[str]] = defaultdict(set)
        for sid, row in meta.rows.items():
            if row is not None:
                members_of[meta.root(sid)].add(sid)
        for root in scores:
            if root in own or members_of[root] & own:
                scores[root] *= OWN_WEIGHT
    for root, sim in vector_only.items():
        if root in keep:
            scores[root] = sim
    order = dict(scores)  # what the final order follows (the lexical score, or the fused one)
    if query_vector is not None and scores and not vector_only:
        leaders = heapq.nsmallest(max(semantic.LEADERS, limit), scores, key=lambda r: (-scores[r], r))
        members: dict[str, list[str]] = {r: [] for r in leaders}
        for sid, row in meta.rows.items():
            if row is not None and (root := meta.root(sid)) in members:
                members[root].append(sid)
        fused = semantic.fuse({r: scores[r] for r in leaders}, semantic.similarities(conn, query_vector, members))
        lift = max(scores.values()) + 1.0  # the re-ranked leaders stay above every other session
        for root, value in fused.items():
            order[root] = lift + value

    # the best `limit` by score, ties to the most recently active (the sort is over the few tied)
    top = heapq.nlargest(limit, order.values())
    tied = [r for r in order if top and order[r] >= top[-1]]
    ranked = sorted(tied, key=lambda r: (-order[r], -(meta.get(r) or {}).get("last_active_at", 0), r))[:limit]
    details = {
        row[0]: dict(zip(SessionRows.NAMES, row))
        for row in _chunked(conn, f"SELECT {SessionRows.COLS} FROM sessions WHERE id IN ({{}})", ranked)
    }
    evidence = {
        root: sorted(((mass[mid], mid) for mid in _root_mids(root, per_unit)), key=lambda e: (-e[0], -e[1]))
        for root in ranked
    }
    firsts = [ev[0][1] for ev in evidence.values() if ev]
    contents = dict(_chunked(conn, "SELECT id, content FROM messages WHERE id IN ({})", firsts))
    out: list[SessionHit] = []
    words = plan.highlight_words()
    for root in ranked:
        row = details.get(root) or {}
        ids = [mid for _, mid in evidence[root]]
        snippet = (
            make_snippet(contents.get(ids[0]) or "", words)
            if ids and ids[0] in contents
            else (row.get("preview") or "")
        )
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


def _root_mids(root: str, per_unit: list[dict[str, list[int]]]) -> list[int]:
    """The messages of a lineage holding any unit, each once."""
    return list(dict.fromkeys(mid for by_root in per_unit for mid in by_root.get(root, ())))


def _message_units(
    roots: list[str], per_unit: list[dict[str, list[int]]], idf: list[float], short: dict[int, float]
) -> dict[int, dict[int, float]]:
    """message -> {unit index: weight} for the messages of the given lineages."""
    out: dict[int, dict[int, float]] = defaultdict(dict)
    for index, (by_root, weight) in enumerate(zip(per_unit, idf)):
        for root in roots:
            for mid in by_root.get(root, ()):
                out[mid][index] = weight * short[mid]
    return out


def _passage_rerank(
    conn: Conn,
    scores: dict[str, float],
    leaders: dict[str, list[int]],
    message_units: dict[int, dict[int, float]],
    session_of: dict[int, str],
    best: dict[str, float],
    bonus: dict[int, float],
    kind: answers.Kind | None,
    heavy: set[int],
) -> None:
    """For the leading sessions (root -> its messages holding a unit), let `best` look at PASSAGE
    consecutive messages instead of one: a question and its answer are often in a turn and the
    reply to it. A passage starting at a message also gains that message's `bonus` (meaning), and
    counts 1 + answers.GAIN times when the question asks for a `kind` of answer that a message of
    it, or the answers.BEFORE messages ahead of it, holds, plus answers.GAIN times the question's
    words in the weightiest such message (looked up around the `heavy` messages' passages:
    gateway/recall/answers.py)."""
    sessions = {root: {session_of[mid] for mid in mids} for root, mids in leaders.items()}
    visible: dict[str, list[int]] = defaultdict(list)  # session -> its visible messages, in one query
    visible_sql = recall_read.VISIBLE_SQL.replace("m.", "")
    for mid, sid in _chunked(
        conn,
        f"SELECT id, session_id FROM messages WHERE {visible_sql} AND session_id IN ({{}})",
        sorted(set().union(*sessions.values())),
    ):
        visible[sid].append(mid)
    orders = {root: sorted(mid for sid in sessions[root] for mid in visible.get(sid, ())) for root in leaders}
    holding: set[int] = set()
    if kind is not None and heavy:
        starts = {root: [mid for mid in mids if mid in heavy] for root, mids in leaders.items()}
        passages = {q for root, mids in starts.items() for q in _passages(orders[root], mids, answers.BEFORE)}
        contents = _chunked(conn, "SELECT id, content FROM messages WHERE id IN ({})", sorted(passages))
        holding = {mid for mid, content in contents if kind.answered_by(content or "")}
    for root, mids in leaders.items():
        if not mids:
            continue
        order = orders[root]
        position = {mid: i for i, mid in enumerate(order)}
        single = best[root]
        window_best = single
        for mid in mids:
            p = position.get(mid)
            if p is None:
                continue
            found: dict[int, float] = {}
            for q in order[p : p + PASSAGE]:
                found.update(message_units.get(q, {}))
            value = sum(found.values())
            # the words of the messages around the passage that hold the asked-for kind (answers.py)
            kind_mass = [
                sum(message_units.get(q, {}).values())
                for q in order[max(0, p - answers.BEFORE) : p + PASSAGE]
                if q in holding
            ]
            if kind_mass:
                value = (1.0 + answers.GAIN) * value + answers.GAIN * max(kind_mass)
            window_best = max(window_best, value + bonus.get(mid, 0.0))
        scores[root] += CO_WEIGHT * (window_best - single)


def _passages(order: list[int], starts: list[int], before: int) -> set[int]:
    """The messages of the PASSAGE-long passages that start at `starts` (in `order`, a session's
    visible messages), each with the `before` messages ahead of it."""
    position = {mid: i for i, mid in enumerate(order)}
    return {
        q for mid in starts if (p := position.get(mid)) is not None for q in order[max(0, p - before) : p + PASSAGE]
    }


def _chunked(conn: Conn, sql: str, values: list) -> list[tuple]:
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
    embedder: Any = semantic.DEFAULT,
    now: float | None = None,
) -> list[SessionHit]:
    """The sessions (lineage roots) that best answer `query`, best first, at most `limit` (<= 5).

    `person_id` without `see_all`: only lineages the person took part in. `exclude_session_ids`:
    pass the current session's lineage (`db.get_lineage(current)`); their roots are left out too.
    `embedder` (gateway.embeddings.Embedder; default: the one installed by `semantic.use`, None for
    words only) adds the semantic stage when its vectors are stored. `now` is the asking time
    relative dates count back from ("yesterday", 上周; default: the clock).
    """
    plan = plan_query(query, now)
    limit = max(0, min(int(limit), MAX_SESSIONS))
    if embedder is semantic.DEFAULT:
        embedder = semantic.current()
    query_vector = semantic.embed_query(embedder, plan.meaning_text) if limit else None
    if not (plan.units or plan.dates or query_vector) or limit == 0:
        return []
    if isinstance(role_filter, str):
        role_filter = [r.strip() for r in role_filter.split(",")]
    return db.search_read(
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
            query_vector=query_vector,
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
        set(db.search_read(lambda conn: SessionRows(conn).roots(excluded)).values()) if excluded else set()
    )
    offset, page = 0, 50
    while len(out) < limit:
        rows = db.list_sessions_rich(user_id=user, limit=page, offset=offset, exclude_sources=hidden)
        if not rows:
            break
        offset += len(rows)

        def resolve(conn: Conn) -> tuple[dict[str, str], dict[str, dict | None]]:
            meta = SessionRows(conn)
            roots = meta.roots(r["id"] for r in rows)
            return roots, {root: meta.get(root) for root in set(roots.values())}

        roots, root_rows = db.search_read(resolve)
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
