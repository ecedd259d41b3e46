"""Feishu adapter in webhook mode, end to end: the real adapter (lark-oapi client) against the fake
open platform, with events POSTed to its webhook handler the way Feishu sends them."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp
import pytest

from platforms.feishu.adapter import FeishuAdapter
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

    async def post(
        self, payload: dict, encrypt_key: str = KEY, bad_signature: bool = False, raw: bytes | None = None
    ) -> tuple[int, dict]:
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
        cfg = {
            "app_id": fake.app_id,
            "app_secret": fake.app_secret,
            "domain": fake.base_url,
            "mode": "webhook",
            "verification_token": TOKEN,
            "encrypt_key": KEY,
            "api_backoff_base": 0.01,
            "api_backoff_cap": 0.05,
        }
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
    event = fake.message_event(
        "hi there",
        chat_id="oc_dm1",
        chat_type="p2p",
        sender="ou_alice",
        union_id="on_alice",
        token=TOKEN,
        event_id="ev_1",
    )
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


async def test_bad_signature_is_refused_and_nothing_delivered(fake, make_rig):
    rig = await make_rig()
    status, _ = await rig.post(fake.message_event("forged", token=TOKEN), bad_signature=True)
    assert status == 401
    status, _ = await rig.post(fake.message_event("genuine", token=TOKEN))
    assert status == 200
    assert (await rig.next_message()).text == "genuine"  # the forged one never arrived
    assert rig.inbox.empty()


async def test_bad_token_is_refused_and_nothing_delivered(fake, make_rig):
    rig = await make_rig()
    status, _ = await rig.post(fake.message_event("wrong token", token="nope"))
    assert status == 403
    status, _ = await rig.post(fake.message_event("no token", token=""))
    assert status == 403
    status, _ = await rig.post(fake.message_event("right", token=TOKEN))
    assert status == 200
    assert (await rig.next_message()).text == "right"
    assert rig.inbox.empty()


async def test_wrong_encrypt_key_and_unsigned_plain_body_are_refused(fake, make_rig):
    rig = await make_rig()
    status, _ = await rig.post(fake.message_event("other key", token=TOKEN), encrypt_key="another-key")
    assert status == 401
    # a plain body without signature headers while an encrypt key is configured
    body = json.dumps(fake.message_event("plain", token=TOKEN)).encode()
    async with rig.session.post(rig.host.url + "/webhooks/feishu", data=body) as r:
        assert r.status == 401
    async with rig.session.post(rig.host.url + "/webhooks/feishu", data=b"{not json") as r:
        assert r.status == 400
    status, _ = await rig.post(fake.message_event("ok", token=TOKEN))
    assert status == 200 and (await rig.next_message()).text == "ok"


async def test_url_verification_challenge_answered_encrypted_and_plain(fake, make_rig):
    rig = await make_rig()
    challenge = {"challenge": "c-123", "token": TOKEN, "type": "url_verification"}
    status, body = await rig.post(challenge)
    assert status == 200 and body == {"challenge": "c-123"}
    status, _ = await rig.post({**challenge, "token": "bad"})
    assert status == 403

    plain = await make_rig(encrypt_key="")  # token-only configuration
    status, body = await plain.post(challenge, encrypt_key="")
    assert status == 200 and body == {"challenge": "c-123"}
    status, _ = await plain.post(fake.message_event("t", token="bad"), encrypt_key="")
    assert status == 403
    status, _ = await plain.post(fake.message_event("t", token=TOKEN), encrypt_key="")
    assert status == 200 and (await plain.next_message()).text == "t"
    assert rig.inbox.empty()


async def test_group_messages_report_mentions_truthfully(fake, make_rig):
    rig = await make_rig()
    plain = fake.message_event("just chatting", chat_id="oc_grp", chat_type="group", token=TOKEN)
    await rig.post(plain)
    msg = await rig.next_message()
    assert msg.source.chat_type == "group" and msg.source.chat_id == "oc_grp"
    assert msg.mentioned is False and msg.text == "just chatting"

    other = fake.message_event(
        "@_user_1 what do you think",
        chat_id="oc_grp",
        chat_type="group",
        mentions=[("@_user_1", "ou_bob", "Bob")],
        token=TOKEN,
    )
    await rig.post(other)
    msg = await rig.next_message()
    assert msg.mentioned is False and msg.text == "@Bob what do you think"

    to_bot = fake.message_event(
        "@_user_1 summarise, cc @_user_2",
        chat_id="oc_grp",
        chat_type="group",
        mentions=[("@_user_1", fake.bot_open_id, "chinwag"), ("@_user_2", "ou_bob", "Bob")],
        token=TOKEN,
    )
    await rig.post(to_bot)
    msg = await rig.next_message()
    assert msg.mentioned is True
    assert msg.text == "summarise, cc @Bob"


async def test_slash_command_after_bot_mention_reads_as_command(fake, make_rig):
    rig = await make_rig()
    event = fake.message_event(
        "@_user_1 /new",
        chat_id="oc_grp",
        chat_type="group",
        mentions=[("@_user_1", fake.bot_open_id, "chinwag")],
        token=TOKEN,
    )
    await rig.post(event)
    msg = await rig.next_message()
    assert msg.text == "/new" and msg.is_command and msg.mentioned
    await rig.post(fake.message_event("/help", token=TOKEN))
    msg = await rig.next_message()
    assert msg.is_command and msg.source.chat_type == "dm"


async def test_thread_message_carries_thread_id_and_reply_stays_in_thread(fake, make_rig):
    rig = await make_rig()
    event = fake.message_event(
        "in a thread",
        chat_id="oc_grp",
        chat_type="group",
        thread_id="omt_42",
        root_id="om_root",
        parent_id="om_root",
        token=TOKEN,
    )
    await rig.post(event)
    msg = await rig.next_message()
    assert msg.source.thread_id == "omt_42"
    assert msg.reply_to_message_id == "om_root" and msg.reply_to_bot is False

    # a reply without an explicit target still lands in the thread (via its latest message)
    await rig.adapter.send(msg.source, "answer")
    sent = fake.sent[-1]
    assert sent["kind"] == "reply" and sent["reply_in_thread"] is True
    assert sent["reply_to"] == msg.message_id

    # a plain reply (root_id, no thread) in a normal group keeps the group's session
    plain_reply = fake.message_event(
        "re", chat_id="oc_grp", chat_type="group", root_id="om_x", parent_id="om_x", token=TOKEN
    )
    await rig.post(plain_reply)
    assert (await rig.next_message()).source.thread_id is None
    # in a topic group, the topic's root is the thread
    topic = fake.message_event("topic", chat_id="oc_topics", chat_type="topic_group", root_id="om_t1", token=TOKEN)
    await rig.post(topic)
    assert (await rig.next_message()).source.thread_id == "om_t1"


async def test_reply_to_a_bot_message_is_reported(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("first", token=TOKEN))
    first = await rig.next_message()
    [bot_mid] = await rig.adapter.send(first.source, "bot says", reply_to=first.message_id)
    await rig.post(fake.message_event("replying", parent_id=bot_mid, root_id=bot_mid, token=TOKEN))
    msg = await rig.next_message()
    assert msg.reply_to_bot is True and msg.reply_to_message_id == bot_mid


async def test_redelivered_event_keeps_message_id(fake, make_rig):
    rig = await make_rig()
    event = fake.message_event("once", token=TOKEN, message_id="om_same", event_id="ev_same")
    await rig.post(event)
    await rig.post(event)  # Feishu retries an event it thinks was not received
    a, b = await rig.next_message(), await rig.next_message()
    assert a.message_id == b.message_id == "om_same"  # the gateway dedupes on this


async def test_long_reply_is_split_and_each_part_sent(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("long please", token=TOKEN))
    msg = await rig.next_message()
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(400)) + "\n```"
    text = "intro paragraph\n\n" + code + "\n\nthe end"
    assert len(text) > rig.adapter.max_message_length
    ids = await rig.adapter.send(msg.source, text, reply_to=msg.message_id)
    parts = [s["text"] for s in fake.sent]
    assert len(ids) == len(parts) >= 2
    assert all(len(p) <= rig.adapter.max_message_length for p in parts)
    for p in parts:  # every part renders on its own: fences balanced
        assert p.count("```") % 2 == 0
    assert "print(0)" in parts[0] and parts[-1].endswith("the end")
    joined = "\n".join(parts)
    assert all(f"print({i})" in joined for i in range(400))


async def test_rich_text_refused_falls_back_to_plain_text(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("x", token=TOKEN))
    msg = await rig.next_message()
    fake.reject_post = True
    [mid] = await rig.adapter.send(msg.source, "*rich*", reply_to=msg.message_id)
    assert [c.body["msg_type"] for c in fake.calls_to("reply")] == ["post", "text"]
    assert fake.sent[-1]["msg_type"] == "text" and fake.sent[-1]["text"] == "*rich*"
    assert fake.sent[-1]["message_id"] == mid
    plain = await make_rig(rich_text=False)
    await plain.adapter.send(msg.source, "plain only", reply_to=msg.message_id)
    assert fake.calls_to("reply")[-1].body["msg_type"] == "text"


async def test_expired_token_is_refreshed_and_call_retried(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("x", token=TOKEN))
    msg = await rig.next_message()
    tokens_before = len(fake.calls_to("token"))
    fake.expire_tokens()
    [mid] = await rig.adapter.send(msg.source, "after expiry", reply_to=msg.message_id)
    assert len(fake.calls_to("token")) == tokens_before + 1
    replies = fake.calls_to("reply")
    assert len(replies) == 2  # refused once with 99991663, then accepted with the new token
    assert replies[0].headers["Authorization"] != replies[1].headers["Authorization"]
    assert [s["message_id"] for s in fake.sent] == [mid]


async def test_rate_limit_and_server_errors_back_off_and_retry(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("x", token=TOKEN))
    msg = await rig.next_message()
    fake.fail_next(
        "reply",
        status=429,
        code=99991400,
        msg="request trigger frequency limit",
        headers={"x-ogw-ratelimit-reset": "0.05"},
    )
    fake.fail_next("reply", status=502, times=1)
    [mid] = await rig.adapter.send(msg.source, "eventually", reply_to=msg.message_id)
    assert len(fake.calls_to("reply")) == 3
    assert fake.sent[-1]["text"] == "eventually" and fake.sent[-1]["message_id"] == mid
    # a persistent failure ends in a clear error, not a hang
    fake.fail_next("reply", status=503, times=10)
    fake.fail_next("create", status=503, times=10)
    from platforms.feishu.api import FeishuApiError

    with pytest.raises(FeishuApiError):
        await rig.adapter.send(msg.source, "never", reply_to=msg.message_id)


async def test_working_reaction_once_per_message_and_removed_after_reply(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("work on this", token=TOKEN))
    msg = await rig.next_message()
    for _ in range(3):
        await rig.adapter.send_typing(msg.source)
    assert len(fake.calls_to("reaction")) == 1
    [(rid, reaction)] = fake.reactions.items()
    assert reaction["message_id"] == msg.message_id and reaction["emoji"] == "OnIt"
    await rig.adapter.send(msg.source, "done", reply_to=msg.message_id)
    assert fake.reactions[rid]["deleted"] is True
    await rig.adapter.send_typing(msg.source)  # same message again: no new reaction
    assert len(fake.calls_to("reaction")) == 1

    quiet = await make_rig(reaction="")
    await quiet.adapter.send_typing(msg.source)
    assert len(fake.calls_to("reaction")) == 1


async def test_malformed_payloads_are_skipped_and_adapter_keeps_working(fake, make_rig):
    rig = await make_rig()
    broken = fake.message_event("x", token=TOKEN)
    del broken["event"]["message"]["message_id"]
    status, _ = await rig.post(broken)
    assert status == 200  # acknowledged: a retry would be just as broken
    bad_content = fake.message_event("x", token=TOKEN)
    bad_content["event"]["message"]["content"] = "{not json"
    assert (await rig.post(bad_content))[0] == 200
    no_event = {"schema": "2.0", "header": {"event_type": "im.message.receive_v1", "token": TOKEN}}
    assert (await rig.post(no_event))[0] == 200
    other = {"schema": "2.0", "header": {"event_type": "im.chat.updated_v1", "token": TOKEN}, "event": {}}
    assert (await rig.post(other))[0] == 200
    await rig.post(fake.message_event("still alive", token=TOKEN))
    assert (await rig.next_message()).text == "still alive"
    assert rig.inbox.empty()


async def test_create_message_when_no_reply_target_and_edit(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("x", chat_id="oc_grp", chat_type="group", token=TOKEN))
    msg = await rig.next_message()
    [mid] = await rig.adapter.send(msg.source, "fresh message")
    assert fake.sent[-1]["kind"] == "create" and fake.sent[-1]["chat_id"] == "oc_grp"
    assert fake.calls_to("create")[-1].query == {"receive_id_type": "chat_id"}
    await rig.adapter.edit(msg.source, mid, "edited")
    assert fake.sent[-1]["text"] == "edited"


async def test_config_validation(fake):
    base = {"app_id": "a", "app_secret": "s", "domain": fake.base_url}
    with pytest.raises(ValueError, match="verification_token"):
        FeishuAdapter({**base, "mode": "webhook"})
    with pytest.raises(ValueError, match="app_id"):
        FeishuAdapter({"app_secret": "s"})
    with pytest.raises(ValueError, match="mode"):
        FeishuAdapter({**base, "mode": "poll"})
    with pytest.raises(ValueError, match="domain"):
        FeishuAdapter({**base, "domain": "open.feishu.cn"})
    assert FeishuAdapter({"app_id": "a", "app_secret": "s"}).domain == "https://open.feishu.cn"
    assert FeishuAdapter({**base, "domain": "lark"}).domain == "https://open.larksuite.com"
    assert "SeCrEt42" not in repr(FeishuAdapter({"app_id": "a", "app_secret": "SeCrEt42"}))
    keys = FeishuAdapter({**base, "mode": "webhook", "verification_token": "TokTok9", "encrypt_key": "KeyKey9"}).keys
    assert "TokTok9" not in repr(keys) and "KeyKey9" not in repr(keys)
    assert FeishuAdapter(base).webhook_handlers() == {}  # websocket mode serves no webhook


async def test_bot_info_failure_at_start_is_retried_in_background(fake, make_rig):
    fake.fail_next("bot_info", status=500, times=6)  # more than one call's worth of retries
    rig = await make_rig(backoff_base=0.05, backoff_cap=0.1)
    assert rig.adapter.health().ready  # the webhook works meanwhile
    await fake.wait_for(lambda: rig.adapter.bot_open_id == fake.bot_open_id)
    event = fake.message_event(
        "@_user_1 hi",
        chat_type="group",
        chat_id="oc_g",
        token=TOKEN,
        mentions=[("@_user_1", fake.bot_open_id, "chinwag")],
    )
    await rig.post(event)
    assert (await rig.next_message()).mentioned


async def test_reply_to_a_bot_message_sent_before_a_restart_is_looked_up_once(fake, make_rig):
    first = await make_rig()
    await first.post(fake.message_event("x", chat_id="oc_g", chat_type="group", token=TOKEN))
    asked = await first.next_message()
    [old_bot_mid] = await first.adapter.send(asked.source, "from before the restart", reply_to=asked.message_id)
    await first.adapter.stop()

    fresh = await make_rig()  # knows nothing of what the first adapter sent
    for _ in range(2):
        await fresh.post(
            fake.message_event(
                "re: that", chat_id="oc_g", chat_type="group", parent_id=old_bot_mid, root_id=old_bot_mid, token=TOKEN
            )
        )
        msg = await fresh.next_message()
        assert msg.reply_to_bot is True
    assert len(fake.calls_to("get")) == 1  # the answer is remembered
    await fresh.post(
        fake.message_event("re: a person", chat_id="oc_g", chat_type="group", parent_id=asked.message_id, token=TOKEN)
    )
    assert (await fresh.next_message()).reply_to_bot is False


async def test_a_chat_keeps_its_order_while_a_reply_lookup_is_slow(fake, make_rig):
    rig = await make_rig()
    # the lookup of the replied-to message fails twice (back-off) before it answers
    fake.fail_next("get", status=503, times=2)
    # Each answer waits for the gateway's commit (platforms.base.MessageHandler), so the first
    # post is answered only after its lookup: the other two go while it is still pending, as
    # Feishu's concurrent deliveries would.
    first = asyncio.create_task(
        rig.post(
            fake.message_event("first, a reply", chat_id="oc_g", chat_type="group", parent_id="om_unknown", token=TOKEN)
        )
    )
    await fake.wait_for(lambda: fake.calls_to("get"))
    fake.delays["get"] = 0.5  # the lookup's retries are slow too
    second = asyncio.create_task(rig.post(fake.message_event("second", chat_id="oc_g", chat_type="group", token=TOKEN)))
    await asyncio.sleep(0.05)
    other = asyncio.create_task(
        rig.post(fake.message_event("other chat", chat_id="oc_other", chat_type="group", token=TOKEN))
    )
    got = [(await rig.next_message()).text for _ in range(3)]
    assert [status for status, _ in await asyncio.gather(first, second, other)] == [200, 200, 200]
    assert got.index("first, a reply") < got.index("second")
    assert got[0] == "other chat"  # not held up by another chat's lookup


async def test_missing_token_answer_also_refreshes_and_a_second_refusal_is_an_error(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("x", token=TOKEN))
    msg = await rig.next_message()
    tokens_before = len(fake.calls_to("token"))
    fake.fail_next("reply", status=400, code=99991661, msg="Missing access token for authorization")
    await rig.adapter.send(msg.source, "ok after refresh", reply_to=msg.message_id)
    assert len(fake.calls_to("token")) == tokens_before + 1
    assert fake.sent[-1]["text"] == "ok after refresh"
    # refreshed once per call: a token refused again is a real error, not a loop
    fake.fail_next("reply", status=400, code=99991663, times=2)
    from platforms.feishu.api import FeishuApiError

    with pytest.raises(FeishuApiError) as err:
        await rig.adapter.api.send_message(msg.source.chat_id, "text", {"text": "no"}, msg.message_id)
    assert err.value.code == 99991663


async def test_reaction_landing_after_the_answer_is_taken_off(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("quick one", token=TOKEN))
    msg = await rig.next_message()
    fake.delays["reaction"] = 0.5  # the reaction call is slow...
    typing = asyncio.create_task(rig.adapter.send_typing(msg.source))
    await fake.wait_for(lambda: fake.calls_to("reaction"))
    await rig.adapter.send(msg.source, "answer", reply_to=msg.message_id)  # ...the answer is faster
    await asyncio.wait_for(typing, 5)
    [reaction] = fake.reactions.values()
    assert reaction["deleted"] is True


async def test_server_errors_do_not_trigger_the_plain_text_fallback(fake, make_rig):
    rig = await make_rig()
    await rig.post(fake.message_event("x", token=TOKEN))
    msg = await rig.next_message()
    fake.fail_next("reply", status=500, times=4)
    from platforms.feishu.api import FeishuApiError

    with pytest.raises(FeishuApiError):
        await rig.adapter.send(msg.source, "down", reply_to=msg.message_id)
    assert [c.body["msg_type"] for c in fake.calls_to("reply")] == ["post"] * 4
