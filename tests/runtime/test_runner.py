"""GatewayRunner end to end: ChatAdapter + real SessionDB/SessionStore + FakeOpenAI on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

from agent.llm import NOT_CONFIGURED_TEXT
from tests.fakes.gateway_harness import Gateway
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import Reply


async def test_dm_turn_persists_and_replies(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.fake.push("hi Ana")
        replies = await gw.say("hello there", message_id="m1", user_name="Ana")
        assert replies == ["hi Ana"]
        sid = gw.session_id()
        rows = gw.messages(sid)
        assert [(r["role"], r["content"]) for r in rows] == [("user", "hello there"), ("assistant", "hi Ana")]
        assert rows[0]["user_id"] == "100" and rows[0]["platform_message_id"] == "m1"
        session = gw.db.get_session(sid)
        assert session["source"] == "telegram" and session["input_tokens"] > 0
        # the model saw the system prompt with the chat context, then the message
        body = gw.fake.requests[0]
        assert body["messages"][0]["role"] == "system" and "Ana" in body["messages"][0]["content"]
        assert body["messages"][-1] == {"role": "user", "content": "hello there"}


async def test_typing_hint_while_a_slow_turn_runs(tmp_path):
    async with Gateway(tmp_path) as gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="done", wait=release))
        await gw.adapter.inject("think hard")
        await gw.fake.wait_requests(1)
        await wait_until(lambda: gw.adapter.typing)
        assert gw.adapter.typing[0].chat_id == "100"
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts() == ["done"]


async def test_second_turn_sees_history(tmp_path):
    async with Gateway(tmp_path) as gw:
        await gw.say("my name is Bo")
        await gw.say("what is my name?")
        roles = [(m["role"], m["content"]) for m in gw.fake.requests[1]["messages"][1:]]
        assert roles == [("user", "my name is Bo"), ("assistant", "echo: my name is Bo"), ("user", "what is my name?")]


async def test_long_reply_is_split_at_the_platform_limit(tmp_path):
    from tests.fakes.chat_adapter import ChatAdapter

    adapter = ChatAdapter("telegram", max_message_length=100)
    async with Gateway(tmp_path, adapter=adapter) as gw:
        text = "\n\n".join(f"paragraph {i} " + "x" * 60 for i in range(6))
        gw.fake.push(text)
        replies = await gw.say("long please")
        assert len(replies) > 1 and all(len(r) <= 100 for r in replies)
        assert "".join(replies).replace("\n", "") == text.replace("\n", "")


async def test_no_model_configured_gives_clear_reply_and_commands_work(tmp_path):
    async with Gateway(tmp_path, model=False) as gw:
        replies = await gw.say("hello")
        assert replies == [NOT_CONFIGURED_TEXT]
        sid = gw.session_id()
        assert [r["role"] for r in gw.messages(sid)] == ["user"]  # the message itself is kept
        status = await gw.say("/status")
        assert sid in status[0]
        assert "Model: none configured" in status[0] and "gpt-4o-mini" not in status[0]
        assert "Unknown command" not in (await gw.say("/help"))[0]
        found = await gw.say("/search hello")
        assert "No conversation" in found[0]  # the current session's lineage is excluded


async def test_model_error_becomes_apology(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.fake.push(Reply(status=400, error="context too long"))
        replies = await gw.say("hi")
        assert len(replies) == 1 and replies[0].startswith("Sorry") and "context too long" in replies[0]
        # the gateway keeps working
        assert await gw.say("again") == ["echo: again"]


async def test_model_timeout_becomes_apology(tmp_path):
    async with Gateway(tmp_path, model_options={"timeout_seconds": 1}) as gw:
        parked = asyncio.Event()
        gw.fake.push(Reply(text="too late", wait=parked))
        replies = await gw.say("hi")
        parked.set()
        assert len(replies) == 1 and "did not answer in time" in replies[0]
        assert await gw.say("still there?") == ["echo: still there?"]


async def test_empty_message_gets_a_clear_answer_in_dm_and_silence_in_groups(tmp_path):
    from gateway.runtime.runner import EMPTY_TEXT

    async with Gateway(tmp_path) as gw:
        assert await gw.say("   ") == [EMPTY_TEXT]
        assert await gw.say("", chat_id="-4", chat_type="group", mentioned=True) == []
        assert gw.fake.requests == [] and gw.db.count_sessions() == 0


async def test_metrics_and_readiness(tmp_path):
    from gateway.service.app import build_runner
    from gateway.service.metrics import Metrics

    async with Gateway(tmp_path) as gw:
        metrics = Metrics()
        runner = build_runner(gw.config, gw.db, gw.store, [gw.adapter], clock=gw.clock, metrics=metrics)
        await runner.start()  # the adapter now delivers to this runner
        await gw.adapter.inject("count me", message_id="x1")
        await gw.adapter.deliver(gw.adapter.message("count me", message_id="x1"))
        await runner.drain()
        text = metrics.render()
        assert 'messages_in_total{platform="telegram"} 2' in text
        assert 'messages_out_total{platform="telegram"} 1' in text
        assert "turn_seconds_count 1" in text and "queue_depth 0" in text and "agent_cache_size 1" in text
        assert runner.readiness()["telegram"].ready
        await runner.stop()


async def test_stop_finishes_a_running_turn(tmp_path):
    async with Gateway(tmp_path) as gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="finished", wait=release))
        await gw.adapter.inject("last words")
        await gw.fake.wait_requests(1)
        stopping = asyncio.create_task(gw.runner.stop(timeout=5))
        await asyncio.sleep(0)
        # intake closed first; the turn goes on, and the adapter stays up for its reply
        assert not gw.adapter.stopped and not stopping.done()
        await gw.adapter.inject("too late")  # arrives after intake closed: stored, left to the next start
        release.set()
        await asyncio.wait_for(stopping, 5)
        assert gw.adapter.stopped  # last
        assert gw.adapter.texts() == ["finished"]
        assert [json.loads(row["message"])["text"] for row in gw.db.inbox_unfinished()] == ["too late"]


async def test_stop_cancels_a_turn_that_outlives_the_timeout(tmp_path):
    async with Gateway(tmp_path) as gw:
        parked = asyncio.Event()
        gw.fake.push(Reply(text="never", wait=parked))
        await gw.adapter.inject("endless")
        await gw.fake.wait_requests(1)
        await asyncio.wait_for(gw.runner.stop(timeout=0.2), 5)
        parked.set()
        assert gw.adapter.texts() == []
        assert [m["content"] for m in gw.messages(gw.session_id())] == ["endless"]  # kept
        assert gw.runner.cache_size() == 0


async def test_every_counter_the_readme_names_has_a_sample_from_the_start_and_every_search_is_timed(tmp_path):
    from gateway.service.app import build_runner
    from gateway.service.metrics import Metrics
    from tests.fakes.openai_server import ToolCall

    async with Gateway(tmp_path) as gw:
        metrics = Metrics()
        runner = build_runner(gw.config, gw.db, gw.store, [gw.adapter], clock=gw.clock, metrics=metrics)
        text = metrics.render()
        assert 'chinwag_reruns_total{platform="telegram"} 0' in text
        assert 'chinwag_interrupted_turns_total{action="notify"} 0' in text
        await runner.start()
        await gw.adapter.deliver(gw.adapter.message("/search walrus", message_id="s1"))
        await runner.drain()
        assert "chinwag_search_seconds_count 1" in metrics.render()
        # the agent's session_search is a search too
        gw.fake.push(Reply(tool_calls=[ToolCall("session_search", {"query": "walrus"})]), "none found")
        await gw.adapter.deliver(gw.adapter.message("did we talk about walruses?", message_id="s2"))
        await runner.drain()
        assert "chinwag_search_seconds_count 2" in metrics.render()
        await runner.stop()
