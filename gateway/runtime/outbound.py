"""Replies on their way out: the one place that finds a chat's adapter and sends to it.

Both the runner (notices, command replies) and the turn runner (answers, typing hints) send; each
gets this object's methods as callables instead of the other's whole self. A failed send is logged
and counted as not sent: a platform hiccup must not fail the turn that produced the text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.source import SessionSource
from platforms.base import InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)


class Outbound:
    def __init__(self, adapters: list[PlatformAdapter], metrics: Any = None) -> None:  # gateway.service.metrics
        self.adapters: dict[str, PlatformAdapter] = {a.platform.value: a for a in adapters}
        self.metrics = metrics

    def adapter(self, source: SessionSource) -> PlatformAdapter | None:
        return self.adapters.get(source.platform.value)

    async def send(self, msg: InboundMessage, text: str) -> None:
        """Reply in the chat of `msg`, split at the platform's limit. A failed send is logged."""
        adapter = self.adapters.get(msg.source.platform.value)
        if adapter is None or not text:
            return
        reply_to = msg.message_id if msg.source.chat_type != "dm" else None
        for chunk in adapter.split(text):
            try:
                await adapter.send(msg.source, chunk, reply_to=reply_to)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending a reply on %s failed", msg.source.platform.value)
                return
            if self.metrics is not None:
                self.metrics.inc("messages_out_total", {"platform": msg.source.platform.value})
            reply_to = None

    async def send_typing(self, source: SessionSource) -> None:
        adapter = self.adapters.get(source.platform.value)
        if adapter is not None:
            await adapter.send_typing(source)
