"""Recall's second stage: re-ranking the lexical leaders by meaning (no SDK here; vectors come from
an `Embedder`, see gateway/embeddings.py, and are stored by gateway/storage/vectors.py).

Why a re-ranking stage and not a vector search: on the dev data the session that answers is in
the lexical top 10 for >90 % of questions (97 % on LoCoMo), and most misses there share at most
one content word with their evidence (paraphrase: "met his future wife" / "a woman at the café").
So the lexical ranking keeps choosing the candidates, and the question's vector is compared with
each leader's windows; a session's similarity is its best window's cosine. The two are fused per
query, each scaled to its own range over the leaders (lexical score / the best lexical score,
similarity min-max over the leaders), so no constant depends on how large BM25 scores or cosines
run for one model or one store:

    fused(s) = lexical(s) / max lexical + SEMANTIC_WEIGHT * (sim(s) - min sim) / (max sim - min sim)

and the lexical leader keeps the first place unless the fused winner's similarity is more than
OVERRULE_MARGIN (0.1 cosine) above its own. Why: measured on the dev data with
multilingual-e5-small (bench/recall.py), ordering the top 10 by similarity alone puts the answer
first for 0.50 of LoCoMo questions (0.53 held) against 0.74 (0.76) for the words, and every
fusion tried (min-max, z-score, raw cosine gaps, reciprocal ranks, a product, gated to near
ties; windows of 1, 4 and 8 messages) lowered any@1 on the tune half; with the first place kept,
the fused order of the rest raises MRR (0.800 -> 0.812 tune, 0.823 -> 0.828 held) and any@5
(0.91 -> 0.94 tune): meaning is good at bringing the answer into the five sessions recapped, not
at overruling the best lexical match. SEMANTIC_WEIGHT 0.3: MRR is flat between 0.3 and 0.5 and
any@5 falls past 0.5 (held); LEADERS 10: 20 changes nothing measurable and compares twice as many.
OVERRULE_MARGIN 0.1: with e5-small no dev question has a fused winner that far above the lexical
leader (margins 0.02-0.06 each moved one or two questions, either way); a model whose cosines
spread wider, or a paraphrase with no competing meaning, still lets meaning win outright.

Meaning also counts inside the lexical stage, where words and meaning meet: a passage's evidence
in `best(s)` (gateway/recall/rank.py) gains PASSAGE_WEIGHT x the best passage mass of the leaders x
the window's similarity, min-max scaled over the windows of the leading sessions
(`passage_bonus`). So of two sessions that both say the question's words, the one whose passage
around them means what the question asks moves up, and a session with no word of the question
gains nothing. Measured on LoCoMo raw questions (pooled, with the fusion above): PASSAGE_WEIGHT
0.15 keeps tune any@1 at 0.745 (MRR 0.817 -> 0.817, any@5 0.935 -> 0.939) and raises held any@1
0.764 -> 0.769, MRR 0.832 -> 0.835; 0.05 / 0.1 / 0.2 give the same within a question or two, 0.3
drops tune any@1 to 0.736 and 0.6 to 0.732. MemoryBank-CN unchanged at 0.05-0.3.

When the lexical stage finds nothing (every word unknown to the store), the newest windows are
compared alone (VECTOR_SCAN of them).

The query vector is computed before the read transaction; when the embedder fails, recall is
lexical (logged once per failure), never an error.
"""

from __future__ import annotations

import importlib
import logging
import math
import sqlite3
import threading
from dataclasses import dataclass
from operator import mul
from typing import Any, Iterable, Mapping, Sequence

from gateway.storage import vectors as stored_vectors

log = logging.getLogger(__name__)

LEADERS = 10  # lexical leaders re-ranked by similarity (the answer is in the lexical top 10 for >90 %)
SEMANTIC_WEIGHT = 0.3  # dev data, e5-small: MRR flat over 0.3-0.5, any@5 lower past 0.5 (module docstring)
OVERRULE_MARGIN = 0.1  # cosine lead that lets meaning take the first place from the words (docstring)
VECTOR_SCAN = 5000  # newest windows compared when the lexical stage finds nothing
PASSAGE_WEIGHT = 0.15  # a passage's meaning against its words, inside best(s) (docstring: flat over 0.05-0.2)

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


def similarities(
    conn: sqlite3.Connection, query: QueryVector, members: Mapping[str, Iterable[str]]
) -> dict[str, float]:
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
    conn: sqlite3.Connection, query: QueryVector, messages: Mapping[int, str], scale: float
) -> dict[int, float]:
    """message id -> what its passage gains for meaning: PASSAGE_WEIGHT * `scale` * the similarity
    of the window holding the message, min-max scaled over the windows of the messages' sessions
    (`messages`: message id -> its session). A message in no stored window gains nothing."""
    if not messages or scale <= 0:
        return {}
    sessions = sorted(set(messages.values()))
    spans: dict[str, list[tuple[int, int, bytes]]] = {}
    for start in range(0, len(sessions), 500):
        chunk = sessions[start : start + 500]
        # `+model`: off the (model, last_id) index, as in storage/vectors.session_vectors_sql
        sql = (
            "SELECT session_id, first_id, last_id, vector FROM message_vectors "
            f"WHERE +model = ? AND session_id IN ({','.join('?' * len(chunk))})"
        )
        for sid, first, last, blob in conn.execute(sql, (query.model, *chunk)):
            if len(blob) == len(query.values):
                spans.setdefault(sid, []).append((int(first), int(last), blob))
    rows = [(sid, first, last, blob) for sid, windows in spans.items() for first, last, blob in windows]
    if not rows:
        return {}
    sims = _cosines(query, [blob for *_, blob in rows])
    low, high = min(sims), max(sims)
    if high - low <= 1e-9:
        return {}
    by_session: dict[str, list[tuple[int, int, float]]] = {}
    for (sid, first, last, _), sim in zip(rows, sims):
        by_session.setdefault(sid, []).append((first, last, (sim - low) / (high - low)))
    out: dict[int, float] = {}
    for mid, sid in messages.items():
        for first, last, scaled in by_session.get(sid, ()):
            if first <= mid <= last:
                out[mid] = PASSAGE_WEIGHT * scale * scaled
                break
    return out


def _cosines(query: QueryVector, blobs: Sequence[bytes]) -> list[float]:
    """The cosine between the query and each int8 vector (all of the query's dimensionality)."""
    dim = len(query.values)
    if _np is not None:
        matrix = _np.frombuffer(b"".join(blobs), dtype=_np.int8).reshape(len(blobs), dim).astype(_np.float32)
        norms = _np.linalg.norm(matrix, axis=1)
        norms[norms == 0] = 1.0
        return [float(x) for x in (matrix @ _np.asarray(query.values, dtype=_np.float32)) / norms]
    out = []
    for blob in blobs:
        v = stored_vectors.unpack(blob)
        norm = math.sqrt(sum(map(mul, v, v))) or 1.0
        out.append(sum(map(mul, query.values, v)) / norm)
    return out


def fuse(lexical: Mapping[str, float], semantic: Mapping[str, float]) -> dict[str, float]:
    """Fused scores of the leaders (see the module docstring); the lexical leader (ties: the
    smallest id, as the leaders are taken) stays first unless meaning overrules it by
    OVERRULE_MARGIN. A leader with no vectors gets the
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
        out[root] = score / top + SEMANTIC_WEIGHT * scaled
    first = min(lexical, key=lambda r: (-lexical[r], r))
    winner = max(out, key=lambda r: (out[r], -lexical[r]))
    overrules = winner in semantic and first in semantic and semantic[winner] - semantic[first] > OVERRULE_MARGIN
    if not overrules:  # the words choose the first session better than meaning does
        out[first] = max(out.values()) + 1.0
    return out


def scan_newest(conn: sqlite3.Connection, query: QueryVector, limit: int = VECTOR_SCAN) -> dict[str, float]:
    """session -> best similarity over the newest `limit` windows (the vector-only stage)."""
    by_session: dict[str, list[bytes]] = {}
    for sid, blob in stored_vectors.newest_vectors(conn, query.model, limit):
        by_session.setdefault(sid, []).append(blob)
    return {sid: best_similarity(query, blobs) for sid, blobs in by_session.items()}
