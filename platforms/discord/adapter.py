"""Discord adapter on discord.py: gateway websocket in, REST out.

Named `discord_adapter` so it never shadows the `discord` package. discord.py does the protocol work
(heartbeats, RESUME after a dropped connection, 429 back-off from the rate-limit headers); this
module turns its messages into `InboundMessage`s and adds what the contract asks on top: a
reconnect-forever loop for the failures discord.py gives up on (bad token, missing intent, parser
crashes), a liveness watchdog, and malformed events logged and skipped.

A streamed reply's intermediate edit is the one call where discord.py's 429 handling (sleep the
`retry_after`, then send the same, now stale, text again) is wrong: `_LIVE_EDIT` marks such an edit
(a context variable, so only that request sees it), and the client's `http_trace` turns a 429 on it
into `RateLimited` before discord.py sees the response. The reply's pacer then holds the channel
and folds the text into its next edit; a final edit still goes through discord.py's own waiting.

Discord does not redeliver: a new gateway session (a start, or a RESUME Discord refused) is sent only
what comes next. So on READY each channel the gateway took a message in from is read back after the
newest such message (`_catch_up`; the gateway's inbox says which, so a message received but never
committed before a crash is read too), bounded by age and count, and taken in like a live one (the
inbox refuses repeats). A RESUME within one run is discord.py's, and Discord replays what it missed.
A new process cannot RESUME (discord.py has no public way to start from a saved session), so
catching up is what crosses a restart: measured by tests/runtime/test_discord_catch_up_crash.py.

Chat types: DMs are "dm"; guild text channels "channel"; threads "thread" with chat_id = the
parent channel and thread_id = the thread, so a thread is one session shared by its members.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import hashlib
import logging
import os
import re
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any, AsyncIterator, Mapping

import aiohttp
import discord
import yarl

from gateway.source import Platform, SessionSource
from platforms.base import (
    Attachment,
    AttachmentKind,
    CommandSuggester,
    InboundMessage,
    MessageHandler,
    PlatformAdapter,
    RateLimited,
    ReplyStream,
    SeenMessages,
)
from platforms.discord.settings import DiscordSettings
from platforms.discord.slash import EPHEMERAL as _EPHEMERAL
from platforms.discord.slash import (
    CatalogTranslator,
    InteractionAnswer,
    build_tree,
    command_message,
    interaction_source,
)
from platforms.edited_reply import EditedReply
from platforms.helpers import Backoff, Watchdog, cancel_and_wait
from platforms.settings import settings_from

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
# Discord lets a bot edit messages about 5 times per 5 s per channel; the budget is shared by
# sends and edits of every reply streaming into that channel, and spent evenly (one a second):
# a burst of five would make the next reply's first message wait up to 5 s.
CHANNEL_PACE = (1, 1.0)
# plain user messages and replies; joins, pins, thread-created notices etc. are not conversation
_CONVERSATION_TYPES = (discord.MessageType.default, discord.MessageType.reply)
_TEXT_CHANNELS = (discord.TextChannel, discord.VoiceChannel, discord.StageChannel)


class _LRU(OrderedDict):
    """A small bounded map (message ids the bot sent; thread lookups)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


_LIVE_EDIT: contextvars.ContextVar[bool] = contextvars.ContextVar("discord_live_edit", default=False)


def _live_edit_trace() -> aiohttp.TraceConfig:
    """A 429 on a live edit raises `RateLimited` (module docstring) instead of discord.py's sleep."""

    async def on_request_end(
        _session: aiohttp.ClientSession, _context: SimpleNamespace, params: aiohttp.TraceRequestEndParams
    ) -> None:
        response = params.response
        if response.status == 429 and _LIVE_EDIT.get():
            raise RateLimited(await _retry_after(response), "discord edit")

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_request_end)
    return trace


async def _retry_after(response: aiohttp.ClientResponse) -> float:
    """Seconds to wait: the body's exact `retry_after`, else the rate-limit headers, else 1."""
    try:
        body = await response.json(content_type=None)
        return float(body["retry_after"])
    except Exception:  # a proxy's page, a body without the field: the headers say it too
        pass
    for name in ("X-RateLimit-Reset-After", "Retry-After"):
        try:
            return float(response.headers[name])
        except (KeyError, ValueError):
            continue
    return 1.0


def _intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True  # privileged: must be enabled in the developer portal
    return intents


def _guard_parsers(client: discord.Client) -> None:
    """Make every gateway event parser log and skip a payload it cannot read.

    discord.py lets a parser exception (a MESSAGE_CREATE without `content`, say) escape its event
    loop and end the connection. The parser table lives on the client's connection state; wrapping
    each entry keeps one bad event from costing a reconnect.
    """
    state = client._connection
    for name, parser in list(state.parsers.items()):
        state.parsers[name] = _guarded(name, parser)


def _guarded(name: str, parser: Any) -> Any:
    def run(data: Any) -> None:
        try:
            parser(data)
        except Exception as exc:
            log.warning("discord: malformed %s event skipped (%s: %s)", name, type(exc).__name__, exc)

    return run


class _Client(discord.Client):
    """discord.Client that hands its events to the adapter."""

    def __init__(self, adapter: "DiscordAdapter", **options: Any) -> None:
        super().__init__(**options)
        self.adapter = adapter
        self.tree: discord.app_commands.CommandTree | None = None  # chinwag's slash commands
        self.synced = False

    async def on_ready(self) -> None:
        self.adapter._connected("ready")
        # READY means a new session (a start, or a RESUME Discord refused): nothing missed is
        # replayed, so read it from the channels' history. RESUMED replays it, no read needed.
        await self.adapter._catch_up(self)
        await self.adapter._sync_commands(self)

    async def on_resumed(self) -> None:
        self.adapter._connected("resumed")

    async def on_disconnect(self) -> None:
        self.adapter.set_ready(False, "gateway disconnected; reconnecting")

    async def on_socket_raw_receive(self, _msg: str) -> None:
        # every gateway frame, heartbeat ACKs included, proves the connection alive
        self.adapter.mark_alive()

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter._handle(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        if interaction.type == discord.InteractionType.component:  # slash commands go through the tree
            await self.adapter._press(interaction)

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        log.exception("discord event handler %s failed; event skipped", event_method)


class DiscordAdapter(PlatformAdapter):
    platform = Platform.DISCORD
    max_message_length = DISCORD_LIMIT

    def __init__(self, config: Mapping[str, Any] | DiscordSettings | None = None) -> None:
        super().__init__()
        cfg = settings_from(DiscordSettings, config, "platforms.discord")
        self._token = (cfg.token or os.environ.get("DISCORD_BOT_TOKEN") or "").strip()
        if not self._token:
            raise ValueError("token is not set (put the bot token in DISCORD_BOT_TOKEN)")
        self.api_base = cfg.api_base.rstrip("/")
        self.gateway_url = cfg.gateway_url
        self.watchdog_seconds = cfg.watchdog_seconds
        self.reconnect_base = cfg.reconnect_base
        self.reconnect_cap = cfg.reconnect_cap
        # how long discord.py waits for the GUILD_CREATEs after READY before it calls us ready
        self.guild_ready_timeout = cfg.guild_ready_timeout
        self.ignore_bots = cfg.ignore_bots
        self._command_guilds = list(cfg.command_guilds)
        self.catch_up_hours = cfg.catch_up_hours
        self.catch_up_limit = cfg.catch_up_limit
        self._seen: SeenMessages | None = None
        self.client: _Client | None = None
        self._on_message: MessageHandler | None = None
        self._task: asyncio.Task | None = None
        self._watchdog: Watchdog | None = None
        self._stopping = False
        self._standby = False  # replicas: another replica holds the gateway; this one sends over REST
        self._phase = "idle"  # connect | backoff: what the connection loop is doing
        self._backoff = Backoff(self.reconnect_base, self.reconnect_cap)
        self._sent_ids: _LRU = _LRU(2000)  # our message ids, to recognise replies to the bot
        self._threads: _LRU = _LRU(2000)  # channel id -> parent id (None: not a thread)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, on_message: MessageHandler) -> None:
        # A base URL is a real setting (proxies, test servers); empty means real Discord.
        if self.api_base:
            discord.http.Route.BASE = self.api_base
        if self.gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        # a text-only bot: discord.py's warnings about missing voice libraries are noise
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        self._on_message = on_message
        self._stopping = False
        if self._standby:
            await self._log_in_only()
            return
        self._connect_gateway()

    def _connect_gateway(self) -> None:
        self.set_ready(False, "connecting")
        self._task = asyncio.create_task(self._run(), name="discord-adapter")
        self._watchdog = Watchdog(self, self.watchdog_seconds, self._stale)
        self._watchdog.start()

    async def _log_in_only(self) -> None:
        """A client that is logged in (REST: sends, edits) without a gateway connection."""
        client = _Client(self, intents=_intents(), max_messages=None)
        try:
            await client.login(self._token)
        except Exception as exc:  # sending fails until the next lead() or restart; say why
            log.warning("discord: standby login failed (%s)", type(exc).__name__)
        self.client = client
        self.set_ready(True, "standby: another replica holds the gateway")

    def await_leadership(self) -> None:
        self._standby = True

    async def lead(self, leading: bool) -> None:
        if leading and self._standby:
            self._standby = False
            if self.client is not None:
                await self.client.close()
            self._connect_gateway()
        elif not leading and not self._standby:
            self._standby = True
            if self._watchdog:
                await self._watchdog.stop()
                self._watchdog = None
            await cancel_and_wait(self._task)
            self._task = None
            if self.client is not None:
                await self.client.close()
            await self._log_in_only()

    def leader_key(self) -> str | None:
        """One gateway connection per bot (shard 0 of 1): the leading replica holds it; the others
        send over REST (`lead`)."""
        return f"discord:{hashlib.sha256(self._token.encode()).hexdigest()[:16]}:shard0"

    async def stop(self) -> None:
        self._stopping = True
        if self._watchdog:
            await self._watchdog.stop()
            self._watchdog = None
        await self._cancel_spawned()
        if self.client is not None:
            await self.client.close()
        await cancel_and_wait(self._task)
        self._task = None
        self.set_ready(False, "stopped")

    async def _run(self) -> None:
        """Connect forever. discord.py resumes dropped connections itself; this loop covers what
        it gives up on (rejected token, missing intent, an exception out of its event loop)."""
        while not self._stopping:
            client = _Client(
                self,
                intents=_intents(),
                enable_debug_events=True,  # for on_socket_raw_receive (liveness)
                guild_ready_timeout=self.guild_ready_timeout,
                chunk_guilds_at_startup=False,
                max_messages=None,  # referenced messages arrive inline; no cache needed
                http_trace=_live_edit_trace(),
                allowed_mentions=discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=True),
            )
            _guard_parsers(client)
            if self._menu:
                client.tree = build_tree(self, client, self._menu)
                await client.tree.set_translator(CatalogTranslator())
            self.client = client
            self._phase = "connect"
            try:
                await client.login(self._token)
                await client.connect(reconnect=True)
                detail = "gateway connection closed"
            except asyncio.CancelledError:
                await client.close()
                raise
            except discord.LoginFailure:
                detail = "login failed: Discord rejected the bot token"
            except discord.PrivilegedIntentsRequired:
                detail = "Discord refused the MESSAGE CONTENT intent: enable it for the bot in the developer portal"
            except discord.ConnectionClosed as exc:
                detail = f"gateway closed the connection (code {exc.code})"
            except Exception as exc:  # never let one bad frame end the adapter
                log.exception("discord connection failed")
                detail = f"connection failed: {type(exc).__name__}"
            await client.close()
            if self._stopping:
                return
            self.set_ready(False, detail)
            delay = self._backoff.next_delay()
            log.warning("discord: %s; reconnecting in %.1fs", detail, delay)
            self._phase = "backoff"
            await asyncio.sleep(delay)

    async def _stale(self) -> None:
        """Watchdog: nothing heard for too long.

        With a socket open (half-dead connection), close it: discord.py then RESUMEs and replays
        what was missed. With none, discord.py is waiting out its own back-off (which grows to
        about 17 minutes) or a login hangs: start over with a new client, so an outage costs at
        most `watchdog_seconds` after it ends. Our own back-off sleep is left alone.
        """
        client = self.client
        ws = client.ws if client is not None else None
        if ws is not None and ws.open:
            try:
                await asyncio.wait_for(ws.close(code=4000), timeout=10)
                return
            except asyncio.TimeoutError:
                log.warning("discord: closing a stale gateway socket timed out; starting over")
        elif self._phase == "backoff":
            return
        await self._restart()

    async def _restart(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if not self._stopping:
            self._task = asyncio.create_task(self._run(), name="discord-adapter")

    def _connected(self, how: str) -> None:
        self._backoff.reset()
        self.mark_alive()
        self.set_ready(True, f"gateway {how}")

    # -- slash commands (platforms.discord.slash) --------------------------------------------
    _menu: dict[str, str] = {}
    _suggest: CommandSuggester | None = None
    _sync_failed = False  # logged once, not at every reconnect

    def bot_commands(self, commands: dict[str, str]) -> None:
        self._menu = dict(commands)

    def command_suggestions(self, suggest: CommandSuggester) -> None:
        self._suggest = suggest

    @property
    def command_guilds(self) -> list[int]:
        """Guilds to register the commands in (at once) instead of globally."""
        raw = getattr(self, "_command_guilds", None) or []
        return [int(g) for g in raw if str(g).isdigit()]

    async def _sync_commands(self, client: _Client) -> None:
        if client.tree is None or client.synced:
            return
        try:
            guilds = self.command_guilds
            if guilds:
                for guild_id in guilds:
                    guild = discord.Object(id=guild_id)
                    client.tree.copy_global_to(guild=guild)
                    await client.tree.sync(guild=guild)
            else:
                await client.tree.sync()
            client.synced = True
            log.info(
                "discord: %d slash commands registered %s", len(self._menu), f"in {guilds}" if guilds else "globally"
            )
        except Exception as exc:  # typed commands still work; never stop the adapter over this
            if not self._sync_failed:
                log.warning("discord: registering slash commands failed (%s); typed commands still work", exc)
            self._sync_failed = True

    async def _slash(self, interaction: discord.Interaction, name: str, args: str) -> None:
        self.mark_alive()
        answer = InteractionAnswer(self, interaction, ephemeral=name in _EPHEMERAL)
        try:
            await interaction.response.defer(ephemeral=answer.ephemeral, thinking=True)
        except discord.HTTPException as exc:
            log.warning("discord: could not acknowledge /%s (%s); skipped", name, exc.status)
            return
        if self._on_message is not None:
            await self._on_message(command_message(interaction, name, args, answer))

    async def _press(self, interaction: discord.Interaction) -> None:
        """A press on one of the bot's buttons (`send_choice`): the presser's message of the
        button's command ("/approve 3"), acknowledged at once without changing the message."""
        self.mark_alive()
        data: dict[str, Any] = dict(interaction.data or {})
        command = str(data.get("custom_id") or "")
        try:
            await interaction.response.defer()
        except discord.HTTPException as exc:
            log.warning("discord: could not acknowledge a button press (%s); skipped", exc.status)
            return
        if command.startswith("/") and self._on_message is not None:
            source = interaction_source(interaction)
            await self._on_message(
                InboundMessage(source=source, text=command, message_id=f"press:{interaction.id}", mentioned=True)
            )

    # -- inbound -----------------------------------------------------------------------------
    async def _handle(self, message: discord.Message) -> bool:
        """Hand `message` to the gateway; True if it was one to take in (the gateway may still
        refuse it as a duplicate). Raises if the gateway could not store it."""
        self.mark_alive()
        try:
            inbound = await self._convert(message)
        except Exception:
            log.exception("discord message %s could not be converted; skipped", getattr(message, "id", "?"))
            return False
        if inbound is None or self._on_message is None:
            return False
        await self._on_message(inbound)
        return True

    # -- catch-up: what arrived while no gateway session was open ----------------------------
    def catch_up_from(self, seen: SeenMessages) -> None:
        self._seen = seen

    async def _catch_up(self, client: discord.Client) -> None:
        """Read each channel chinwag took a message in from (its inbox, so what was dispatched but
        never committed is read too) for the messages after that one, oldest first, no older than
        `catch_up_hours` and at most `catch_up_limit` a channel, and take them in like live ones:
        the inbox refuses what it holds already, so reading again is harmless."""
        if self._seen is None or self.catch_up_limit == 0:
            return
        try:
            latest = await self._seen()
        except Exception as exc:  # storage unavailable: live messages still flow; the next READY reads
            log.warning("discord: catch-up skipped: what was last seen cannot be read (%s)", exc)
            return
        marks: dict[int, int] = {}
        for msg in latest:
            place = msg.source.thread_id or msg.source.chat_id
            if place.isdigit() and msg.message_id.isdigit():  # a slash command's id is no message id
                marks[int(place)] = max(marks.get(int(place), 0), int(msg.message_id))
        oldest = discord.utils.time_snowflake(discord.utils.utcnow() - datetime.timedelta(hours=self.catch_up_hours))
        caught = 0
        for channel_id, seen_id in marks.items():
            try:
                channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
                if not isinstance(channel, discord.abc.Messageable):
                    continue
                history = channel.history(
                    limit=self.catch_up_limit, after=discord.Object(max(seen_id, oldest)), oldest_first=True
                )
                async for message in history:
                    caught += await self._handle(message)
            except Exception as exc:  # one channel gone or unreadable (or not stored): the others go on
                log.warning("discord: catching up channel %s failed (%s)", channel_id, exc)
        log.info("discord: caught up %d messages missed while disconnected, from %d channels", caught, len(marks))

    async def _convert(self, message: discord.Message) -> InboundMessage | None:
        client = self.client
        me = client.user if client is not None else None
        if me is None:
            return None
        author = message.author
        if author.id == me.id:
            return None  # our own message, echoed back by the gateway
        if self.ignore_bots and author.bot:
            return None
        if message.type not in _CONVERSATION_TYPES:
            return None

        chat_type, chat_id, thread_id, chat_name = await self._place(message)
        text = self._text(message, me.id)
        attachments = [_attachment(a) for a in message.attachments]
        if not text and not attachments:
            return None  # nothing to answer (e.g. only a mention, or an embed)

        mentioned = any(u.id == me.id for u in message.mentions) or bool(re.search(rf"<@!?{me.id}>", message.content))
        guild_me = message.guild.me if message.guild is not None else None
        if not mentioned and guild_me is not None and message.role_mentions:
            # a ping of a role the bot holds (its managed role, say) addresses it; @everyone does not
            mentioned = any(role in guild_me.roles and not role.is_default() for role in message.role_mentions)

        reply_to_id, reply_to_bot = None, False
        ref = message.reference
        if ref is not None and ref.type == discord.MessageReferenceType.reply and ref.message_id:
            reply_to_id = str(ref.message_id)
            resolved = ref.resolved
            if isinstance(resolved, discord.Message):
                reply_to_bot = resolved.author.id == me.id
            else:
                reply_to_bot = ref.message_id in self._sent_ids

        source = SessionSource(
            platform=Platform.DISCORD,
            chat_id=str(chat_id),
            chat_type=chat_type,
            user_id=str(author.id),
            user_name=author.display_name,
            thread_id=str(thread_id) if thread_id else None,
            chat_name=chat_name,
        )
        return InboundMessage(
            source=source,
            text=text,
            message_id=str(message.id),
            mentioned=mentioned,
            reply_to_bot=reply_to_bot,
            reply_to_message_id=reply_to_id,
            timestamp=message.created_at.timestamp(),
            raw={
                "guild_id": str(message.guild.id) if message.guild else None,
                "channel_id": str(message.channel.id),
                "author_bot": author.bot,
                "content": message.content,
            },
            attachments=attachments,
        )

    async def _place(self, message: discord.Message) -> tuple[str, int, int | None, str | None]:
        """(chat_type, chat_id, thread_id, chat_name) for the channel the message is in."""
        channel = message.channel
        if isinstance(channel, discord.DMChannel):
            return "dm", channel.id, None, None
        if isinstance(channel, discord.GroupChannel):
            return "group", channel.id, None, channel.name
        if isinstance(channel, discord.Thread):
            return "thread", channel.parent_id, channel.id, channel.name
        if isinstance(channel, _TEXT_CHANNELS):
            return "channel", channel.id, None, channel.name
        if message.guild is None:
            # the gateway omits guild_id only for DMs
            return "dm", channel.id, None, None
        # a guild channel missing from the cache: most likely a thread we never saw created
        parent = await self._lookup_parent(channel.id)
        if parent is not None:
            return "thread", parent, channel.id, None
        return "channel", channel.id, None, None

    async def _lookup_parent(self, channel_id: int) -> int | None:
        if channel_id in self._threads:
            return self._threads[channel_id]
        parent = None
        assert self.client is not None
        try:
            fetched = await self.client.fetch_channel(channel_id)
        except discord.HTTPException as exc:
            log.warning("discord: channel %s lookup failed (%s); treating as a channel", channel_id, exc.status)
            return None
        if isinstance(fetched, discord.Thread):
            parent = fetched.parent_id
        self._threads.put(channel_id, parent)
        return parent

    @staticmethod
    def _text(message: discord.Message, bot_id: int) -> str:
        text = re.sub(rf"<@!?{bot_id}>", "", message.content)
        for user in message.mentions:  # other people's mentions read as @name
            if user.id != bot_id:
                text = re.sub(rf"<@!?{user.id}>", "@" + user.display_name, text)
        return text.strip()

    # -- outbound ----------------------------------------------------------------------------
    def _channel(self, source: SessionSource) -> discord.PartialMessageable:
        if self.client is None:
            raise RuntimeError("discord adapter is not started")
        target = source.thread_id or source.chat_id
        if not str(target).isdigit():
            raise ValueError(f"discord channel id must be a number, got {target!r}")
        return self.client.get_partial_messageable(int(target))

    takes_send_keys = True  # the nonce, with enforce_nonce

    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        channel = self._channel(source)
        ids: list[str] = []
        for i, chunk in enumerate(self.split(text)):
            reference = None
            if reply_to and i == 0 and reply_to.isdigit():
                reference = discord.MessageReference(
                    message_id=int(reply_to), channel_id=channel.id, fail_if_not_exists=False
                )
            # `key` as the nonce (discord.py sends it with enforce_nonce): a repeat within minutes
            # returns the first message instead of posting a second (None: discord.py's random one)
            nonce = (key if i == 0 else f"{key}.{i}") if key else None
            try:
                # discord.py takes reference=None as "not a reply"; its stubs do not say so
                sent = await channel.send(content=chunk, reference=reference, nonce=nonce)  # type: ignore[arg-type]
            except discord.HTTPException as exc:
                raise RuntimeError(f"discord send to {channel.id} failed: {exc.status} {exc.text}") from exc
            self._sent_ids.put(sent.id, True)
            ids.append(str(sent.id))
        return ids

    async def send_choice(self, source: SessionSource, text: str, choices: list[tuple[str, str]]) -> list[str]:
        """The question with buttons (message components); a press arrives as a component
        interaction (`_press`). The view is not kept: presses are read from their custom_id."""
        view = discord.ui.View(timeout=None)
        for label, command in choices:
            view.add_item(discord.ui.Button(label=label, custom_id=command[:100]))
        channel = self._channel(source)
        try:
            sent = await channel.send(content=text[:DISCORD_LIMIT], view=view)
        except discord.HTTPException as exc:
            raise RuntimeError(f"discord send to {channel.id} failed: {exc.status} {exc.text}") from exc
        self._sent_ids.put(sent.id, True)
        return [str(sent.id)]

    async def settle_choice(self, source: SessionSource, message_ids: list[str], text: str) -> None:
        # In the background: discord.py sleeps through a 429, which must not hold up the tool call
        # the decision lets run.
        self._spawn(self._settle(source, message_ids, text))

    async def _settle(self, source: SessionSource, message_ids: list[str], text: str) -> None:
        """The question becomes `text` without its buttons (`view=None` sends no components),
        paced with the channel's streamed replies (the same budget)."""
        pacer, key = self.pacer("channel", *CHANNEL_PACE), str(source.thread_id or source.chat_id)
        for message_id in message_ids:
            await pacer.wait(key)
            pacer.record(key)
            try:
                await self._channel(source).get_partial_message(int(message_id)).edit(content=text, view=None)
            except Exception as exc:  # the answer to the press (or the timeout's result) still says it
                log.warning("discord: question %s not settled: %s", message_id, exc)

    async def edit(self, source: SessionSource, message_id: str, text: str) -> None:
        if self.message_length(text) > DISCORD_LIMIT:
            text = text[: DISCORD_LIMIT - 1] + "…"
        message = self._channel(source).get_partial_message(int(message_id))
        try:
            await message.edit(content=text)
        except discord.HTTPException as exc:
            raise RuntimeError(f"discord edit of {message_id} failed: {exc.status} {exc.text}") from exc

    def begin_reply(self, source: SessionSource, reply_to: str | None = None) -> ReplyStream:
        """Send, then edit in place (5 per 5 s per channel); past 2000 characters, a new message.
        Discord renders markdown as it is written, so the final text needs no formatting edit."""
        channel_id = str(source.thread_id or source.chat_id)

        async def send_part(text: str, reply_to: str | None, final: bool, key: str | None) -> str:
            ids = await self.send(source, text, reply_to=reply_to, key=key)
            return ids[0]

        async def edit_part(message_id: str, text: str, final: bool) -> None:
            live = _LIVE_EDIT.set(not final)
            try:
                await self.edit(source, message_id, text)
            finally:
                _LIVE_EDIT.reset(live)

        async def delete_part(message_id: str) -> None:
            await self._channel(source).get_partial_message(int(message_id)).delete()

        return EditedReply(
            key=channel_id,
            pacer=self.pacer("channel", *CHANNEL_PACE),
            split=self.split,
            send_part=send_part,
            edit_part=edit_part,
            delete_part=delete_part,
            reply_to=reply_to,
            first_delay=self.stream_first_delay,
            final_differs=False,
            what="discord reply",
        )

    async def send_typing(self, source: SessionSource) -> None:
        try:
            await self._channel(source).typing()
        except discord.HTTPException as exc:  # a hint only: never fail a turn over it
            log.debug("discord typing failed: %s", exc.status)


def _attachment(att: discord.Attachment) -> Attachment:
    """A Discord attachment; its bytes come through the client's own HTTP session (`read`)."""
    mime = (att.content_type or "").split(";")[0].strip() or None
    if mime and mime.startswith("image/"):
        kind: AttachmentKind = "image"
    elif att.is_voice_message():
        kind = "voice"
    elif mime and mime.startswith("audio/"):
        kind = "audio"
    elif mime and mime.startswith("video/"):
        kind = "video"
    else:
        kind = "file"

    async def chunks() -> AsyncIterator[bytes]:
        yield await att.read()

    return Attachment(kind, chunks, mime, att.size, att.filename, str(att.id))
