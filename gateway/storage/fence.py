"""The fence of the job running now: every write made while a chat's job runs checks, in its own
transaction, that this replica still holds the chat (DESIGN §14; gateway/runtime/leases.py).

This is the one fence mechanism. A job (a turn, a command, a turn a crash cut short) writes
through many paths: the turn's appends and its reply's record, a reset the policy makes on lookup,
`/new`'s and `/resume`'s key moves, `/undo`, `/retry`, `/title`, compression, the token counts, a
tool's memory write. Rather than a guard argument on each of them (and a command that forgets it),
the runner sets the chat's guard once for the job (`fenced`), and for the few writes of a chat
outside one (a `/stop`'s drops and reply, a read-only command answered at once, a refusal for
the pending cap, a stopped turn's done mark); both backends' `write`/`awrite` bind it to the op they
are handed (`bind`): the guard runs first, in the op's transaction, once, and its LeaseLost rolls
the whole op back. Outside a chat (admission, claims, polls, the CLI) and on SQLite (no guard)
nothing changes.

The one write a job makes that is not fenced: the record of a reply already sent (`unfenced`).
Refusing it would not unsend the message; it would only make the chat's new holder send it again.

A context variable carries it, so it follows the job's awaits and the worker threads of
asyncio.to_thread (which copies the context), and a task the job starts inherits it.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")
Guard = Callable[[Any], None]  # run in a write's transaction; raises gateway.errors.LeaseLost

_current: ContextVar[Guard | None] = ContextVar("chinwag_fence", default=None)


@contextlib.contextmanager
def fenced(guard: Guard | None) -> Iterator[None]:
    """Every write inside (and in tasks started inside) runs `guard` first; None: no check."""
    token = _current.set(guard)
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def unfenced() -> Iterator[None]:
    """The writes inside are not checked (the record of a send that already happened)."""
    with fenced(None):
        yield


def bind(op: Callable[[Any, Any], T]) -> Callable[[Any, Any], T]:
    """`op` with the current guard run first in its transaction (`op` itself when there is none).
    Called where the write is submitted, in the caller's context."""
    guard = _current.get()
    if guard is None:
        return op

    def guarded(conn: Any, events: Any) -> T:
        guard(conn)
        return op(conn, events)

    return guarded
