"""A Feishu/Lark reply streamed into one card per turn.

Three ways, best first, and the adapter remembers which one this app may use:
- CardKit streaming: create a card entity (JSON 2.0, `streaming_mode` on) and send it; then push the
  whole text so far into its markdown element with increasing sequence numbers (Feishu types out the
  new part); the final full update turns streaming off and holds the rendered markdown. Needs the
  `cardkit:card:write` scope; a refusal moves the app to the next way.
- Card patches: an interactive card message (`update_multi`) replaced as the text grows.
- Plain text, when cards are refused altogether: nothing until the end, then one post (Feishu caps
  how often a text message may be edited, so live edits of text would stop working mid-reply).
An answer that was complete before anything was shown goes as an ordinary post, as without
streaming; a card is only for text that grows in front of the reader.
Rates: CardKit allows 10 operations a second per card and a message patch 5 a second; the pacers
stay well under (5/s and 2/s per chat) and coalesce what arrives meanwhile. A reply longer than the
adapter's part limit continues in a new card.

A question with buttons (`send_choice`: "Run orders.cancel_order {...}?") is a card too
(`choice_card`): each button calls back with its command, and once the question is settled the card
is patched to say how (`settled_card`), without buttons, so a decided question is not pressed again.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from gateway.source import SessionSource
from platforms.edited_reply import EditedReply
from platforms.feishu.api import FeishuApi, FeishuApiError
from platforms.helpers import EditPacer


class CardHost(Protocol):
    """What a card reply needs of the Feishu adapter."""

    api: FeishuApi
    card_mode: str  # the way replies are shown, moving down MODES as the app is refused
    stream_first_delay: float
    _sent_ids: Any  # message ids the bot sent (an LRU with `remember`)
    _latest: Any  # chat -> latest inbound message id

    def pacer(self, name: str, limit: int, window: float) -> EditPacer: ...

    def split(self, text: str) -> list[str]: ...

    async def edit(self, source: SessionSource, message_id: str, text: str) -> None: ...

    async def _send_one(
        self, chat_id: str, text: str, reply_to: str | None, in_thread: bool, key: str | None = None
    ) -> str: ...

    async def _clear_reaction(self, message_id: str | None) -> None: ...


log = logging.getLogger(__name__)

ELEMENT_ID = "answer"
CARDKIT_PACE = (5, 1.0)
PATCH_PACE = (2, 1.0)
MODES = ("cardkit", "patch", "text")


def card_json(text: str, *, streaming: bool) -> dict[str, Any]:
    """A JSON 2.0 card whose one element is markdown (a shared card, so it can be updated)."""
    config: dict[str, Any] = {"update_multi": True, "streaming_mode": streaming}
    if streaming:
        config["streaming_config"] = {"print_strategy": "fast"}
    summary = " ".join(text.split())[:60]
    if summary:
        config["summary"] = {"content": summary}
    return {
        "schema": "2.0",
        "config": config,
        "body": {"elements": [{"tag": "markdown", "element_id": ELEMENT_ID, "content": text or " "}]},
    }


def _plain(text: str) -> dict[str, Any]:
    # plain text: a question quotes a tool's arguments, which markdown would mangle (`*`, `_`, links)
    return {"tag": "div", "text": {"tag": "plain_text", "content": text or " "}}


def choice_card(text: str, choices: list[tuple[str, str]], where: dict[str, str]) -> dict[str, Any]:
    """`text` and a button per (label, command), side by side, the first one the primary. A press
    calls back with the button's value: its command, and `where` (the chat type and thread of the
    question, which the callback does not name)."""
    columns = [
        {
            "tag": "column",
            "width": "auto",
            "elements": [
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": label},
                    "type": "primary_filled" if i == 0 else "default",
                    "behaviors": [{"type": "callback", "value": {"command": command, **where}}],
                }
            ],
        }
        for i, (label, command) in enumerate(choices)
    ]
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": " ".join(text.split())[:60]}},
        "body": {"elements": [_plain(text), {"tag": "column_set", "columns": columns}]},
    }


def settled_card(text: str) -> dict[str, Any]:
    """A settled question: what was decided, no buttons."""
    return {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": [_plain(text)]}}


def _refused(exc: FeishuApiError) -> bool:
    """Feishu said no to this way of replying (scope, content), rather than being unwell."""
    return exc.status is not None and exc.status < 500 and exc.status != 429


class FeishuCardReply(EditedReply):
    def __init__(self, adapter: CardHost, source: SessionSource, reply_to: str | None) -> None:
        self.adapter, self.source = adapter, source
        self.in_thread = source.thread_id is not None
        self._cards: dict[str, list[Any]] = {}  # message id -> [card id, last sequence]
        self._patched: set[str] = set()  # interactive messages updated by patch
        mode = adapter.card_mode
        super().__init__(
            key=f"{source.chat_id}|{source.thread_id or ''}",
            pacer=adapter.pacer(mode, *(CARDKIT_PACE if mode == "cardkit" else PATCH_PACE)),
            split=adapter.split,
            send_part=self._send_part,
            edit_part=self._edit_part,
            reply_to=reply_to,
            first_delay=adapter.stream_first_delay,
            what="feishu reply",
        )

    async def finish(self, text: str) -> list[str]:
        try:
            return await super().finish(text)
        finally:
            await self.adapter._clear_reaction(self.reply_to or self.adapter._latest.get(_chat_key(self.source)))

    async def fail(self, note: str | None = None) -> list[str]:
        try:
            return await super().fail(note)
        finally:
            await self.adapter._clear_reaction(self.reply_to or self.adapter._latest.get(_chat_key(self.source)))

    def _downgrade(self, to: str, exc: FeishuApiError) -> None:
        if MODES.index(to) > MODES.index(self.adapter.card_mode):
            log.warning(
                "feishu: %s refused (code %s); replies use %s from now on", self.adapter.card_mode, exc.code, to
            )
            self.adapter.card_mode = to

    def adopt(self, message_ids: list[str]) -> None:
        # an earlier run's card: its card entity is not known here, so it is replaced by patch
        super().adopt(message_ids)
        self._patched.update(self.message_ids)

    async def _send_part(self, text: str, reply_to: str | None, final: bool, key: str | None) -> str:
        api, chat = self.adapter.api, self.source.chat_id
        if final and not self._cards and not self._patched:
            # Nothing was streamed (a quick answer): an ordinary post, as a reply without streaming.
            return await self.adapter._send_one(chat, text, reply_to, self.in_thread, key)
        if self.adapter.card_mode == "cardkit":
            try:
                card_id = await api.create_card(card_json(text, streaming=not final))
                content = {"type": "card", "data": {"card_id": card_id}}
                # no key: a repeat would return a message showing another card than the one made here
                mid = await api.send_message(chat, "interactive", content, reply_to, self.in_thread)
                self._cards[mid] = [card_id, 0]
                self.adapter._sent_ids.remember(mid)
                return mid
            except FeishuApiError as exc:
                if not _refused(exc):
                    raise
                self._downgrade("patch", exc)
        if self.adapter.card_mode == "patch":
            try:
                mid = await api.send_message(  # a repeat of `key` returns the card, patched as ever
                    chat, "interactive", card_json(text, streaming=False), reply_to, self.in_thread, key
                )
                self._patched.add(mid)
                self.adapter._sent_ids.remember(mid)
                return mid
            except FeishuApiError as exc:
                if not _refused(exc):
                    raise
                self._downgrade("text", exc)
        if not final:
            raise RuntimeError("cards are refused: the reply is sent as text at the end")
        return await self.adapter._send_one(chat, text, reply_to, self.in_thread, key)

    async def _edit_part(self, message_id: str, text: str, final: bool) -> None:
        api = self.adapter.api
        card = self._cards.get(message_id)
        if card is not None:
            card[1] += 1  # every operation on a card entity carries a larger sequence number
            if final:
                await api.update_card(card[0], card_json(text, streaming=False), card[1])
            else:  # a 429 raises at once: the pacer holds, this text joins the next update
                await api.stream_card_text(card[0], ELEMENT_ID, text, card[1], flood_raises=True)
        elif message_id in self._patched:
            await api.patch_card_message(message_id, card_json(text, streaming=False), flood_raises=not final)
        elif final:
            await self.adapter.edit(self.source, message_id, text)


def _chat_key(source: SessionSource) -> str:
    return f"{source.chat_id}|{source.thread_id or ''}"
