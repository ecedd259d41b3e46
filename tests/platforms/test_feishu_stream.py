"""A streamed Feishu reply: real lark-oapi against the fake open platform. CardKit card entities
where the app has the scope, interactive card patches where it has not, plain text where cards are
refused; the fake enforces Feishu's per-card and per-message update rates on virtual time."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.source import SessionSource
from platforms.feishu.adapter import FeishuAdapter
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.virtual_clock import VirtualClock

DM = SessionSource(platform="feishu", chat_id="oc_dm1", chat_type="dm", user_id="ou_ann")


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
async def fake(clock):
    server = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="s", clock=clock.now)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def adapter(fake, clock):
    a = FeishuAdapter(
        {"app_id": fake.app_id, "app_secret": fake.app_secret, "domain": fake.base_url, "api_backoff_base": 0.01}
    )
    a.clock = clock
    return a


async def write(stream, text: str, step: int = 9) -> None:
    for end in range(step, len(text) + step, step):
        await stream.update(text[:end])
        await asyncio.sleep(0.002)


TEXT = "## Plan\n\n1. **Read** the logs.\n2. Fix the `config`.\n\nThat should do it, step by step. " * 4


async def test_cardkit_streams_one_card_with_increasing_sequence_and_ends_with_the_markdown(adapter, fake):
    stream = adapter.begin_reply(DM)
    await write(stream, TEXT)
    await fake.wait_for(stream.first_shown.is_set)  # visible before the reply is finished
    await stream.finish(TEXT.strip())
    [message] = fake.sent
    assert message["msg_type"] == "interactive" and message["content"]["type"] == "card"
    [(card_id, entity)] = fake.cards.items()
    sequences = [seq for _at, seq in entity["ops"]]
    assert len(fake.calls_to("card_content")) >= 2 and sequences == sorted(set(sequences))
    assert fake.card_text(message) == TEXT.strip()
    assert entity["card"]["config"]["streaming_mode"] is False  # the final update ends streaming
    assert fake.rate_refusals == 0


async def test_without_the_cardkit_scope_the_card_message_is_patched(adapter, fake):
    fake.cardkit_denied = True
    stream = adapter.begin_reply(DM)
    await write(stream, TEXT)
    await stream.finish(TEXT.strip())
    [message] = fake.sent
    assert message["msg_type"] == "interactive" and len(fake.calls_to("patch")) >= 2
    assert fake.card_text(message) == TEXT.strip() and fake.rate_refusals == 0
    assert adapter.card_mode == "patch"  # remembered: the next reply does not ask again
    fake.calls.clear()
    second = adapter.begin_reply(DM)
    await second.finish("again")
    assert not fake.calls_to("card_create")


async def test_when_cards_are_refused_the_reply_is_one_plain_post_at_the_end(adapter, fake):
    fake.reject_cards = True
    fake.cardkit_denied = True
    stream = adapter.begin_reply(DM)
    await write(stream, TEXT)
    await stream.finish(TEXT.strip())
    [message] = fake.sent
    assert message["msg_type"] == "post" and message["text"] == TEXT.strip()
    assert adapter.card_mode == "text"


async def test_a_long_reply_continues_in_a_second_card(adapter, fake):
    text = "\n\n".join(f"Section {i}. " + "more words " * 40 for i in range(12))
    stream = adapter.begin_reply(DM)
    await write(stream, text, step=400)
    await stream.finish(text)
    assert len(fake.sent) >= 2
    shown = "".join(fake.card_text(m) for m in fake.sent)
    assert "".join(shown.split()) == "".join(text.split())


async def test_a_quick_answer_is_an_ordinary_post(adapter, fake):
    stream = adapter.begin_reply(DM)
    await stream.finish("Short **and** sweet.")
    [message] = fake.sent
    assert message["msg_type"] == "post" and message["text"] == "Short **and** sweet." and not fake.cards


async def test_a_429_on_a_live_card_update_holds_the_reply_instead_of_sleeping_in_the_api(adapter, fake, clock):
    fake.fail_next(
        "card_content", status=429, code=99991400, msg="request trigger frequency limit",
        headers={"x-ogw-ratelimit-reset": "20"},
    )  # fmt: skip
    stream = adapter.begin_reply(DM)
    writing = asyncio.create_task(write(stream, TEXT))
    await fake.wait_for(lambda: fake.failures[-1].times == 0)  # refused mid-stream
    await writing
    await asyncio.wait_for(stream.finish(TEXT.strip()), 5)  # 20 s slept inside the API call would time out
    [message] = fake.sent
    assert fake.card_text(message) == TEXT.strip()
    [(_card_id, entity)] = fake.cards.items()
    assert max(clock.slept) >= 19.9  # the reply's pacer held for the reset (on the adapter's clock)
    assert len(fake.calls_to("card_content")) + len(fake.calls_to("card_update")) == len(entity["ops"]) + 1
