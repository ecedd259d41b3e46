"""A ScheduleStore in memory: a real store (a dict under a lock) for the tool's and the claim's
tests, so they run against the Protocol phase 2's SQL tables implement, without a database. Its
claim applies `advance`, the same reading of a claim the SQL stores use.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime
from typing import Callable

from gateway.schedules.model import IdTaken, Run, Schedule, advance
from gateway.schedules.times import Missed


class MemoryScheduleStore:
    def __init__(self) -> None:
        self.rows: dict[str, Schedule] = {}
        self._lock = threading.Lock()

    def create(self, schedule: Schedule, limit: int) -> bool:
        with self._lock:
            if schedule.id in self.rows:
                raise IdTaken(schedule.id)
            if sum(1 for row in self.rows.values() if row.owner == schedule.owner and not row.finished) >= limit:
                return False
            self.rows[schedule.id] = schedule
            return True

    def get(self, schedule_id: str) -> Schedule | None:
        return self.rows.get(schedule_id)

    def list_for_owner(self, owner: str, include_finished: bool = False) -> list[Schedule]:
        return [row for row in self.list_all(include_finished) if row.owner == owner]

    def list_all(self, include_finished: bool = False) -> list[Schedule]:
        rows = [row for row in self.rows.values() if include_finished or not row.finished]
        return sorted(rows, key=lambda row: (row.next_run_at is None, row.next_run_at or row.created_at, row.id))

    def set_enabled(self, schedule_id: str, enabled: bool, next_run_at: datetime | None) -> Schedule | None:
        with self._lock:
            row = self.rows.get(schedule_id)
            if row is None:
                return None
            row = self.rows[schedule_id] = dataclasses.replace(row, enabled=enabled, next_run_at=next_run_at)
            return row

    def cancel(self, schedule_id: str) -> bool:
        with self._lock:
            return self.rows.pop(schedule_id, None) is not None

    def claim_due(self, now: datetime, limit: int, missed: Missed) -> list[Run]:
        with self._lock:
            due = [r for r in self.rows.values() if r.enabled and r.next_run_at is not None and r.next_run_at <= now]
            due.sort(key=lambda row: (row.next_run_at, row.id))
            runs = []
            for row in due[:limit]:
                self.rows[row.id], run = advance(row, now, missed)
                if run is not None:
                    runs.append(run)
            return runs

    def delete_for_owner(self, owner: str) -> int:
        return self._delete(lambda row: row.owner == owner)

    def delete_for_chat(self, session_key: str) -> int:
        return self._delete(lambda row: row.chat.session_key == session_key)

    def _delete(self, which: Callable[[Schedule], bool]) -> int:
        with self._lock:
            gone = [key for key, row in self.rows.items() if which(row)]
            for key in gone:
                del self.rows[key]
            return len(gone)
