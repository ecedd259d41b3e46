"""A Telegram reply streamed by editing one message (`editMessageText`), in DMs and groups alike.

Draft-style streaming APIs exist only for some bots and chats; message edits work everywhere, so
there is one mechanism. Telegram allows about one message a second per chat, and about twenty a
minute in a group, so edits are paced at 1/s in private chats and 1 per 3 s elsewhere; a 429's
`retry_after` holds the chat's pacer. Live text goes plain (half-written markdown would often be
refused as MarkdownV2); the final edit carries MarkdownV2 with the plain fallback. Past 4096 UTF-16
units the reply continues in a new message. The pacers belong to the adapter, so two replies in
one chat share one budget.
"""

from __future__ import annotations

from typing import Protocol

from gateway.source import SessionSource
from platforms.edited_reply import EditedReply
from platforms.helpers import EditPacer


class TelegramSender(Protocol):
    """What a streamed reply needs of the Telegram adapter."""

    stream_first_delay: float

    def pacer(self, name: str, limit: int, window: float) -> EditPacer: ...

    def split(self, text: str) -> list[str]: ...

    async def _send_chunk(
        self,
        source: SessionSource,
        chunk: str,
        reply_to: str | None,
        *,
        markup: bool = True,
        flood_raises: bool = False,
    ) -> str | None: ...

    async def _edit_chunk(
        self, source: SessionSource, message_id: str, chunk: str, *, markup: bool = True, flood_raises: bool = False
    ) -> None: ...

    async def _delete(self, source: SessionSource, message_id: str) -> None: ...


PRIVATE_PACE = (1, 1.0)  # calls, seconds
GROUP_PACE = (1, 3.0)


def pacer_for(adapter: TelegramSender, source: SessionSource) -> EditPacer:
    if source.chat_type == "dm":
        return adapter.pacer("private", *PRIVATE_PACE)
    return adapter.pacer("group", *GROUP_PACE)


def telegram_reply(adapter: TelegramSender, source: SessionSource, reply_to: str | None) -> EditedReply:
    async def send_part(text: str, reply_to: str | None, final: bool, key: str | None) -> str:
        # (Telegram takes no idempotency key: `key` goes unused; the outbox counts uncertain sends)
        sent = await adapter._send_chunk(source, text, reply_to, markup=final, flood_raises=True)
        if sent is None:
            raise RuntimeError(f"telegram: chat {source.chat_id} cannot be written to")
        return sent

    async def edit_part(message_id: str, text: str, final: bool) -> None:
        await adapter._edit_chunk(source, message_id, text, markup=final, flood_raises=True)

    async def delete_part(message_id: str) -> None:
        await adapter._delete(source, message_id)

    return EditedReply(
        key=str(source.chat_id),
        pacer=pacer_for(adapter, source),
        split=adapter.split,
        send_part=send_part,
        edit_part=edit_part,
        delete_part=delete_part,
        reply_to=reply_to,
        first_delay=adapter.stream_first_delay,
        what="telegram reply",
    )
