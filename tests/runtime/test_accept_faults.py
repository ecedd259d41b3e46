"""A storage fault while a chat's lane accepts a message (its reader's language is read then): the
message waits for storage like a job does (gateway.storage.health), and the chat's later messages
wait behind it. Dropping it let them overtake it; on replicas its entry was never read again while
the lease stayed here (a chat's replies out of order after a Postgres restart, whose pooled
connections fail once each: tests/runtime/test_delivery_faults.py saw it under load).

The fault is a real one: the table the read needs is locked by another session and the daemon's
connections give up after `lock_timeout` (psycopg's LockNotAvailable, an OperationalError).
"""

from __future__ import annotations

import psycopg
import pytest

from tests.fakes.gateway_harness import Gateway
from tests.fakes.loopback import wait_until

pytestmark = pytest.mark.slow  # a replica on the private Postgres, as tests/schedules/test_replicas.py


def _waiting_for(dsn: str, table: str) -> bool:
    """Is a session waiting for a lock on `table`?"""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass", (table,)
        ).fetchone()
    return bool(row and row[0])


async def test_a_message_whose_acceptance_met_a_storage_fault_is_answered_before_later_ones(pg_dsn, tmp_path):
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # for the connections made from now on
        admin.execute(f"ALTER DATABASE {admin.info.dbname} SET lock_timeout = '300ms'")
    storage = {"backend": "postgres", "postgres": {"dsn": pg_dsn}}
    async with Gateway(tmp_path, storage=storage) as gw:
        assert await gw.say("first") == ["echo: first"]  # the chat is held here
        with psycopg.connect(pg_dsn) as locker:
            locker.execute("LOCK TABLE person_settings IN ACCESS EXCLUSIVE MODE")
            await gw.adapter.inject("second")  # stored; its lane reads the person's language
            await wait_until(lambda: _waiting_for(pg_dsn, "person_settings"), 60)
            await wait_until(lambda: not _waiting_for(pg_dsn, "person_settings"), 60)  # it gave up
            locker.rollback()  # storage works again
        await gw.adapter.inject("third")
        await wait_until(lambda: "echo: third" in gw.adapter.texts(), 60)
        await gw.runner.drain()
        assert gw.adapter.texts() == ["echo: first", "echo: second", "echo: third"]
