"""Telegram adapter on python-telegram-bot (Bot API over HTTPS).

Inbound: long polling by default (our own loop over `bot.get_updates`, so every successful poll
feeds the watchdog and a reconnect is just "cancel the poll, start a new one"), or a webhook served
by the gateway's HTTP server at POST /webhooks/telegram, checked against `secret_token`.
Outbound: MarkdownV2 (converted from ordinary markdown) with a plain-text fallback when Telegram
refuses the markup; flood waits (429 retry_after) and network errors are retried a bounded number
of times; a chat that blocked the bot is logged and skipped.

`base_url` is python-telegram-bot's: the token is appended (``https://api.telegram.org/bot``), so
a local Bot API server or a test fake is just another URL.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import re
import warnings
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TypeVar

from aiohttp import web
from telegram import BotCommand, InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder

from gateway.language import DEFAULT as DEFAULT_LANGUAGE
from gateway.language import Language, gettext
from gateway.redact import redact_loggers
from gateway.source import Platform, SessionSource
from platforms.base import (
    Attachment,
    InboundMessage,
    MessageHandler,
    PlatformAdapter,
    RateLimited,
    ReplyStream,
    WebhookHandler,
)
from platforms.helpers import Backoff, Watchdog, cancel_and_wait, utf16_length
from platforms.settings import settings_from
from platforms.telegram.calls import (
    brief,
    call_with_retries,
    chat_id_param,
    is_markup_error,
    retry_after_seconds,
)
from platforms.telegram.format import to_markdown_v2
from platforms.telegram.inbound import file_opener, message_key, parse_message_key, update_to_inbound
from platforms.telegram.settings import TelegramSettings
from platforms.telegram.stream import pacer_for, telegram_reply

log = logging.getLogger(__name__)

# The loggers that may print the bot token (a filter on a logger sees only that logger's records).
SDK_LOGGERS = (
    "httpx",
    "httpcore",
    "telegram",
    "telegram.Bot",
    "telegram.ext",
    "telegram.ext.ExtBot",
    "telegram.ext.Application",
    "telegram.ext.Updater",
    "telegram.request",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
    "platforms.telegram",
    "platforms.telegram.adapter",
    "platforms.telegram.inbound",
)
WEBHOOK_PATH = "/webhooks/telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_SECRET_OK = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_COMMAND_OK = re.compile(r"^[a-z0-9_]{1,32}$")
T = TypeVar("T")
UPDATES = ["message", "callback_query"]  # messages, and presses on the bot's buttons (approvals)
# Connections to the Bot API. The SDK's default is 256, and httpcore's pool walks every connection,
# and for each idle one counts all of them, on each request: with 200 chats answered at once (a
# webhook `chinwag run`, instant model) 256 cost 14.4-18.6 ms of CPU per message and 39-45 msg/s,
# 32 cost 10.9-12.6 ms and 50-69 msg/s (interleaved runs). Telegram lets a bot send about 30
# messages a second in all, so 32 requests in flight are not the limit.
BOT_API_CONNECTIONS = 32


class TelegramConfigError(ValueError):
    """The `platforms.telegram` section cannot work as written."""


class TelegramAdapter(PlatformAdapter):
    platform = Platform.TELEGRAM
    max_message_length = 4096  # Bot API limit, counted in UTF-16 code units

    def __init__(self, config: Mapping[str, Any] | TelegramSettings) -> None:
        super().__init__()
        cfg = settings_from(TelegramSettings, config, "platforms.telegram", TelegramConfigError)
        self.token = cfg.token.strip()
        if not self.token:
            raise TelegramConfigError("platforms.telegram.token is required (from @BotFather)")
        # The Bot API puts the token in every URL: httpx logs each request URL at INFO,
        # python-telegram-bot the base URL at DEBUG, and its InvalidToken message quotes it.
        redact_loggers(SDK_LOGGERS, [self.token])
        self.base_url = cfg.base_url or "https://api.telegram.org/bot"
        self.base_file_url = cfg.base_file_url or "https://api.telegram.org/file/bot"
        self.webhook_url = cfg.webhook_url or None
        self.mode = cfg.effective_mode
        self.secret_token = cfg.secret_token or None
        if self.secret_token:
            redact_loggers(SDK_LOGGERS, [str(self.secret_token)])  # the SDK logs setWebhook parameters at DEBUG
        self.poll_timeout = cfg.poll_timeout
        self.watchdog_seconds = cfg.watchdog_seconds
        self.reconnect_base = cfg.reconnect_base
        self.reconnect_cap = cfg.reconnect_cap
        self.send_attempts = cfg.send_attempts
        self.max_retry_after = cfg.max_retry_after
        self.request_timeout = cfg.request_timeout
        self.webhook_check_seconds = cfg.webhook_check_seconds or max(1.0, self.watchdog_seconds / 4)
        self._validate()

        self._app: Application | None = None
        self._on_message: MessageHandler | None = None
        self._offset: int | None = None
        self._highest = -1  # the highest update id polled
        self._intakes: dict[int, asyncio.Future] = {}  # polled updates being committed by the gateway
        self._failed: set[int] = set()  # polled updates the gateway could not store: poll them again
        self._loop_task: asyncio.Task | None = None
        self._watchdog: Watchdog | None = None
        self._commands: dict[str, str] = {}
        self._bot_id: int | None = None
        self._standby = False  # replicas: another replica polls; this one only sends (lead())
        self._bot_username: str | None = None
        self._webhook_error: str | None = None  # last delivery error Telegram reported

    def _validate(self) -> None:
        if self.mode not in ("polling", "webhook"):
            raise TelegramConfigError(f"platforms.telegram.mode must be polling or webhook, got {self.mode!r}")
        if self.mode == "webhook":
            if not self.webhook_url:
                raise TelegramConfigError("platforms.telegram.webhook_url is required in webhook mode")
            if not self.secret_token or not _SECRET_OK.match(str(self.secret_token)):
                raise TelegramConfigError(
                    "platforms.telegram.secret_token is required in webhook mode (1-256 characters: A-Z a-z 0-9 _ -)"
                )
        if self.poll_timeout < 0:
            raise TelegramConfigError("platforms.telegram.poll_timeout must be >= 0")
        if self.mode == "polling" and self.watchdog_seconds <= self.poll_timeout:
            raise TelegramConfigError(
                "platforms.telegram.watchdog_seconds must be longer than poll_timeout "
                "(an idle long poll lasts poll_timeout seconds)"
            )
        if self.send_attempts < 1:
            raise TelegramConfigError("platforms.telegram.send_attempts must be >= 1")

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def bot_username(self) -> str | None:
        """The bot's @username (without '@') once connected; the gateway uses it to tell a
        "/cmd@thisbot" from another bot's command."""
        return self._bot_username

    @property
    def bot(self):  # telegram.ext.ExtBot
        if self._app is None:
            raise RuntimeError("telegram adapter not started")
        return self._app.bot

    async def start(self, on_message: MessageHandler) -> None:
        self._on_message = on_message
        t = self.request_timeout
        self._app = (
            ApplicationBuilder()
            .token(self.token)
            .base_url(self.base_url)
            .base_file_url(self.base_file_url)
            .updater(None)  # we drive getUpdates / the webhook ourselves
            .connect_timeout(t)
            .read_timeout(t)
            .write_timeout(t)
            .pool_timeout(t)
            .connection_pool_size(BOT_API_CONNECTIONS)
            .get_updates_connect_timeout(t)
            .get_updates_read_timeout(t)  # the long-poll timeout is added on top by the SDK
            .build()
        )
        self.set_ready(False, "connecting")
        try:
            await self._connect()
        except InvalidToken:
            # the SDK's message for this error contains the token: never log or re-raise it
            await self._shutdown_app()
            raise TelegramConfigError(
                "Telegram rejected the bot token (401/404); check platforms.telegram.token"
            ) from None
        except (NetworkError, RetryAfter, TelegramError) as exc:
            # The network may come back: keep trying in the background instead of failing start.
            log.warning("telegram: initial connect failed (%s); retrying in background", brief(exc))
        if self.mode == "polling" and self._standby:
            self.set_ready(True, "standby: another replica polls")
            return
        if self.mode == "polling":
            self._loop_task = asyncio.create_task(self._poll_loop(), name="telegram-poll")
        else:
            self._loop_task = asyncio.create_task(self._webhook_loop(), name="telegram-webhook")
        self._watchdog = Watchdog(self, self.watchdog_seconds, self._reconnect)
        self._watchdog.start()

    # -- replicas: one poller per bot ----------------------------------------------------------
    def leader_key(self) -> str | None:
        """Polling: one getUpdates per bot (a second one is refused with 409), so only the
        leading replica polls; webhooks arrive at every replica."""
        return f"telegram:{self.token.split(':', 1)[0]}:polling" if self.mode == "polling" else None

    def await_leadership(self) -> None:
        self._standby = True

    async def lead(self, leading: bool) -> None:
        if leading and self._standby:
            self._standby = False
            if self._app is not None and self._loop_task is None:
                self._loop_task = asyncio.create_task(self._poll_loop(), name="telegram-poll")
                self._watchdog = Watchdog(self, self.watchdog_seconds, self._reconnect)
                self._watchdog.start()
        elif not leading and not self._standby:
            self._standby = True
            if self._watchdog:
                await self._watchdog.stop()
                self._watchdog = None
            await cancel_and_wait(self._loop_task)
            self._loop_task = None
            self.set_ready(True, "standby: another replica polls")

    async def _connect(self) -> None:
        """getMe (token check, our @username), then the webhook/polling switch and the menu."""
        assert self._app is not None
        await self._app.initialize()  # idempotent once it has succeeded
        self._bot_id, self._bot_username = self.bot.id, self.bot.username
        if self.mode == "polling":
            # a webhook left behind by an earlier deployment makes getUpdates fail with 409
            await self.bot.delete_webhook(drop_pending_updates=False)
        else:
            await self.bot.set_webhook(url=self.webhook_url, secret_token=self.secret_token, allowed_updates=UPDATES)
        if self._commands:
            await self._push_commands()

    async def stop(self) -> None:
        if self._watchdog:
            await self._watchdog.stop()
            self._watchdog = None
        await cancel_and_wait(self._loop_task)
        self._loop_task = None
        await self._cancel_spawned()
        await self._shutdown_app()
        self.set_ready(False, "stopped")

    async def _shutdown_app(self) -> None:
        if self._app is not None:
            try:
                await self._app.shutdown()
            except Exception as exc:  # shutting down must not mask the reason we stop
                log.debug("telegram: shutdown: %s", brief(exc))
            self._app = None

    async def _reconnect(self) -> None:
        """Watchdog callback: nothing heard for too long. Drop the (possibly half-dead) poll and
        start over; in webhook mode re-register the webhook."""
        log.warning("telegram: no poll or event for %.0fs; reconnecting", self.watchdog_seconds)
        await cancel_and_wait(self._loop_task)
        if self.mode == "polling":
            self._loop_task = asyncio.create_task(self._poll_loop(), name="telegram-poll")
        else:
            self._loop_task = asyncio.create_task(self._webhook_loop(), name="telegram-webhook")

    # -- inbound: polling ----------------------------------------------------------------------
    async def _poll_loop(self) -> None:
        backoff = Backoff(self.reconnect_base, self.reconnect_cap)
        connected = self._bot_id is not None
        while True:
            try:
                if not connected:
                    await self._connect()
                    connected = True
                batch = await self._get_updates()
            except asyncio.CancelledError:
                raise
            except RetryAfter as exc:
                self.set_ready(False, "flood control")
                await asyncio.sleep(min(retry_after_seconds(exc), self.max_retry_after))
                continue
            except Exception as exc:
                self.set_ready(False, self._failure_detail(exc))
                if isinstance(exc, Conflict):
                    connected = False  # deleteWebhook again before the next poll
                delay = backoff.next_delay()
                log.warning("telegram: poll failed (%s); retry in %.1fs", brief(exc), delay)
                await asyncio.sleep(delay)
                continue
            backoff.reset()
            self.mark_alive()
            self.set_ready(True, "polling")
            await self._take_batch(batch)

    async def _take_batch(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        """Hand a polled batch to the gateway; the offset moves past an update only once the
        gateway has committed it (and every one before it), so one it could not store is polled
        again. An intake still running does not stall polling: its update comes back in the next
        batches and is skipped until the commit is in. A batch's intakes share one group commit."""
        started = []
        for update_id, raw in batch:
            self._highest = max(self._highest, update_id)
            if update_id in self._intakes:
                continue  # still being committed
            self._failed.discard(update_id)
            inbound = self._parse(raw)
            if inbound is None:
                continue
            assert self._on_message is not None  # polling runs only once started
            intake = asyncio.ensure_future(self._on_message(inbound))
            self._intakes[update_id] = intake
            intake.add_done_callback(functools.partial(self._intake_done, update_id))
            started.append(intake)
        if started:
            await asyncio.wait(started, timeout=1.0)  # usually the commits are in: the next poll confirms them
        open_ids = set(self._intakes) | self._failed
        self._offset = min(open_ids) if open_ids else self._highest + 1

    def _intake_done(self, update_id: int, intake: asyncio.Future) -> None:
        self._intakes.pop(update_id, None)
        if intake.cancelled() or intake.exception() is not None:
            if not intake.cancelled():
                log.error("telegram: update %s could not be stored; it is polled again", update_id)
            self._failed.add(update_id)

    def _failure_detail(self, exc: BaseException) -> str:
        if isinstance(exc, InvalidToken):
            return "token rejected by Telegram (401/404)"
        if isinstance(exc, Conflict):
            return "conflict: another poller or a webhook is active"
        return f"poll failing: {type(exc).__name__}"

    async def _get_updates(self) -> list[tuple[int, dict[str, Any]]]:
        """One long poll. Returns (update_id, raw dict) pairs.

        The SDK parses the whole batch at once, so one malformed update would make every poll
        fail at the same offset forever. On a parse failure we fetch the same batch raw and
        parse each update on its own (malformed ones are then logged and skipped)."""
        try:
            updates = await self.bot.get_updates(
                offset=self._offset, timeout=self.poll_timeout, allowed_updates=UPDATES
            )
            return [(u.update_id, u.to_dict()) for u in updates]
        except TelegramError:
            raise
        except Exception as exc:
            log.warning("telegram: a polled update failed to parse (%s); re-reading raw", brief(exc))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "use Bot.get_updates": that is what just failed
            raw = await self.bot.do_api_request(
                "getUpdates", api_kwargs={"offset": self._offset, "timeout": 0, "limit": 100}
            )
        out = []
        for item in raw if isinstance(raw, list) else []:
            if isinstance(item, dict) and isinstance(item.get("update_id"), int):
                out.append((item["update_id"], item))
            else:
                log.warning("telegram: skipping an update without a usable update_id")
        if not out and raw:
            raise NetworkError("getUpdates returned no usable update ids")
        return out

    # -- inbound: webhook ----------------------------------------------------------------------
    def webhook_handlers(self) -> dict[str, WebhookHandler]:
        return {WEBHOOK_PATH: self._handle_webhook} if self.mode == "webhook" else {}

    async def _handle_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), str(self.secret_token).encode()):
            log.warning("telegram: webhook call with a missing or wrong secret token; refused")
            return web.Response(status=403, text="forbidden")
        if self._app is None or self._on_message is None:
            return web.Response(status=503, text="not started")  # Telegram retries later
        try:
            data = await request.json()
        except web.HTTPRequestEntityTooLarge:
            log.warning("telegram: webhook body over the server's limit; refused (413)")
            raise
        except Exception:
            log.warning("telegram: webhook body is not JSON; skipped")
            return web.Response(status=400, text="bad json")
        if not isinstance(data, dict):
            log.warning("telegram: webhook body is not an object; skipped")
            return web.Response(status=400, text="bad update")
        self.mark_alive()
        inbound = self._parse(data)
        if inbound is not None:
            # 200 only once the gateway has committed the update (the turn runs after, so this
            # stays fast); an update it could not store gets a 500 and Telegram sends it again.
            try:
                await self._on_message(inbound)
            except Exception:
                log.exception("telegram: update %s could not be stored; asking for redelivery", data.get("update_id"))
                return web.Response(status=500, text="not stored")
        return web.Response(status=200, text="ok")

    async def _webhook_loop(self) -> None:
        """Liveness for webhook mode: check (and if lost, restore) the registration."""
        backoff = Backoff(self.reconnect_base, self.reconnect_cap)
        connected = self._bot_id is not None  # start() registered it; a lost one is seen below
        while True:
            try:
                if not connected:
                    await self._connect()
                    connected = True
                info = await self.bot.get_webhook_info()
                if info.url != self.webhook_url:
                    log.warning("telegram: webhook registration lost; registering again")
                    connected = False
                    continue
                if info.last_error_message and info.last_error_message != self._webhook_error:
                    log.warning("telegram: Telegram reports webhook delivery errors: %s", info.last_error_message)
                self._webhook_error = info.last_error_message
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.set_ready(False, self._failure_detail(exc).replace("poll", "webhook check"))
                delay = backoff.next_delay()
                log.warning("telegram: webhook check failed (%s); retry in %.1fs", brief(exc), delay)
                await asyncio.sleep(delay)
                continue
            backoff.reset()
            self.mark_alive()
            self.set_ready(True, "webhook")
            await asyncio.sleep(self.webhook_check_seconds)

    # -- inbound: common -----------------------------------------------------------------------
    def _parse(self, raw: dict[str, Any]) -> InboundMessage | None:
        """One raw update as the gateway's message; None for one to skip (malformed, no text).
        The gateway's intake (platforms.base.MessageHandler) returns once the message is
        committed, not answered, so awaiting it never stalls polling or the webhook reply."""
        try:
            update = Update.de_json(raw, self.bot)
            inbound = update_to_inbound(update, raw, self._bot_id, self._bot_username, self._fetch_file)
            if update.callback_query is not None:  # the button stops spinning once answered
                self._answer_press(update.callback_query.id)
        except Exception as exc:
            log.warning("telegram: skipping malformed update %s (%s)", raw.get("update_id"), brief(exc))
            return None
        if inbound is None:
            log.debug("telegram: update %s carries no user text; skipped", raw.get("update_id"))
        return inbound

    def _answer_press(self, query_id: str) -> None:
        self._spawn(self._call(lambda: self.bot.answer_callback_query(query_id)))

    def reopen(self, msg: InboundMessage, attachment: Attachment) -> Callable[[], AsyncIterator[bytes]] | None:
        file_id = attachment.platform_file_id
        return file_opener(self._fetch_file, file_id) if file_id else None  # a file_id stays valid

    async def _fetch_file(self, file_id: str) -> bytes:
        """getFile, then the download from `base_file_url` (python-telegram-bot builds the URL)."""
        tg_file = await self.bot.get_file(file_id)
        return bytes(await tg_file.download_as_bytearray())

    # -- outbound ------------------------------------------------------------------------------
    def message_length(self, text: str) -> int:
        return utf16_length(text)

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        ids: list[str] = []  # (no idempotency key on Telegram: `key` goes unused)
        for i, chunk in enumerate(self.split(text)):
            sent = await self._send_chunk(source, chunk, reply_to if i == 0 else None)
            if sent is None:
                return ids
            ids.append(sent)
        return ids

    async def _send_chunk(
        self,
        source: SessionSource,
        chunk: str,
        reply_to: str | None,
        *,
        markup: bool = True,
        flood_raises: bool = False,
    ) -> str | None:
        """Send one part (MarkdownV2 with the plain fallback, or plain with `markup` False).
        None: the chat cannot be written to. `flood_raises`: a 429 raises RateLimited at once
        (a streamed reply's pacer waits it out) instead of being slept through here."""
        chat_id: int | str = chat_id_param(source.chat_id)
        kwargs: dict[str, Any] = {}
        if source.chat_type == "forum" and source.thread_id:
            kwargs["message_thread_id"] = int(source.thread_id)
        if reply_to:
            kwargs["reply_parameters"] = ReplyParameters(
                message_id=parse_message_key(reply_to)[1], allow_sending_without_reply=True
            )
        call = self._call_raising if flood_raises else self._call
        try:
            if not markup:
                msg = await call(lambda: self.bot.send_message(chat_id, chunk, **kwargs))
                return message_key(msg.chat_id, msg.message_id)
            try:
                msg = await call(
                    lambda: self.bot.send_message(
                        chat_id, to_markdown_v2(chunk), parse_mode=ParseMode.MARKDOWN_V2, **kwargs
                    )
                )
            except BadRequest as exc:
                if not is_markup_error(exc):
                    raise
                log.info("telegram: MarkdownV2 refused (%s); sending as plain text", brief(exc))
                msg = await call(lambda: self.bot.send_message(chat_id, chunk, **kwargs))
        except Forbidden as exc:
            # blocked by the user, kicked from the group: nothing to deliver to; not our crash
            log.warning("telegram: cannot send to chat %s: %s", source.chat_id, brief(exc))
            return None
        except ChatMigrated as exc:
            log.warning("telegram: chat %s moved to %s; resending there", source.chat_id, exc.new_chat_id)
            moved = SessionSource(**{**source.to_dict(), "chat_id": str(exc.new_chat_id)})
            return await self._send_chunk(moved, chunk, None, markup=markup, flood_raises=flood_raises)
        return message_key(msg.chat_id, msg.message_id)

    async def send_choice(self, source: SessionSource, text: str, choices: list[tuple[str, str]]) -> list[str]:
        """The question with an inline keyboard: a press comes back as a callback query, which
        `update_to_inbound` reads as the presser's message of the button's command."""
        kwargs: dict[str, Any] = {}
        if source.chat_type == "forum" and source.thread_id:
            kwargs["message_thread_id"] = int(source.thread_id)
        keyboard = InlineKeyboardMarkup([[InlineKeyboardButton(label, callback_data=data) for label, data in choices]])
        chat_id = chat_id_param(source.chat_id)
        msg = await self._call(lambda: self.bot.send_message(chat_id, text, reply_markup=keyboard, **kwargs))
        return [message_key(msg.chat_id, msg.message_id)]

    async def settle_choice(self, source: SessionSource, message_ids: list[str], text: str) -> None:
        # In the background: a flood wait (seconds) must not hold up the tool call the decision lets run.
        self._spawn(self._settle(source, message_ids, text))

    async def _settle(self, source: SessionSource, message_ids: list[str], text: str) -> None:
        """The question becomes `text`: editMessageText without `reply_markup` drops the keyboard.
        Paced with the chat's streamed replies (the same per-chat budget)."""
        pacer, key = pacer_for(self, source), str(source.chat_id)
        for message_id in message_ids:
            await pacer.wait(key)
            pacer.record(key)
            try:  # plain, as the question went
                await self._edit_chunk(source, message_id, text, markup=False)
            except Exception as exc:  # the answer to the press (or the timeout's result) still says it
                log.warning("telegram: question %s not settled: %s", message_id, brief(exc))

    async def edit(self, source: SessionSource, message_id: str, text: str) -> None:
        chunks = self.split(text) or [text]
        try:
            await self._edit_chunk(source, message_id, chunks[0])
        except Forbidden as exc:
            log.warning("telegram: cannot edit in chat %s: %s", source.chat_id, brief(exc))
            return
        for extra in chunks[1:]:  # an edit cannot grow past the limit: the rest follows as messages
            if await self._send_chunk(source, extra, None) is None:
                return

    async def _edit_chunk(
        self, source: SessionSource, message_id: str, chunk: str, *, markup: bool = True, flood_raises: bool = False
    ) -> None:
        """editMessageText with one part (MarkdownV2 with the plain fallback, or plain)."""
        chat, mid = parse_message_key(message_id)
        chat_id = chat_id_param(chat or source.chat_id)
        call = self._call_raising if flood_raises else self._call
        try:
            if not markup:
                await call(lambda: self.bot.edit_message_text(chunk, chat_id=chat_id, message_id=mid))
                return
            try:
                await call(
                    lambda: self.bot.edit_message_text(
                        to_markdown_v2(chunk), chat_id=chat_id, message_id=mid, parse_mode=ParseMode.MARKDOWN_V2
                    )
                )
            except BadRequest as exc:
                if "not modified" in str(exc).lower() or not is_markup_error(exc):
                    raise
                await call(lambda: self.bot.edit_message_text(chunk, chat_id=chat_id, message_id=mid))
        except BadRequest as exc:
            if "not modified" not in str(exc).lower():
                raise

    def begin_reply(self, source: SessionSource, reply_to: str | None = None) -> ReplyStream:
        return telegram_reply(self, source, reply_to)

    async def _delete(self, source: SessionSource, message_id: str) -> None:
        chat, mid = parse_message_key(message_id)
        await self._call_raising(lambda: self.bot.delete_message(chat_id_param(chat or source.chat_id), mid))

    async def send_typing(self, source: SessionSource) -> None:
        kwargs: dict[str, Any] = {}
        if source.chat_type == "forum" and source.thread_id:
            kwargs["message_thread_id"] = int(source.thread_id)
        try:
            await self.bot.send_chat_action(chat_id_param(source.chat_id), ChatAction.TYPING, **kwargs)
        except Exception as exc:  # a hint only: never retried, never raised
            log.debug("telegram: typing action failed: %s", brief(exc))

    def bot_commands(self, commands: dict[str, str]) -> None:
        self._commands = dict(commands)
        if self._app is not None and self._bot_id is not None:
            self._spawn(self._push_commands_logged())

    async def _push_commands_logged(self) -> None:
        try:
            await self._push_commands()
        except Exception as exc:
            log.warning("telegram: setMyCommands failed: %s", brief(exc))

    async def _push_commands(self) -> None:
        """The menu in English for everyone, then once per other catalog language: Telegram shows a
        person the list registered for their app's two-letter `language_code` (DESIGN §17). Two
        letters cannot tell Traditional from Simplified Chinese, so `zh` gets Simplified and zh-TW
        has no menu of its own (its people still get replies in it: the hint is `zh-hant`)."""
        for language in Language:
            if "-" in language.value:
                continue
            menu = []
            for name, help_text in self._commands.items():
                name = name.lstrip("/").lower()
                if not _COMMAND_OK.match(name):
                    if language is DEFAULT_LANGUAGE:
                        log.warning("telegram: command %r cannot be in the bot menu (a-z, 0-9, _)", name)
                    continue
                shown = gettext(language, help_text) if help_text else name
                menu.append(BotCommand(name, shown.strip()[:256] or name))
            code = None if language is DEFAULT_LANGUAGE else language.value
            await self._call(lambda: self.bot.set_my_commands(menu, language_code=code))

    async def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        return await call_with_retries(
            make, self.send_attempts, Backoff(self.reconnect_base, self.reconnect_cap), self.max_retry_after
        )

    async def _call_raising(self, make: Callable[[], Awaitable[T]]) -> T:
        """As `_call`, but a flood wait raises RateLimited instead of being slept through."""

        async def once() -> T:
            try:
                return await make()
            except RetryAfter as exc:
                raise RateLimited(retry_after_seconds(exc), "telegram") from None

        return await self._call(once)
