"""Telegram adapter end to end: the real python-telegram-bot against the fake Bot API server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from telegram.error import NetworkError

from gateway.source import Platform, SessionSource
from platforms.base import InboundMessage
from platforms.telegram.adapter import TelegramAdapter, TelegramConfigError
from platforms.telegram.format import to_markdown_v2
from tests.fakes.telegram_server import FakeTelegram, parse_markdown_v2, utf16_len

ANN = FakeTelegram.user(42, "Ann", "ann", last_name="Lee")
BOB = FakeTelegram.user(43, "Bob", "bob")


def cfg(fake: FakeTelegram, **extra: Any) -> dict[str, Any]:
    base = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "watchdog_seconds": 5,
        "reconnect_base": 0.01,
        "reconnect_cap": 0.05,
    }
    base.update(extra)
    return base


@pytest.fixture
async def fake():
    server = await FakeTelegram().start()
    yield server
    await server.stop()


class Running:
    def __init__(self, adapter: TelegramAdapter) -> None:
        self.adapter = adapter
        self.inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def next(self, timeout: float = 5.0) -> InboundMessage:
        return await asyncio.wait_for(self.inbox.get(), timeout)


@pytest.fixture
async def tg(fake):
    run = Running(TelegramAdapter(cfg(fake)))
    await run.adapter.start(run.inbox.put)
    yield run
    await run.adapter.stop()


async def until(predicate, timeout: float = 5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


# -- inbound ---------------------------------------------------------------------------------


async def test_dm_arrives_as_inbound_message(fake, tg):
    chat = fake.private_chat(ANN)
    sent = fake.push_message(chat, ANN, "hello there")
    msg = await tg.next()
    assert msg.text == "hello there"
    assert msg.message_id == f"42:{sent['message_id']}"
    src = msg.source
    assert (src.platform, src.chat_id, src.chat_type, src.user_id) == (Platform.TELEGRAM, "42", "dm", "42")
    assert src.user_name == "Ann Lee"
    assert src.thread_id is None
    assert msg.mentioned is False and msg.reply_to_bot is False
    assert msg.raw["message"]["text"] == "hello there"
    assert tg.adapter.health().ready
    assert tg.adapter.bot_username == "chinwag_bot"
    # the adapter switched the bot to polling and asked who it is
    assert fake.calls_to("getMe") and fake.calls_to("deleteWebhook")


async def test_group_message_with_and_without_mention(fake, tg):
    group = fake.group_chat(-100, "Team")
    fake.push_message(group, ANN, "just chatting")
    plain = await tg.next()
    assert plain.source.chat_type == "group" and plain.source.chat_id == "-100"
    assert plain.source.chat_name == "Team" and plain.source.user_id == "42"
    assert plain.mentioned is False

    fake.push_message(group, ANN, "hey @Chinwag_Bot what's up")  # handles are case-insensitive
    assert (await tg.next()).mentioned is True

    fake.push_message(group, ANN, "ask @other_bot instead")
    assert (await tg.next()).mentioned is False


async def test_mention_found_in_text_when_client_sent_no_entities(fake, tg):
    group = fake.group_chat(-100, "Team")
    fake.push_message(group, ANN, "ping @chinwag_bot, please", auto_entities=False)
    assert (await tg.next()).mentioned is True
    fake.push_message(group, ANN, "ping @chinwag_botty", auto_entities=False)
    assert (await tg.next()).mentioned is False


async def test_mention_entity_offsets_count_utf16_units(fake, tg):
    group = fake.group_chat(-100, "Team")
    # the emoji is two UTF-16 units: a wrong offset would cut "@chinwag_bot" at the wrong place
    fake.push_message(group, ANN, "😀😀 @chinwag_bot hi")
    assert (await tg.next()).mentioned is True


async def test_slash_commands_addressed_to_the_bot(fake, tg):
    group = fake.group_chat(-100, "Team")
    fake.push_message(group, ANN, "/status@chinwag_bot now")
    cmd = await tg.next()
    assert cmd.text == "/status now" and cmd.is_command and cmd.mentioned

    fake.push_message(group, ANN, "/status@other_bot")
    other = await tg.next()
    assert other.text == "/status@other_bot" and other.mentioned is False

    fake.push_message(group, ANN, "/help")
    bare = await tg.next()
    assert bare.is_command and bare.text == "/help" and bare.mentioned is False


async def test_reply_to_the_bot_and_to_someone_else(fake, tg):
    group = fake.group_chat(-100, "Team")
    source = SessionSource(platform="telegram", chat_id="-100", chat_type="group", user_id="42")
    [bot_msg_id] = await tg.adapter.send(source, "I am the bot")
    bot_msg = fake.messages[(-100, int(bot_msg_id.split(":")[1]))]
    fake.push_message(group, ANN, "thanks", reply_to=bot_msg)
    reply = await tg.next()
    assert reply.reply_to_bot is True and reply.reply_to_message_id == bot_msg_id

    bob_msg = fake.push_message(group, BOB, "hi all")
    await tg.next()
    fake.push_message(group, ANN, "hi Bob", reply_to=bob_msg)
    other = await tg.next()
    assert other.reply_to_bot is False and other.reply_to_message_id == f"-100:{bob_msg['message_id']}"


async def test_forum_topics_carry_thread_id(fake, tg):
    forum = fake.group_chat(-200, "Forum", forum=True)
    topic_start = fake.make_message(forum, ANN, "topic")  # the topic's creation service message
    topic_start["forum_topic_created"] = {"name": "Ideas", "icon_color": 7322096}
    fake.push_message(forum, ANN, "in the topic", thread_id=77, reply_to=topic_start)
    msg = await tg.next()
    assert msg.source.chat_type == "forum" and msg.source.thread_id == "77"
    assert msg.reply_to_message_id is None  # a topic's implicit reply is not a reply

    bob_msg = fake.push_message(forum, BOB, "first", thread_id=77)
    await tg.next()
    fake.push_message(forum, ANN, "replying in topic", thread_id=77, reply_to=bob_msg)
    reply = await tg.next()
    assert reply.source.thread_id == "77" and reply.source.chat_type == "forum"

    fake.push_message(forum, ANN, "in General")
    general = await tg.next()
    assert general.source.chat_type == "forum" and general.source.thread_id is None

    # a reply chain inside General carries message_thread_id but is not a topic
    general_msg = fake.push_message(forum, BOB, "general question")
    await tg.next()
    fake.push_message(
        forum, ANN, "general answer", thread_id=general_msg["message_id"], reply_to=general_msg, topic=False
    )
    chain = await tg.next()
    assert chain.source.chat_type == "forum" and chain.source.thread_id is None


async def test_reply_chains_in_plain_supergroups_are_not_threads(fake, tg):
    group = fake.group_chat(-300, "Big group", supergroup=True)
    first = fake.push_message(group, BOB, "question")
    await tg.next()
    fake.push_message(group, ANN, "answer", thread_id=first["message_id"], reply_to=first)
    msg = await tg.next()
    assert msg.source.chat_type == "group" and msg.source.thread_id is None


async def test_caption_is_text_and_textless_updates_are_skipped(fake, tg):
    chat = fake.private_chat(ANN)
    sticker = fake.make_message(chat, ANN, "x")
    del sticker["text"]
    sticker["sticker"] = {
        "file_id": "f",
        "file_unique_id": "u",
        "width": 1,
        "height": 1,
        "is_animated": False,
        "is_video": False,
        "type": "regular",
    }
    fake.push_update({"message": sticker})
    fake.push_update({"edited_message": fake.make_message(chat, ANN, "edited")})
    photo = fake.make_message(chat, ANN, "x")
    del photo["text"]
    photo["caption"] = "look at this"
    photo["photo"] = [{"file_id": "p", "file_unique_id": "pu", "width": 1, "height": 1}]
    fake.push_update({"message": photo})
    msg = await tg.next()
    assert msg.text == "look at this"
    assert tg.inbox.empty()


async def test_malformed_updates_are_skipped_and_polling_goes_on(fake, tg, caplog):
    chat = fake.private_chat(ANN)
    fake.push_raw({"update_id": fake.next_update_id, "message": {"chat": "not a chat"}})
    fake.next_update_id += 1
    fake.push_message(chat, ANN, "still here")
    msg = await tg.next()
    assert msg.text == "still here"
    assert any("malformed update" in r.getMessage() for r in caplog.records)
    fake.push_message(chat, ANN, "and after")
    assert (await tg.next()).text == "and after"


async def test_slow_handler_does_not_stall_polling(fake):
    adapter = TelegramAdapter(cfg(fake))
    gate = asyncio.Event()
    got: list[str] = []

    async def handler(msg: InboundMessage) -> None:
        got.append(msg.text)
        if msg.text == "slow":
            await gate.wait()

    await adapter.start(handler)
    try:
        chat = fake.private_chat(ANN)
        fake.push_message(chat, ANN, "slow")
        await until(lambda: "slow" in got)
        fake.push_message(chat, ANN, "next")
        await until(lambda: "next" in got)
    finally:
        gate.set()
        await adapter.stop()


# -- outbound --------------------------------------------------------------------------------


def dm_source(chat_id: int = 42) -> SessionSource:
    return SessionSource(platform="telegram", chat_id=str(chat_id), chat_type="dm", user_id=str(chat_id))


async def test_many_chats_at_once_share_a_bounded_set_of_connections(fake, tg):
    # httpcore's pool does work per request that grows with the square of its connections; the
    # SDK's default of 256 made that most of the CPU per message with 200 chats answered at once
    from platforms.telegram.adapter import BOT_API_CONNECTIONS

    fake.hold = asyncio.Event()  # every answer waits: each send holds its connection
    fake.peers.clear()
    sends = [
        asyncio.create_task(tg.adapter.send(dm_source(1000 + n), f"hi {n}")) for n in range(3 * BOT_API_CONNECTIONS)
    ]
    await until(lambda: len(fake.calls_to("sendMessage")) >= BOT_API_CONNECTIONS)
    await asyncio.sleep(0.2)  # a pool without a bound would open one connection per send by now
    assert len(fake.calls_to("sendMessage")) == BOT_API_CONNECTIONS
    fake.hold.set()
    assert all(await asyncio.gather(*sends))  # the rest queued for a connection, none was lost
    assert len(fake.calls_to("sendMessage")) == 3 * BOT_API_CONNECTIONS
    assert len(fake.peers) <= BOT_API_CONNECTIONS


async def test_markdown_goes_out_as_valid_markdown_v2(fake, tg):
    text = (
        "**Done!** Run `pip install -e .` then:\n"
        "```bash\nchinwag run --port=8080 # (local)\n```\n"
        "- 1.5 * 2 = 3 [docs](https://example.com/a_(b)) ~~old~~ _note_ snake_case_name"
    )
    [mid] = await tg.adapter.send(dm_source(), text)
    stored = fake.messages[(42, int(mid.split(":")[1]))]
    assert stored["_parse_mode"] == "MarkdownV2"
    assert stored["text"] == (
        "Done! Run pip install -e . then:\n"
        "chinwag run --port=8080 # (local)\n\n"
        "- 1.5 * 2 = 3 docs old note snake_case_name"
    )


async def test_markup_refused_falls_back_to_plain_text(fake, tg):
    fake.fail("sendMessage", "parse_entities")
    [mid] = await tg.adapter.send(dm_source(), "**bold** and more")
    stored = fake.messages[(42, int(mid.split(":")[1]))]
    assert stored["_parse_mode"] is None and stored["text"] == "**bold** and more"
    modes = [c.params.get("parse_mode") for c in fake.calls_to("sendMessage")]
    assert modes == ["MarkdownV2", None]


@pytest.mark.parametrize(
    "markdown, markup, plain",
    [
        ("***both***", "*_both_*", "both"),
        ("see __init__.py and __main__", "see \\_\\_init\\_\\_\\.py and *main*", "see __init__.py and main"),
        ("snake_case_name", "snake\\_case\\_name", "snake_case_name"),
        ("# Title", "*Title*", "Title"),
        ("> quoted", ">quoted", "quoted"),
        ("`a\\b`", "`a\\\\b`", "a\\b"),
        ("``code with ` tick``", "`code with \\` tick`", "code with ` tick"),
        ("**open only", "\\*\\*open only", "**open only"),
    ],
)
def test_markdown_conversion_examples(markdown, markup, plain):
    assert to_markdown_v2(markdown) == markup
    assert parse_markdown_v2(markup) == plain


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab _*[]()~`>#+-=|{}.!\\\n😀x:/")), max_size=60))
def test_converted_markdown_always_parses_and_never_grows(text):
    rendered = parse_markdown_v2(to_markdown_v2(text))
    # rendered text is what Telegram counts: it must fit wherever the markdown source fit
    assert utf16_len(rendered) <= utf16_len(text)


async def test_long_reply_is_split_by_utf16_units(fake, tg):
    assert tg.adapter.max_message_length == 4096
    assert tg.adapter.message_length("😀a") == 3
    text = ("😀 word " * 700).strip()  # 3500 code points, 6299 UTF-16 units
    ids = await tg.adapter.send(dm_source(), text)
    assert len(ids) == 2
    parts = [fake.messages[(42, int(i.split(":")[1]))]["text"] for i in ids]
    assert all(utf16_len(p) <= 4096 for p in parts)
    assert " ".join(parts).split() == text.split()


async def test_long_code_block_split_keeps_each_part_valid(fake, tg):
    body = "\n".join(f"print('line {i}')  # a.b (c)" for i in range(400))
    text = "Here:\n```python\n" + body + "\n```\nbye."
    ids = await tg.adapter.send(dm_source(), text)
    assert len(ids) >= 3
    stored = [fake.messages[(42, int(i.split(":")[1]))] for i in ids]
    # every part was accepted as MarkdownV2: fences were closed and reopened per part
    assert all(s["_parse_mode"] == "MarkdownV2" for s in stored)
    rendered = "".join(s["text"] for s in stored)
    assert all(f"print('line {i}')" in rendered for i in range(400))


async def test_reply_in_forum_topic_goes_to_the_topic(fake, tg):
    fake.group_chat(-200, "Forum", forum=True)
    src = SessionSource(platform="telegram", chat_id="-200", chat_type="forum", user_id="42", thread_id="77")
    await tg.adapter.send_typing(src)
    [mid] = await tg.adapter.send(src, "answer", reply_to="-200:5")
    call = fake.calls_to("sendMessage")[-1]
    assert call.params["message_thread_id"] == "77"
    assert '"message_id": 5' in call.params["reply_parameters"]
    assert fake.messages[(-200, int(mid.split(":")[1]))]["message_thread_id"] == 77
    action = fake.calls_to("sendChatAction")[-1].params
    assert action["action"] == "typing" and action["message_thread_id"] == "77"


async def test_typing_failure_is_swallowed(fake, tg):
    fake.fail("sendChatAction", "server_error")
    await tg.adapter.send_typing(dm_source())
    await tg.adapter.send_typing(dm_source())
    assert len(fake.calls_to("sendChatAction")) == 2


async def test_flood_wait_is_honoured_then_sent(fake, tg):
    fake.fail("sendMessage", "retry_after", retry_after=1)
    ids = await tg.adapter.send(dm_source(), "hello")
    assert len(ids) == 1
    calls = fake.calls_to("sendMessage")
    assert len(calls) == 2 and calls[1].at - calls[0].at >= 0.9
    assert len(fake.sent(42)) == 1


async def test_server_errors_and_dropped_connections_are_retried(fake, tg):
    fake.fail("sendMessage", "server_error", status=502)
    fake.fail("sendMessage", "drop")
    ids = await tg.adapter.send(dm_source(), "made it")
    assert len(ids) == 1 and len(fake.calls_to("sendMessage")) == 3
    assert [m["text"] for m in fake.sent(42)] == ["made it"]


async def test_send_gives_up_after_bounded_attempts(fake):
    adapter = TelegramAdapter(cfg(fake, send_attempts=3))
    await adapter.start(lambda m: asyncio.sleep(0))
    try:
        fake.fail("sendMessage", "server_error", times=10)
        with pytest.raises(NetworkError):
            await adapter.send(dm_source(), "never")
        assert len(fake.calls_to("sendMessage")) == 3
    finally:
        await adapter.stop()


async def test_blocked_by_user_is_logged_not_raised(fake, tg, caplog):
    fake.blocked_chats.add(42)
    assert await tg.adapter.send(dm_source(), "anyone there?") == []
    assert any("blocked" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    # the adapter is unharmed: another chat still works both ways
    assert len(await tg.adapter.send(dm_source(43), "hi Bob")) == 1
    fake.push_message(fake.private_chat(BOB), BOB, "hello")
    assert (await tg.next()).text == "hello"


async def test_group_upgraded_to_supergroup_gets_the_message(fake, tg):
    fake.group_chat(-100999, "Team (super)", supergroup=True)
    fake.fail("sendMessage", "migrated", status=-100999)
    group = SessionSource(platform="telegram", chat_id="-100", chat_type="group", user_id="42")
    [mid] = await tg.adapter.send(group, "still reaching you")
    assert mid.startswith("-100999:")
    assert [m["text"] for m in fake.sent(-100999)] == ["still reaching you"]


async def test_edit_message_text(fake, tg):
    [mid] = await tg.adapter.send(dm_source(), "thinking...")
    key = (42, int(mid.split(":")[1]))
    await tg.adapter.edit(dm_source(), mid, "**done** in 1.5s")
    assert fake.messages[key]["text"] == "done in 1.5s"
    await tg.adapter.edit(dm_source(), mid, "**done** in 1.5s")  # "not modified" is not an error
    fake.fail("editMessageText", "parse_entities")
    await tg.adapter.edit(dm_source(), mid, "**final**")
    assert fake.messages[key]["text"] == "**final**" and fake.messages[key]["_parse_mode"] is None


async def test_bot_commands_go_to_the_menu(fake):
    adapter = TelegramAdapter(cfg(fake))
    adapter.bot_commands({"new": "Start a new conversation", "help": "Show help", "Bad-Name": "x"})
    await adapter.start(lambda m: asyncio.sleep(0))
    try:
        assert [c["command"] for c in fake.commands] == ["new", "help"]
        adapter.bot_commands({"search": "Search past conversations"})
        await until(lambda: [c["command"] for c in fake.commands] == ["search"])
    finally:
        await adapter.stop()


# -- connection ------------------------------------------------------------------------------


async def test_reconnects_after_dropped_poll_connection(fake, tg):
    await until(lambda: len(fake.calls_to("getUpdates")) >= 1)
    fake.fail("getUpdates", "drop", times=2)
    fake.fail("getUpdates", "server_error")
    chat = fake.private_chat(ANN)
    fake.push_message(chat, ANN, "after the drop")
    assert (await tg.next()).text == "after the drop"
    assert tg.adapter.health().ready


async def test_flood_wait_on_poll_is_honoured(fake, tg):
    await until(lambda: len(fake.calls_to("getUpdates")) >= 1)
    fake.fail("getUpdates", "retry_after", retry_after=1)
    fake.push_message(fake.private_chat(ANN), ANN, "later")
    assert (await tg.next()).text == "later"


async def test_watchdog_flips_readiness_and_reconnects_a_hung_poll(fake):
    adapter = TelegramAdapter(cfg(fake, poll_timeout=1, watchdog_seconds=2))
    inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()
    await adapter.start(inbox.put)
    try:
        await until(lambda: adapter.health().ready)
        # the server accepts every poll and never answers (a half-dead connection)
        fake.fail("getUpdates", "hang", times=1000)
        await until(lambda: not adapter.health().ready, timeout=6)
        assert "no event or poll" in adapter.health().detail
        polls = len(fake.calls_to("getUpdates"))
        await until(lambda: len(fake.calls_to("getUpdates")) > polls, timeout=6)  # it reconnected
        fake.failures.clear()  # the network heals
        fake.push_message(fake.private_chat(ANN), ANN, "back")
        assert (await asyncio.wait_for(inbox.get(), 8)).text == "back"
        await until(lambda: adapter.health().ready)
    finally:
        await adapter.stop()


async def test_webhook_left_over_is_removed_for_polling(fake):
    fake.webhook = {"url": "https://old.example/hook", "secret_token": None}
    adapter = TelegramAdapter(cfg(fake))
    inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()
    await adapter.start(inbox.put)
    try:
        assert fake.webhook is None
        fake.push_message(fake.private_chat(ANN), ANN, "polled")
        assert (await asyncio.wait_for(inbox.get(), 5)).text == "polled"
    finally:
        await adapter.stop()


async def test_revoked_token_makes_adapter_unready_and_never_logs_token(fake, caplog):
    caplog.set_level(logging.DEBUG)
    adapter = TelegramAdapter(cfg(fake))
    await adapter.start(lambda m: asyncio.sleep(0))
    try:
        await until(lambda: adapter.health().ready)
        fake.revoke_token()
        await until(lambda: not adapter.health().ready)
        assert "token" in adapter.health().detail
    finally:
        await adapter.stop()
    with pytest.raises(TelegramConfigError) as err:
        await TelegramAdapter(cfg(fake)).start(lambda m: asyncio.sleep(0))
    assert fake.token not in str(err.value)
    assert caplog.records and not [r for r in caplog.records if fake.token in r.getMessage()]
    assert fake.token not in caplog.text


async def test_start_survives_unreachable_server_and_connects_later(fake):
    port = fake.port
    await fake.stop()  # nothing listens there now
    adapter = TelegramAdapter(cfg(fake))
    inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()
    await adapter.start(inbox.put)  # network down: start returns, not ready
    revived = None
    try:
        assert not adapter.health().ready
        revived = await FakeTelegram().start(port=port)
        await until(lambda: adapter.health().ready, timeout=5)
        revived.push_message(revived.private_chat(ANN), ANN, "I'm back")
        assert (await asyncio.wait_for(inbox.get(), 5)).text == "I'm back"
    finally:
        await adapter.stop()
        if revived:
            await revived.stop()


# -- webhook ---------------------------------------------------------------------------------


@pytest.fixture
async def hook_server():
    """The gateway's HTTP server stand-in: a real aiohttp app on 127.0.0.1 we mount routes on."""
    app = web.Application()
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    holder: dict[str, Any] = {"app": app, "runner": runner}
    yield holder
    await runner.cleanup()


async def start_webhook_adapter(fake, hook_server, **extra):
    import socket

    with socket.socket() as s:  # pick a free loopback port for the webhook URL
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/webhooks/telegram"
    adapter = TelegramAdapter(cfg(fake, mode="webhook", webhook_url=url, secret_token="s3cret-Token", **extra))
    for path, handler in adapter.webhook_handlers().items():
        hook_server["app"].router.add_post(path, handler)
    await hook_server["runner"].setup()
    await web.TCPSite(hook_server["runner"], "127.0.0.1", port).start()
    inbox: asyncio.Queue[InboundMessage] = asyncio.Queue()
    await adapter.start(inbox.put)
    return adapter, inbox, url


async def test_webhook_mode_registers_and_receives(fake, hook_server, caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("telegram", "telegram.ext"):  # other tests may have quietened the SDK's loggers
        caplog.set_level(logging.DEBUG, logger=name)
    adapter, inbox, url = await start_webhook_adapter(fake, hook_server)
    try:
        assert fake.webhook == {
            "url": url,
            "secret_token": "s3cret-Token",
            "allowed_updates": ["message", "callback_query"],
        }
        assert not fake.calls_to("getUpdates")
        fake.push_message(fake.private_chat(ANN), ANN, "via webhook")
        msg = await asyncio.wait_for(inbox.get(), 5)
        assert msg.text == "via webhook" and msg.source.chat_type == "dm"
        await until(lambda: fake.webhook_deliveries == [200])
        await until(lambda: adapter.health().ready)
    finally:
        await adapter.stop()
    assert "setWebhook" in caplog.text  # the SDK did log the call, with its secrets redacted
    assert "s3cret-Token" not in caplog.text and fake.token not in caplog.text


async def test_webhook_rejects_bad_or_missing_secret(fake, hook_server):
    adapter, inbox, url = await start_webhook_adapter(fake, hook_server)
    try:
        update = {"update_id": 1, "message": fake.make_message(fake.private_chat(ANN), ANN, "forged")}
        async with aiohttp.ClientSession() as http:
            for headers in ({"X-Telegram-Bot-Api-Secret-Token": "wrong"}, {}):
                async with http.post(url, json=update, headers=headers) as resp:
                    assert resp.status == 403
            good = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-Token"}
            async with http.post(url, data=b"{not json", headers=good) as resp:
                assert resp.status == 400
            async with http.post(url, data=b" " * (2 * 1024 * 1024), headers=good) as resp:
                assert resp.status == 413  # over the server's limit, even with the right secret
            async with http.post(url, json={"update_id": 2, "message": {"bad": 1}}, headers=good) as resp:
                assert resp.status == 200  # malformed but well-formed JSON: acknowledged, skipped
            update["message"]["text"] = "genuine"
            async with http.post(url, json=update, headers=good) as resp:
                assert resp.status == 200
        msg = await asyncio.wait_for(inbox.get(), 5)
        assert msg.text == "genuine"
        assert inbox.empty()
    finally:
        await adapter.stop()


async def test_webhook_registration_restored_when_lost(fake, hook_server):
    adapter, inbox, url = await start_webhook_adapter(fake, hook_server, webhook_check_seconds=0.05)
    try:
        fake.webhook = None
        await until(lambda: fake.webhook is not None and fake.webhook["url"] == url)
    finally:
        await adapter.stop()


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, words",
    [
        ({}, "token is required"),
        ({"token": "1:x", "mode": "pull"}, "mode"),
        ({"token": "1:x", "mode": "webhook"}, "webhook_url"),
        ({"token": "1:x", "webhook_url": "https://x/y"}, "secret_token"),
        ({"token": "1:x", "webhook_url": "https://x/y", "secret_token": "bad secret!"}, "secret_token"),
        ({"token": "1:x", "poll_timeout": 50, "watchdog_seconds": 40}, "watchdog_seconds"),
        ({"token": "1:x", "send_attempts": "many"}, "not a number"),
    ],
)
def test_bad_config_gets_a_clear_error(config, words):
    with pytest.raises(TelegramConfigError, match=words):
        TelegramAdapter(config)


def test_defaults():
    adapter = TelegramAdapter({"token": "1:x"})
    assert adapter.mode == "polling" and adapter.base_url == "https://api.telegram.org/bot"
    assert adapter.webhook_handlers() == {}
    # keys present but None (as a config loader may pass them) mean "default"
    nulls = TelegramAdapter({"token": "1:x", "mode": None, "webhook_check_seconds": None, "poll_timeout": None})
    assert nulls.mode == "polling" and nulls.poll_timeout == 30 and nulls.webhook_check_seconds == 30
    hooked = TelegramAdapter({"token": "1:x", "webhook_url": "https://h/webhooks/telegram", "secret_token": "abc"})
    assert hooked.mode == "webhook" and list(hooked.webhook_handlers()) == ["/webhooks/telegram"]


async def test_webhook_delivery_errors_reported_by_telegram_are_logged(fake, hook_server, caplog):
    adapter, inbox, url = await start_webhook_adapter(fake, hook_server, webhook_check_seconds=0.05)
    try:
        fake.webhook["secret_token"] = "someone-elses"  # deliveries now carry the wrong secret
        fake.push_message(fake.private_chat(ANN), ANN, "lost")
        await until(lambda: fake.webhook_deliveries == [403])
        await until(lambda: any("webhook delivery errors" in r.getMessage() for r in caplog.records))
        assert inbox.empty()
    finally:
        await adapter.stop()


async def test_webhook_watchdog_flips_readiness_when_checks_hang(fake, hook_server):
    adapter, inbox, url = await start_webhook_adapter(
        fake, hook_server, watchdog_seconds=0.5, webhook_check_seconds=0.05
    )
    try:
        await until(lambda: adapter.health().ready)
        fake.fail("getWebhookInfo", "hang", times=1000)
        await until(lambda: not adapter.health().ready)
        assert "no event or poll" in adapter.health().detail
        fake.failures.clear()
        await until(lambda: adapter.health().ready, timeout=5)
        fake.push_message(fake.private_chat(ANN), ANN, "still delivered")
        assert (await asyncio.wait_for(inbox.get(), 5)).text == "still delivered"
    finally:
        await adapter.stop()
