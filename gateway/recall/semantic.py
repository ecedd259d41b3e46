"""Recall's second stage: re-ranking the lexical leaders by meaning (no SDK here; vectors come from
an `Embedder`, see gateway/embeddings.py, and are stored by gateway/storage/vectors.py).

Why a re-ranking stage and not a vector search: on the dev data the session that answers is in
the lexical top 10 for >90 % of questions, and most misses there share at most one content word
with their evidence (paraphrase: "met his future wife" / "a woman at the café"). So the lexical
ranking keeps choosing the candidates, and the question's vector is compared with each leader's
windows; a session's similarity is its best window's cosine. The two are fused per query, each
scaled to its own range over the leaders (lexical score / the best lexical score, similarity
min-max over the leaders), so no constant depends on how large BM25 scores or cosines run for one
model or one store:

    fused(s) = lexical(s) / max lexical + SEMANTIC_WEIGHT * (sim(s) - min sim) / (max sim - min sim)

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
SEMANTIC_WEIGHT = 0.3  # LoCoMo tune split, e5-small: best all@5 and MRR among 0.1-0.5
VECTOR_SCAN = 5000  # newest windows compared when the lexical stage finds nothing

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
    if not blobs:
        return 0.0
    dim = len(query.values)
    usable = [b for b in blobs if len(b) == dim]  # a window of another dimensionality cannot compare
    if not usable:
        return 0.0
    if _np is not None:
        matrix = _np.frombuffer(b"".join(usable), dtype=_np.int8).reshape(len(usable), dim).astype(_np.float32)
        norms = _np.linalg.norm(matrix, axis=1)
        norms[norms == 0] = 1.0
        return float(((matrix @ _np.asarray(query.values, dtype=_np.float32)) / norms).max())
    best = -1.0
    q = query.values
    for blob in usable:
        v = stored_vectors.unpack(blob)
        norm = math.sqrt(sum(map(mul, v, v))) or 1.0
        best = max(best, sum(map(mul, q, v)) / norm)
    return best


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


def fuse(lexical: Mapping[str, float], semantic: Mapping[str, float]) -> dict[str, float]:
    """Fused scores of the leaders (see the module docstring). A leader with no vectors gets the
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
    return out


def scan_newest(conn: sqlite3.Connection, query: QueryVector, limit: int = VECTOR_SCAN) -> dict[str, float]:
    """session -> best similarity over the newest `limit` windows (the vector-only stage)."""
    by_session: dict[str, list[bytes]] = {}
    for sid, blob in stored_vectors.newest_vectors(conn, query.model, limit):
        by_session.setdefault(sid, []).append(blob)
    return {sid: best_similarity(query, blobs) for sid, blobs in by_session.items()}
