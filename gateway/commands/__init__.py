"""Chat commands: parsing, the table, and running one.

A command is a message whose first word is `/name` (or `/name@botname`, as Telegram groups send
it). A first word that looks like a path (`/usr/bin/env is broken`) is ordinary text. Unknown
commands get a hint, never a model call. The handlers live by family: gateway.commands.basic (the
current conversation), gateway.commands.sessions (moving between conversations) and
gateway.commands.schedules (the person's scheduled jobs); they see only
`ChatServices` (gateway.commands.context), so this table imports them at module top and is built
once, at import.

/help is here rather than in basic: it lists this table. The terminal's `/attach PATH` is read by
the local adapter itself (platforms.local_attach) and never reaches this table; /help on the
terminal names it, and on a chat platform `/attach` is answered with what to do there instead.
"""

from __future__ import annotations

import difflib

from gateway.commands import basic
from gateway.commands import schedules as scheduled
from gateway.commands import sessions as moves
from gateway.commands.context import ALIASES, ChatServices, Command, CommandContext, ParsedCommand, parse_command
from gateway.db import UnknownSession
from gateway.source import Platform

# The local adapter's own command (platforms.local_attach); named here for /help and the hint.
TERMINAL_ATTACH = "/attach PATH [caption] — send a file from this machine"

__all__ = [
    "COMMANDS",
    "ChatServices",
    "Command",
    "CommandContext",
    "ParsedCommand",
    "command_menu",
    "commands",
    "parse_command",
    "run_command",
]


async def cmd_help(ctx: CommandContext) -> str:
    lines = ["Commands:"]
    for command in COMMANDS.values():
        lines.append(f"{command.usage} — {command.help}")
    if ctx.source.platform == Platform.LOCAL:
        lines.append(TERMINAL_ATTACH)
    lines.append("Anything else goes to the assistant.")
    return "\n".join(lines)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("new", "/new [title]", "start a new conversation (alias /reset)", moves.cmd_new),
        Command("resume", "/resume [n|title|id]", "list your conversations, or go back to one", moves.cmd_resume),
        Command("search", "/search <words>", "find past conversations", moves.cmd_search, immediate=True),
        Command("title", "/title [name]", "show or set this conversation's title", basic.cmd_title),
        Command("stop", "/stop", "stop the current reply and drop waiting messages", basic.cmd_stop),
        Command("retry", "/retry", "answer your last message again", basic.cmd_retry),
        Command("undo", "/undo [n]", "hide the last n exchanges (kept in history)", basic.cmd_undo),
        Command("compress", "/compress", "summarise this conversation into a fresh one", basic.cmd_compress),
        Command("status", "/status", "session id, title, messages, tokens", basic.cmd_status, immediate=True),
        Command(
            "whoami", "/whoami", "who you are here, the session key and reset policy", basic.cmd_whoami, immediate=True
        ),
        Command("tools", "/tools", "the tools the assistant may use here", basic.cmd_tools, immediate=True),
        Command(
            "approve", "/approve [id]", "let the assistant run the tool it asked about", basic.cmd_approve, at_once=True
        ),
        Command("deny", "/deny [id]", "refuse the tool call the assistant asked about", basic.cmd_deny, at_once=True),
        Command(
            "schedules",
            "/schedules [cancel|pause|resume ID]",
            "your scheduled jobs: list, cancel, pause or resume one",
            scheduled.cmd_schedules,
        ),
        Command("help", "/help", "this list", cmd_help, immediate=True),
    )
}


def commands() -> dict[str, Command]:
    """The table: name -> Command."""
    return COMMANDS


def command_menu() -> dict[str, str]:
    """name -> help, for adapters that show a bot menu."""
    return {name: c.help for name, c in COMMANDS.items()}


async def unknown(ctx: CommandContext) -> str:
    if ctx.command.name == "attach":  # the terminal's command, typed on a chat platform
        return "/attach is for the terminal. Here, send the file itself (with a caption if you like)."
    # A typo gets the close command named, as config validation names the close key.
    close = difflib.get_close_matches(ctx.command.name, [*COMMANDS, *ALIASES], n=1, cutoff=0.7)
    hint = f" Did you mean /{close[0]}?" if close else ""
    return f"Unknown command /{ctx.command.name}.{hint} Send /help for the list of commands."


async def run_command(ctx: CommandContext) -> str | None:
    command = COMMANDS.get(ctx.command.name)
    if command is None:
        return await unknown(ctx)
    try:
        return await command.handler(ctx)
    except UnknownSession:
        return "That conversation no longer exists."
