"""On Postgres, `/readyz` follows the database (200 while it answers, 503 with the reason once the
server is gone), while it is gone requests fail fast and once it is back the pool connects again
at once, and `chinwag doctor` checks the connection and the schema version, read-only."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import aiohttp
import psycopg
import pytest

from gateway.cli.doctor import run_doctor
from gateway.service.http import OpsServer
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
def test_while_the_server_is_down_requests_fail_fast_and_connect_again_once_it_is_back() -> None:
    """psycopg's pool waits up to 30 s for a connection, and retries a lost one with a backoff
    doubling from 1 s for 5 minutes. Under load every worker thread sat in that wait while the
    server was down (each webhook refused only after it, the lease poll and the probe queued
    behind), and its next try came up to N seconds after an outage of N seconds (8 s down: 6-9 s
    more of refused work). Here a request gives up within a moment once the retries have, and the
    next request after the server is back connects at once."""
    with PrivatePostgres() as pg:  # its own server: this test stops it
        db = PostgresSessionDB(pg.create_database())
        try:
            pg.halt()
            down = time.monotonic()
            while time.monotonic() - down < 8.0:  # work asking for connections all the while
                asked = time.monotonic()
                with pytest.raises(psycopg.OperationalError):
                    db.probe_commit()
                assert time.monotonic() - asked < 10.0  # not the pool's 30 s
            pg.resume()
            wait_until_blocking(lambda: _commits(db), 4.0)
        finally:
            db.close()


def _commits(db: PostgresSessionDB) -> bool:
    try:
        db.probe_commit()
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
