"""Feishu / Lark adapter: long connection (default) or webhook in, open API out.

Config (the ``platforms.feishu`` section; see notes/config_feishu.yaml):
  app_id, app_secret        the app's credentials (tenant token fetched and refreshed by the SDK)
  domain                    "feishu" (https://open.feishu.cn, default) | "lark" | a URL
  mode                      "websocket" (default) | "webhook" (POST /webhooks/feishu)
  verification_token        webhook: checked on every event
  encrypt_key               webhook: decrypts events and checks X-Lark-Signature
  watchdog_seconds          websocket: no frame (event or pong) this long -> reconnect (300)
  reaction                  emoji added to a message while the bot works on it ("OnIt"; "" = off)
  rich_text                 send replies as a post with markdown (true) or plain text (false)
  backoff_base/backoff_cap  reconnect back-off, seconds (1 / 60)

The adapter only translates: routing, sessions, commands, dedup (by message_id; Feishu redelivers
an unacknowledged event after 15 s, 5 min, 1 h and 6 h) and access control are the gateway's.
A press on a button of the bot's question card arrives as a `card.action.trigger` callback (over
the same long connection or webhook, checked alike) and becomes the presser's message of the
button's command; the callback is answered once that message is committed, leaving the card as it
is until the question is settled (`settle_choice` patches it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from typing import Any, AsyncIterator, Callable, Mapping

import lark_oapi as lark
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTrigger, P2CardActionTriggerResponse

from gateway.source import Platform, SessionSource
from platforms.base import Attachment, InboundMessage, MessageHandler, PlatformAdapter, ReplyStream, WebhookHandler
from platforms.feishu.api import FeishuApi, FeishuApiError, resolve_domain
from platforms.feishu.cards import FeishuCardReply, choice_card, settled_card
from platforms.feishu.events import (
    CARD_ACTION_EVENT,
    MESSAGE_EVENT,
    MalformedEvent,
    event_type,
    message_from_event,
    press_from_event,
    pressed_card,
    resource_opener,
    resource_type,
)
from platforms.feishu.settings import FeishuSettings
from platforms.feishu.webhook import WebhookKeys, make_handler
from platforms.feishu.ws import HookedWsClient, WsHooks, WsSession
from platforms.helpers import Backoff, Watchdog
from platforms.settings import settings_from

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhooks/feishu"
# Events an app commonly subscribes to besides messages; registered as no-ops so the SDK does not
# answer them with an error (which would make Feishu redeliver them).
_IGNORED_EVENTS = (
    "im.message.message_read_v1",
    "im.message.reaction.created_v1",
    "im.message.reaction.deleted_v1",
    "im.chat.member.bot.added_v1",
    "im.chat.member.bot.deleted_v1",
    "im.chat.access_event.bot_p2p_chat_entered_v1",
)
_REMEMBER = 2048  # bounded memory of sent/seen message ids
INTAKE_TIMEOUT = 10.0  # seconds the long connection waits for the gateway's commit before not acking


class _Lru(OrderedDict):
    def remember(self, key: str, value: Any = True) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > _REMEMBER:
            self.popitem(last=False)


class FeishuAdapter(PlatformAdapter):
    platform = Platform.FEISHU
    # A text message may be 150 KB and a post 30 KB of JSON. 4000 characters keeps even all-CJK
    # text (3 bytes each in UTF-8, more once JSON-escaped) far below the post limit, and a reply
    # of that size is still readable on a phone.
    max_message_length = 4000

    def __init__(self, config: Mapping[str, Any] | FeishuSettings) -> None:
        super().__init__()
        cfg = settings_from(FeishuSettings, config, "platforms.feishu")
        self.app_id = cfg.app_id
        app_secret = cfg.app_secret
        if not self.app_id or not app_secret:
            raise ValueError("platforms.feishu needs app_id and app_secret")
        self.domain = resolve_domain(cfg.domain)
        self.mode = cfg.mode.lower()
        if self.mode not in ("websocket", "webhook"):
            raise ValueError(f"platforms.feishu.mode must be websocket or webhook, got {self.mode!r}")
        self.keys = WebhookKeys(verification_token=cfg.verification_token, encrypt_key=cfg.encrypt_key)
        if self.mode == "webhook" and not (self.keys.verification_token or self.keys.encrypt_key):
            # an unauthenticated webhook would let anyone on the network talk as any user
            raise ValueError("platforms.feishu webhook mode needs verification_token and/or encrypt_key")
        self.watchdog_seconds = cfg.watchdog_seconds
        self.reaction = cfg.reaction
        self.rich_text = cfg.rich_text
        self._app_secret = app_secret
        self._backoff = Backoff(cfg.backoff_base, cfg.backoff_cap)
        self.api = FeishuApi(
            self.app_id,
            app_secret,
            self.domain,
            backoff_base=cfg.api_backoff_base,
            backoff_cap=cfg.api_backoff_cap,
        )
        self.bot_open_id: str | None = None
        self.bot_name: str | None = None
        self._on_message: MessageHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sent_ids = _Lru()  # messages the bot sent (for reply_to_bot)
        self._parents = _Lru()  # replied-to message id -> sent by this bot? (looked up)
        self._chains: dict[str, asyncio.Task] = {}  # chat -> its latest delivery (keeps order)
        self._latest = _Lru()  # (chat_id, thread_id) -> latest inbound message id
        self._reactions = _Lru()  # message id -> reaction id (None while being added)
        self._stopping = asyncio.Event()
        self._restart: asyncio.Event | None = None
        self._session: WsSession | None = None
        self._supervisor: asyncio.Task | None = None
        self._watchdog: Watchdog | None = None
        self._connected_once = asyncio.Event()

    def __repr__(self) -> str:  # never show the secret
        return f"FeishuAdapter(app_id={self.app_id!r}, domain={self.domain!r}, mode={self.mode!r})"

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, on_message: MessageHandler, connect_wait: float = 5.0) -> None:
        self._on_message = on_message
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        await self._load_bot_info(connect_wait)
        if self.mode == "webhook":
            # Feishu pushes to us; there is no connection to watch.
            self.set_ready(True, "webhook")
            self.mark_alive()
            return
        self.set_ready(False, "connecting")
        self._supervisor = asyncio.create_task(self._supervise())
        self._watchdog = Watchdog(self, self.watchdog_seconds, self._on_stale)
        self._watchdog.start()
        try:
            await asyncio.wait_for(self._connected_once.wait(), connect_wait)
        except asyncio.TimeoutError:
            log.warning("feishu long connection not up after %.0fs; still trying", connect_wait)

    async def stop(self) -> None:
        self._stopping.set()
        if self._restart:
            self._restart.set()
        if self._watchdog:
            await self._watchdog.stop()
            self._watchdog = None
        if self._supervisor:
            await self._supervisor
            self._supervisor = None
        await self._cancel_spawned()
        self.set_ready(False, "stopped")

    async def _load_bot_info(self, wait: float) -> None:
        """Learn the bot's open_id: it tells a mention of the bot from a mention of anyone else.

        Waits at most `wait` seconds (a slow or unreachable API must not hold up the gateway's
        start); until it succeeds, mentions of the bot go undetected, and it keeps trying.
        """
        task = self._spawn(self._bot_info_until_known())
        await asyncio.wait({task}, timeout=wait)
        if not task.done():
            log.error("feishu: bot info not available yet; @-mentions of the bot go undetected until it is")

    async def _try_bot_info(self) -> bool:
        try:
            bot = await self.api.bot_info()
        except FeishuApiError as exc:
            log.warning("feishu: bot info: %s", exc)
            return False
        self.bot_open_id = bot.get("open_id") or None
        self.bot_name = bot.get("app_name") or None
        return self.bot_open_id is not None

    async def _bot_info_until_known(self) -> None:
        backoff = Backoff(self._backoff.base, self._backoff.cap)
        while not await self._try_bot_info():
            try:
                await asyncio.wait_for(self._stopping.wait(), backoff.next_delay())
                return
            except asyncio.TimeoutError:
                pass

    # -- long connection ---------------------------------------------------------------------------
    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            ended = asyncio.Event()
            self._restart = ended
            session = WsSession(
                self._make_ws_client,
                loop,
                on_connected=self._on_connected,
                on_alive=self.mark_alive,
                on_ended=ended.set,
            )
            self._session = session
            session.start()
            await ended.wait()
            await session.stop()
            if self._stopping.is_set():
                break
            self.set_ready(False, "long connection lost; reconnecting")
            delay = self._backoff.next_delay()
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)
            except asyncio.TimeoutError:
                pass

    def _on_connected(self) -> None:
        self._backoff.reset()
        self.mark_alive()
        self.set_ready(True, "long connection up")
        self._connected_once.set()

    async def _on_stale(self) -> None:
        if self._restart is not None:
            self._restart.set()  # the supervisor tears the session down and reconnects

    def _make_ws_client(self, hooks: WsHooks) -> lark.ws.Client:
        builder = lark.EventDispatcherHandler.builder("", "")
        builder.register_p2_customized_event(MESSAGE_EVENT, self._on_ws_event)
        builder.register_p2_card_action_trigger(self._on_ws_card_action)
        for name in _IGNORED_EVENTS:
            builder.register_p2_customized_event(name, lambda _event: None)
        return HookedWsClient(
            self.app_id,
            self._app_secret,
            event_handler=builder.build(),
            domain=self.domain,
            auto_reconnect=False,
            log_level=lark.LogLevel.WARNING,  # the SDK logs the connection URL (with a ticket) at INFO
            hooks=hooks,
        )

    def _on_ws_event(self, event: lark.CustomizedEvent | P2CardActionTrigger) -> dict[str, Any] | None:
        # Runs on the long-connection thread, and the SDK acks the event when this returns: so
        # wait (bounded) until the gateway loop has committed it. Raising makes the SDK answer
        # 500, and Feishu redelivers.
        payload = json.loads(lark.JSON.marshal(event))
        assert self._loop is not None
        done = asyncio.run_coroutine_threadsafe(self._take(payload), self._loop)
        return done.result(timeout=INTAKE_TIMEOUT)

    def _on_ws_card_action(self, event: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        return P2CardActionTriggerResponse(self._on_ws_event(event))

    async def _take(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Hand one event to the gateway; return what answers it (None: the plain acknowledgement;
        a card callback is answered with an empty object: no toast, the card unchanged)."""
        delivery = self._ingest(payload)
        if delivery is not None:
            await delivery
        return {} if event_type(payload) == CARD_ACTION_EVENT else None

    # -- webhook -------------------------------------------------------------------------------------
    def webhook_handlers(self) -> dict[str, WebhookHandler]:
        if self.mode != "webhook":
            return {}
        return {WEBHOOK_PATH: make_handler(self.keys, self._take)}

    # -- inbound (gateway loop) ----------------------------------------------------------------------
    def _ingest(self, payload: dict[str, Any]) -> asyncio.Task | None:
        """Parse one event and start handing it to the gateway; the task ends once the gateway
        has committed it (what the webhook answer and the long-connection ack wait for)."""
        self.mark_alive()
        press = event_type(payload) == CARD_ACTION_EVENT
        try:
            if press:
                msg = press_from_event(payload)
            else:
                msg = message_from_event(payload, self.bot_open_id, self._sent_ids.__contains__, self._fetch_resource)
        except MalformedEvent as exc:
            log.warning("feishu: malformed event skipped: %s", exc)
            return None
        except Exception:  # an unexpected shape must never take the adapter down
            log.exception("feishu: event could not be parsed; skipped")
            return None
        if msg is None or self._on_message is None:
            return None
        key = _chat_key(msg.source)
        if not press:  # a press is no message: nothing to react to, reply under, or enter a thread by
            self._latest.remember(key, msg.message_id)
        # One chat's messages reach the gateway in arrival order, even when one of them waits
        # for a lookup; different chats do not wait for each other.
        task = self._spawn(self._deliver(msg, self._chains.get(key)))
        self._chains[key] = task
        task.add_done_callback(lambda t: self._chains.pop(key) if self._chains.get(key) is t else None)
        return task

    def reopen(self, msg: InboundMessage, attachment: Attachment) -> Callable[[], AsyncIterator[bytes]] | None:
        key = attachment.platform_file_id
        if not key:
            return None
        return resource_opener(self._fetch_resource, msg.message_id, key, resource_type(attachment.kind))

    async def _fetch_resource(self, message_id: str, file_key: str, resource_type: str) -> bytes:
        return await self.api.message_resource(message_id, file_key, resource_type)

    async def _deliver(self, msg: InboundMessage, previous: asyncio.Task | None) -> None:
        assert self._on_message is not None
        if msg.reply_to_message_id and not msg.reply_to_bot and msg.source.chat_type != "dm":
            msg.reply_to_bot = await self._is_bot_message(msg.reply_to_message_id)
        if previous is not None:
            await asyncio.wait({previous})
        try:
            await self._on_message(msg)
        except Exception:
            log.exception("feishu: message %s could not be stored; not acknowledged", msg.message_id)
            raise

    async def _is_bot_message(self, message_id: str) -> bool:
        """Whether a replied-to message is the bot's, when it is not among those sent since start.

        Replying to the bot addresses it in a group; after a restart the memory of sent ids is
        empty, so the message is looked up (once; the answer is remembered).
        """
        known = self._parents.get(message_id)
        if known is not None:
            return known
        try:
            sender_type, sender_id = await self.api.message_sender(message_id)
        except FeishuApiError as exc:
            log.info("feishu: cannot look up replied-to message: %s", exc)
            return False
        mine = sender_type == "app" and sender_id == self.app_id
        self._parents.remember(message_id, mine)
        return mine

    # -- outbound ------------------------------------------------------------------------------------
    takes_send_keys = True  # the uuid of a send or reply

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        in_thread = source.thread_id is not None
        if reply_to is not None:
            reply_to = pressed_card(reply_to)  # the answer to a press goes under the card pressed
        elif in_thread:
            # Feishu has no "post into thread X": a thread is entered by replying to a message in it.
            reply_to = self._latest.get(_chat_key(source))
        ids: list[str] = []
        for i, chunk in enumerate(self.split(text)):
            ids.append(
                await self._send_one(source.chat_id, chunk, reply_to, in_thread, f"{key}.{i}" if key and i else key)
            )
        await self._clear_reaction(reply_to or self._latest.get(_chat_key(source)))
        return ids

    async def _send_one(
        self, chat_id: str, text: str, reply_to: str | None, in_thread: bool, key: str | None = None
    ) -> str:
        """`key`: Feishu's `uuid` (a repeat within an hour returns the first message)."""
        if self.rich_text:
            try:
                mid = await self.api.send_message(chat_id, "post", _post(text), reply_to, in_thread, key)
                self._sent_ids.remember(mid)
                return mid
            except FeishuApiError as exc:
                if _outage(exc):
                    raise  # Feishu is unwell, not refusing the markup: plain text would fare no better
                log.warning("feishu: rich reply refused (%s); sending plain text", exc.code)
        mid = await self.api.send_message(chat_id, "text", {"text": text}, reply_to, in_thread, key)
        self._sent_ids.remember(mid)
        return mid

    # How streamed replies are shown (platforms.feishu.cards): "cardkit", "patch" or "text"; moves
    # down (never up) when Feishu refuses a way, so one refusal is not paid for on every reply.
    card_mode = "cardkit"

    def begin_reply(self, source: SessionSource, reply_to: str | None = None) -> ReplyStream:
        if reply_to is not None:
            reply_to = pressed_card(reply_to)  # the answer to a press goes under the card pressed
        elif source.thread_id is not None:
            reply_to = self._latest.get(_chat_key(source))  # a thread is entered by replying in it
        return FeishuCardReply(self, source, reply_to)

    async def edit(self, source: SessionSource, message_id: str, text: str) -> None:
        if not self.rich_text:
            await self.api.update_message(message_id, "text", {"text": text})
            return
        try:
            await self.api.update_message(message_id, "post", _post(text))
        except FeishuApiError as exc:
            if _outage(exc):
                raise
            await self.api.update_message(message_id, "text", {"text": text})

    async def send_choice(self, source: SessionSource, text: str, choices: list[tuple[str, str]]) -> list[str]:
        """The question as a card with a button per choice (cards.choice_card); a press comes back
        as a card callback, read by `press_from_event`."""
        where = {"chat_type": source.chat_type, **({"thread_id": source.thread_id} if source.thread_id else {})}
        in_thread = source.thread_id is not None
        reply_to = self._latest.get(_chat_key(source)) if in_thread else None
        card = choice_card(text, choices, where)
        mid = await self.api.send_message(source.chat_id, "interactive", card, reply_to, in_thread)
        self._sent_ids.remember(mid)
        return [mid]

    async def settle_choice(self, source: SessionSource, message_ids: list[str], text: str) -> None:
        # In the background: the API's retries (seconds while Feishu is unwell) must not hold up the
        # tool call the decision lets run.
        self._spawn(self._settle(message_ids, text))

    async def _settle(self, message_ids: list[str], text: str) -> None:
        for mid in message_ids:
            try:
                await self.api.patch_card_message(mid, settled_card(text))
            except FeishuApiError as exc:  # the answer to the press (or the timeout's result) still says it
                log.warning("feishu: question card %s not settled: %s", mid, exc)

    async def send_typing(self, source: SessionSource) -> None:
        """Add the working reaction to the message being answered, once per message."""
        if not self.reaction:
            return
        message_id = self._latest.get(_chat_key(source))
        if not message_id or message_id in self._reactions:
            return
        self._reactions.remember(message_id, None)  # None: being added
        try:
            reaction_id = await self.api.add_reaction(message_id, self.reaction)
        except FeishuApiError as exc:
            log.info("feishu: working reaction not added: %s", exc)
            return
        if self._reactions.get(message_id) == "" and reaction_id:
            # the answer went out while the reaction was being added: take it straight off
            await self._delete_reaction(message_id, reaction_id)
        else:
            self._reactions.remember(message_id, reaction_id)

    async def _clear_reaction(self, message_id: str | None) -> None:
        if not message_id or message_id not in self._reactions:
            return
        reaction_id = self._reactions.get(message_id)
        self._reactions.remember(message_id, "")  # "": answered; never react to it again
        if reaction_id:
            await self._delete_reaction(message_id, reaction_id)

    async def _delete_reaction(self, message_id: str, reaction_id: str) -> None:
        try:
            await self.api.delete_reaction(message_id, reaction_id)
        except FeishuApiError as exc:
            log.info("feishu: working reaction not removed: %s", exc)


def _outage(exc: FeishuApiError) -> bool:
    """A failure of the service (network, 5xx, rate limit) rather than a refusal of the content."""
    return exc.status is None or exc.status >= 500 or exc.status == 429


def _chat_key(source: SessionSource) -> str:
    return f"{source.chat_id}|{source.thread_id or ''}"


def _post(text: str) -> dict[str, Any]:
    """A post whose one element is markdown: Feishu renders bold, lists, links and code fences."""
    return {"zh_cn": {"content": [[{"tag": "md", "text": text}]]}}
