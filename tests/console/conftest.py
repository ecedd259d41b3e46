"""A real ops server on 127.0.0.1 serving the console over a real SessionDB, and a corpus."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.console import mount_console
from gateway.db import SessionDB, new_session_id
from gateway.service.http import OpsServer
from gateway.service.metrics import Metrics
from gateway.storage.media import MediaStore
from platforms.base import AdapterHealth


@dataclass
class Served:
    url: str
    db: SessionDB
    metrics: Metrics

    def session(self, **kwargs) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(base_url=self.url, **kwargs)


@pytest.fixture
async def serve(db):
    """serve(**OpsServer kwargs) -> Served: the ops server with the console, on a free port."""
    servers: list[OpsServer] = []

    async def start(**kwargs) -> Served:
        metrics = kwargs.pop("metrics", None) or Metrics()
        health = {"telegram": AdapterHealth(True, "polling", time.monotonic() - 3)}
        kwargs.setdefault("readiness", lambda: health)
        kwargs.setdefault("media", MediaStore(Path(db.path).parent / "media"))  # as a home lays it out
        server = OpsServer("127.0.0.1", 0, db=db, metrics=metrics, **kwargs)
        await server.start()
        servers.append(server)
        return Served(server.url, db, metrics)

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def serve_bound_as(db):
    """The console's rules for a server bound to `bind_host`, served (as tests must be) on 127.0.0.1."""
    runners: list[web.AppRunner] = []

    async def start(bind_host: str, token: str | None = None) -> Served:
        app = web.Application()
        mount_console(app, db, bind_host=bind_host, token=token, media=MediaStore(Path(db.path).parent / "media"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return Served(f"http://127.0.0.1:{port}", db, Metrics())

    yield start
    for runner in runners:
        await runner.cleanup()


DAY = 86400.0
BASE = 1_714_000_000.0  # 2024-04-24 23:06:40 UTC


@pytest.fixture
def corpus(db):
    """A handful of sessions with known content; returns {name: session id}."""
    ids: dict[str, str] = {}

    def make(name, source, started, messages, **fields):
        sid = new_session_id(started)
        db.create_session(sid, source, started_at=started, **fields)
        for i, (role, content, extra) in enumerate(messages):
            db.append_message(sid, role, content, timestamp=started + 60 * (i + 1), **extra)
        ids[name] = sid
        return sid

    make(
        "nginx",
        "telegram",
        BASE,
        [
            ("user", "my nginx.conf gives a 504 timeout behind the proxy", {"user_id": "ann"}),
            (
                "assistant",
                "Let me read it.",
                {
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "/etc/nginx/nginx.conf"}'},
                        }
                    ]
                },
            ),
            ("tool", "worker_processes 4; proxy_read_timeout 60s;", {"tool_call_id": "c1", "tool_name": "read_file"}),
            ("assistant", "Raise `proxy_read_timeout` to **300s**:\n```nginx\nproxy_read_timeout 300s;\n```", {}),
        ],
        user_id="ann",
        user_name="Ann",
        title="nginx timeouts",
        session_key="agent:main:telegram:dm:100",
    )
    make(
        "deploy",
        "feishu",
        BASE + DAY,
        [
            ("user", "上次部署网关超时是怎么解决的", {"user_id": "bo"}),
            ("assistant", "部署网关时把超时调到了三百秒。", {}),
        ],
        user_id="bo",
        user_name="Bo",
        session_key="agent:main:feishu:dm:200",
    )
    make(
        "hostile",
        "discord",
        BASE + 2 * DAY,
        [
            ("user", '<script>alert("pwned")</script> <img src=x onerror=alert(1)> [x](javascript:alert(2))', {}),
            ("assistant", "That is a script tag.", {}),
        ],
        user_id="eve",
        title="<b>bold</b> title",
    )
    make("quiet", "telegram", BASE + 3 * DAY, [("user", "hello there", {"user_id": "ann"})], user_id="ann")
    return ids
