"""A Telegram update whose text holds a lone surrogate (valid JSON: `"\\ud800"` escaped) goes through
the real python-telegram-bot adapter and the gateway and is answered, with valid text."""

from __future__ import annotations

import pytest

from tests.fakes.platform_stack import running
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.test_telegram_e2e import ANN, Stack


@pytest.fixture
async def stack(tmp_path):
    telegram = await FakeTelegram().start()
    async with running(telegram, lambda llm: Stack(tmp_path, telegram, llm)) as s:
        yield s


async def test_update_text_with_a_lone_surrogate_is_answered(stack):
    tg = stack.telegram
    tg.push_message(tg.private_chat(ANN), ANN, "hi \ud800 there", auto_entities=False)
    [reply] = await stack.wait_replies(42, 1)
    assert reply["text"] == "echo: hi \ufffd there"


async def test_title_with_a_lone_surrogate_gets_a_reply(stack):
    tg = stack.telegram
    chat = tg.private_chat(ANN)
    tg.push_message(chat, ANN, "hello", auto_entities=False)
    await stack.wait_replies(42, 1)
    tg.push_message(chat, ANN, "/title \udc00 trip", auto_entities=False)
    tg.push_message(chat, ANN, "/search \ud800hello", auto_entities=False)
    replies = await stack.wait_replies(42, 3)
    assert "trip" in replies[1]["text"]
    assert replies[2]["text"]


async def test_commands_with_entities_and_a_lone_surrogate_are_stored_and_answered(stack):
    """The client marks `/search` as a bot_command entity; the adapter must not trip over the
    surrogate while reading entities (python-telegram-bot encodes the text to UTF-16 for that)."""
    tg = stack.telegram
    chat = tg.private_chat(ANN)
    tg.push_message(chat, ANN, "hello")
    await stack.wait_replies(42, 1)
    tg.push_message(chat, ANN, "/title x \ud800")
    tg.push_message(chat, ANN, "/search \ud800")
    replies = await stack.wait_replies(42, 3)
    assert "x \ufffd" in replies[1]["text"]
    assert replies[2]["text"]


async def test_a_dm_command_for_another_bot_is_answered(stack):
    """Privacy mode is a group matter: in a DM only this bot can read `/help@other_bot`, so the
    person is told it is for another bot rather than met with silence."""
    tg = stack.telegram
    tg.push_message(tg.private_chat(ANN), ANN, "/help@other_bot")
    [reply] = await stack.wait_replies(42, 1)
    assert "@other_bot" in reply["text"]
