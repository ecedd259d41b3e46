"""`store`: the same ScheduleStore cases on the memory store and on the `schedules` table of SQLite
and of Postgres (gateway/schedules/store.py), so the three cannot drift apart."""

from __future__ import annotations

import pytest

from gateway.db import SessionDB
from gateway.schedules.model import Run
from gateway.schedules.store import FaceScheduleStore, InboxEntry
from tests.schedules.memory_store import MemoryScheduleStore


def plain_entry(run: Run) -> InboxEntry:
    """A run's inbox row with the prompt as its message (the runtime's encoding is tested there)."""
    return InboxEntry(run.schedule.chat.source.platform.value, run.schedule.chat.session_key, run.schedule.prompt)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryScheduleStore()
        return
    if request.param == "postgres":
        from gateway.storage.postgres.db import PostgresSessionDB

        db = PostgresSessionDB(request.getfixturevalue("pg_dsn"))
    else:
        db = SessionDB(tmp_path / "state.db")
    yield FaceScheduleStore(db, plain_entry)
    db.close()
