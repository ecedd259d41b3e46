"""The replica protocol's parts on a real private Postgres (gateway/storage/postgres/replicas.py):
the registry lock says who is alive, a lease is claimed only from a dead or expired holder with a
fence one higher, a stale holder's commit is refused and rolled back, a takeover waits for a
commit in flight, a frozen replica's session is ended by idle_session_timeout, and leadership is
one replica's at a time."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from gateway.errors import LeaseLost
from gateway.storage import inbox
from gateway.storage.postgres import replicas
from gateway.storage.postgres.db import PostgresSessionDB
from tests.fakes.loopback import wait_until

pytestmark = pytest.mark.slow  # left out of a quick local run (`pytest -m "not slow"`); CI runs it


def guarded_add(key: str, replica_id: str, fence: int | None, event_id: str):
    """An inbox insert that commits only while `replica_id` holds `key` at `fence`."""

    def op(conn, events):
        replicas.check_fence(conn, key, replica_id, fence)
        return inbox.add(conn, "telegram", event_id, key, "{}", 1.0)

    return op


def live_ids(db: PostgresSessionDB) -> set[str]:
    return {r["id"] for r in db.read(replicas.live_replicas)}


async def test_a_dead_holders_chat_is_claimed_with_a_higher_fence_and_its_late_commit_refused(db, pg_dsn):
    a, b = replicas.Registry(pg_dsn), replicas.Registry(pg_dsn)
    a_id, b_id = await a.open(), await b.open()
    try:
        assert live_ids(db) == {a_id, b_id}
        fence = db.write(replicas.op_claim("chat-1", a_id))
        assert fence == 1
        assert db.write(replicas.op_claim("chat-1", b_id)) is None  # a live holder keeps it
        db.write(guarded_add("chat-1", a_id, fence, "e1"))  # the holder commits

        await a.conn.close()  # as a SIGKILL does: the session ends, the lock goes with it
        await wait_until(lambda: a_id not in live_ids(db), 5)
        assert db.write(replicas.op_claim("chat-1", b_id)) == 2
        with pytest.raises(LeaseLost):
            db.write(guarded_add("chat-1", a_id, fence, "e2"))
        assert db.read(lambda c: c.execute("SELECT count(*) FROM inbox WHERE event_id = 'e2'").fetchone()[0]) == 0
        db.write(guarded_add("chat-1", b_id, 2, "e3"))
    finally:
        await b.close()


async def test_an_expired_lease_is_claimed_from_a_live_holder_and_renewal_tells_it(db, pg_dsn):
    a, b = replicas.Registry(pg_dsn), replicas.Registry(pg_dsn)
    a_id, b_id = await a.open(), await b.open()
    try:
        assert db.write(replicas.op_claim("chat-2", a_id, seconds=0.2)) == 1
        assert db.write(replicas.op_claim("chat-3", a_id, seconds=60)) == 1
        assert db.write(replicas.op_claim("chat-2", b_id)) is None
        await asyncio.sleep(0.3)
        assert db.write(replicas.op_claim("chat-2", b_id)) == 2
        assert db.write(replicas.op_renew(a_id)) == {"chat-3": 1}  # chat-2 is no longer A's
        db.write(replicas.op_release_all(a_id))  # a clean stop: claimable at once, fence kept
        assert db.write(replicas.op_claim("chat-3", b_id)) == 2
    finally:
        await a.close()
        await b.close()


async def test_a_takeover_waits_for_the_commit_in_flight(db, pg_dsn):
    a, b = replicas.Registry(pg_dsn), replicas.Registry(pg_dsn)
    a_id, b_id = await a.open(), await b.open()
    try:
        assert db.write(replicas.op_claim("chat-4", a_id, seconds=0.01)) == 1
        await asyncio.sleep(0.05)  # expired: B may claim it, but A's commit is under way
        with psycopg.connect(pg_dsn) as raw:
            from gateway.storage.postgres.connection import Connection, configure

            configure(raw)
            with raw.transaction():
                replicas.check_fence(Connection(raw), "chat-4", a_id, 1)
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    db.write(replicas.op_claim("chat-4", b_id))  # waits on A's share lock, then gives up
            # A committed: now the claim goes through, and A's next commit is refused
        assert db.write(replicas.op_claim("chat-4", b_id)) == 2
        with pytest.raises(LeaseLost):
            db.write(guarded_add("chat-4", a_id, 1, "late"))
    finally:
        await a.close()
        await b.close()


async def test_a_frozen_replica_loses_its_registry_to_idle_session_timeout(db, pg_dsn):
    frozen = replicas.Registry(pg_dsn, idle_timeout_ms=300)
    frozen_id = await frozen.open()
    beating = replicas.Registry(pg_dsn, idle_timeout_ms=300)
    beating_id = await beating.open()
    try:
        for _ in range(8):  # 0.8 s: the one that beats stays, the silent one is ended
            await beating.beat()
            await asyncio.sleep(0.1)
        assert live_ids(db) == {beating_id}
        with pytest.raises(psycopg.OperationalError):
            await frozen.beat()  # what the frozen one finds when it wakes
        assert frozen_id not in live_ids(db)
    finally:
        await beating.close()
        await frozen.close()


async def test_leadership_is_one_replicas_and_passes_when_it_dies(db, pg_dsn):
    a, b = replicas.Registry(pg_dsn), replicas.Registry(pg_dsn)
    await a.open()
    await b.open()
    try:
        assert await a.try_lead("telegram:1:polling")
        assert not await b.try_lead("telegram:1:polling")
        assert await b.try_lead("discord:x:shard0")
        await a.close()
        await wait_until_async(lambda: b.try_lead("telegram:1:polling"), 5)
    finally:
        await b.close()


async def wait_until_async(predicate, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


class QuietHost:
    """A LeaseHost with no chats: what the runner would be asked, recorded."""

    def __init__(self) -> None:
        self.lost: list[str] = []

    async def take_up(self, key: str, fresh: bool) -> None:
        return None

    def lease_lost(self, key: str) -> None:
        self.lost.append(key)


@pytest.fixture
async def on_four_workers(db, pg_dsn):
    """A replica's leases, started, with the loop's worker threads cut to four (the tests fill them)."""
    from concurrent.futures import ThreadPoolExecutor

    from gateway.runtime.leases import SharedLeases

    workers = ThreadPoolExecutor(4)
    asyncio.get_running_loop().set_default_executor(workers)
    leases, host = SharedLeases(db, pg_dsn), QuietHost()
    await leases.start(host)
    try:
        yield leases, host
    finally:
        await leases.stop()
        workers.shutdown()


async def test_a_replica_busy_in_every_worker_thread_keeps_its_registry(db, on_four_workers):
    """Measured in bench/scaleout.py: with 200 chats at once the reads and writes queued in the
    thread pool held back the heartbeat past idle_session_timeout, and the replica lost its
    registry and its chats. The heartbeat and the renewal run on the registry connection itself."""
    leases, host = on_four_workers
    loop = asyncio.get_running_loop()
    replica_id = leases.replica_id
    assert await leases.claim("chat-busy")
    busy = [loop.run_in_executor(None, time.sleep, 4.0) for _ in range(4)]  # every worker, past the 3 s
    await asyncio.gather(*busy)
    assert leases.replica_id == replica_id and replica_id in live_ids(db)
    assert leases.holds("chat-busy") and host.lost == []


async def test_a_registry_lost_while_every_worker_thread_is_busy_is_regained_and_kept(db, pg_dsn, on_four_workers):
    """A Postgres restart under load: the registry session ends while the thread pool is full of
    work waiting for connections. Registering again is the registry connection's alone: a pool
    write between it and the first beat (releasing a fresh id's leases: it has none) queued behind
    that work, the new session sat idle past idle_session_timeout, and was ended as soon as it was
    announced (the fault test's log: "registered again as replica ...", then "lost its registry")."""
    leases, _ = on_four_workers
    loop = asyncio.get_running_loop()
    lost = leases.replica_id
    # every worker busy until released (at most 30 s), as while the pool waits for a server
    released = threading.Event()
    busy = asyncio.gather(*(loop.run_in_executor(None, released.wait, 30.0) for _ in range(4)))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s",
            (replicas.REPLICA_LOCKS,),
        )
    await wait_until(lambda: leases.replica_id not in ("", lost) or busy.done(), 60)
    assert not busy.done(), "registered again only once the worker threads were free"
    regained = leases.replica_id
    await asyncio.sleep(leases.idle_seconds + leases.heartbeat)  # past the idle limit, workers still busy
    assert not busy.done()
    released.set()
    await busy
    assert leases.replica_id == regained and regained in live_ids(db)
