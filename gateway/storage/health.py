"""Whether storage can commit, and waiting until it can again (DESIGN §11: faults are ridden out).

A commit can fail for a while and then work again: SQLite on a full disk ("database or disk is
full") or a failing device ("disk I/O error"), Postgres restarted or unreachable. None of these is a
reason to exit or to drop work: whoever met the fault marks it (`failed`), `/readyz` turns 503 with
the reason, and work that needs a commit waits for `recovered()`. One prober per process tries a
real commit with backoff (0.5 s doubling to 15 s) instead of every waiting chat hammering the
database; its first success wakes every waiter.

The probe is a real write (`StorageFace.probe_commit`: a row rewritten in place), because reads
succeed on a full disk: the issue's measurement had `/readyz` at 200 throughout a full-disk spell.
It runs on a thread of its own, never the event loop's worker threads: while Postgres is down
those fill with work waiting up to 30 s each for a connection, and a probe queued behind them
did not even try until one of them gave up (tests/storage/test_health.py). Its thread runs with
an empty context, so the probe is never fenced by a chat's job (gateway.storage.fence).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

PROBE_FIRST_SECONDS = 0.5
PROBE_CAP_SECONDS = 15.0


def storage_fault(exc: BaseException) -> bool:
    """Is `exc` the storage failing for now (full disk, I/O error, database unreachable), as
    opposed to a bug or a refused statement? Such a fault is waited out, never answered as an error."""
    if isinstance(exc, sqlite3.OperationalError):
        return True
    if isinstance(exc, OSError):  # the mirrors' files or the media store on the same full disk
        return True
    # Postgres unreachable or restarting, named by class so this floor imports no driver
    return any(
        cls.__name__ in ("OperationalError", "PoolTimeout")
        and cls.__module__.split(".")[0] in ("psycopg", "psycopg_pool")
        for cls in type(exc).__mro__
    )


class StorageHealth:
    """The process's view of whether the database commits (see the module doc)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.failing_since: float | None = None  # wall clock of the first failure of this spell
        self.error = ""
        self._prober: asyncio.Task | None = None
        self._probe_thread = ThreadPoolExecutor(1, thread_name_prefix="storage-probe")  # started at first use
        self._recovered = asyncio.Event()
        self._recovered.set()

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failed(self, exc: BaseException) -> None:
        """A commit failed on a storage fault: readiness says so until a commit succeeds again."""
        self.error = " ".join(str(exc).split())[:300] or type(exc).__name__
        if self.failing_since is None:
            self.failing_since = time.time()
            self._recovered.clear()
            log.warning("storage cannot commit (%s); work waits and is retried until it can", self.error)
        if self._prober is None or self._prober.done():  # even with nobody waiting: /readyz must recover
            self._prober = asyncio.get_running_loop().create_task(self._probe(), name="storage probe")

    async def committed(self, write: Callable[[], Awaitable[T]]) -> T:
        """`write()`'s result, run again after each storage fault once storage commits again: for a
        write that must not be given up (a turn's message while its reply is on screen, the record
        of a part already sent), or a read a chat's next message waits behind (its language). A fault reported for a commit that did happen (a connection lost
        during COMMIT) makes the retry write it twice; the inbox and outbox marks it carries are
        idempotent, a conversation message would be doubled."""
        while True:
            try:
                return await write()
            except Exception as exc:
                if not storage_fault(exc):
                    raise
                self.failed(exc)
            await self.recovered()

    async def recovered(self) -> None:
        """Return once a commit succeeds (at once when nothing failed)."""
        await self._recovered.wait()

    def report(self) -> dict[str, Any] | None:
        """For /readyz: None while commits work, else why not and since when."""
        if self.failing_since is None:
            return None
        seconds = max(0.0, time.time() - self.failing_since)
        return {"ready": False, "detail": f"cannot commit for {seconds:.0f}s: {self.error}"}

    async def _probe(self) -> None:
        delay = PROBE_FIRST_SECONDS
        while True:
            await asyncio.sleep(delay)
            delay = min(PROBE_CAP_SECONDS, delay * 2)
            try:
                await asyncio.get_running_loop().run_in_executor(self._probe_thread, self.db.probe_commit)
            except Exception as exc:
                if not storage_fault(exc):
                    log.exception("storage probe failed")
                self.error = " ".join(str(exc).split())[:300] or type(exc).__name__
                continue
            spell = time.time() - (self.failing_since or time.time())
            log.info("storage commits again after %.0fs; taking up what waited", spell)
            self.failing_since, self.error = None, ""
            self._recovered.set()
            return
