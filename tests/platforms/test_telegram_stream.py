"""A streamed Telegram reply: the real python-telegram-bot against the fake Bot API, which enforces
Telegram's per-chat flood limits on virtual time (tests/fakes/virtual_clock.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.source import SessionSource
from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.telegram_server import FakeTelegram, utf16_len
from tests.fakes.virtual_clock import VirtualClock, gaps

ANN = FakeTelegram.user(42, "Ann", "ann")
DM = SessionSource(platform="telegram", chat_id="42", chat_type="dm", user_id="42")
GROUP = SessionSource(platform="telegram", chat_id="-100", chat_type="group", user_id="42")


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
async def fake(clock):
    server = await FakeTelegram(clock=clock.now, pace_chats=True).start()
    server.private_chat(ANN)
    server.group_chat(-100, "Team")
    yield server
    await server.stop()


@pytest.fixture
async def adapter(fake, clock):
    a = TelegramAdapter({"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1, "watchdog_seconds": 5})
    a.clock = clock
    await a.start(lambda m: asyncio.sleep(0))
    yield a
    await a.stop()


async def write(stream, text: str, step: int = 7) -> None:
    """Feed `text` as a model would: growing, a piece at a time, with the loop turning between."""
    for end in range(step, len(text) + step, step):
        await stream.update(text[:end])
        await asyncio.sleep(0.002)


def paced_times(fake: FakeTelegram, chat_id: int) -> list[float]:
    return [
        c.at
        for c in fake.calls
        if c.method.lower() in FakeTelegram.PACED and str(c.params.get("chat_id")) == str(chat_id)
    ]


async def test_one_message_is_edited_in_place_within_the_flood_limit_and_ends_formatted(adapter, fake):
    text = "Here is **the answer** you asked for. " * 12
    stream = adapter.begin_reply(DM)
    await write(stream, text)
    await fake.wait_for(stream.first_shown.is_set)  # visible before the model is done
    assert len(fake.sent(42)) == 1
    ids = await stream.finish(text.strip())
    [message] = fake.sent(42)
    assert ids == [f"42:{message['message_id']}"]
    assert message["_parse_mode"] == "MarkdownV2" and message["text"].startswith("Here is the answer you")
    assert len(fake.calls_to("editMessageText")) >= 2 and len(fake.calls_to("sendMessage")) == 1
    assert fake.flood_refusals == 0 and min(gaps(paced_times(fake, 42))) >= 1.0


async def test_a_429_during_streaming_is_honoured_and_nothing_is_lost(adapter, fake, clock):
    fake.fail("editMessageText", "retry_after", retry_after=7)
    text = "One. Two. Three. Four. Five. Six. Seven. Eight. Nine. Ten. " * 3
    stream = adapter.begin_reply(DM)
    await write(stream, text)
    await stream.finish(text.strip())
    edits = fake.calls_to("editMessageText")
    refused_at = edits[0].at
    assert all(e.at - refused_at >= 7 for e in edits[1:])  # nothing sent until retry_after passed
    assert fake.sent(42)[0]["text"] == text.strip() and fake.flood_refusals == 0


async def test_groups_are_paced_at_one_call_per_three_seconds(adapter, fake):
    text = "A group answer, sentence by sentence. " * 10
    stream = adapter.begin_reply(GROUP, reply_to="-100:1")
    await write(stream, text)
    await stream.finish(text.strip())
    assert fake.flood_refusals == 0 and min(gaps(paced_times(fake, -100))) >= 3.0
    assert fake.sent(-100)[0]["text"] == text.strip()


async def test_past_4096_units_the_reply_continues_in_a_new_message(adapter, fake):
    text = "\n\n".join(f"Paragraph {i}: " + "😀 words " * 40 for i in range(20))  # emoji: 2 UTF-16 units
    assert utf16_len(text) > 4096
    stream = adapter.begin_reply(DM)
    await write(stream, text, step=300)
    await stream.finish(text)
    sent = fake.sent(42)
    assert len(sent) >= 2 and all(utf16_len(m["text"]) <= 4096 for m in sent)
    assert "".join("".join(m["text"] for m in sent).split()) == "".join(text.split())  # cuts drop only spaces


async def test_refused_markdown_in_the_final_edit_falls_back_to_plain(adapter, fake):
    stream = adapter.begin_reply(DM)
    await write(stream, "Some text. More text here.")
    await fake.wait_for(lambda: fake.sent(42) and fake.sent(42)[0]["text"] == "Some text. More text here.")
    fake.fail("editMessageText", "parse_entities")
    await stream.finish("Some text. More text *here*.")
    [message] = fake.sent(42)
    assert message["text"] == "Some text. More text *here*." and message["_parse_mode"] is None


async def test_a_quick_reply_is_one_formatted_send(adapter, fake):
    stream = adapter.begin_reply(DM)
    await stream.finish("Short **and** sweet.")
    [message] = fake.sent(42)
    assert message["_parse_mode"] == "MarkdownV2" and not fake.calls_to("editMessageText")


async def test_a_stopped_reply_keeps_what_was_shown_and_adds_the_note(adapter, fake):
    stream = adapter.begin_reply(DM)
    await write(stream, "Half of a thought. And then")
    await stream.fail("(stopped)")
    [message] = fake.sent(42)
    assert message["text"] == "Half of a thought. And then\n\n(stopped)"


async def test_a_tool_status_line_shows_under_the_text_and_goes_when_writing_resumes(adapter, fake):
    stream = adapter.begin_reply(DM)
    await stream.update("Let me look.")
    await asyncio.sleep(0.05)
    await stream.status("searching past conversations…")
    await fake.wait_for(lambda: "searching" in fake.sent(42)[0]["text"])
    await stream.status(None)
    await stream.finish("Found it.")
    assert fake.sent(42)[0]["text"] == "Found it."
