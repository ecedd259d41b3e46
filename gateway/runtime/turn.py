"""One agent turn in a chat, and context compression into a child session.

The turn: take (or build) the session's cached agent, load the conversation from the DB, run the
agent with a callback that persists every message it produces (the person's message, assistant
messages with tool calls, tool results, the answer) as it goes, show a typing hint meanwhile, then
reply. When the conversation nears the model's context window afterwards, it is compressed into a
child session (agent.compress) and the chat's key moves to the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from agent.compress import compress_session, estimate_tokens, needs_compression
from agent.llm import NOT_CONFIGURED_TEXT, describe_error
from agent.loop import db_fields
from agent.tools import ToolContext

if TYPE_CHECKING:
    from gateway.runtime.lanes import ChatLane
    from gateway.runtime.runner import GatewayRunner
    from gateway.sessions.store import SessionEntry
    from platforms.base import InboundMessage

log = logging.getLogger(__name__)

TYPING_INTERVAL = 4.0  # seconds: platforms show "typing…" for about five
# Seconds before the first hint. 0: at once — adapters use the hint to mark the message being
# answered (Feishu's "working" reaction), which should happen even for a quick reply.
TYPING_DELAY = 0.0
COMPRESS_THRESHOLD = 0.8  # of the context window


async def _agent_for(runner: "GatewayRunner", msg: "InboundMessage", session_id: str) -> Any:
    cached = runner.cache.get(session_id)
    if cached is not None:
        return cached
    factory = runner.factory
    title = None
    if not getattr(factory, "has_snapshot", lambda _sid: False)(session_id):  # a rebuild needs no read
        session = runner.db.get_session(session_id)  # a primary-key lookup: inline, no thread hop
        title = session.get("title") if session else None
    built = await factory.build(session_id, msg.source, title)
    await runner.cache.put(session_id, built)
    return built


class _Typing:
    """The platform's typing hint while a turn runs: first after TYPING_DELAY, then every
    TYPING_INTERVAL, until the turn ends."""

    def __init__(self, runner: "GatewayRunner", msg: "InboundMessage") -> None:
        self.adapter = runner.adapters.get(msg.source.platform.value)
        self.source = msg.source
        self.task: asyncio.Task | None = None
        self.handle: asyncio.TimerHandle | None = None
        if self.adapter is not None:
            if TYPING_DELAY > 0:
                self.handle = asyncio.get_running_loop().call_later(TYPING_DELAY, self._begin)
            else:
                self._begin()

    def _begin(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        assert self.adapter is not None
        while True:
            try:
                await self.adapter.send_typing(self.source)
            except asyncio.CancelledError:
                raise
            except Exception:  # a typing hint is cosmetic; never fail the turn over it
                log.debug("typing indicator failed", exc_info=True)
            await asyncio.sleep(TYPING_INTERVAL)

    async def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def run_turn(
    runner: "GatewayRunner", lane: "ChatLane", msg: "InboundMessage", entry: "SessionEntry", text: str
) -> None:
    session_id = entry.session_id
    db = runner.db
    session_agent = await _agent_for(runner, msg, session_id)
    runner.cache.acquire(session_id)
    steer: asyncio.Queue[str] = asyncio.Queue()
    lane.steer_queue = steer
    first_user = True
    # The conversation so far, from the warm copy when there is one (see gateway.runtime.conversations).
    warm = runner.conversations

    async def persist(message: dict[str, Any]) -> None:
        nonlocal first_user
        fields = db_fields(message)
        fields["timestamp"] = runner.clock()  # the reset policy compares activity with this clock
        seen = None
        if message["role"] == "user":
            origin = msg
            if not first_user:
                origin = lane.take_steered() or msg  # a steered message joins the running turn
            first_user = False
            fields["user_id"] = origin.source.person_id
            fields["platform_message_id"] = origin.message_id or None
            if origin.message_id:  # remembered as seen in the same transaction (gateway.sessions.dedup)
                seen = (origin.source.platform.value, origin.message_id)
        await db.aappend_message(session_id, message["role"], message.get("content"), seen_event=seen, **fields)
        warm.append(session_id, lane.key, _as_stored(message))  # the copy follows the DB, in order

    typing = _Typing(runner, msg)
    try:
        history = warm.get(session_id, lane.key)
        if history is None:
            history = await db.aread("get_messages_as_conversation", session_id)
            warm.put(session_id, lane.key, history)
        ctx = ToolContext(
            session_id=session_id,
            source=msg.source,
            db=db,
            is_admin=runner.is_admin(msg),
            single_owner=runner.single_owner,
            home=runner.config.home,
            extra={
                "config": runner.config,
                "recap_model": getattr(runner.factory, "auxiliary", None),
                "recap_client": getattr(runner.factory, "recap_client", None),
            },
        )
        result = await session_agent.agent.run_turn(history, text, ctx, persist, steer)
    finally:
        lane.steer_queue = None  # from here on a new message queues instead of steering
        await typing.stop()
        await runner.cache.release(session_id, session_agent)

    usage = result.usage
    if usage.prompt_tokens or usage.completion_tokens:
        await db.aadd_tokens(session_id, usage.prompt_tokens, usage.completion_tokens)
    await runner.send(msg, result.text or "(no reply)")
    if result.error is None and _near_window(runner, session_agent.agent.system_prompt, history + result.messages):
        notice = await compress(runner, msg, session_id, auto=True)
        if notice:
            await runner.send(msg, notice)


def _near_window(runner: "GatewayRunner", system_prompt: str, conversation: list[dict[str, Any]]) -> bool:
    """Is the conversation near the model's context window? A character count bounds the token
    estimate from above (no text has more tokens than characters), so the estimate itself only
    runs for conversations that might be near the limit."""
    budget = (runner.model_settings.context_window - len(system_prompt) - 4) * COMPRESS_THRESHOLD
    chars = 0
    for message in conversation:
        content = message.get("content")
        chars += 4 + (len(content) if isinstance(content, str) else len(_json(content)))
        if message.get("tool_calls"):
            chars += len(_json(message["tool_calls"]))
    if chars <= budget:
        return False
    window = runner.model_settings.context_window
    prompt = estimate_tokens([{"role": "system", "content": system_prompt}])
    return needs_compression(conversation, window - prompt, COMPRESS_THRESHOLD)


def _as_stored(message: dict[str, Any]) -> dict[str, Any]:
    """A message as `db.get_messages_as_conversation` would return it after the append."""
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        out["tool_call_id"] = message.get("tool_call_id")
        if message.get("name"):
            out["name"] = message["name"]
    return out


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False)


async def compress(runner: "GatewayRunner", msg: "InboundMessage", session_id: str, *, auto: bool) -> str:
    """Summarise the session into a child session and move the chat there. Returns the text to send."""
    client = getattr(runner.factory, "client", None)
    if client is None or not runner.model_settings.is_configured:
        return "" if auto else NOT_CONFIGURED_TEXT
    db = runner.db
    try:
        child = await compress_session(db, session_id, client, runner.model_settings)
    except asyncio.CancelledError:
        raise
    except ValueError as exc:
        return "" if auto else f"Nothing to compress: {exc}."
    except Exception as exc:
        log.warning("compressing %s failed: %s", session_id, describe_error(exc))
        return "" if auto else f"Sorry, compressing failed: {describe_error(exc)}. Nothing was changed."
    await runner.store.switch(msg.source, child, reason="compressed")
    await runner.forget(session_id)
    session = await db.aread("get_session", child)
    title = session.get("title") if session else None
    name = f"“{title}” ({child})" if title else child
    lead = "This conversation was getting long, so I" if auto else "I"
    return (
        f"{lead} summarised it into a new session {name} and we continue there. The earlier messages stay searchable."
    )
