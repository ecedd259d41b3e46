"""Plain-file mirrors of the database (DESIGN §4), for people and tools that read files.

- `sessions/{session_id}.jsonl`: one JSON object per message (its DB id, role, content, flags …),
  appended after each commit by the mirrors' own thread, so the DB writer (and every chat waiting
  on a commit) never waits for file system work such as creating a new chat's file; `flush()`
  waits until the files have caught up. One `write` of whole lines to an O_APPEND descriptor;
  descriptors are kept in a small LRU. When flags change (undo, retry, compaction) the DB sends a
  `SessionRewritten` event and that one file is replaced atomically (temp file, fsync, rename).
- `sessions.json`: key -> current session entry, one key per line. Rewritten atomically, only
  when key entries change, and coalesced: at most once per `index_interval` seconds (plus once on
  close). Never per inbound message: an append does not touch it.

The DB is the source of truth. A crash can leave a mirror behind (a line not yet appended, a
half-written tail line, a stale sessions.json); `repair()` — run on start and by
`chinwag sessions repair` — rebuilds both from the DB and reports what it fixed.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gateway.db import StorageFace
from gateway.sessions.mirror_files import (
    RepairReport,
    atomic_write,
    file_stamp,
    fsync_dir,
    index_file,
    index_line,
    is_temp_name,
    message_line,
)
from gateway.storage.events import (
    CommitEvent,
    KeyChanged,
    KeyDeleted,
    MessageAppended,
    SessionDeleted,
    SessionRewritten,
)
from gateway.storage.home import Home, is_safe_session_id

log = logging.getLogger(__name__)

__all__ = ["Mirrors", "RepairReport"]

_STOP = object()
MAX_BACKLOG = 10_000  # commits queued for the transcripts before their events are dropped
RETRY_INTERVAL = 30.0  # seconds between attempts to rewrite transcripts whose write failed


@dataclass
class _Transcript:
    fd: int | None = None
    last_id: int | None = None  # highest message id known to be in the file


class Mirrors:
    def __init__(
        self,
        home: Home | str | os.PathLike,
        db: StorageFace,
        *,
        max_open_files: int = 64,
        index_interval: float = 0.5,
        attach: bool = True,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self.home = home if isinstance(home, Home) else Home(Path(home))
        self.home.ensure()
        self.db = db
        self.max_open_files = max(1, int(max_open_files))
        self.index_interval = float(index_interval)
        self._files: OrderedDict[str, _Transcript] = OrderedDict()
        self._lock = threading.RLock()  # transcripts
        self._index_lock = threading.Lock()  # sessions.json: read DB + write file as one step
        self._cond = threading.Condition()
        self._index_dirty = False
        self._index_writing = False
        self._closing = False
        self._closed = False
        self._last_index_write = float("-inf")
        self._last_index_cost = 0.0  # seconds the last sessions.json write took
        # sessions.json is kept as {key: line} and patched from commit events, so a write costs a
        # sort and a join instead of re-reading and re-encoding every key. None: load from the DB
        # (at the first write, or when someone else replaced the file, e.g. a CLI command).
        self._index_lines: dict[str, bytes] | None = None
        self._index_changes: dict[str, bytes | None] = {}  # key -> new line, None = deleted
        self._index_stamp: tuple[int, int, int] | None = None  # the file as we last wrote it
        self._index_reload = False
        # counters, for tests and `stats`
        self.index_writes = 0
        self.index_loads = 0  # times sessions.json was rebuilt from the DB rather than patched
        self.transcript_rewrites = 0
        self.lines_appended = 0
        self._flusher = threading.Thread(target=self._flush_loop, name="chinwag-mirrors", daemon=True)
        self._flusher.start()
        self._events: queue.SimpleQueue = queue.SimpleQueue()  # commit events, in commit order
        # Beyond max_backlog queued commits (the file system is stalled or full) events are not
        # kept: the sessions they touched are noted and later rewritten from the DB, so memory
        # stays bounded and nothing is lost.
        self.max_backlog = max(1, int(max_backlog))
        self._overflow: set[str] = set()
        self._overflow_keys = False
        self._overflow_lock = threading.Lock()
        self.overflows = 0  # commits whose events were dropped and repaired from the DB instead
        self._failed: set[str] = set()  # sessions whose file write failed: rewrite them later
        self.retry_interval = RETRY_INTERVAL
        self._retry_at = 0.0
        self._applier = threading.Thread(target=self._apply_loop, name="chinwag-transcripts", daemon=True)
        self._applier.start()
        if attach:
            db.add_commit_listener(self._on_commit)

    # -- life cycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Write what is owed (transcript lines, a pending sessions.json) and close files. Call
        before closing the DB."""
        if self._closed:
            return
        self._events.put(_STOP)  # after every event already queued
        self._applier.join()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._flusher.join()
        self._closed = True
        with self._lock:
            for sid in list(self._files):
                self._drop(sid)

    def __enter__(self) -> "Mirrors":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def open_files(self) -> int:
        return sum(1 for t in self._files.values() if t.fd is not None)

    # -- commit events ---------------------------------------------------------------------------
    def _on_commit(self, events: list[CommitEvent]) -> None:
        """Called in the DB writer thread after each commit: only queue the events."""
        if self._closed:
            return
        if self._events.qsize() < self.max_backlog:
            self._events.put(events)
            return
        with self._overflow_lock:
            if not self._overflow and not self._overflow_keys:
                log.warning(
                    "mirrors are %d commits behind; the sessions written meanwhile will be rewritten from the database",
                    self.max_backlog,
                )
            self.overflows += 1
            for event in events:
                if isinstance(event, (KeyChanged, KeyDeleted)):
                    self._overflow_keys = True
                elif isinstance(event, (MessageAppended, SessionRewritten, SessionDeleted)):
                    self._overflow.add(event.session_id)

    def _apply_loop(self) -> None:
        while True:
            item = self._events.get()
            if item is not _STOP and not isinstance(item, threading.Event):
                try:
                    self._apply(item)
                except Exception:
                    log.exception("applying commit events to the mirrors failed")
                if not self._events.empty():
                    continue
            try:
                self._catch_up()  # queue empty, drained or stopping: redo what overflowed
            except Exception:
                log.exception("rewriting transcripts from the database failed")
            if item is _STOP:
                return
            if isinstance(item, threading.Event):  # drain(): everything before it is applied
                item.set()

    def _catch_up(self) -> None:
        with self._overflow_lock:
            sids, self._overflow = self._overflow, set()
            keys, self._overflow_keys = self._overflow_keys, False
            if self._failed and time.monotonic() >= self._retry_at:
                sids |= self._failed
                self._failed = set()
        for sid in sorted(sids):
            self._guard(self.rewrite_session, sid)  # a deleted session's file is removed
        if keys:
            with self._cond:
                self._index_reload = True  # key changes were dropped: read every key again
            self._mark_index_dirty({})

    def backlog(self) -> int:
        """Commits queued for the transcript files (the `mirror_backlog` metric)."""
        return self._events.qsize()

    def drain(self) -> None:
        """Wait until the transcripts hold every commit made so far."""
        if not self._applier.is_alive():
            return
        done = threading.Event()
        self._events.put(done)
        while not done.wait(0.5):
            if not self._applier.is_alive():  # closed (or died): nothing more will be written
                return

    def _apply(self, events: list[CommitEvent]) -> None:
        rewrite: set[str] = set()
        deleted: set[str] = set()
        appends: dict[str, list[tuple[int, bytes]]] = {}
        key_changes: dict[str, bytes | None] = {}
        for event in events:
            if isinstance(event, MessageAppended):
                appends.setdefault(event.session_id, []).append((event.message_id, message_line(event.row)))
            elif isinstance(event, SessionRewritten):
                rewrite.add(event.session_id)
            elif isinstance(event, SessionDeleted):
                deleted.add(event.session_id)
            elif isinstance(event, KeyChanged):
                key_changes[event.session_key] = index_line(event.entry)
            elif isinstance(event, KeyDeleted):  # also sent for each key of a deleted session
                key_changes[event.session_key] = None
        # A session both deleted and written in one batch (re-imported) is rebuilt from the DB.
        rewrite |= deleted & set(appends)
        with self._lock:
            for sid in deleted - rewrite:
                self._guard(self._remove, sid)
            for sid, items in appends.items():
                if sid not in rewrite:  # a rewrite reads the DB after this commit: it has them
                    self._guard(self._append, sid, items)
            for sid in rewrite:
                self._guard(self.rewrite_session, sid)
        if key_changes:
            self._mark_index_dirty(key_changes)

    def _guard(self, fn: Callable, sid: str, *args: object) -> None:
        """Run one transcript write; a failure (full disk …) must not stop the other mirrors. The
        session is rewritten from the DB later (every RETRY_INTERVAL), and the log says so once
        per interval, not once per message."""
        try:
            fn(sid, *args)
        except (OSError, ValueError) as exc:
            now = time.monotonic()
            with self._overflow_lock:
                self._failed.add(sid)
                quiet = now < self._retry_at
                if not quiet:
                    self._retry_at = now + self.retry_interval
            if not quiet:
                log.error(
                    "mirror write failed (%s %s): %s; will rewrite from the database",
                    getattr(fn, "__name__", fn),
                    sid,
                    exc,
                )

    # -- transcripts -----------------------------------------------------------------------------
    def _state(self, sid: str) -> _Transcript:
        state = self._files.get(sid)
        if state is None:
            state = self._files[sid] = _Transcript()
        self._files.move_to_end(sid)
        while len(self._files) > self.max_open_files:
            old, _ = next(iter(self._files.items()))
            self._drop(old)
        return state

    def _drop(self, sid: str) -> None:
        state = self._files.pop(sid, None)
        if state and state.fd is not None:
            os.close(state.fd)

    def _open(self, sid: str) -> int:
        fd = os.open(self.home.transcript_path(sid), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")  # a torn tail line from a crash: keep new lines whole
        return fd

    def _append(self, sid: str, items: list[tuple[int, bytes]]) -> None:
        state = self._state(sid)
        if state.last_id is not None:  # a rewrite/repair already wrote these
            items = [(mid, line) for mid, line in items if mid > state.last_id]
        if not items:
            return
        if state.fd is None:
            state.fd = self._open(sid)
        data = memoryview(b"".join(line for _, line in items))
        while data:
            data = data[os.write(state.fd, data) :]
        top = max(mid for mid, _ in items)
        state.last_id = top if state.last_id is None else max(state.last_id, top)
        self.lines_appended += len(items)

    def _remove(self, sid: str) -> None:
        self._drop(sid)
        self.home.transcript_path(sid).unlink(missing_ok=True)

    def expected_transcript(self, sid: str) -> tuple[bytes, list[bytes], int | None]:
        rows = self.db.get_messages(sid, include_inactive=True)
        lines = [message_line(r) for r in rows]
        return b"".join(lines), lines, (rows[-1]["id"] if rows else None)

    def rewrite_session(self, sid: str) -> None:
        """Replace one transcript with the DB's view of it (after undo/retry/compaction)."""
        with self._lock:
            data, _, last_id = self.expected_transcript(sid)
            self._drop(sid)  # an O_APPEND descriptor would keep writing to the replaced file
            path = self.home.transcript_path(sid)
            if not data:
                path.unlink(missing_ok=True)
                return
            atomic_write(path, data)
            self._state(sid).last_id = last_id
            self.transcript_rewrites += 1

    # -- sessions.json ---------------------------------------------------------------------------
    def _mark_index_dirty(self, changes: dict[str, bytes | None]) -> None:
        with self._cond:
            self._index_changes.update(changes)
            self._index_dirty = True
            self._cond.notify_all()

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                while not self._index_dirty and not self._closing:
                    self._cond.wait()
                # coalesce: whatever else changes until then goes into the same write
                while not self._closing:
                    # at least index_interval apart, and never more than ~5 % of the time: a big
                    # index (tens of thousands of chats) is written less often, not more slowly
                    gap = max(self.index_interval, 20 * self._last_index_cost)
                    remaining = self._last_index_write + gap - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                if not self._index_dirty:  # flush() wrote it meanwhile, or closing with nothing due
                    if self._closing:
                        return
                    continue
                self._index_dirty, self._index_writing = False, True
            try:
                self.write_index()
            except Exception:
                log.exception("writing sessions.json failed")
            finally:
                with self._cond:
                    self._index_writing = False
                    self._cond.notify_all()

    def write_index(self) -> None:
        """Write sessions.json from the DB now (atomic)."""
        with self._index_lock:
            started = time.monotonic()
            with self._cond:
                changes, self._index_changes = self._index_changes, {}
                reload, self._index_reload = self._index_reload, False
            lines = self._index_lines
            if reload or lines is None or self._index_stamp != file_stamp(self.home.sessions_index):
                # The DB is read after the changes were taken, so it already holds them.
                lines = self._index_lines_from_db()
                self.index_loads += 1
            else:
                for key, line in changes.items():
                    if line is None:
                        lines.pop(key, None)
                    else:
                        lines[key] = line
            self._index_lines = None  # until the file is written: a failure means reload next time
            atomic_write(self.home.sessions_index, index_file(lines))
            self._index_lines, self._index_stamp = lines, file_stamp(self.home.sessions_index)
            self.index_writes += 1
            self._last_index_write = time.monotonic()
            self._last_index_cost = self._last_index_write - started

    def _index_lines_from_db(self) -> dict[str, bytes]:
        return {e["session_key"]: index_line(e) for e in self.db.list_key_entries()}

    def flush(self) -> None:
        """Make both mirrors current now: the transcripts catch up with every commit so far, then
        sessions.json (finish a write in progress, do a pending one)."""
        self.drain()
        with self._cond:
            while self._index_writing:
                self._cond.wait()
            dirty, self._index_dirty = self._index_dirty, False
        if dirty:
            self.write_index()

    # -- repair ----------------------------------------------------------------------------------
    def repair(self, progress: Callable[[int, int], None] | None = None) -> RepairReport:
        """Make both mirrors match the DB (the DB wins) and report what changed."""
        self.drain()
        report = RepairReport()
        self.home.ensure()
        ids = self.db.read(lambda c: [r[0] for r in c.execute("SELECT id FROM sessions ORDER BY id")])
        total = len(ids)
        step = max(1, total // 100)
        for n, sid in enumerate(ids, 1):
            if is_safe_session_id(sid):  # an id that cannot be a file name has no transcript
                self._repair_session(sid, report)
            if progress and (n % step == 0 or n == total):
                progress(n, total)
        report.sessions_checked = total
        if report.files_created or report.files_rewritten:
            fsync_dir(self.home.sessions_dir)  # one directory sync for all the renames above
        known = set(ids)
        for path in sorted(self.home.sessions_dir.iterdir()):
            name = path.name
            if is_temp_name(name):
                path.unlink(missing_ok=True)
                report.temp_removed += 1
            elif name.endswith(".jsonl") and name[:-6] not in known:
                stem = name[:-6]
                if is_safe_session_id(stem) and self.db.get_session(stem) is not None:
                    continue  # created since we listed
                with self._lock:
                    self._drop(stem)
                    path.unlink(missing_ok=True)
                report.files_removed += 1
        with self._index_lock:
            with self._cond:
                self._index_changes.clear()  # the DB read below holds them
            lines = self._index_lines_from_db()
            expected = index_file(lines)
            try:
                current = self.home.sessions_index.read_bytes()
            except FileNotFoundError:
                current = None
            report.keys = len(lines)
            self._index_lines = None
            if current != expected:
                atomic_write(self.home.sessions_index, expected)
                self.index_writes += 1
                self._last_index_write = time.monotonic()
                report.index_rewritten = True
            self._index_lines, self._index_stamp = lines, file_stamp(self.home.sessions_index)
        return report

    def reconcile(self) -> RepairReport:
        """`repair()` on start; logs what it fixed."""
        report = self.repair()
        if report.sessions_checked == 0 and report.keys == 0:
            log.debug("mirrors: empty database, %s", report.summary())  # a first start: nothing was wrong
        elif not report.clean:
            log.warning("mirrors reconciled with the database: %s", report.summary())
        return report

    def _repair_session(self, sid: str, report: RepairReport) -> None:
        path = self.home.transcript_path(sid)
        with self._lock:  # no live append can interleave with check + rewrite
            expected, lines, last_id = self.expected_transcript(sid)
            try:
                current: bytes | None = path.read_bytes()
            except FileNotFoundError:
                current = None
            if current == expected or (current is None and not expected):
                return
            self._drop(sid)
            if not expected:
                path.unlink(missing_ok=True)
                report.files_removed += 1
                return
            have: Counter[bytes] = Counter()
            if current:
                pieces = current.split(b"\n")
                have.update(p + b"\n" for p in pieces[:-1])
                if pieces[-1]:
                    have[pieces[-1]] += 1  # a torn last line (no newline)
            want = Counter(lines)
            report.lines_added += sum((want - have).values())
            report.lines_removed += sum((have - want).values())
            atomic_write(path, expected, sync_dir=False)
            self._state(sid).last_id = last_id
            if current is None:
                report.files_created += 1
            else:
                report.files_rewritten += 1
