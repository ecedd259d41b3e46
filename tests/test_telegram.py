"""Telegram adapter end to end: the real python-telegram-bot against the fake Bot API server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from telegram.error import NetworkError

from gateway.source import Platform, SessionSource
from platforms.base import InboundMessage
from platforms.telegram import TelegramAdapter, TelegramConfigError
from platforms.telegram_format import to_markdown_v2
from tests.fakes.telegram_server import FakeTelegram, parse_markdown_v2, utf16_len

ANN = FakeTelegram.user(42, "Ann", "ann", last_name="Lee")
BOB = FakeTelegram.user(43, "Bob", "bob")


def cfg(fake: FakeTelegram, **extra: Any) -> dict[str, Any]:
    base = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "watchdog_seconds": 5,
        "reconnect_base": 0.01,
        "reconnect_cap": 0.05,
    }
    base.update(extra)
    return base


@pytest.fixture
async def fake():
    server = await FakeTelegram().start()
    yield server
    await server.stop()


class Running:
    def __init__(self, adapter: TelegramAdapter) -> None:
        self.adapter = adapter
        self.inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def next(self, timeout: float = 5.0) -> InboundMessage:
        return await asyncio.wait_for(self.inbox.get(), timeout)


@pytest.fixture
async def tg(fake):
    run = Running(TelegramAdapter(cfg(fake)))
    await run.adapter.start(run.inbox.put)
    yield run
    await run.adapter.stop()


async def until(predicate, timeout: float = 5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


# -- inbound ---------------------------------------------------------------------------------


async def test_dm_arrives_as_inbound_message(fake, tg):
    chat = fake.private_chat(ANN)
    sent = fake.push_message(chat, ANN, "hello there")
    msg = await tg.next()
    assert msg.text == "hello there"
    assert msg.message_id == f"42:{sent['message_id']}"
    src = msg.source
    assert (src.platform, src.chat_id, src.chat_type, src.user_id) == (Platform.TELEGRAM, "42", "dm", "42")
    assert src.user_name == "Ann Lee"
    assert src.thread_id is None
    assert msg.mentioned is False and msg.reply_to_bot is False
    assert msg.raw["message"]["text"] == "hello there"
    assert tg.adapter.health().ready
    # the adapter switched the bot to polling and asked who it is
    assert fake.calls_to("getMe") and fake.calls_to("deleteWebhook")
