"""An in-memory platform adapter implementing the contract, for driving the gateway in tests.

    adapter = ChatAdapter(platform="telegram", max_message_length=4096)
    runner = build_runner(config, db, store, [adapter])  # gateway.service.app
    await runner.start()
    await adapter.inject("hello", chat_id="7", user_id="7")          # a DM from user 7
    sent = await adapter.wait_sent(1)                                # what the bot sent back
    adapter.texts(chat_id="7")                                       # every reply text to that chat

Every `send` is recorded (already split by the gateway: the fake refuses a chunk over the limit,
like a real platform would). Message ids are sequential so redeliveries can be simulated by
injecting the same `message_id` twice.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from gateway.source import Platform, SessionSource
from platforms.base import InboundMessage, MessageHandler, PlatformAdapter


@dataclass
class Sent:
    source: SessionSource
    text: str
    reply_to: str | None
    message_ids: list[str] = field(default_factory=list)

    @property
    def chat_id(self) -> str:
        return self.source.chat_id


class ChatAdapter(PlatformAdapter):
    def __init__(
        self,
        platform: Platform | str = Platform.TELEGRAM,
        max_message_length: int = 4096,
        *,
        send_delay: float = 0.0,
    ) -> None:
        super().__init__()
        self.platform = Platform(platform)
        # Standing in for the terminal, it has the terminal's traits (platforms.local).
        self.answers_in_order = self.operator_is_admin = self.platform is Platform.LOCAL
        self.max_message_length = max_message_length
        self.send_delay = send_delay
        self.on_message: MessageHandler | None = None
        self.sent: list[Sent] = []
        self.typing: list[SessionSource] = []
        self.edits: list[tuple[str, str]] = []
        self.started = self.stopped = False
        self._ids = itertools.count(1)
        self._out_ids = itertools.count(1)
        self._changed = asyncio.Condition()

    # -- contract --------------------------------------------------------------------------
    async def start(self, on_message: MessageHandler) -> None:
        self.on_message = on_message
        self.started = True
        self.set_ready(True, "in memory")

    async def stop(self) -> None:
        self.stopped = True
        self.set_ready(False, "stopped")

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        if self.message_length(text) > self.max_message_length:
            raise ValueError(f"chunk of {self.message_length(text)} exceeds the limit {self.max_message_length}")
        if self.send_delay:
            await asyncio.sleep(self.send_delay)
        ids = [f"out-{next(self._out_ids)}"]
        async with self._changed:
            self.sent.append(Sent(source, text, reply_to, ids))
            self._changed.notify_all()
        return ids

    async def edit(self, source: SessionSource, message_id: str, text: str) -> None:
        self.edits.append((message_id, text))

    async def send_typing(self, source: SessionSource) -> None:
        self.typing.append(source)

    # -- test helpers ----------------------------------------------------------------------
    def source(
        self,
        chat_id: str = "100",
        user_id: str | None = "100",
        chat_type: str = "dm",
        **kw: Any,
    ) -> SessionSource:
        return SessionSource(platform=self.platform, chat_id=chat_id, chat_type=chat_type, user_id=user_id, **kw)

    def message(
        self,
        text: str,
        chat_id: str = "100",
        user_id: str | None = "100",
        chat_type: str = "dm",
        *,
        message_id: str | None = None,
        mentioned: bool = False,
        reply_to_bot: bool = False,
        **source_kw: Any,
    ) -> InboundMessage:
        return InboundMessage(
            source=self.source(chat_id, user_id, chat_type, **source_kw),
            text=text,
            message_id=message_id or f"in-{next(self._ids)}",
            mentioned=mentioned,
            reply_to_bot=reply_to_bot,
        )

    async def inject(
        self, text: str, chat_id: str = "100", user_id: str | None = "100", chat_type: str = "dm", **kw: Any
    ) -> InboundMessage:
        """Deliver one inbound message to the gateway, as the platform would."""
        if self.on_message is None:
            raise RuntimeError("adapter not started")
        msg = self.message(text, chat_id, user_id, chat_type, **kw)
        await self.on_message(msg)
        return msg

    async def deliver(self, msg: InboundMessage) -> None:
        """Deliver a prepared message again (a platform redelivery)."""
        assert self.on_message is not None
        await self.on_message(msg)

    async def wait_sent(self, n: int, timeout: float = 5.0, chat_id: str | None = None) -> list[Sent]:
        """Wait until at least `n` messages were sent (to `chat_id` when given); return them."""

        def matching() -> list[Sent]:
            return [s for s in self.sent if chat_id is None or s.chat_id == chat_id]

        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(matching()) >= n)

        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"expected {n} sends{' to ' + chat_id if chat_id else ''}, got {len(matching())}: "
                f"{[s.text[:80] for s in matching()]}"
            ) from None
        return matching()

    def texts(self, chat_id: str | None = None) -> list[str]:
        return [s.text for s in self.sent if chat_id is None or s.chat_id == chat_id]
