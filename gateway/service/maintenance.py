"""Upkeep while the daemon runs, every `storage.maintenance_hours`: forget seen inbound event ids
past any platform's redelivery window (otherwise that table grows by a row per message forever),
and, when `storage.retention_days` is set, delete conversations idle for longer, never one that a
chat is currently in; keep home/media/ under `media.max_total_bytes` (the oldest files of ended
conversations go first) and remove files no message needs any more; and prune the inbox entries
done (with their tool-call journal) and the outbox rows sent more than two days ago (past every
platform's redelivery horizon: Feishu retries for ~6 h, Telegram keeps an update 24 h), a batch per
transaction. The work runs in a worker thread; its writes are batched through the DB's single
writer like any other, so chats keep going meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from gateway.db import StorageFace
from gateway.storage import inbox, outbox
from gateway.storage.media import MediaStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceReport:
    events_forgotten: int
    sessions_deleted: int
    media_files_removed: int = 0
    inbox_pruned: int = 0
    outbox_pruned: int = 0


def run_maintenance(
    db: StorageFace,
    retention_days: float,
    stop: Callable[[], bool] = lambda: False,
    media: MediaStore | None = None,
    media_total_bytes: int = 0,
) -> MaintenanceReport:
    forgotten = db.forget_seen_events()
    deleted = 0
    if retention_days > 0:
        current = {entry["session_id"] for entry in db.list_key_entries()}
        deleted = db.prune(retention_days, keep=current, stop=stop)
    removed = 0
    if media is not None:
        if media_total_bytes > 0:
            over = db.media_bytes() - media_total_bytes
            if over > 0:
                db.drop_oldest_media(over)
        removed = media.sweep(db.referenced_media())
    inbox_pruned = _in_batches(db, lambda conn: inbox.prune(conn, time.time() - inbox.DONE_TTL_SECONDS), stop)
    outbox_pruned = _in_batches(db, lambda conn: outbox.prune(conn, time.time() - outbox.SENT_TTL_SECONDS), stop)
    return MaintenanceReport(forgotten, deleted, removed, inbox_pruned, outbox_pruned)


def _in_batches(db: StorageFace, prune: Callable[[Any], int], stop: Callable[[], bool]) -> int:
    """Run one batch per transaction until a batch comes back short (or shutdown asks)."""
    total = 0
    while not stop():
        n = db.write(lambda conn, events: prune(conn))
        total += n
        if n < inbox.PRUNE_BATCH:
            break
    return total


class Maintenance:
    """The daemon's upkeep task: `run_maintenance` now and then every `interval_seconds`."""

    def __init__(
        self,
        db: StorageFace,
        retention_days: float,
        interval_seconds: float,
        media: MediaStore | None = None,
        media_total_bytes: int = 0,
    ) -> None:
        self.db, self.retention_days, self.interval = db, retention_days, interval_seconds
        self.media, self.media_total_bytes = media, media_total_bytes
        self.rounds = 0
        self._stopping = threading.Event()  # asked by a round between its batches
        self._task: asyncio.Task | None = None
        self._job: asyncio.Future | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="chinwag maintenance")

    async def stop(self) -> None:
        """Stop the schedule; a round in progress ends after its current batch and is waited for
        (its thread writes to the DB)."""
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._job is not None and not self._job.done():
            with contextlib.suppress(Exception):
                await self._job

    async def _loop(self) -> None:
        while True:
            self._job = asyncio.ensure_future(
                asyncio.to_thread(
                    run_maintenance,
                    self.db,
                    self.retention_days,
                    self._stopping.is_set,
                    self.media,
                    self.media_total_bytes,
                )
            )
            try:
                report = await asyncio.shield(self._job)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("maintenance failed")
            else:
                self.rounds += 1
                if report.sessions_deleted:
                    log.info(
                        "maintenance: deleted %d conversation(s) idle for over %g days",
                        report.sessions_deleted,
                        self.retention_days,
                    )
            await asyncio.sleep(self.interval)
