"""Replies on their way out: the one place that finds a chat's adapter and sends to it.

Both the runner (notices, command replies) and the turn runner (answers, typing hints) send; each
gets this object's methods as callables instead of the other's whole self. A failed send is logged
and counted as not sent: a platform hiccup must not fail the turn that produced the text.

A message that names its own answer target (a Discord slash command's interaction) is answered
there. `begin_reply` starts a streamed answer where the platform streams (gateway.runtime.reply_feed
reads the setting); None means "send once at the end", exactly as without streaming.
"""

from __future__ import annotations

import asyncio
import logging

from gateway import telemetry
from gateway.runtime.metrics import Metrics
from gateway.source import SessionSource
from gateway.text import valid_text
from platforms.base import InboundMessage, PlatformAdapter, ReplyStream

log = logging.getLogger(__name__)


class Outbound:
    def __init__(
        self,
        adapters: list[PlatformAdapter],
        metrics: Metrics | None = None,
        streaming: dict[str, bool] | None = None,  # platform -> streams replies (absent: no)
    ) -> None:
        self.adapters: dict[str, PlatformAdapter] = {a.platform.value: a for a in adapters}
        self.metrics = metrics
        self.streaming = dict(streaming or {})

    def begin_reply(self, msg: InboundMessage) -> ReplyStream | None:
        """A streamed answer to `msg`, or None where replies are sent once at the end."""
        platform = msg.source.platform.value
        adapter = self.adapters.get(platform)
        if adapter is None or not self.streaming.get(platform):
            return msg.reply_target() if msg.reply_target is not None else None
        if msg.reply_target is not None:
            return msg.reply_target()
        reply_to = msg.message_id if msg.source.chat_type != "dm" else None
        return adapter.begin_reply(msg.source, reply_to)

    def count_out(self, msg: InboundMessage, parts: int = 1) -> None:
        if self.metrics is not None:
            for _ in range(parts):
                self.metrics.inc("messages_out_total", {"platform": msg.source.platform.value})

    def adapter(self, source: SessionSource) -> PlatformAdapter | None:
        return self.adapters.get(source.platform.value)

    async def send(self, msg: InboundMessage, text: str) -> None:
        """Reply in the chat of `msg`, split at the platform's limit. A failed send is logged."""
        adapter = self.adapters.get(msg.source.platform.value)
        if adapter is None or not text:
            return
        text = valid_text(text)
        if msg.reply_target is not None:  # answered where the message asked (an interaction)
            try:
                self.count_out(msg, len(await msg.reply_target().finish(text)))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("answering on %s failed", msg.source.platform.value)
            return
        reply_to = msg.message_id if msg.source.chat_type != "dm" else None
        with telemetry.send(msg.source.platform.value) as span:
            for parts, chunk in enumerate(adapter.split(text), 1):
                try:
                    await adapter.send(msg.source, chunk, reply_to=reply_to)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("sending a reply on %s failed", msg.source.platform.value)
                    span.set("chinwag.outcome", "failed")
                    return
                span.set("chinwag.parts", parts)
                if self.metrics is not None:
                    self.metrics.inc("messages_out_total", {"platform": msg.source.platform.value})
                reply_to = None

    async def send_typing(self, source: SessionSource) -> None:
        adapter = self.adapters.get(source.platform.value)
        if adapter is not None:
            await adapter.send_typing(source)
