"""On Postgres, `/readyz` follows the database (200 while it answers, 503 with the reason once the
server is gone), the pool connects again as soon as the server is back and waits only a moment
for a connection while commits fail, and `chinwag doctor` checks the connection and the schema
version, read-only."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path

import aiohttp
import psycopg
import psycopg_pool
import pytest

from gateway.cli.doctor import run_doctor
from gateway.service.http import OpsServer
from gateway.storage.health import StorageHealth
from gateway.storage.postgres.db import PostgresSessionDB
from gateway.storage.postgres.schema import SCHEMA_VERSION
from platforms.base import AdapterHealth
from tests.fakes.loopback import wait_until_blocking
from tests.storage.postgres.server import PrivatePostgres


async def readyz(server: OpsServer) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/readyz") as resp:
            return resp.status, await resp.json()


async def test_readyz_leaves_the_rotation_when_postgres_goes_away() -> None:
    with PrivatePostgres() as pg:  # its own server: this test stops it
        db = PostgresSessionDB(pg.create_database())
        server = OpsServer("127.0.0.1", 0, readiness=lambda: {"telegram": AdapterHealth(True, "webhook")}, db=db)
        await server.start()
        try:
            status, body = await readyz(server)
            assert status == 200
            assert body["database"] == {"ready": True, "backend": "postgres", "schema_version": SCHEMA_VERSION}
            pg.stop()
            status, body = await readyz(server)
            assert status == 503 and body["ready"] is False and body["adapters"]["telegram"]["ready"] is True
            assert body["database"]["ready"] is False and body["database"]["backend"] == "postgres"
            assert body["detail"].startswith("database: ")
        finally:
            await server.stop()
            await asyncio.to_thread(db.close)


@pytest.mark.slow  # an 8 s outage
def test_the_pool_connects_again_when_asked_once_the_server_is_back() -> None:
    """psycopg's pool retries a lost connection with a backoff doubling from 1 s for up to 5 minutes:
    after an outage of N seconds its next try came up to N seconds after the server was back (8 s
    down: 6-9 s more of refused work; 16 s: 15 s). Its tries give up after a few seconds here, and
    the next request for a connection tries again at once."""
    with PrivatePostgres() as pg:  # its own server: this test stops it
        db = PostgresSessionDB(pg.create_database())
        try:
            pg.halt()
            down = time.monotonic()
            while time.monotonic() - down < 8.0:  # work asking for connections all the while
                with pytest.raises(psycopg.OperationalError):
                    db.ping(timeout=0.5)
            pg.resume()
            wait_until_blocking(lambda: _pings(db), 4.0)
        finally:
            db.close()


def _pings(db: PostgresSessionDB) -> bool:
    try:
        db.ping(timeout=0.5)
    except psycopg.OperationalError:
        return False
    return True


def doctor(home: Path, dsn: str) -> tuple[int, str]:
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text('storage:\n  backend: postgres\n  postgres:\n    dsn: "${CHINWAG_PG_DSN}"\n')
    out = io.StringIO()
    code = run_doctor(None, None, timeout=2.0, out=out, env={"CHINWAG_HOME": str(home), "CHINWAG_PG_DSN": dsn})
    return code, out.getvalue()


def test_doctor_checks_the_postgres_connection_and_schema(tmp_path: Path, postgres_server, pg_dsn: str) -> None:
    with PostgresSessionDB(pg_dsn) as db:
        db.create_session("20240101_000000_abcdef01", "telegram")
        for n in range(59):  # just written (a migrate): the planner's estimate has not seen them yet
            db.append_message("20240101_000000_abcdef01", "user", f"message {n}")
    code, text = doctor(tmp_path / "home", pg_dsn)
    assert f"schema v{SCHEMA_VERSION}, 1 sessions, 59 messages" in text and "state.db" not in text

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    code, text = doctor(tmp_path / "home", pg_dsn)
    assert code == 1 and f"has schema v{SCHEMA_VERSION + 1}, newer than this chinwag" in text

    code, text = doctor(tmp_path / "home", postgres_server.dsn("no_such_db") + " password=hunter2")
    assert code == 1 and "cannot be reached" in text and "no_such_db" in text and "hunter2" not in text
    fresh = postgres_server.create_database()
    code, text = doctor(tmp_path / "home", fresh)
    assert f"has schema v0; it is migrated to v{SCHEMA_VERSION} on next start" in text
    with psycopg.connect(fresh) as conn:  # the doctor created nothing
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


async def test_while_commits_fail_a_request_waits_a_moment_for_a_connection_not_30_s(pg_dsn) -> None:
    """A server that went away under load held every worker thread for psycopg's 30 s wait for a
    connection, each webhook was refused only after it, and what queued behind (the poll, the
    claims, /readyz's reads) waited on top. Once a commit has failed (gateway.storage.health) the
    wait is short until one succeeds again."""
    db = PostgresSessionDB(pg_dsn, max_size=1)
    release = threading.Event()
    holder = threading.Thread(target=db.read, args=(lambda conn: release.wait(),))  # the one connection
    holder.start()
    try:
        health = StorageHealth(db)
        health.failed(psycopg.OperationalError("server closed the connection unexpectedly"))
        started = time.monotonic()
        with pytest.raises(psycopg_pool.PoolTimeout):
            await asyncio.to_thread(db.probe_commit)
        assert time.monotonic() - started < 10.0
        assert health.failing  # nor did the probe get one
    finally:
        release.set()
        holder.join()
    await asyncio.wait_for(health.recovered(), 30)  # the probe's commit once the connection is free
    db.close()
