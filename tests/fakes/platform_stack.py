"""A whole gateway around one real platform adapter, for the platform end-to-end tests: the real
adapter (built by the test from its config section) talking to that platform's fake server, the
real GatewayRunner on a real SQLite file, the fake OpenAI-compatible model, and, when the adapter
serves webhooks, the gateway's own HTTP server on 127.0.0.1.

    fake = await FakeTelegram().start()
    async with running(fake, lambda llm: PlatformStack(tmp_path, llm, "telegram", section, TelegramAdapter)) as stack:
        ...
        await stack.restart()                    # fresh adapter and runner on the same database

A test file subclasses it for what differs by platform: how to read the bot's replies from its
fake (`replies`), and anything to wait for after a start.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from gateway.db import SessionDB
from gateway.runtime.runner import GatewayRunner
from gateway.service.app import build_runner
from gateway.service.http import OpsServer
from platforms.base import PlatformAdapter
from tests.fakes.gateway_harness import build_store, make_config
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI


class PlatformStack:
    """One running gateway with one adapter for `platform`; `restart()` builds fresh ones on the same DB."""

    def __init__(
        self,
        tmp: Path,
        llm: FakeOpenAI,
        platform: str,
        section: dict[str, Any],
        make_adapter: Callable[[dict[str, Any]], PlatformAdapter],
        http_port: int = 0,
    ) -> None:
        self.llm, self.platform, self.make_adapter = llm, platform, make_adapter
        self.config = make_config(tmp / "home", llm, {platform: section}, http={"port": http_port})
        self.db: SessionDB | None = None
        self.runner: GatewayRunner | None = None
        self.adapter: Any = None  # the platform's adapter class
        self.ops: OpsServer | None = None

    async def start(self) -> None:
        self.db = SessionDB(self.config.db_path)
        self.adapter = self.make_adapter(self.config.adapter_config(self.platform))
        self.runner = build_runner(self.config, self.db, build_store(self.config, self.db), [self.adapter])
        webhooks = self.adapter.webhook_handlers()
        if webhooks:  # the gateway's own HTTP server serves the webhook routes
            self.ops = OpsServer("127.0.0.1", self.config.http.port, webhooks=webhooks)
            await self.ops.start()
        await self.runner.start()

    async def stop(self) -> None:
        if self.runner:
            await self.runner.stop(timeout=5)
        if self.ops:
            await self.ops.stop()
            self.ops = None
        if self.db:
            self.db.close()
        self.runner = self.db = self.adapter = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def __aenter__(self) -> "PlatformStack":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_ready(self) -> None:
        adapter = self.adapter
        await wait_until(lambda: adapter is not None and adapter.health().ready)

    def replies(self, chat_id: Any) -> list[dict[str, Any]]:
        """The bot's messages in `chat_id`, as the platform's fake recorded them."""
        raise NotImplementedError

    async def wait_replies(self, chat_id: Any, n: int, timeout: float = 8.0) -> list[dict[str, Any]]:
        await wait_until(lambda: len(self.replies(chat_id)) >= n, timeout)
        return self.replies(chat_id)

    def sessions(self) -> list[dict[str, Any]]:
        assert self.db is not None
        return self.db.list_sessions_rich(source=self.platform, limit=100)

    def session_keys(self) -> list[str]:
        return sorted(s["session_key"] for s in self.sessions())


@asynccontextmanager
async def running(fake: Any, make_stack: Callable[[FakeOpenAI], PlatformStack]) -> AsyncIterator[PlatformStack]:
    """A started stack on a fresh fake model, around the (started) platform fake `fake`; at the end
    the stack, the model and `fake` are stopped."""
    try:
        async with FakeOpenAI() as llm, make_stack(llm) as stack:
            yield stack
    finally:
        await fake.stop()
