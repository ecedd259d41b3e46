"""Warm copies of active conversations, bounded by size, so a turn need not re-read its history.

Separate from the agent cache on purpose: an agent is bounded by count (it holds a prompt and
clients), a conversation by its text. Many more chats can stay warm than agents.

The copy follows the database: the runner appends each message right after it is committed, and
everything that rewrites a session's history (/undo, /retry, compression, deletion) calls `drop`.
A miss simply reads the database again. Each copy has an owner (the chat lane that loaded it):
when two chats are in the same session (someone resumed it elsewhere), their turns could
interleave, so an append or a read by another owner drops the copy instead of trusting it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MESSAGE_OVERHEAD = 200  # bytes of bookkeeping per message, roughly (dict, strings, list slot)
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def _size(message: dict[str, Any]) -> int:
    content = message.get("content")
    size = MESSAGE_OVERHEAD + (len(content) if isinstance(content, str) else 0)
    if message.get("tool_calls"):
        size += len(str(message["tool_calls"]))
    return size


class ConversationCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[list[dict[str, Any]], int, str]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._items

    def get(self, session_id: str, owner: str) -> list[dict[str, Any]] | None:
        """A copy of the cached conversation (the caller may extend it freely), or None."""
        item = self._items.get(session_id)
        if item is not None and item[2] != owner:
            self.drop(session_id)
            item = None
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(session_id)
        return list(item[0])

    def put(self, session_id: str, owner: str, messages: list[dict[str, Any]]) -> None:
        self.drop(session_id)
        size = sum(_size(m) for m in messages)
        if size > self.max_bytes:
            return
        self._items[session_id] = (list(messages), size, owner)
        self.bytes += size
        self._trim()

    def append(self, session_id: str, owner: str, message: dict[str, Any]) -> None:
        """Add a committed message, if the conversation is cached (else the next miss reads it)."""
        item = self._items.get(session_id)
        if item is None:
            return
        messages, size, holder = item
        if holder != owner:
            self.drop(session_id)
            return
        messages.append(message)
        grown = _size(message)
        self._items[session_id] = (messages, size + grown, owner)
        self.bytes += grown
        self._items.move_to_end(session_id)
        self._trim()

    def drop_owner(self, owner: str) -> None:
        """Drop every copy kept for this chat (another replica may have written to it since)."""
        for session_id in [sid for sid, item in self._items.items() if item[2] == owner]:
            self.drop(session_id)

    def drop(self, session_id: str) -> None:
        item = self._items.pop(session_id, None)
        if item is not None:
            self.bytes -= item[1]

    def _trim(self) -> None:
        while self.bytes > self.max_bytes and self._items:
            _, (_, size, _) = self._items.popitem(last=False)
            self.bytes -= size
