"""Feishu/Lark open API calls the adapter makes, with token refresh and back-off.

Built on lark-oapi's `Client` (which fetches the tenant access token from app_id/app_secret and
caches it). What the SDK does not do, this module adds:

- a token Feishu reports as invalid/expired (codes 99991661/99991663/99991668) is dropped from
  the SDK's cache and the call retried once with a fresh one;
- 429 / rate-limit code 99991400 waits for ``x-ogw-ratelimit-reset`` (or back-off), 5xx and
  network errors back off; a few attempts, then a clear `FeishuApiError`. A streamed reply's
  intermediate card update asks for `flood_raises` instead: the 429 comes back at once as
  `RateLimited`, so the reply's pacer holds and folds the text into its next update rather than
  sleeping here with stale text (and holding up the final update behind it);
- SDK calls are blocking (requests), so they run in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Callable

import lark_oapi as lark
import requests
from lark_oapi.api.cardkit.v1 import (
    Card,
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    UpdateCardRequest,
    UpdateCardRequestBody,
)
from lark_oapi.api.im.v1 import (
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetMessageRequest,
    GetMessageResourceRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
    UpdateMessageRequest,
    UpdateMessageRequestBody,
)
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from platforms.base import RateLimited
from platforms.helpers import Backoff

log = logging.getLogger(__name__)

TOKEN_INVALID_CODES = {99991661, 99991663, 99991668}
RATE_LIMIT_CODES = {99991400}


class FeishuApiError(Exception):
    def __init__(self, what: str, code: int | None, msg: str, status: int | None = None) -> None:
        super().__init__(f"{what} failed: code={code} status={status} {msg}")
        self.code, self.msg, self.status = code, msg, status


def resolve_domain(domain: str | None) -> str:
    """'feishu' | 'lark' | a URL -> the API origin."""
    value = (domain or "feishu").strip()
    if value.lower() == "feishu":
        return lark.FEISHU_DOMAIN
    if value.lower() == "lark":
        return lark.LARK_DOMAIN
    if not value.startswith(("https://", "http://")):
        raise ValueError(f"feishu domain must be 'feishu', 'lark' or a URL, got {value!r}")
    return value.rstrip("/")


class FeishuApi:
    def __init__(
        self,
        app_id: str,
        app_secret: str,
        domain: str,
        timeout: float = 15.0,
        attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        self.app_id = app_id
        self.domain = domain
        self.attempts = attempts
        self.backoff_base, self.backoff_cap = backoff_base, backoff_cap
        self.client = (
            lark.Client.builder()
            .app_id(app_id)
            .app_secret(app_secret)
            .domain(domain)
            .timeout(timeout)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )

    # -- the retry core ----------------------------------------------------------------------
    def invalidate_token(self) -> None:
        # The SDK caches the tenant token under this key until shortly before its stated expiry;
        # a token revoked earlier (secret rotated, server restart) must be fetched again.
        TokenManager.cache.set(f"self_tenant_token:{self.app_id}", "", 0)

    async def call(self, what: str, do: Callable[[], Any], *, flood_raises: bool = False) -> Any:
        """Run the blocking SDK call `do` (which builds a fresh request each time) with retries.
        `flood_raises`: a rate limit raises `RateLimited` at once instead of being waited out."""
        backoff = Backoff(self.backoff_base, self.backoff_cap)
        refreshed = False
        last: FeishuApiError | None = None
        for _attempt in range(self.attempts):
            try:
                resp = await asyncio.to_thread(do)
            except (requests.RequestException, ValueError) as exc:
                # network error, or a non-JSON body (a proxy's 502 page) the SDK could not parse
                last = FeishuApiError(what, None, f"{type(exc).__name__}: {exc}")
                log.warning("feishu %s: transient error, retrying: %s", what, type(exc).__name__)
                await backoff.sleep()
                continue
            except ObtainAccessTokenException as exc:
                raise FeishuApiError(what, exc.code, f"cannot get tenant token: {exc.msg}") from None
            status = resp.raw.status_code if resp.raw is not None else None
            code = resp.code
            if code == 0:
                return resp
            last = FeishuApiError(what, code, resp.msg or "", status)
            if code in TOKEN_INVALID_CODES and not refreshed:
                log.info("feishu %s: access token rejected (%s); refreshing", what, code)
                self.invalidate_token()
                refreshed = True
                continue
            if status == 429 or code in RATE_LIMIT_CODES:
                wait = _reset_after(resp) or backoff.next_delay()
                if flood_raises:
                    raise RateLimited(wait, f"feishu {what}")
                log.warning("feishu %s: rate limited; waiting %.1fs", what, wait)
                await asyncio.sleep(min(wait, self.backoff_cap))
                continue
            if status is not None and status >= 500:
                log.warning("feishu %s: server error %s; backing off", what, status)
                await backoff.sleep()
                continue
            raise last
        assert last is not None
        raise last

    # -- calls ------------------------------------------------------------------------------
    async def bot_info(self) -> dict[str, Any]:
        def do() -> Any:
            req = (
                lark.BaseRequest.builder()
                .http_method(lark.HttpMethod.GET)
                .uri("/open-apis/bot/v3/info")
                .token_types({lark.AccessTokenType.TENANT})
                .build()
            )
            return self.client.request(req)

        resp = await self.call("bot info", do)
        body = json.loads(resp.raw.content)
        bot = body.get("bot")
        if not isinstance(bot, dict):
            raise FeishuApiError("bot info", 0, "response has no bot object")
        return bot

    async def send_message(
        self,
        chat_id: str,
        msg_type: str,
        content: dict[str, Any],
        reply_to: str | None = None,
        reply_in_thread: bool = False,
        key: str | None = None,
    ) -> str:
        """Send to a chat, or reply to `reply_to` (in its thread when asked); return message id.
        `key`: the uuid (the outbox's, stable across restarts), else a fresh one."""
        body = json.dumps(content, ensure_ascii=False)
        # One uuid for all attempts: Feishu drops a repeat within an hour, so a retry after a
        # timeout whose request did arrive does not post the reply twice (nor, with the outbox's
        # key, a send repeated after a crash).
        dedupe = key or str(uuid.uuid4())

        def do() -> Any:
            if reply_to:
                req = (
                    ReplyMessageRequest.builder()
                    .message_id(reply_to)
                    .request_body(
                        ReplyMessageRequestBody.builder()
                        .msg_type(msg_type)
                        .content(body)
                        .reply_in_thread(reply_in_thread)
                        .uuid(dedupe)
                        .build()
                    )
                    .build()
                )
                return self.client.im.v1.message.reply(req)
            req = (
                CreateMessageRequest.builder()
                .receive_id_type("chat_id")
                .request_body(
                    CreateMessageRequestBody.builder()
                    .receive_id(chat_id)
                    .msg_type(msg_type)
                    .content(body)
                    .uuid(dedupe)
                    .build()
                )
                .build()
            )
            return self.client.im.v1.message.create(req)

        resp = await self.call("reply" if reply_to else "send", do)
        return resp.data.message_id

    async def message_sender(self, message_id: str) -> tuple[str | None, str | None]:
        """(sender_type, sender id) of a message: ("app", app_id) for a message a bot sent."""

        def do() -> Any:
            return self.client.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build())

        resp = await self.call("get message", do)
        items = resp.data.items if resp.data and resp.data.items else []
        if not items or items[0].sender is None:
            return None, None
        return items[0].sender.sender_type, items[0].sender.id

    async def message_resource(self, message_id: str, file_key: str, resource_type: str) -> bytes:
        """A file or image someone sent in a message (`resource_type` "image" or "file")."""

        def do() -> Any:
            req = (
                GetMessageResourceRequest.builder()
                .message_id(message_id)
                .file_key(file_key)
                .type(resource_type)
                .build()
            )
            return self.client.im.v1.message_resource.get(req)

        resp = await self.call("download", do)
        return resp.file.getvalue() if resp.file is not None else b""

    async def update_message(self, message_id: str, msg_type: str, content: dict[str, Any]) -> None:
        body = json.dumps(content, ensure_ascii=False)

        def do() -> Any:
            req = (
                UpdateMessageRequest.builder()
                .message_id(message_id)
                .request_body(UpdateMessageRequestBody.builder().msg_type(msg_type).content(body).build())
                .build()
            )
            return self.client.im.v1.message.update(req)

        await self.call("edit", do)

    async def patch_card_message(self, message_id: str, card: dict[str, Any], *, flood_raises: bool = False) -> None:
        """Replace the card of an interactive message (the card must say update_multi)."""
        body = json.dumps(card, ensure_ascii=False)

        def do() -> Any:
            req = (
                PatchMessageRequest.builder()
                .message_id(message_id)
                .request_body(PatchMessageRequestBody.builder().content(body).build())
                .build()
            )
            return self.client.im.v1.message.patch(req)

        await self.call("card patch", do, flood_raises=flood_raises)

    # -- CardKit: a card entity, sent once, then updated by sequence number --------------------------
    async def create_card(self, card: dict[str, Any]) -> str:
        data = json.dumps(card, ensure_ascii=False)

        def do() -> Any:
            req = (
                CreateCardRequest.builder()
                .request_body(CreateCardRequestBody.builder().type("card_json").data(data).build())
                .build()
            )
            return self.client.cardkit.v1.card.create(req)

        resp = await self.call("card create", do)
        return resp.data.card_id

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, sequence: int, *, flood_raises: bool = False
    ) -> None:
        """The whole text so far into a markdown element; Feishu types out what is new."""

        def do() -> Any:
            req = (
                ContentCardElementRequest.builder()
                .card_id(card_id)
                .element_id(element_id)
                .request_body(
                    ContentCardElementRequestBody.builder()
                    .content(text)
                    .sequence(sequence)
                    .uuid(f"{card_id}-{sequence}")
                    .build()
                )
                .build()
            )
            return self.client.cardkit.v1.card_element.content(req)

        await self.call("card stream", do, flood_raises=flood_raises)

    async def update_card(self, card_id: str, card: dict[str, Any], sequence: int) -> None:
        data = json.dumps(card, ensure_ascii=False)

        def do() -> Any:
            req = (
                UpdateCardRequest.builder()
                .card_id(card_id)
                .request_body(
                    UpdateCardRequestBody.builder()
                    .card(Card.builder().type("card_json").data(data).build())
                    .sequence(sequence)
                    .uuid(f"{card_id}-{sequence}")
                    .build()
                )
                .build()
            )
            return self.client.cardkit.v1.card.update(req)

        await self.call("card update", do)

    async def add_reaction(self, message_id: str, emoji_type: str) -> str | None:
        def do() -> Any:
            req = (
                CreateMessageReactionRequest.builder()
                .message_id(message_id)
                .request_body(
                    CreateMessageReactionRequestBody.builder()
                    .reaction_type(Emoji.builder().emoji_type(emoji_type).build())
                    .build()
                )
                .build()
            )
            return self.client.im.v1.message_reaction.create(req)

        resp = await self.call("reaction", do)
        return resp.data.reaction_id if resp.data else None

    async def delete_reaction(self, message_id: str, reaction_id: str) -> None:
        def do() -> Any:
            req = DeleteMessageReactionRequest.builder().message_id(message_id).reaction_id(reaction_id).build()
            return self.client.im.v1.message_reaction.delete(req)

        await self.call("remove reaction", do)


def _reset_after(resp: Any) -> float | None:
    headers = resp.raw.headers or {} if resp.raw is not None else {}
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        try:
            return max(0.0, float(lowered[name]))
        except (KeyError, ValueError):
            continue
    return None
