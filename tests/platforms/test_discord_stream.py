"""A streamed Discord reply: real discord.py against the fake Discord, which enforces the
5-per-5-seconds message rate per channel on virtual time (tests/fakes/virtual_clock.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.source import SessionSource
from platforms.discord.adapter import DiscordAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.virtual_clock import VirtualClock

GUILD, GENERAL = 500, 600
CHANNEL = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id="11")


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
async def fake(clock):
    server = FakeDiscord(heartbeat_interval_ms=200, clock=clock.now, pace_channels=True)
    server.add_guild(GUILD, "Test Guild")
    server.add_text_channel(GUILD, GENERAL, "general")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def adapter(fake, clock):
    a = DiscordAdapter(
        {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url, "guild_ready_timeout": 0.05}
    )
    a.clock = clock

    async def ignore(_message) -> None:
        pass

    await a.start(ignore)
    await fake.wait_for(lambda: a.health().ready)
    yield a
    await a.stop()


async def write(stream, text: str, step: int = 9) -> None:
    for end in range(step, len(text) + step, step):
        await stream.update(text[:end])
        await asyncio.sleep(0.002)


def message_calls(fake: FakeDiscord) -> list[float]:
    return [c.at for c in fake.calls if c.path.startswith(f"/channels/{GENERAL}/messages")]


def within_rate(times: list[float], limit: int = 5, window: float = 5.0) -> bool:
    return all(times[i + limit] - times[i] >= window for i in range(len(times) - limit))


async def test_one_message_is_edited_in_place_at_most_five_times_per_five_seconds(adapter, fake):
    text = "Streaming into **Discord**, sentence by sentence. " * 15
    stream = adapter.begin_reply(CHANNEL, reply_to=None)
    await write(stream, text)
    await fake.wait_for(stream.first_shown.is_set)
    assert len(fake.sent) == 1
    await stream.finish(text.strip())
    assert len(fake.sent) == 1 and len(fake.edits) >= 2
    assert fake.messages[int(fake.sent[0]["id"])]["content"] == text.strip()
    assert fake.rate_refusals == 0 and within_rate(message_calls(fake))


async def test_past_2000_characters_the_reply_continues_in_a_new_message(adapter, fake):
    text = "\n\n".join(f"Part {i}. " + "lorem ipsum " * 30 for i in range(12))
    stream = adapter.begin_reply(CHANNEL)
    await write(stream, text, step=250)
    await stream.finish(text)
    contents = [fake.messages[int(m["id"])]["content"] for m in fake.sent]
    assert len(contents) >= 2 and all(len(c) <= 2000 for c in contents)
    assert "".join("".join(contents).split()) == "".join(text.split())


async def test_a_429_on_an_edit_is_waited_out_and_the_final_text_arrives(adapter, fake):
    fake.fail_next("PATCH", rf"/channels/{GENERAL}/messages/\d+", 429, retry_after=0.05)
    stream = adapter.begin_reply(CHANNEL)
    await write(stream, "First things first. Then the second thing, and the third.")
    await stream.finish("First things first. Then the second thing, and the third. Done.")
    assert any(c.status == 429 for c in fake.calls)
    assert fake.messages[int(fake.sent[0]["id"])]["content"].endswith("Done.")


async def test_a_429_on_a_live_edit_is_folded_into_the_next_not_slept_through(adapter, fake, clock):
    fake.fail_next("PATCH", rf"/channels/{GENERAL}/messages/\d+", 429, retry_after=20)
    text = "First things first. Then the second thing, and the third, and a fourth. " * 3
    stream = adapter.begin_reply(CHANNEL)
    writing = asyncio.create_task(write(stream, text))
    await fake.wait_for(lambda: any(c.status == 429 for c in fake.calls))  # refused mid-stream
    await writing
    await asyncio.wait_for(stream.finish(text.strip() + " Done."), 5)  # 20 s slept in discord.py would time out
    assert fake.messages[int(fake.sent[0]["id"])]["content"] == text.strip() + " Done."
    assert max(clock.slept) >= 19.9  # the reply's pacer held for the retry_after (on the adapter's clock)
    patches = [c for c in fake.calls if c.method == "PATCH"]
    refused = next(i for i, c in enumerate(patches) if c.status == 429)
    assert patches[refused + 1].at - patches[refused].at >= 20  # the next edit came after the hold, not a resend
