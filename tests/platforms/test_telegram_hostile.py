"""Hostile and awkward input through the real python-telegram-bot adapter and the gateway: text
holding a lone surrogate (valid JSON: `"\\ud800"` escaped), with and without command entities, is
answered with valid text; a DM's command for another bot is answered; a /stop in a shared topic
tells everyone whose message it stopped."""

from __future__ import annotations

import asyncio

import pytest

from gateway.runtime.lanes import ACK_TEXT
from tests.fakes.loopback import wait_until
from tests.fakes.platform_stack import running
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.test_telegram_e2e import ANN, BOB, Stack


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


async def test_stop_in_a_forum_topic_tells_the_others_it_stopped(stack):
    """A forum topic is one conversation for everyone in it: Ann's /stop cancels Bob's running turn
    and Carol's waiting message. Each of them is told, in reply to their message, not left waiting."""
    tg, carol = stack.telegram, FakeTelegram.user(44, "Carol", "carol")
    forum = tg.group_chat(-300, "Forum", forum=True)
    stack.llm.gate = asyncio.Event()  # Bob's turn runs until the test lets it end
    bob_asked = tg.push_message(forum, BOB, "@chinwag_bot a long job", thread_id=5)
    await stack.llm.wait_requests(1)
    carol_asked = tg.push_message(forum, carol, "@chinwag_bot my question", thread_id=5)
    await wait_until(lambda: any(lane.pending for lane in stack.runner.lanes.values()), 8)
    tg.push_message(forum, ANN, "/stop@chinwag_bot", thread_id=5)
    await stack.wait_replies(-300, 4)  # Carol was told her message waits; then the three below
    stack.llm.gate.set()
    await stack.runner.drain()
    replies = [r for r in tg.sent(-300) if r["text"] != ACK_TEXT["queue"]]
    by_target = {r["reply_to_message"]["message_id"]: r["text"] for r in replies}
    assert len(replies) == 3 and "Stopped. Dropped 1 waiting message." in by_target.values()
    for asked in (bob_asked, carol_asked):
        assert "Ann sent /stop" in by_target[asked["message_id"]]
    assert all(r["message_thread_id"] == 5 for r in replies)
