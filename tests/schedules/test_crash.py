"""The one real-time test of scheduled turns: a job 3 s ahead, the daemon (a real `chinwag run`)
SIGKILLed 1 s before it is due and started again: the run is delivered exactly once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest

from gateway.db import SessionDB
from gateway.schedules.model import ChatRef, Schedule, new_id
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import Timing
from gateway.source import SessionSource
from tests.fakes.daemon import Daemon, settled
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.runtime.test_delivery_crash import WEBHOOK, post_until_acknowledged, telegram_platform, update_for


def first_entry(home) -> tuple[SessionSource, str]:
    """The chat of the first inbound message, as the inbox stored it: its source and session key."""
    conn = sqlite3.connect(home / "state.db")
    try:
        message, key = conn.execute("SELECT message, chat_key FROM inbox ORDER BY id LIMIT 1").fetchone()
    finally:
        conn.close()
    return SessionSource.from_dict(json.loads(message)["source"]), key


@pytest.mark.slow
async def test_a_daemon_killed_a_second_before_a_run_delivers_it_once_after_the_restart(tmp_path):
    tg = await FakeTelegram().start()
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemon = Daemon(tmp_path, llm, telegram_platform(tg))
            await daemon.start()
            update, text = update_for(tg, 1000, 0)
            await post_until_acknowledged(http, daemon.url(WEBHOOK), update, [])
            await wait_until(lambda: any(m["text"] == "echo: " + text for m in tg.sent()), 30)

            source, key = first_entry(daemon.home)
            due = datetime.now(timezone.utc) + timedelta(seconds=3)
            timing = Timing("once", "UTC", datetime.now(timezone.utc), at=due)
            job = Schedule.new(new_id(), f"telegram:{source.user_id}", ChatRef(source, key), timing, "stretch", due)
            db = SessionDB(daemon.home / "state.db")
            try:
                assert FaceScheduleStore(db).create(job, 20)
            finally:
                db.close()

            await asyncio.sleep(max(0.0, due.timestamp() - 1 - time.time()))
            await daemon.kill()  # a second before the run is due
            await daemon.start()
            expected = f"echo: [scheduled {job.id}] stretch"
            await wait_until(lambda: any(m["text"] == expected for m in tg.sent()), 30)
            await wait_until(lambda: settled(tmp_path), 30)
            await asyncio.sleep(2)  # polls go on past the run: nothing claims it again
            assert [m["text"] for m in tg.sent()].count(expected) == 1
            assert await daemon.terminate() == 0
    finally:
        await tg.stop()
