"""Typed commit events: what a write op reports to the commit listeners (the file mirrors) once
its transaction has committed.

Each op appends events to the list it is given; the writer hands a batch's events to the listeners
after the commit, in commit order. Only events someone consumes exist: the mirrors append a
message's line (`MessageAppended`), rewrite a transcript whose flags changed (`SessionRewritten`),
remove a deleted session's file (`SessionDeleted`) and patch sessions.json (`KeyChanged`,
`KeyDeleted`). Session-row changes (title, tokens, end) have no event: no file shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar, Union

from gateway.storage.conn import Conn


@dataclass(frozen=True, slots=True)
class MessageAppended:
    """A message row as stored: id, session_id, role, content, the MESSAGE_FIELDS, active, compacted."""

    row: dict[str, Any]

    @property
    def session_id(self) -> str:
        return self.row["session_id"]

    @property
    def message_id(self) -> int:
        return self.row["id"]


@dataclass(frozen=True, slots=True)
class SessionRewritten:
    """Message flags of a session changed (undo, retry, compaction, an import with hidden rows):
    its transcript is rebuilt from the database."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SessionDeleted:
    session_id: str


@dataclass(frozen=True, slots=True)
class KeyChanged:
    """A routing entry as stored (session_key, session_id, origin, created_at, updated_at, reason)."""

    entry: dict[str, Any]

    @property
    def session_key(self) -> str:
        return self.entry["session_key"]


@dataclass(frozen=True, slots=True)
class KeyDeleted:
    """Also sent for each key of a deleted session."""

    session_key: str


@dataclass(frozen=True, slots=True)
class IndexPending:
    """A message stored but not yet in the full-text indexes (gateway/storage/indexer.py). Seen
    only by the deferred indexer."""

    message_id: int


@dataclass(frozen=True, slots=True)
class Indexed:
    """The indexes now hold every message up to `upto`. Seen only by the deferred indexer."""

    upto: int


INDEXER_EVENTS = (IndexPending, Indexed)

CommitEvent = Union[MessageAppended, SessionRewritten, SessionDeleted, KeyChanged, KeyDeleted, IndexPending, Indexed]
Events = list[CommitEvent]

T = TypeVar("T")
# A write: runs inside the writer's transaction, reports what it changed in `events`.
WriteOp = Callable[[Conn, Events], T]
