"""The errors that cross modules, as one `ChinwagError` hierarchy.

A caller two floors up (a chat command, the CLI) catches these by meaning, not by where they were
raised; each also keeps the builtin base it had before (`KeyError`, `ValueError`, `RuntimeError`),
so code that caught those still does. The old import locations (gateway.db, gateway.storage.schema)
re-export them from here. This module imports nothing of chinwag: every floor may use it.
"""

from __future__ import annotations

__all__ = ["ChinwagError", "UnknownSession", "TitleTaken", "SchemaTooNew", "ImportRecordError", "LeaseLost"]


class ChinwagError(Exception):
    """Base of every error chinwag raises on purpose across a module boundary."""


class UnknownSession(ChinwagError, KeyError):
    """No session has this id (it never existed, or it was deleted)."""

    def __str__(self) -> str:
        return f"no session with id {self.args[0]!r}"


class TitleTaken(ChinwagError, ValueError):
    """Another session already has this title in some letter case. The database's unique index is
    the one rule; this error is its only signal.

    `holder` is the id of the session that has it (for callers that may name it: the operator's CLI,
    or a person who may see that session; see gateway.sessions.access.title_refusal). `record` is the
    1-based record of an import that hit it.
    """

    def __init__(self, title: str | None, holder: str | None = None, record: int | None = None) -> None:
        super().__init__(title, holder, record)
        self.title, self.holder, self.record = title, holder, record

    def __str__(self) -> str:
        where = f"record {self.record}: " if self.record is not None else ""
        return f"{where}title {self.title!r} is already used by session {self.holder or '?'}"


class SchemaTooNew(ChinwagError, RuntimeError):
    """The database was written by a newer chinwag."""


class ImportRecordError(ChinwagError, ValueError):
    """One record of an import is malformed or cannot be written; nothing was imported.
    `record` is its 1-based position in the input."""

    def __init__(self, record: int, problem: str) -> None:
        super().__init__(f"record {record}: {problem}")
        self.record, self.problem = record, problem


class LeaseLost(ChinwagError, RuntimeError):
    """This replica no longer holds the chat's lease (another took it over): the commit that
    checked it was refused and rolled back, and the turn is dropped; the holder runs it."""

    def __init__(self, chat_key: str) -> None:
        super().__init__(f"the lease of chat {chat_key} is held by another replica")
        self.chat_key = chat_key
