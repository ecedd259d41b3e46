"""Media kept with the conversation: content-addressed files under `home/media/` and the
`attachments` rows that tie them to messages.

A photo forwarded to three chats, or sent again, is stored once: the file's name is its SHA-256
(`media/<first two hex>/<sha256>`), so writing it twice is a no-op and a row needs only the hash.
Bytes go to a temporary file in the same directory, are fsynced and renamed into place, so a crash
leaves either no file or the whole file (never a torn one), and a file exists before any committed
row names it. Files whose rows are gone (a deleted or pruned session, a crash between a download
and its commit) are removed by `sweep`, which upkeep runs; a file younger than `SWEEP_GRACE` is
left alone because its row may not be committed yet.

Where the replicas share no disk (Postgres), the database keeps each file too (`SharedFiles`,
gateway/storage/postgres/files.py) and `home/media/` is this process's cache of it: a save writes
both, a read takes the local file and fetches only what is missing (once), a removal and the sweep
clear both. On SQLite there is no shared copy: the directory is the store.

The size cap is checked twice: against the size the platform declares (before any byte is
fetched) and while reading, so a platform that under-declares, or declares nothing, still cannot
fill the disk.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Protocol

from gateway.storage.conn import Conn

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
SWEEP_GRACE = 3600.0  # seconds: a file this young may belong to a row not yet committed
KINDS = ("image", "audio", "voice", "video", "file")


class MediaTooLarge(ValueError):
    """The file is over the configured cap; nothing was kept."""

    def __init__(self, size: int | None, limit: int) -> None:
        self.size, self.limit = size, limit
        shown = f"{size:,} bytes" if size is not None else "more than the limit"
        super().__init__(f"the file is too big ({shown}; the limit is {limit:,} bytes)")


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    size: int


@dataclass(frozen=True)
class AttachmentRow:
    """What the `attachments` table holds for one file of one message."""

    kind: str
    mime_type: str | None
    size: int | None
    sha256: str | None  # None: named only (too big, refused, or the download failed)
    file_name: str | None
    platform_file_id: str | None = None


class SharedFiles(Protocol):
    """The database's copy of the files, which every replica reads (the face's shared_files())."""

    def put(self, sha256: str, data: bytes) -> None: ...

    def get(self, sha256: str) -> bytes | None: ...

    def has(self, sha256: str) -> bool: ...

    def remove(self, sha256s: Iterable[str]) -> int: ...

    def sweep(self, older_than: float) -> int:
        """Remove the files no kept attachment references, stored before `older_than`."""
        ...


class MediaStore:
    """The files under `home/media/`, by hash; with `shared`, also in the database the replicas share."""

    def __init__(
        self, root: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES, shared: SharedFiles | None = None
    ) -> None:
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        self.shared = shared

    def path_for(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def check_declared(self, size: int | None) -> None:
        if size is not None and size > self.max_bytes:
            raise MediaTooLarge(size, self.max_bytes)

    async def save_stream(self, chunks: AsyncIterator[bytes], declared_size: int | None = None) -> StoredFile:
        """Read `chunks` into the store, refusing past the cap; returns the file's hash and size."""
        self.check_declared(declared_size)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        digest = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=self.root)
        try:
            # The disk work (writes, fsync, the rename) runs in a worker thread: measured with
            # bench/media.py, a 5 MB photo's write and fsync took ~36 ms, which on the event loop
            # held up every other chat.
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise MediaTooLarge(None, self.max_bytes)
                    digest.update(chunk)
                    await asyncio.to_thread(out.write, chunk)
                await asyncio.to_thread(_flush_and_sync, out)
            return await asyncio.to_thread(lambda: self._share(self._place(tmp, digest.hexdigest(), size)))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def save_bytes(self, data: bytes) -> StoredFile:
        if len(data) > self.max_bytes:
            raise MediaTooLarge(len(data), self.max_bytes)
        return self._share(self._write(data))

    def _write(self, data: bytes) -> StoredFile:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            return self._place(tmp, hashlib.sha256(data).hexdigest(), len(data))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _place(self, tmp: str, sha256: str, size: int) -> StoredFile:
        final = self.path_for(sha256)
        if not final.exists():
            final.parent.mkdir(exist_ok=True, mode=0o700)
            os.chmod(tmp, 0o600)
            os.replace(tmp, final)  # same filesystem: atomic
            _fsync_dir(final.parent)
        return StoredFile(sha256, size)

    def _share(self, stored: StoredFile) -> StoredFile:
        """Put a file just kept here into the shared copy too, before any row names it."""
        if self.shared is not None and not self.shared.has(stored.sha256):
            self.shared.put(stored.sha256, self.path_for(stored.sha256).read_bytes())
        return stored

    def local(self, sha256: str) -> Path:
        """The file on this disk, fetched from the shared copy when only the database has it.
        FileNotFoundError when neither does."""
        path = self.path_for(sha256)
        if path.is_file() or self.shared is None:
            return path
        data = self.shared.get(sha256)
        if data is None:
            raise FileNotFoundError(path)
        self._write(data)  # no cap: the file was capped where it came in
        return path

    def read(self, sha256: str) -> bytes:
        return self.local(sha256).read_bytes()

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file() or (self.shared is not None and self.shared.has(sha256))

    def remove(self, sha256s: Iterable[str]) -> int:
        """Remove these files (here and from the shared copy); returns how many were on this disk."""
        shas = list(sha256s)
        if self.shared is not None:
            self.shared.remove(shas)
        return self._unlink(shas)

    def _unlink(self, sha256s: Iterable[str]) -> int:
        removed = 0
        for sha in sha256s:
            try:
                self.path_for(sha).unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def files(self) -> Iterable[tuple[str, int, float]]:
        """(sha256, bytes, mtime) of every stored file."""
        if not self.root.is_dir():
            return
        for sub in self.root.iterdir():
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for path in sub.iterdir():
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                yield path.name, st.st_size, st.st_mtime

    def sweep(self, referenced: set[str], now: float | None = None) -> int:
        """Remove files no row references, older than the grace period (on this disk, and the
        shared copy's). Returns how many."""
        now = time.time() if now is None else now
        stale = [sha for sha, _, mtime in self.files() if sha not in referenced and now - mtime > SWEEP_GRACE]
        removed = self._unlink(stale)
        if self.shared is not None:  # decided in the database itself, against the rows committed there
            removed += self.shared.sweep(now - SWEEP_GRACE)
        return removed


def _flush_and_sync(out: Any) -> None:
    out.flush()
    os.fsync(out.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- SQL ----------------------------------------------------------------------------------------


def insert_attachments(conn: Conn, message_id: int, rows: Iterable[AttachmentRow]) -> int:
    """Add the attachment rows of one message (in the caller's transaction)."""
    now = time.time()
    count = 0
    for row in rows:
        if row.kind not in KINDS:
            raise ValueError(f"unknown attachment kind {row.kind!r}")
        conn.execute(
            "INSERT INTO attachments (message_id, kind, mime_type, bytes, sha256, file_name, platform_file_id,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, row.kind, row.mime_type, row.size, row.sha256, row.file_name, row.platform_file_id, now),
        )
        count += 1
    return count


def attachments_of(conn: Conn, message_ids: Iterable[int]) -> dict[int, list[dict]]:
    """message id -> its attachment rows, in the order they were stored."""
    ids = list(message_ids)
    found: dict[int, list[dict]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            f"SELECT id, message_id, kind, mime_type, bytes, sha256, file_name, platform_file_id, created_at,"
            f" dropped_at FROM attachments WHERE message_id IN ({marks}) ORDER BY id",
            chunk,
        ):
            found.setdefault(row[1], []).append(
                {
                    "id": row[0],
                    "kind": row[2],
                    "mime_type": row[3],
                    "bytes": row[4],
                    "sha256": row[5],
                    "file_name": row[6],
                    "platform_file_id": row[7],
                    "created_at": row[8],
                    "dropped": row[9] is not None,
                }
            )
    return found


def attachment_in_session(conn: Conn, session_id: str, sha256: str) -> dict | None:
    """The first kept (not dropped) attachment with this file on a message of this session."""
    row = conn.execute(
        "SELECT a.id, a.kind, a.mime_type, a.bytes, a.file_name FROM attachments a"
        " JOIN messages m ON m.id = a.message_id"
        " WHERE m.session_id = ? AND a.sha256 = ? AND a.dropped_at IS NULL ORDER BY a.id LIMIT 1",
        (session_id, sha256),
    ).fetchone()
    if row is None:
        return None
    return {"id": row[0], "kind": row[1], "mime_type": row[2], "bytes": row[3], "file_name": row[4]}


def referenced_hashes(conn: Conn) -> set[str]:
    """Hashes some kept (not dropped) attachment row still points at."""
    return {
        r[0]
        for r in conn.execute("SELECT DISTINCT sha256 FROM attachments WHERE sha256 IS NOT NULL AND dropped_at IS NULL")
    }


def delete_attachments_of_session(conn: Conn, session_id: str) -> None:
    """Remove the rows of a session's messages (in the caller's transaction, before the messages);
    the files go at the next sweep unless another message still references them."""
    conn.execute(
        "DELETE FROM attachments WHERE message_id IN (SELECT id FROM messages WHERE session_id = ?)", (session_id,)
    )


def stored_bytes(conn: Conn) -> int:
    """Bytes held for kept attachments, each file counted once."""
    row = conn.execute(
        "SELECT COALESCE(SUM(bytes), 0) FROM (SELECT sha256, MAX(bytes) AS bytes FROM attachments"
        " WHERE sha256 IS NOT NULL AND dropped_at IS NULL GROUP BY sha256) AS files"
    ).fetchone()
    return int(row[0])


def drop_oldest_of_ended_sessions(conn: Conn, over_bytes: int, now: float | None = None) -> list[str]:
    """Mark as dropped the oldest attachments of ended sessions until `over_bytes` are freed (in the
    caller's transaction). The rows stay -- the transcript still says a photo was sent -- but the
    bytes may go. Returns the hashes no kept row references any more."""
    now = time.time() if now is None else now
    freed = 0
    candidates: list[str] = []
    rows = conn.execute(
        "SELECT a.id, a.sha256, a.bytes FROM attachments a JOIN messages m ON m.id = a.message_id"
        " JOIN sessions s ON s.id = m.session_id"
        " WHERE a.sha256 IS NOT NULL AND a.dropped_at IS NULL AND s.ended_at IS NOT NULL"
        " ORDER BY a.created_at, a.id"
    ).fetchall()
    for attachment_id, sha, size in rows:
        if freed >= over_bytes:
            break
        conn.execute("UPDATE attachments SET dropped_at = ? WHERE id = ?", (now, attachment_id))
        still = conn.execute(
            "SELECT 1 FROM attachments WHERE sha256 = ? AND dropped_at IS NULL LIMIT 1", (sha,)
        ).fetchone()
        if not still:
            freed += int(size or 0)
            candidates.append(sha)
    return candidates
