"""Discord slash commands: real discord.py's app_commands against the fake Discord (command
registration, INTERACTION_CREATE, interaction callbacks and follow-up webhooks)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from platforms.base import InboundMessage
from platforms.discord.adapter import DiscordAdapter
from tests.fakes.discord_server import FakeDiscord

GUILD, GENERAL, DM_CHANNEL = 500, 600, 700
ALICE = {"id": "11", "username": "alice", "discriminator": "0", "avatar": None, "global_name": "Alice"}
MENU = {
    "new": "/new [title] — start a new conversation",
    "resume": "/resume [n|title|id] — go back to one",
    "search": "/search <words> — find past conversations",
    "undo": "/undo [n] — hide the last n exchanges",
    "title": "/title [name] — show or set the title",
    "whoami": "/whoami — who you are here",
    "help": "/help — this list",
}


@pytest.fixture
async def fake():
    server = FakeDiscord(heartbeat_interval_ms=200)
    server.add_guild(GUILD, "Test Guild")
    server.add_text_channel(GUILD, GENERAL, "general")
    server.add_dm(DM_CHANNEL, ALICE)
    await server.start()
    yield server
    await server.stop()


class Inbox:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def __call__(self, message: InboundMessage) -> None:
        await self.queue.put(message)

    async def next(self) -> InboundMessage:
        return await asyncio.wait_for(self.queue.get(), 5)


async def start(fake: FakeDiscord, **extra) -> tuple[DiscordAdapter, Inbox]:
    adapter = DiscordAdapter(
        {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url, "guild_ready_timeout": 0.05}
        | extra
    )
    adapter.bot_commands(MENU)
    inbox = Inbox()
    await adapter.start(inbox)
    await fake.wait_for(lambda: adapter.health().ready)
    return adapter, inbox


@pytest.fixture
async def running(fake):
    adapter, inbox = await start(fake)
    await fake.wait_for(lambda: None in fake.commands)
    yield adapter, inbox
    await adapter.stop()


async def test_every_command_is_registered_globally_with_typed_options(running, fake):
    by_name = {c["name"]: c for c in fake.commands[None]}
    assert set(by_name) == set(MENU)
    [which] = by_name["resume"]["options"]
    assert which["name"] == "which" and which["autocomplete"] is True and not which.get("required")
    [query] = by_name["search"]["options"]
    assert query["name"] == "query" and query["required"] is True
    [count] = by_name["undo"]["options"]
    assert count["type"] == 4 and (count["min_value"], count["max_value"]) == (1, 50)
    assert by_name["new"]["options"][0]["name"] == "title" and by_name["help"]["options"] == []


async def test_command_guilds_register_in_the_guild_for_instant_updates(fake):
    adapter, _ = await start(fake, command_guilds=[str(GUILD)])
    try:
        await fake.wait_for(lambda: GUILD in fake.commands)
        assert {c["name"] for c in fake.commands[GUILD]} == set(MENU) and None not in fake.commands
    finally:
        await adapter.stop()


async def test_a_slash_command_is_deferred_then_answered_through_the_interaction(running, fake):
    adapter, inbox = running
    interaction_id = await fake.slash(GENERAL, ALICE, "search", {"query": "deploy script"})
    msg = await inbox.next()
    assert msg.text == "/search deploy script" and msg.is_command and msg.mentioned
    assert (msg.source.chat_type, msg.source.chat_id, msg.source.user_id) == ("channel", str(GENERAL), "11")
    [deferred] = fake.interactions[interaction_id]["responses"]
    assert deferred["type"] == 5 and deferred["data"]["flags"] & 64  # search results: only for the asker
    await msg.reply_target().finish("1. “deploy notes” — …")
    await msg.reply_target().finish("and one more thing")  # a second reply is a follow-up
    assert fake.answer_text(interaction_id) == ["1. “deploy notes” — …", "and one more thing"]
    assert fake.interactions[interaction_id]["followups"][0]["flags"] & 64
    assert not fake.sent  # nothing went to the channel itself


async def test_new_in_a_dm_is_public_and_carries_its_title(running, fake):
    _adapter, inbox = running
    interaction_id = await fake.slash(DM_CHANNEL, ALICE, "new", {"title": "trip plans"})
    msg = await inbox.next()
    assert msg.text == "/new trip plans" and msg.source.chat_type == "dm"
    assert not (fake.interactions[interaction_id]["responses"][0].get("data") or {}).get("flags")
    await msg.reply_target().finish("Started a new conversation “trip plans”.")
    assert fake.answer_text(interaction_id) == ["Started a new conversation “trip plans”."]


async def test_resume_autocomplete_offers_what_the_gateway_suggests_for_that_person(running, fake):
    adapter, _ = running
    asked = []

    async def suggest(source, command, typed):
        asked.append((source.user_id, command, typed))
        return [("trip plans — 12 messages", "trip plans"), ("taxes 2025", "taxes 2025")]

    adapter.command_suggestions(suggest)
    interaction_id = await fake.autocomplete(GENERAL, ALICE, "resume", "which", "tr")
    await fake.wait_for(lambda: fake.interactions[interaction_id]["responses"])
    [answer] = fake.interactions[interaction_id]["responses"]
    assert answer["type"] == 8
    assert answer["data"]["choices"] == [
        {"name": "trip plans — 12 messages", "value": "trip plans"},
        {"name": "taxes 2025", "value": "taxes 2025"},
    ]
    assert asked == [("11", "resume", "tr")]


async def test_a_failed_command_sync_is_logged_once_and_the_adapter_keeps_working(fake, caplog):
    # the bot was invited without the applications.commands scope
    fake.fail_next(
        "PUT", r"/applications/\d+/commands", 403, count=5, body={"message": "Missing Access", "code": 50001}
    )
    caplog.set_level(logging.WARNING, "platforms.discord.adapter")
    adapter, inbox = await start(fake)
    try:
        await fake.wait_for(lambda: any("slash commands failed" in r.getMessage() for r in caplog.records))
        assert adapter.health().ready
        await fake.user_says(GENERAL, ALICE, "/new typed still works")
        assert (await inbox.next()).text == "/new typed still works"
    finally:
        await adapter.stop()
    assert sum("slash commands failed" in r.getMessage() for r in caplog.records) == 1
