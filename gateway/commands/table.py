"""Chat commands: parsing, the table of commands, and the simple ones.

A command is a message whose first word is `/name` (or `/name@botname`, as Telegram groups send
it). A first word that looks like a path (`/usr/bin/env is broken`) is ordinary text. Unknown
commands get a hint, never a model call. Session-moving commands (/new, /resume, /search) live in
gateway.commands.sessions; this module holds the table and the rest.

Each handler takes a `CommandContext` and returns the reply text (or None: nothing to send).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Awaitable, Callable

from gateway.db import TitleTaken, UnknownSession, sanitize_title
from gateway.source import SessionSource, describe_session_key
from platforms.base import InboundMessage

if TYPE_CHECKING:  # the runner imports this module; the type is only for annotations
    from gateway.runtime.lanes import ChatLane
    from gateway.runtime.runner import GatewayRunner
    from gateway.sessions.store import SessionEntry

_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@([A-Za-z0-9_]{1,64}))?(?=\s|$)")

MAX_UNDO = 50


@dataclass(frozen=True)
class ParsedCommand:
    name: str  # lower case, alias resolved
    args: str
    bot: str | None  # the @botname suffix, when present


def parse_command(text: str) -> ParsedCommand | None:
    """`/name[@bot] args` -> ParsedCommand; anything else (including paths) -> None."""
    stripped = (text or "").lstrip()
    match = _COMMAND.match(stripped)
    if not match:
        return None
    name = match.group(1).lower()
    name = ALIASES.get(name, name)
    return ParsedCommand(name, stripped[match.end() :].strip(), match.group(2))


@dataclass
class CommandContext:
    runner: "GatewayRunner"
    lane: "ChatLane"
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
        return self.is_admin or self.runner.single_owner

    async def session(self) -> "SessionEntry":
        """The chat's current session, applying the reset policy (and telling the person)."""
        return await self.runner.lookup(self.msg)

    def existing(self) -> "SessionEntry | None":
        """The chat's current session if it has one (no reset applied, nothing created)."""
        return self.runner.store.get(self.lane.key)

    async def reply(self, text: str) -> None:
        await self.runner.send(self.msg, text)


Handler = Callable[[CommandContext], Awaitable[str | None]]


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    handler: Handler
    immediate: bool = False  # read-only: answered at once even while a turn runs


def title_taken(db, title: str, except_id: str | None = None) -> bool:
    """Another session has this title in any letter case. (`/resume <title>` matches case-insensitively,
    so "Trip" and "trip" on two sessions would make one of them unreachable by title.)"""
    row = db.read(
        lambda conn: conn.execute(
            "SELECT 1 FROM sessions WHERE title = ? COLLATE NOCASE AND id IS NOT ? LIMIT 1", (title, except_id)
        ).fetchone()
    )
    return row is not None


def ascii_number(text: str) -> int | None:
    """A command's numeric argument: ASCII digits only. `str.isdigit()` also says yes to "²" and
    "١", which `int()` refuses or reads as another number; to a person `/undo ²` is not a number."""
    return int(text) if text.isascii() and text.isdigit() else None


def when(ts: float | None) -> str:
    if not ts:
        return "never"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def label(session: dict) -> str:
    title = session.get("title")
    return f"“{title}” ({session['id']})" if title else session["id"]


# --- handlers ------------------------------------------------------------------------------


async def cmd_help(ctx: CommandContext) -> str:
    lines = ["Commands:"]
    for command in commands().values():
        lines.append(f"{command.usage} — {command.help}")
    lines.append("Anything else goes to the assistant.")
    return "\n".join(lines)


async def cmd_stop(ctx: CommandContext) -> str:
    # Normally handled on arrival by the runner (never queued); this path runs when idle.
    return await ctx.runner.stop_chat(ctx.lane)


async def cmd_title(ctx: CommandContext) -> str:
    entry = await ctx.session()
    db = ctx.runner.db
    if not ctx.args:
        session = await db.aread("get_session", entry.session_id)
        title = session.get("title") if session else None
        return (
            f"This conversation is titled “{title}”."
            if title
            else (
                "This conversation has no title yet. Set one with /title <name>; titled conversations are "
                "easy to /resume."
            )
        )
    wanted = sanitize_title(ctx.args)
    taken = f"Another conversation is already titled “{wanted}”. Pick a different title."
    if wanted and await asyncio.to_thread(title_taken, db, wanted, entry.session_id):
        return taken
    try:
        clean = await asyncio.to_thread(db.set_title, entry.session_id, wanted)
    except TitleTaken:
        return taken
    except ValueError as exc:
        return f"That title can't be used: {exc}"
    if not clean:
        return "Title cleared."
    return f"Titled this conversation “{clean}”. Later, /resume {clean} brings it back."


async def cmd_undo(ctx: CommandContext) -> str:
    n = 1
    if ctx.args:
        number = ascii_number(ctx.args)
        if number is None or not 1 <= number <= MAX_UNDO:
            return f"Usage: /undo [n] — n is a number of exchanges from 1 to {MAX_UNDO}."
        n = number
    entry = await ctx.session()
    hidden = await asyncio.to_thread(ctx.runner.db.rewind, entry.session_id, n)
    await ctx.runner.forget(entry.session_id)
    if not hidden:
        return "Nothing to undo in this conversation."
    what = "exchange" if n == 1 else f"{n} exchanges"
    return f"Undid the last {what} ({hidden} messages). They are hidden from this conversation but stay in the history."


async def cmd_retry(ctx: CommandContext) -> str | None:
    entry = await ctx.session()
    db = ctx.runner.db
    rows = await asyncio.to_thread(db.get_messages, entry.session_id)
    last_user = next((r for r in reversed(rows) if r["role"] == "user"), None)
    if last_user is None:
        return "Nothing to retry: this conversation has no message of yours yet."
    # Hide the last exchange (question and reply) from the conversation; it stays searchable.
    await asyncio.to_thread(db.supersede_after, entry.session_id, last_user["id"] - 1)
    await ctx.runner.forget(entry.session_id)
    await ctx.runner.agent_turn(ctx.lane, ctx.msg, entry, last_user["content"] or "")
    return None


async def cmd_compress(ctx: CommandContext) -> str:
    entry = await ctx.session()
    return await ctx.runner.compress(ctx.msg, entry.session_id, auto=False)


async def cmd_status(ctx: CommandContext) -> str:
    entry = ctx.existing()
    runner = ctx.runner
    lines = []
    if entry is None:
        lines.append("No conversation yet in this chat: send a message to start one.")
    else:
        s = await runner.db.aread("get_session", entry.session_id)
        if s is None:
            lines.append("No conversation yet in this chat: send a message to start one.")
        else:
            lines += [
                f"Session: {s['id']}",
                f"Title: {s.get('title') or '(none — set one with /title)'}",
                f"Messages: {s.get('message_count', 0)}",
                f"Tokens: {s.get('input_tokens', 0)} in, {s.get('output_tokens', 0)} out",
                f"Started: {when(s.get('started_at'))}; last active: {when(s.get('last_active_at'))}",
            ]
            if s.get("parent_session_id"):
                lines.append(f"Continues: {s['parent_session_id']}")
    lines.append(f"Model: {runner.model_settings.describe()}")
    lines.append(f"When busy: {ctx.lane.busy_mode} (waiting here: {len(ctx.lane.pending)})")
    return "\n".join(lines)


async def cmd_whoami(ctx: CommandContext) -> str:
    runner, source = ctx.runner, ctx.source
    store = runner.store
    why = describe_session_key(source, store.group_sessions_per_user, store.thread_sessions_per_user)
    policy = store.policies.for_source(source)
    lines = [
        f"You: {source.user_name or '-'} (id {source.person_id or 'unknown'} on {source.platform.value})"
        + (", admin" if ctx.is_admin else ""),
        f"Session key: {ctx.lane.key}",
        f"Why: {why}.",
        f"Reset policy: {policy.describe()}.",
    ]
    entry = ctx.existing()
    session = await runner.db.aread("get_session", entry.session_id) if entry else None
    if session is not None:
        lines.append(f"Current session: {label(session)}")
        due = policy.next_reset_why(float(session["last_active_at"]))
        if due is not None:
            when = datetime.fromtimestamp(due[0], policy.tz).strftime("%Y-%m-%d %H:%M %Z")
            lines.append(
                f"Next reset: {when}, if the conversation is idle until then"
                if due[1] == "idle"
                else f"Next reset: {when} (the daily reset)"
            )
    else:
        lines.append("Current session: none yet.")
    return "\n".join(lines)


async def unknown(ctx: CommandContext) -> str:
    return f"Unknown command /{ctx.command.name}. Send /help for the list of commands."


def _table() -> dict[str, Command]:
    from gateway.commands import sessions as cs

    commands = [
        Command("new", "/new [title]", "start a new conversation (alias /reset)", cs.cmd_new),
        Command("resume", "/resume [n|title|id]", "list your conversations, or go back to one", cs.cmd_resume),
        Command("search", "/search <words>", "find past conversations", cs.cmd_search, immediate=True),
        Command("title", "/title [name]", "show or set this conversation's title", cmd_title),
        Command("stop", "/stop", "stop the current reply and drop waiting messages", cmd_stop),
        Command("retry", "/retry", "answer your last message again", cmd_retry),
        Command("undo", "/undo [n]", "hide the last n exchanges (kept in history)", cmd_undo),
        Command("compress", "/compress", "summarise this conversation into a fresh one", cmd_compress),
        Command("status", "/status", "session id, title, messages, tokens", cmd_status, immediate=True),
        Command("whoami", "/whoami", "who you are here, the session key and reset policy", cmd_whoami, immediate=True),
        Command("help", "/help", "this list", cmd_help, immediate=True),
    ]
    return {c.name: c for c in commands}


ALIASES = {"reset": "new", "h": "help", "start": "help"}
COMMANDS: dict[str, Command] = {}


def commands() -> dict[str, Command]:
    if not COMMANDS:
        COMMANDS.update(_table())
    return COMMANDS


def command_menu() -> dict[str, str]:
    """name -> help, for adapters that show a bot menu."""
    return {name: c.help for name, c in commands().items()}


async def run_command(ctx: CommandContext) -> str | None:
    command = commands().get(ctx.command.name)
    if command is None:
        return await unknown(ctx)
    try:
        return await command.handler(ctx)
    except UnknownSession:
        return "That conversation no longer exists."
