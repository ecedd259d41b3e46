"""One process per home: `chinwag run` and `chinwag chat` hold an exclusive lock on `home/chinwag.lock`.

Two gateways on one home each ran their own writer and lanes over the same sessions: `/new` in one
moved the other's conversation, and each answered the other's redeliveries. The lock is an
`fcntl.flock` on an open file, so the kernel drops it when the process ends however it ends
(SIGKILL included): no stale lock to clean up, and a pid in the file is only for the message. It is
taken before the database is opened. Read-only commands (`chinwag sessions list`, `doctor`) never
take it and work beside a running gateway (SQLite WAL readers do not wait for the writer).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "chinwag.lock"


class HomeLocked(RuntimeError):
    """Another process holds this home."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path, self.pid = path, pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"already running ({who}) on {path.parent}; stop it first, or use another home")


class HomeLock:
    def __init__(self, root: str | os.PathLike) -> None:
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "HomeLock":
        """Take the lock or raise `HomeLocked` naming the holder's pid. The home must exist."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise HomeLocked(self.path, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing drops the flock; the file stays (unlinking it would race a new holder)

    def __enter__(self) -> "HomeLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(root: str | os.PathLike) -> int | None:
    """The pid of the process holding `root`, or None when nobody does."""
    path = Path(root) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isascii() and text.isdigit() else None
    except OSError:
        return None
