"""Reading a query's matches for recall (gateway/recall/rank.py ranks them): each unit's newest
matches first, a `probe` of every unit, then a shared `hit_budget` given to the units that carry
weight, and the units not read to their end read again beside the anchor (the weightiest unit read
in full). Plain functions over a connection.

Why these budgets: every later stage of recall (session rows, roots, scoring, passages) is linear
in the matches read, so the rows read set the cost of a query on a large store (~10 us of CPU per
row all told, 1M synthetic messages). The old budgets (probe 250 for every unit, hit_budget 6000
shared by weight) read 7,000-11,500 rows for a long or a Chinese question: 50-120 ms of CPU. Now
the probes share `probe_budget` (a 19-unit question probed 4,750 rows before any budget was spent),
the weightiest word is read first, up to `cap`, and the rest of `hit_budget` (3000) is shared by
weight. Why the weightiest first: read to its end, a rare word is the anchor an old answer is found
beside; merely shrinking the shared budget (2,500 or 4,000) cost the planted answers of
`bench/recall.py --needles 1000000` a lot (any@1 0.675 before -> 0.39 / 0.57), while reading the
rare word first raised it (0.735, any@5 0.825 -> 0.845, MRR 0.735 -> 0.782). The reads beside the
anchor walk only the index (their rows are the anchor's, already read). Where every match fits the
budgets (the labelled dev and held data) nothing changes: all matches are read either way, and
`bench/recall.py --split dev` / `--split held` print the same figures to the last digit. The
budgets are fields of gateway/recall/weights.py's `RankWeights`."""

from __future__ import annotations

import math
from typing import Callable

from gateway.db import visible_sql
from gateway.recall.query import PrefixTerms, Unit, expand_prefixes
from gateway.recall.weights import RankWeights
from gateway.storage.conn import Conn, RecallMatch

VISIBLE_SQL = visible_sql("m")  # the one rule, in gateway.storage.schema


class Matches:
    """One FTS5 expression of a unit, read newest first, a page at a time."""

    def __init__(self, table: str, expr: str) -> None:
        self.table, self.expr = table, expr
        self.rows: list[RecallMatch] = []  # message id, session id, wanted, length
        self.done = False  # every match has been read
        self.beside_anchor = False  # matches of the unit in messages that hold the anchor unit

    def read(self, conn: Conn, roles: list[str], limit: int) -> None:
        if self.done or limit <= 0:
            return
        before_id = self.rows[-1][0] if self.rows else None
        found = conn.dialect.recall_matches(conn, self.table, self.expr, roles, before_id, limit)
        self.rows.extend(found)
        self.done = len(found) < limit

    def read_within(self, conn: Conn, whole: "Matches", limit: int) -> None:
        """Read this expression's matches among the messages `whole` (read to its end) holds,
        taking their rows from it: only the index is walked, no message row is looked up again
        (at 1M messages an anchor read of 2,000 rows joined to messages took 8 ms, alone 1-3 ms)."""
        known = {row[0]: row for row in whole.rows}
        ids = conn.dialect.matches_among(conn, self.expr, list(known), limit)
        self.rows.extend(known[mid] for mid in ids if mid in known)
        self.done = len(ids) < limit

    def estimate(self, newest_id: int) -> float:
        """How many messages match: counted when all were read, else extrapolated from how far back
        the ones read reach (matches assumed spread evenly over time; a count would cost as much
        as reading them all)."""
        n: float = len(self.rows)
        if self.rows and not self.done:
            reach = max(1, newest_id - self.rows[-1][0] + 1)
            n = n * max(1.0, newest_id / reach)
        return n


def session_idf(df: float, n_sessions: int) -> float:
    return math.log(1 + (n_sessions - df + 0.5) / (df + 0.5)) if df else 0.0


def read_units(
    conn: Conn,
    units: list[Unit],
    roles: list[str],
    cap: int,
    newest_id: int,
    n_sessions: int,
    weights: RankWeights,
) -> list[list[Matches]]:
    """Read each unit's newest matches: a `probe` of each first, then more for the units that carry
    weight. A unit found in most sessions adds next to nothing to any score (its idf is tiny), so a
    few hundred of its newest matches serve as well as thousands; a rarer unit reads up to `cap`.
    Over all units at most `hit_budget` matches are read beyond the probes, shared by weight."""
    # a database whose index answers a prefix itself (Postgres's GIN) has nothing to expand
    terms: Callable[[str], list[str] | None] = PrefixTerms(conn) if conn.dialect.expands_prefixes else (lambda p: None)
    readers: list[list[Matches]] = []
    for unit in units:
        sources = []
        if unit.word_expr:
            sources.append(Matches("messages_fts", expand_prefixes(unit.word_expr, terms)))
        if unit.ident_expr:
            sources.append(Matches("messages_ident", unit.ident_expr))
        readers.append(sources)
    n_sources = sum(len(sources) for sources in readers)
    probe = min(weights.probe, cap, max(weights.min_probe, weights.probe_budget // max(1, n_sources)))
    for sources in readers:
        for source in sources:
            source.read(conn, roles, probe)
    wanting: list[tuple[Matches, float]] = []  # sources with more to read, and their unit's weight
    unit_weights: dict[int, float] = {}  # unit index -> estimated weight (idf), from the first source read
    for i, (unit, sources) in enumerate(zip(units, readers)):
        for source in sources:
            if not source.rows:
                continue
            sessions = len({sid for _, sid, _, _ in source.rows})
            df = min(n_sessions, sessions * source.estimate(newest_id) / len(source.rows))
            weight = session_idf(df, n_sessions) * (weights.pair_weight if unit.pair else 1.0)
            unit_weights.setdefault(i, weight)
            if not source.done and len(source.rows) < cap:
                wanting.append((source, weight))
    budget = weights.hit_budget
    words = [(s, w) for s, w in wanting if s.table == "messages_fts"]
    if words:  # the weightiest word first, up to `cap`: read to its end it is the anchor an old
        # answer is found beside (see _read_beside_anchor); shared by weight, a rare word got only
        # part of a smaller budget and missed its end (module docstring)
        first = max(words, key=lambda sw: sw[1])[0]
        before = len(first.rows)
        first.read(conn, roles, min(budget, cap - before))
        budget -= len(first.rows) - before
        wanting = [(s, w) for s, w in wanting if not s.done and len(s.rows) < cap]
    while wanting and budget >= 1:
        grants = share(budget, [(cap - len(s.rows), w) for s, w in wanting])
        for (source, _), grant in zip(wanting, grants):
            before = len(source.rows)
            source.read(conn, roles, grant)
            budget -= len(source.rows) - before
        if not any(s.done for s, _ in wanting):  # every grant was used up
            break
        wanting = [(s, w) for s, w in wanting if not s.done and len(s.rows) < cap]  # share what is left
    _read_beside_anchor(conn, units, readers, roles, cap, unit_weights)
    return readers


def _read_beside_anchor(
    conn: Conn,
    units: list[Unit],
    readers: list[list[Matches]],
    roles: list[str],
    cap: int,
    weights: dict[int, float],
) -> None:
    """Where the units not read to their end occur together with the anchor, the weightiest unit
    that was read in full: an old message holding the rare word and the common ones of a question
    is the answer, though the common ones' newest matches never reach back to it. FTS5 answers
    "anchor AND unit" by walking the anchor's few matches, however common the unit."""
    anchors = [
        i
        for i, sources in enumerate(readers)
        if sources and sources[0].table == "messages_fts" and sources[0].done and sources[0].rows
    ]
    if not anchors:
        return
    anchor = max(anchors, key=lambda i: weights.get(i, 0.0))
    for i, sources in enumerate(readers):
        if i == anchor or not sources or all(s.done for s in sources) or not units[i].word_expr:
            continue
        beside = Matches("messages_fts", f"({readers[anchor][0].expr}) AND ({sources[0].expr})")
        beside.beside_anchor = True
        beside.read_within(conn, readers[anchor][0], cap)
        sources.append(beside)


def share(budget: int, needs: list[tuple[float, float]]) -> list[int]:
    """Split `budget` over (need, weight) pairs in proportion to weight, none getting more than
    its need (what one does not need goes to the others)."""
    give = [0.0] * len(needs)
    open_ = [i for i, (need, _) in enumerate(needs) if need > 0]
    left = float(budget)
    while open_ and left >= 1:
        mass = sum(needs[i][1] for i in open_)
        share = {i: left * (needs[i][1] / mass if mass > 0 else 1 / len(open_)) for i in open_}
        full = [i for i in open_ if needs[i][0] <= share[i]]
        if not full:
            for i in open_:
                give[i] = share[i]
            break
        for i in full:
            give[i] = needs[i][0]
            left -= needs[i][0]
        open_ = [i for i in open_ if i not in full]
    return [int(g) for g in give]


def unit_hits(
    sources: list[Matches], newest_id: int, sizes: dict[int, int]
) -> tuple[list[tuple[int, str]], float, int]:
    """(message id, session id) of the visible matches read, newest first, then those found beside
    the anchor unit; the number of index matches (estimated when not all were read); and how many
    of the hits come from the newest-first reading (the sample idf is estimated from)."""
    found: dict[int, str] = {}
    total = 0.0
    for source in sources:
        if source.beside_anchor:
            continue
        for mid, sid, wanted, size in source.rows:
            if wanted:
                found.setdefault(mid, sid)
                sizes[mid] = size or 1
        total = max(total, source.estimate(newest_id))
    sampled = len(found)
    for source in sources:
        if source.beside_anchor:
            for mid, sid, wanted, size in source.rows:
                if wanted and mid not in found:
                    found[mid] = sid
                    sizes[mid] = size or 1
    return list(found.items()), max(total, float(sampled)), sampled
