"""`FaceScheduleStore`: the ScheduleStore of both backends, over the storage face's `read` and
`write` and the one SQL of gateway/storage/schedules.py, so SQLite and Postgres run the same code
and the claim is `advance` as in every store.

The claim is the exactly-once: in ONE write transaction it takes the due rows (on Postgres FOR
UPDATE SKIP LOCKED, so replicas claiming at once take different rows), rewrites each as `advance`
says, and adds each run's message to the inbox under `Run.event_id`. From that commit on the run is
an inbox entry like any inbound message: a crash before its turn finishes leaves it unfinished and
the next start (or the replica that takes the chat) runs it; the inbox's unique key refuses a second
copy of a run. Before the commit nothing happened: the rows are still due. What the inbox holds
(the encoded message) is the runtime's; the store is handed `entry_of` by whoever claims.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from typing import Any, Callable

from gateway.db import StorageFace
from gateway.schedules.model import ChatRef, IdTaken, Run, Schedule, advance
from gateway.schedules.times import Missed
from gateway.storage import inbox, schedules
from gateway.storage.conn import Conn
from gateway.storage.events import Events


@dataclasses.dataclass(frozen=True)
class InboxEntry:
    """A run's inbox row: the platform and chat key it is queued under, and the encoded message."""

    platform: str
    chat_key: str
    message: str


EntryOf = Callable[[Run], InboxEntry | None]  # None: the run is not started (the job moves on)


def _epoch(instant: datetime | None) -> float | None:
    return instant.timestamp() if instant is not None else None


def _instant(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(float(seconds), timezone.utc) if seconds is not None else None


def to_row(job: Schedule) -> dict[str, Any]:
    return {
        "id": job.id,
        "owner": job.owner,
        "chat": json.dumps(job.chat.to_dict(), ensure_ascii=False),
        "session_key": job.chat.session_key,
        "kind": job.kind,
        "timezone": job.timezone,
        "prompt": job.prompt,
        "created_at": job.created_at.timestamp(),
        "next_run_at": _epoch(job.next_run_at),
        "at": _epoch(job.at),
        "cron": job.cron,
        "every_minutes": job.every_minutes,
        "last_run_at": _epoch(job.last_run_at),
        "runs": job.runs,
        "enabled": int(job.enabled),
    }


def from_row(row: dict[str, Any]) -> Schedule:
    created = _instant(row["created_at"])
    assert created is not None
    return Schedule(
        id=row["id"],
        owner=row["owner"],
        chat=ChatRef.from_dict(json.loads(row["chat"])),
        kind=row["kind"],
        timezone=row["timezone"],
        prompt=row["prompt"],
        created_at=created,
        next_run_at=_instant(row["next_run_at"]),
        at=_instant(row["at"]),
        cron=row["cron"],
        every_minutes=row["every_minutes"],
        last_run_at=_instant(row["last_run_at"]),
        runs=int(row["runs"]),
        enabled=bool(row["enabled"]),
    )


class FaceScheduleStore:
    """The `schedules` table of `db` (either backend). `entry_of` makes a run's inbox row; only the
    claim needs it (the due-run loop passes it; the tool, the commands and the CLI do not claim)."""

    def __init__(self, db: StorageFace, entry_of: EntryOf | None = None) -> None:
        self.db = db
        self.entry_of = entry_of

    def create(self, schedule: Schedule, limit: int) -> bool:
        row = to_row(schedule)
        created = self.db.write(lambda conn, events: schedules.insert(conn, row, limit))
        if created == "taken":
            raise IdTaken(schedule.id)
        return created == "created"

    def get(self, schedule_id: str) -> Schedule | None:
        row = self.db.read(lambda conn: schedules.get(conn, schedule_id))
        return from_row(row) if row else None

    def list_for_owner(self, owner: str, include_finished: bool = False) -> list[Schedule]:
        return self._list(owner, include_finished)

    def list_all(self, include_finished: bool = False) -> list[Schedule]:
        return self._list(None, include_finished)

    def _list(self, owner: str | None, include_finished: bool) -> list[Schedule]:
        rows = self.db.read(lambda conn: schedules.listing(conn, owner, include_finished))
        return [from_row(row) for row in rows]

    def set_enabled(self, schedule_id: str, enabled: bool, next_run_at: datetime | None) -> Schedule | None:
        when = _epoch(next_run_at)
        row = self.db.write(lambda conn, events: schedules.set_enabled(conn, schedule_id, enabled, when))
        return from_row(row) if row else None

    def cancel(self, schedule_id: str) -> bool:
        return self.db.write(lambda conn, events: schedules.delete(conn, "id", schedule_id)) > 0

    def claim_due(self, now: datetime, limit: int, missed: Missed) -> list[Run]:
        entry_of = self.entry_of
        assert entry_of is not None, "a claiming store is given entry_of"

        def claim(conn: Conn, events: Events) -> list[Run]:
            runs = []
            for row in schedules.due(conn, now.timestamp(), limit):
                job = from_row(row)
                moved, run = advance(job, now, missed)
                entry = entry_of(run) if run is not None else None
                if entry is None:  # not run: the job moves on and counts no run
                    moved = dataclasses.replace(moved, runs=job.runs, last_run_at=job.last_run_at)
                schedules.record_claim(conn, to_row(moved))
                if run is None or entry is None:
                    continue
                entry_id = inbox.add(conn, entry.platform, run.event_id, entry.chat_key, entry.message, now.timestamp())
                if entry_id is not None:  # None: this run is in the inbox already; it runs once
                    runs.append(dataclasses.replace(run, inbox_id=entry_id))
            return runs

        return self.db.write(claim)

    def delete_for_owner(self, owner: str) -> int:
        return self.db.write(lambda conn, events: schedules.delete(conn, "owner", owner))

    def delete_for_chat(self, session_key: str) -> int:
        return self.db.write(lambda conn, events: schedules.delete(conn, "session_key", session_key))
