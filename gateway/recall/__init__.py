"""Recall: ranking whole sessions for a query. This face is what the rest of chinwag imports."""

from gateway.recall.lineage import allowed_sessions
from gateway.recall.rank import (
    HIDDEN_SOURCES,
    MAX_SESSIONS,
    SessionHit,
    cjk_pieces,
    find_sessions,
    plan_query,
    recent_sessions,
)
from gateway.recall.weights import RankWeights

__all__ = [
    "HIDDEN_SOURCES",
    "MAX_SESSIONS",
    "RankWeights",
    "SessionHit",
    "allowed_sessions",
    "cjk_pieces",
    "find_sessions",
    "plan_query",
    "recent_sessions",
]
