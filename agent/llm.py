"""Model endpoint settings and one call to it, over the official `openai` client.

Settings come from config (`model.*`, and `auxiliary.*` which falls back to `model.*` field by
field) with the environment as a last resort: OPENAI_BASE_URL, OPENAI_API_KEY, CHINWAG_MODEL.
The client is built with `max_retries=0`: the SDK's hidden retries would multiply our own (the
agent loop and the recap code each decide how often to retry), and a turn's wall time must be ours
to bound. The API key never appears in a repr, a log line or an error message.

Streaming is the official client's own raw-stream API: `with_streaming_response.create(stream=True)`
sends the request as every other call does (auth, base_url, headers, timeouts, status errors as the
SDK's exceptions) and hands back the response unread; the event-stream body is then read here
(agent.sse) and each event parsed with one `json.loads` into plain dicts. The SDK's typed iterator
would build a pydantic `ChatCompletionChunk` per event, ~64 us each: measured in one run of
bench/streaming.py (20 quick answers at once in 4-character chunks), a streamed turn cost 1.37-1.69x
the CPU of an unstreamed one through the SDK's chunks and 0.99-1.21x through this reader (0.74x vs
1.05x the throughput). It is still the SDK's streaming API, only not its typed iterator.
What the SDK's stream does with the body is kept: `[DONE]` ends it (the rest of the body is drained, so the HTTP/1.1
connection is reused); an event carrying `error` raises `openai.APIError` with the error's message
(or "An error occurred during streaming") after the text before it has been handed on; a read
timeout is `APITimeoutError`, a dropped connection `APIConnectionError`. Beyond the SDK: an event
that is not JSON is an `APIError` naming it (the SDK let a JSONDecodeError through), only choice 0
is the answer, and a server that ignores `stream` and answers one JSON completion is understood
(the SDK's stream found no events in it: an empty answer).

The request body is built here and handed to `create()` as `extra_body` (which the SDK sends as given,
overriding its own fields), with `messages=[]` for the SDK's required argument. Passed as arguments,
the messages and tool schemas go through the SDK's request transform, which walks every nested dict
against its TypedDicts to rename aliased keys and encode dates or files; no chat-completion request
field has either, so for our plain JSON it is an identity (tests/agent/test_llm.py compares the wire
bodies). Measured with `python -m bench.request_body` (openai 3.57, in-process model): 22 messages
and the two tools cost 4.3-4.4 ms CPU per call as arguments, 0.57-0.70 ms as `extra_body`; 4 messages
1.34-1.36 ms vs 0.50-0.63 ms (the transform costs ~0.17 ms per message). In bench/gateway.py's
profile it was ~70% of the main thread's CPU.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Awaitable, Callable, Mapping

import anyio
import httpx2
import openai
from openai.types.chat import ChatCompletion

from agent.sse import Event, SSEDecoder
from gateway.language import N_

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_CONTEXT_WINDOW = 128_000
NOT_CONFIGURED_TEXT = N_(
    "No model is configured: set OPENAI_BASE_URL (and OPENAI_API_KEY) or model.base_url in config.yaml."
)
# Local OpenAI-compatible servers (llama.cpp, vLLM, Ollama) need no key, but the SDK insists on one.
_PLACEHOLDER_KEY = "not-needed"


class EmptyCompletion(RuntimeError):
    """The endpoint answered 200 but with no choices."""


class ModelNotConfigured(RuntimeError):
    def __init__(self, message: str = NOT_CONFIGURED_TEXT) -> None:
        super().__init__(message)


@dataclass(frozen=True)
class ModelSettings:
    base_url: str | None
    api_key: str | None = field(default=None, repr=False)
    name: str = DEFAULT_MODEL
    timeout: float = 60.0
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_tokens: int | None = None

    @property
    def is_configured(self) -> bool:
        """A base URL (any compatible server) or a key (the default OpenAI endpoint) is enough."""
        return bool(self.base_url or self.api_key)

    def describe(self) -> str:
        """For logs and /status: endpoint and model, never the key."""
        if not self.is_configured:
            return "none configured (set model.base_url or OPENAI_BASE_URL / OPENAI_API_KEY)"
        return f"{self.name} @ {self.base_url or 'api.openai.com'}"

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        role: str = "model",
        env: Mapping[str, str] | None = None,
    ) -> "ModelSettings":
        """Build settings for `role` ("model" or "auxiliary") from the whole config dict.

        "auxiliary" takes each field from `auxiliary.*` when set, else from `model.*`, else the
        environment; "model" takes `model.*`, else the environment.
        """
        if role not in ("model", "auxiliary"):
            raise ValueError(f"role must be 'model' or 'auxiliary', got {role!r}")
        env = os.environ if env is None else env
        config = config or {}
        sections = [config.get("model") or {}]
        if role == "auxiliary":
            sections.insert(0, config.get("auxiliary") or {})
        for section in sections:
            if not isinstance(section, Mapping):
                raise ValueError(f"config section for {role} must be a mapping, got {type(section).__name__}")

        def pick(key: str, env_name: str | None = None) -> Any:
            for section in sections:
                value = section.get(key)
                if value not in (None, ""):
                    return value
            return (env.get(env_name) or None) if env_name else None

        def number(key: str, default: Any, kind: type) -> Any:
            value = pick(key)
            if value is None:
                return default
            try:
                result = kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"{role}.{key} must be a number, got {value!r}") from None
            if result <= 0:
                raise ValueError(f"{role}.{key} must be positive, got {value!r}")
            return result

        base_url = pick("base_url", "OPENAI_BASE_URL")
        return cls(
            base_url=str(base_url).rstrip("/") if base_url else None,
            api_key=pick("api_key", "OPENAI_API_KEY"),
            name=str(pick("name", "CHINWAG_MODEL") or DEFAULT_MODEL),
            timeout=number("timeout", 60.0, float),
            context_window=number("context_window", DEFAULT_CONTEXT_WINDOW, int),
            max_tokens=number("max_tokens", None, int),
        )


def make_client(settings: ModelSettings, http_client: httpx2.AsyncClient | None = None) -> openai.AsyncOpenAI:
    """An AsyncOpenAI client for these settings; raises ModelNotConfigured when there is no endpoint.

    `http_client` is the SDK's own seam for the transport (a proxy, or an httpx2 transport that
    answers in-process, as bench/gateway.py's instant model does); None: the SDK makes its own."""
    if not settings.is_configured:
        raise ModelNotConfigured()
    log.debug("model client for %s", settings.describe())
    return openai.AsyncOpenAI(
        base_url=settings.base_url or None,
        api_key=settings.api_key or _PLACEHOLDER_KEY,
        timeout=settings.timeout,
        max_retries=0,
        http_client=http_client,
    )


@dataclass
class Completion:
    message: dict[str, Any]  # OpenAI-style assistant message: role, content, [tool_calls], [reasoning]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return self.message.get("content") or ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return self.message.get("tool_calls") or []


OnDelta = Callable[[str], Awaitable[None]]


async def complete(
    client: openai.AsyncOpenAI,
    settings: ModelSettings,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    on_delta: OnDelta | None = None,
) -> Completion:
    """One chat completion. With `on_delta`, the reply is streamed and each text piece is awaited
    through it as it arrives; the result is the same either way. Errors are the SDK's exceptions."""
    body: dict[str, Any] = {"messages": messages}
    if tools:
        body["tools"] = tools
    if temperature is not None:
        body["temperature"] = temperature
    limit = max_tokens if max_tokens is not None else settings.max_tokens
    if limit is not None:
        body["max_tokens"] = limit
    # The body bypasses the SDK's request transform, an identity for it that costs ~4 ms (module doc).
    kwargs: dict[str, Any] = {"model": settings.name, "messages": [], "extra_body": body}
    if on_delta is not None:
        return await _complete_streaming(client, kwargs, on_delta)

    return _from_completion(await client.chat.completions.create(**kwargs))


def _from_completion(response: ChatCompletion) -> Completion:
    """A Completion from the SDK's chat.completion object."""
    if not response.choices:
        raise EmptyCompletion("the model returned no choices")
    choice = response.choices[0]
    raw = choice.message
    message: dict[str, Any] = {"role": "assistant", "content": raw.content}
    if raw.tool_calls:
        # Some compatible servers omit call ids; the API needs them to pair calls with results.
        message["tool_calls"] = [
            {
                "id": c.id or f"call_{i}",
                "type": "function",
                "function": {"name": function.name, "arguments": function.arguments or ""},
            }
            for i, c in enumerate(raw.tool_calls)
            if (function := getattr(c, "function", None)) is not None  # custom (non-function) calls are not ours
        ]
    reasoning = _extra_field(raw, "reasoning_content") or _extra_field(raw, "reasoning")
    if reasoning:
        message["reasoning"] = reasoning
    usage = response.usage
    return Completion(
        message=message,
        prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
        completion_tokens=(usage.completion_tokens or 0) if usage else 0,
        finish_reason=choice.finish_reason,
    )


def _extra_field(obj: Any, name: str) -> str | None:
    """Non-standard fields some compatible servers add (e.g. reasoning_content)."""
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return value if isinstance(value, str) and value else None


async def _complete_streaming(client: openai.AsyncOpenAI, kwargs: dict[str, Any], on_delta: OnDelta) -> Completion:
    """The streamed call: the SDK sends the request (and raises its status errors); the body's
    events are read here (module docstring). Each network read's text goes to `on_delta` at once,
    as one piece: a read often holds several events, and one update per read is all a reply needs."""
    reply = _StreamedReply()
    request = client.chat.completions.with_streaming_response.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    async with request as response:
        http = response.http_response
        if "json" in http.headers.get("content-type", "") and "event-stream" not in http.headers["content-type"]:
            # a compatible server that ignores `stream` answers with one whole chat.completion
            body = await response.json()
            if not isinstance(body, dict):
                raise openai.APIError(
                    "the model answered with JSON that is not a chat completion", http.request, body=body
                )
            completion = _from_completion(ChatCompletion.construct(**body))
            if completion.text:
                await on_delta(completion.text)
            return completion
        chunks = http.aiter_bytes()
        try:
            await _read(chunks, http.request, reply, on_delta)
            if reply.done and http.http_version == "HTTP/1.1":
                await _drain(chunks)
        finally:
            await chunks.aclose()
    return reply.completion()


async def _read(
    chunks: AsyncGenerator[bytes, None], request: httpx2.Request, reply: "_StreamedReply", on_delta: OnDelta
) -> None:
    decoder = SSEDecoder()
    while not reply.done:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break  # the body ended without [DONE]: what came is the reply, as the SDK takes it
        except _TIMEOUTS as exc:
            raise openai.APITimeoutError(request=request) from exc
        except _DROPPED as exc:
            raise StreamCut(request=request) from exc
        error: openai.APIError | None = None
        try:
            for event in decoder.feed(chunk):
                reply.add(event)
                if reply.done:
                    break
        except _StreamError as exc:
            error = openai.APIError(exc.message, request, body=exc.body)
        piece = reply.take_piece()
        if piece:
            await on_delta(piece)  # the text before an error event reaches the person too
        if error is not None:
            raise error


_TIMEOUTS = (httpx2.TimeoutException,)
# what the SDK's own stream maps to APIConnectionError (a TLS close shows as anyio.EndOfStream)
_DROPPED = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
_DRAIN_SECONDS = 0.1


async def _drain(chunks: AsyncGenerator[bytes, None]) -> None:
    """Read what follows [DONE] (usually only the body's end) so the HTTP/1.1 connection goes back to
    the pool instead of being closed; a server that keeps talking is cut off after a moment."""
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for _ in chunks:
                pass
    except (TimeoutError, *_TIMEOUTS, *_DROPPED):
        pass  # the answer is complete; only the connection's reuse is lost


class _StreamError(Exception):
    def __init__(self, message: str, body: object | None) -> None:
        super().__init__(message)
        self.message, self.body = message, body


def _chunk_of(event: Event) -> dict[str, Any]:
    """The chunk an event carries; an error event, or one that is not a JSON object, raises."""
    try:
        chunk = json.loads(event.data)
    except ValueError:
        raise _StreamError(f"the model sent a stream event that is not JSON: {_short(event.data, 80)}", None) from None
    if not isinstance(chunk, dict):
        raise _StreamError(f"the model sent a stream event that is not an object: {_short(event.data, 80)}", None)
    error = chunk.get("error")
    if error or event.name == "error":
        # as the SDK does: the error's own message, else a generic one; the body is the error
        message = error.get("message") if isinstance(error, dict) else None
        raise _StreamError(
            message if isinstance(message, str) and message else "An error occurred during streaming",
            error if error else chunk,
        )
    return chunk


class _StreamedReply:
    """The assistant message assembled from chat.completion.chunk events (plain dicts)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.prompt_tokens = self.completion_tokens = 0
        self.done = False
        self._unsent = 0  # text pieces not yet handed out by take_piece

    def add(self, event: Event) -> None:
        if event.data.startswith("[DONE]"):
            self.done = True
            return
        chunk = _chunk_of(event)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens") or 0
            self.completion_tokens = usage.get("completion_tokens") or 0
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # one answer is asked for; another choice is not part of it
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._add_delta(delta)

    def _add_delta(self, delta: dict[str, Any]) -> None:
        """A piece of the answer: text, reasoning, and pieces of tool calls (by their index)."""
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str) and thought:
            self.reasoning.append(thought)
        for position, call in enumerate(delta.get("tool_calls") or ()):
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            index = index if isinstance(index, int) else position
            slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
            if call.get("id"):
                slot["id"] = call["id"]
            function = call.get("function")
            if isinstance(function, dict):
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""

    def take_piece(self) -> str:
        """The text added since the last call, as one piece."""
        if self._unsent == len(self.text):
            return ""
        piece = "".join(self.text[self._unsent :])
        self._unsent = len(self.text)
        return piece

    def completion(self) -> Completion:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"] or f"call_{index}",
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": slot["arguments"]},
                }
                for index, slot in sorted(self.calls.items())
            ]
        if self.reasoning:
            message["reasoning"] = "".join(self.reasoning)
        return Completion(message, self.prompt_tokens, self.completion_tokens, self.finish)


class StreamCut(openai.APIConnectionError):
    """The model service was reached and its streamed answer stopped midway (the connection dropped):
    a connection error, retried as one, but not "could not reach" when it is reported."""


def describe_error(exc: BaseException) -> str:
    """A short, key-free sentence about a failed model call, for the person and the logs."""
    if isinstance(exc, ModelNotConfigured):
        return NOT_CONFIGURED_TEXT
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)):
        return "the model did not answer in time"
    if isinstance(exc, openai.RateLimitError):
        return "the model service is rate-limiting requests (429)"
    if isinstance(exc, openai.AuthenticationError):
        return "the model service refused the API key (401)"
    if isinstance(exc, openai.APIStatusError):
        return f"the model service returned an error ({exc.status_code}): {_short(_error_message(exc))}"
    if isinstance(exc, StreamCut):
        return "the model service stopped answering midway (its connection dropped)"
    if isinstance(exc, openai.APIConnectionError):
        return "could not reach the model service"
    if isinstance(exc, openai.APIError):  # reported inside a 200 stream (an error event, a broken event)
        return f"the model service reported an error while answering: {_short(exc.message)}"
    return f"the model call failed: {type(exc).__name__}: {_short(str(exc))}"


def is_transient(exc: BaseException) -> bool:
    """Worth one more try: rate limits, server errors, dropped connections (not timeouts)."""
    if isinstance(exc, openai.APITimeoutError):
        return False
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)


_WINDOW_IN_MESSAGE = re.compile(r"(?:maximum context length is|context size \(?)\s*(\d+)", re.I)


def context_overflow(exc: BaseException) -> int | None:
    """If `exc` says the request did not fit the model's context: the context size the server gave
    (0 when it gave none); None for any other error. llama.cpp answers 400 with `type`
    "exceed_context_size_error" and `n_ctx` (its slot's share of the context, which no setting of
    ours knows); OpenAI and vLLM 400 with `code` "context_length_exceeded" or the size in words."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code != 400:
        return None
    body = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("error", body)
    inner = inner if isinstance(inner, dict) else {}
    message = _error_message(exc)
    kinds = {str(inner.get("type")), str(inner.get("code"))}
    if not kinds & {"exceed_context_size_error", "context_length_exceeded"} and "context length" not in message:
        return None
    size = inner.get("n_ctx")
    if isinstance(size, int) and size > 0:
        return size
    found = _WINDOW_IN_MESSAGE.search(message)
    return int(found.group(1)) if found else 0


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After in seconds, when it sent one."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        return json.dumps(body)[:200]
    return str(body or exc.message)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
