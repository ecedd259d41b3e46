"""The model side of bench/gateway.py, reached through the openai client's own `http_client`.

- `instant_client()`: an httpx2 client (the transport library openai 3.x is built on) whose
  transport answers every chat completion in-process, at once: the real client still builds each
  request and parses each reply, so what is measured is the gateway plus the SDK, with no model.
- `serve_model()`: the same answer over HTTP on 127.0.0.1 (an aiohttp server in this process, so its
  serving cost shares the CPU), for the real client's whole network path.
- `TimedTransport`: wraps a transport and adds each model round trip's seconds to `SPENT[chat]`, so
  the time the gateway adds is the latency minus that. The chat is read from the request body
  (the bench's messages say "from chat <n>"), so nothing in the agent is overridden.

The answer is "ok: " + the first 40 characters of the last user message, as a chat completion, or,
when the request asks to stream (the gateway's turns do), as an event stream the way the API sends
it: a chunk with the text, one with the finish reason, one with the usage, then `[DONE]`. (Until this
was added the instant model answered one JSON body to streamed requests too, which agent.llm reads
as a server that ignores `stream` does: a path no real endpoint of the gateway's takes per turn.)
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx2
from aiohttp import web

SPENT: dict[str, float] = {}  # chat id -> model seconds of its current turn
_CHAT = re.compile(rb"from chat (\d+)")


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion for the request `body`."""
    last = next((m.get("content") or "" for m in reversed(body.get("messages") or []) if m.get("role") == "user"), "")
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model") or "bench",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok: " + last[:40]}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def streamed(body: dict[str, Any]) -> bytes:
    """The same answer as a chat.completion.chunk event stream."""
    whole = answer(body)
    head = {"id": whole["id"], "object": "chat.completion.chunk", "created": 0, "model": whole["model"]}
    text = whole["choices"][0]["message"]["content"]
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": whole["usage"]},
    ]
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


EVENT_STREAM = {"content-type": "text/event-stream"}


def _instant(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    if body.get("stream"):
        return httpx2.Response(200, headers=EVENT_STREAM, content=streamed(body))
    return httpx2.Response(200, json=answer(body))


class TimedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        started = time.perf_counter()
        try:
            response = await self.inner.handle_async_request(request)
            await response.aread()  # the whole body is part of the round trip
            return response
        finally:
            chats = _CHAT.findall(request.content)
            if chats:
                chat = chats[-1].decode()
                SPENT[chat] = SPENT.get(chat, 0.0) + time.perf_counter() - started

    async def aclose(self) -> None:
        await self.inner.aclose()


def instant_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(_instant))


def timed_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=TimedTransport(httpx2.AsyncHTTPTransport()))


async def serve_model() -> tuple[web.AppRunner, str]:
    """The answering model over HTTP on 127.0.0.1 (any free port); returns (runner, base_url)."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("stream"):
            return web.Response(body=streamed(body), headers=EVENT_STREAM)
        return web.json_response(answer(body))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/v1"
