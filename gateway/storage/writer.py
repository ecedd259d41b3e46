"""One writer thread that commits concurrent writes together (group commit).

Every write to the database is a function `op(conn, events)` submitted here. The thread takes
whatever is queued, runs the ops in one transaction (an op that raises is dropped and the rest
run again), commits once (one fsync for the whole batch), tells the commit listeners, and only
then resolves each op's future.
So an append returns only when it is durable, a failing op fails alone, and a hundred chats
appending at once cost one fsync instead of a hundred.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from concurrent.futures import Future
from typing import Any, Callable

log = logging.getLogger(__name__)

WriteOp = Callable[[sqlite3.Connection, list], Any]
CommitListener = Callable[[list], None]

_STOP = object()
MAX_BATCH = 256  # bounds how long one append waits behind others in its batch


class WriterClosed(RuntimeError):
    pass


class _LoopSlot:
    """Where the outcome of an asyncio caller's write goes. It quacks like the part of a
    concurrent Future the writer uses; outcomes are handed to the caller's event loop in one
    callback per batch instead of one thread-safe wake-up per write."""

    __slots__ = ("loop", "future", "outcome")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> None:
        self.loop, self.future, self.outcome = loop, future, None

    def set_running_or_notify_cancel(self) -> bool:
        return not self.future.cancelled()  # a cancel racing this is handled when settling

    def done(self) -> bool:
        return self.outcome is not None

    def set_result(self, result: Any) -> None:
        self.outcome = (result, None)

    def set_exception(self, exc: BaseException) -> None:
        self.outcome = (None, exc)


def _settle(slots: list[_LoopSlot]) -> None:
    for slot in slots:
        if not slot.future.done():
            result, exc = slot.outcome
            if exc is not None:
                slot.future.set_exception(exc)
            else:
                slot.future.set_result(result)


class GroupCommitWriter:
    def __init__(self, connect: Callable[[], sqlite3.Connection], name: str = "chinwag-db-writer"):
        self._connect = connect
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._listeners: list[CommitListener] = []
        self._closed = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self.batches = 0  # commits done (for stats/benchmarks)
        self.ops = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error:
            raise self._start_error

    def add_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def submit(self, op: WriteOp) -> Future:
        future: Future = Future()
        self._put(op, future)
        return future

    def submit_async(self, op: WriteOp) -> asyncio.Future:
        """Like submit, for a caller on an event loop: await the returned future."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._put(op, _LoopSlot(loop, future))
        return future

    def _put(self, op: WriteOp, outcome: "Future | _LoopSlot") -> None:
        with self._lock:
            if self._closed:
                raise WriterClosed("the database is closed")
            self._queue.put((op, outcome))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()

    # -- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._start_error = exc
            self._ready.set()
            return
        self._ready.set()
        stopping = False
        try:
            while not stopping:
                item = self._queue.get()
                if item is _STOP:
                    break
                batch = [item]
                while len(batch) < MAX_BATCH:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is _STOP:
                        stopping = True
                        break
                    batch.append(nxt)
                self._commit(conn, batch)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list) -> None:
        try:
            self._commit_batch(conn, batch)
        except BaseException as exc:  # never let the writer thread die with callers waiting
            log.exception("writer batch failed")
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        finally:
            by_loop: dict[asyncio.AbstractEventLoop, list[_LoopSlot]] = {}
            for _, outcome in batch:
                if isinstance(outcome, _LoopSlot) and outcome.outcome is not None:
                    by_loop.setdefault(outcome.loop, []).append(outcome)
            for loop, slots in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_settle, slots)
                except RuntimeError:  # that loop is closed: nobody is waiting any more
                    pass

    def _commit_batch(self, conn: sqlite3.Connection, batch: list) -> None:
        pending = [(op, future) for op, future in batch if future.set_running_or_notify_cancel()]
        while pending:
            conn.execute("BEGIN IMMEDIATE")
            results, events, failed = [], [], None
            for index, (op, _) in enumerate(pending):
                op_events: list = []
                try:
                    results.append(op(conn, op_events))
                except BaseException as exc:
                    failed = (index, exc)
                    break
                events.extend(op_events)
            if failed is None:
                break
            index, exc = failed
            if not conn.in_transaction:
                # SQLite rolled the whole transaction back itself (disk full, I/O error): the
                # database is in trouble, and every write of the batch fails with it.
                for _, future in pending:
                    future.set_exception(exc)
                return
            # The op fails alone: undo the transaction and run the batch again without it. Ops
            # are plain SQL over their own arguments, so running one again is safe; this costs
            # less than a savepoint around every op in the common case where none fails.
            conn.execute("ROLLBACK")
            pending.pop(index)[1].set_exception(exc)
        else:
            return  # every op failed
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # nothing in the batch is durable
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            log.error("commit of %d writes failed: %s", len(pending), exc)
            for _, future in pending:
                future.set_exception(exc)
            return
        self.batches += 1
        self.ops += len(pending)
        if events:
            for listener in self._listeners:
                try:
                    listener(events)
                except Exception:  # a mirror failing must not fail a committed write
                    log.exception("commit listener failed")
        for (_, future), result in zip(pending, results):
            future.set_result(result)


class Checkpointer:
    """Copies the WAL back into the database from its own thread and connection.

    SQLite's automatic checkpoint runs inside the COMMIT that crosses the threshold, so every write
    in that batch (and every chat waiting on one) would wait for the copy and its fsync. A PASSIVE
    checkpoint here never blocks the writer or readers; the writer's connection has
    `wal_autocheckpoint = 0`.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], interval: float = 1.0) -> None:
        self._connect, self.interval = connect, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chinwag-db-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = self._connect()
        try:
            while not self._stop.wait(self.interval):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # busy or I/O trouble: try again next time
                    log.warning("WAL checkpoint failed: %s", exc)
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
