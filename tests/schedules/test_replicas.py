"""Two replicas on one Postgres (in-process runners, build_runner with SharedLeases, their own
connections and adapters), both polling for due runs on one held wall clock: each run of a job
fires on one of them, once, and its answer is sent once."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.runtime.leases import SharedLeases
from gateway.schedules.clock import utc_now
from gateway.schedules.model import ChatRef, Schedule, new_id
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import next_run_after, parse_timing
from gateway.service.app import build_runner, build_store
from gateway.storage.postgres.db import PostgresSessionDB
from tests.fakes.chat_adapter import ChatAdapter
from tests.fakes.gateway_harness import make_config
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI
from tests.schedules.test_runs import START, HeldClock

pytestmark = pytest.mark.slow  # replicas, as tests/storage/postgres's (CI runs them)


async def test_two_replicas_run_each_scheduled_run_once(pg_dsn, tmp_path):
    clock = HeldClock(START)
    dbs = [PostgresSessionDB(pg_dsn) for _ in range(2)]
    runners, adapters = [], []
    async with FakeOpenAI() as fake:
        try:
            for i, db in enumerate(dbs):
                config = make_config(tmp_path / f"home{i}", fake)
                adapter = ChatAdapter("telegram")
                store = build_store(config, db, None, time.time)
                leases = SharedLeases(db, pg_dsn, heartbeat=0.2)
                runners.append(build_runner(config, db, store, [adapter], leases=leases, wall_clock=clock))
                adapters.append(adapter)
            for runner in runners:
                await runner.start()
            source = adapters[0].source("100", "100", "dm")
            key = runners[0].store.key_for(source)
            now = utc_now(clock)
            timing = parse_timing(
                at=None, cron=None, every_minutes=10, timezone_name="UTC", now=now, min_interval_minutes=5
            )
            first = next_run_after(timing, now)
            assert first is not None
            job = Schedule.new(new_id(), "telegram:100", ChatRef(source, key), timing, "tick", first)
            assert FaceScheduleStore(dbs[0]).create(job, 20)
            expected = f"echo: [scheduled {job.id}] tick"

            def sent() -> list[str]:
                return [text for adapter in adapters for text in adapter.texts() if text == expected]

            for runs in (1, 2, 3):
                clock.t = START + runs * 600 + 1
                await wait_until(lambda runs=runs: len(sent()) >= runs, 20)
                await asyncio.sleep(0.3)  # both keep polling: nothing more
                assert len(sent()) == runs
            inbox = dbs[0].read(lambda c: c.execute("SELECT count(*) FROM inbox").fetchone()[0])
            assert inbox == 3
        finally:
            for runner in runners:
                await runner.stop()
            for db in dbs:
                db.close()
