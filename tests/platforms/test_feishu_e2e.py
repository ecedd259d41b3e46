"""Feishu end to end through the gateway: the real adapter (lark-oapi long connection and HTTP
client against the fake open platform), the real GatewayRunner on a real SQLite file, and the fake
OpenAI-compatible model."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from platforms.feishu.adapter import FeishuAdapter
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.loopback import free_port
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.platform_stack import PlatformStack, running

BOT_MENTION = ("@_user_1", "ou_bot", "chinwag")


class Stack(PlatformStack):
    """The gateway with the real Feishu adapter against the fake open platform."""

    def __init__(self, tmp: Path, feishu: FakeFeishu, llm: FakeOpenAI, http_port: int = 0, **feishu_extra: Any) -> None:
        self.feishu = feishu
        self.asked: dict[str, set[str]] = {}  # chat id -> message ids pushed there
        section = {
            "app_id": feishu.app_id,
            "app_secret": feishu.app_secret,
            "domain": feishu.base_url,
            "backoff_base": 0.05,
            "backoff_cap": 0.2,
            "api_backoff_base": 0.01,
            "api_backoff_cap": 0.05,
            "allowed_users": ["*"],
            **feishu_extra,
        }
        super().__init__(tmp, llm, "feishu", section, FeishuAdapter, http_port)

    async def restart(self) -> None:
        await super().restart()
        await self.wait_ready()

    def replies(self, chat_id: str) -> list[dict[str, Any]]:
        # a reply records the message it answers, not the chat; resolve via the pushed events
        return [s for s in self.feishu.sent if s["chat_id"] == chat_id or s["reply_to"] in self.asked[chat_id]]

    async def wait_replies(self, chat_id: str, n: int, timeout: float = 8.0) -> list[dict[str, Any]]:
        await super().wait_replies(chat_id, n, timeout)
        # the fake records a reply before the adapter has its answer; let the turn finish so the
        # next message neither races the bot's bookkeeping nor meets a busy chat
        assert self.runner is not None
        await asyncio.wait_for(self.runner.drain(), timeout)
        return self.replies(chat_id)

    async def say(self, text: str, chat_id: str = "oc_dm1", chat_type: str = "p2p", **kw: Any) -> dict:
        event = self.feishu.message_event(text, chat_id=chat_id, chat_type=chat_type, **kw)
        self.asked.setdefault(chat_id, set()).add(event["event"]["message"]["message_id"])
        await self.push(event)
        return event

    async def push(self, event: dict) -> None:
        await self.feishu.push_event(event)


@pytest.fixture
async def stack(tmp_path):
    feishu = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="secret-e2e")
    await feishu.start()
    async with running(feishu, lambda llm: Stack(tmp_path, feishu, llm)) as s:
        yield s


async def test_dm_turn_is_answered_and_stored(stack):
    await stack.say("hello bot")
    [reply] = await stack.wait_replies("oc_dm1", 1)
    assert reply["text"] == "echo: hello bot"
    assert reply["msg_type"] == "post"  # rich text (markdown) first
    [session] = stack.sessions()
    assert session["session_key"] == "agent:main:feishu:dm:oc_dm1"
    assert session["message_count"] >= 2


async def test_group_answers_only_when_the_bot_is_mentioned(stack):
    await stack.say("just chatting", chat_id="oc_g", chat_type="group")
    asked = await stack.say("@_user_1 what is 2+2?", chat_id="oc_g", chat_type="group", mentions=[BOT_MENTION])
    [reply] = await stack.wait_replies("oc_g", 1)
    assert reply["text"] == "echo: what is 2+2?"
    assert reply["kind"] == "reply" and reply["reply_to"] == asked["event"]["message"]["message_id"]
    # a reply to the bot's message counts as addressing it
    await stack.say(
        "and 3+3?",
        chat_id="oc_g",
        chat_type="group",
        sender="ou_bob",
        union_id="on_bob",
        parent_id=reply["message_id"],
        root_id=reply["message_id"],
    )
    replies = await stack.wait_replies("oc_g", 2)
    assert replies[1]["text"] == "echo: and 3+3?"
    assert len(stack.llm.requests) == 2  # the unaddressed message never reached the model
    keys = sorted(s["session_key"] for s in stack.sessions())
    # group members each get their own session, keyed by the cross-app union id
    assert keys == ["agent:main:feishu:group:oc_g:on_alice", "agent:main:feishu:group:oc_g:on_bob"]


async def test_thread_turn_lands_in_its_own_session_and_reply_stays_in_thread(stack):
    await stack.say("@_user_1 main chat", chat_id="oc_g", chat_type="group", mentions=[BOT_MENTION])
    await stack.wait_replies("oc_g", 1)
    await stack.say(
        "@_user_1 in the thread",
        chat_id="oc_g",
        chat_type="group",
        mentions=[BOT_MENTION],
        thread_id="omt_7",
        root_id="om_root7",
        parent_id="om_root7",
    )
    replies = await stack.wait_replies("oc_g", 2)
    assert replies[1]["reply_in_thread"] is True and replies[0]["reply_in_thread"] is False
    keys = sorted(s["session_key"] for s in stack.sessions())
    assert keys == ["agent:main:feishu:group:oc_g:omt_7", "agent:main:feishu:group:oc_g:on_alice"]


async def test_slash_commands_are_handled_by_the_gateway(stack):
    await stack.say("first message")
    await stack.wait_replies("oc_dm1", 1)
    await stack.say("/new")
    replies = await stack.wait_replies("oc_dm1", 2)
    assert replies[1]["text"] and len(stack.llm.requests) == 1  # commands do not go to the model
    # in a group, "@bot /help" is the command /help
    await stack.say("@_user_1 /help", chat_id="oc_g", chat_type="group", mentions=[BOT_MENTION])
    [help_reply] = await stack.wait_replies("oc_g", 1)
    assert "/new" in help_reply["text"] and len(stack.llm.requests) == 1


async def test_redelivered_event_is_answered_once_even_after_restart(stack):
    first = await stack.say("only once please")
    await stack.wait_replies("oc_dm1", 1)
    await stack.push(first)  # Feishu redelivers an event it thinks was not received
    await stack.say("second")
    replies = await stack.wait_replies("oc_dm1", 2)
    assert [r["text"] for r in replies] == ["echo: only once please", "echo: second"]

    await stack.restart()  # a new adapter and runner on the same database
    await stack.push(first)
    await stack.say("after restart")
    replies = await stack.wait_replies("oc_dm1", 3)
    assert [r["text"] for r in replies][2] == "echo: after restart"
    assert len(stack.llm.requests) == 3 and len(stack.replies("oc_dm1")) == 3


async def test_long_answer_is_split_and_working_reaction_shown(stack):
    body = "\n".join(f"x = {i}  # step {i}." for i in range(400))
    stack.llm.push("Here is **the code**:\n```python\n" + body + "\n```\nDone.")
    stack.llm.delay = 0.6  # a turn long enough for the gateway to show its working hint
    asked = await stack.say("@_user_1 write it", chat_id="oc_g", chat_type="group", mentions=[BOT_MENTION])
    await stack.feishu.wait_for(lambda: any("Done." in r["text"] for r in stack.replies("oc_g")), 8)
    await asyncio.wait_for(stack.runner.drain(), 8)  # a streamed reply shows text before the turn ends
    replies = stack.replies("oc_g")
    assert len(replies) >= 3 and all(len(r["text"]) <= 4000 for r in replies)
    assert all(r["text"].count("```") % 2 == 0 for r in replies)
    text = "".join(r["text"] for r in replies)
    assert all(f"x = {i}  # step {i}." in text for i in range(400))
    # the working reaction went on the asked message once, and came off with the answer
    mid = asked["event"]["message"]["message_id"]
    reactions = [r for r in stack.feishu.reactions.values() if r["message_id"] == mid]
    assert len(reactions) == 1 and reactions[0]["deleted"]


async def test_webhook_mode_turn_through_the_gateway_http_server(tmp_path):
    feishu = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="secret-e2e")
    await feishu.start()
    port = free_port()
    webhook = {"mode": "webhook", "verification_token": "vt-e2e", "encrypt_key": "ek-e2e"}
    async with running(feishu, lambda llm: Stack(tmp_path, feishu, llm, http_port=port, **webhook)) as s:
        event = feishu.message_event("over the webhook", token="vt-e2e")
        s.asked["oc_dm1"] = {event["event"]["message"]["message_id"]}
        body, headers = feishu.webhook_request(event, "ek-e2e")
        url = f"http://127.0.0.1:{port}/webhooks/feishu"
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=body, headers=headers) as r:
                assert r.status == 200
            forged, fheaders = feishu.webhook_request(
                feishu.message_event("forged", token="vt-e2e"), "ek-e2e", bad_signature=True
            )
            async with http.post(url, data=forged, headers=fheaders) as r:
                assert r.status == 401
        [reply] = await s.wait_replies("oc_dm1", 1)
        assert reply["text"] == "echo: over the webhook"
        assert not feishu.calls_to("endpoint")  # no long connection in webhook mode
        assert len(s.llm.requests) == 1
