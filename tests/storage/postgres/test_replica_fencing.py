"""Gaps the replica protocol left, pinned on a real private Postgres with in-process runners
(gateway.service.app.build_runner, the ChatAdapter, FakeOpenAI): a stale replica's command is
refused at its commit like a turn, a held chat's entry committed late with a lower id is still
run when its wake-up was lost, and across a registry lost and regained (a Postgres restart) a
chat's queue is neither lost nor overtaken by what the old lease had under way."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.runtime.delivery import encode_message
from gateway.runtime.leases import SharedLeases
from gateway.service.app import build_runner, build_store
from gateway.storage import inbox
from gateway.storage.postgres import replicas
from gateway.storage.postgres.connection import Connection
from gateway.storage.postgres.db import PostgresSessionDB
from tests.fakes.chat_adapter import ChatAdapter
from tests.fakes.gateway_harness import make_config
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow  # left out of a quick local run (`pytest -m "not slow"`); CI runs it

QUIET = 60.0  # a heartbeat that never comes in a test: no renewal, no poll unless asked


def replica(tmp_path: Path, db: PostgresSessionDB, dsn: str, fake: FakeOpenAI, heartbeat: float = QUIET) -> Any:
    config = make_config(tmp_path / "home", fake)
    adapter = ChatAdapter("telegram")
    store = build_store(config, db, None, time.time)
    runner = build_runner(config, db, store, [adapter], leases=SharedLeases(db, dsn, heartbeat=heartbeat))
    return runner, adapter


def count(db: PostgresSessionDB, sql: str, *args: Any) -> int:
    return int(db.read(lambda c: c.execute(sql, args).fetchone()[0]))


async def held_after_hello(runner: Any, adapter: ChatAdapter) -> str:
    """The key of the chat "hello" was answered in; this replica holds it."""
    await adapter.inject("hello")
    await runner.drain()
    key = runner.store.key_for(adapter.source("100", "100", "dm"))
    assert runner.leases.holds(key)
    return key


async def registry_lost_and_regained(leases: SharedLeases, dsn: str) -> None:
    """The replica's registry session ends, as at a server restart: every lease is given up; returns
    once it has registered again."""
    registered = leases.replica_id
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s",
            (replicas.REPLICA_LOCKS,),
        )
    await wait_until(lambda: leases.replica_id not in ("", registered), 30)


async def taken_over(db: PostgresSessionDB, dsn: str, key: str) -> replicas.Registry:
    """Another replica claims `key` (its lease expired unnoticed: this one has not beaten since)."""
    other = replicas.Registry(dsn)
    other_id = await other.open()
    db.write(lambda c, e: c.execute("UPDATE chat_leases SET expires_at = 0 WHERE chat_key = ?", (key,)))
    assert db.write(replicas.op_claim(key, other_id)) is not None
    return other


async def test_a_stale_replicas_new_is_refused_and_sends_nothing(db, pg_dsn, tmp_path):
    async with FakeOpenAI() as fake:
        runner, adapter = replica(tmp_path, db, pg_dsn, fake)
        await runner.start()
        other = None
        try:
            fake.push("hello back")
            await adapter.inject("hello")
            await runner.drain()
            assert adapter.texts() == ["hello back"]
            key = runner.store.key_for(adapter.source("100", "100", "dm"))
            before = runner.store.get(key).session_id
            other = await taken_over(db, pg_dsn, key)
            assert runner.leases.holds(key)  # this replica has not heard of it yet

            await adapter.inject("/new")
            await runner.drain()
            assert adapter.texts() == ["hello back"]  # nothing sent
            assert runner.store.get(key).session_id == before  # the key did not move
            assert count(db, "SELECT count(*) FROM sessions") == 1
            assert count(db, "SELECT count(*) FROM inbox WHERE done_at IS NULL") == 1  # the holder's to run
            assert count(db, "SELECT count(*) FROM outbox") == 1
        finally:
            await runner.stop()
            if other is not None:
                await other.close()


async def test_a_stale_replicas_undo_retry_compress_and_title_change_nothing(db, pg_dsn, tmp_path):
    async with FakeOpenAI() as fake:
        runner, adapter = replica(tmp_path, db, pg_dsn, fake)
        await runner.start()
        other = None
        try:
            fake.push("hello back")
            await adapter.inject("hello")
            await runner.drain()
            key = runner.store.key_for(adapter.source("100", "100", "dm"))
            other = await taken_over(db, pg_dsn, key)
            for command in ("/undo", "/retry", "/compress", "/title Mongolia trip"):
                await adapter.inject(command)
                await runner.drain()
            assert adapter.texts() == ["hello back"]
            assert count(db, "SELECT count(*) FROM messages WHERE active = 1") == 2
            assert count(db, "SELECT count(*) FROM sessions WHERE title IS NOT NULL") == 0
            assert count(db, "SELECT count(*) FROM sessions") == 1  # not compressed into a child
            assert count(db, "SELECT count(*) FROM messages") == 2  # nor retried
        finally:
            await runner.stop()
            if other is not None:
                await other.close()


async def test_an_entry_committed_late_with_a_lower_id_is_run_though_its_wake_up_was_lost(db, pg_dsn, tmp_path):
    """Two replicas admit to one chat at once: B's entry takes its id first but commits after A's,
    and B's NOTIFY is lost. The holder's poll must still find it (it used to look only for an id
    above the newest it had seen, and the entry waited for the chat's next message)."""
    async with FakeOpenAI() as fake:
        runner, adapter = replica(tmp_path, db, pg_dsn, fake)
        await runner.start()
        try:
            key = await held_after_hello(runner, adapter)

            with psycopg.connect(pg_dsn) as raw:  # B's admission: its id now, its commit later
                late = adapter.message("admitted on B")
                late_id = inbox.add(Connection(raw), "telegram", late.message_id, key, encode_message(late), 1.0)
                fake.gate = asyncio.Event()
                await adapter.inject("admitted on A")  # a higher id, committed first, running here
                await fake.wait_requests(2)
                await runner.leases.poll()  # a poll while A's entry is open sees only it
                await runner.leases.settled()
                raw.commit()  # B's entry is committed; its wake-up never arrives
            assert late_id is not None
            fake.gate.set()
            await runner.drain()
            assert adapter.texts() == ["echo: hello", "echo: admitted on A"]

            await runner.leases.poll()  # the next poll: B's entry is open, with an id below A's
            await runner.leases.settled()
            await runner.drain()
            assert adapter.texts() == ["echo: hello", "echo: admitted on A", "echo: admitted on B"]
        finally:
            await runner.stop()


async def test_a_turn_refused_for_a_lease_lost_keeps_the_queue_the_lease_claimed_again_read(db, pg_dsn, tmp_path):
    """Postgres restarted under a turn: the registry's session ended (every lease given up), the
    replica registered again and claimed the chat anew, its take-up queuing the chat's open entries
    behind the turn. The turn's commit is refused (it was fenced with the old lease); that must not
    drop the queue the new lease read, as it did: nothing read those entries again while the chat
    stayed here (or only when its next message came, after a reply of another that had survived)."""
    async with FakeOpenAI() as fake:
        runner, adapter = replica(tmp_path, db, pg_dsn, fake)
        await runner.start()
        try:
            key = await held_after_hello(runner, adapter)
            fake.gate = asyncio.Event()
            await adapter.inject("first")  # its turn waits for the model, fenced with the lease held now
            await fake.wait_requests(2)
            await registry_lost_and_regained(runner.leases, pg_dsn)
            assert not runner.leases.holds(key)
            await adapter.inject("second")  # claims the chat again: both open entries are queued
            await wait_until(lambda: runner.leases.holds(key) and runner.queue_depth() == 2, 30)
            fake.gate.set()  # the turn's commit is refused: its lease is gone
            await runner.drain()
            assert adapter.texts() == ["echo: hello", "echo: first", "echo: second"]
        finally:
            await runner.stop()


async def test_a_message_being_accepted_when_its_chats_lease_went_does_not_run_before_older_ones(pg_dsn, tmp_path):
    """The chat's queue is dropped when its lease goes (the registry lost at a Postgres restart)
    while the lane waits to accept a message (its reader's language, read while storage fails).
    That message must go with the queue: it used to be queued once accepted, and ran under the
    lease claimed again ahead of the older entries that lease's take-up read (and ran twice)."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # for the connections made from now on
        admin.execute(f"ALTER DATABASE {admin.info.dbname} SET lock_timeout = '300ms'")
    db = PostgresSessionDB(pg_dsn)
    async with FakeOpenAI() as fake:
        runner, adapter = replica(tmp_path, db, pg_dsn, fake)
        await runner.start()
        try:
            key = await held_after_hello(runner, adapter)
            fake.gate = asyncio.Event()
            await adapter.inject("running")  # its turn waits for the model
            await fake.wait_requests(2)
            await adapter.inject("waiting")  # accepted, queued behind it
            await wait_until(lambda: runner.queue_depth() == 1, 30)
            with psycopg.connect(pg_dsn) as locker:
                locker.execute("LOCK TABLE person_settings IN ACCESS EXCLUSIVE MODE")
                await adapter.inject("accepting")  # its lane waits for storage to read the language
                await wait_until(lambda: runner.health.failing, 30)
                await registry_lost_and_regained(runner.leases, pg_dsn)
                assert not runner.leases.holds(key) and runner.queue_depth() == 0
                await adapter.inject("after")  # claims the chat again: its open entries are read
                await wait_until(lambda: runner.leases.holds(key) and runner.queue_depth() == 4, 30)
                locker.rollback()  # storage works again
            fake.gate.set()
            await runner.drain()
            answers = [text for text in adapter.texts() if text.startswith("echo: ")]  # (not the busy notice)
            assert answers == ["echo: hello", "echo: running", "echo: waiting", "echo: accepting", "echo: after"]
        finally:
            await runner.stop()
            db.close()


class NoChats:
    """A LeaseHost that runs nothing."""

    async def take_up(self, key: str, fresh: bool) -> None:
        return None

    def lease_lost(self, key: str) -> None:
        return None


async def test_a_lease_is_known_held_for_drafts_only_while_its_expiry_is_ahead(db, pg_dsn):
    """What a streamed draft asks before each edit: the claim's expiry by this process's own clock,
    with a margin, and no round trip. No renewal comes here (the heartbeat is a minute)."""
    leases = SharedLeases(db, pg_dsn, heartbeat=QUIET, lease_seconds=2.0)
    await leases.start(NoChats())
    try:
        assert await leases.claim("chat-k")
        assert leases.known_held("chat-k") and not leases.known_held("chat-other")
        await asyncio.sleep(1.1)  # under SHOW_MARGIN of the lease left
        assert leases.holds("chat-k") and not leases.known_held("chat-k")
    finally:
        await leases.stop()
