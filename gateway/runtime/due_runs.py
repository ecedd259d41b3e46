"""The due-run loop (DESIGN §16): about once a second, claim the scheduled runs that are due and
hand each to its chat like an inbound message.

A claim (gateway.schedules.store) moves the job on and adds the run's message to the inbox in one
transaction, so from there on a run is an inbox entry: its chat's lane runs it as a turn whose
user message is the prompt behind a `[scheduled ID]` marker (stored with role user like any
message, so recall finds it and a reader sees it was not typed), its reply leaves through the
outbox, and a crash before the turn finishes leaves the entry for the next start's take-up (the
interrupted-turn policy applies). On replicas every replica polls; the rows' locks make one win,
and the winner hands the chat to whoever holds its lease (gateway.runtime.intake `committed`).

Why poll and not sleep until the next run: a job created, resumed or `run-now`ed on another
process, or a replica's clock, would need a wake-up channel; a one-row index probe a second is
cheaper than that and bounds the start of a run to ~1 s after its time (the issue asks for 5 s).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Protocol

from gateway.db import StorageFace
from gateway.runtime.delivery import encode_message
from gateway.schedules.clock import WallClock, utc_now
from gateway.schedules.model import Run
from gateway.schedules.settings import ScheduleSettings
from gateway.schedules.store import FaceScheduleStore, InboxEntry
from gateway.schedules.times import local_text
from gateway.source import SessionSource
from platforms.base import InboundMessage

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
CLAIM_BATCH = 50  # runs claimed per transaction; more due at once are taken by the next polls


class RunHandoff(Protocol):
    def committed(self, key: str, msg: InboundMessage) -> None:
        """An entry committed outside intake (a claimed run) joins its chat."""


def scheduled_text(run: Run) -> str:
    """The turn's user message: the prompt behind a marker naming the job (and, late, its time)."""
    job = run.schedule
    late = f", late: it was due {local_text(run.due_at, job.timezone)}" if run.late else ""
    return f"[scheduled {job.id}{late}] {job.prompt}"


def scheduled_message(run: Run) -> InboundMessage:
    """The run as the message its chat answers. No platform message id: the reply is not a reply
    to a message (there is none to quote), it is sent into the chat."""
    return InboundMessage(
        source=run.schedule.chat.source,
        text=scheduled_text(run),
        message_id="",
        timestamp=run.due_at.timestamp(),
        inbox_id=run.inbox_id,
    )


def inbox_entry(run: Run) -> InboxEntry:
    chat = run.schedule.chat
    return InboxEntry(chat.source.platform.value, chat.session_key, encode_message(scheduled_message(run)))


class DueRuns:
    """Claims due runs of `db` every POLL_SECONDS of `clock` and hands them to `handoff`. A run
    whose person may no longer talk to the bot (`allowed`, asked at the claim) is claimed (the job
    moves on) but not run: the access rules of today hold, not those of the day it was made."""

    def __init__(
        self,
        db: StorageFace,
        handoff: RunHandoff,
        settings: ScheduleSettings,
        clock: WallClock,
        allowed: Callable[[SessionSource], bool],
    ) -> None:
        self.store = FaceScheduleStore(db, self._entry)
        self.handoff = handoff
        self.settings = settings
        self.clock = clock
        self.allowed = allowed

    def _entry(self, run: Run) -> InboxEntry | None:
        source = run.schedule.chat.source
        if not self.allowed(source):
            log.info("scheduled run %s skipped: its person may no longer talk here", run.event_id)
            return None
        return inbox_entry(run)

    async def poll(self) -> list[Run]:
        """One claim: the runs it started (each already handed to its chat)."""
        runs = await asyncio.to_thread(self.store.claim_due, utc_now(self.clock), CLAIM_BATCH, self.settings.missed)
        for run in runs:
            log.info("scheduled run %s of job %s due %s", run.event_id, run.schedule.id, run.due_at.isoformat())
            self.handoff.committed(run.schedule.chat.session_key, scheduled_message(run))
        return runs

    async def run(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:  # a database hiccup: the rows are still due, the next poll claims them
                log.exception("claiming scheduled runs failed")
            await self.clock.sleep(POLL_SECONDS)
