"""Chat commands end to end (except /resume and /search: tests/commands/test_commands_sessions.py)."""

from __future__ import annotations

from gateway.commands import parse_command
from tests.fakes.gateway_harness import Gateway


def test_parse_command():
    assert parse_command("/help").name == "help"
    c = parse_command("  /Resume@chinwag_bot  my trip ")
    assert (c.name, c.args, c.bot) == ("resume", "my trip", "chinwag_bot")
    assert parse_command("/reset").name == "new"
    assert parse_command("/usr/bin/env is broken") is None  # a path, not a command
    assert parse_command("hello /help") is None
    assert parse_command("/") is None
    assert parse_command("/undo 2").args == "2"


async def test_help_lists_every_command(tmp_path):
    async with Gateway(tmp_path) as gw:
        text = (await gw.say("/help"))[0]
        for name in (
            "new",
            "resume",
            "title",
            "stop",
            "retry",
            "undo",
            "compress",
            "search",
            "status",
            "whoami",
            "help",
        ):
            assert f"/{name}" in text
        assert gw.fake.requests == []


async def test_unknown_command_hints_without_model_call(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert await gw.say("/frobnicate now") == ["Unknown command /frobnicate. Send /help for the list of commands."]
        assert gw.fake.requests == []
        # a path is not a command: it goes to the model
        assert await gw.say("/usr/bin/env is broken") == ["echo: /usr/bin/env is broken"]


async def test_command_addressed_to_bot_name(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.adapter.bot_username = "chinwag_bot"
        assert (await gw.say("/help@chinwag_bot"))[0].startswith("Commands:")
        assert await gw.say("/help@Other_Bot", chat_id="-1", chat_type="group") == []  # another bot's, in a group
        [reply] = await gw.say("/help@Other_Bot")  # in a DM only this bot reads it: it says whose it is
        assert reply.startswith("/help@Other_Bot is addressed to @Other_Bot")


async def test_new_starts_fresh_session_and_keeps_old(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("first conversation")
        old = gw.session_id()
        await gw.say("other chat", chat_id="200", user_id="200")
        other = gw.session_id("200", "200")
        assert old in gw.runner.cache and other in gw.runner.cache
        replies = await gw.say("/new")
        new = gw.session_id()
        assert new != old
        assert replies == [f"Started a new conversation. The previous one is kept: /resume {old}"]
        assert gw.db.get_session(old)["end_reason"] == "new"
        assert old not in gw.runner.cache and other in gw.runner.cache  # exactly that session's agent
        await gw.say("fresh")
        assert [m["content"] for m in gw.fake.requests[-1]["messages"][1:]] == ["fresh"]


async def test_new_with_title_and_reset_alias(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert await gw.say("/new Kitchen plans") == ["Started a new conversation “Kitchen plans”."]
        sid = gw.session_id()
        assert gw.db.get_session(sid)["title"] == "Kitchen plans"
        assert (await gw.say("/reset Kitchen plans"))[0].startswith("Another conversation is already titled")
        assert gw.session_id() == sid
        assert (await gw.say("/reset"))[0].startswith("Started a new conversation")
        assert gw.session_id() != sid


async def test_title(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert (await gw.say("/title"))[0].startswith("This conversation has no title yet")
        assert await gw.say("/title  Garden\tproject ") == [
            "Titled this conversation “Garden project”. Later, /resume Garden project brings it back."
        ]
        assert gw.db.get_session(gw.session_id())["title"] == "Garden project"
        assert await gw.say("/title") == ["This conversation is titled “Garden project”."]
        await gw.say("hi", chat_id="200", user_id="200")
        # someone else's session has it: the refusal must not tell that such a conversation exists
        reply = await gw.say("/title garden project", chat_id="200", user_id="200")
        assert reply == ["That title can't be used here; pick another."]
        assert (await gw.say("/new GARDEN PROJECT", chat_id="200", user_id="200")) == reply
        # their own: say why, as before
        await gw.say("/new")
        reply = await gw.say("/title garden PROJECT")
        assert reply == ["Another conversation is already titled “garden PROJECT”. Pick a different title."]


async def test_undo_hides_exchanges_but_keeps_them(tmp_path):
    async with Gateway(tmp_path) as gw:
        for text in ("one", "two", "three"):
            await gw.say(text)
        sid = gw.session_id()
        assert sid in gw.runner.cache
        assert await gw.say("/undo") == [
            "Undid the last exchange (2 messages). They are hidden from this conversation but stay in the history."
        ]
        assert sid not in gw.runner.cache
        assert [m["content"] for m in gw.messages(sid)] == ["one", "echo: one", "two", "echo: two"]
        assert len(gw.messages(sid, include_inactive=True)) == 6
        assert (await gw.say("/undo 2"))[0].startswith("Undid the last 2 exchanges (4 messages)")
        assert await gw.say("/undo") == ["Nothing to undo in this conversation."]
        assert (await gw.say("/undo lots"))[0].startswith("Usage: /undo [n]")
        await gw.say("after")
        assert [m["content"] for m in gw.fake.requests[-1]["messages"][1:]] == ["after"]


async def test_retry_reruns_last_message_and_keeps_old_reply_searchable(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.fake.push("a zebra answer")
        await gw.say("describe an animal")
        sid = gw.session_id()
        gw.fake.push("a giraffe answer")
        assert await gw.say("/retry") == ["a giraffe answer"]
        assert [m["content"] for m in gw.messages(sid)] == ["describe an animal", "a giraffe answer"]
        # the model did not see the replaced exchange
        assert [m["content"] for m in gw.fake.requests[-1]["messages"][1:]] == ["describe an animal"]
        hits = gw.db.search_messages("zebra")
        assert [h["session_id"] for h in hits] == [sid]
        assert await gw.say("/retry", chat_id="300", user_id="300") == [
            "Nothing to retry: this conversation has no message of yours yet."
        ]


async def test_status(tmp_path):
    async with Gateway(tmp_path) as gw:
        assert (await gw.say("/status"))[0].startswith("No conversation yet")
        await gw.say("hello")
        await gw.say("/title Status check")
        text = (await gw.say("/status"))[0]
        sid = gw.session_id()
        s = gw.db.get_session(sid)
        assert f"Session: {sid}" in text and "Title: Status check" in text and "Messages: 2" in text
        assert f"Tokens: {s['input_tokens']} in, {s['output_tokens']} out" in text and s["input_tokens"] > 0
        assert "fake-model" in text


async def test_whoami_explains_key_and_reset(tmp_path):
    from gateway.sessions.reset import ResetPolicies, ResetPolicy

    policies = ResetPolicies(default=ResetPolicy(mode="idle", idle_minutes=60))
    async with Gateway(tmp_path, policies=policies) as gw:
        await gw.say("hello", chat_id="-5", user_id="42", chat_type="group", mentioned=True, user_name="Ana")
        text = (await gw.say("/whoami", chat_id="-5", user_id="42", chat_type="group", user_name="Ana"))[0]
        assert "Ana (id 42 on telegram)" in text
        assert "Session key: agent:main:telegram:group:-5:42" in text
        assert "each member has their own conversation" in text
        assert "Reset policy: resets after 1 hour idle." in text
        assert "Next reset:" in text and gw.session_id("-5", "42", "group") in text
