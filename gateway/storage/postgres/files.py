"""The attachments' files in the `media_files` table: on Postgres the replicas share no disk, so a
photo one replica received must be readable by another (the console, a rerun after a crash, an
export), and `sessions migrate` must have somewhere to put the home's files (issue 28 item 6).

Each replica's `home/media/` stays, as a cache: MediaStore (gateway/storage/media.py) writes a file
there and here, and reads here only what its own disk lacks, so the bytes cross the network once
per replica. A file is keyed by its SHA-256, as on disk: writing it twice is a no-op. A row no kept
attachment references goes at the sweep (upkeep), once older than the sweep's grace, as the files on
disk do: the attachment row may commit after its file.

Measured (`python -m bench.media_shared`: 20 photos of 5 MB, durable server, 2 shared cores):
keeping one took 48 ms (p50) on disk alone and 125 ms with its row here (in a worker thread, off
the event loop); the first read on a replica without it 109 ms, then 1.0 ms from its cache, which
is why the cache stays.
"""

from __future__ import annotations

import time
from typing import Iterable

from gateway.storage.base import StorageFace

_UNREFERENCED = (
    "DELETE FROM media_files f WHERE f.created_at < ? AND NOT EXISTS "
    "(SELECT 1 FROM attachments a WHERE a.sha256 = f.sha256 AND a.dropped_at IS NULL)"
)


class DatabaseFiles:
    """gateway.storage.media.SharedFiles over one PostgresSessionDB."""

    def __init__(self, db: StorageFace) -> None:
        self.db = db

    def put(self, sha256: str, data: bytes) -> None:
        self.db.write(
            lambda conn, events: conn.execute(
                "INSERT INTO media_files (sha256, bytes, data, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (sha256) DO NOTHING",
                (sha256, len(data), data, time.time()),
            )
        )

    def get(self, sha256: str) -> bytes | None:
        row = self.db.read(
            lambda conn: conn.execute("SELECT data FROM media_files WHERE sha256 = ?", (sha256,)).fetchone()
        )
        return bytes(row[0]) if row else None

    def has(self, sha256: str) -> bool:
        return self.db.read(
            lambda conn: conn.execute("SELECT 1 FROM media_files WHERE sha256 = ?", (sha256,)).fetchone() is not None
        )

    def remove(self, sha256s: Iterable[str]) -> int:
        shas = list(sha256s)
        if not shas:
            return 0
        return int(
            self.db.write(
                lambda conn, events: (
                    conn.execute("DELETE FROM media_files WHERE sha256 = ANY(?::text[])", (shas,)).rowcount
                )
            )
        )

    def sweep(self, older_than: float) -> int:
        return int(self.db.write(lambda conn, events: conn.execute(_UNREFERENCED, (older_than,)).rowcount))
