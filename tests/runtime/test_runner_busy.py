"""Busy chats: ordering per chat, concurrency across chats, queue / interrupt / steer, the pending
cap, the acknowledgement, and /stop getting through."""

from __future__ import annotations

import asyncio

from gateway.runtime.lanes import ACK_TEXT, pending_cap_text
from tests.fakes.chat_adapter import ChatAdapter
from tests.fakes.gateway_harness import Gateway
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import Reply, ToolCall


def pending(gw) -> int:
    return sum(len(lane.pending) for lane in gw.runner.lanes.values())


def busy(mode: str, **gateway) -> dict:
    return {"gateway": {"busy_mode": mode, **gateway}}


async def test_each_chat_in_order_and_chats_concurrently(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.fake.gate = asyncio.Event()
        chats = [str(i) for i in range(8)]
        # all at once (each intake waits for its inbox commit: sequential awaits would let each
        # first turn start before the next message arrives)
        await asyncio.gather(
            *(gw.adapter.inject(f"c{chat} m{n}", chat_id=chat, user_id=chat) for n in range(3) for chat in chats)
        )
        # every chat's first turn is in flight at once: chats do not wait for each other
        await gw.fake.wait_requests(len(chats))
        await wait_until(lambda: pending(gw) == 2 * len(chats))  # the rest taken in, waiting
        assert len(gw.fake.requests) == len(chats), "a chat started its second turn before its first ended"
        gw.fake.gate.set()
        await gw.runner.drain()
        for chat in chats:
            assert gw.adapter.texts(chat) == [f"echo: c{chat} m{n}" for n in range(3)]
            rows = gw.messages(gw.session_id(chat, chat))
            assert [r["content"] for r in rows if r["role"] == "user"] == [f"c{chat} m{n}" for n in range(3)]


async def test_queue_mode_runs_after_with_one_ack(tmp_path):
    async with Gateway(tmp_path, **busy("queue")) as gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="first answer", wait=release))
        await gw.adapter.inject("one")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("two")
        await gw.adapter.inject("three")
        await gw.adapter.wait_sent(1)
        assert gw.adapter.texts() == [ACK_TEXT["queue"]]  # one acknowledgement, not two
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts() == [ACK_TEXT["queue"], "first answer", "echo: two", "echo: three"]


async def test_a_message_sent_as_the_running_job_ends_gets_no_ack(tmp_path):
    """The reply is often on screen while its job is still finishing: a message typed then is not
    told "still working on your previous message"; it is simply answered next."""
    async with Gateway(tmp_path, **busy("queue")) as gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="first answer", wait=release))
        await gw.adapter.inject("one")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("two")
        await asyncio.sleep(0.1)  # "two" is queued behind the running turn, within the grace
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts() == ["first answer", "echo: two"]


async def test_ack_repeats_only_after_30_seconds(tmp_path):
    async with Gateway(tmp_path, **busy("queue", max_pending=10)) as gw:
        gw.fake.gate = asyncio.Event()
        await gw.adapter.inject("one")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("two")
        await gw.adapter.wait_sent(1)
        gw.clock.advance(29)
        await gw.adapter.inject("three")
        await gw.adapter.inject("four")
        await wait_until(lambda: pending(gw) == 3)
        assert gw.adapter.texts().count(ACK_TEXT["queue"]) == 1
        gw.clock.advance(2)
        await gw.adapter.inject("five")
        await gw.adapter.wait_sent(2)
        assert gw.adapter.texts().count(ACK_TEXT["queue"]) == 2
        gw.fake.gate.set()
        await gw.runner.drain()


async def test_pending_cap_gives_clear_reply(tmp_path):
    async with Gateway(tmp_path, **busy("queue", max_pending=2, busy_ack=False)) as gw:
        gw.fake.gate = asyncio.Event()
        await gw.adapter.inject("one")
        await gw.fake.wait_requests(1)
        for text in ("two", "three", "four"):
            await gw.adapter.inject(text)
        sent = await gw.adapter.wait_sent(1)
        assert sent[0].text == pending_cap_text(2)
        gw.fake.gate.set()
        await gw.runner.drain()
        assert gw.adapter.texts()[1:] == ["echo: one", "echo: two", "echo: three"]
        rows = gw.messages(gw.session_id())
        assert "four" not in [r["content"] for r in rows]


async def test_interrupt_mode_cancels_running_turn(tmp_path):
    async with Gateway(tmp_path, **busy("interrupt")) as gw:
        parked = asyncio.Event()
        gw.fake.push(Reply(text="never shown", wait=parked))
        await gw.adapter.inject("slow question")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("actually, this")
        await gw.runner.drain()
        parked.set()  # let the fake finish the abandoned request
        assert gw.adapter.texts() == [ACK_TEXT["interrupt"], "echo: actually, this"]
        rows = gw.messages(gw.session_id())
        # the interrupted question is kept; no reply was invented for it
        assert [(r["role"], r["content"]) for r in rows] == [
            ("user", "slow question"),
            ("user", "actually, this"),
            ("assistant", "echo: actually, this"),
        ]


async def test_per_platform_busy_mode_overrides_global(tmp_path):
    platforms = {"telegram": {"token": "t", "allowed_users": ["*"], "busy_mode": "interrupt"}}
    async with Gateway(tmp_path, platforms=platforms, **busy("queue")) as gw:
        parked = asyncio.Event()
        gw.fake.push(Reply(text="never shown", wait=parked))
        await gw.adapter.inject("one")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("two")
        await gw.runner.drain()
        parked.set()
        assert gw.adapter.texts() == [ACK_TEXT["interrupt"], "echo: two"]


async def test_steer_mode_hands_text_to_running_turn(tmp_path):
    async with Gateway(tmp_path, **busy("steer")) as gw:
        release = asyncio.Event()
        # the first model call asks for a tool; the steered text must reach the second call
        gw.fake.push(Reply(tool_calls=[ToolCall("memory", {"action": "read", "target": "user"})], wait=release))
        gw.fake.push(lambda body: "saw: " + " | ".join(m["content"] for m in body["messages"] if m["role"] == "user"))
        await gw.adapter.inject("plan my trip", message_id="a")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("to Lisbon, please", message_id="b")
        await gw.adapter.wait_sent(1)
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts() == [ACK_TEXT["steer"], "saw: plan my trip | to Lisbon, please"]
        assert len(gw.fake.requests) == 2  # one turn, no separate turn for the steered text
        rows = gw.messages(gw.session_id())
        users = [(r["content"], r["platform_message_id"]) for r in rows if r["role"] == "user"]
        assert users == [("plan my trip", "a"), ("to Lisbon, please", "b")]
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "user", "assistant"]


async def test_steer_text_the_turn_never_read_runs_next(tmp_path):
    async with Gateway(tmp_path, **busy("steer")) as gw:
        release = asyncio.Event()
        gw.fake.push(Reply(text="done with one", wait=release))  # no further model call to steer into
        await gw.adapter.inject("one")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("two")
        await gw.adapter.wait_sent(1)
        release.set()
        await gw.runner.drain()
        assert gw.adapter.texts() == [ACK_TEXT["steer"], "done with one", "echo: two"]


async def test_stop_gets_through_immediately(tmp_path):
    async with Gateway(tmp_path, **busy("queue", busy_ack=False)) as gw:
        gw.fake.gate = asyncio.Event()
        await gw.adapter.inject("long job")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("queued one")
        await gw.adapter.inject("/stop")
        sent = await gw.adapter.wait_sent(1)  # answered while the model is still blocked
        assert sent[0].text == "Stopped. Dropped 1 waiting message."
        await gw.runner.drain()
        gw.fake.gate.set()
        assert gw.adapter.texts() == ["Stopped. Dropped 1 waiting message."]
        assert await gw.say("/stop") == ["Nothing to stop."]
        assert await gw.say("next") == ["echo: next"]


async def test_stop_in_a_shared_thread_tells_the_others_whose_messages_it_dropped(tmp_path):
    """A thread is one conversation for everyone in it: Ann's /stop cancels Bob's running turn and
    Carol's waiting message too. Ann is told what was stopped; Bob and Carol are each told once,
    in reply to their message, rather than left waiting for an answer that will not come."""
    async with Gateway(tmp_path, **busy("queue", busy_ack=False)) as gw:
        gw.fake.gate = asyncio.Event()

        async def say(user: str, text: str) -> None:
            await gw.adapter.inject(text, "-5", user, "thread", thread_id="9", mentioned=True, user_name=user)

        await say("bob", "long job")
        await gw.fake.wait_requests(1)
        await say("carol", "queued one")
        await say("carol", "queued two")
        await say("ann", "/stop")
        await gw.adapter.wait_sent(3)
        gw.fake.gate.set()
        await gw.runner.drain()
        told = {s.reply_to: s.text for s in gw.adapter.sent}
        assert len(gw.adapter.sent) == 3 and "Stopped. Dropped 2 waiting messages." in told.values()
        others = [text for text in told.values() if not text.startswith("Stopped.")]
        assert len(others) == 2 and all("ann sent /stop" in text for text in others)


async def test_read_only_commands_answer_while_busy(tmp_path):
    async with Gateway(tmp_path) as gw:
        gw.fake.gate = asyncio.Event()
        await gw.adapter.inject("working")
        await gw.fake.wait_requests(1)
        await gw.adapter.inject("/status")
        sent = await gw.adapter.wait_sent(1)
        assert sent[0].text.startswith("Session: ")
        gw.fake.gate.set()
        await gw.runner.drain()
        assert gw.adapter.texts()[-1] == "echo: working"


async def test_a_read_only_command_waits_for_a_command_before_it(tmp_path):
    """`/new` then `/search` sent together: the search runs from the new session, so the
    conversation just left is found (it is no longer the current one)."""
    async with Gateway(tmp_path) as gw:
        await gw.say("the capital of Mongolia is Ulaanbaatar")
        old = gw.session_id()
        # Hold the chat's lock so `/new` is provably still running when `/search` arrives (each
        # intake is committed to the inbox first; the lane then waits for the lock).
        key = gw.db.get_session(old)["session_key"]
        async with gw.runner.store.lock(key):
            await gw.adapter.inject("/new")
            await wait_until(lambda: any(lane.busy for lane in gw.runner.lanes.values()))
            await gw.adapter.inject("/search Mongolia capital")
            await wait_until(lambda: pending(gw) == 1)  # taken in, and waiting behind /new
        await gw.runner.drain()
        started, found = gw.adapter.texts()[-2:]
        assert started.startswith("Started a new conversation") and gw.session_id() != old
        assert f"/resume {old}" in found and "Ulaanbaatar" in found


async def test_the_terminal_answers_read_only_commands_in_order(tmp_path):
    adapter = ChatAdapter("local")
    async with Gateway(tmp_path, adapter=adapter) as gw:
        gw.fake.gate = asyncio.Event()
        await adapter.inject("working", chat_id="me", user_id="me")
        await gw.fake.wait_requests(1)
        await adapter.inject("/help", chat_id="me", user_id="me")
        await wait_until(lambda: pending(gw) == 1)  # taken in, and queued behind the turn
        assert adapter.texts() == []  # behind the turn, not before its answer
        gw.fake.gate.set()
        await gw.runner.drain()
        texts = adapter.texts()
        assert texts[0] == "echo: working" and "/search <words>" in texts[1]


async def test_the_terminal_queues_everything_typed_in_order(tmp_path):
    """Lines piped or typed into the local terminal are one person's script: none is dropped by
    the pending cap, and no acknowledgement interleaves with the answers."""
    adapter = ChatAdapter("local")
    async with Gateway(tmp_path, adapter=adapter, **busy("interrupt", max_pending=2)) as gw:
        gw.fake.gate = asyncio.Event()
        await adapter.inject("line 0", chat_id="me", user_id="me")
        await gw.fake.wait_requests(1)
        for i in range(1, 8):
            await adapter.inject(f"line {i}", chat_id="me", user_id="me")
        gw.fake.gate.set()
        await gw.runner.drain()
        assert adapter.texts() == [f"echo: line {i}" for i in range(8)]
