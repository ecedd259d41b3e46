"""A whole gateway for end-to-end tests, wired by the production composition root (`build_app`):
real SessionDB (tmp_path), mirrors, SessionStore and GatewayRunner, the in-memory ChatAdapter, and
FakeOpenAI on 127.0.0.1 driven by the real client, the MCP servers of an `mcp` section. (No upkeep, HTTP server or process-wide GC
tuning: `App.start` is not called, only the runner's.)

    async with Gateway(tmp_path) as gw:
        replies = await gw.say("hello")            # inject, wait until the chat is idle, new replies
        gw.fake.push("scripted answer")

`Clock` is a controllable wall clock shared by the store (reset policy) and the runner.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gateway.config.load import Config, parse_config
from gateway.service.app import App, build_app, build_store
from gateway.sessions.reset import ResetPolicies, ResetPolicy
from tests.fakes.chat_adapter import ChatAdapter
from tests.fakes.openai_server import FakeOpenAI


class Clock:
    """Wall-clock time that moves on by itself (so activity order is real) and can jump:
    `advance(seconds)`, or set `now` outright."""

    def __init__(self, start: float | None = None) -> None:
        self._base = time.time() if start is None else start
        self._t0 = time.monotonic()

    @property
    def now(self) -> float:
        return self._base + (time.monotonic() - self._t0)

    @now.setter
    def now(self, value: float) -> None:
        self._base, self._t0 = value, time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self._base += seconds


def make_config(
    home: Path,
    fake: FakeOpenAI | None,
    platforms: dict | None = None,
    model_options: dict | None = None,
    **sections: Any,
) -> Config:
    data: dict[str, Any] = {
        "platforms": platforms
        if platforms is not None
        else {
            "telegram": {"token": "t", "allowed_users": ["*"], "require_mention": True},
        },
    }
    if fake is not None:
        data["model"] = {
            "base_url": fake.base_url,
            "api_key": "k",
            "name": "fake-model",
            "timeout_seconds": 5,
            **(model_options or {}),
        }
    for name, section in sections.items():
        data[name] = section
    return parse_config(data, env={}, home_override=home)


__all__ = ["Clock", "Gateway", "build_store", "make_config"]


class Gateway:
    def __init__(
        self,
        tmp_path: Path,
        *,
        model: bool = True,
        platforms: dict | None = None,
        policies: ResetPolicies | None = None,
        clock: Clock | None = None,
        adapter: ChatAdapter | None = None,
        db_path: Path | None = None,
        agent_factory: Any = None,
        fake: FakeOpenAI | None = None,
        model_options: dict | None = None,
        wall_clock: Any = None,  # gateway.schedules.clock.WallClock: when scheduled runs are due
        **sections: Any,
    ) -> None:
        self.tmp_path = tmp_path
        self.wall_clock = wall_clock
        self.use_model = model
        self.platforms = platforms
        self.policies = policies or ResetPolicies(default=ResetPolicy(mode="none"))
        self.clock = clock or Clock()
        self.adapter = adapter or ChatAdapter("telegram")
        self.db_path = db_path or tmp_path / "home" / "state.db"
        self.agent_factory = agent_factory
        self.sections = sections
        self.model_options = model_options
        self.fake = fake
        self._own_fake = fake is None and model

    async def __aenter__(self) -> "Gateway":
        if self._own_fake:
            self.fake = await FakeOpenAI().__aenter__()
        self.config = make_config(
            self.tmp_path / "home",
            self.fake if self.use_model else None,
            self.platforms,
            self.model_options,
            **self.sections,
        )
        self.app: App = build_app(
            self.config,
            adapters=[self.adapter],
            agent_factory=self.agent_factory,
            clock=self.clock,
            http=False,
            policies=self.policies,
            db_path=self.db_path,
            wall_clock=self.wall_clock,
        )
        self.db, self.store, self.runner = self.app.db, self.app.store, self.app.runner
        if self.app.mcp is not None:  # App.start's step for the MCP servers (a no-op with none configured)
            await self.app.mcp.start()
            await self.app.mcp.wait_ready(30)  # a loaded machine starts Python slowly; a turn waits only 5 s
        await self.runner.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.app.stop(timeout=5)
        finally:
            if self._own_fake and self.fake is not None:
                await self.fake.__aexit__(None, None, None)

    async def say(self, text: str, **kw: Any) -> list[str]:
        """Send one message, wait until the gateway is idle, return the replies it caused."""
        before = len(self.adapter.sent)
        await self.adapter.inject(text, **kw)
        await self.runner.drain()
        return [s.text for s in self.adapter.sent[before:]]

    def session_id(
        self, chat_id: str = "100", user_id: str | None = "100", chat_type: str = "dm", **kw: Any
    ) -> str | None:
        entry = self.store.get(self.store.key_for(self.adapter.source(chat_id, user_id, chat_type, **kw)))
        return entry.session_id if entry else None

    def messages(self, session_id: str, include_inactive: bool = False) -> list[dict]:
        return self.db.get_messages(session_id, include_inactive=include_inactive)
