"""Hostile text through the whole gateway: lone surrogates (valid as escaped JSON, invalid UTF-8) in
inbound text, in model replies, in /title, /new and /search, and numeric command arguments that are
digits to `str.isdigit()` but not to `int()` (`²`). Each gets a real answer, never the generic
error and never silence; and whatever is sent or stored is valid UTF-8."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.runtime.runner import ERROR_TEXT
from tests.fakes.gateway_harness import Gateway

LONE = "\ud800"


def _valid(texts: list[str]) -> bool:
    for text in texts:
        text.encode("utf-8")  # raises on a lone surrogate
    return True


async def test_inbound_text_with_a_lone_surrogate_is_answered_and_stored(tmp_path):
    async with Gateway(tmp_path) as gw:
        replies = await gw.say(f"hi {LONE} there")
        assert replies == ["echo: hi \ufffd there"]
        [user, assistant] = gw.messages(gw.session_id())
        assert user["content"] == "hi \ufffd there" and assistant["content"] == "echo: hi \ufffd there"


async def test_model_reply_with_a_lone_surrogate_is_sent_and_stored(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.fake.push(f"odd {LONE} reply")
        replies = await gw.say("hello")
        assert replies == ["odd \ufffd reply"]
        assert gw.messages(gw.session_id())[-1]["content"] == "odd \ufffd reply"


async def test_title_and_new_with_a_lone_surrogate(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("hello")
        [reply] = await gw.say(f"/title trip {LONE}")
        assert reply != ERROR_TEXT and "trip \ufffd" in reply and _valid([reply])
        assert gw.db.get_session(gw.session_id())["title"] == "trip \ufffd"
        replies = await gw.say(f"/new plan {LONE}")
        assert ERROR_TEXT not in replies and _valid(replies)


async def test_search_with_a_lone_surrogate_answers_in_valid_text(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("hello world")
        replies = await gw.say(f"/search {LONE}world")
        assert replies and ERROR_TEXT not in replies and _valid(replies)


async def test_superscript_digits_are_not_a_number(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("hello")
        [undo] = await gw.say("/undo ²")
        assert undo.startswith("Usage: /undo")
        [resume] = await gw.say("/resume ²")
        assert resume != ERROR_TEXT and "²" in resume
        [undo] = await gw.say("/undo ١")  # an Arabic-Indic digit: int() takes it, the rule does not
        assert undo.startswith("Usage: /undo")


# Any unicode at all, lone surrogates and control characters included, with or without a command
# in front: every message gets a reply (or a clear refusal), the gateway raises nothing, and all
# that leaves it is valid UTF-8.
_ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), min_size=1, max_size=60)
_PREFIX = st.sampled_from(["", "/title ", "/new ", "/search ", "/resume ", "/undo ", "/retry ", "/nosuch "])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=_PREFIX, text=_ANY_TEXT)
async def test_any_unicode_through_the_inbound_path_is_answered(tmp_path_factory, prefix, text):
    async with Gateway(tmp_path_factory.mktemp("gw")) as gw:
        message = prefix + text
        replies = await gw.say(message)
        assert ERROR_TEXT not in replies
        if message.strip():
            assert replies, f"no reply to {message!r}"
        assert _valid(replies)
