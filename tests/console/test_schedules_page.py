"""The console's schedules page and /api/v1/schedules, on a real ops server over a real SessionDB:
everyone's jobs (the console is the operator's), markup-safe, finished one-offs only when asked."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

from gateway.schedules.model import ChatRef, Schedule, new_id
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import Timing
from gateway.source import SessionSource

NOW = datetime.now(timezone.utc)
CHAT = ChatRef(SessionSource("telegram", "5", "dm", user_id="5"), "agent:main:telegram:dm:5")


async def test_the_schedules_page_and_api_list_everyones_jobs(serve, db) -> None:
    store = FaceScheduleStore(db)
    later = NOW + timedelta(hours=2)
    mine = Schedule.new(new_id(), "telegram:5", CHAT, Timing("once", "UTC", NOW, at=later), "<b>call</b> Mia", later)
    theirs = Schedule.new(new_id(), "feishu:ou_9", CHAT, Timing("every", "UTC", NOW, every_minutes=60), "water", later)
    done = dataclasses.replace(Schedule.new(new_id(), "telegram:5", CHAT, mine.timing, "old", later), next_run_at=None)
    for job in (mine, theirs, done):
        assert store.create(job, 20)
    served = await serve()
    async with served.session() as http:
        async with http.get("/console/schedules") as resp:
            assert resp.status == 200
            page = await resp.text()
        assert mine.id in page and theirs.id in page and done.id not in page
        assert "&lt;b&gt;call&lt;/b&gt; Mia" in page and "<b>call</b>" not in page
        async with http.get("/api/v1/schedules?all=1") as resp:
            listed = (await resp.json())["schedules"]
    assert {row["id"] for row in listed} == {mine.id, theirs.id, done.id}
    first = next(row for row in listed if row["id"] == mine.id)
    assert datetime.fromisoformat(first["next_run_at"]) == later and first["kind"] == "once" and first["enabled"]
