"""The agent's tool-calling loop: one turn = the person's message, model calls, tool calls, an answer.

Contract with the caller (the gateway runner):
- `on_message` is awaited for every new message, in order: the user message, then per step the
  assistant message carrying tool_calls followed by its tool results, then the final answer. A step
  is emitted as a group once its tool results exist, and the group is written to the end even if the
  turn is cancelled meanwhile, so persisted history never holds tool_calls without their results.
- A model failure never raises: the turn returns an apology with `error` set. The apology is not a
  model message, so it is not passed to `on_message` (the caller sends it to the chat).
- Cancellation (`/stop`, interrupt) propagates as `asyncio.CancelledError`; an exception raised
  by `on_message` (the caller's own persistence failing) propagates too.
- `steer`: texts put on the queue while the turn runs join the conversation as user messages before
  the next model call. Texts still queued when the turn ends stay there for the caller.
- `stream` (optional, a `TurnStream`): the model is called with streaming and its text reaches
  the caller as it is written: `step()` before each model call (a retried or later call starts a
  new text), `text(piece)` per piece, `tool(name)` before each tool runs. Only the final answer is
  a message (`on_message`); streamed pieces are never stored.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

import openai

from agent.llm import (
    NOT_CONFIGURED_TEXT,
    Completion,
    ModelSettings,
    complete,
    context_overflow,
    describe_error,
    is_transient,
    retry_after,
)
from agent.tools import ToolContext, ToolRegistry
from gateway import telemetry
from gateway.language import N_, _

log = logging.getLogger(__name__)

OnMessage = Callable[[dict[str, Any]], Awaitable[None]]
MAX_RETRY_WAIT = 10.0  # seconds; a longer Retry-After is better answered with an apology


class TurnStream(Protocol):
    """Where a streaming turn's text goes while the model writes it (see the module docstring)."""

    async def step(self) -> None: ...

    async def text(self, piece: str) -> None: ...

    async def tool(self, name: str) -> None: ...


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, completion: Completion) -> None:
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens


@dataclass
class TurnResult:
    text: str
    messages: list[dict[str, Any]] = field(default_factory=list)  # every message passed to on_message
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    iterations: int = 0  # model calls made
    # the request did not fit the model's context: the size the server gave (0: unknown)
    overflow: int | None = None


EMPTY_REPLY_TEXT = N_("(The model returned an empty reply. Try asking again or rephrasing.)")
TOOL_IMAGES = "(The images the tool calls above returned.)"


def stopped_text(steps: int) -> str:
    return (
        f"I stopped after {steps} steps without reaching an answer. "
        "Tell me to continue if you want me to keep going, or narrow the request."
    )


def apology_text(reason: str) -> str:
    return f"Sorry, I couldn't get an answer from the model: {reason}. Please try again in a moment."


class Agent:
    def __init__(
        self,
        client: openai.AsyncOpenAI | None,
        settings: ModelSettings,
        tools: ToolRegistry,
        system_prompt: str,
        max_iterations: int = 8,
        *,
        retries: int = 2,
        retry_backoff: float = 1.0,
        temperature: float | None = None,
        owns_client: bool = False,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.client = client
        self.settings = settings
        self.tools = tools
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.temperature = temperature
        # Agents normally borrow the gateway's shared client (gateway.runtime.agent_factory):
        # closing it here would break every other agent's next call.
        self.owns_client = owns_client

    async def close(self) -> None:
        """Close the model client if this agent owns it; a borrowed one stays open."""
        if self.client is not None and self.owns_client:
            await self.client.close()

    async def run_turn(
        self,
        history: list[dict[str, Any]],
        user_text: str | list[dict[str, Any]],  # text, or text and image parts
        ctx: ToolContext,
        on_message: OnMessage,
        steer: asyncio.Queue[str] | None = None,
        stream: TurnStream | None = None,
    ) -> TurnResult:
        result = TurnResult(text="")

        async def emit(*messages: dict[str, Any]) -> None:
            await _emit_group(on_message, list(messages))
            result.messages.extend(messages)

        await emit({"role": "user", "content": user_text})
        if self.client is None or not self.settings.is_configured:
            result.text, result.error = _(NOT_CONFIGURED_TEXT), "model not configured"
            return result

        earlier = repair_history(history)
        # Stored system messages (a compression summary) join the system prompt: several system
        # messages, or one mid-conversation, are refused by some compatible servers' chat templates.
        notes = [m["content"] for m in earlier if m["role"] == "system" and m.get("content")]
        system = "\n\n".join([self.system_prompt, *notes])
        conversation: list[dict[str, Any]] = [{"role": "system", "content": system}]
        conversation += [_wire(m) for m in earlier if m["role"] != "system"]
        conversation.append({"role": "user", "content": user_text})
        await self.tools.ready()  # a server still listing its tools gets a few seconds
        schemas = self.tools.schemas(ctx) or None

        while result.iterations < self.max_iterations:
            steered = _drain(steer)
            if steered:
                await emit(*steered)
                conversation.extend(steered)
            result.iterations += 1
            try:
                completion = await self._call(conversation, schemas, stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any model failure ends the turn with an apology
                result.error = describe_error(exc)
                result.overflow = context_overflow(exc)
                log.warning("model call failed (%s): %s", self.settings.describe(), result.error)
                result.text = apology_text(result.error)
                return result
            result.usage.add(completion)
            assistant = dict(completion.message)
            if completion.finish_reason:
                assistant["finish_reason"] = completion.finish_reason
            if completion.completion_tokens:
                assistant["token_count"] = completion.completion_tokens
            calls = completion.tool_calls
            if not calls:
                await emit(assistant)
                result.text = completion.text or _(EMPTY_REPLY_TEXT)
                return result

            step = [assistant]
            images: list[dict[str, Any]] = []
            for call in calls:
                function = call.get("function") or {}
                name = function.get("name") or ""
                if stream is not None:
                    await stream.tool(name)
                with telemetry.tool_call(name, call.get("id") or "") as span:
                    outcome = await self.tools.run(name, function.get("arguments"), ctx, call.get("id") or "")
                    span.set("chinwag.outcome", outcome.outcome)
                    if outcome.server:
                        span.set("chinwag.mcp_server", outcome.server)
                message = {"role": "tool", "tool_call_id": call["id"], "name": name, "content": outcome.text}
                if outcome.attachments:
                    message["attachments"] = outcome.attachments  # kept with the message (the console shows them)
                step.append(message)
                images += outcome.image_parts
            await emit(*step)
            conversation.extend(_wire(m) for m in step)
            if images:  # the chat API takes images in user messages only; this turn's model sees them
                conversation.append({"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES}, *images]})

        final = {"role": "assistant", "content": stopped_text(self.max_iterations), "finish_reason": "max_iterations"}
        await emit(final)
        result.text = final["content"]
        return result

    async def _call(
        self,
        conversation: list[dict[str, Any]],
        schemas: list[dict[str, Any]] | None,
        stream: TurnStream | None = None,
    ) -> Completion:
        """One model call, retried on transient errors (429, 5xx, dropped connection) with back-off."""
        assert self.client is not None
        attempt = 0
        while True:
            try:
                if stream is not None:
                    await stream.step()  # a retry starts its text afresh
                # The client has its own timeout; this is the backstop for a server that trickles bytes.
                # A streamed reply may take longer than that in all: each piece re-arms the backstop.
                limit = self.settings.timeout + 5
                with telemetry.model_call(self.settings.name) as span:
                    span.set("chinwag.retries", attempt)
                    async with asyncio.timeout(limit) as backstop:
                        on_delta = _rearming(stream, backstop, limit, span) if stream is not None else None
                        completion = await complete(
                            self.client,
                            self.settings,
                            conversation,
                            tools=schemas,
                            temperature=self.temperature,
                            on_delta=on_delta,
                        )
                    span.first_token()  # (not streamed, or only tool calls: the whole answer came at once)
                    span.set("gen_ai.usage.input_tokens", completion.prompt_tokens)
                    span.set("gen_ai.usage.output_tokens", completion.completion_tokens)
                    if completion.finish_reason:
                        span.set("gen_ai.response.finish_reasons", [completion.finish_reason])
                    return completion
            except TimeoutError:
                raise  # a slow model is not retried: the person has already waited the whole timeout
            except Exception as exc:
                if attempt >= self.retries or not is_transient(exc):
                    raise
                wait = retry_after(exc)
                wait = self.retry_backoff * (2**attempt) if wait is None else wait
                if wait > MAX_RETRY_WAIT:
                    raise
                attempt += 1
                log.info("model call failed transiently (%s); retry %d in %.1fs", describe_error(exc), attempt, wait)
                await asyncio.sleep(wait)


def _rearming(
    stream: TurnStream, backstop: asyncio.Timeout, limit: float, span: telemetry.Span = telemetry.NOOP
) -> Callable[[str], Awaitable[None]]:
    loop = asyncio.get_running_loop()

    async def on_delta(piece: str) -> None:
        span.first_token()
        # Moved by a tenth of `limit` (at most a second) at a time: rescheduling per piece made and
        # dropped a timer handle each time (pieces come ~50 a second) for no gain.
        deadline = loop.time() + limit
        if deadline - (backstop.when() or 0.0) >= min(1.0, limit / 10):
            backstop.reschedule(deadline)
        await stream.text(piece)

    return on_delta


async def _emit_group(on_message: OnMessage, messages: list[dict[str, Any]]) -> None:
    """Await on_message for each message in order; if cancelled meanwhile, finish the group first."""

    async def run() -> None:
        for message in messages:
            await on_message(message)

    task = asyncio.ensure_future(run())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await task  # a half-written step (tool_calls without results) would break every later turn
        raise


def _drain(queue: asyncio.Queue[str] | None) -> list[dict[str, Any]]:
    out = []
    while queue is not None and not queue.empty():
        text = queue.get_nowait()
        if text:
            out.append({"role": "user", "content": text})
    return out


_WIRE_KEYS = {
    "system": ("role", "content"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    """Only the fields the chat API accepts (stored rows carry reasoning, finish_reason, ids...)."""
    keys = _WIRE_KEYS.get(message.get("role", ""), ("role", "content"))
    out = {k: message[k] for k in keys if message.get(k) is not None}
    if "content" not in out:
        out["content"] = None if out.get("tool_calls") else ""
    return out


def repair_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make stored history acceptable to the API: every tool_call answered, no orphan tool results.

    /undo, compaction or a crash can leave either shape, and one bad message fails every later turn.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []

    def close_pending() -> None:
        for call_id in pending:
            out.append({"role": "tool", "tool_call_id": call_id, "content": "(no result was recorded)"})
        pending.clear()

    for message in history:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in pending:
                pending.remove(call_id)
                out.append(message)
            continue  # a result without its call: drop it
        close_pending()
        if role not in _WIRE_KEYS:
            continue
        out.append(message)
        if role == "assistant":
            pending.extend(c.get("id") for c in message.get("tool_calls") or [] if c.get("id"))
    close_pending()
    return out


def db_fields(message: dict[str, Any]) -> dict[str, Any]:
    """Keyword fields for `StorageFace.append_message(session_id, role, content, **fields)`
    from a message passed to on_message (tool "name" becomes `tool_name`)."""
    fields: dict[str, Any] = {}
    for key in ("tool_calls", "tool_call_id", "finish_reason", "reasoning", "token_count"):
        if message.get(key) is not None:
            fields[key] = message[key]
    if message.get("role") == "tool" and message.get("name"):
        fields["tool_name"] = message["name"]
    return fields
