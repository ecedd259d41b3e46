"""`require_approval` in real turns (gateway/runtime/approvals.py): the turn asks in the chat and
waits; `/approve` and `/deny` are answered while it runs (ahead of the chat's queue), bare or with
the request's id; in a group only the person whose turn it is, or an admin, may answer; no answer
in time is a denial; the decision is journaled with the call and the turn goes on. On Telegram the
question carries inline buttons, on Discord message components (the real adapters against the
fakes), and a press answers it; once decided (or timed out) the question shows the outcome, its
buttons gone."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from platforms.discord.adapter import DiscordAdapter
from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.gateway_harness import Gateway
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import Reply, ToolCall
from tests.fakes.telegram_server import FakeTelegram
from tests.tools.mcp.conftest import stdio_server


def last_tool_result(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]


def script_count(gw: Gateway, label: str) -> None:
    """The model calls fake.count(label), then answers with the tool's result."""
    assert gw.fake is not None
    gw.fake.push(Reply(tool_calls=[ToolCall("mcp__fake__count", {"label": label})]))
    gw.fake.push(lambda body: "result: " + last_tool_result(body))


def calls(counter: Path) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


async def asked(gw: Gateway, n: int = 1) -> str:
    """The n-th approval question sent so far (waits for it)."""
    found = await wait_until(lambda: [t for t in gw.adapter.texts() if t.startswith("Run fake.count")][n - 1 :], 30)
    return found[0]


def gateway(tmp_path: Path, counter: Path, **section: Any) -> Gateway:
    server = stdio_server(counter, require_approval=["count"])
    platforms = {
        "telegram": {"token": "t", "allowed_users": ["100", "200"], "admins": ["300"], "require_mention": False}
    }
    return Gateway(tmp_path, platforms=platforms, mcp={"servers": {"fake": server}, **section})


async def test_a_typed_approve_lets_the_call_run_while_the_turn_waits(tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter) as gw:
        assert gw.fake is not None
        script_count(gw, "a")
        await gw.adapter.inject("count a")
        question = await asked(gw)
        assert question == 'Run fake.count {"label": "a"}? /approve 1 or /deny 1'
        assert calls(counter) == []  # nothing sent before the answer
        await gw.adapter.inject("/approve")  # bare: this person's oldest request here
        await gw.runner.drain()
        texts = gw.adapter.texts()
        assert 'Approved: fake.count {"label": "a"}' in texts and "result: counted a" in texts
        assert calls(counter) == ["a"]
        (row,) = gw.db.tool_calls_of(1)
        assert (row["approval"], row["state"], row["result"]) == ("approved", "done", "counted a")


async def test_deny_by_id_and_a_group_member_who_did_not_ask_cannot_answer(tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter) as gw:
        assert gw.fake is not None
        script_count(gw, "b")
        await gw.adapter.inject("count b", chat_id="-5", user_id="100", chat_type="group")
        await asked(gw)
        await gw.adapter.inject("/deny 1", chat_id="-5", user_id="200", chat_type="group")
        refused = await wait_until(lambda: [t for t in gw.adapter.texts() if t.startswith("Only the person")], 10)
        assert refused
        await gw.adapter.inject("/deny 1", chat_id="-5", user_id="100", chat_type="group")
        await gw.runner.drain()
        assert "result: error: fake.count was not run: denied by the person" in gw.adapter.texts()
        assert calls(counter) == []
        (row,) = gw.db.tool_calls_of(1)
        assert (row["approval"], row["outcome"]) == ("denied by the person", "denied")


async def test_an_admin_may_answer_and_no_answer_in_time_is_a_denial(tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter, approval_timeout_seconds=1) as gw:
        assert gw.fake is not None
        script_count(gw, "c")
        await gw.adapter.inject("count c")
        await asked(gw)
        await gw.runner.drain()  # nobody answers
        assert "result: error: fake.count was not run: not approved in time" in gw.adapter.texts()
        script_count(gw, "d")
        await gw.adapter.inject("count d", chat_id="-5", user_id="100", chat_type="group")
        await asked(gw, 2)
        await gw.adapter.inject("/approve 2", chat_id="-5", user_id="300", chat_type="group")  # an admin
        await gw.runner.drain()
        assert "result: counted d" in gw.adapter.texts() and calls(counter) == ["d"]


async def test_tools_lists_what_the_agent_may_use_with_approval_marked(tmp_path: Path) -> None:
    async with gateway(tmp_path, tmp_path / "calls.txt") as gw:
        (reply,) = await gw.say("/tools")
        lines = reply.splitlines()
        assert lines[:3] == ["Tools the assistant may use here:", "session_search (built in)", "memory (built in)"]
        assert "fake.count: Count this call: appends the label to the counter file. — asks you first" in lines
        assert "fake.echo: Say the text back." in lines


@asynccontextmanager
async def telegram_gateway(tmp_path: Path, counter: Path, **mcp: Any) -> AsyncIterator[tuple[Gateway, FakeTelegram]]:
    """A gateway on the real Telegram adapter against the fake; Ann (42) may talk, in any chat."""
    telegram = await FakeTelegram().start()
    section = {
        "token": telegram.token,
        "base_url": telegram.base_url,
        "poll_timeout": 1,
        "allowed_users": ["42"],
        "require_mention": False,
    }
    server = stdio_server(counter, require_approval=True)
    try:
        async with Gateway(
            tmp_path,
            adapter=TelegramAdapter(section),  # type: ignore[arg-type]
            platforms={"telegram": section},
            mcp={"servers": {"fake": server}, **mcp},
        ) as gw:
            assert gw.fake is not None
            yield gw, telegram
    finally:
        await telegram.stop()


async def telegram_question(telegram: FakeTelegram, chat_id: int) -> dict[str, Any]:
    """The approval question the bot sent to `chat_id` (the message with buttons), once it is there."""
    (held,) = await wait_until(lambda: [m for m in telegram.sent(chat_id) if m.get("reply_markup")], 30)
    return held


async def telegram_settled(telegram: FakeTelegram, question: dict[str, Any], text: str) -> None:
    """Waits until the question shows `text`, its buttons gone."""
    key = (question["chat"]["id"], question["message_id"])
    await wait_until(
        lambda: telegram.messages[key]["text"] == text and "reply_markup" not in telegram.messages[key], 30
    )


@pytest.mark.parametrize(
    "language_code, question_text, labels, approved",
    [
        (None, 'Run fake.count {"label": "t"}? /approve 1 or /deny 1', ("Approve", "Deny"), "Approved"),
        (
            "zh-hans",
            '要运行 fake.count {"label": "t"} 吗？发送 /approve 1 批准，或 /deny 1 拒绝。',
            ("批准", "拒绝"),
            "已批准",
        ),
    ],
)
async def test_telegram_inline_buttons_approve_through_the_real_adapter(
    tmp_path: Path, language_code: str | None, question_text: str, labels: tuple[str, str], approved: str
) -> None:
    counter = tmp_path / "calls.txt"
    async with telegram_gateway(tmp_path, counter) as (gw, telegram):
        script_count(gw, "t")
        ann = {**FakeTelegram.user(42, "Ann", "ann"), **({"language_code": language_code} if language_code else {})}
        chat = telegram.private_chat(ann)
        telegram.push_message(chat, ann, "count t")
        held = await telegram_question(telegram, 42)
        assert held["text"] == question_text  # in the language of the person's app
        buttons = held["reply_markup"]["inline_keyboard"][0]
        assert [(b["text"], b["callback_data"]) for b in buttons] == [
            (labels[0], "/approve 1"),
            (labels[1], "/deny 1"),
        ]
        assert calls(counter) == []
        telegram.press(held, ann, buttons[0]["callback_data"])
        await wait_until(lambda: any(m["text"] == "result: counted t" for m in telegram.sent(42)), 30)
        assert calls(counter) == ["t"]
        await wait_until(lambda: telegram.answered_presses == ["1"])  # the button stopped spinning
        sep = ": " if language_code is None else "："
        await telegram_settled(telegram, held, approved + sep + 'fake.count {"label": "t"}')


async def test_telegram_a_press_in_a_group_is_answered_under_the_question(tmp_path: Path) -> None:
    """The press's callback query id ("1") is no message number: the message numbered 1 in the
    group is Ann's "count g", which the answer must not go under."""
    async with telegram_gateway(tmp_path, tmp_path / "calls.txt") as (gw, telegram):
        script_count(gw, "g")
        ann = FakeTelegram.user(42, "Ann", "ann")
        group = telegram.group_chat(-500, "Team")
        asking = telegram.push_message(group, ann, "count g")
        held = await telegram_question(telegram, -500)
        telegram.press(held, ann, "/approve 1")
        text = 'Approved: fake.count {"label": "g"}'
        question_id = held["message_id"]
        (answer,) = await wait_until(
            lambda: [m for m in telegram.sent(-500) if m["text"] == text and m["message_id"] != question_id], 30
        )
        assert answer["reply_to_message"]["message_id"] == question_id != asking["message_id"]
        await telegram_settled(telegram, held, text)


async def test_telegram_a_question_nobody_answers_is_settled_as_not_approved_in_time(tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    async with telegram_gateway(tmp_path, counter, approval_timeout_seconds=1) as (gw, telegram):
        script_count(gw, "n")
        ann = FakeTelegram.user(42, "Ann", "ann")
        telegram.push_message(telegram.private_chat(ann), ann, "count n")
        held = await telegram_question(telegram, 42)
        await telegram_settled(telegram, held, 'Not approved in time: fake.count {"label": "n"}')
        assert calls(counter) == []


@asynccontextmanager
async def discord_gateway(tmp_path: Path, counter: Path, **mcp: Any) -> AsyncIterator[tuple[Gateway, FakeDiscord]]:
    """A gateway on the real Discord adapter against the fake (guild 500, channel 600); Ann (42) may talk."""
    discord = FakeDiscord(heartbeat_interval_ms=500)
    discord.add_guild(500, "Team")
    discord.add_text_channel(500, 600, "general")
    await discord.start()
    section = {
        "token": discord.token,
        "api_base": discord.api_base,
        "gateway_url": discord.gateway_url,
        "guild_ready_timeout": 0.05,
        "allowed_users": ["42"],
        "require_mention": False,
    }
    adapter = DiscordAdapter(section)
    try:
        async with Gateway(
            tmp_path,
            adapter=adapter,  # type: ignore[arg-type]
            platforms={"discord": section},
            mcp={"servers": {"fake": stdio_server(counter, require_approval=True)}, **mcp},
        ) as gw:
            assert gw.fake is not None
            await wait_until(lambda: adapter.health().ready, 30)
            yield gw, discord
    finally:
        await discord.stop()


async def discord_question(discord: FakeDiscord) -> dict[str, Any]:
    (held,) = await wait_until(lambda: [m for m in discord.sent if m["request"].get("components")], 30)
    return held


async def discord_settled(discord: FakeDiscord, question: dict[str, Any], text: str) -> None:
    """Waits until the question shows `text`, its buttons gone."""
    stored = discord.messages[int(question["id"])]
    await wait_until(lambda: stored["content"] == text and stored["components"] == [], 30)


async def test_discord_buttons_approve_through_the_real_adapter(tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    async with discord_gateway(tmp_path, counter) as (gw, discord):
        script_count(gw, "d")
        ann = discord.user(42, "ann")
        await discord.user_says(600, ann, "count d")
        held = await discord_question(discord)
        buttons = held["request"]["components"][0]["components"]
        assert [(b["label"], b["custom_id"]) for b in buttons] == [("Approve", "/approve 1"), ("Deny", "/deny 1")]
        bob_press = await discord.press(held, discord.user(43, "bob"), "/approve 1")  # not allowed to talk
        assert calls(counter) == []
        await discord.press(held, ann, "/approve 1")
        await wait_until(lambda: any(m["content"] == "result: counted d" for m in discord.sent), 30)
        assert calls(counter) == ["d"]
        assert discord.interactions[bob_press]["responses"]  # acknowledged, nothing more
        await discord_settled(discord, held, 'Approved: fake.count {"label": "d"}')


async def test_discord_a_question_nobody_answers_is_settled_as_not_approved_in_time(tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    async with discord_gateway(tmp_path, counter, approval_timeout_seconds=1) as (gw, discord):
        script_count(gw, "n")
        await discord.user_says(600, discord.user(42, "ann"), "count n")
        held = await discord_question(discord)
        await discord_settled(discord, held, 'Not approved in time: fake.count {"label": "n"}')
        assert calls(counter) == []
