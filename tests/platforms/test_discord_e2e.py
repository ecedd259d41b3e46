"""Discord end to end through the gateway: the real adapter (discord.py against the fake Discord),
the real GatewayRunner on a real SQLite file, and the fake OpenAI-compatible model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from platforms.discord.adapter import DiscordAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform_stack import PlatformStack, running

GUILD, GENERAL, DM_CHANNEL, THREAD = 500, 600, 700, 810
ANN_ID, BOB_ID = 42, 43


class Stack(PlatformStack):
    """The gateway with the real Discord adapter against the fake Discord; a start waits until
    the adapter is connected."""

    def __init__(self, tmp: Path, discord: FakeDiscord, llm: FakeOpenAI, **discord_extra: Any) -> None:
        self.discord = discord
        section = discord.settings(allowed_users=["*"], **discord_extra)
        super().__init__(tmp, llm, "discord", section, DiscordAdapter)

    async def start(self) -> None:
        await super().start()
        await self.wait_ready()

    def replies(self, channel_id: int) -> list[dict[str, Any]]:
        return [m for m in self.discord.sent if m["channel_id"] == str(channel_id)]


@pytest.fixture
async def stack(tmp_path):
    discord = FakeDiscord(heartbeat_interval_ms=500)
    discord.add_guild(GUILD, "Team")
    discord.add_text_channel(GUILD, GENERAL, "general")
    discord.add_dm(DM_CHANNEL, discord.user(ANN_ID, "ann"))
    await discord.start()
    async with running(discord, lambda llm: Stack(tmp_path, discord, llm)) as s:
        yield s


def ann(d: FakeDiscord) -> dict:
    return d.user(ANN_ID, "ann")


def bob(d: FakeDiscord) -> dict:
    return d.user(BOB_ID, "bob")


def at_bot(d: FakeDiscord, text: str) -> dict:
    return {"content": f"<@{d.bot_id}> {text}", "mentions": [d.bot_user]}


async def test_dm_turn_is_answered_and_stored(stack):
    d = stack.discord
    model_may_answer = asyncio.Event()
    stack.llm.push(Reply(text="echo: hello bot", wait=model_may_answer))
    await d.user_says(DM_CHANNEL, ann(d), "hello bot")
    await d.wait_for(lambda: DM_CHANNEL in d.typing)  # typing shown while the turn runs
    model_may_answer.set()
    [reply] = await stack.wait_replies(DM_CHANNEL, 1)
    assert reply["content"] == "echo: hello bot"
    assert "message_reference" not in reply  # DMs are answered plainly
    assert stack.session_keys() == [f"agent:main:discord:dm:{DM_CHANNEL}"]
    # the bot's reply came back over the gateway (as on Discord) and was not taken as input
    await d.user_says(DM_CHANNEL, ann(d), "second")
    await stack.wait_replies(DM_CHANNEL, 2)
    assert len(stack.llm.requests) == 2


async def test_channel_answers_only_when_addressed(stack):
    d = stack.discord
    await d.user_says(GENERAL, ann(d), "talking to Bob, not the bot")
    asked = await d.user_says(GENERAL, ann(d), **at_bot(d, "what is 2+2?"))
    [reply] = await stack.wait_replies(GENERAL, 1)
    assert reply["content"] == "echo: what is 2+2?"
    assert reply["message_reference"]["message_id"] == asked["id"]  # threaded to the asker
    # a reply to the bot's message counts as addressing it
    await d.user_says(GENERAL, bob(d), "and 3+3?", reply_to=d.messages[int(reply["id"])])
    replies = await stack.wait_replies(GENERAL, 2)
    assert replies[1]["content"] == "echo: and 3+3?"
    assert len(stack.llm.requests) == 2  # the unaddressed message never reached the model
    assert stack.session_keys() == [
        f"agent:main:discord:channel:{GENERAL}:{ANN_ID}",
        f"agent:main:discord:channel:{GENERAL}:{BOB_ID}",
    ]


async def test_thread_turns_share_one_session(stack):
    d = stack.discord
    await d.create_thread(GUILD, GENERAL, THREAD, "plans", owner_id=ANN_ID)
    await d.user_says(THREAD, ann(d), **at_bot(d, "my name is Ann"))
    await stack.wait_replies(THREAD, 1)
    await d.user_says(THREAD, bob(d), **at_bot(d, "who spoke first?"))
    replies = await stack.wait_replies(THREAD, 2)
    assert [r["content"] for r in replies] == ["echo: my name is Ann", "echo: who spoke first?"]
    assert stack.replies(GENERAL) == []  # answered in the thread, not its parent channel
    assert stack.session_keys() == [f"agent:main:discord:thread:{GENERAL}:{THREAD}"]
    # Bob's turn saw Ann's: one shared conversation
    history = [(m["role"], m["content"]) for m in stack.llm.requests[1]["messages"][1:]]
    assert ("user", "my name is Ann") in history and history[-1] == ("user", "who spoke first?")


async def test_slash_commands_are_handled_by_the_gateway(stack):
    d = stack.discord
    await d.user_says(DM_CHANNEL, ann(d), "first message")
    await stack.wait_replies(DM_CHANNEL, 1)
    await d.user_says(DM_CHANNEL, ann(d), "/new")
    replies = await stack.wait_replies(DM_CHANNEL, 2)
    assert replies[1]["content"] and len(stack.llm.requests) == 1  # commands skip the model
    await d.user_says(GENERAL, ann(d), **at_bot(d, "/help"))
    [help_reply] = await stack.wait_replies(GENERAL, 1)
    assert "/new" in help_reply["content"] and len(stack.llm.requests) == 1


async def test_redelivered_event_is_answered_once_even_after_restart(stack):
    d = stack.discord
    msg = await d.user_says(DM_CHANNEL, ann(d), "only once please")
    await stack.wait_replies(DM_CHANNEL, 1)
    await d.dispatch("MESSAGE_CREATE", msg)  # the same message delivered again
    await d.user_says(DM_CHANNEL, ann(d), "second")
    replies = await stack.wait_replies(DM_CHANNEL, 2)
    assert [r["content"] for r in replies] == ["echo: only once please", "echo: second"]

    await stack.restart()  # a new adapter and runner on the same database
    await d.dispatch("MESSAGE_CREATE", msg)
    await d.user_says(DM_CHANNEL, ann(d), "after restart")
    replies = await stack.wait_replies(DM_CHANNEL, 3)
    assert replies[2]["content"] == "echo: after restart"
    assert len(stack.llm.requests) == 3 and len(stack.replies(DM_CHANNEL)) == 3


async def test_events_replayed_on_resume_are_answered_once(stack):
    d = stack.discord
    await d.user_says(DM_CHANNEL, ann(d), "before the drop")
    await stack.wait_replies(DM_CHANNEL, 1)
    await d.drop_connection()
    await d.user_says(DM_CHANNEL, ann(d), "while away")  # buffered, replayed on RESUME
    replies = await stack.wait_replies(DM_CHANNEL, 2)
    assert replies[1]["content"] == "echo: while away"
    assert d.resumes and len(d.identifies) == 1
    assert len(stack.llm.requests) == 2


async def test_long_answer_is_split_at_2000(stack):
    d = stack.discord
    body = "\n".join(f"x = {i}  # step {i}." for i in range(400))
    stack.llm.push("Here is the code:\n```python\n" + body + "\n```\nDone.")
    asked = await d.user_says(GENERAL, ann(d), **at_bot(d, "write it"))
    await d.wait_for(lambda: any("Done." in r["content"] for r in stack.replies(GENERAL)), 8)
    replies = stack.replies(GENERAL)
    assert len(replies) >= 3 and all(len(r["content"]) <= 2000 for r in replies)
    assert all(r["content"].count("```") % 2 == 0 for r in replies)  # each part renders alone
    assert replies[0]["message_reference"]["message_id"] == asked["id"]
    assert all("message_reference" not in r for r in replies[1:])
    text = "".join(r["content"] for r in replies)
    assert all(f"x = {i}  # step {i}." in text for i in range(400))
