"""The ops HTTP server over real HTTP on 127.0.0.1, and the Prometheus rendering."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time

import aiohttp
import pytest
from aiohttp import web

from gateway.db import SessionDB
from gateway.service.http import OpsServer
from gateway.service.metrics import Metrics
from gateway.storage.health import StorageHealth
from gateway.storage.schema import SCHEMA_VERSION
from platforms.base import AdapterHealth
from tests.fakes.expect import assert_all_in


@pytest.fixture
async def served():
    servers: list[OpsServer] = []

    async def start(**kwargs) -> OpsServer:
        server = OpsServer("127.0.0.1", 0, **kwargs)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


async def get(url: str) -> tuple[int, str, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as resp:
            return resp.status, await resp.text(), dict(resp.headers)


async def test_healthz(served) -> None:
    server = await served()
    assert server.port and server.port != 0
    status, body, headers = await get(server.url + "/healthz")
    assert status == 200
    assert '"status": "ok"' in body and headers["Content-Type"].startswith("application/json")


async def test_readyz_per_adapter(served) -> None:
    state = {
        "telegram": AdapterHealth(True, "polling", time.monotonic() - 2),
        "discord": AdapterHealth(False, "no event or poll for 120s; reconnecting"),
    }
    server = await served(readiness=lambda: state)
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/readyz") as resp:
            assert resp.status == 503
            body = await resp.json()
    assert body["ready"] is False
    assert body["adapters"]["discord"] == {"ready": False, "detail": "no event or poll for 120s; reconnecting"}
    assert body["adapters"]["telegram"]["ready"] is True
    assert 1.5 < body["adapters"]["telegram"]["seconds_since_last_event"] < 60
    state["discord"] = AdapterHealth(True, "connected")
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/readyz") as resp:
            assert resp.status == 200
            assert (await resp.json())["ready"] is True


async def test_readyz_without_adapters_or_with_a_failing_check(served) -> None:
    server = await served()
    status, body, _ = await get(server.url + "/readyz")
    assert status == 503 and "no adapter is running" in body

    def broken() -> dict:
        raise RuntimeError("db gone")

    server = await served(readiness=broken)
    status, body, _ = await get(server.url + "/readyz")
    assert status == 503 and "readiness check failed: db gone" in body


async def test_readyz_says_whether_the_database_answers(served, tmp_path) -> None:
    db = SessionDB(tmp_path / "state.db")
    server = await served(readiness=lambda: {"local": AdapterHealth(True, "ready")}, db=db)
    status, body, _ = await get(server.url + "/readyz")
    assert status == 200
    assert json.loads(body)["database"] == {"ready": True, "backend": "sqlite", "schema_version": SCHEMA_VERSION}
    db.close()  # the database is gone: the replica must leave the rotation
    status, body, _ = await get(server.url + "/readyz")
    reply = json.loads(body)
    assert status == 503 and reply["ready"] is False and reply["database"]["ready"] is False
    assert reply["detail"] == "database: unreachable: the database writer has stopped"


async def test_metrics_endpoint(served) -> None:
    metrics = Metrics()
    metrics.inc("messages_in_total", {"platform": "telegram"})
    metrics.inc("messages_in_total", {"platform": "telegram"}, by=2)
    metrics.inc("messages_out_total", {"platform": "local"})
    metrics.observe("turn_seconds", 0.3)
    metrics.observe("turn_seconds", 7.0)
    metrics.set_gauge_fn("queue_depth", lambda: 4)
    metrics.set_gauge_fn("adapter_ready", lambda: {"telegram": 1, "discord": 0})
    server = await served(metrics=metrics)
    status, text, headers = await get(server.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert_all_in(
        text,
        'chinwag_messages_in_total{platform="telegram"} 3',
        'chinwag_messages_out_total{platform="local"} 1',
        "# TYPE chinwag_turn_seconds histogram",
        'chinwag_turn_seconds_bucket{le="0.25"} 0',
        'chinwag_turn_seconds_bucket{le="0.5"} 1',
        'chinwag_turn_seconds_bucket{le="+Inf"} 2',
        "chinwag_turn_seconds_count 2",
        "chinwag_turn_seconds_sum 7.3",
        "chinwag_queue_depth 4",
        'chinwag_adapter_ready{platform="discord"} 0',
    )
    # every sample line is well-formed exposition format
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r'[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+|.*\+Inf"\} \d+', line), (
                line
            )


def test_metrics_rules() -> None:
    metrics = Metrics()
    with pytest.raises(ValueError, match="only goes up"):
        metrics.inc("messages_in_total", by=-1)
    with pytest.raises(ValueError, match="is a counter, not a histogram"):
        metrics.observe("messages_in_total", 1.0)
    metrics.set_gauge_fn("agent_cache_size", lambda: 1 / 0)  # a broken gauge shows nothing
    metrics.inc("custom_total", {"kind": 'a"b\nc'})
    text = metrics.render()
    assert "\nchinwag_agent_cache_size " not in text
    assert 'chinwag_custom_total{kind="a\\"b\\nc"} 1' in text
    assert metrics.value("custom_total", {"kind": 'a"b\nc'}) == 1


async def test_webhooks_are_mounted(served) -> None:
    seen: list[dict] = []

    async def telegram_hook(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.Response(text="ok")

    server = await served(webhooks={"/webhooks/telegram": telegram_hook})
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url + "/webhooks/telegram", json={"update_id": 1}) as resp:
            assert resp.status == 200
        async with http.get(server.url + "/webhooks/telegram") as resp:
            assert resp.status == 405  # POST only
        async with http.post(server.url + "/webhooks/feishu", json={}) as resp:
            assert resp.status == 404
    assert seen == [{"update_id": 1}]


async def test_bad_webhook_path_and_busy_port(served) -> None:
    async def hook(request: web.Request) -> web.Response:
        return web.Response()

    with pytest.raises(ValueError, match="must start with /webhooks/"):
        OpsServer(webhooks={"/hook": hook}).build()
    first = await served()
    second = OpsServer("127.0.0.1", first.port)
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}"):
        await second.start()


def test_the_start_line_advertises_the_console_only_where_it_answers(tmp_path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        # (not started: which line it would log is decided from the settings alone)
        assert "console at http://127.0.0.1:" in OpsServer("127.0.0.1", 8765, db=db)._console_line()
        off = OpsServer("0.0.0.0", 8765, db=db)._console_line()
        assert "console at" not in off and "http.console_token" in off
        assert "console at" in OpsServer("0.0.0.0", 8765, db=db, console_token="t0ken")._console_line()
    finally:
        db.close()


@pytest.mark.parametrize("sent", [b"", b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
async def test_an_idle_or_slow_connection_is_closed(served, sent) -> None:
    """Idle sockets (and slowloris ones) must not pile up until the file limit refuses new webhooks."""
    server = await served(idle_timeout=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(sent)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 30) == b""  # the server closed it
    finally:
        writer.close()


async def test_readyz_is_503_while_commits_fail_and_200_once_one_succeeds(served, tmp_path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        health = StorageHealth(db)
        server = await served(
            readiness=lambda: {"telegram": AdapterHealth(True, "")}, db=db, storage_report=health.report
        )
        health.failed(sqlite3.OperationalError("database or disk is full"))  # reads still work
        status, text, _ = await get(server.url + "/readyz")
        assert status == 503
        assert "cannot commit" in json.loads(text)["detail"] and "disk is full" in text
        await asyncio.wait_for(health.recovered(), 30)  # the probe's commit went through
        status, _, _ = await get(server.url + "/readyz")
        assert status == 200
    finally:
        db.close()
