"""Telegram end to end through the gateway: the real adapter (python-telegram-bot against the fake
Bot API), the real GatewayRunner on a real SQLite file, and the fake OpenAI-compatible model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.loopback import free_port, wait_until
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.platform_stack import PlatformStack, running
from tests.fakes.telegram_server import FakeTelegram

ANN = FakeTelegram.user(42, "Ann", "ann")
BOB = FakeTelegram.user(43, "Bob", "bob")


class Stack(PlatformStack):
    """The gateway with the real Telegram adapter against the fake Bot API."""

    def __init__(
        self, tmp: Path, telegram: FakeTelegram, llm: FakeOpenAI, http_port: int = 0, **telegram_extra: Any
    ) -> None:
        self.telegram = telegram
        section = {
            "token": telegram.token,
            "base_url": telegram.base_url,
            "poll_timeout": 1,
            "watchdog_seconds": 5,
            "reconnect_base": 0.01,
            "reconnect_cap": 0.05,
            "allowed_users": ["*"],
            **telegram_extra,
        }
        super().__init__(tmp, llm, "telegram", section, TelegramAdapter, http_port)

    def replies(self, chat_id: int) -> list[dict[str, Any]]:
        return self.telegram.sent(chat_id)


@pytest.fixture
async def stack(tmp_path):
    telegram = await FakeTelegram().start()
    async with running(telegram, lambda llm: Stack(tmp_path, telegram, llm)) as s:
        yield s


async def test_dm_turn_is_answered_and_stored(stack):
    tg = stack.telegram
    stack.llm.gate = asyncio.Event()  # hold the model's answer until the typing hint shows
    tg.push_message(tg.private_chat(ANN), ANN, "hello bot")
    await wait_until(lambda: tg.calls_to("sendChatAction"))
    assert tg.calls_to("sendChatAction")  # typing shown while the turn runs
    stack.llm.gate.set()
    [reply] = await stack.wait_replies(42, 1)
    assert reply["text"] == "echo: hello bot"
    assert reply["_parse_mode"] == "MarkdownV2"
    assert "reply_to_message" not in reply  # DMs are answered plainly
    [session] = stack.sessions()
    assert session["session_key"] == "agent:main:telegram:dm:42"
    assert session["message_count"] >= 2
    # the bot menu was registered from the gateway's command list
    assert {"new", "help", "search"} <= {c["command"] for c in tg.commands}


async def test_group_answers_only_when_addressed(stack):
    tg = stack.telegram
    group = tg.group_chat(-100, "Team")
    tg.push_message(group, ANN, "talking to Bob, not the bot")
    asked = tg.push_message(group, ANN, "@chinwag_bot what is 2+2?")
    [reply] = await stack.wait_replies(-100, 1)
    assert reply["text"] == "echo: @chinwag_bot what is 2+2?"
    assert reply["reply_to_message"]["message_id"] == asked["message_id"]  # threaded to the asker
    # a reply to the bot's message counts as addressing it
    tg.push_message(group, BOB, "and 3+3?", reply_to=tg.messages[(-100, reply["message_id"])])
    replies = await stack.wait_replies(-100, 2)
    assert replies[1]["text"] == "echo: and 3+3?"
    assert len(stack.llm.requests) == 2  # the unaddressed message never reached the model
    keys = sorted(s["session_key"] for s in stack.sessions())
    assert keys == ["agent:main:telegram:group:-100:42", "agent:main:telegram:group:-100:43"]


async def test_forum_topics_get_their_own_sessions_and_replies(stack):
    tg = stack.telegram
    forum = tg.group_chat(-200, "Forum", forum=True)
    tg.push_message(forum, ANN, "@chinwag_bot topic one", thread_id=77)
    await stack.wait_replies(-200, 1)
    tg.push_message(forum, ANN, "@chinwag_bot topic two", thread_id=88)
    replies = await stack.wait_replies(-200, 2)
    assert [r["message_thread_id"] for r in replies] == [77, 88]
    keys = sorted(s["session_key"] for s in stack.sessions())
    assert keys == ["agent:main:telegram:forum:-200:77", "agent:main:telegram:forum:-200:88"]


async def test_slash_commands_are_handled_by_the_gateway(stack):
    tg = stack.telegram
    chat = tg.private_chat(ANN)
    tg.push_message(chat, ANN, "first message")
    await stack.wait_replies(42, 1)
    tg.push_message(chat, ANN, "/new")
    replies = await stack.wait_replies(42, 2)
    assert len(stack.llm.requests) == 1  # commands do not go to the model
    assert replies[1]["text"]
    group = tg.group_chat(-100, "Team")
    tg.push_message(group, ANN, "/status@other_bot")  # another bot's command: not ours
    tg.push_message(group, ANN, "/help@chinwag_bot")
    [help_reply] = await stack.wait_replies(-100, 1)
    assert "/new" in help_reply["text"] and len(stack.llm.requests) == 1
    assert len(stack.replies(-100)) == 1


async def test_redelivered_update_is_answered_once_even_after_restart(stack):
    tg = stack.telegram
    chat = tg.private_chat(ANN)
    msg = tg.push_message(chat, ANN, "only once please")
    await stack.wait_replies(42, 1)
    # the reply is on screen before its turn has finished: a message now would be answered "still
    # working on your previous message" (the lane is busy), which is not what this test is about
    await asyncio.wait_for(stack.runner.drain(), 8)
    tg.push_update({"message": msg})  # Telegram delivers the same message again
    tg.push_message(chat, ANN, "second")
    replies = await stack.wait_replies(42, 2)
    assert [r["text"] for r in replies] == ["echo: only once please", "echo: second"]

    await stack.restart()  # a new adapter and runner on the same database
    tg.push_update({"message": msg})
    tg.push_message(chat, ANN, "after restart")
    replies = await stack.wait_replies(42, 3)
    assert [r["text"] for r in replies][2] == "echo: after restart"
    assert len(stack.llm.requests) == 3
    assert len(stack.replies(42)) == 3


async def test_long_answer_is_split_and_markdown_rendered(stack):
    tg = stack.telegram
    body = "\n".join(f"x = {i}  # step {i}." for i in range(600))
    stack.llm.push("Here is **the code**:\n```python\n" + body + "\n```\nDone.")
    tg.push_message(tg.private_chat(ANN), ANN, "write it")
    await tg.wait_for(lambda: any("Done." in r["text"] for r in stack.replies(42)), 8)
    await asyncio.wait_for(stack.runner.drain(), 8)  # a streamed reply shows text before its final edit
    replies = stack.replies(42)
    assert len(replies) >= 3
    assert all(r["_parse_mode"] == "MarkdownV2" for r in replies)  # every part valid markup
    assert replies[0]["text"].startswith("Here is the code:")
    text = "".join(r["text"] for r in replies)
    assert all(f"x = {i}  # step {i}." in text for i in range(600))


async def test_webhook_mode_turn_through_the_gateway_http_server(tmp_path):
    telegram = await FakeTelegram().start()
    port = free_port()
    webhook = {
        "mode": "webhook",
        "webhook_url": f"http://127.0.0.1:{port}/webhooks/telegram",
        "secret_token": "e2e-secret",
    }
    async with running(telegram, lambda llm: Stack(tmp_path, telegram, llm, http_port=port, **webhook)) as s:
        assert telegram.webhook and telegram.webhook["secret_token"] == "e2e-secret"
        telegram.push_message(telegram.private_chat(ANN), ANN, "over the webhook")
        [reply] = await s.wait_replies(42, 1)
        assert reply["text"] == "echo: over the webhook"
        assert telegram.webhook_deliveries == [200]
        assert not telegram.calls_to("getUpdates")
