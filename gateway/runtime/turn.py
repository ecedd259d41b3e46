"""One agent turn in a chat, and context compression into a child session: the `TurnRunner`.

The turn: take (or build) the session's cached agent, load the conversation (the warm copy, else
the DB), run the agent with a callback that persists every message it produces (the person's
message, assistant messages with tool calls, tool results, the answer) as it goes, show a typing
hint meanwhile, then reply. When the conversation nears the model's context window afterwards, it
is summarised (agent.compress) and the chat continues in a child session (SessionStore.compress,
one transaction). The configured window cannot always know: llama.cpp gives each slot n_ctx / slots
tokens and refuses a longer request with a 400 naming that size (tests/runtime/test_real_model.py).
Such a refusal compresses the conversation within the size the server gave (the person's message of
the refused attempt hidden first) and the message is answered once, in the child.

The TurnRunner is built with its collaborators (agent cache, factory, DB, store, the outbound
side and the outbox, the clock, the model settings) rather than the runner, so it can be read, and
tested, on its own; the factory is seen through the `AgentFactory` Protocol below. A turn's
persistence is its `TurnRecorder`; its reply is committed to the outbox with the answer, always
(gateway.runtime.delivery), and every write is fenced by the job's scope on replicas.

Streaming (`begin_reply` gives a ReplyStream for the message, or None): the model's text goes to the
reply as it is written (gateway.runtime.reply_feed), the typing hint stops once text is visible, and
the final text replaces it. A stopped or failed turn leaves what was shown (a model error mid-answer
puts the apology under the text so far, rather than in its place). The final answer is stored as
without streaming; a stopped one (/stop, Ctrl-C, an interrupting message) is stored as it was shown,
marked `finish_reason="stopped"`, so the conversation never holds two questions in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
from typing import Any, Awaitable, Callable, Protocol

import openai

from agent.compress import estimate_tokens, needs_compression, summarise
from agent.llm import NOT_CONFIGURED_TEXT, ModelSettings, describe_error
from agent.loop import EMPTY_REPLY_TEXT, db_fields
from agent.tools import ToolContext
from gateway import telemetry
from gateway.config.load import Config
from gateway.db import StorageFace
from gateway.errors import LeaseLost
from gateway.language import _
from gateway.runtime.agent_cache import AgentCache
from gateway.runtime.agent_factory import SessionAgent
from gateway.runtime.conversations import ConversationCache
from gateway.runtime.delivery import Inbox, Outbox, OutboxSends, StreamSends, entry_send_key
from gateway.runtime.lanes import ChatLane
from gateway.runtime.media import MediaIntake, Received
from gateway.runtime.metrics import Metrics
from gateway.runtime.outbound import Outbound
from gateway.runtime.reply_feed import ReplyFeed
from gateway.sessions.access import AccessControl
from gateway.sessions.store import SessionEntry, SessionStore
from gateway.source import SessionSource
from gateway.storage.media import AttachmentRow
from gateway.text import valid_text
from platforms.base import InboundMessage, ReplyStream

log = logging.getLogger(__name__)

TYPING_INTERVAL = 4.0  # seconds: platforms show "typing…" for about five
# Seconds before the first hint. 0: at once — adapters use the hint to mark the message being
# answered (Feishu's "working" reaction), which should happen even for a quick reply.
TYPING_DELAY = 0.0
COMPRESS_THRESHOLD = 0.8  # of the context window

SendTyping = Callable[[SessionSource], Awaitable[None]]
CLOSE_TIMEOUT = 15.0  # seconds a stopped turn's reply may take to settle (a platform's rate limit)


class AgentFactory(Protocol):
    """What a turn needs to get a session's agent and its model clients
    (gateway.runtime.agent_factory.AgentFactory is the one the gateway uses)."""

    @property
    def client(self) -> openai.AsyncOpenAI | None:
        """The shared model client; None when no model is configured."""
        ...

    @property
    def recap_client(self) -> openai.AsyncOpenAI | None:
        """The auxiliary model's client (session_search recaps), or None."""
        ...

    @property
    def auxiliary(self) -> ModelSettings | None: ...

    def has_snapshot(self, session_id: str) -> bool:
        """An agent was built for this session before (its prompt needs no DB read)."""
        ...

    async def build(self, session_id: str, source: SessionSource | None, title: str | None) -> SessionAgent: ...

    async def close(self) -> None: ...


class _Typing:
    """The platform's typing hint while a turn runs: first after TYPING_DELAY, then every
    TYPING_INTERVAL, until the turn ends."""

    def __init__(
        self, send_typing: SendTyping | None, source: SessionSource, until: asyncio.Event | None = None
    ) -> None:
        self.send_typing = send_typing
        self.source = source
        self.until = until  # the streamed reply became visible: no more hints
        self.task: asyncio.Task | None = None
        self.handle: asyncio.TimerHandle | None = None
        if send_typing is not None:
            if TYPING_DELAY > 0:
                self.handle = asyncio.get_running_loop().call_later(TYPING_DELAY, self._begin)
            else:
                self._begin()

    def _begin(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        assert self.send_typing is not None
        while self.until is None or not self.until.is_set():
            try:
                await self.send_typing(self.source)
            except asyncio.CancelledError:
                raise
            except Exception:  # a typing hint is cosmetic; never fail the turn over it
                log.debug("typing indicator failed", exc_info=True)
            if self.until is None:
                await asyncio.sleep(TYPING_INTERVAL)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.until.wait(), TYPING_INTERVAL)

    async def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class TurnRecorder:
    """The persistence of one turn: the agent's callback, appending every message it produces as it
    goes, waiting through a storage fault. The person's message starts its inbox entry in the same transaction (a message steered
    into the running turn joins it: its entry is answered by the same reply); the answer commits
    its outbox row and the done marks with it. Every append is fenced by the job's scope
    (gateway.storage.fence), and the warm copy follows the DB, in order."""

    def __init__(
        self,
        db: StorageFace,
        outbox: Outbox,
        conversations: ConversationCache,
        clock: Callable[[], float],
        lane: ChatLane,
        msg: InboundMessage,
        session_id: str,
        received: Received | None,
        stream: ReplyStream | None = None,
        stored: int | None = None,
        media: MediaIntake | None = None,  # keeps the files a tool returned
    ) -> None:
        self.db, self.outbox, self.conversations, self.clock = db, outbox, conversations, clock
        self.lane, self.msg, self.session_id, self.received = lane, msg, session_id, received
        self.stream = stream  # its messages so far go into the outbox row with the answer
        self.stored = stored  # the person's message, stored by a run of this turn a crash cut short
        self.media = media
        self.answered: list[InboundMessage] = [msg]  # the inbox entries this turn's reply finishes
        self.committed: dict[str, Any] = {}  # the outbox row committed with the answer, once it is
        self.user_message_id: int | None = None  # the person's message as this turn stored it
        self._first_user = True

    async def __call__(self, message: dict[str, Any]) -> None:
        fields = db_fields(message)
        fields["timestamp"] = self.clock()  # the reset policy compares activity with this clock
        after = None
        attachments: list[AttachmentRow] = []
        if message["role"] == "user":
            origin = self.msg
            if not self._first_user:
                origin = self.lane.take_steered() or self.msg  # a steered message joins the running turn
                if origin is not self.msg:
                    self.answered.append(origin)
            elif self.stored is not None:  # stored before the cut: reused, not appended again
                self._first_user = False
                self.user_message_id = self.stored
                self.conversations.append(self.session_id, self.lane.key, _as_stored(message))
                return
            elif self.received is not None:  # stored and searched as text; the files as rows
                message = {**message, "content": self.received.text}
                attachments = self.received.rows
            self._first_user = False
            fields["user_id"] = origin.source.person_id
            fields["platform_message_id"] = origin.message_id or None
            after = Inbox.started(origin)  # its inbox entry is started in the same transaction
        elif message["role"] == "tool" and message.get("attachments") and self.media is not None:
            attachments = await self.media.keep(message["attachments"])
        elif message["role"] == "assistant" and not message.get("tool_calls"):
            # The answer: its reply is committed with it, and its inbox entries are done.
            text = valid_text(message.get("content") or _(EMPTY_REPLY_TEXT))
            shown = self.stream.message_ids if self.stream is not None else []
            after, row = self.outbox.reply_op(self.msg, text, list(self.answered), shown=shown)
            self.committed.update(row=row, text=text)
        # Through a storage fault the turn pauses here (its streamed reply stays on screen) and goes on
        # once storage commits: rerunning it would show a second answer (gateway.storage.health).
        stored = await self.outbox.health.committed(
            lambda: self.db.aappend_message(
                self.session_id, message["role"], message.get("content"), attachments=attachments, after=after, **fields
            )
        )
        if message["role"] == "user" and self.user_message_id is None:
            self.user_message_id = stored
        self.conversations.append(self.session_id, self.lane.key, _as_stored(message))

    async def stopped(self, shown: str) -> None:
        """A stopped answer (/stop, Ctrl-C, an interrupting message): store what the person saw,
        marked `finish_reason="stopped"`, so the session holds it and the next request does not
        carry two questions in a row. No outbox row (it is on screen already); a failed write
        leaves the turn as it was."""
        text = valid_text(shown.rstrip())
        if not text or self.committed:
            return
        try:
            await self.db.aappend_message(
                self.session_id, "assistant", text, finish_reason="stopped", timestamp=self.clock()
            )
        except Exception:
            log.warning("the stopped answer in %s could not be kept", self.session_id, exc_info=True)
            return
        self.conversations.append(self.session_id, self.lane.key, {"role": "assistant", "content": text})


class TurnRunner:
    def __init__(
        self,
        *,
        cache: AgentCache,
        factory: AgentFactory,
        db: StorageFace,
        store: SessionStore,
        outbound: Outbound,  # notices, typing hints and streamed replies
        outbox: Outbox,  # the reply, committed with the answer (gateway.runtime.delivery)
        clock: Callable[[], float],
        model_settings: ModelSettings,
        access: AccessControl,
        config: Config,  # handed to the tools (session_search reads it)
        media: MediaIntake | None = None,  # attachments -> stored files, text and image parts
        tool_status: bool = True,  # show "searching past conversations…" while a tool runs
        metrics: Metrics | None = None,  # failed model calls are counted
    ) -> None:
        self.cache = cache
        self.factory = factory
        self.db = db
        self.conversations = ConversationCache()
        self.store = store
        self.outbound = outbound
        self.outbox = outbox
        self.leases = outbox.leases
        self.clock = clock
        self.model_settings = model_settings
        self.access = access
        self.single_owner = bool(config.single_owner)
        self.config = config
        self.media = media
        self.tool_status = tool_status
        self.metrics = metrics

    async def forget(self, session_id: str) -> None:
        """Drop what is kept warm for exactly this session (its agent and its conversation copy):
        after anything that rewrites or leaves it (/new, /resume, /undo, /retry, reset, compression)."""
        self.conversations.drop(session_id)
        await self.cache.drop(session_id)

    async def _agent_for(self, msg: InboundMessage, session_id: str) -> SessionAgent:
        cached: SessionAgent | None = self.cache.get(session_id)
        if cached is not None:
            return cached
        title = None
        if not self.factory.has_snapshot(session_id):  # a rebuild needs no read
            session = self.db.get_session(session_id)  # a primary-key lookup: inline, no thread hop
            title = session.get("title") if session else None
        built = await self.factory.build(session_id, msg.source, title)
        await self.cache.put(session_id, built)
        return built

    async def run(
        self,
        lane: ChatLane,
        msg: InboundMessage,
        entry: SessionEntry,
        text: str,
        *,
        stored: int | None = None,
        shown: list[str] | None = None,
        compressed: bool = False,
        rerun: bool = False,
    ) -> None:
        """Run the turn. A rerun of a turn a stop or crash cut short: `stored` is the person's
        message it stored (the last of the session: reused, not stored again), `shown` the messages
        its streamed answer showed (edited, never sent again); `rerun`: such a run, whose tool calls
        may be journaled. A request the model's context cannot hold is answered once more in a child
        session summarised to fit (`compressed`: this is that second try)."""
        session_id = entry.session_id
        telemetry.annotate("chinwag.session_id", session_id)
        received = await self._receive(msg, text)
        session_agent = await self._agent_for(msg, session_id)
        self.cache.acquire(session_id)
        steer: asyncio.Queue[str] = asyncio.Queue()
        lane.steer_queue = steer
        # The conversation so far, from the warm copy when there is one (see gateway.runtime.conversations).
        warm = self.conversations
        stream = self._stream(msg, lane.key, shown or [])
        record = TurnRecorder(
            self.db, self.outbox, warm, self.clock, lane, msg, session_id, received, stream, stored, self.media
        )
        feed = ReplyFeed(stream, tool_status=self.tool_status) if stream is not None else None
        typing = _Typing(self.outbound.send_typing, msg.source, stream.first_shown if stream is not None else None)
        try:
            history = warm.get(session_id, lane.key)
            if history is None:
                history = await self.db.aread(self.db.get_messages_as_conversation, session_id)
                if stored is not None and history and history[-1]["role"] == "user":
                    history = history[:-1]  # the person's message: the turn adds it (its recorder reuses the row)
                warm.put(session_id, lane.key, history)
            content = received.model_content() if received is not None else text
            ctx = self._tool_context(msg, session_id, lane.key, rerun or compressed)
            result = await session_agent.agent.run_turn(history, content, ctx, record, steer, feed)
        except LeaseLost:
            if stream is not None:  # another replica answers: this one's draft is left as it is
                await _settle(stream.abandon())
            raise
        except BaseException as exc:
            if stream is not None:  # stopped, interrupted or crashed: what was shown stays
                if isinstance(exc, asyncio.CancelledError) and feed is not None and stream.first_shown.is_set():
                    await asyncio.shield(record.stopped(feed.so_far))
                await _settle(stream.fail())
            raise
        finally:
            lane.steer_queue = None  # from here on a new message queues instead of steering
            await typing.stop()
            await self.cache.release(session_id, session_agent)

        if result.overflow is not None and not compressed and not record.committed:
            child = await self._compress_overflowed(msg, session_id, record, result.overflow)
            if child is not None:
                if stream is not None:  # nothing was shown: the second try streams afresh
                    await _settle(stream.abandon())
                await self.run(lane, msg, child, text, compressed=True)
                return
        if result.error is not None and self.model_settings.is_configured:
            self._model_failed()
        failed = result.error is not None
        if failed:
            telemetry.annotate("chinwag.outcome", "failed")
        await self._reply(msg, stream, record, result.text or "(no reply)", failed, lane.key)
        usage = result.usage
        if usage.prompt_tokens or usage.completion_tokens:  # after the reply: a count never holds it up
            await self.db.aadd_tokens(session_id, usage.prompt_tokens, usage.completion_tokens)
        if not failed and self._near_window(session_agent.agent.system_prompt, history + result.messages):
            await self._compress_after(msg, session_id)

    async def _receive(self, msg: InboundMessage, text: str) -> Received | None:
        """The message's attachments stored and read (None without any); what could not be taken
        (too big, not downloadable) is said before the answer."""
        if self.media is None or not msg.attachments:
            return None
        received = await self.media.receive(text, msg.attachments)
        for notice in received.notices:
            await self.outbound.send(msg, notice)
        return received

    async def _compress_overflowed(
        self, msg: InboundMessage, session_id: str, record: TurnRecorder, window: int
    ) -> SessionEntry | None:
        """The model refused the turn's request as longer than its context (`window` tokens, 0 if it
        did not say): hide the person's message this attempt stored (it stays searchable), summarise
        the rest into a child session within that window and say so. The child's entry, or None if
        compressing failed too (the turn's apology then stands)."""
        if record.user_message_id is not None:
            await asyncio.to_thread(self.db.supersede_after, session_id, record.user_message_id - 1)
        await self.forget(session_id)
        notice = await self.compress(msg, session_id, auto=True, window=window)
        if not notice:
            return None
        await self.outbound.send(msg, notice)
        found = await self.store.get_or_create(msg.source, model=self.model_settings.name)
        return found.entry

    async def _compress_after(self, msg: InboundMessage, session_id: str) -> None:
        notice = await self.compress(msg, session_id, auto=True)
        if notice:
            await self.outbound.send(msg, notice)

    def _stream(self, msg: InboundMessage, key: str, shown: list[str]) -> ReplyStream | None:
        """The streamed reply to `msg`, or None where the reply is sent once at the end. Its
        messages are recorded on the inbox entry as they are sent, and a rerun's stream takes over
        those of the run that was cut (`shown`)."""
        if self.outbox.backlogged(msg.source):  # earlier replies wait for a retry: this one goes behind them
            return None
        stream = self.outbound.begin_reply(msg)
        if stream is None:
            return None
        stream.send_key = entry_send_key(msg)
        if msg.inbox_id is not None:
            stream.record = StreamSends(self.db, msg.inbox_id)
        stream.adopt(shown)
        if self.leases.shared:
            # Replicas: a draft edit goes out only while this replica knows it holds the chat
            # (its lease's expiry, in memory); the final text only after the fenced commit.
            stream.may_show = functools.partial(self.leases.known_held, key)
        return stream

    def _tool_context(self, msg: InboundMessage, session_id: str, session_key: str, rerun: bool = False) -> ToolContext:
        return ToolContext(
            session_id=session_id,
            source=msg.source,
            session_key=session_key,
            db=self.db,
            is_admin=self.access.is_admin(msg.source),
            single_owner=self.single_owner,
            home=self.config.home,
            inbox_id=msg.inbox_id,
            # a person allowed to talk to the bot (addressed or not): the tools of MCP servers are theirs
            may_use_sources=self.access.check(msg.source, mentioned=True).allowed,
            rerun=rerun,
        )

    async def _reply(
        self,
        msg: InboundMessage,
        stream: ReplyStream | None,
        record: TurnRecorder,
        text: str,
        failed: bool,
        key: str,
    ) -> None:
        """Deliver the turn's reply: the outbox row committed with the answer, or (an apology, no
        model) one committed now; a streamed reply is finished in place and then recorded as sent
        (`failed`: the text is an apology, shown under what was streamed). Shielded: a cancel must
        not cut a reply between its parts."""
        if record.committed:
            row, text = record.committed["row"], record.committed["text"]
        else:
            try:
                row = await self.outbox.commit(msg, valid_text(text), record.answered, "answered")
            except LeaseLost:
                if stream is not None:  # as in `run`: another replica answers
                    await _settle(stream.abandon())
                raise
        row_id = row["id"]
        if stream is not None and self.leases.shared and not await self.leases.confirm(key):
            await _settle(stream.abandon())  # the new holder sends the committed reply
            log.info("outbox row %s not shown here: chat %s is held by another replica now", row_id, key)
            return
        if stream is not None:
            # a message the final text adds is the row's: sent with its key, recorded on it
            stream.send_key = row["send_key"]
            stream.record = OutboxSends(self.db, row_id, self.outbound.adapters[msg.source.platform.value])
            ids = await self._finish(stream, msg, text, failed)
            if ids is not None:
                await self.outbox.record(row_id, len(ids), ids, True)
                return
            # the stream could not show the final text: the outbox sends it (editing what was shown)
        reply_to = msg.message_id if msg.source.chat_type != "dm" and msg.message_id else None
        shown = stream.message_ids if stream is not None else row["shown"]
        await self.outbox.deliver(row_id, msg.source, text, reply_to, send_key=row["send_key"], shown=shown, key=key)

    async def _finish(
        self, stream: ReplyStream, msg: InboundMessage, text: str, failed: bool = False
    ) -> list[str] | None:
        """Show the final text in the streamed reply (`failed`: keep what was shown, `text` under it);
        its message ids, or None when it could not be shown."""
        try:
            with telemetry.send(msg.source.platform.value) as span:
                ids = await (stream.fail(text) if failed else stream.finish(text))
                span.set("chinwag.parts", len(ids))
        except asyncio.CancelledError:
            raise
        except Exception:  # as a failed send: logged, and the turn (already stored) stands
            log.exception("finishing a streamed reply on %s failed", msg.source.platform.value)
            return None
        self.outbound.count_out(msg, len(ids))
        return ids

    def _model_failed(self) -> None:
        if self.metrics is not None:
            self.metrics.inc("model_errors_total")

    def _near_window(self, system_prompt: str, conversation: list[dict[str, Any]]) -> bool:
        """Is the conversation near the model's context window? A character count bounds the token
        estimate from above (no text has more tokens than characters), so the estimate itself only
        runs for conversations that might be near the limit."""
        window = self.model_settings.context_window
        budget = (window - len(system_prompt) - 4) * COMPRESS_THRESHOLD
        chars = 0
        for message in conversation:
            content = message.get("content")
            chars += 4 + (len(content) if isinstance(content, str) else len(_json(content)))
            if message.get("tool_calls"):
                chars += len(_json(message["tool_calls"]))
        if chars <= budget:
            return False
        prompt = estimate_tokens([{"role": "system", "content": system_prompt}])
        return needs_compression(conversation, window - prompt, COMPRESS_THRESHOLD)

    async def compress(self, msg: InboundMessage, session_id: str, *, auto: bool, window: int = 0) -> str:
        """Summarise the session into a child session and move the chat there. Returns the text to
        send. `window`: the context size the model server gave, when smaller than the configured one."""
        client = self.factory.client
        settings = self.model_settings
        if client is None or not settings.is_configured:
            return "" if auto else _(NOT_CONFIGURED_TEXT)
        if 0 < window < settings.context_window:
            settings = dataclasses.replace(settings, context_window=window)

        async def summary(conversation: list[dict[str, Any]]) -> str:
            return await summarise(client, settings, conversation)

        try:
            child = await self.store.compress(
                session_id,
                summary,
                key=self.store.key_for(msg.source),
                origin=msg.source.to_dict(),
                model=settings.name,
            )
        except (asyncio.CancelledError, LeaseLost):  # (LeaseLost: another replica holds the chat)
            raise
        except ValueError as exc:
            return "" if auto else _("Nothing to compress: {reason}.", reason=exc)
        except Exception as exc:
            log.warning("compressing %s failed: %s", session_id, describe_error(exc))
            self._model_failed()
            return (
                ""
                if auto
                else _("Sorry, compressing failed: {reason}. Nothing was changed.", reason=describe_error(exc))
            )
        await self.forget(session_id)
        session = await self.db.aread(self.db.get_session, child)
        title = session.get("title") if session else None
        name = f"“{title}” ({child})" if title else child
        if auto:
            return _(
                "This conversation was getting long, so I summarised it into a new session {name} and we "
                "continue there. The earlier messages stay searchable.",
                name=name,
            )
        return _(
            "I summarised it into a new session {name} and we continue there. The earlier messages stay searchable.",
            name=name,
        )


async def _settle(closing: Awaitable[Any]) -> None:
    """Let a stopped turn's reply settle (bounded), never raising over it."""
    try:
        await asyncio.wait_for(closing, CLOSE_TIMEOUT)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.warning("a stopped turn's reply could not be settled", exc_info=True)


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
