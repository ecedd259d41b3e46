"""A scheduled job as a row (`Schedule`), its short id, the chat it answers in, and `ScheduleStore`:
what the storage of both backends offers the tool, the commands, the CLI and the due-run loop.

Ids are typed back by people (`/schedules cancel k7m2qx`), so they are short and unambiguous: six
characters from 32 (digits and lower-case letters without 0, 1, l, o), about 10^9 ids, far beyond
20 jobs a person; read case-insensitively. A clash is refused by the table's primary key (IdTaken)
and the id drawn again.

`advance` is the one reading of a claim (which row changes how), used by every store, so the SQL of
both backends and the in-memory store of the tests cannot disagree about missed runs.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Protocol

from gateway.language import _
from gateway.schedules.times import Kind, Missed, Timing, describe, local_text, plan_run
from gateway.source import SessionSource

ID_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"
ID_LENGTH = 6


class IdTaken(Exception):
    """`create` drew an id another job has; the caller draws again."""


def new_id(choice: Callable[[str], str] = secrets.choice) -> str:
    return "".join(choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def normalize_id(text: object) -> str | None:
    """An id as typed (any case, spaces around) in its stored form; None when it cannot be one."""
    if not isinstance(text, str):
        return None
    value = text.strip().lower()
    if len(value) != ID_LENGTH or any(c not in ID_ALPHABET for c in value):
        return None
    return value


def owner_of(source: SessionSource) -> str:
    """The person a job belongs to: "{platform}:{person id}" (the union id when known)."""
    person = source.person_id
    if not person:
        raise ValueError("a scheduled job needs a person; this message has no user id")
    return f"{source.platform.value}:{person}"


@dataclass(frozen=True)
class ChatRef:
    """Where a job's turns run and their answers go: the chat as the person last wrote in it, and
    its session key (the conversation the scheduled message joins)."""

    source: SessionSource
    session_key: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.to_dict(), "session_key": self.session_key}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ChatRef":
        return cls(SessionSource.from_dict(data["source"]), str(data["session_key"]))


@dataclass(frozen=True)
class Schedule:
    """One row of the `schedules` table. Instants are aware UTC datetimes; `next_run_at` None means
    a one-off job that has run (kept for `list --all` until its owner or a prune removes it)."""

    id: str
    owner: str
    chat: ChatRef
    kind: Kind
    timezone: str
    prompt: str
    created_at: datetime
    next_run_at: datetime | None
    at: datetime | None = None
    cron: str | None = None
    every_minutes: int | None = None
    last_run_at: datetime | None = None
    runs: int = 0
    enabled: bool = True

    @classmethod
    def new(
        cls, schedule_id: str, owner: str, chat: ChatRef, timing: Timing, prompt: str, next_run_at: datetime
    ) -> "Schedule":
        return cls(
            id=schedule_id,
            owner=owner,
            chat=chat,
            kind=timing.kind,
            timezone=timing.timezone,
            prompt=prompt,
            created_at=timing.since,
            next_run_at=next_run_at,
            at=timing.at,
            cron=timing.cron,
            every_minutes=timing.every_minutes,
        )

    @property
    def timing(self) -> Timing:
        return Timing(self.kind, self.timezone, self.created_at, self.at, self.cron, self.every_minutes)

    @property
    def finished(self) -> bool:
        return self.next_run_at is None


@dataclass(frozen=True)
class Run:
    """A claimed run: the job as the claim left it, the instant it was due, and whether it is late
    (the turn says so). `event_id` is its inbox key, unique per (job, due instant); `inbox_id` the
    inbox row a store's claim added for it."""

    schedule: Schedule
    due_at: datetime
    late: bool
    inbox_id: int | None = None

    @property
    def event_id(self) -> str:
        return f"schedule:{self.schedule.id}:{int(self.due_at.timestamp())}"


def summary(job: Schedule) -> str:
    """One line a person reads in a listing: id, timing, next run in the job's zone, the prompt (in
    the current language: the CLI's is English)."""
    when = _("paused") if not job.enabled else _("finished")
    if job.enabled and job.next_run_at is not None:
        when = _("next run {when}", when=local_text(job.next_run_at, job.timezone))
    return f"{job.id} · {describe(job.timing)} · {when} · {job.prompt[:120]}"


def public_view(job: Schedule) -> dict[str, Any]:
    """The job as JSON for the operator (`chinwag schedules list --json`, the console's API):
    instants in ISO-8601, the chat as platform, chat id and session key."""

    def iso(instant: datetime | None) -> str | None:
        return instant.isoformat() if instant is not None else None

    source = job.chat.source
    return {
        "id": job.id,
        "owner": job.owner,
        "prompt": job.prompt,
        "kind": job.kind,
        "at": iso(job.at),
        "cron": job.cron,
        "every_minutes": job.every_minutes,
        "timezone": job.timezone,
        "timing": describe(job.timing),
        "next_run_at": iso(job.next_run_at),
        "last_run_at": iso(job.last_run_at),
        "runs": job.runs,
        "enabled": job.enabled,
        "created_at": iso(job.created_at),
        "chat": {"platform": source.platform.value, "chat_id": source.chat_id, "session_key": job.chat.session_key},
    }


def advance(schedule: Schedule, now: datetime, missed: Missed) -> tuple[Schedule, Run | None]:
    """What claiming a due job at `now` writes and starts: the row moved to its next run (and, when
    it runs, `last_run_at` and `runs` counted) and the Run, or None when `missed: skip` drops it."""
    assert schedule.next_run_at is not None and schedule.next_run_at <= now, "only a due job is claimed"
    plan = plan_run(schedule.timing, schedule.next_run_at, now, missed)
    if not plan.run:
        return dataclasses.replace(schedule, next_run_at=plan.next_run_at), None
    row = dataclasses.replace(schedule, next_run_at=plan.next_run_at, last_run_at=now, runs=schedule.runs + 1)
    return row, Run(row, plan.due_at, plan.late)


class ScheduleStore(Protocol):
    """The `schedules` table, on both backends (phase 2: gateway/storage, through the SessionDB face).
    Methods are plain and synchronous like the rest of storage; callers on the event loop run them
    in a worker thread."""

    def create(self, schedule: Schedule, limit: int) -> bool:
        """Insert unless its owner already has `limit` unfinished jobs (counted in the same
        transaction, so two concurrent creates cannot both pass); False when refused, IdTaken when
        another job has its id."""
        ...

    def get(self, schedule_id: str) -> Schedule | None: ...

    def list_for_owner(self, owner: str, include_finished: bool = False) -> list[Schedule]:
        """The owner's jobs by next run (finished one-offs last, only with include_finished)."""
        ...

    def list_all(self, include_finished: bool = False) -> list[Schedule]:
        """Everyone's jobs (the admin's CLI and console), ordered as list_for_owner."""
        ...

    def set_enabled(self, schedule_id: str, enabled: bool, next_run_at: datetime | None) -> Schedule | None:
        """Pause or resume; a resume passes the next run from now (the pause's runs are not missed
        runs). None when there is no such job."""
        ...

    def cancel(self, schedule_id: str) -> bool:
        """Delete the job; False when there was none."""
        ...

    def claim_due(self, now: datetime, limit: int, missed: Missed) -> list[Run]:
        """In ONE transaction: up to `limit` enabled jobs with next_run_at <= now, oldest first,
        each rewritten as `advance` says; the runs to start. Phase 2 also enqueues each run's
        message in the inbox (key `Run.event_id`) in that transaction, and on Postgres takes the rows
        FOR UPDATE SKIP LOCKED, so two replicas never claim one run and a crash never loses one."""
        ...

    def delete_for_owner(self, owner: str) -> int:
        """Remove a person's jobs (pruning their data); how many."""
        ...

    def delete_for_chat(self, session_key: str) -> int:
        """Remove the jobs answering in a conversation (deleting its session); how many."""
        ...
