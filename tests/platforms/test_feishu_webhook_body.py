"""Feishu webhook bodies of every size up to the limit are read whole, and bigger ones get 413.

`request.content.read(n)` returns only what has arrived so far, so a large body used to be cut
short and refused as "body is not JSON" (a signed 800 KB event), and the 413 branch never fired
(a 5 MB body got 400). The adapter is served by the gateway's own HTTP server (OpsServer)."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest

from gateway.service.http import OpsServer
from platforms.feishu.adapter import FeishuAdapter
from platforms.feishu.webhook import MAX_BODY
from tests.fakes.feishu_server import FakeFeishu

TOKEN = "v-token-123"
KEY = "enc-key-456"


@pytest.fixture
async def rig():
    fake = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="secret-xyz")
    await fake.start()
    adapter = FeishuAdapter(
        {
            "app_id": fake.app_id,
            "app_secret": fake.app_secret,
            "domain": fake.base_url,
            "mode": "webhook",
            "verification_token": TOKEN,
            "encrypt_key": KEY,
        }
    )
    inbox: asyncio.Queue = asyncio.Queue()

    async def intake(msg) -> None:
        await inbox.put(msg)

    ops = OpsServer("127.0.0.1", 0, webhooks=adapter.webhook_handlers())
    await adapter.start(intake)
    await ops.start()
    async with aiohttp.ClientSession() as http:
        yield fake, ops, http, inbox
    await adapter.stop()
    await ops.stop()
    await fake.stop()


@pytest.mark.parametrize("text_kb", [134, 400, 600])
async def test_a_signed_large_event_under_the_limit_is_accepted(rig, text_kb):
    fake, ops, http, inbox = rig
    text = "x" * (text_kb * 1000)
    event = fake.message_event(text, chat_id="oc_1", chat_type="p2p", sender="ou_a", token=TOKEN, event_id="ev_big")
    body, headers = fake.webhook_request(event, KEY)
    assert len(body) < MAX_BODY
    async with http.post(ops.url + "/webhooks/feishu", data=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.text == text


async def test_a_body_over_the_limit_gets_413(rig):
    fake, ops, http, _ = rig
    body = b'{"encrypt": "' + b"A" * (5 * 1024 * 1024) + b'"}'
    async with http.post(ops.url + "/webhooks/feishu", data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 413


async def test_a_streamed_body_over_the_limit_without_length_gets_413(rig):
    fake, ops, http, _ = rig

    async def chunks():
        yield b'{"encrypt": "'
        for _ in range(40):
            yield b"A" * 65536
            await asyncio.sleep(0)
        yield b'"}'

    async with http.post(ops.url + "/webhooks/feishu", data=chunks()) as r:  # chunked: no Content-Length
        assert r.status == 413
