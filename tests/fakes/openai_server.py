"""A fake OpenAI-compatible endpoint on 127.0.0.1, for running the real `openai` client in tests.

    async with FakeOpenAI() as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
        fake.push("hello")                                   # plain text reply
        fake.push(Reply(tool_calls=[ToolCall("memory", {"action": "add"})]))
        fake.push(Reply(status=429, error="slow down"))      # an API error
        fake.push(lambda body: "computed from " + body["model"])
        ...
        fake.requests        # every POST /v1/chat/completions body (parsed JSON), in order
        fake.headers         # the matching request headers
        fake.peers           # the client address of each request (a reused connection keeps its port)

With nothing queued, the reply is "echo: <last user message>". `fake.delay` slows every reply;
`fake.gate` (an asyncio.Event) makes every reply wait until it is set; `Reply.wait` does the same
for one reply. `await fake.wait_requests(n)` waits until n requests have arrived.
Streaming (`"stream": true`) is served as server-sent events, in chunks, like the real API.

`POST /v1/embeddings` answers with deterministic vectors: by default `hashed_embedding` (each
word adds ±1 to a dimension chosen by its hash, so texts sharing words are close, and the same
text always gets the same vector); `fake.embed = fn(texts, model) -> vectors` puts another model
behind it; `fake.embedding_status = 500` makes every embeddings call fail. Bodies are kept in
`fake.embedding_requests`. Both `encoding_format` "float" and "base64" are served.

`fake.chunk_delay` (or `Reply.chunk_delay`) sleeps between streamed chunks, so a reply can take
seconds to write; `Reply.pause_after=n` with `Reply.resume` (an asyncio.Event) stops a stream after
its first n characters until the event is set (`await fake.paused.wait()` says it got there).
A stream can go wrong after its text: `Reply.stream_error` sends an error event (`data: {"error":
{...}}`, as OpenAI does when a request fails mid-stream) and ends; `Reply.stream_cut` drops the
connection instead, with no `[DONE]`; `Reply.stream_raw` is sent as-is in place of the chunks;
`Reply.ignore_stream` answers one JSON completion as some compatible servers do.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from aiohttp import web

from tests.fakes.loopback import Served, serve


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)  # a str is sent verbatim (bad JSON tests)
    id: str | None = None


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    status: int = 200
    error: str | dict[str, Any] | None = None  # body message for status >= 400 (dict sent as-is)
    delay: float = 0.0
    wait: asyncio.Event | None = None
    finish_reason: str | None = None  # default: "tool_calls" when there are tool calls, else "stop"
    usage: tuple[int, int] | None = None  # (prompt, completion); default estimated from lengths
    headers: dict[str, str] = field(default_factory=dict)
    reasoning: str | None = None  # sent as `reasoning_content` like several compatible servers
    raw: str | None = None  # a raw (possibly broken) response body, sent with `status`
    chunk_delay: float | None = None  # seconds between streamed chunks (default: the fake's)
    pause_after: int | None = None  # streamed characters after which the stream waits for `resume`
    resume: asyncio.Event | None = None
    stream_error: str | dict[str, Any] | None = None  # an error event after the text (dict sent as-is)
    stream_cut: bool = False  # the connection drops after the text: no finish, no [DONE]
    stream_raw: bytes | None = None  # a raw event-stream body, sent in place of the chunks
    ignore_stream: bool = False  # answer one JSON completion even when a stream was asked for


Script = Union[Reply, str, Callable[[dict[str, Any]], Any]]

EMBEDDING_DIM = 64


def hashed_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic bag-of-words vector: every lower-cased word adds ±1 to one dimension."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % dim] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def _estimate(text: str) -> int:
    return max(1, len(text) // 4)


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content or ""
    return ""


class FakeOpenAI:
    def __init__(self, models: tuple[str, ...] = ("fake-model",)) -> None:
        self.models = models
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.peers: list[Any] = []  # the client's (host, port) per request: one port = one reused connection
        self.delay: float = 0.0
        self.gate: asyncio.Event | None = None
        self.chunk_size = 4  # characters per streamed content chunk
        self.chunk_delay = 0.0  # seconds between streamed chunks
        self.paused = asyncio.Event()  # set when a stream stops at its Reply.pause_after
        self.streams_done = 0  # streamed replies written to the end
        self._script: deque[Script] = deque()
        # /audio/transcriptions: each upload recorded as {"model", "file_name", "mime_type", "data"};
        # the reply is `transcript` (or an HTTP error when `transcription_status` >= 400)
        self.transcriptions: list[dict[str, Any]] = []
        self.transcript = "hello from a voice note"
        self.transcription_status = 200
        self._arrived = asyncio.Condition()
        self._served: Served | None = None
        self._counter = 0
        self.port = 0
        self.embed: Callable[[list[str], str], list[list[float]]] = lambda texts, model: [
            hashed_embedding(t) for t in texts
        ]
        self.embedding_status = 200
        self.embedding_requests: list[dict[str, Any]] = []

    # --- scripting -----------------------------------------------------------------------
    def push(self, *items: Script) -> None:
        self._script.extend(items)

    @property
    def pending(self) -> int:
        return len(self._script)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def wait_requests(self, n: int, timeout: float = 5.0) -> None:
        async def _wait() -> None:
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.requests) >= n)

        await asyncio.wait_for(_wait(), timeout)

    # --- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> "FakeOpenAI":
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._served = await serve(app, handle_signals=False)
        self.port = self._served.port
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.gate is not None:
            self.gate.set()  # release anything still parked so shutdown is quick
        if self._served is not None:
            await self._served.close()
            self._served = None

    # --- handlers ------------------------------------------------------------------------
    async def _transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        data = upload.file.read() if hasattr(upload, "file") else b""
        self.transcriptions.append(
            {
                "model": form.get("model"),
                "file_name": getattr(upload, "filename", None),
                "mime_type": getattr(upload, "content_type", None),
                "data": data,
            }
        )
        if self.transcription_status >= 400:
            return web.json_response({"error": {"message": "cannot transcribe"}}, status=self.transcription_status)
        return web.json_response({"text": self.transcript})

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _embeddings(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        self.embedding_requests.append(body)
        if self.embedding_status >= 400:
            error = {"message": f"error {self.embedding_status}", "type": "server_error", "code": None}
            return web.json_response({"error": error}, status=self.embedding_status)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return web.json_response({"error": {"message": "input must be a string or strings"}}, status=400)
        model = str(body.get("model") or "")
        vectors = await asyncio.to_thread(self.embed, texts, model)
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() if as_base64 else v,
            }
            for i, v in enumerate(vectors)
        ]
        tokens = sum(_estimate(t) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return web.json_response({"object": "list", "data": data, "model": model, "usage": usage})

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        item: Any = self._script.popleft() if self._script else None
        if callable(item) and not isinstance(item, Reply):
            item = item(body)
        if item is None:
            return Reply(text="echo: " + _last_user_text(body))
        if isinstance(item, str):
            return Reply(text=item)
        if isinstance(item, Reply):
            return item
        raise TypeError(f"unsupported scripted reply {item!r}")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        reply = self._next_reply(body)
        async with self._arrived:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
            self._arrived.notify_all()
        if self.delay or reply.delay:
            await asyncio.sleep(self.delay + reply.delay)
        for event in (self.gate, reply.wait):
            if event is not None:
                await event.wait()

        if reply.raw is not None:
            return web.Response(text=reply.raw, status=reply.status, content_type="application/json")
        if reply.status >= 400:
            error = (
                reply.error
                if isinstance(reply.error, dict)
                else {
                    "message": reply.error or f"error {reply.status}",
                    "type": "server_error" if reply.status >= 500 else "invalid_request_error",
                    "code": None,
                }
            )
            return web.json_response({"error": error}, status=reply.status, headers=reply.headers)
        if body.get("stream") and not reply.ignore_stream:
            return await self._stream(request, body, reply)
        return web.json_response(self._completion(body, reply), headers=reply.headers)

    def _ids(self, reply: Reply) -> list[str]:
        ids = []
        for call in reply.tool_calls:
            self._counter += 1
            ids.append(call.id if call.id is not None else f"call_{self._counter}")  # "" = a server that omits ids
        return ids

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        if reply.usage is not None:
            prompt, completion = reply.usage
        else:
            prompt = _estimate(json.dumps(body.get("messages") or [], ensure_ascii=False))
            out = (reply.text or "") + "".join(
                c.name + (c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments))
                for c in reply.tool_calls
            )
            completion = _estimate(out)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    @staticmethod
    def _args(call: ToolCall) -> str:
        return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)

    def _finish(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": c.name, "arguments": self._args(c)}}
                for cid, c in zip(self._ids(reply), reply.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": self._usage(body, reply),
        }

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **reply.headers})
        await response.prepare(request)
        base = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
        }

        async def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        if reply.stream_raw is not None:
            await response.write(reply.stream_raw)
            await response.write_eof()
            self.streams_done += 1
            return response
        await send({"role": "assistant", "content": ""})
        text = reply.text or ""
        delay = self.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
        for i in range(0, len(text), self.chunk_size):
            if reply.pause_after is not None and i >= reply.pause_after and not self.paused.is_set():
                self.paused.set()
                if reply.resume is not None:
                    await reply.resume.wait()
            if delay and i:
                await asyncio.sleep(delay)
            await send({"content": text[i : i + self.chunk_size]})
        if reply.stream_error is not None:
            error = reply.stream_error
            if not isinstance(error, dict):
                error = {"error": {"message": error, "type": "server_error", "code": None}}
            await response.write(f"data: {json.dumps(error)}\n\n".encode())
            await response.write_eof()
            return response
        if reply.stream_cut:
            assert request.transport is not None
            request.transport.close()  # mid-body: the chunked response never gets its last chunk
            return response
        for index, (cid, call) in enumerate(zip(self._ids(reply), reply.tool_calls)):
            args = self._args(call)
            half = len(args) // 2  # arguments arrive in pieces, as they do from real servers
            await send(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": cid,
                            "type": "function",
                            "function": {"name": call.name, "arguments": args[:half]},
                        }
                    ]
                }
            )
            await send({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})
        await send({}, self._finish(reply))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {**base, "choices": [], "usage": self._usage(body, reply)}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.streams_done += 1
        return response
