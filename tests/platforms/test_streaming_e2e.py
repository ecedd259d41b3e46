"""Streaming and slash commands end to end through the gateway: the real adapters against their
fakes, the real GatewayRunner on SQLite, and the fake model streaming its answer over SSE. Pacing
runs on a virtual clock shared by the adapter and the fake platform, so no test sleeps."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from platforms.discord.adapter import DiscordAdapter
from platforms.feishu.adapter import FeishuAdapter
from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform_stack import PlatformStack, running
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.virtual_clock import VirtualClock, gaps

ANN = FakeTelegram.user(42, "Ann", "ann")
ANSWER = (
    "Here is what I found. The deploy script lives in ops/deploy.sh and it reads the staging "
    "settings first. Run it with the **--dry-run** flag to see the plan. After that, run it for real "
    "and watch the logs for a minute. That is all there is to it."
)


class TelegramStack(PlatformStack):
    def __init__(self, tmp: Path, telegram: FakeTelegram, llm: FakeOpenAI, clock: VirtualClock) -> None:
        self.telegram, self.clock = telegram, clock
        section = {
            "token": telegram.token,
            "base_url": telegram.base_url,
            "poll_timeout": 1,
            "watchdog_seconds": 5,
            "allowed_users": ["*"],
        }
        super().__init__(tmp, llm, "telegram", section, TelegramAdapter)

    async def start(self) -> None:
        await super().start()
        self.adapter.clock = self.clock  # replies pace themselves on the test's virtual time

    def replies(self, chat_id: int) -> list[dict[str, Any]]:
        return self.telegram.sent(chat_id)


@pytest.fixture
async def tg(tmp_path):
    clock = VirtualClock()
    telegram = await FakeTelegram(clock=clock.now, pace_chats=True).start()
    async with running(telegram, lambda llm: TelegramStack(tmp_path, telegram, llm, clock)) as stack:
        yield stack


def assistant_messages(stack: PlatformStack) -> list[dict[str, Any]]:
    [session] = stack.sessions()
    assert stack.db is not None
    return [m for m in stack.db.get_messages_as_conversation(session["id"]) if m["role"] == "assistant"]


async def test_the_answer_appears_while_the_model_writes_and_is_edited_in_place(tg):
    fake = tg.telegram
    resume = asyncio.Event()
    tg.llm.push(Reply(text=ANSWER, pause_after=60, resume=resume))
    fake.push_message(fake.private_chat(ANN), ANN, "where is the deploy script?")
    await asyncio.wait_for(tg.llm.paused.wait(), 8)
    await fake.wait_for(lambda: fake.sent(42), 8)
    shown = fake.sent(42)[0]["text"]
    assert ANSWER.startswith(shown) and tg.llm.streams_done == 0  # visible before the model is done
    assert tg.llm.requests[0]["stream"] is True
    resume.set()
    await fake.wait_for(lambda: tg.llm.streams_done == 1, 8)
    await asyncio.wait_for(tg.runner.drain(), 8)
    [message] = fake.sent(42)  # one message, edited in place; the final edit brings the formatting
    assert message["text"] == ANSWER.replace("**", "") and message["_parse_mode"] == "MarkdownV2"
    assert fake.calls_to("editMessageText") and fake.flood_refusals == 0
    paced = [c.at for c in fake.calls if c.method.lower() in FakeTelegram.PACED]
    assert min(gaps(paced)) >= 1.0  # at most one call a second in this chat
    [stored] = assistant_messages(tg)  # only the final text is stored, once
    assert stored["content"] == ANSWER


async def test_a_429_while_streaming_is_honoured(tg):
    fake = tg.telegram
    fake.fail("editMessageText", "retry_after", retry_after=6)
    tg.llm.chunk_delay = 0.003
    tg.llm.push(ANSWER)
    fake.push_message(fake.private_chat(ANN), ANN, "where is it?")
    await fake.wait_for(lambda: tg.llm.streams_done == 1, 8)
    await asyncio.wait_for(tg.runner.drain(), 8)
    edits = fake.calls_to("editMessageText")
    assert len(edits) >= 2 and all(e.at - edits[0].at >= 6 for e in edits[1:])
    assert fake.sent(42)[0]["text"] == ANSWER.replace("**", "") and fake.flood_refusals == 0


async def test_with_streaming_off_the_reply_is_sent_once_at_the_end(tg):
    tg.runner.outbound.streaming["telegram"] = False  # what gateway.streaming: off gives the runner
    fake = tg.telegram
    tg.llm.push(ANSWER)
    fake.push_message(fake.private_chat(ANN), ANN, "where is it?")
    await fake.wait_for(lambda: fake.sent(42), 8)
    await asyncio.wait_for(tg.runner.drain(), 8)
    assert not fake.calls_to("editMessageText") and len(fake.calls_to("sendMessage")) == 1
    assert fake.sent(42)[0]["text"] == ANSWER.replace("**", "") and not tg.llm.requests[0].get("stream")


# -- Discord: slash commands through the gateway ------------------------------------------------
GUILD, GENERAL = 500, 600


class DiscordStack(PlatformStack):
    def __init__(self, tmp: Path, discord: FakeDiscord, llm: FakeOpenAI) -> None:
        self.discord = discord
        section = {
            "token": discord.token,
            "api_base": discord.api_base,
            "gateway_url": discord.gateway_url,
            "guild_ready_timeout": 0.05,
            "allowed_users": ["*"],
        }
        super().__init__(tmp, llm, "discord", section, DiscordAdapter)

    async def start(self) -> None:
        await super().start()
        await self.wait_ready()
        await self.discord.wait_for(lambda: None in self.discord.commands)

    def replies(self, channel_id: int) -> list[dict[str, Any]]:
        return [m for m in self.discord.sent if m["channel_id"] == str(channel_id)]

    async def answer(self, interaction_id: str) -> list[str]:
        await self.discord.wait_for(lambda: self.discord.answer_text(interaction_id), 8)
        assert self.runner is not None
        await asyncio.wait_for(self.runner.drain(), 8)
        return self.discord.answer_text(interaction_id)


@pytest.fixture
async def dc(tmp_path):
    discord = FakeDiscord(heartbeat_interval_ms=500)
    discord.add_guild(GUILD, "Team")
    discord.add_text_channel(GUILD, GENERAL, "general")
    await discord.start()
    async with running(discord, lambda llm: DiscordStack(tmp_path, discord, llm)) as stack:
        yield stack


def person(d: FakeDiscord, user_id: int, name: str) -> dict:
    return d.user(user_id, name)


async def test_slash_new_search_and_resume_autocomplete_respect_privacy(dc):
    d = dc.discord
    ann, bob = person(d, 42, "ann"), person(d, 43, "bob")
    registered = {c["name"] for c in d.commands[None]}
    assert {"new", "resume", "search", "undo", "title", "whoami", "help"} <= registered

    started = await d.slash(GENERAL, ann, "new", {"title": "trip plans"})
    assert "trip plans" in (await dc.answer(started))[0]
    await d.user_says(GENERAL, ann, content=f"<@{d.bot_id}> packing list for the fjord trip", mentions=[d.bot_user])
    await d.wait_for(lambda: dc.replies(GENERAL), 8)
    await asyncio.wait_for(dc.runner.drain(), 8)
    await d.slash(GENERAL, ann, "new")  # Ann moves on; "trip plans" is now resumable
    await asyncio.wait_for(dc.runner.drain(), 8)

    picked = await d.autocomplete(GENERAL, ann, "resume", "which", "tri")
    await d.wait_for(lambda: d.interactions[picked]["responses"], 8)
    choices = d.interactions[picked]["responses"][0]["data"]["choices"]
    assert [c["value"] for c in choices] == ["trip plans"]
    nosy = await d.autocomplete(GENERAL, bob, "resume", "which", "tri")
    await d.wait_for(lambda: d.interactions[nosy]["responses"], 8)
    assert d.interactions[nosy]["responses"][0]["data"]["choices"] == []  # not Bob's conversation

    found = await d.slash(GENERAL, ann, "search", {"query": "fjord"})
    assert "trip plans" in "\n".join(await dc.answer(found))
    assert d.interactions[found]["responses"][0]["data"]["flags"] & 64  # only Ann sees her results
    hidden = await d.slash(GENERAL, bob, "search", {"query": "fjord"})
    assert "trip plans" not in "\n".join(await dc.answer(hidden))

    resumed = await d.slash(GENERAL, ann, "resume", {"which": "trip plans"})
    assert "trip plans" in (await dc.answer(resumed))[0]
    typed = len(dc.replies(GENERAL))
    await d.user_says(GENERAL, ann, content="/new typed works too")
    await d.wait_for(lambda: len(dc.replies(GENERAL)) > typed, 8)
    assert "typed works too" in dc.replies(GENERAL)[-1]["content"]


async def test_a_stopped_streamed_answer_keeps_what_was_shown_and_stores_it_marked_stopped(tg):
    fake = tg.telegram
    resume = asyncio.Event()
    tg.llm.push(Reply(text=ANSWER, pause_after=60, resume=resume))
    chat = fake.private_chat(ANN)
    fake.push_message(chat, ANN, "where is the deploy script?")
    await asyncio.wait_for(tg.llm.paused.wait(), 8)
    await fake.wait_for(lambda: fake.sent(42), 8)
    fake.push_message(chat, ANN, "/stop")
    await fake.wait_for(lambda: any(m["text"].startswith("Stopped") for m in fake.sent(42)), 8)
    resume.set()
    await asyncio.wait_for(tg.runner.drain(), 8)
    partial = fake.sent(42)[0]["text"]
    assert partial and ANSWER.replace("**", "").startswith(partial.rstrip()) and partial != ANSWER.replace("**", "")
    # what the person saw is stored, marked stopped: the next request does not hold two questions in a row
    [session] = tg.sessions()
    assert tg.db is not None
    rows = [m for m in tg.db.get_messages(session["id"]) if m["role"] != "system"]
    assert [m["role"] for m in rows] == ["user", "assistant"]
    assert ANSWER.startswith(rows[1]["content"]) and len(rows[1]["content"]) >= 60
    assert rows[1]["finish_reason"] == "stopped"
    assert [m["text"] for m in fake.sent(42)].count(rows[1]["content"]) <= 1  # not sent again as a reply
    fake.push_message(chat, ANN, "go on")
    await fake.wait_for(lambda: len(tg.llm.requests) == 2, 8)
    await asyncio.wait_for(tg.runner.drain(), 8)
    roles = [m["role"] for m in tg.llm.requests[1]["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"]


async def test_a_model_error_mid_stream_keeps_what_was_shown_and_says_what_went_wrong(tg):
    fake = tg.telegram
    resume = asyncio.Event()
    tg.llm.push(Reply(text=ANSWER[:80], pause_after=60, resume=resume, stream_error="the model server overloaded"))
    fake.push_message(fake.private_chat(ANN), ANN, "where is the deploy script?")
    await asyncio.wait_for(tg.llm.paused.wait(), 8)
    await fake.wait_for(lambda: fake.sent(42), 8)
    resume.set()
    await fake.wait_for(lambda: "overloaded" in fake.sent(42)[-1]["text"], 8)
    await asyncio.wait_for(tg.runner.drain(), 8)
    [message] = fake.sent(42)  # the same message: the text so far, then the apology under it
    assert message["text"].startswith(ANSWER[:60].replace("**", "")) and "overloaded" in message["text"]
    assert assistant_messages(tg) == []  # no answer was finished: nothing is stored as one


# -- Discord and Feishu: the same streamed turn through the gateway -------------------------------
DM_CHANNEL = 700


def within_rate(times: list[float], limit: int, window: float) -> bool:
    return all(times[i + limit] - times[i] >= window for i in range(len(times) - limit))


class PacedDiscordStack(DiscordStack):
    def __init__(self, tmp: Path, discord: FakeDiscord, llm: FakeOpenAI, clock: VirtualClock) -> None:
        super().__init__(tmp, discord, llm)
        self.clock = clock

    async def start(self) -> None:
        await super().start()
        self.adapter.clock = self.clock


@pytest.fixture
async def dcs(tmp_path):
    clock = VirtualClock()
    discord = FakeDiscord(heartbeat_interval_ms=500, clock=clock.now, pace_channels=True)
    discord.add_dm(DM_CHANNEL, discord.user(42, "ann"))
    await discord.start()
    async with running(discord, lambda llm: PacedDiscordStack(tmp_path, discord, llm, clock)) as stack:
        yield stack


async def test_discord_the_answer_streams_into_one_message_within_the_channel_rate(dcs):
    d = dcs.discord
    resume = asyncio.Event()
    dcs.llm.push(Reply(text=ANSWER, pause_after=60, resume=resume))
    await d.user_says(DM_CHANNEL, d.user(42, "ann"), "where is the deploy script?")
    await asyncio.wait_for(dcs.llm.paused.wait(), 8)
    await d.wait_for(lambda: dcs.replies(DM_CHANNEL), 8)
    shown = d.messages[int(dcs.replies(DM_CHANNEL)[0]["id"])]["content"]
    assert ANSWER.startswith(shown) and dcs.llm.streams_done == 0  # visible before the model is done
    resume.set()
    await d.wait_for(lambda: dcs.llm.streams_done == 1, 8)
    await asyncio.wait_for(dcs.runner.drain(), 8)
    [message] = dcs.replies(DM_CHANNEL)  # one message, edited in place
    assert d.messages[int(message["id"])]["content"] == ANSWER and d.edits and d.rate_refusals == 0
    paced = [c.at for c in d.calls if c.path.startswith(f"/channels/{DM_CHANNEL}/messages")]
    assert within_rate(paced, 5, 5.0)
    [stored] = assistant_messages(dcs)
    assert stored["content"] == ANSWER


class FeishuStack(PlatformStack):
    def __init__(self, tmp: Path, feishu: FakeFeishu, llm: FakeOpenAI, clock: VirtualClock) -> None:
        self.feishu, self.clock = feishu, clock
        section = {
            "app_id": feishu.app_id,
            "app_secret": feishu.app_secret,
            "domain": feishu.base_url,
            "api_backoff_base": 0.01,
            "allowed_users": ["*"],
            "reaction": "",
        }
        super().__init__(tmp, llm, "feishu", section, FeishuAdapter)

    async def start(self) -> None:
        await super().start()
        self.adapter.clock = self.clock
        await self.wait_ready()


@pytest.fixture
async def fs(tmp_path):
    clock = VirtualClock()
    feishu = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="s", clock=clock.now)
    await feishu.start()
    async with running(feishu, lambda llm: FeishuStack(tmp_path, feishu, llm, clock)) as stack:
        yield stack


async def test_feishu_the_answer_streams_into_one_card_within_its_rate(fs):
    f = fs.feishu
    resume = asyncio.Event()
    fs.llm.push(Reply(text=ANSWER, pause_after=60, resume=resume))
    await f.push_event(f.message_event("where is the deploy script?", chat_id="oc_dm1", chat_type="p2p"))
    await asyncio.wait_for(fs.llm.paused.wait(), 8)
    await f.wait_for(lambda: f.sent, 8)
    assert ANSWER.startswith(f.card_text(f.sent[0])) and fs.llm.streams_done == 0  # visible before the end
    resume.set()
    await f.wait_for(lambda: fs.llm.streams_done == 1, 8)
    await asyncio.wait_for(fs.runner.drain(), 8)
    [message] = f.sent  # one card, its element updated in place; the final card holds the markdown
    [(_card_id, entity)] = f.cards.items()
    assert f.card_text(message) == ANSWER and len(entity["ops"]) >= 2 and f.rate_refusals == 0
    assert entity["card"]["config"]["streaming_mode"] is False
    [stored] = assistant_messages(fs)
    assert stored["content"] == ANSWER
