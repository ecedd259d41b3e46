"""Feishu adapter over the long connection, end to end: the SDK's real websocket client (in its
own thread and loop) against the fake platform's endpoint and protobuf-framed websocket."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from platforms.feishu.adapter import FeishuAdapter
from tests.fakes.feishu_server import FakeFeishu


@pytest.fixture
async def fake():
    server = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="secret-xyz", ping_interval=0.1)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def make_adapter(fake):
    started: list[FeishuAdapter] = []

    async def make(**config) -> tuple[FeishuAdapter, asyncio.Queue]:
        cfg = {
            "app_id": fake.app_id,
            "app_secret": fake.app_secret,
            "domain": fake.base_url,
            "backoff_base": 0.05,
            "backoff_cap": 0.2,
            "watchdog_seconds": 30,
        }
        cfg.update(config)
        adapter = FeishuAdapter(cfg)
        inbox: asyncio.Queue = asyncio.Queue()
        await adapter.start(inbox.put)
        started.append(adapter)
        return adapter, inbox

    yield make
    for adapter in started:
        await asyncio.wait_for(adapter.stop(), 10)


async def test_dm_over_long_connection_is_delivered_and_acked(fake, make_adapter):
    adapter, inbox = await make_adapter()
    assert adapter.health().ready  # start() returned after the connection came up
    assert fake.calls_to("endpoint") and fake.ws_connects == 1
    event = fake.message_event("hello over ws", event_id="ev_ws1")
    frame_id = await fake.push_event(event)
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.text == "hello over ws" and msg.source.chat_type == "dm"
    assert msg.source.user_id == "ou_alice" and msg.source.user_id_alt == "on_alice"
    assert msg.message_id == event["event"]["message"]["message_id"]
    assert msg.raw["event_id"] == "ev_ws1"
    await fake.wait_for(lambda: frame_id in fake.acks)
    assert fake.acks[frame_id]["code"] == 200
    # replies go out through the HTTP API while the connection runs in its own thread
    await adapter.send(msg.source, "hi", reply_to=msg.message_id)
    assert fake.sent[-1]["reply_to"] == msg.message_id


async def test_group_thread_and_mention_over_long_connection(fake, make_adapter):
    adapter, inbox = await make_adapter()
    await fake.push_event(
        fake.message_event(
            "@_user_1 look",
            chat_id="oc_g",
            chat_type="group",
            thread_id="omt_9",
            mentions=[("@_user_1", fake.bot_open_id, "chinwag")],
        )
    )
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.mentioned and msg.text == "look"
    assert msg.source.chat_type == "group" and msg.source.thread_id == "omt_9"


async def test_malformed_frames_are_skipped(fake, make_adapter):
    adapter, inbox = await make_adapter()
    bad_json = await fake.push_event(b"{not json")
    await fake.wait_for(lambda: bad_json in fake.acks)
    assert fake.acks[bad_json]["code"] == 500  # the SDK reports the failure; nothing delivered
    broken = fake.message_event("x")
    broken["event"]["message"].pop("chat_id")
    await fake.push_event(broken)
    await fake.push_event(fake.message_event("after the junk"))
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.text == "after the junk" and inbox.empty()
    assert adapter.health().ready


async def test_reconnects_after_dropped_connection(fake, make_adapter):
    adapter, inbox = await make_adapter()
    before = fake.ws_connects
    await fake.drop_connections()
    await fake.wait_for(lambda: fake.ws_connects > before and fake.live_conns, timeout=10)
    await fake.wait_for(lambda: adapter.health().ready, timeout=5)
    await fake.push_event(fake.message_event("after reconnect"))
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.text == "after reconnect"


async def test_connect_retries_with_backoff_when_endpoint_fails(fake, make_adapter):
    fake.fail_next("endpoint", status=500, times=2)
    adapter, inbox = await make_adapter()
    await fake.wait_for(lambda: adapter.health().ready, timeout=10)
    assert len(fake.calls_to("endpoint")) == 3
    await fake.push_event(fake.message_event("finally"))
    assert (await asyncio.wait_for(inbox.get(), 5)).text == "finally"


async def test_watchdog_flips_readiness_and_forces_reconnect_on_silent_link(fake, make_adapter):
    adapter, inbox = await make_adapter(watchdog_seconds=0.6)
    await fake.wait_for(lambda: fake.conns[0].pings >= 2)  # pongs keep it alive meanwhile
    assert adapter.health().ready
    before = fake.ws_connects
    fake.mute_connections()  # the socket stays open but nothing comes back: a dead link
    seen_not_ready = await fake.wait_for(lambda: not adapter.health().ready, timeout=5)
    assert seen_not_ready
    await fake.wait_for(lambda: fake.ws_connects > before and adapter.health().ready, timeout=10)
    await fake.push_event(fake.message_event("alive again"))
    assert (await asyncio.wait_for(inbox.get(), 5)).text == "alive again"


async def test_stop_does_not_hang_and_closes_connection(fake, make_adapter):
    adapter, _inbox = await make_adapter()
    await asyncio.wait_for(adapter.stop(), 10)  # a hang fails here
    assert not adapter.health().ready
    await fake.wait_for(lambda: not fake.live_conns)
    # a second adapter in the same process can run after the first stopped
    again, inbox = await make_adapter()
    await fake.push_event(fake.message_event("second life"))
    assert (await asyncio.wait_for(inbox.get(), 5)).text == "second life"


async def test_bad_credentials_keep_retrying_and_report_not_ready(fake, make_adapter):
    cfg = {
        "app_id": fake.app_id,
        "app_secret": "wrong",
        "domain": fake.base_url,
        "backoff_base": 0.05,
        "backoff_cap": 0.1,
    }
    adapter = FeishuAdapter(cfg)
    await adapter.start(asyncio.Queue().put, connect_wait=0.3)
    try:
        await fake.wait_for(lambda: len(fake.calls_to("endpoint")) >= 3)
        assert not adapter.health().ready
        assert "wrong" not in adapter.health().detail
    finally:
        await asyncio.wait_for(adapter.stop(), 10)


async def test_event_split_over_several_frames_is_reassembled(fake, make_adapter):
    adapter, inbox = await make_adapter()
    text = "long " * 2000
    frame_id = await fake.push_event(fake.message_event(text), parts=3)
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.text == text.strip()
    await fake.wait_for(lambda: frame_id in fake.acks)


async def test_secrets_never_reach_the_logs(fake, make_adapter, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    adapter, inbox = await make_adapter()
    await fake.push_event(fake.message_event("hi"))
    msg = await asyncio.wait_for(inbox.get(), 5)
    fake.expire_tokens()
    fake.fail_next("reply", status=500)
    await adapter.send(msg.source, "answer", reply_to=msg.message_id)
    before = fake.ws_connects
    await fake.drop_connections()
    await fake.wait_for(lambda: fake.ws_connects > before and adapter.health().ready, timeout=10)
    issued = list(fake.calls_to("token"))
    assert len(issued) >= 2
    # (aiohttp.access is the fake platform's own server log, not the adapter's)
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")
    assert fake.app_secret not in logged
    assert not any(t in logged for t in fake.valid_tokens)
    assert fake.ticket and fake.ticket not in logged


async def test_files_come_through_the_message_resource_api(fake, make_adapter):
    _, inbox = await make_adapter()
    fake.resources["img_photo"] = b"\x89PNG photo bytes"
    event = fake.message_event(msg_type="image", content={"image_key": "img_photo"})
    await fake.push_event(event)
    msg = await asyncio.wait_for(inbox.get(), 5)
    [image] = msg.attachments
    assert image.kind == "image" and image.open is not None
    assert b"".join([chunk async for chunk in image.open()]) == b"\x89PNG photo bytes"
    mid = event["event"]["message"]["message_id"]
    assert fake.resource_requests == [(mid, "img_photo", "image")]  # with a tenant token (else 401)
