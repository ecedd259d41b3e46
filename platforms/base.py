"""The adapter contract: what every platform adapter gives the gateway and takes from it.

An adapter turns platform events into `InboundMessage`s and sends replies; routing, sessions and
commands stay in the gateway. Adapters know `gateway.source`, this contract and the tools beside
it (platforms.helpers), and of the rest of the gateway only its redaction rule (gateway.redact).

A streamed reply is a `ReplyStream` (`adapter.begin_reply`): `update` with the whole text so far,
`status` for a short line while a tool runs, then exactly one of `finish` (the final text, formatted
by the platform) or `fail` (the turn ended early: what was shown stays, with a note). An adapter that
cannot edit what it sent gets `SendOnFinish`, which sends once at the end, exactly as a plain reply.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine, Literal, Protocol

from gateway.language import Language
from gateway.source import Platform, SessionSource
from gateway.telemetry import MessageTrace
from platforms.helpers import SYSTEM_CLOCK, Clock, EditPacer, split_message

log = logging.getLogger(__name__)

# A command is `/name` or `/name@botname` as the first word (Telegram groups add the bot's name);
# a first word that looks like a path (`/usr/bin/env`) is not one. gateway.commands parses with it.
COMMAND_PATTERN = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@([A-Za-z0-9_]{1,64}))?(?=\s|$)")


AttachmentKind = Literal["image", "audio", "voice", "video", "file"]


@dataclass
class Attachment:
    """A file that came with a message, as the platform describes it, and how to get its bytes.

    `open()` yields the bytes in chunks; the gateway stops reading (and keeps nothing) once the
    configured cap is passed, so an adapter never needs to know the cap. `size` is what the
    platform declares before download (None when it does not say)."""

    kind: AttachmentKind
    open: Callable[[], AsyncIterator[bytes]] | None
    mime_type: str | None = None
    size: int | None = None
    file_name: str | None = None
    platform_file_id: str | None = None


@dataclass
class InboundMessage:
    source: SessionSource
    text: str
    message_id: str  # platform message (or event) id: the de-duplication key
    mentioned: bool = False  # the bot was @-mentioned
    reply_to_bot: bool = False  # the message replies to one of the bot's messages
    reply_to_message_id: str | None = None
    timestamp: float = field(default_factory=time.time)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    attachments: list[Attachment] = field(default_factory=list)  # the text is then the caption
    inbox_id: int | None = None  # set by the gateway once the message is committed to its inbox
    reply_language: Language | None = None  # what the gateway answers in (resolved when it takes the message)
    trace: MessageTrace | None = field(default=None, repr=False)  # its spans' place (gateway.telemetry; None: off)

    # Where answers go when not into the chat (a Discord slash command answers its interaction):
    # a factory of ReplyStreams, one per reply sent, set by the adapter that made the message.
    reply_target: "Callable[[], ReplyStream] | None" = field(default=None, repr=False)

    @property
    def is_command(self) -> bool:
        return COMMAND_PATTERN.match(self.text.lstrip()) is not None


class RateLimited(Exception):
    """The platform asked us to wait `retry_after` seconds before the next call (HTTP 429)."""

    def __init__(self, retry_after: float, what: str = "") -> None:
        super().__init__(f"rate limited{' on ' + what if what else ''}; retry after {retry_after:.2f}s")
        self.retry_after = max(0.0, float(retry_after))


class ReplyStream(abc.ABC):
    """One reply being written while the model writes it (see the module docstring).

    `first_shown` is set once the person can see something (the runtime stops the typing hint then).
    Calls after `finish`/`fail`/`abandon` are ignored. None of the methods raise for a platform refusal of an
    intermediate update; `finish` raises only when the final text could not be delivered at all.

    `may_show` is asked just before each intermediate platform call; once it says False the live
    updates stop for good (the final text still comes with `finish`). The gateway's replicas set it
    to "this replica still holds the chat" (gateway.runtime.leases); alone, it is always True.
    """

    def __init__(self) -> None:
        self.first_shown = asyncio.Event()
        self.message_ids: list[str] = []
        self.may_show: Callable[[], bool] = _always
        # Set by the gateway before the first update: part i goes out with the idempotency key
        # `part_key(send_key, i)` (a repeat is a no-op where the platform takes one), and each new
        # part's send is recorded around it (the outbox keeps what a restart must know).
        self.send_key: str | None = None
        self.record: SendRecord | None = None

    def adopt(self, message_ids: list[str]) -> None:
        """The messages an earlier run of this reply left (a turn cut short by a stop or a crash):
        they are edited to show this reply, never sent again. Default: not possible (ignored)."""

    def part_key(self, part: int) -> str | None:
        return part_key(self.send_key, part) if self.send_key else None

    async def abandon(self) -> None:
        """Stop: nothing more is shown, no final text (another process answers the message).
        What was shown stays as it is."""

    async def update(self, text: str) -> None:
        """The whole reply text so far (not a delta)."""

    async def status(self, line: str | None) -> None:
        """A short status line shown under the text while a tool runs; None removes it."""

    @abc.abstractmethod
    async def finish(self, text: str) -> list[str]:
        """Show `text` as the final reply (platform formatting applied); return message ids."""

    @abc.abstractmethod
    async def fail(self, note: str | None = None) -> list[str]:
        """The turn ended without a final text: keep what was shown, add `note` if given."""


def _always() -> bool:
    return True


class SendRecord(Protocol):
    """Where a reply's sends are recorded (the gateway's outbox), around each new message."""

    async def sending(self, part: int) -> None:
        """Part `part` is about to be sent: until `sent`, a crash leaves its send uncertain."""

    async def sent(self, message_ids: list[str]) -> None:
        """The platform returned the reply's message ids so far (the new part's last). Not called
        for the last part of the final text: whoever asked for it records the reply as sent."""


def part_key(send_key: str, part: int) -> str:
    """The idempotency key of a reply's part: stable across restarts, unique per reply and part,
    within Discord's 25 characters for a nonce (Feishu's `uuid` takes 50)."""
    return f"{send_key}-{part}"


class SendOnFinish(ReplyStream):
    """The default stream for adapters that cannot edit: nothing until the end, then one send."""

    def __init__(self, adapter: "PlatformAdapter", source: SessionSource, reply_to: str | None = None) -> None:
        super().__init__()
        self.adapter, self.source, self.reply_to = adapter, source, reply_to
        self._done = False

    async def finish(self, text: str) -> list[str]:
        if self._done or not text:
            return []
        self._done = True
        reply_to = self.reply_to
        parts = self.adapter.split(text)
        for i, part in enumerate(parts):  # the contract: `send` takes one piece at a time
            if self.record is not None:
                await self.record.sending(i)
            self.message_ids += await self.adapter.send(self.source, part, reply_to=reply_to, key=self.part_key(i))
            if self.record is not None and i < len(parts) - 1:  # (the caller records the last)
                await self.record.sent(list(self.message_ids))
            reply_to = None
        self.first_shown.set()
        return self.message_ids

    async def fail(self, note: str | None = None) -> list[str]:
        return await self.finish(note) if note else []


# The gateway's intake. Awaiting it returns once the gateway has committed the message to its inbox
# (or decided it needs no keeping: a duplicate, someone not allowed, a sticker). An adapter
# acknowledges an event to its platform (webhook 2xx, polling offset, long-connection ack) only
# after the await returns; if it raises, nothing was stored: do not acknowledge, let the platform
# redeliver. It never waits for the answer, so awaiting it in the webhook handler is fast.
MessageHandler = Callable[[InboundMessage], Awaitable[None]]
# (who asks, command name, what they typed so far) -> [(label, value)] for a command option picker
CommandSuggester = Callable[[SessionSource, str, str], Awaitable[list[tuple[str, str]]]]
# the newest message the gateway took in from each chat of the adapter's platform (its inbox)
SeenMessages = Callable[[], Awaitable[list[InboundMessage]]]
# aiohttp handler for a webhook route; typed loosely so this module needs no aiohttp import.
WebhookHandler = Callable[[Any], Awaitable[Any]]


@dataclass
class AdapterHealth:
    ready: bool
    detail: str = ""
    last_event_at: float | None = None


class PlatformAdapter(abc.ABC):
    """Base class for platform adapters.

    Subclasses set `platform` and `max_message_length`, and implement `start`, `stop`, `send`.
    `mark_alive()` should be called on every event received and every successful poll; the
    watchdog (platforms.helpers.Watchdog) uses it for readiness.

    Traits say how the gateway treats the platform, so it never asks which platform it is:
    - `answers_in_order`: one person's typing (or a piped script): every message is answered, in
      order, none dropped, no busy acknowledgements, and read-only commands wait their turn too;
    - `operator_is_admin`: whoever writes here is the machine's operator: always allowed, an admin;
    - `takes_send_keys`: `send` passes its idempotency key to the platform (a repeat returns the
      first message), so a send a crash left uncertain is never doubled and need not be marked.
    Splitting is the gateway's: it cuts a reply with `split` and hands `send` one piece at a time.
    """

    platform: Platform
    max_message_length: int = 4000
    answers_in_order: bool = False
    operator_is_admin: bool = False
    takes_send_keys: bool = False
    clock: Clock = SYSTEM_CLOCK  # what streamed replies pace themselves by (tests set a virtual one)
    stream_first_delay = 1.0  # seconds of text before a streamed reply shows without a full sentence

    def __init__(self) -> None:
        self._pacers: dict[str, EditPacer] = {}
        self._ready = False
        self._ready_detail = "not started"
        self.last_alive: float | None = None
        self._background: set[asyncio.Task] = set()  # `_spawn`ed work, held until done

    # -- lifecycle -------------------------------------------------------------------------
    @abc.abstractmethod
    async def start(self, on_message: MessageHandler) -> None:
        """Connect and begin delivering inbound messages to `on_message`. Returns once started."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Disconnect and release resources."""

    # -- replicas: what only one replica may run (gateway.runtime.leases) -----------------------
    def leader_key(self) -> str | None:
        """A name for the part of this adapter only one replica may run at a time for this bot (a
        long poll, a gateway shard), or None: it all runs on every replica. Default: None."""
        return None

    def await_leadership(self) -> None:
        """Called before `start` on a replica when `leader_key` is not None: `start` then brings up
        sending only, and the leader part waits for `lead(True)`. Default: the whole adapter waits
        (the runner starts it on `lead(True)` and stops it on `lead(False)`)."""
        self.led_by_start = True

    async def lead(self, leading: bool) -> None:
        """This replica got (True) or lost (False) the leadership of `leader_key`."""

    led_by_start = False  # set by the default await_leadership: start/stop follow the leadership

    # -- outbound --------------------------------------------------------------------------
    @abc.abstractmethod
    async def send(
        self, source: SessionSource, text: str, reply_to: str | None = None, key: str | None = None
    ) -> list[str]:
        """Send `text` (already split to fit by the gateway, with `split`) to the chat of `source`;
        return platform message ids. `key`: an idempotency key (`part_key`); a platform that takes
        one passes it, so a repeat of the send (after a crash) returns the first message."""

    async def send_choice(self, source: SessionSource, text: str, choices: list[tuple[str, str]]) -> list[str]:
        """Send a question with buttons, each (label, the command text a press sends back as the
        presser's message, e.g. "/approve 3"). Default: the text alone (it names the commands)."""
        return await self.send(source, text)

    async def settle_choice(self, source: SessionSource, message_ids: list[str], text: str) -> None:
        """The question `send_choice` sent (`message_ids`) is decided: show `text` in its place,
        without buttons. Default: nothing (the answer to the choice says what was decided)."""

    async def edit(self, source: SessionSource, message_id: str, text: str) -> None:
        """Replace the text of a message the bot sent. Default: not supported (no-op)."""

    async def send_typing(self, source: SessionSource) -> None:
        """Show a typing/working hint. Default: nothing."""

    def reopen(self, msg: InboundMessage, attachment: Attachment) -> Callable[[], AsyncIterator[bytes]] | None:
        """How to download `attachment` of `msg` again from what the inbox kept of it (its
        platform file id), for a message taken up after a restart. Default: not possible (the
        person is told the file could not be downloaded; its name and the text are kept)."""
        return None

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """Run `work` in the background (held here: the loop keeps only a weak reference to a task)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _cancel_spawned(self) -> None:
        """On stop: cancel what `_spawn` started and wait for it to unwind."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def pacer(self, name: str, limit: int, window: float) -> EditPacer:
        """This adapter's pacer `name` (made on first use): replies in one chat share its budget."""
        if name not in self._pacers:
            self._pacers[name] = EditPacer(limit, window, self.clock)
        return self._pacers[name]

    def begin_reply(self, source: SessionSource, reply_to: str | None = None) -> ReplyStream:
        """Start a streamed reply in the chat of `source`. Default: send once at the end."""
        return SendOnFinish(self, source, reply_to)

    def webhook_handlers(self) -> dict[str, WebhookHandler]:
        """Routes (path -> aiohttp handler) this adapter serves on the gateway's HTTP port."""
        return {}

    def chat_idle(self, source: SessionSource) -> None:
        """The gateway has answered everything the chat of `source` sent so far (its queue is
        empty and nothing runs). Default: nothing; the terminal shows its prompt again."""

    def interrupt(self) -> bool:
        """Ctrl-C reached the process. True when the adapter took it (the terminal stops the reply
        being written); otherwise the gateway shuts down, as it does on SIGINT. Default: False."""
        return False

    def bot_commands(self, commands: dict[str, str]) -> None:
        """Receive the gateway's command list (name -> help) e.g. for a bot menu. Default: ignore."""

    def command_suggestions(self, suggest: CommandSuggester) -> None:
        """Receive the gateway's option suggester (e.g. /resume's sessions for a picker). Default: ignore."""

    def catch_up_from(self, seen: SeenMessages) -> None:
        """Receive what the gateway last took in per chat, for a platform that does not redeliver
        what arrived while chinwag was down (Discord reads each chat's history after it on
        connecting). Default: ignore (the platform redelivers)."""

    # -- length ----------------------------------------------------------------------------
    def message_length(self, text: str) -> int:
        """Length as the platform counts it (Telegram: UTF-16 code units)."""
        return len(text)

    def split(self, text: str) -> list[str]:
        return split_message(text, self.max_message_length, self.message_length)

    # -- health ----------------------------------------------------------------------------
    def mark_alive(self) -> None:
        self.last_alive = time.monotonic()

    def set_ready(self, ready: bool, detail: str = "") -> None:
        if ready != self._ready:
            log.info("adapter %s ready=%s %s", self.platform.value, ready, detail)
        self._ready, self._ready_detail = ready, detail

    def health(self) -> AdapterHealth:
        return AdapterHealth(self._ready, self._ready_detail, self.last_alive)
