"""The Discord adapter end to end: real discord.py against the fake Discord on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.source import Platform, SessionSource, build_session_key
from platforms.base import InboundMessage
from platforms.discord_adapter import DiscordAdapter
from tests.fakes.discord_server import FakeDiscord

GUILD, GENERAL, DM_CHANNEL = 500, 600, 700
ALICE_ID, BOB_ID = 11, 12


class Inbox:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def __call__(self, message: InboundMessage) -> None:
        await self.queue.put(message)

    async def next(self, timeout: float = 5.0) -> InboundMessage:
        return await asyncio.wait_for(self.queue.get(), timeout)


@pytest.fixture
async def fake():
    server = FakeDiscord(heartbeat_interval_ms=200)
    server.add_guild(GUILD, "Test Guild")
    server.add_text_channel(GUILD, GENERAL, "general")
    server.add_dm(DM_CHANNEL, server.user(ALICE_ID, "alice"))
    await server.start()
    yield server
    await server.stop()


def make_adapter(fake: FakeDiscord, **extra) -> DiscordAdapter:
    config = {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url,
              "guild_ready_timeout": 0.05, "reconnect_base": 0.05, "reconnect_cap": 0.2}
    config.update(extra)
    return DiscordAdapter(config)


@pytest.fixture
async def running(fake):
    adapter = make_adapter(fake)
    inbox = Inbox()
    await adapter.start(inbox)
    await fake.wait_for(lambda: adapter.health().ready)
    yield adapter, inbox
    await adapter.stop()


def alice(fake: FakeDiscord) -> dict:
    return fake.user(ALICE_ID, "alice", global_name="Alice A.")


def bob(fake: FakeDiscord) -> dict:
    return fake.user(BOB_ID, "bob")


async def test_connects_with_required_intents(fake, running):
    adapter, _ = running
    assert adapter.health().ready
    identify = fake.identifies[0]
    intents = identify["intents"]
    for bit in (0, 9, 12, 15):  # guilds, guild_messages, dm_messages, message_content
        assert intents & (1 << bit), bit
    assert not intents & (1 << 1)  # members is not asked for
    assert fake.calls[0].path == "/users/@me"


async def test_dm_message_delivered(fake, running):
    _, inbox = running
    payload = await fake.user_says(DM_CHANNEL, alice(fake), "hello there")
    msg = await inbox.next()
    assert msg.text == "hello there"
    assert msg.message_id == payload["id"]
    src = msg.source
    assert (src.platform, src.chat_type, src.chat_id, src.user_id) == (
        Platform.DISCORD, "dm", str(DM_CHANNEL), str(ALICE_ID))
    assert src.user_name == "Alice A."
    assert src.thread_id is None
    assert not msg.mentioned and not msg.reply_to_bot
    assert build_session_key(src) == f"agent:main:discord:dm:{DM_CHANNEL}"
