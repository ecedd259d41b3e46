"""One writer thread that commits concurrent writes together (group commit), and keeps the
write-ahead log small.

Every write to the database is a function `op(conn, events)` submitted here. The thread takes
whatever is queued, runs the ops in one transaction (an op that raises is dropped and the rest
run again), commits once (one fsync for the whole batch), tells the commit listeners, and only
then resolves each op's future.
So an append returns only when it is durable, a failing op fails alone, and a hundred chats
appending at once cost one fsync instead of a hundred.

The WAL. SQLite's automatic checkpoint runs inside the COMMIT that crosses its threshold, and a
PASSIVE checkpoint from another thread never catches up with steady writes, so the log never
restarts: 8,000 one-at-a-time appends left a 644 MB WAL beside a 4.6 MB database. Here the writer
itself checkpoints, between two batches, when the log passes `checkpoint_bytes`: no write is in
flight, so a RESTART checkpoint copies what is left and the next commit writes the log from its
start again, reusing the file in place (cheaper to fsync than a growing file: 2,300 vs 1,800
sequential commits/s measured). `journal_size_limit` cuts the file back to `checkpoint_bytes` on
that restart, and after `idle_seconds` without writes a TRUNCATE checkpoint empties it. A checkpoint
copies only the distinct pages the log holds: ~2 ms for 400 sequential commits. It waits for
readers at most `CHECKPOINT_BUSY_MS`; a reader holding a snapshot for longer only delays it (retried
as the log grows and when idle), never the writes.

Upkeep tasks (see `add_upkeep`) run on this thread too, between batches or when idle: the deferred
full-text indexing (gateway/storage/indexer.py) is one. Work that is due while writes keep coming
rides in the next batch's transaction instead (`add_rider`), so it costs no fsync of its own: the
indexer's batch every 256 messages was a commit of its own, 28% of the fsyncs with 100 chats
appending at once (100k appends: 1,007 batches and ~390 index commits).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import sqlite3
import struct
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from gateway.storage.conn import Conn
from gateway.storage.connect import BUSY_TIMEOUT_MS, Connection

log = logging.getLogger(__name__)

WriteOp = Callable[[Conn, list], Any]
CommitListener = Callable[[list], None]
# upkeep(conn, idle): runs on the writer thread outside any transaction; True if it did work
UpkeepTask = Callable[[Connection, bool], bool]
# rider(): a write op to run first in the next batch's transaction, or None
Rider = Callable[[], "WriteOp | None"]

_STOP = object()
MAX_BATCH = 256  # bounds how long one append waits behind others in its batch
CHECKPOINT_BYTES = 8 * 1024 * 1024  # the log is checkpointed and restarted past this
IDLE_SECONDS = 1.0  # no write for this long: idle upkeep, then the log is truncated
CHECKPOINT_BUSY_MS = 50  # how long a checkpoint waits for readers before trying again later
WRITE_BUSY_MS = BUSY_TIMEOUT_MS  # the usual wait for a lock held by another process


class WriterClosed(RuntimeError):
    pass


class _LoopSlot:
    """Where the outcome of an asyncio caller's write goes. It quacks like the part of a
    concurrent Future the writer uses; outcomes are handed to the caller's event loop in one
    callback per batch instead of one thread-safe wake-up per write."""

    __slots__ = ("loop", "future", "outcome")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> None:
        self.loop, self.future = loop, future
        self.outcome: tuple[Any, BaseException | None] | None = None

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
        if not slot.future.done() and slot.outcome is not None:
            result, exc = slot.outcome
            if exc is not None:
                slot.future.set_exception(exc)
            else:
                slot.future.set_result(result)


class _RiderOutcome(Future):
    """Where a rider's outcome goes: nobody waits for it, a failure is logged (and the rider is
    dropped from that batch like any failing op, so the appends still commit)."""

    def set_exception(self, exception: BaseException | None) -> None:
        log.error("writer rider failed: %s", exception)
        super().set_exception(exception)


class WalFile:
    """The size of a database's write-ahead log: the file on disk, and the part of it in use.

    The file does not shrink when the log restarts (it is reused in place), so its size says
    nothing about how much of it the current log fills. That is read from the wal-index header
    in the `-shm` file (mxFrame, a native-endian u32 at byte 16; https://sqlite.org/walformat.html),
    whose first copy is kept current by every writer.

    The `-shm` file is opened once and kept open until `close` (after the connection's): closing
    any descriptor of a file drops every fcntl lock this process holds on it, SQLite's "in use"
    lock on the wal-index included, and the next process to open the database would then reset
    the file under this one's memory map (SIGBUS in COMMIT; tests/storage/test_wal_index_beside_readers.py)."""

    _HEADER = 48

    def __init__(self, db_path: str, page_size: int) -> None:
        self.path, self.page_size = db_path + "-wal", page_size
        self._shm: int | None = None

    def file_bytes(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def position(self) -> tuple[int, int] | None:
        """(frames in the log, salt of this log generation), None if the wal-index is unreadable."""
        try:
            if self._shm is None:
                self._shm = os.open(self.path[:-4] + "-shm", os.O_RDONLY)
            header = os.pread(self._shm, self._HEADER, 0)
        except OSError:
            return None
        if len(header) < self._HEADER:
            return None
        frames, salt = struct.unpack_from("=I", header, 16)[0], struct.unpack_from("=I", header, 32)[0]
        return frames, salt

    def close(self) -> None:
        """Only once the database connection is closed (see the class docstring)."""
        if self._shm is not None:
            fd, self._shm = self._shm, None
            os.close(fd)

    def log_bytes(self, position: tuple[int, int] | None = None) -> int:
        """Bytes of log the next checkpoint has to deal with (the file size if unreadable);
        `position` is one just read, to save reading it again."""
        if position is None:
            position = self.position()
        if position is None:
            return self.file_bytes()
        return 32 + position[0] * (self.page_size + 24) if position[0] else 0


def wal_file_bytes(db_path: str) -> int:
    """Size of the `-wal` file beside a database, 0 when there is none (for stats and metrics)."""
    return WalFile(db_path, 0).file_bytes()


class GroupCommitWriter:
    def __init__(
        self,
        connect: Callable[[], Connection],
        name: str = "chinwag-db-writer",
        *,
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        idle_seconds: float = IDLE_SECONDS,
    ):
        self._connect = connect
        self.checkpoint_bytes, self.idle_seconds = int(checkpoint_bytes), float(idle_seconds)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._listeners: list[CommitListener] = []
        self._upkeep: list[UpkeepTask] = []
        self._riders: list[Rider] = []
        self._wal: WalFile | None = None
        self._next_checkpoint = self.checkpoint_bytes
        self._dirty = False  # written since the last idle upkeep
        self._closed = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self.batches = 0  # commits of submitted writes (for stats/benchmarks)
        self.ops = 0
        self.checkpoints = 0  # completed (log restarted or truncated)
        self.checkpoints_busy = 0  # attempts a reader made wait for a later try
        self.wal_peak_bytes = 0  # the largest the log got before a checkpoint
        self.wal_written_bytes = 0  # log frames this writer appended (for benchmarks and metrics)
        self._position: tuple[int, int] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error:
            raise self._start_error

    def add_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def add_upkeep(self, task: UpkeepTask) -> None:
        """Run `task(conn, idle)` on the writer thread after every batch (idle False) and once
        when no write came for `idle_seconds` (idle True), and before closing. It runs outside any
        transaction and starts its own; an exception is logged and the writer goes on."""
        self._upkeep.append(task)

    def add_rider(self, rider: Rider) -> None:
        """Before each batch, `rider()` may return a write op: it runs first in that batch's
        transaction (on the writer thread, like the batch's own ops) and commits with it."""
        self._riders.append(rider)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

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
            self._setup_wal(conn)
            while not stopping:
                try:
                    item = self._queue.get(timeout=self.idle_seconds if self._dirty else None)
                except queue.Empty:
                    self._idle(conn)
                    continue
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
                riding = [(op, _RiderOutcome()) for op in (rider() for rider in self._riders) if op is not None]
                self._commit(conn, riding + batch if riding else batch)
                self._dirty = True
                self._run_upkeep(conn, idle=False)
                self._checkpoint_if_due(conn)
            self._idle(conn)  # closing: finish upkeep, leave an empty log
        finally:
            conn.close()
            if self._wal is not None:
                self._wal.close()

    # -- upkeep and the WAL ----------------------------------------------------------------------
    def _setup_wal(self, conn: Connection) -> None:
        path = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "")
        if not path:  # in-memory database: no log file
            return
        self._wal = WalFile(path, conn.execute("PRAGMA page_size").fetchone()[0])
        # checkpoints are taken here, between batches, never inside a COMMIT
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA journal_size_limit = {self.checkpoint_bytes}")
        self._position = self._wal.position()

    def _run_upkeep(self, conn: Connection, idle: bool) -> bool:
        worked = False
        for task in self._upkeep:
            try:
                worked |= bool(task(conn, idle))
            except Exception:
                log.exception("writer upkeep task failed")
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        return worked

    def _idle(self, conn: Connection) -> None:
        self._run_upkeep(conn, idle=True)
        self._account()
        truncated = True
        if self._wal is not None and self._wal.file_bytes() > 0:
            truncated = self.checkpoint(conn, "TRUNCATE")
        self._dirty = not truncated  # a reader held on: try again after another idle spell

    def _account(self) -> None:
        """Add the frames written since the last look (a new salt: the log restarted meanwhile)."""
        if self._wal is None:
            return
        now = self._wal.position()
        if now is not None:
            before = self._position
            added = now[0] if before is None or before[1] != now[1] else max(0, now[0] - before[0])
            self.wal_written_bytes += added * (self._wal.page_size + 24)
        self._position = now

    def _checkpoint_if_due(self, conn: Connection) -> None:
        if self._wal is None:
            return
        self._account()
        size = self._wal.log_bytes(self._position)  # the position _account just read
        self.wal_peak_bytes = max(self.wal_peak_bytes, size)
        if size >= self._next_checkpoint:
            if not self.checkpoint(conn, "RESTART"):  # a reader held on: try again a quarter further on
                self._next_checkpoint = size + max(1, self.checkpoint_bytes // 4)

    def checkpoint(self, conn: Connection, mode: str = "RESTART") -> bool:
        """Copy the log into the database and restart it (RESTART) or empty the file (TRUNCATE).
        Writer thread only. False if a reader kept it from completing (nothing is lost: the log
        stays, and is checkpointed later)."""
        started = time.perf_counter()
        conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_BUSY_MS}")
        try:
            busy, log_frames, done = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except sqlite3.Error as exc:  # I/O trouble: the log stays, try again later
            log.warning("WAL checkpoint failed: %s", exc)
            busy = 1
        finally:
            conn.execute(f"PRAGMA busy_timeout = {WRITE_BUSY_MS}")
        if busy:
            self.checkpoints_busy += 1
            log.debug("WAL checkpoint (%s) could not complete: a reader holds a snapshot", mode)
            return False
        self.checkpoints += 1
        self._next_checkpoint = self.checkpoint_bytes
        log.debug("WAL checkpoint (%s) in %.1f ms", mode, (time.perf_counter() - started) * 1000)
        return True

    def _commit(self, conn: Connection, batch: list) -> None:
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

    def _commit_batch(self, conn: Connection, batch: list) -> None:
        pending = [(op, future) for op, future in batch if future.set_running_or_notify_cancel()]
        while pending:
            conn.execute("BEGIN IMMEDIATE")
            results: list[Any] = []
            events: list = []
            failed: tuple[int, BaseException] | None = None
            for index, (op, _) in enumerate(pending):
                op_events: list = []
                try:
                    results.append(op(conn, op_events))
                except BaseException as op_error:
                    failed = (index, op_error)
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
        self.ops += sum(not isinstance(future, _RiderOutcome) for _, future in pending)
        if events:
            for listener in self._listeners:
                try:
                    listener(events)
                except Exception:  # a mirror failing must not fail a committed write
                    log.exception("commit listener failed")
        for (_, future), result in zip(pending, results):
            future.set_result(result)
