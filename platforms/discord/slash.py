"""chinwag's chat commands as Discord application (slash) commands, on discord.py's `app_commands`.

Discord's client takes `/` for its command picker, so typed commands are awkward there; every
command the gateway announces (`bot_commands`) is registered at start: globally (Discord may take a
while to show changes everywhere) or, with `platforms.discord.command_guilds`, per guild (at once).
Options are typed (`/new title:`, `/resume which:` with autocomplete from the person's titled
sessions, `/search query:`, `/undo count:`, `/title name:`). An invocation is deferred at once
(Discord wants an answer within 3 s; a turn takes longer) and becomes an ordinary command message
for the gateway, so access rules and the privacy rule apply exactly as for typed ones; its replies go
to the interaction (the deferred answer first, then follow-ups), privately where that fits.
A failed sync is logged once and the adapter carries on (typed commands still work).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Coroutine, Optional, Protocol

import discord
from discord import app_commands

from gateway.language import N_, Language, gettext
from gateway.source import Platform, SessionSource
from platforms.base import CommandSuggester, InboundMessage, ReplyStream
from platforms.edited_reply import EditedReply
from platforms.helpers import EditPacer


class SlashHost(Protocol):
    """What the slash commands need of the Discord adapter."""

    stream_first_delay: float
    _suggest: CommandSuggester | None

    def pacer(self, name: str, limit: int, window: float) -> EditPacer: ...

    def split(self, text: str) -> list[str]: ...

    async def _slash(self, interaction: discord.Interaction, name: str, args: str) -> None: ...


log = logging.getLogger(__name__)

# Answers only the asker should see: who they are, what they searched, status, help.
EPHEMERAL = frozenset({"whoami", "search", "status", "help"})
MAX_CHOICES = 25  # Discord's limit on autocomplete choices
INTERACTION_PACE = (1, 1.0)  # webhook edits: 5 per 5 s, spent evenly


class InteractionAnswer:
    """The replies to one interaction: the first fills the deferred answer, later ones follow up."""

    def __init__(self, adapter: SlashHost, interaction: discord.Interaction, ephemeral: bool) -> None:
        self.adapter, self.interaction, self.ephemeral = adapter, interaction, ephemeral
        self.original_used = False

    def stream(self) -> ReplyStream:
        return EditedReply(
            key=f"interaction:{self.interaction.id}",
            pacer=self.adapter.pacer("interaction", *INTERACTION_PACE),
            split=self.adapter.split,
            send_part=self._send,
            edit_part=self._edit,
            first_delay=self.adapter.stream_first_delay,
            final_differs=False,
            what="discord interaction",
        )

    async def _send(self, text: str, reply_to: str | None, final: bool, key: str | None) -> str:
        if not self.original_used:
            self.original_used = True
            await self.interaction.edit_original_response(content=text)
            return "@original"
        message = await self.interaction.followup.send(text, ephemeral=self.ephemeral, wait=True)
        return str(message.id)

    async def _edit(self, message_id: str, text: str, final: bool) -> None:
        if message_id == "@original":
            await self.interaction.edit_original_response(content=text)
        else:
            await self.interaction.followup.edit_message(int(message_id), content=text)


def interaction_source(interaction: discord.Interaction) -> SessionSource:
    """Who is asking and where, as for a message in the same place (see the adapter's chat types)."""
    channel = interaction.channel
    user = interaction.user
    if interaction.guild_id is None:
        chat_type, chat_id, thread_id, name = "dm", interaction.channel_id, None, None
    elif isinstance(channel, discord.Thread):
        chat_type, chat_id, thread_id, name = "thread", channel.parent_id, channel.id, channel.name
    else:
        chat_type, chat_id, thread_id, name = "channel", interaction.channel_id, None, getattr(channel, "name", None)
    return SessionSource(
        platform=Platform.DISCORD,
        chat_id=str(chat_id),
        chat_type=chat_type,
        user_id=str(user.id),
        user_name=user.display_name,
        thread_id=str(thread_id) if thread_id else None,
        chat_name=name,
        language=str(interaction.locale),  # the person's client language: DESIGN §17
    )


Invoke = Callable[[discord.Interaction, str, str], Awaitable[None]]


def build_tree(adapter: SlashHost, client: discord.Client, menu: dict[str, str]) -> app_commands.CommandTree:
    """A CommandTree holding one command per chinwag command in `menu` (name -> help)."""
    tree = app_commands.CommandTree(client)
    invoke: Invoke = adapter._slash
    for name, help_text in menu.items():
        if not _NAME_OK(name):
            log.warning("discord: command %r cannot be a slash command (a-z, 0-9, -, _)", name)
            continue
        description = (help_text or name).strip()[:100] or name
        command: app_commands.Command[Any, ..., None] = app_commands.Command(
            name=name,
            description=app_commands.locale_str(description, msgid=help_text),
            callback=_callback(name, invoke),
        )
        if name == "resume":
            command.autocomplete("which")(_resume_choices(adapter))
        tree.add_command(command)
    return tree


# The client languages each catalog is registered for (Discord's own locale codes).
CLIENT_LOCALES = {
    discord.Locale.chinese: Language.ZH,
    discord.Locale.taiwan_chinese: Language.ZH_TW,
    discord.Locale.japanese: Language.JA,
}


class CatalogTranslator(app_commands.Translator):
    """Slash-command and option descriptions from the catalog (DESIGN §17): discord.py asks once
    per locale when it syncs, and registers the answers as `description_localizations`, which
    each person's client shows in its own language."""

    async def translate(
        self, string: app_commands.locale_str, locale: discord.Locale, context: app_commands.TranslationContextTypes
    ) -> str | None:
        language = CLIENT_LOCALES.get(locale)
        if language is None:
            return None
        msgid = string.extras.get("msgid") or string.message
        return gettext(language, msgid)[:100]


def _NAME_OK(name: str) -> bool:
    return bool(name) and len(name) <= 32 and all(c.islower() or c.isdigit() or c in "-_" for c in name)


def _callback(name: str, invoke: Invoke) -> Callable[..., Coroutine[Any, Any, None]]:
    """The callback whose signature gives the command its options (discord.py reads it)."""
    if name == "new":

        @app_commands.describe(title=app_commands.locale_str(N_("a title for the new conversation")))
        async def new(interaction: discord.Interaction, title: Optional[str] = None) -> None:
            await invoke(interaction, name, title or "")

        return new
    if name == "resume":

        @app_commands.describe(which=app_commands.locale_str(N_("a number from the list, a title or a session id")))
        async def resume(interaction: discord.Interaction, which: Optional[str] = None) -> None:
            await invoke(interaction, name, which or "")

        return resume
    if name == "search":

        @app_commands.describe(query=app_commands.locale_str(N_("words to look for in past conversations")))
        async def search(interaction: discord.Interaction, query: str) -> None:
            await invoke(interaction, name, query)

        return search
    if name == "undo":

        @app_commands.describe(count=app_commands.locale_str(N_("how many exchanges to hide (default 1)")))
        async def undo(
            interaction: discord.Interaction, count: Optional[app_commands.Range[int, 1, 50]] = None
        ) -> None:
            await invoke(interaction, name, str(count) if count else "")

        return undo
    if name == "title":

        @app_commands.describe(name=app_commands.locale_str(N_("the new title (leave out to see the current one)")))
        async def title(interaction: discord.Interaction, name: Optional[str] = None) -> None:
            await invoke(interaction, "title", name or "")

        return title

    async def plain(interaction: discord.Interaction) -> None:
        await invoke(interaction, name, "")

    return plain


def _resume_choices(
    adapter: SlashHost,
) -> Callable[[discord.Interaction, str], Coroutine[Any, Any, list[app_commands.Choice[str]]]]:
    async def choices(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        suggest = adapter._suggest
        if suggest is None:
            return []
        try:
            found = await suggest(interaction_source(interaction), "resume", current)
        except Exception:  # a picker without suggestions beats an error in the person's client
            log.exception("discord: /resume suggestions failed")
            return []
        return [app_commands.Choice(name=label[:100], value=value[:100]) for label, value in found[:MAX_CHOICES]]

    return choices


def command_message(
    interaction: discord.Interaction, name: str, args: str, answer: InteractionAnswer
) -> InboundMessage:
    """The gateway's view of a slash command: a command message whose replies go to the interaction."""
    text = f"/{name} {args}".strip()
    return InboundMessage(
        source=interaction_source(interaction),
        text=text,
        message_id=f"interaction-{interaction.id}",
        mentioned=True,  # a slash command is addressed to this bot by construction
        timestamp=interaction.created_at.timestamp(),
        raw={"interaction_id": str(interaction.id), "guild_id": str(interaction.guild_id or "") or None},
        reply_target=answer.stream,
    )
