"""`require_approval` on Feishu through the real adapter (lark-oapi) against the fake open platform:
the question is a card with Approve / Deny buttons; a press arrives as the `card.action.trigger`
callback Feishu sends (over the long connection, or signed to the webhook, checked like any event)
and answers the request exactly as a typed /approve would, the group rule included; once decided,
or when no answer comes in time, the card is patched to say so and its buttons are gone."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import pytest

from platforms.feishu.adapter import FeishuAdapter
from tests.fakes.feishu_server import FakeFeishu, HandlerHost
from tests.fakes.gateway_harness import Gateway
from tests.fakes.loopback import wait_until
from tests.tools.mcp.conftest import stdio_server
from tests.tools.mcp.test_approval import calls, script_count

ALICE = {"operator": "ou_alice", "union_id": "on_alice"}
BOB = {"operator": "ou_bob", "union_id": "on_bob"}


@pytest.fixture
async def feishu() -> AsyncIterator[FakeFeishu]:
    fake = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="secret-approval")
    await fake.start()
    yield fake
    await fake.stop()


def section(feishu: FakeFeishu, **extra: Any) -> dict[str, Any]:
    return {
        "app_id": feishu.app_id,
        "app_secret": feishu.app_secret,
        "domain": feishu.base_url,
        "backoff_base": 0.05,
        "api_backoff_base": 0.01,
        "api_backoff_cap": 0.05,
        "allowed_users": ["*"],
        "require_mention": False,
        "reaction": "",
        **extra,
    }


def gateway(tmp_path: Path, counter: Path, feishu_section: dict[str, Any], **mcp: Any) -> Gateway:
    return Gateway(
        tmp_path,
        adapter=FeishuAdapter(feishu_section),  # type: ignore[arg-type]
        platforms={"feishu": feishu_section},
        mcp={"servers": {"fake": stdio_server(counter, require_approval=True)}, **mcp},
    )


async def question(feishu: FakeFeishu) -> dict[str, Any]:
    (card,) = await wait_until(lambda: [m for m in feishu.sent if m["msg_type"] == "interactive"], 30)
    return card


def texts(feishu: FakeFeishu) -> list[str]:
    return [m["text"] for m in feishu.sent]


async def test_a_press_on_the_card_approves_the_group_rule_holds_and_the_card_says_so(
    tmp_path: Path, feishu: FakeFeishu
) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter, section(feishu)) as gw:
        assert gw.fake is not None
        script_count(gw, "f")
        await feishu.push_event(feishu.message_event("count f", chat_id="oc_g", chat_type="group"))
        card = await question(feishu)
        assert card["chat_id"] == "oc_g" and card["text"] == 'Run fake.count {"label": "f"}? /approve 1 or /deny 1'
        buttons = feishu.buttons(card)
        assert {label: value["command"] for label, value in buttons.items()} == {
            "Approve": "/approve 1",
            "Deny": "/deny 1",
        }
        await feishu.press(card, "Approve", **BOB)  # a member of the group who did not ask
        await wait_until(lambda: any(t.startswith("Only the person who asked") for t in texts(feishu)), 30)
        assert calls(counter) == [] and feishu.buttons(card)  # still waiting, still pressable
        pressed = await feishu.press(card, "Approve", **ALICE)
        await wait_until(lambda: "result: counted f" in texts(feishu), 30)
        assert calls(counter) == ["f"]
        (answer,) = [m for m in feishu.sent if m["text"].startswith("Approved:") and m["msg_type"] != "interactive"]
        assert answer["reply_to"] == card["message_id"]  # the answer to a press goes under the card
        await wait_until(lambda: card["text"] == 'Approved: fake.count {"label": "f"}', 30)
        assert feishu.buttons(card) == {}  # settled: nothing left to press
        ack = feishu.acks[pressed]  # the callback answered once the press was committed: the card as it is
        assert ack["code"] == 200 and json.loads(base64.b64decode(ack["data"])) == {}
        await gw.runner.drain()
        (row,) = gw.db.tool_calls_of(1)
        assert (row["approval"], row["state"]) == ("approved", "done")


async def test_no_press_in_time_is_a_denial_and_a_late_press_finds_nothing(tmp_path: Path, feishu: FakeFeishu) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter, section(feishu), approval_timeout_seconds=1) as gw:
        assert gw.fake is not None
        script_count(gw, "late")
        await feishu.push_event(feishu.message_event("count late"))
        card = await question(feishu)
        late = feishu.card_action_event(card, "Approve", **ALICE)  # pressed on a client still showing it
        await wait_until(lambda: "result: error: fake.count was not run: not approved in time" in texts(feishu), 30)
        assert card["text"] == 'Not approved in time: fake.count {"label": "late"}' and feishu.buttons(card) == {}
        await feishu.push_event(late)
        await wait_until(lambda: "There is no request 1 waiting here." in texts(feishu), 30)
        assert calls(counter) == []


async def test_the_card_speaks_the_tenants_language(tmp_path: Path, feishu: FakeFeishu) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter, section(feishu, language="zh"), approval_timeout_seconds=1) as gw:
        assert gw.fake is not None
        script_count(gw, "zh")
        await feishu.push_event(feishu.message_event("count zh"))
        card = await question(feishu)
        assert card["text"] == '要运行 fake.count {"label": "zh"} 吗？发送 /approve 1 批准，或 /deny 1 拒绝。'
        assert list(feishu.buttons(card)) == ["批准", "拒绝"]
        await wait_until(lambda: card["text"] == '未在时限内批准：fake.count {"label": "zh"}', 30)


async def test_a_slow_card_update_does_not_hold_up_the_call_it_decided(tmp_path: Path, feishu: FakeFeishu) -> None:
    counter = tmp_path / "calls.txt"
    async with gateway(tmp_path, counter, section(feishu)) as gw:
        assert gw.fake is not None
        script_count(gw, "slow")
        await feishu.push_event(feishu.message_event("count slow"))
        card = await question(feishu)
        feishu.hold_patches = asyncio.Event()  # Feishu is slow to update cards
        await feishu.press(card, "Deny", **ALICE)
        await wait_until(lambda: "result: error: fake.count was not run: denied by the person" in texts(feishu), 30)
        assert feishu.buttons(card)  # the turn went on while its card waits to be updated
        feishu.hold_patches.set()
        await wait_until(lambda: card["text"] == 'Denied: fake.count {"label": "slow"}', 30)
        assert calls(counter) == []


async def test_a_signed_callback_on_the_webhook_approves_and_a_forged_one_is_refused(
    tmp_path: Path, feishu: FakeFeishu
) -> None:
    counter = tmp_path / "calls.txt"
    keys = {"verification_token": "tok-approval", "encrypt_key": "key-approval"}
    feishu_section = section(feishu, mode="webhook", **keys)
    async with gateway(tmp_path, counter, feishu_section) as gw, aiohttp.ClientSession() as http:
        assert gw.fake is not None
        host = HandlerHost(gw.adapter.webhook_handlers())  # type: ignore[attr-defined]
        await host.start()
        try:

            async def post(payload: dict[str, Any], **how: Any) -> tuple[int, Any]:
                body, headers = feishu.webhook_request(payload, keys["encrypt_key"], **how)
                async with http.post(host.url + "/webhooks/feishu", data=body, headers=headers) as r:
                    return r.status, await r.json()

            script_count(gw, "w")
            event = feishu.message_event("count w", token=keys["verification_token"])
            assert (await post(event))[0] == 200
            card = await question(feishu)
            forged = feishu.card_action_event(card, "Approve", token=keys["verification_token"], **ALICE)
            assert (await post(forged, bad_signature=True))[0] == 401
            wrong_token = feishu.card_action_event(card, "Approve", token="guessed", **ALICE)
            assert (await post(wrong_token))[0] == 403
            assert calls(counter) == []
            press = feishu.card_action_event(card, "Approve", token=keys["verification_token"], **ALICE)
            assert await post(press) == (200, {})  # a callback's answer: no toast, the card as it is
            await wait_until(lambda: "result: counted w" in texts(feishu), 30)
            assert calls(counter) == ["w"]
            await wait_until(lambda: card["text"].startswith("Approved: fake.count"), 30)
        finally:
            await host.stop()
