"""Recall: rank whole SESSIONS for a query (ground floor; no SDK, no tools/agent imports).

A message search answers "which messages contain these words"; recall answers "which earlier
conversation is this about". The unit scored is the root of a lineage chain (a session and its
compression/delegation children: gateway/recall/lineage.py), with a session-level BM25 over the
query's units (gateway/recall/query.py says how a question becomes units):

    score(s) = sum over units u of  idf(u) * tf(u, s) * (k1 + 1) / (tf(u, s) + k1 * norm(s))
               + co_weight * best(s)

- tf(u, s): how many messages of the lineage hold u; idf(u): over sessions, not messages (a word
  found in every conversation tells nothing); norm(s): length normalisation on the message count;
- best(s): the largest idf mass carried by `passage` consecutive messages, each hit discounted by
  its message's length: several query words in one short turn and its reply is the strongest sign;
- a date in the query is a unit held by the sessions active that day (more weakly, that week). A
  DAY the question names weighs `day_over_words` times all its word units together, about what a
  session can earn from words at most, so that day's sessions come first, ordered by their words:
  a person who names the day remembers when, and the words of such a question ("what did we talk
  about") are the least telling. A session much longer than the day gets that weight by its share.
  A month or a year keeps its idf: it more often dates the event than the conversation ("camping
  in July"). The asker's first or latest conversation, when the question names it (dates.py),
  weighs the same.

The ranking is a row of stages over one table of candidates (`Candidates`): gather the matches
(idf per unit) -> weigh dates -> filter visibility -> gather meaning (the sessions whose windows
stand out most in similarity, among those the asker may see) -> score words -> rerank the leaders'
passages by meaning and answer kind -> weigh the asker's own -> fuse with meaning, where the
nearest in meaning join the words' order by the strength of each side's evidence (`_join_meaning`)
-> render. Why the meaning candidates: on LoCoMo-Plus dev (a trigger recalls its cue in other
words; only 16 % share a content word) the words' top 5 held the cue for 0.045 of triggers among
the asker's sessions, with meaning re-ordering only the words' leaders; with the nearest joining,
0.20+ (bench/recall.py, the figures in weights.py). Every weight is a
field of one `RankWeights` (gateway/recall/weights.py, each with its measured reason), passed in.

Every query is OR-shaped (a session with some of the words still ranks, below one with more of
them), so there is no "relax AND to OR" pass. Cost on a large store is bounded by how many matches
are read (gateway/recall/read.py says why the budgets are what they are). Exclusions (the current
lineage, hidden sources, sessions the person took no part in) apply to lineage roots after idf is
computed, so they never change how the rest is ranked.

Measured and not done (bench/recall.py, LoCoMo raw questions pooled):
- pseudo-relevance feedback (RM3-style, top 1-5 sessions): the leader reinforces itself, any@1 falls (tune 0.745 -> 0.719).
- evidence in a message that asks a question counting 0.3-0.5: tune any@1 0.749 -> 0.714; people answer in questions too.
- who says the evidence, from names said as an address ("Thanks, Caroline!"): + local model, tune 0.753 -> 0.749-0.732.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from gateway import telemetry
from gateway.recall import answers, semantic
from gateway.recall import read as recall_read
from gateway.recall.dates import NEAR_DAYS, DateSpec
from gateway.recall.lineage import SessionRows, allowed_sessions, ordered_conversation, recent_own
from gateway.recall.query import Plan, Unit, cjk_pieces, plan_query
from gateway.recall.weights import DEFAULT_WEIGHTS, RankWeights
from gateway.storage.base import StorageFace
from gateway.storage.conn import Conn
from gateway.storage.fts import make_snippet
from gateway.storage.vectors import WINDOW

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
HIDDEN_SOURCES = ("tool",)
NEAREST_LOOKED_AT = 4  # nearest sessions resolved to roots, per one wanted (some are hidden or fold into one root)


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


@dataclass(frozen=True)
class Ask:
    """One question as the stages see it: what is asked, by whom, what they may see (applied to
    lineage roots after idf is computed), and the weights."""

    plan: Plan
    limit: int
    query_vector: semantic.QueryVector | None  # None: words only
    weights: RankWeights
    roles: list[str]  # only messages of these roles count (none: every role)
    cap: int  # matches read per unit, at most
    person_id: str | None
    see_all: bool
    hidden: set[str]  # sources left out
    excluded: set[str]  # sessions left out (the current lineage), and their roots
    excluded_roots: set[str]
    own: set[str] | None  # the sessions the asker took part in
    allowed: set[str] | None  # the sessions they may see (None: every one)


@dataclass
class Candidates:
    """The table the stages fill in turn. Per unit (words, then dates): its label, its idf, and the
    lineage roots holding it with their messages; then the roots that may be shown, their scores
    and, per message, the evidence weight it carries."""

    meta: SessionRows
    n_sessions: int
    avg_len: float  # the typical lineage length, in messages
    words: int  # how many of the units are the query's words (the first ones)
    units: list[Unit] = field(default_factory=list)
    idf: list[float] = field(default_factory=list)
    per_unit: list[dict[str, list[int]]] = field(default_factory=list)  # unit -> root -> its messages
    day_share: dict[int, tuple[float, dict[str, float]]] = field(default_factory=dict)  # named day -> (idf, shares)
    sizes: dict[int, int] = field(default_factory=dict)  # message -> its length in characters
    session_of: dict[int, str] = field(default_factory=dict)  # message -> its session
    keep: set[str] = field(default_factory=set)  # the roots that may be shown
    vector_only: dict[str, float] = field(default_factory=dict)  # root -> similarity, when no word matched
    sims: dict[str, float] = field(default_factory=dict)  # session -> its best window's similarity (the pool)
    margin: dict[str, float] = field(default_factory=dict)  # session -> how far that stands out of the pool
    meaning: dict[str, str] = field(default_factory=dict)  # the nearest visible roots -> their nearest session
    own_roots: set[str] = field(default_factory=set)  # pooled recall: the roots of the asker's own lineages
    lengths: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # root -> messages of its lineage
    short: dict[int, float] = field(default_factory=dict)  # message -> how much a hit in it counts, by its length
    scores: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    mass: dict[int, float] = field(default_factory=dict)  # message -> the weight of the units it holds
    best: dict[str, float] = field(default_factory=dict)  # root -> its weightiest message's mass
    matched: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # root -> unit labels

    def add(self, unit: Unit, by_root: dict[str, list[int]], idf: float) -> None:
        self.units.append(unit)
        self.per_unit.append(by_root)
        self.idf.append(idf)

    def word_mass(self) -> float:
        """The idf of all the query's words together."""
        return sum(self.idf[: self.words])


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
    weights: RankWeights = DEFAULT_WEIGHTS,
) -> list[SessionHit]:
    """The stages, in order, over one table of candidates (module docstring)."""
    meta = SessionRows(conn, SessionRows.LEAN)
    own = allowed_sessions(conn, person_id) if person_id else None
    excluded = set(exclude_session_ids or ())
    ask = Ask(
        plan=plan,
        limit=limit,
        query_vector=query_vector,
        weights=weights,
        roles=[r for r in (role_filter or []) if r],
        cap=cap,
        person_id=person_id,
        see_all=see_all,
        hidden={s for s in (exclude_sources or []) if s},
        excluded=excluded,
        excluded_roots=set(meta.roots(excluded).values()) if excluded else set(),
        own=own,
        allowed=None if see_all else own,
    )
    table = _gather(conn, ask, meta)
    for stage in (_weigh_dates, _filter_visibility, _gather_meaning, _score_words, _rerank_passages, _weigh_own):
        stage(conn, ask, table)
    telemetry.annotate("chinwag.recall.candidates", len(table.keep | table.vector_only.keys()))
    return _render(conn, ask, table, _fuse(conn, ask, table))


def _corpus(conn: Conn) -> tuple[int, float, int]:
    """How many sessions, their typical length and the newest message id."""
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
    return n_sessions, avg_len, newest_id


def _gather(conn: Conn, ask: Ask, meta: SessionRows) -> Candidates:
    """Read each word unit's matches and group them by lineage root; its idf is over roots before
    any exclusion (idf describes the corpus), extrapolated when not all its matches were read."""
    n_sessions, avg_len, newest_id = _corpus(conn)
    plan = ask.plan
    table = Candidates(meta, n_sessions, avg_len, words=len(plan.units))
    readers = recall_read.read_units(conn, plan.units, ask.roles, ask.cap, newest_id, n_sessions, ask.weights)
    unit_hits = [recall_read.unit_hits(sources, newest_id, table.sizes) for sources in readers]
    for hits, _, _ in unit_hits:
        table.session_of.update(hits)
    roots = meta.roots(table.session_of.values())  # every session hit, in one batch
    unseen = {sid for sid in roots if (meta.rows.get(sid) or {}).get("source") in ask.hidden}
    for unit, (hits, total, sampled) in zip(plan.units, unit_hits):
        by_root: dict[str, list[int]] = defaultdict(list)
        for mid, sid in hits:
            if sid not in unseen:  # a hidden child adds nothing
                by_root[roots[sid]].append(mid)
        df: float = len({roots[sid] for _, sid in hits[:sampled]})
        if sampled and total > sampled:
            df = min(n_sessions, df * total / sampled)
        table.add(
            unit, by_root, recall_read.session_idf(df, n_sessions) * (ask.weights.pair_weight if unit.pair else 1.0)
        )
    return table


def _weigh_dates(conn: Conn, ask: Ask, table: Candidates) -> None:
    """A date of the query is a unit held by the sessions active then: the day itself and, more
    weakly through its lower idf, the week around it. A day the question names, and the asker's
    first or latest conversation, outweigh its words (module docstring)."""
    plan, weights = ask.plan, ask.weights
    spans: list[tuple] = []  # every session's span, read once when a date names no year
    for spec in plan.dates:
        for slack in (0, NEAR_DAYS) if spec.day else (0,):
            window = spec.bounds(slack)
            if window is not None:  # sessions whose active span meets the window
                on_date = conn.execute(
                    "SELECT id, started_at, last_active_at FROM sessions WHERE last_active_at >= ? AND started_at < ?",
                    window,
                ).fetchall()
            else:  # no year given: any year; check each session's ends
                spans = spans or conn.execute("SELECT id, started_at, last_active_at FROM sessions").fetchall()
                on_date = [span for span in spans if spec.covers(span[1], slack) or spec.covers(span[2], slack)]
            _add_date(table, spec, slack, on_date, weights)
    if plan.order:  # "the first time we talked", 上次聊天: that conversation of the asker's comes first
        excluded = ask.excluded | ask.excluded_roots
        named = ordered_conversation(conn, table.meta, plan.order, ask.person_id, ask.hidden, excluded)
        if named is not None:
            weight = max(math.log(1 + table.n_sessions), weights.day_over_words * table.word_mass())
            table.add(Unit(label=f"{plan.order} conversation", word_expr="", date=True), {named: []}, weight)


def _add_date(table: Candidates, spec: DateSpec, slack: int, on_date: list, weights: RankWeights) -> None:
    """The unit of one date window, held by the roots of the sessions active in it (`on_date`:
    id, started, last active). A named day weighs at least `day_over_words` x the words, and a
    session much longer than the day gets that weight by its share: day / its length."""
    roots = table.meta.roots(sid for sid, _, _ in on_date)
    by_root: dict[str, list[int]] = {roots[sid]: [] for sid, _, _ in on_date}
    df = len(by_root)
    weight = recall_read.session_idf(df, table.n_sessions)
    if spec.day and slack == 0 and df:  # a day the question names outweighs its words
        share: dict[str, float] = {}
        for sid, started, last in on_date:  # ... for a session about as long as the day
            part = min(1.0, spec.days * 86400 / max(1.0, (last or 0) - (started or 0)))
            share[roots[sid]] = max(part, share.get(roots[sid], 0.0))
        table.day_share[len(table.idf)] = (weight, share)
        weight = max(weight, weights.day_over_words * table.word_mass())
    table.add(Unit(label=spec.label, word_expr="", date=True, pair=slack > 1), by_root, weight)


def _filter_visibility(conn: Conn, ask: Ask, table: Candidates) -> None:
    """The roots that may be shown; when no word of the query occurs where it may, the sessions
    nearest in meaning (vectors alone). Then the lengths of the lineages kept."""
    candidates: set[str] = set()
    for by_root in table.per_unit:
        candidates.update(by_root)
    meta = table.meta
    table.keep = _visible(meta, ask, candidates)
    query_vector = ask.query_vector
    if not table.keep and query_vector is not None:  # no word of the query occurs where it may: meaning alone
        scanned = semantic.scan_newest(conn, query_vector, ask.weights.vector_scan)
        scanned_roots = meta.roots(scanned)  # the sessions' rows in one batch, not one query each
        for sid, sim in scanned.items():
            if (meta.get(sid) or {}).get("source") not in ask.hidden:
                root = scanned_roots[sid]
                table.vector_only[root] = max(sim, table.vector_only.get(root, -1.0))
        table.keep = _visible(meta, ask, set(table.vector_only))
    # lengths of lineages (messages), from the sessions we have loaded
    root_of = meta.known_roots()
    for sid, row in meta.rows.items():
        if row is not None and (root := root_of.get(sid) or meta.root(sid)) in table.keep:
            table.lengths[root] += int(row["message_count"] or 0)


def _gather_meaning(conn: Conn, ask: Ask, table: Candidates) -> None:
    """The first stage's other half: the asker's sessions by their best window's similarity to the
    question (their newest, about `vector_scan` windows of them), pooled recall too; an asker with no
    conversations of their own (an operator over everyone's) gets the store's newest `vector_scan`
    windows. The nearest join the lexical candidates in `_fuse`.

    Why the asker's own in pooled recall too: how far a session stands out is measured against the
    pool, and against everyone's windows every session of the asker's own conversations stands out
    (other people talk of other things), so their entrants overran the words: e.g. margins 0.84 /
    0.39 / 0.39 against everyone's, 0.44 / -0.06 / -0.04 against the asker's. LoCoMo dev pooled MRR
    0.8329 -> 0.8335, LoCoMo-Plus dev pooled any@5 0.119 -> 0.214 (bench/recall.py, local model).
    Other people's sessions are still found by their words."""
    query_vector = ask.query_vector
    if query_vector is None or table.vector_only or ask.weights.meaning_leaders <= 0:
        return
    scan = ask.weights.vector_scan
    # the asker's newest sessions, about `scan` windows of them: the work is bounded however long their history
    mine = recent_own(conn, ask.person_id, scan * WINDOW) if ask.person_id and ask.own else []
    if mine or ask.allowed is not None:
        sims, margin = semantic.nearest(conn, query_vector, mine, scan)
    else:
        sims, margin = semantic.nearest(conn, query_vector, None, scan)
    table.sims, table.margin = sims, margin
    # only the sessions standing out most are resolved to visible roots
    looked_at = NEAREST_LOOKED_AT * ask.weights.meaning_leaders
    nearest = heapq.nsmallest(looked_at, margin, key=lambda sid: (-margin[sid], sid))
    meta = table.meta
    roots = meta.roots(nearest)
    by_root: dict[str, str] = {}  # root -> its most standing-out session
    for sid in nearest:
        if (meta.get(sid) or {}).get("source") not in ask.hidden:
            by_root.setdefault(roots[sid], sid)
    table.meaning = {root: by_root[root] for root in _visible(meta, ask, set(by_root))}


def _visible(meta: SessionRows, ask: Ask, roots: set[str]) -> set[str]:
    """Filters apply to roots, and to the sessions each hit lives in."""
    keep: set[str] = set()
    for root in roots:
        row = meta.get(root)
        if row is None or root in ask.excluded_roots or root in ask.excluded:
            continue
        if row["source"] in ask.hidden:
            continue
        keep.add(root)
    if ask.allowed is not None:
        # a lineage counts as the person's when they took part in any of its sessions that matched
        lineage_members: dict[str, set[str]] = defaultdict(set)
        for sid, row in meta.rows.items():
            if row is not None and meta.root(sid) in keep:
                lineage_members[meta.root(sid)].add(sid)
        keep = {r for r in keep if r in ask.allowed or lineage_members[r] & ask.allowed}
    return keep


def _score_words(conn: Conn, ask: Ask, table: Candidates) -> None:
    """The session BM25 of every unit over the roots kept, and each message's evidence mass; then
    best(s), the weightiest single message, counts `co_weight`."""
    weights = ask.weights
    k1, b = weights.k1, weights.b
    # in `best`, a hit in a short message says more than one in a long one (BM25-style, tf = 1)
    mean_size = sum(table.sizes.values()) / len(table.sizes) if table.sizes else 1.0
    msg_k1, msg_b = weights.msg_k1, weights.msg_b
    table.short = {
        mid: (msg_k1 + 1) / (1 + msg_k1 * (1 - msg_b + msg_b * size / mean_size)) for mid, size in table.sizes.items()
    }
    scores, mass, short = table.scores, table.mass, table.short
    message_root: dict[int, str] = {}
    for index, (unit, by_root, weight) in enumerate(zip(table.units, table.per_unit, table.idf)):
        own_idf, share = table.day_share.get(index, (weight, {}))
        for root, mids in by_root.items():
            if root not in table.keep:
                continue
            tf = max(1, len(mids))
            norm = 1 - b + b * max(1, table.lengths[root]) / table.avg_len
            unit_weight = own_idf + (weight - own_idf) * share.get(root, 1.0)  # a named day: by its share
            scores[root] += unit_weight * tf * (k1 + 1) / (tf + k1 * norm)
            if not unit.pair:
                table.matched[root].append(unit.label)
            for mid in mids:
                mass[mid] = mass.get(mid, 0.0) + weight * short[mid]
                message_root[mid] = root
    best = table.best
    for mid, m in mass.items():
        root = message_root[mid]
        if m > best.get(root, -1.0):
            best[root] = m
    for root in scores:
        scores[root] += weights.co_weight * best.get(root, 0.0)


def _rerank_passages(conn: Conn, ask: Ask, table: Candidates) -> None:
    """For the lexical leaders, best(s) looks at passages instead of single messages, with what
    their meaning and the kind of answer asked for add (`_passage_rerank`)."""
    scores, weights, query_vector = table.scores, ask.weights, ask.query_vector
    if weights.passage <= 1 or not scores:
        return
    leaders = heapq.nsmallest(max(weights.rerank, ask.limit), scores, key=lambda r: -scores[r])
    evidence_of = {r: _root_mids(r, table.per_unit) for r in leaders}
    # each leader's weightiest evidence: where meaning and the asked-for answer are looked up
    mass = table.mass
    heavy = {
        mid: table.session_of[mid]
        for mids in evidence_of.values()
        for mid in heapq.nlargest(weights.passage_messages, mids, key=lambda m: (mass[m], m))
    }
    bonus: dict[int, float] = {}
    if query_vector is not None:  # meaning where the words are (semantic.passage_bonus)
        scale = max((table.best.get(r, 0.0) for r in leaders), default=0.0)
        bonus = semantic.passage_bonus(conn, query_vector, heavy, scale, weights)
    _passage_rerank(
        conn,
        scores,
        evidence_of,
        _message_units(leaders, table.per_unit, table.idf, table.short),
        table.session_of,
        table.best,
        bonus,
        answers.asked(ask.plan.query.text),
        set(heavy),
        weights,
    )


def _weigh_own(conn: Conn, ask: Ask, table: Candidates) -> None:
    """Pooled recall (an admin, a single owner with many chats): the asker's own conversations
    first, unless another's is much the better match."""
    own = ask.own
    if not (ask.see_all and own):
        return
    meta = table.meta
    members_of: dict[str, set[str]] = defaultdict(set)
    for sid, row in meta.rows.items():  # every session read so far, the nearest in meaning too
        if row is not None:
            members_of[meta.root(sid)].add(sid)
    table.own_roots = {root for root, members in members_of.items() if root in own or members & own}
    for root in table.scores.keys() & table.own_roots:
        table.scores[root] *= ask.weights.own_weight


def _fuse(conn: Conn, ask: Ask, table: Candidates) -> dict[str, float]:
    """What the final order follows: the lexical score, or for the leaders the score fused with
    their similarity (semantic.fuse), lifted above every other session."""
    scores, query_vector = table.scores, ask.query_vector
    for root, sim in table.vector_only.items():
        if root in table.keep:
            scores[root] = sim
    order = dict(scores)
    if query_vector is not None and scores and not table.vector_only:
        leaders = heapq.nsmallest(max(ask.weights.leaders, ask.limit), scores, key=lambda r: (-scores[r], r))
        members: dict[str, list[str]] = {r: [] for r in leaders}
        meta = table.meta
        for sid, row in meta.rows.items():
            if row is not None and (root := meta.root(sid)) in members:
                members[root].append(sid)
        similar = semantic.similarities(conn, query_vector, members)
        fused = semantic.fuse({r: scores[r] for r in leaders}, similar, ask.weights)
        lift = max(scores.values()) + 1.0  # the re-ranked leaders stay above every other session
        for root, value in fused.items():
            order[root] = lift + value
    if table.meaning and not table.vector_only:
        _join_meaning(ask, table, order)
    return order


def _join_meaning(ask: Ask, table: Candidates, order: dict[str, float]) -> None:
    """The sessions nearest in meaning join the words' order: each moves up past the sessions its
    evidence outweighs. A session's evidence is the share of the question's word informativeness it
    holds (idf mass of the words found in it over that of all the question's words) plus
    `margin_weight` x how far its similarity stands out of the asker's pool (semantic.nearest): a
    match on common words alone lets meaning lead, a strong lexical match keeps words first.

    Only sessions outside the words' leaders enter: a leader's similarity is already in its fused
    place, and moving it again counted meaning twice (LoCoMo dev MRR scoped 0.8327 -> 0.8345, pooled
    0.8316 -> 0.8314; LoCoMo-Plus dev scoped any@5 0.214 -> 0.234). In pooled recall another
    person's session has its evidence divided by `own_weight`, as its words' score is not
    multiplied (LoCoMo dev pooled MRR 0.8314 -> 0.8321; LoCoMo-Plus dev pooled any@5 0.095 -> 0.109).
    Without the meaning stage LoCoMo dev MRR is 0.8344 pooled, 0.8342 scoped; with it 0.8345 / 0.8358
    (bench/recall.py --only en --semantic local)."""
    weights = ask.weights
    words = [i for i in range(table.words) if not table.units[i].pair]
    unseen = recall_read.session_idf(1, table.n_sessions)  # a word found nowhere is as telling as the rarest
    total = sum(table.idf[i] if table.per_unit[i] else unseen for i in words) or 1.0
    ranked = heapq.nsmallest(max(weights.leaders, ask.limit), order, key=lambda r: (-order[r], r))
    # the leaders' meaning is already in their fused order (semantic.fuse): only others enter
    outside = [root for root in table.meaning if root not in ranked]
    entrants = heapq.nsmallest(weights.meaning_leaders, outside, key=lambda r: (-table.sims[table.meaning[r]], r))

    def near(root: str) -> str:  # the session a root's similarity is read from
        return table.meaning.get(root, root)

    cover = {
        root: sum(table.idf[i] for i in words if root in table.per_unit[i]) / total for root in {*ranked, *entrants}
    }
    # meaning counts for what the words leave unexplained: nothing when a session holds every word
    open_share = 1.0 - max(cover.values(), default=0.0)

    def margin(root: str) -> float:
        return table.margin.get(near(root), 0.0)

    # meaning adds evidence and never takes the words' away: a session holding the question's rarest
    # words whose windows do not stand out (a negative margin) kept only what its words earned, not less,
    # so an entrant holding a common word passed it (LoCoMo dev MRR scoped 0.8351 -> 0.8358, pooled
    # 0.8335 -> 0.8345; LoCoMo-Plus dev unchanged)
    strength = {root: cover[root] + weights.margin_weight * open_share * max(0.0, margin(root)) for root in cover}
    if table.own_roots:  # pooled: the asker's own come first, as with the words (`_weigh_own`)
        for root in strength.keys() - table.own_roots:
            value = strength[root]
            strength[root] = value / weights.own_weight if value > 0 else value * weights.own_weight
    first = ranked[0] if ranked else None
    lead = weights.overrule_margin

    def overrules(root: str) -> bool:  # the first place, as in semantic.fuse: the words keep it unless
        if first is None:
            return True
        return table.sims.get(near(root), 0.0) - table.sims.get(near(first), 1.0) > lead

    def beats(root: str, other: str) -> bool:  # stronger evidence, and meaning is on its side too
        return strength[root] > strength[other] and margin(root) > margin(other)

    by_strength = sorted(entrants, key=lambda r: (-strength[r], r))
    final = semantic.interleave(ranked, by_strength, beats, overrules)
    lift = max(order.values(), default=0.0) + 1.0
    for place, root in enumerate(final):
        order[root] = lift + len(final) - place


def _render(conn: Conn, ask: Ask, table: Candidates, order: dict[str, float]) -> list[SessionHit]:
    """The best `limit` by `order`, ties to the most recently active (the sort is over the few
    tied), each with its session row, evidence (best first) and a snippet of the best."""
    meta, limit = table.meta, ask.limit
    top = heapq.nlargest(limit, order.values())
    tied = [r for r in order if top and order[r] >= top[-1]]
    ranked = sorted(tied, key=lambda r: (-order[r], -(meta.get(r) or {}).get("last_active_at", 0), r))[:limit]
    details = {
        row[0]: dict(zip(SessionRows.NAMES, row))
        for row in _chunked(conn, f"SELECT {SessionRows.COLS} FROM sessions WHERE id IN ({{}})", ranked)
    }
    mass = table.mass
    evidence = {  # root -> its messages holding a unit, the weightiest first
        root: [
            mid
            for _, mid in sorted(((mass[m], m) for m in _root_mids(root, table.per_unit)), key=lambda e: (-e[0], -e[1]))
        ]
        for root in ranked
    }
    firsts = [ids[0] for ids in evidence.values() if ids]
    contents = dict(_chunked(conn, "SELECT id, content FROM messages WHERE id IN ({})", firsts))
    words = ask.plan.highlight_words()
    out: list[SessionHit] = []
    for root in ranked:
        row = details.get(root) or {}
        ids = evidence[root]
        out.append(
            SessionHit(
                session_id=root,
                title=row.get("title"),
                source=row.get("source") or "unknown",
                started_at=row.get("started_at") or 0.0,
                last_active_at=row.get("last_active_at") or 0.0,
                message_count=table.lengths.get(root) or int(row.get("message_count") or 0),
                score=round(table.scores[root], 4),
                snippet=make_snippet(contents.get(ids[0]) or "", words)
                if ids and ids[0] in contents
                else (row.get("preview") or ""),
                matched_message_ids=ids[:200],
                matched=table.matched[root],
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
    weights: RankWeights,
) -> None:
    """For the leading sessions (root -> its messages holding a unit), let `best` look at `passage`
    consecutive messages instead of one: a question and its answer are often in a turn and the
    reply to it. A passage starting at a message also gains that message's `bonus` (meaning), and
    counts 1 + `gain` times when the question asks for a `kind` of answer that a message of
    it, or the `before` messages ahead of it, holds, plus `gain` times the question's
    words in the weightiest such message (looked up around the `heavy` messages' passages:
    gateway/recall/answers.py)."""
    passage, before, gain = weights.passage, weights.before, weights.gain
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
        passages = {q for root, mids in starts.items() for q in _passages(orders[root], mids, before, passage)}
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
            for q in order[p : p + passage]:
                found.update(message_units.get(q, {}))
            value = sum(found.values())
            # the words of the messages around the passage that hold the asked-for kind (answers.py)
            kind_mass = [
                sum(message_units.get(q, {}).values()) for q in order[max(0, p - before) : p + passage] if q in holding
            ]
            if kind_mass:
                value = (1.0 + gain) * value + gain * max(kind_mass)
            window_best = max(window_best, value + bonus.get(mid, 0.0))
        scores[root] += weights.co_weight * (window_best - single)


def _passages(order: list[int], starts: list[int], before: int, passage: int) -> set[int]:
    """The messages of the `passage`-long passages that start at `starts` (in `order`, a session's
    visible messages), each with the `before` messages ahead of it."""
    position = {mid: i for i, mid in enumerate(order)}
    return {
        q for mid in starts if (p := position.get(mid)) is not None for q in order[max(0, p - before) : p + passage]
    }


def _chunked(conn: Conn, sql: str, values: list) -> list[tuple]:
    out: list[tuple] = []
    for start in range(0, len(values), 500):
        chunk = values[start : start + 500]
        out.extend(conn.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall())
    return out


def find_sessions(
    db: StorageFace,
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
    weights: RankWeights = DEFAULT_WEIGHTS,
) -> list[SessionHit]:
    """The sessions (lineage roots) that best answer `query`, best first, at most `limit` (<= 5).

    `person_id` without `see_all`: only lineages the person took part in. `exclude_session_ids`:
    pass the current session's lineage (`db.get_lineage(current)`); their roots are left out too.
    `embedder` (gateway.embeddings.Embedder; default: the one installed by `semantic.use`, None for
    words only) adds the semantic stage when its vectors are stored. `now` is the asking time
    relative dates count back from ("yesterday", 上周; default: the clock). `weights`: the
    ranking's weights and budgets (gateway/recall/weights.py).
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
            weights=weights,
        )
    )


def recent_sessions(
    db: StorageFace,
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
