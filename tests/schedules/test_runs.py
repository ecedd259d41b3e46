"""Scheduled turns end to end: the model's `schedule` tool call makes a job, the due-run loop on a
test-moved wall clock claims it, the turn runs in its chat through the runner with the fake model,
and its answer leaves through the outbox; a run claimed but not delivered (a crash between the
two) is delivered once by the next start. No real waiting for the job's time: the clock is moved."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import datetime, timezone

import pytest

from gateway.runtime.due_runs import inbox_entry, scheduled_text
from gateway.schedules.clock import utc_now
from gateway.schedules.model import ChatRef, Schedule, new_id
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import next_run_after, parse_timing
from tests.fakes.gateway_harness import Gateway
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import Reply, ToolCall

START = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc).timestamp()


class HeldClock:
    """A wall clock that stands still until the test moves it; `sleep` yields for a moment of real
    time (the due-run loop polls; the test decides what time it is)."""

    def __init__(self, start: float) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0.01)


def scheduled_rows(gw: Gateway) -> list[dict]:
    sid = gw.session_id()
    assert sid is not None
    return [m for m in gw.messages(sid) if m["role"] == "user" and m["content"].startswith("[scheduled ")]


async def test_a_job_made_by_the_tool_runs_once_at_its_time_in_its_chat(tmp_path):
    clock = HeldClock(START)
    async with Gateway(tmp_path, wall_clock=clock) as gw:
        at = "2026-12-02T16:00:30+08:00"  # 30 s ahead
        gw.fake.push(Reply(tool_calls=[ToolCall("schedule", {"action": "create", "prompt": "stretch", "at": at})]))
        gw.fake.push("I will remind you.")
        assert await gw.say("remind me to stretch in 30 s") == ["I will remind you."]
        tool_result = [m for m in gw.fake.requests[1]["messages"] if m["role"] == "tool"][0]["content"]
        assert tool_result.startswith("scheduled ") and "next run" in tool_result
        job_id = tool_result.split()[1].rstrip(":")

        gw.fake.push("Time to stretch!")
        clock.t += 29
        await asyncio.sleep(0.1)  # polls before its time claim nothing
        assert gw.adapter.texts() == ["I will remind you."]
        clock.t += 2
        await wait_until(lambda: len(gw.adapter.texts()) == 2)
        await gw.runner.drain()
        assert gw.adapter.texts()[-1] == "Time to stretch!"
        [row] = scheduled_rows(gw)
        assert row["content"] == f"[scheduled {job_id}] stretch"
        assert gw.fake.requests[-1]["messages"][-1] == {"role": "user", "content": row["content"]}
        assert [h["id"] for h in gw.db.search_messages("stretch", limit=10)].count(row["id"]) == 1

        clock.t += 3600
        await asyncio.sleep(0.2)
        await gw.runner.drain()
        assert len(gw.adapter.texts()) == 2  # once
        assert gw.db.inbox_backlog() == 0 and gw.db.outbox_backlog() == 0


@pytest.mark.parametrize("timing", [{"every_minutes": 10}, {"cron": "*/10 * * * *"}], ids=["every", "cron"])
async def test_a_recurring_job_runs_each_time_and_a_late_run_says_so(tmp_path, timing):
    clock = HeldClock(START)
    async with Gateway(tmp_path, wall_clock=clock) as gw:
        await gw.say("hello")  # the chat and its session exist
        source = gw.adapter.source("100", "100", "dm")
        key = gw.store.key_for(source)
        now = utc_now(clock)
        asked: dict = {"at": None, "cron": None, "every_minutes": None, **timing}
        checked = parse_timing(timezone_name="Asia/Shanghai", now=now, min_interval_minutes=5, **asked)
        first = next_run_after(checked, now)
        assert first is not None
        job = Schedule.new(new_id(), "telegram:100", ChatRef(source, key), checked, "status report", first)
        assert FaceScheduleStore(gw.db).create(job, 20)
        for minutes in (10, 20):
            gw.fake.push(f"report {minutes}")
            clock.t = START + minutes * 60 + 1
            await wait_until(lambda: gw.adapter.texts()[-1:] == [f"report {minutes}"])
        await gw.runner.drain()
        gw.fake.push("late report")
        clock.t = START + 5 * 3600 + 120  # "down" for hours: one late run
        await wait_until(lambda: gw.adapter.texts()[-1:] == ["late report"])
        await gw.runner.drain()
        rows = [r["content"] for r in scheduled_rows(gw)]
        assert rows[:2] == [f"[scheduled {job.id}] status report"] * 2
        assert rows[2].startswith(f"[scheduled {job.id}, late: it was due ") and len(rows) == 3


async def test_a_run_claimed_before_a_crash_is_delivered_once_by_the_next_start(tmp_path):
    clock = HeldClock(START)
    async with Gateway(tmp_path, wall_clock=clock) as gw:
        await gw.say("hello")
        source = gw.adapter.source("100", "100", "dm")
        key = gw.store.key_for(source)
    # the process is gone; a claim committed (the job moved on, the run in the inbox), nothing ran
    from gateway.db import SessionDB

    db = SessionDB(tmp_path / "home" / "state.db")
    now = utc_now(clock)
    timing = parse_timing(at=None, cron=None, every_minutes=60, timezone_name="UTC", now=now, min_interval_minutes=5)
    first = next_run_after(timing, now)
    assert first is not None
    job = Schedule.new(new_id(), "telegram:100", ChatRef(source, key), timing, "hourly", first)
    store = FaceScheduleStore(db, inbox_entry)
    assert store.create(job, 20)
    clock.t = first.timestamp()
    [run] = store.claim_due(utc_now(clock), 10, "run_once")
    assert json.loads(db.inbox_unfinished()[0]["message"])["text"] == scheduled_text(run)
    db.close()

    async with Gateway(tmp_path, wall_clock=clock) as gw:
        gw.fake.push("hourly done")
        await wait_until(lambda: "hourly done" in gw.adapter.texts())
        await asyncio.sleep(0.2)  # the loop polls on: the run is not claimed again
        await gw.runner.drain()
        assert gw.adapter.texts().count("hourly done") == 1
        assert len(scheduled_rows(gw)) == 1 and gw.db.inbox_backlog() == 0


async def test_schedules_command_lists_pauses_resumes_and_cancels_the_persons_own_jobs(tmp_path):
    clock = HeldClock(START)
    async with Gateway(tmp_path, wall_clock=clock) as gw:
        await gw.say("hello")
        source = gw.adapter.source("100", "100", "dm")
        now = utc_now(clock)
        timing = parse_timing(
            at=None, cron=None, every_minutes=30, timezone_name="UTC", now=now, min_interval_minutes=5
        )
        first = next_run_after(timing, now)
        assert first is not None
        job = Schedule.new(new_id(), "telegram:100", ChatRef(source, gw.store.key_for(source)), timing, "water", first)
        others = dataclasses.replace(  # paused: only the commands touch it
            Schedule.new(new_id(), "telegram:7", job.chat, timing, "theirs", first), enabled=False
        )
        store = FaceScheduleStore(gw.db)
        assert store.create(job, 20) and store.create(others, 20)
        [listing] = await gw.say("/schedules")
        assert job.id in listing and "every 30 min" in listing and others.id not in listing
        assert "Paused" in (await gw.say(f"/schedules pause {job.id.upper()}"))[0]
        clock.t += 3 * 3600
        await asyncio.sleep(0.1)
        await gw.runner.drain()
        assert scheduled_rows(gw) == []  # paused: no run
        [resumed] = await gw.say(f"/schedules resume {job.id}")
        stored = store.get(job.id)
        assert "Resumed" in resumed and stored is not None and stored.next_run_at is not None
        assert stored.next_run_at.timestamp() > clock.t  # from now: the pause's runs are not late runs
        assert "no scheduled job" in (await gw.say(f"/schedules cancel {others.id}"))[0]
        assert "Cancelled" in (await gw.say(f"/schedules cancel {job.id}"))[0] and store.get(job.id) is None
        assert store.get(others.id) is not None


async def test_a_person_no_longer_allowed_to_talk_gets_no_scheduled_run(tmp_path):
    clock = HeldClock(START)
    platforms = {"telegram": {"token": "t", "allowed_users": ["100"]}}
    async with Gateway(tmp_path, wall_clock=clock, platforms=platforms) as gw:
        store = FaceScheduleStore(gw.db)
        now = utc_now(clock)
        timing = parse_timing(
            at=None, cron=None, every_minutes=10, timezone_name="UTC", now=now, min_interval_minutes=5
        )
        first = next_run_after(timing, now)
        assert first is not None
        jobs = {}
        for user in ("100", "200"):  # 200 made a job, then was taken off allowed_users
            source = gw.adapter.source(user, user, "dm")
            jobs[user] = Schedule.new(
                new_id(), f"telegram:{user}", ChatRef(source, gw.store.key_for(source)), timing, f"for {user}", first
            )
            assert store.create(jobs[user], 20)
        clock.t = first.timestamp() + 1
        await wait_until(lambda: gw.adapter.texts(chat_id="100") != [])
        await asyncio.sleep(0.2)
        await gw.runner.drain()
        assert gw.adapter.texts(chat_id="200") == []
        moved = store.get(jobs["200"].id)
        assert moved is not None and moved.next_run_at is not None and moved.next_run_at > first  # claimed ...
        assert moved.runs == 0 and moved.last_run_at is None  # ... not run
        assert gw.db.inbox_backlog() == 0
