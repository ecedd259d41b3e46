"""Sessions through the runner: resets with a controllable clock, the reset notice, dedup across a
restart, compression lineage, and a tool-calling turn that uses session_search."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import datetime, timezone

import pytest

from gateway.sessions.reset import ResetPolicies, ResetPolicy
from tests.fakes.gateway_harness import Clock, Gateway
from tests.fakes.openai_server import Reply, ToolCall


def utc(*args) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


async def test_idle_reset_tells_how_to_resume(tmp_path):
    clock = Clock(utc(2026, 5, 1, 12, 0))
    policies = ResetPolicies(default=ResetPolicy(mode="idle", idle_minutes=30))
    async with Gateway(tmp_path, policies=policies, clock=clock) as gw:
        await gw.say("/title Garden")
        await gw.say("plant tomatoes")
        first = gw.session_id()
        clock.advance(29 * 60)
        assert await gw.say("and basil") == ["echo: and basil"]
        assert gw.session_id() == first
        clock.advance(31 * 60)
        replies = await gw.say("new topic")
        assert replies == [
            "Started a new conversation: the previous one had been idle for a while. "
            "To continue the previous one, send /resume Garden",
            "echo: new topic",
        ]
        second = gw.session_id()
        assert second != first and gw.db.get_session(first)["end_reason"] == "idle"
        assert [m["content"] for m in gw.fake.requests[-1]["messages"][1:]] == ["new topic"]
        assert first not in gw.runner.cache  # the old agent went with its session
        assert (await gw.say("/resume Garden"))[0].startswith(f"Resumed “Garden” ({first})")
        await gw.say("back")
        assert [m["content"] for m in gw.fake.requests[-1]["messages"][1:]][-1] == "back"
        assert "plant tomatoes" in [m["content"] for m in gw.fake.requests[-1]["messages"]]


async def test_daily_reset_across_a_dst_change(tmp_path):
    # New York springs forward on 2026-03-08 at 02:00 EST -> 03:00 EDT. The 04:00 reset that day
    # is 08:00 UTC (EDT), not 09:00 UTC as a fixed EST offset would put it.
    clock = Clock(utc(2026, 3, 8, 4, 0))  # 23:00 EST on the 7th
    policies = ResetPolicies(default=ResetPolicy(mode="daily", daily_hour=4, timezone="America/New_York"))
    async with Gateway(tmp_path, policies=policies, clock=clock) as gw:
        await gw.say("late night")
        first = gw.session_id()
        whoami = (await gw.say("/whoami"))[0]
        assert "Next reset: 2026-03-08 04:00 EDT (the daily reset)" in whoami
        clock.now = utc(2026, 3, 8, 7, 59)  # 03:59 EDT
        assert await gw.say("still up") == ["echo: still up"]
        assert gw.session_id() == first
        clock.now = utc(2026, 3, 8, 8, 1)  # 04:01 EDT
        replies = await gw.say("good morning")
        assert replies[0].startswith("Started a new conversation: it is a new day.")
        assert replies[0].endswith(f"/resume {first}")
        assert gw.session_id() != first


async def test_dedup_survives_restart(tmp_path):
    db_path = tmp_path / "shared.db"
    async with Gateway(tmp_path / "a", db_path=db_path) as gw:
        msg = gw.adapter.message("hello once", message_id="evt-1")
        await gw.adapter.deliver(msg)
        await gw.runner.drain()
        await gw.adapter.deliver(msg)  # an immediate redelivery
        await gw.runner.drain()
        assert gw.adapter.texts() == ["echo: hello once"]
    async with Gateway(tmp_path / "b", db_path=db_path) as gw:  # a new runner on the same DB
        await gw.adapter.deliver(msg)
        await gw.runner.drain()
        assert gw.adapter.texts() == [] and gw.fake.requests == []
        assert await gw.say("something new", message_id="evt-2") == ["echo: something new"]
        users = [m["content"] for m in gw.messages(gw.session_id()) if m["role"] == "user"]
        assert users == ["hello once", "something new"]


async def test_a_message_that_could_not_be_stored_is_answered_when_redelivered(tmp_path):
    """The inbox commit comes before the acknowledgement: when the disk is full and storing fails,
    the intake raises (the adapter does not acknowledge), nothing is remembered, and the
    platform's redelivery is answered later, once."""
    db_path = tmp_path / "shared.db"
    async with Gateway(tmp_path / "a", db_path=db_path) as gw:
        assert await gw.say("warm up", message_id="evt-1") == ["echo: warm up"]
        pages = gw.db.read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        gw.db.write(lambda conn, ev: conn.execute(f"PRAGMA max_page_count = {pages + 1}"))  # the disk fills up
        big = gw.adapter.message("a long message " + "x" * 50_000, message_id="evt-2")
        with pytest.raises(sqlite3.OperationalError):
            await gw.adapter.deliver(big)  # not stored: not acknowledged
        await gw.runner.drain()
        assert gw.adapter.texts() == ["echo: warm up"]  # nothing half-done
        gw.db.write(lambda conn, ev: conn.execute("PRAGMA max_page_count = 1073741823"))
    async with Gateway(tmp_path / "b", db_path=db_path) as gw:  # restarted; the platform redelivers
        await gw.adapter.deliver(big)
        await gw.runner.drain()
        answer = gw.adapter.texts()
        assert "".join(answer) == "echo: " + big.text  # (in several parts: it is long)
        await gw.adapter.deliver(big)  # and only once
        await gw.runner.drain()
        assert gw.adapter.texts() == answer


async def test_compress_command_makes_child_with_lineage(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("/title Lisbon trip")
        await gw.say("I want to visit Lisbon in May")
        await gw.say("on a small budget")  # (one exchange is too short to compress: issue 15.11)
        parent = gw.session_id()
        gw.fake.push("SUMMARY: Lisbon in May, budget open.")
        reply = (await gw.say("/compress"))[0]
        child = gw.session_id()
        assert child != parent
        assert reply.startswith(f"I summarised it into a new session “Lisbon trip #2” ({child})")
        c = gw.db.get_session(child)
        assert c["parent_session_id"] == parent and c["title"] == "Lisbon trip #2"
        assert gw.db.get_session(parent)["end_reason"] == "compressed"
        assert gw.db.get_messages(parent) == []  # compacted: out of the conversation...
        assert gw.db.search_messages("Lisbon")  # ...still searchable
        await gw.say("what about hotels?")
        body = gw.fake.requests[-1]
        assert "SUMMARY: Lisbon in May" in body["messages"][0]["content"]
        assert [m["content"] for m in body["messages"][1:]] == ["what about hotels?"]
        assert gw.db.get_lineage(child) == [parent, child]


# llama.cpp's answer to a request past its slot's context, as its server sends it (seen from
# tests/runtime/test_real_model.py); OpenAI's says it in `code` and words.
LLAMA_OVERFLOW = {
    "code": 400,
    "message": "request (1100 tokens) exceeds the available context size (1024 tokens), try increasing it",
    "type": "exceed_context_size_error",
    "n_prompt_tokens": 1100,
    "n_ctx": 1024,
}
OPENAI_OVERFLOW = {
    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    "type": "invalid_request_error",
    "code": "context_length_exceeded",
}


@pytest.mark.parametrize("overflow", [LLAMA_OVERFLOW, OPENAI_OVERFLOW], ids=["llama.cpp", "openai"])
async def test_a_context_length_error_compresses_and_answers_once_in_the_child(tmp_path, overflow):
    async with Gateway(tmp_path, gateway={"streaming": "off"}) as gw:
        await gw.say("I want to visit Lisbon in May")
        await gw.say("on a small budget")
        parent = gw.session_id()
        gw.fake.push(Reply(status=400, error=overflow), "SUMMARY: Lisbon in May, small budget.", "Try the Alfama.")
        replies = await gw.say("where should I stay?")
        child = gw.session_id()
        assert child != parent and gw.db.get_session(child)["parent_session_id"] == parent
        assert replies[0].startswith("This conversation was getting long, so I summarised it") and len(replies) == 2
        assert replies[1] == "Try the Alfama."
        summary_request = gw.fake.requests[-2]
        assert summary_request["max_tokens"] == min(
            2000, overflow.get("n_ctx", 8192) // 8
        )  # sized to the server's window
        assert "where should I stay?" not in json.dumps(summary_request)  # the failed copy is not summarised
        assert [m["content"] for m in gw.messages(child) if m["role"] == "user"] == ["where should I stay?"]


async def test_a_single_message_past_the_context_gets_the_apology(tmp_path):
    async with Gateway(tmp_path, gateway={"streaming": "off"}) as gw:
        gw.fake.push(Reply(status=400, error=LLAMA_OVERFLOW))
        [reply] = await gw.say("a very long first message")
        assert reply.startswith("Sorry, I couldn't get an answer from the model") and "context size" in reply
        assert len(gw.fake.requests) == 1  # nothing to summarise: no second try


async def test_compress_without_model_or_history(tmp_path):
    async with Gateway(tmp_path, model=False) as gw:
        assert (await gw.say("/compress"))[0].startswith("No model is configured")
    async with Gateway(tmp_path / "m") as gw:
        assert (await gw.say("/compress"))[0].startswith("Nothing to compress")


async def test_automatic_compression_near_the_context_window(tmp_path):
    async with Gateway(tmp_path, model_options={"context_window": 2048}) as gw:
        await gw.say("/title Big job")
        await gw.say("short start")
        parent = gw.session_id()
        assert gw.session_id() == parent
        gw.fake.push("ok, noted")  # the turn's answer
        gw.fake.push("SUMMARY: a long log was shared")  # the compression summary
        replies = await gw.say("here is the log:\n" + "error line 42 in worker\n" * 300)
        assert replies[0] == "ok, noted"
        assert replies[1].startswith(
            "This conversation was getting long, so I summarised it into a new session “Big job #2”"
        )
        child = gw.session_id()
        assert gw.db.get_session(child)["parent_session_id"] == parent
        await gw.say("continue")
        assert "SUMMARY: a long log" in gw.fake.requests[-1]["messages"][0]["content"]


async def test_tool_calling_turn_uses_session_search(tmp_path):
    platforms = {"telegram": {"token": "t", "allowed_users": ["*"]}}
    async with Gateway(tmp_path, platforms=platforms) as gw:
        await gw.say("/new Pipeline")
        await gw.say("the deploy failed with error E1234 on host build-7")
        earlier = gw.session_id()
        await gw.say("/new")
        # a stranger's conversation with the same words must not be recalled for this person
        await gw.say("E1234 happened to me too", chat_id="9", user_id="9")
        gw.fake.push(Reply(tool_calls=[ToolCall("session_search", {"query": "E1234 deploy"})]))
        gw.fake.push("RECAP: deploy failed with E1234 on build-7")  # the recap of the found session
        gw.fake.push(lambda body: "final: " + body["messages"][-1]["content"][:40])
        replies = await gw.say("what was that deploy error again?")
        assert replies and replies[0].startswith("final: ")
        now = gw.session_id()
        rows = gw.messages(now)
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
        call = json.loads(rows[1]["tool_calls"])[0]
        assert call["function"]["name"] == "session_search"
        assert rows[2]["tool_name"] == "session_search"
        result = json.loads(rows[2]["content"])
        assert [r["session_id"] for r in result["results"]] == [earlier]
        assert "RECAP" in result["results"][0]["summary"]


async def test_redelivery_during_the_turn_changes_nothing(tmp_path):
    async with Gateway(tmp_path, gateway={"busy_mode": "interrupt"}) as gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="the one answer", wait=release))
        msg = gw.adapter.message("question", message_id="evt-9")
        await gw.adapter.deliver(msg)
        await gw.fake.wait_requests(1)
        await gw.adapter.deliver(msg)  # redelivered while it is being answered: no interrupt, no ack
        await asyncio.sleep(0)
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts() == ["the one answer"]
        rows = gw.db.read(
            lambda conn: conn.execute("SELECT platform, event_id FROM inbox WHERE event_id = 'evt-9'").fetchall()
        )
        assert [tuple(r) for r in rows] == [("telegram", "evt-9")]  # the inbox's one entry is the dedup
