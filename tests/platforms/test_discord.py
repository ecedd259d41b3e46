"""The Discord adapter end to end: real discord.py against the fake Discord on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.source import Platform, SessionSource, build_session_key
from platforms.base import InboundMessage
from platforms.discord.adapter import DiscordAdapter
from tests.fakes.discord_server import FakeDiscord

GUILD, GENERAL, DM_CHANNEL = 500, 600, 700
ALICE_ID, BOB_ID = 11, 12


class Inbox:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def __call__(self, message: InboundMessage) -> None:
        await self.queue.put(message)

    async def next(self, timeout: float = 5.0) -> InboundMessage:
        return await asyncio.wait_for(self.queue.get(), timeout)


@pytest.fixture
async def fake():
    server = FakeDiscord(heartbeat_interval_ms=200)
    server.add_guild(GUILD, "Test Guild")
    server.add_text_channel(GUILD, GENERAL, "general")
    server.add_dm(DM_CHANNEL, server.user(ALICE_ID, "alice"))
    await server.start()
    yield server
    await server.stop()


def make_adapter(fake: FakeDiscord, **extra) -> DiscordAdapter:
    config = {
        "token": fake.token,
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        "guild_ready_timeout": 0.05,
        "reconnect_base": 0.05,
        "reconnect_cap": 0.2,
    }
    config.update(extra)
    return DiscordAdapter(config)


@pytest.fixture
async def running(fake):
    adapter = make_adapter(fake)
    inbox = Inbox()
    await adapter.start(inbox)
    await fake.wait_for(lambda: adapter.health().ready)
    yield adapter, inbox
    await adapter.stop()


def alice(fake: FakeDiscord) -> dict:
    return fake.user(ALICE_ID, "alice", global_name="Alice A.")


def bob(fake: FakeDiscord) -> dict:
    return fake.user(BOB_ID, "bob")


async def test_connects_with_required_intents(fake, running):
    adapter, _ = running
    assert adapter.health().ready
    identify = fake.identifies[0]
    intents = identify["intents"]
    for bit in (0, 9, 12, 15):  # guilds, guild_messages, dm_messages, message_content
        assert intents & (1 << bit), bit
    assert not intents & (1 << 1)  # members is not asked for
    assert fake.calls[0].path == "/users/@me"


async def test_dm_message_delivered(fake, running):
    _, inbox = running
    payload = await fake.user_says(DM_CHANNEL, alice(fake), "hello there")
    msg = await inbox.next()
    assert msg.text == "hello there"
    assert msg.message_id == payload["id"]
    src = msg.source
    assert (src.platform, src.chat_type, src.chat_id, src.user_id) == (
        Platform.DISCORD,
        "dm",
        str(DM_CHANNEL),
        str(ALICE_ID),
    )
    assert src.user_name == "Alice A."
    assert src.thread_id is None
    assert not msg.mentioned and not msg.reply_to_bot
    assert build_session_key(src) == f"agent:main:discord:dm:{DM_CHANNEL}"


async def test_dm_slash_command_text_passes_through(fake, running):
    _, inbox = running
    await fake.user_says(DM_CHANNEL, alice(fake), "/new")
    msg = await inbox.next()
    assert msg.text == "/new" and msg.is_command


async def test_guild_channel_without_mention(fake, running):
    _, inbox = running
    await fake.user_says(GENERAL, alice(fake), "just chatting")
    msg = await inbox.next()
    src = msg.source
    assert (src.chat_type, src.chat_id, src.thread_id, src.chat_name) == ("channel", str(GENERAL), None, "general")
    assert not msg.mentioned and not msg.reply_to_bot
    # group members each get their own session by the gateway's key rule
    assert build_session_key(src) == f"agent:main:discord:channel:{GENERAL}:{ALICE_ID}"


async def test_guild_channel_with_mention_strips_it_and_names_others(fake, running):
    _, inbox = running
    await fake.user_says(
        GENERAL, alice(fake), f"<@{fake.bot_id}> /help ask <@!{BOB_ID}>", mentions=[fake.bot_user, bob(fake)]
    )
    msg = await inbox.next()
    assert msg.mentioned
    assert msg.text == "/help ask @bob"
    assert msg.is_command
    assert msg.raw["content"].startswith(f"<@{fake.bot_id}>")


async def test_mention_of_the_bots_role_is_a_mention(fake, running):
    _, inbox = running
    role = fake.bot_role_id(GUILD)
    await fake.user_says(GENERAL, alice(fake), f"<@&{role}> status?", mention_roles=[role])
    msg = await inbox.next()
    assert msg.mentioned
    await fake.user_says(GENERAL, alice(fake), f"<@&{GUILD}> everyone role", mention_roles=[GUILD])
    assert not (await inbox.next()).mentioned


async def test_mention_of_someone_else_is_not_a_mention(fake, running):
    _, inbox = running
    await fake.user_says(GENERAL, alice(fake), f"hey <@{BOB_ID}>", mentions=[bob(fake)])
    msg = await inbox.next()
    assert not msg.mentioned and msg.text == "hey @bob"


async def test_reply_to_bot_reported(fake, running):
    adapter, inbox = running
    src = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id=str(ALICE_ID))
    [bot_msg_id] = await adapter.send(src, "I am the bot")
    user_msg = await fake.user_says(GENERAL, bob(fake), "a user line")
    assert (await inbox.next()).message_id == user_msg["id"]  # the bot's own echo was not delivered

    await fake.user_says(GENERAL, alice(fake), "replying to the bot", reply_to=fake.messages[int(bot_msg_id)])
    msg = await inbox.next()
    assert msg.reply_to_bot and msg.reply_to_message_id == bot_msg_id and not msg.mentioned

    await fake.user_says(GENERAL, alice(fake), "replying to bob", reply_to=user_msg)
    msg = await inbox.next()
    assert not msg.reply_to_bot and msg.reply_to_message_id == user_msg["id"]


async def test_reply_to_bot_without_inline_referenced_message(fake, running):
    adapter, inbox = running
    src = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id=str(ALICE_ID))
    [bot_msg_id] = await adapter.send(src, "earlier answer")
    payload = fake.message_payload(GENERAL, alice(fake), "re", reply_to=fake.messages[int(bot_msg_id)])
    del payload["referenced_message"]  # Discord omits it sometimes; the adapter remembers its ids
    await fake.dispatch("MESSAGE_CREATE", payload)
    msg = await inbox.next()
    assert msg.reply_to_bot and msg.reply_to_message_id == bot_msg_id


async def test_thread_is_its_own_shared_session(fake, running):
    adapter, inbox = running
    await fake.create_thread(GUILD, GENERAL, 810, "design talk", owner_id=ALICE_ID)
    await fake.user_says(810, alice(fake), "in the thread")
    await fake.user_says(810, bob(fake), "me too")
    first, second = await inbox.next(), await inbox.next()
    for msg in (first, second):
        assert (msg.source.chat_type, msg.source.chat_id, msg.source.thread_id) == ("thread", str(GENERAL), "810")
        assert msg.source.chat_name == "design talk"
    key = build_session_key(first.source)
    assert key == build_session_key(second.source) == f"agent:main:discord:thread:{GENERAL}:810"
    # and it differs from the channel's sessions
    await fake.user_says(GENERAL, alice(fake), "outside")
    assert build_session_key((await inbox.next()).source) != key
    # replies go to the thread, not its parent
    await adapter.send(first.source, "answer in thread")
    assert fake.sent[-1]["channel_id"] == "810"


async def test_unannounced_thread_is_looked_up_once(fake, running):
    _, inbox = running
    await fake.create_thread(GUILD, GENERAL, 820, "quiet", announce=False)
    for text in ("one", "two"):
        await fake.user_says(820, alice(fake), text)
        msg = await inbox.next()
        assert (msg.source.chat_type, msg.source.chat_id, msg.source.thread_id) == ("thread", str(GENERAL), "820")
    lookups = [c for c in fake.calls if c.method == "GET" and c.path == "/channels/820"]
    assert len(lookups) == 1


async def test_own_and_other_bot_messages_are_not_delivered(fake, running):
    _, inbox = running
    await fake.user_says(GENERAL, fake.bot_user, "my own words")
    await fake.user_says(GENERAL, fake.user(77, "otherbot", bot=True), "beep")
    last = await fake.user_says(GENERAL, alice(fake), "human")
    assert (await inbox.next()).message_id == last["id"]
    assert inbox.queue.empty()


async def test_other_bots_delivered_when_configured(fake):
    adapter, inbox = make_adapter(fake, ignore_bots=False), Inbox()
    await adapter.start(inbox)
    try:
        await fake.wait_for(lambda: adapter.health().ready)
        await fake.user_says(GENERAL, fake.user(77, "otherbot", bot=True), "beep")
        assert (await inbox.next()).text == "beep"
    finally:
        await adapter.stop()


async def test_system_messages_skipped_attachments_fetched(fake, running):
    _, inbox = running
    await fake.user_says(GENERAL, alice(fake), "", msg_type=7)  # member join notice
    plan = fake.attachment(b"step 1", "plan.txt", "text/plain; charset=utf-8")
    shot = fake.attachment(b"\x89PNG...", "shot.png", "image/png")
    await fake.user_says(GENERAL, alice(fake), "see file", attachments=[plan, shot])
    msg = await inbox.next()
    assert msg.text == "see file"  # the caption; the files travel as attachments
    assert [(a.kind, a.file_name, a.mime_type, a.size) for a in msg.attachments] == [
        ("file", "plan.txt", "text/plain", 6),
        ("image", "shot.png", "image/png", 7),
    ]
    opener = msg.attachments[0].open
    assert opener is not None
    assert b"".join([chunk async for chunk in opener()]) == b"step 1"  # through the client's session
    await fake.user_says(GENERAL, alice(fake), "", attachments=[fake.attachment(b"x", "only.bin")])
    assert (await inbox.next()).attachments[0].file_name == "only.bin"  # a file alone is a message


async def test_long_reply_split_at_2000_keeping_code_fences(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id=str(DM_CHANNEL), chat_type="dm", user_id=str(ALICE_ID))
    code = "\n".join(f"line_{i} = {i} * 2  # some filler text" for i in range(120))
    text = "Intro paragraph.\n\n```python\n" + code + "\n```\n\nDone."
    ids = await adapter.send(src, text, reply_to=None)
    assert len(ids) >= 3
    contents = [m["content"] for m in fake.sent]
    assert contents == adapter.split(text)
    for content in contents:
        assert len(content) <= 2000
        assert content.count("```") % 2 == 0  # every chunk renders on its own
    assert ids == [m["id"] for m in fake.sent]


async def test_send_reply_reference_and_safe_mentions(fake, running):
    adapter, inbox = running
    user_msg = await fake.user_says(GENERAL, alice(fake), "question")
    msg = await inbox.next()
    await adapter.send(msg.source, "x" * 2500, reply_to=msg.message_id)
    first, second = fake.sent[-2]["request"], fake.sent[-1]["request"]
    assert first["message_reference"]["message_id"] == int(user_msg["id"])
    assert "message_reference" not in second
    assert first["allowed_mentions"]["parse"] == []  # model output never pings @everyone


async def test_send_survives_429_rate_limit(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id=str(DM_CHANNEL), chat_type="dm", user_id=str(ALICE_ID))
    fake.fail_next("POST", r"/channels/\d+/messages$", 429, retry_after=0.05)
    ids = await adapter.send(src, "after the limit")
    statuses = [c.status for c in fake.calls if c.method == "POST" and c.path.endswith("/messages")]
    assert statuses == [429, 200]
    assert fake.sent[-1]["content"] == "after the limit" and ids == [fake.sent[-1]["id"]]


async def test_send_retries_a_502(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id=str(DM_CHANNEL), chat_type="dm", user_id=str(ALICE_ID))
    fake.fail_next("POST", r"/messages$", 502)
    await adapter.send(src, "eventually")
    statuses = [c.status for c in fake.calls if c.method == "POST" and c.path.endswith("/messages")]
    assert statuses == [502, 200]


async def test_send_forbidden_raises_clear_error(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id=str(ALICE_ID))
    fake.fail_next("POST", r"/messages$", 403, body={"message": "Missing Permissions", "code": 50013})
    with pytest.raises(RuntimeError, match="403.*Missing Permissions"):
        await adapter.send(src, "nope")


async def test_edit_and_typing(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id=str(ALICE_ID))
    [mid] = await adapter.send(src, "draft")
    await adapter.edit(src, mid, "final")
    assert fake.messages[int(mid)]["content"] == "final"
    await adapter.edit(src, mid, "y" * 2100)  # over the limit: cut, not refused
    assert len(fake.messages[int(mid)]["content"]) == 2000
    await adapter.send_typing(src)
    thread_src = SessionSource(
        platform="discord", chat_id=str(GENERAL), chat_type="thread", thread_id="810", user_id=str(ALICE_ID)
    )
    await fake.create_thread(GUILD, GENERAL, 810)
    await adapter.send_typing(thread_src)
    assert fake.typing == [GENERAL, 810]


async def test_typing_failure_is_quiet(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id="999", chat_type="channel", user_id=str(ALICE_ID))
    await adapter.send_typing(src)  # unknown channel: 404, but typing is only a hint


@pytest.mark.parametrize("close_code", [None, 4000, 1001])
async def test_reconnect_resumes_and_replays_missed_events(fake, running, close_code):
    adapter, inbox = running
    session = fake.session_id
    await fake.drop_connection(code=close_code)
    missed = await fake.user_says(DM_CHANNEL, alice(fake), "sent while you were away")
    msg = await inbox.next()
    assert msg.message_id == missed["id"]
    assert fake.resumes and fake.resumes[-1]["session_id"] == session
    assert len(fake.identifies) == 1  # resumed, not re-identified
    await fake.wait_for(lambda: adapter.health().ready)
    await fake.user_says(DM_CHANNEL, alice(fake), "and after")
    assert (await inbox.next()).text == "and after"


async def test_unresumable_session_identifies_afresh(fake, running):
    adapter, inbox = running
    fake.forget_sessions()
    await fake.drop_connection()
    # RESUME is refused (INVALID_SESSION, not resumable); discord.py waits the 5 s identify
    # spacing Discord asks for, then starts a new session
    await fake.wait_for(lambda: len(fake.identifies) == 2 and adapter.health().ready, timeout=10)
    assert len(fake.resumes) == 1
    await fake.user_says(DM_CHANNEL, alice(fake), "new session")
    assert (await inbox.next()).text == "new session"


async def test_watchdog_flips_readiness_and_reconnects(fake, caplog):
    caplog.set_level(logging.INFO, logger="platforms.base")
    adapter, inbox = make_adapter(fake, watchdog_seconds=0.4), Inbox()
    await adapter.start(inbox)
    try:
        await fake.wait_for(lambda: adapter.health().ready)
        fake.stall()  # socket open, but no ACKs and no events: a half-dead connection
        # the not-ready spell can be shorter than any poll (the resume is local), so the
        # adapter's readiness log is the witness
        await fake.wait_for(
            lambda: any("ready=False no event or poll" in r.getMessage() for r in caplog.records), timeout=3
        )
        await fake.wait_for(lambda: fake.resumes and adapter.health().ready, timeout=5)
        assert fake.resumes[-1]["session_id"] == fake.session_id
        await fake.user_says(DM_CHANNEL, alice(fake), "alive again")
        assert (await inbox.next()).text == "alive again"
    finally:
        await adapter.stop()


async def test_watchdog_not_ready_while_gateway_unreachable(fake):
    adapter, inbox = make_adapter(fake, watchdog_seconds=0.3), Inbox()
    await adapter.start(inbox)
    try:
        await fake.wait_for(lambda: adapter.health().ready)
        fake.accepting = False  # outage: the gateway refuses new connections
        fake.stall()
        await fake.wait_for(lambda: not adapter.health().ready, timeout=3)
        # discord.py waits out its own growing back-off between gateway attempts; the watchdog
        # starts over with a new client instead (a new login), so recovery is quick
        await fake.wait_for(lambda: sum(c.path == "/users/@me" for c in fake.calls) >= 2, timeout=3)
        assert not adapter.health().ready
        fake.accepting = True
        await fake.wait_for(lambda: adapter.health().ready, timeout=5)
        assert len(fake.identifies) == 2  # the restart identified afresh
        await fake.user_says(DM_CHANNEL, alice(fake), "recovered")
        assert (await inbox.next()).text == "recovered"
    finally:
        await adapter.stop()


async def test_malformed_event_skipped_without_reconnect(fake, running):
    adapter, inbox = running
    bad = fake.message_payload(DM_CHANNEL, alice(fake), "x")
    del bad["content"]
    await fake.dispatch("MESSAGE_CREATE", bad)
    await fake.dispatch("MESSAGE_CREATE", {"nonsense": True})
    await fake.dispatch("SOME_FUTURE_EVENT", {"x": 1})
    good = await fake.user_says(DM_CHANNEL, alice(fake), "still here")
    assert (await inbox.next()).message_id == good["id"]
    assert fake.connections == 1 and adapter.health().ready


async def test_garbage_frame_costs_a_reconnect_not_the_adapter(fake, running):
    adapter, inbox = running
    await fake.send_raw("this is not json{")
    await fake.wait_for(lambda: fake.connections >= 2 and adapter.health().ready, timeout=5)
    await fake.user_says(DM_CHANNEL, alice(fake), "after garbage")
    assert (await inbox.next()).text == "after garbage"


async def test_revoked_token_reported_then_recovers(fake, running):
    adapter, inbox = running
    good = fake.token
    fake.revoke_token()
    await fake.drop_connection()
    await fake.wait_for(lambda: "login failed" in adapter.health().detail, timeout=5)
    assert not adapter.health().ready
    fake.token = good  # the operator fixes it; the adapter keeps retrying
    await fake.wait_for(lambda: adapter.health().ready, timeout=5)
    await fake.user_says(DM_CHANNEL, alice(fake), "back")
    assert (await inbox.next()).text == "back"


async def test_missing_message_content_intent_explained(fake):
    fake.allow_privileged = False
    adapter = make_adapter(fake)
    await adapter.start(Inbox())
    try:
        await fake.wait_for(lambda: "MESSAGE CONTENT" in adapter.health().detail, timeout=5)
        assert not adapter.health().ready
    finally:
        await adapter.stop()


async def test_token_never_logged(fake, caplog):
    caplog.set_level(logging.DEBUG)
    adapter, inbox = make_adapter(fake), Inbox()
    await adapter.start(inbox)
    try:
        await fake.wait_for(lambda: adapter.health().ready)
        await fake.user_says(DM_CHANNEL, alice(fake), "hi")
        msg = await inbox.next()
        await adapter.send(msg.source, "hello")
        await fake.drop_connection()
        await fake.wait_for(lambda: fake.resumes and adapter.health().ready)
    finally:
        await adapter.stop()
    assert caplog.records
    assert all(fake.token not in r.getMessage() for r in caplog.records)


async def test_stop_disconnects(fake):
    adapter = make_adapter(fake)
    await adapter.start(Inbox())
    await fake.wait_for(lambda: adapter.health().ready)
    await adapter.stop()
    assert not adapter.health().ready
    await fake.wait_for(lambda: not fake.live, timeout=3)


def test_missing_token_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("DISCORD_BOT_TOKEN", raising=False)
    with pytest.raises(ValueError, match="token is not set"):
        DiscordAdapter({"token": ""})
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "from-env")
    DiscordAdapter({"token": ""})  # the environment supplies it


async def test_reply_to_a_deleted_message_still_sends(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id=str(ALICE_ID))
    ids = await adapter.send(src, "answer", reply_to="123456789")  # unknown to the fake
    assert len(ids) == 1
    assert fake.sent[-1]["request"]["message_reference"]["fail_if_not_exists"] is False


async def test_bad_ids_in_send_are_clear_errors(fake, running):
    adapter, _ = running
    src = SessionSource(platform="discord", chat_id="general", chat_type="channel", user_id=str(ALICE_ID))
    with pytest.raises(ValueError, match="must be a number"):
        await adapter.send(src, "x")
    ok = SessionSource(platform="discord", chat_id=str(GENERAL), chat_type="channel", user_id=str(ALICE_ID))
    await adapter.send(ok, "x", reply_to="not-an-id")  # a bad reply target is dropped, not fatal
    assert "message_reference" not in fake.sent[-1]["request"]
