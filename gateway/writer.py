"""One writer thread that commits concurrent writes together (group commit).

Every write to the database is a function `op(conn, events)` submitted here. The thread takes
whatever is queued, runs each op inside its own SAVEPOINT of one transaction, commits once (one
fsync for the whole batch), tells the commit listeners, and only then resolves each op's future.
So an append returns only when it is durable, a failing op fails alone, and a hundred chats
appending at once cost one fsync instead of a hundred.
"""

from __future__ import annotations

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
        with self._lock:
            if self._closed:
                raise WriterClosed("the database is closed")
            self._queue.put((op, future))
        return future

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

    def _commit_batch(self, conn: sqlite3.Connection, batch: list) -> None:
        outcomes: list[tuple[Future, Any, BaseException | None]] = []
        events: list = []
        conn.execute("BEGIN IMMEDIATE")
        for op, future in batch:
            if not future.set_running_or_notify_cancel():
                continue
            conn.execute("SAVEPOINT op")
            op_events: list = []
            try:
                result = op(conn, op_events)
            except BaseException as exc:
                if conn.in_transaction:  # the op fails alone; the batch goes on
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append((future, None, exc))
                    continue
                # SQLite rolled the whole transaction back (disk full, I/O error): the ops
                # before this one are not durable either, so they fail with it.
                for earlier, _, _ in outcomes:
                    earlier.set_exception(exc)
                future.set_exception(exc)
                outcomes, events = [], []
                conn.execute("BEGIN IMMEDIATE")
                continue
            conn.execute("RELEASE op")
            events.extend(op_events)
            outcomes.append((future, result, None))
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # nothing in the batch is durable
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            log.error("commit of %d writes failed: %s", len(outcomes), exc)
            for future, _, _ in outcomes:
                future.set_exception(exc)
            return
        self.batches += 1
        self.ops += len(outcomes)
        if events:
            for listener in self._listeners:
                try:
                    listener(events)
                except Exception:  # a mirror failing must not fail a committed write
                    log.exception("commit listener failed")
        for future, result, exc in outcomes:
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)
