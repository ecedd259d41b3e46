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
from gateway.language import AUTO, CHOICES, N_, Language, _, current, gettext, parse_language
from gateway.source import Platform

# The local adapter's own command (platforms.local_attach); named here for /help and the hint.
TERMINAL_ATTACH = N_("/attach PATH [caption] — send a file from this machine")

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


LANGUAGE_USAGE = f"/language [{'|'.join(CHOICES)}]"


async def cmd_help(ctx: CommandContext) -> str:
    lines = [_("Commands:")]
    for command in COMMANDS.values():
        lines.append(_("{usage} — {help}", usage=command.usage, help=_(command.help)))
    if ctx.source.platform == Platform.LOCAL:
        lines.append(_(TERMINAL_ATTACH))
    lines.append(_("Anything else goes to the assistant."))
    return "\n".join(lines)


async def cmd_language(ctx: CommandContext) -> str:
    """/language: show the language in use and the choices; /language <code>|auto: choose, kept with
    the person's identity on this platform (Feishu: their union_id, across apps)."""
    typed = ctx.args.strip()
    if not typed:
        # each choice named in itself, so a person who cannot read the current language finds theirs
        choices = "\n".join(f"/language {language.value} — {language.label}" for language in Language)
        return _(
            "I'm writing to you in {language}. To choose another:\n{choices}\n"
            "/language auto — follow your app's language",
            language=current().label,
            choices=choices,
        )
    chosen = {choice.lower(): choice for choice in CHOICES}.get(typed.lower().replace("_", "-"))
    if chosen is None:
        return _("Usage: {usage}", usage=LANGUAGE_USAGE)
    source = ctx.source
    if not source.person_id:
        return _("I can't tell who you are in this chat, so I can't remember a language for you.")
    db = ctx.services.db
    await db.aset_person_language(source.platform.value, source.person_id, None if chosen == AUTO else chosen)
    if chosen == AUTO:
        # (the configured default only applies when the app gives no hint; the next message shows it)
        return gettext(
            parse_language(source.language) or current(), "Done: I'll follow your app's language from now on."
        )
    return gettext(Language(chosen), "Done: I'll write to you in {name} from now on.", name=Language(chosen).label)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("new", "/new [title]", N_("start a new conversation (alias /reset)"), moves.cmd_new),
        Command("resume", "/resume [n|title|id]", N_("list your conversations, or go back to one"), moves.cmd_resume),
        Command("search", "/search <words>", N_("find past conversations"), moves.cmd_search, immediate=True),
        Command("title", "/title [name]", N_("show or set this conversation's title"), basic.cmd_title),
        Command("stop", "/stop", N_("stop the current reply and drop waiting messages"), basic.cmd_stop),
        Command("retry", "/retry", N_("answer your last message again"), basic.cmd_retry),
        Command("undo", "/undo [n]", N_("hide the last n exchanges (kept in history)"), basic.cmd_undo),
        Command("compress", "/compress", N_("summarise this conversation into a fresh one"), basic.cmd_compress),
        Command("status", "/status", N_("session id, title, messages, tokens"), basic.cmd_status, immediate=True),
        Command(
            "whoami",
            "/whoami",
            N_("who you are here, the session key and reset policy"),
            basic.cmd_whoami,
            immediate=True,
        ),
        Command("tools", "/tools", N_("the tools the assistant may use here"), basic.cmd_tools, immediate=True),
        Command(
            "approve",
            "/approve [id]",
            N_("let the assistant run the tool it asked about"),
            basic.cmd_approve,
            at_once=True,
        ),
        Command(
            "deny", "/deny [id]", N_("refuse the tool call the assistant asked about"), basic.cmd_deny, at_once=True
        ),
        Command(
            "schedules",
            "/schedules [cancel|pause|resume ID]",
            N_("your scheduled jobs: list, cancel, pause or resume one"),
            scheduled.cmd_schedules,
        ),
        Command("language", LANGUAGE_USAGE, N_("show or choose the language I write in"), cmd_language),
        Command("help", "/help", N_("this list"), cmd_help, immediate=True),
    )
}


def commands() -> dict[str, Command]:
    """The table: name -> Command."""
    return COMMANDS


def command_menu() -> dict[str, str]:
    """name -> help, for adapters that show a bot menu. The help is a catalog msgid (English): an
    adapter shows it in each language its platform can (gateway.language.gettext)."""
    return {name: c.help for name, c in COMMANDS.items()}


async def unknown(ctx: CommandContext) -> str:
    if ctx.command.name == "attach":  # the terminal's command, typed on a chat platform
        return _("/attach is for the terminal. Here, send the file itself (with a caption if you like).")
    # A typo gets the close command named, as config validation names the close key.
    close = difflib.get_close_matches(ctx.command.name, [*COMMANDS, *ALIASES], n=1, cutoff=0.7)
    if close:
        return _(
            "Unknown command /{name}. Did you mean /{close}? Send /help for the list of commands.",
            name=ctx.command.name,
            close=close[0],
        )
    return _("Unknown command /{name}. Send /help for the list of commands.", name=ctx.command.name)


async def run_command(ctx: CommandContext) -> str | None:
    command = COMMANDS.get(ctx.command.name)
    if command is None:
        return await unknown(ctx)
    try:
        return await command.handler(ctx)
    except UnknownSession:
        return _("That conversation no longer exists.")
