"""agent.loop with a TurnStream: the real AsyncOpenAI client streams from FakeOpenAI (SSE)."""

from __future__ import annotations

import asyncio

import pytest

from agent.llm import ModelSettings, make_client
from agent.loop import Agent, _rearming
from agent.tools import Tool, ToolContext, ToolRegistry
from gateway.source import SessionSource
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

SOURCE = SessionSource(platform="telegram", chat_id="7", chat_type="dm", user_id="7", user_name="Ana")


async def add_handler(args: dict, ctx: ToolContext) -> str:
    return str(args["a"] + args["b"])


ADD = Tool("add", "add", {"type": "object", "properties": {"a": {"type": "number"}}}, add_handler)


class Stream:
    """A TurnStream that records what it is told: one list of pieces per model call."""

    def __init__(self) -> None:
        self.steps: list[list[str]] = []
        self.tools: list[str] = []
        self.first = asyncio.Event()

    async def step(self) -> None:
        self.steps.append([])

    async def text(self, piece: str) -> None:
        self.steps[-1].append(piece)
        self.first.set()

    async def tool(self, name: str) -> None:
        self.tools.append(name)


@pytest.fixture
async def fake():
    async with FakeOpenAI() as server:
        yield server


def make_agent(fake: FakeOpenAI, tools=(), **kw) -> Agent:
    settings = ModelSettings(base_url=fake.base_url, api_key="k", name="fake-model", timeout=10)
    return Agent(make_client(settings), settings, ToolRegistry(list(tools)), "SYS", retry_backoff=0.01, **kw)


async def test_text_arrives_in_pieces_before_the_model_finishes_and_only_the_answer_is_a_message(fake):
    resume = asyncio.Event()
    fake.push(Reply(text="The first sentence. And then the rest of it.", pause_after=8, resume=resume))
    agent = make_agent(fake)
    stream, messages = Stream(), []

    async def on_message(m: dict) -> None:
        messages.append(m)

    turn = asyncio.create_task(
        agent.run_turn([], "hi", ToolContext(session_id="s", source=SOURCE), on_message, None, stream)
    )
    await asyncio.wait_for(fake.paused.wait(), 5)
    await asyncio.wait_for(stream.first.wait(), 5)
    assert not turn.done() and fake.streams_done == 0  # text is visible while the model still writes
    resume.set()
    result = await turn
    await agent.close()
    assert "".join(stream.steps[0]) == result.text == "The first sentence. And then the rest of it."
    assert len(stream.steps[0]) > 1 and fake.requests[0]["stream"] is True
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[1]["content"] == result.text


async def test_tool_calls_stream_as_deltas_and_each_model_call_is_a_step(fake):
    fake.push(
        Reply(text="Let me add.", tool_calls=[ToolCall("add", {"a": 2, "b": 3}, id="c1")]),
        Reply(text="It is 5."),
    )
    agent = make_agent(fake, [ADD])
    stream, messages = Stream(), []

    async def on_message(m: dict) -> None:
        messages.append(m)

    result = await agent.run_turn([], "2+3?", ToolContext(session_id="s", source=SOURCE), on_message, None, stream)
    await agent.close()
    assert result.text == "It is 5." and stream.tools == ["add"]
    assert ["".join(s) for s in stream.steps] == ["Let me add.", "It is 5."]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}


async def test_a_retried_call_starts_its_text_again(fake):
    fake.push(Reply(status=500, error="boom"), Reply(text="fine now"))
    agent = make_agent(fake)
    stream = Stream()

    async def on_message(m: dict) -> None:
        pass

    result = await agent.run_turn([], "x", ToolContext(session_id="s", source=SOURCE), on_message, None, stream)
    await agent.close()
    assert result.text == "fine now" and [("".join(s)) for s in stream.steps] == ["", "fine now"]


async def test_a_stopped_turn_raises_cancelled_and_stores_no_partial_answer(fake):
    resume = asyncio.Event()
    fake.push(Reply(text="Half of an answer that never ends", pause_after=8, resume=resume))
    agent = make_agent(fake)
    stream, messages = Stream(), []

    async def on_message(m: dict) -> None:
        messages.append(m)

    turn = asyncio.create_task(
        agent.run_turn([], "x", ToolContext(session_id="s", source=SOURCE), on_message, None, stream)
    )
    await asyncio.wait_for(stream.first.wait(), 5)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    resume.set()
    await agent.close()
    assert [m["role"] for m in messages] == ["user"] and "".join(stream.steps[0]).startswith("Half")


async def test_each_piece_rearms_the_backstop_so_a_long_stream_is_not_cut_off():
    stream, pieces_done = Stream(), False
    await stream.step()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3) as backstop:
            on_delta = _rearming(stream, backstop, 0.3)
            for _ in range(8):  # 0.8 s of pieces against a 0.3 s backstop
                await on_delta("x")
                await asyncio.sleep(0.1)
            pieces_done = True
            await asyncio.sleep(1.0)  # the pieces stop: the backstop fires
    assert pieces_done and "".join(stream.steps[0]) == "x" * 8
