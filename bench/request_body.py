"""CPU of one chat-completion call through the official openai client, by how the body is handed over.

    python -m bench.request_body [--history 10] [--calls 1000]

The SDK runs every argument of `create()` through its request transform, which walks each nested
dict against the request's TypedDicts (key aliases, date and file encodings); for a chat request
that is an identity, but it costs per message and per tool schema. `extra_body` is sent as given.
Compared here, on one conversation of `--history` user/assistant pairs plus a long system prompt
and the gateway's two tool schemas, answered in-process at once (bench/model.py's instant model):
- `arguments`: `create(messages=..., tools=...)`, the SDK's documented call;
- `extra_body`: `create(messages=[], extra_body={"messages": ..., "tools": ...})`, what agent.llm
  sends; the wire body is the same (tests/agent/test_llm.py compares them);
each unstreamed and through `with_streaming_response` (the gateway's path). Printed: CPU
microseconds per call (process time, so other processes on the machine do not count).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, Awaitable, Callable

import openai

from bench.model import instant_client
from gateway.runtime.agent_factory import default_tools


def conversation(pairs: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are chinwag. " * 200}]
    for i in range(pairs):
        messages.append({"role": "user", "content": f"hello from chat 1, message {i} " * 5})
        messages.append({"role": "assistant", "content": "ok: something " * 5})
    messages.append({"role": "user", "content": "the last message from chat 1"})
    return messages


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--history", type=int, default=10, help="user/assistant pairs before the last message")
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    messages, tools = conversation(args.history), default_tools().schemas()
    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0, http_client=instant_client()
    )
    chat = client.chat.completions
    streamed = {"stream": True, "stream_options": {"include_usage": True}}

    async def arguments() -> None:
        await chat.create(model="m", messages=messages, tools=tools)

    async def extra_body() -> None:
        await chat.create(model="m", messages=[], extra_body={"messages": messages, "tools": tools})

    async def arguments_streamed() -> None:
        async with chat.with_streaming_response.create(model="m", messages=messages, tools=tools, **streamed) as r:
            await r.read()

    async def extra_body_streamed() -> None:
        body = {"messages": messages, "tools": tools}
        async with chat.with_streaming_response.create(model="m", messages=[], extra_body=body, **streamed) as r:
            await r.read()

    ways: list[Callable[[], Awaitable[None]]] = [arguments, extra_body, arguments_streamed, extra_body_streamed]
    print(f"{len(messages)} messages, {len(tools)} tools, {args.calls} calls each, openai {openai.__version__}")
    for way in ways:
        for _ in range(50):  # warm caches (the SDK's get_type_hints is lru-cached)
            await way()
        started = time.process_time()
        for _ in range(args.calls):
            await way()
        per_call = (time.process_time() - started) / args.calls
        print(f"   {way.__name__:<20} {per_call * 1e6:7.0f} us CPU per call")
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
