"""Feishu adapter in webhook mode, end to end: the real adapter (lark-oapi client) against the fake
open platform, with events POSTed to its webhook handler the way Feishu sends them."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp
import pytest

from platforms.feishu import FeishuAdapter
from tests.fakes.feishu_server import FakeFeishu, HandlerHost

TOKEN = "v-token-123"
KEY = "enc-key-456"


@pytest.fixture
async def fake():
    server = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="secret-xyz")
    await server.start()
    yield server
    await server.stop()


class Rig:
    def __init__(self, fake: FakeFeishu, adapter: FeishuAdapter, host: HandlerHost) -> None:
        self.fake, self.adapter, self.host = fake, adapter, host
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.session = aiohttp.ClientSession()

    async def post(self, payload: dict, encrypt_key: str = KEY, bad_signature: bool = False,
                   raw: bytes | None = None) -> tuple[int, dict]:
        body, headers = self.fake.webhook_request(payload, encrypt_key, bad_signature)
        if raw is not None:
            body = raw
        async with self.session.post(self.host.url + "/webhooks/feishu", data=body, headers=headers) as r:
            return r.status, await r.json()

    async def next_message(self, timeout: float = 5.0):
        return await asyncio.wait_for(self.inbox.get(), timeout)


@pytest.fixture
async def make_rig(fake):
    rigs: list[Rig] = []

    async def make(**config) -> Rig:
        cfg = {"app_id": fake.app_id, "app_secret": fake.app_secret, "domain": fake.base_url,
               "mode": "webhook", "verification_token": TOKEN, "encrypt_key": KEY,
               "api_backoff_base": 0.01, "api_backoff_cap": 0.05}
        cfg.update(config)
        adapter = FeishuAdapter(cfg)
        host = HandlerHost(adapter.webhook_handlers())
        rig = Rig(fake, adapter, host)
        await adapter.start(rig.inbox.put)
        await host.start()
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        await rig.adapter.stop()
        await rig.host.stop()
        await rig.session.close()


async def test_dm_arrives_as_inbound_message_and_reply_goes_through_reply_api(fake, make_rig):
    rig = await make_rig()
    event = fake.message_event("hi there", chat_id="oc_dm1", chat_type="p2p", sender="ou_alice",
                               union_id="on_alice", token=TOKEN, event_id="ev_1")
    status, body = await rig.post(event)
    assert status == 200 and body == {"msg": "success"}
    msg = await rig.next_message()
    assert msg.text == "hi there"
    assert msg.source.platform.value == "feishu"
    assert msg.source.chat_type == "dm"
    assert msg.source.chat_id == "oc_dm1"
    assert msg.source.user_id == "ou_alice"
    assert msg.source.user_id_alt == "on_alice"
    assert msg.source.thread_id is None
    assert msg.message_id == event["event"]["message"]["message_id"]
    assert msg.raw["event_id"] == "ev_1"
    assert msg.mentioned is False

    ids = await rig.adapter.send(msg.source, "**hello** back", reply_to=msg.message_id)
    assert len(ids) == 1
    sent = fake.sent[-1]
    assert sent["kind"] == "reply" and sent["reply_to"] == msg.message_id
    assert sent["msg_type"] == "post" and sent["text"] == "**hello** back"
    assert sent["reply_in_thread"] is False
    assert sent["message_id"] == ids[0]
    # the bot's open_id came from /bot/v3/info at start
    assert rig.adapter.bot_open_id == fake.bot_open_id
    assert rig.adapter.health().ready
