"""What a chat command sees: the parsed command, its context, and the `ChatServices` it may use.

Commands get a small Protocol naming exactly the members they use (as `LaneHost` does for lanes in
gateway.runtime.lanes), never the runner: the runner implements it, and nothing here imports the
runtime, so the table can import its handlers at module top with no circle to hide. The lane is
named by its session key; the controls commands need (stop, its busy mode, a turn in it) are
services.

`label` and `when` format a session for a reply; both command families use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Mapping, Protocol

from agent.llm import ModelSettings
from gateway.db import StorageFace
from gateway.language import _, n_
from gateway.schedules.clock import WallClock
from gateway.sessions.store import SessionEntry, SessionStore
from gateway.source import SessionSource
from gateway.storage.schema import TITLE_MAX
from platforms.base import COMMAND_PATTERN, InboundMessage

ALIASES = {"reset": "new", "h": "help", "start": "help"}


@dataclass(frozen=True)
class ParsedCommand:
    name: str  # lower case, alias resolved
    args: str
    bot: str | None  # the @botname suffix, when present


def parse_command(text: str) -> ParsedCommand | None:
    """`/name[@bot] args` -> ParsedCommand; anything else (including paths) -> None."""
    stripped = (text or "").lstrip()
    match = COMMAND_PATTERN.match(stripped)
    if not match:
        return None
    name = match.group(1).lower()
    name = ALIASES.get(name, name)
    return ParsedCommand(name, stripped[match.end() :].strip(), match.group(2))


class ChatServices(Protocol):
    """What commands use of the runtime (the runner implements it)."""

    db: StorageFace
    store: SessionStore
    model_settings: ModelSettings
    ops_down: str | None  # why the ops HTTP server could not listen
    single_owner: bool
    clock: Callable[[], float]
    wall_clock: WallClock  # the calendar's clock: when scheduled jobs run (gateway.schedules.clock)

    @property
    def ops_url(self) -> str | None:
        """The ops HTTP server's address, once it listens."""

    async def lookup(self, msg: InboundMessage) -> SessionEntry:
        """The chat's current session, reset policy applied (the person is told of a rollover)."""
        ...

    async def forget(self, session_id: str) -> None:
        """Drop what is kept warm for this session (its agent, its conversation copy)."""
        ...

    async def send(self, msg: InboundMessage, text: str) -> None:
        """Reply in the chat of `msg`."""
        ...

    async def agent_turn(self, key: str, msg: InboundMessage, entry: SessionEntry, text: str) -> None:
        """Run an agent turn for `text` in the chat's lane (/retry)."""
        ...

    async def compress(self, msg: InboundMessage, session_id: str, auto: bool) -> str:
        """Summarise the session into a child and move the chat there; the text to send."""
        ...

    def answer_approval(self, msg: InboundMessage, approve: bool, args: str) -> str:
        """/approve or /deny: decide a tool call a turn in this chat waits on; says what was done."""
        ...

    def tool_lines(self, msg: InboundMessage) -> list[str]:
        """What the agent may use for this person, one line each (approval marked)."""
        ...

    async def stop_chat(self, key: str) -> str:
        """Cancel the chat's running job and drop what waits; says what was done."""
        ...

    def chat_state(self, key: str) -> tuple[str, int]:
        """The chat's busy mode and how many messages wait in it."""
        ...

    def remember_listing(self, key: str, ids: list[str]) -> None:
        """The ids a bare /resume showed, so `/resume 2` means what the person saw."""
        ...

    def recall_listing(self, key: str) -> list[str] | None: ...

    def observe(self, name: str, value: float) -> None:
        """Record a measurement (a histogram sample) when metrics are on."""
        ...


@dataclass
class CommandContext:
    services: ChatServices
    key: str  # the chat's session key (its lane)
    msg: InboundMessage
    command: ParsedCommand
    is_admin: bool

    @property
    def source(self) -> SessionSource:
        return self.msg.source

    @property
    def args(self) -> str:
        return self.command.args

    @property
    def see_all(self) -> bool:
        """May reach every session (admin, or a single-owner deployment)."""
        return self.is_admin or self.services.single_owner

    async def session(self) -> SessionEntry:
        """The chat's current session, applying the reset policy (and telling the person)."""
        return await self.services.lookup(self.msg)

    def existing(self) -> SessionEntry | None:
        """The chat's current session if it has one (no reset applied, nothing created)."""
        return self.services.store.get(self.key)

    async def reply(self, text: str) -> None:
        await self.services.send(self.msg, text)


Handler = Callable[[CommandContext], Awaitable[str | None]]


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    handler: Handler
    immediate: bool = False  # read-only: answered at once even while a turn runs
    at_once: bool = False  # answered on arrival, never queued: it answers the running turn (/approve)


def ascii_number(text: str) -> int | None:
    """A command's numeric argument: ASCII digits only. `str.isdigit()` also says yes to "²" and
    "١", which `int()` refuses or reads as another number; to a person `/undo ²` is not a number."""
    return int(text) if text.isascii() and text.isdigit() else None


def numeric_title_refusal(title: str | None) -> str | None:
    """A title of digits only is refused: `/resume 1` means the first conversation of the list."""
    if title and title.isdigit():
        return _(
            "A title can't be only a number: /resume {title} means number {title} of your list. "
            "Add a word, e.g. /title {title} notes.",
            title=title,
        )
    return None


def cut_notice(asked: str, stored: str | None) -> str:
    """What to add when a title was shortened to fit (sanitize_title keeps TITLE_MAX characters)."""
    wanted = " ".join(asked.split())
    if stored and len(wanted) > len(stored):
        return f" (cut to {len(stored)} characters: titles are at most {TITLE_MAX})"
    return ""


def messages_label(session: Mapping[str, Any]) -> str:
    """How much a listed conversation holds. One summarised into a continuation (/compress) has
    no messages left in its conversation (they moved into the summary, still searchable), so its
    count would read "0 messages": say what happened instead."""
    if session.get("end_reason") == "compressed":
        return _("summarised into a continuation")
    return n_("{n} message", "{n} messages", session.get("message_count") or 0)


def when(ts: float | None) -> str:
    if not ts:
        return "never"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def label(session: dict[str, Any]) -> str:
    title = session.get("title")
    return f"“{title}” ({session['id']})" if title else str(session["id"])
