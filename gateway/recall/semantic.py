"""Recall by meaning: the sessions nearest the question join the first stage (`nearest`, used by
rank.py's `_gather_meaning` and `_join_meaning`), and the lexical leaders are re-ranked by meaning
(no SDK here; vectors come from an `Embedder`, see gateway/embeddings.py, and are stored by
gateway/storage/vectors.py).

The re-ranking alone never reached a paraphrase the words had not found (LoCoMo-Plus dev, the
asker's sessions: the cue in the top 5 for 0.045 of triggers, best-window cosine alone 0.139).

Why the re-ranking below was first the only stage: on the dev data the session that answers is in
the lexical top 10 for >90 % of questions (97 % on LoCoMo), and most misses there share at most
one content word with their evidence (paraphrase: "met his future wife" / "a woman at the café").
So the lexical ranking keeps choosing the candidates, and the question's vector is compared with
each leader's windows; a session's similarity is its best window's cosine. The two are fused per
query, each scaled to its own range over the leaders (lexical score / the best lexical score,
similarity min-max over the leaders), so no constant depends on how large BM25 scores or cosines
run for one model or one store:

    fused(s) = lexical(s) / max lexical + semantic_weight * (sim(s) - min sim) / (max sim - min sim)

and the lexical leader keeps the first place unless the fused winner's similarity is more than
`overrule_margin` (0.1 cosine) above its own. Why: measured on the dev data with
multilingual-e5-small (bench/recall.py), ordering the top 10 by similarity alone puts the answer
first for 0.50 of LoCoMo questions (0.53 held) against 0.74 (0.76) for the words, and every
fusion tried (min-max, z-score, raw cosine gaps, reciprocal ranks, a product, gated to near
ties; windows of 1, 4 and 8 messages) lowered any@1 on the tune half; with the first place kept,
the fused order of the rest raises MRR (0.800 -> 0.812 tune, 0.823 -> 0.828 held) and any@5
(0.91 -> 0.94 tune): meaning is good at bringing the answer into the five sessions recapped, not
at overruling the best lexical match. `semantic_weight` 0.3: MRR is flat between 0.3 and 0.5 and
any@5 falls past 0.5 (held); `leaders` 10: 20 changes nothing measurable and compares twice as many.
`overrule_margin` 0.1: with e5-small no dev question has a fused winner that far above the lexical
leader (margins 0.02-0.06 each moved one or two questions, either way); a model whose cosines
spread wider, or a paraphrase with no competing meaning, still lets meaning win outright.

Meaning also counts inside the lexical stage, where words and meaning meet: a passage's evidence
in `best(s)` (gateway/recall/rank.py) gains `passage_weight` x the best passage mass of the leaders x
the similarity of the window holding it, min-max scaled over those windows (`passage_bonus`; the
windows of each leader's `passage_messages` weightiest evidence messages, one key seek each, so a
long session costs no more than a short one). So of two sessions that both say the question's
words, the one whose passage around them means what the question asks moves up, and a session
with no word of the question gains nothing. Measured on LoCoMo raw questions (pooled, with the
fusion above): tune any@1 0.745 -> 0.745, MRR 0.817 -> 0.817, any@5 0.935 -> 0.939; held any@1
0.764 -> 0.771, MRR 0.832 -> 0.836; MemoryBank-CN held scoped any@1 0.786 -> 0.821, tune unchanged.
`passage_weight` 0.1 is the same on LoCoMo (MemoryBank-CN held scoped stays 0.786), 0.2 and 0.3
cost tune any@1 (0.740, 0.732); `passage_messages` 4 costs a tune question, 16 is the same as 8
(held 0.769).

A session's similarity stays its single best window. The mean of its best k windows (a session
that means the question in several places) measured lower: LoCoMo raw pooled MRR tune 0.817 ->
0.813 / 0.812 / 0.811 (k = 2 / 3 / 5), held 0.836 -> 0.834 / 0.836 / 0.838, any@1 unchanged; a
mix of the best and the mean (0.6-0.8 of the best, k 5 or 8) moved tune MRR by at most +0.002
(half a question) with held unchanged, but the same mix with k = 3 lost on both halves (0.815,
0.834): no signal beyond noise, and two fitted constants.

The comparisons are numpy's einsum over the int8 rows, not a matrix product: `@` hands the work
to BLAS's threads, which spin against the daemon's own on 2 busy cores (5,000 windows at load 8:
64 ms with `@` and linalg.norm, 7 ms with einsum; bench/recall.py --cost).

When the lexical stage finds nothing (every word unknown to the store), the newest windows are
compared alone (`vector_scan` of them). The numbers named here are fields of
gateway/recall/weights.py's `RankWeights`.

The query vector is computed before the read transaction; when the embedder fails, recall is
lexical (logged once per failure), never an error.
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
from dataclasses import dataclass
from operator import mul
from typing import Any, Callable, Iterable, Mapping, Sequence

from gateway.recall.weights import DEFAULT_WEIGHTS, RankWeights
from gateway.storage import vectors as stored_vectors
from gateway.storage.conn import Conn

log = logging.getLogger(__name__)


_np: Any
try:  # optional: numpy makes the comparison ~50x faster; pure Python is the fallback
    _np = importlib.import_module("numpy")  # (by name: the type check must not depend on an extra)
except ImportError:  # pragma: no cover - depends on the environment
    _np = None


@dataclass(frozen=True)
class QueryVector:
    model: str
    values: tuple[float, ...]  # L2-normalised


DEFAULT: Any = object()  # find_sessions(embedder=DEFAULT): the embedder installed by use()
_default: Any = None
_default_lock = threading.Lock()


def use(embedder: Any) -> Any:
    """Make `embedder` (or None: lexical only) the one recall uses when a caller passes none.
    Returns the previous one. The daemon and the CLI call this once, from the configuration."""
    global _default
    with _default_lock:
        previous, _default = _default, embedder
    return previous


def current() -> Any:
    return _default


def embed_query(embedder: Any, text: str) -> QueryVector | None:
    """The query's vector, or None when there is no embedder or it failed."""
    if embedder is None or not text.strip():
        return None
    try:
        vector = embedder.embed([text], "query")[0]
    except Exception as exc:  # endpoint down, bad reply, missing model: lexical recall still answers
        log.warning("recall: embedding the query failed, ranking by words only: %s", exc)
        return None
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return QueryVector(str(embedder.model), tuple(x / norm for x in vector))


def best_similarity(query: QueryVector, blobs: Sequence[bytes]) -> float:
    """The largest cosine between the query and any of the int8 window vectors."""
    dim = len(query.values)
    usable = [b for b in blobs if len(b) == dim]  # a window of another dimensionality cannot compare
    return max(_cosines(query, usable)) if usable else 0.0


def similarities(conn: Conn, query: QueryVector, members: Mapping[str, Iterable[str]]) -> dict[str, float]:
    """root -> best window similarity over the sessions of its lineage (`members`); roots without
    any stored window are left out (not yet embedded: they keep their lexical place)."""
    all_ids = [sid for ids in members.values() for sid in ids]
    found = stored_vectors.session_vectors(conn, query.model, all_ids)
    out: dict[str, float] = {}
    for root, ids in members.items():
        blobs = [b for sid in ids for b in found.get(sid, ())]
        if blobs:
            out[root] = best_similarity(query, blobs)
    return out


def passage_bonus(
    conn: Conn,
    query: QueryVector,
    messages: Mapping[int, str],
    scale: float,
    weights: RankWeights = DEFAULT_WEIGHTS,
) -> dict[int, float]:
    """message id -> what its passage gains for meaning: `passage_weight` * `scale` * the similarity
    of the window holding the message, min-max scaled over the windows of the `messages` (message
    id -> its session). A message in no stored window gains nothing. Each window is found by one
    seek on the table's key (session, first message): a long session's other windows are not read."""
    if not messages or scale <= 0:
        return {}
    window_of: dict[int, tuple[str, int]] = {}
    found: dict[tuple[str, int], bytes] = {}
    for mid, sid in messages.items():
        row = conn.execute(
            "SELECT first_id, last_id, model, vector FROM message_vectors "
            "WHERE session_id = ? AND first_id <= ? ORDER BY first_id DESC LIMIT 1",
            (sid, mid),
        ).fetchone()
        if row is not None and row[1] >= mid and row[2] == query.model and len(row[3]) == len(query.values):
            window_of[mid] = (sid, row[0])
            found[(sid, row[0])] = row[3]
    if len(found) < 2:
        return {}
    keys = list(found)
    sims = dict(zip(keys, _cosines(query, [found[k] for k in keys])))
    low, high = min(sims.values()), max(sims.values())
    if high - low <= 1e-9:
        return {}
    weight = weights.passage_weight
    return {mid: weight * scale * (sims[key] - low) / (high - low) for mid, key in window_of.items()}


def _cosines(query: QueryVector, blobs: Sequence[bytes]) -> list[float]:
    """The cosine between the query and each int8 vector (all of the query's dimensionality)."""
    dim = len(query.values)
    if _np is not None:  # einsum, not `@`: BLAS's threads spin against a busy daemon's (module docstring)
        matrix = _np.frombuffer(b"".join(blobs), dtype=_np.int8).reshape(len(blobs), dim).astype(_np.int16)
        norms = _np.sqrt(_np.einsum("ij,ij->i", matrix, matrix, dtype=_np.int32), dtype=_np.float32)
        norms[norms == 0] = 1.0
        dots = _np.einsum("ij,j->i", matrix, _np.asarray(query.values, dtype=_np.float32), dtype=_np.float32)
        return (dots / norms).tolist()
    out = []
    for blob in blobs:
        v = stored_vectors.unpack(blob)
        norm = math.sqrt(sum(map(mul, v, v))) or 1.0
        out.append(sum(map(mul, query.values, v)) / norm)
    return out


def fuse(lexical: Mapping[str, float], semantic: Mapping[str, float], weights: RankWeights) -> dict[str, float]:
    """Fused scores of the leaders (see the module docstring); the lexical leader (ties: the
    smallest id, as the leaders are taken) stays first unless meaning overrules it by
    `overrule_margin`. A leader with no vectors gets the
    leaders' lowest similarity: it is neither helped nor sunk by not being embedded yet."""
    if not lexical:
        return {}
    top = max(lexical.values()) or 1.0
    sims = [semantic[r] for r in lexical if r in semantic]
    if not sims:
        return dict(lexical)
    low, high = min(sims), max(sims)
    spread = high - low
    out: dict[str, float] = {}
    for root, score in lexical.items():
        sim = semantic.get(root, low)
        scaled = (sim - low) / spread if spread > 1e-9 else 0.0
        out[root] = score / top + weights.semantic_weight * scaled
    first = min(lexical, key=lambda r: (-lexical[r], r))
    winner = max(out, key=lambda r: (out[r], -lexical[r]))
    overrules = (
        winner in semantic and first in semantic and semantic[winner] - semantic[first] > weights.overrule_margin
    )
    if not overrules:  # the words choose the first session better than meaning does
        out[first] = max(out.values()) + 1.0
    return out


def nearest(
    conn: Conn, query: QueryVector, sessions: Iterable[str] | None, limit: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Over the windows of `sessions` (None: the newest `limit` windows of the store), exact int8 dot
    products, no index (bench/recall.py --cost): session -> its best window's similarity, and
    session -> its margin: how far that best window stands out of the pool's windows, in their
    standard deviations, less what the best of as many windows drawn from the pool would reach by
    chance (sqrt(2 ln n), the expected maximum of n normal draws). Without that, a long session wins
    on its many windows: on LoCoMo-Plus dev (e5-small, the asker's sessions) the cue's one window is
    in the top 5 for 0.139 of triggers by best cosine, 0.264 by this margin."""
    if sessions is None:
        rows = stored_vectors.newest_vectors(conn, query.model, limit)
    else:
        wanted = list(sessions)
        found = stored_vectors.session_vectors(conn, query.model, wanted) if wanted else {}
        rows = [(sid, blob) for sid, blobs in found.items() for blob in blobs]
    dim = len(query.values)
    usable = [(sid, blob) for sid, blob in rows if len(blob) == dim]
    sims = _cosines(query, [blob for _, blob in usable]) if usable else []
    best: dict[str, float] = {}
    count: dict[str, int] = {}
    for (sid, _), sim in zip(usable, sims):
        count[sid] = count.get(sid, 0) + 1
        if sim > best.get(sid, -2.0):
            best[sid] = sim
    if len(sims) < 2:
        return best, dict.fromkeys(best, 0.0)
    mean = sum(sims) / len(sims)
    spread = math.sqrt(sum((v - mean) ** 2 for v in sims) / len(sims)) or 1.0
    margin = {sid: (sim - mean) / spread - math.sqrt(2 * math.log(count[sid])) for sid, sim in best.items()}
    return best, margin


def interleave(
    ranked: list[str], entrants: Iterable[str], beats: Callable[[str, str], bool], overrules: Callable[[str], bool]
) -> list[str]:
    """`ranked` (the words' order, fused with meaning) with each of the `entrants` (none of them in
    `ranked`), in the order given, moved up from below past every session it `beats`, stopping at the first it does not (never
    down). The first place goes to an entrant only when it `overrules` the words' first (the rule of
    `fuse`). Why from below: placed above the first session it beats counted from the top, an
    entrant also jumped the stronger sessions between (LoCoMo dev MRR pooled 0.8321 -> 0.8329,
    scoped 0.8345 -> 0.8351; LoCoMo-Plus dev scoped any@5 0.234 -> 0.209, pooled 0.109 -> 0.119)."""
    out = list(ranked)
    for key in entrants:
        top = 0 if not out or overrules(key) else 1
        to = len(out)  # up from below, past each session it beats: the words' order above it stands
        while to > top and beats(key, out[to - 1]):
            to -= 1
        out.insert(to, key)
    return out


def scan_newest(conn: Conn, query: QueryVector, limit: int) -> dict[str, float]:
    """session -> best similarity over the newest `limit` windows (the vector-only stage)."""
    return nearest(conn, query, None, limit)[0]
