"""`GatewayRunner`: from an adapter's inbound message to the reply (DESIGN.md §6).

    inbound -> authorise -> de-duplicate (persisted) -> session key -> per-key lock
            -> reset check -> command or agent turn -> persist every message -> reply

`handle_inbound` (the adapters' callback) only authorises, computes the key and hands the message
to that chat's lane (gateway.runtime.lanes), so it returns at once. The lane keeps one chat's messages in
order and applies the busy mode; different chats run concurrently. The agent turn itself is in
gateway.runtime.turn, the commands in gateway.commands.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import OrderedDict
from typing import Any, Callable

from agent.llm import ModelSettings
from gateway.commands import COMMANDS, CommandContext, ParsedCommand, command_menu, parse_command, run_command
from gateway.db import SessionDB
from gateway.runtime.lanes import ChatLane, Job
from gateway.runtime.outbound import Outbound
from gateway.runtime.turn import TurnRunner
from gateway.sessions.access import AccessControl
from gateway.sessions.dedup import Dedup
from gateway.sessions.store import SessionEntry, SessionStore
from gateway.source import InvalidSessionSource, Platform, SessionSource
from platforms.base import AdapterHealth, InboundMessage

log = logging.getLogger(__name__)

REFUSAL_INTERVAL = 600.0  # seconds between two "not allowed" replies to the same person
EMPTY_TEXT = "I can only read text, photos, voice notes and files: please send your message as one of those."
ERROR_TEXT = "Sorry, something went wrong while handling that message. Please try again."


class GatewayRunner:
    """Implements `LaneHost` (for the lanes) and `ChatServices` (for the commands). Built by
    gateway.service.app (`build_runner`), which makes its collaborators."""

    def __init__(
        self,
        config: Any,  # gateway.config.Config
        db: SessionDB,
        store: SessionStore,
        outbound: Outbound,
        turns: TurnRunner,
        access: AccessControl,
        dedup: Dedup,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Any = None,  # gateway.service.metrics.Metrics
    ) -> None:
        self.config = config
        self.db = db
        self.store = store
        self.outbound = outbound
        self.adapters = outbound.adapters
        self.turns = turns
        self.model_settings: ModelSettings = turns.model_settings
        self.factory = turns.factory
        self.cache = turns.cache
        self.conversations = turns.conversations
        self.access = access
        self.dedup = dedup
        self.clock = clock
        self.metrics = metrics
        self.single_owner: bool = turns.single_owner
        self.lanes: dict[str, ChatLane] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._side: set[asyncio.Task] = set()
        self._listings: OrderedDict[str, list[str]] = OrderedDict()  # key -> ids shown by bare /resume
        self._refused: OrderedDict[str, float] = OrderedDict()
        self._lane_sources: dict[str, SessionSource] = {}  # key -> the chat a lane serves (for chat_idle)
        self._stopping = False
        self.ops_url: str | None = None  # the ops HTTP server's address once it listens (/status shows it)
        if metrics is not None:
            metrics.set_gauge_fn("queue_depth", self.queue_depth)
            metrics.set_gauge_fn("agent_cache_size", self.cache_size)
            # A 0 sample from the start: a dashboard's rate() sees the first event as an increase.
            for platform in self.adapters:
                for counter in ("messages_in_total", "messages_out_total", "duplicates_total"):
                    metrics.inc(counter, {"platform": platform}, by=0)
            metrics.inc("model_errors_total", by=0)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        # Make the model client now (building its TLS context takes tens of milliseconds), not in
        # the middle of the first conversation while other chats wait.
        self.factory.client
        menu = command_menu()
        for adapter in self.adapters.values():
            adapter.bot_commands(menu)
            await adapter.start(self.handle_inbound)

    async def drain(self) -> None:
        """Wait until every chat's queue is empty and no turn or command is running."""
        while self.lanes or self._side:
            if self._side:
                await asyncio.wait(list(self._side))
                continue
            self._idle.clear()
            if self.lanes:
                await self._idle.wait()

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop intake, let running work finish (up to `timeout`), cancel the rest, close agents."""
        self._stopping = True
        for adapter in self.adapters.values():
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping adapter %s failed", adapter.platform.value)
        try:
            await asyncio.wait_for(self.drain(), timeout)
        except TimeoutError:
            log.warning("shutdown: %d chats still busy after %.0fs; cancelling", len(self.lanes), timeout)
            # The agent writes each step with its tool results before honouring a cancel, so what
            # was said so far is persisted (a checkpoint); the lanes then end.
            for lane in list(self.lanes.values()):
                lane.clear_pending()
                lane.inbox.clear()
                lane.cancel_current()
            for task in list(self._side):
                task.cancel()
            try:
                await asyncio.wait_for(self.drain(), 5.0)
            except TimeoutError:
                log.error("shutdown: some chats did not stop")
        await self.dedup.flush()
        await self.cache.close_all()
        await self.factory.close()

    def readiness(self) -> dict[str, AdapterHealth]:
        return {name: adapter.health() for name, adapter in self.adapters.items()}

    def queue_depth(self) -> int:
        """Messages waiting: the running one in each chat is not counted."""
        return sum(lane.waiting() for lane in self.lanes.values())

    def cache_size(self) -> int:
        return len(self.cache)

    # -- intake ----------------------------------------------------------------------------------
    async def handle_inbound(self, msg: InboundMessage) -> None:
        """The adapters' callback: authorise, find the chat's lane, queue. Returns at once."""
        source = msg.source
        platform = source.platform.value
        self.inc("messages_in_total", {"platform": platform})
        if self._stopping:
            return
        command = parse_command(msg.text)
        decision = self.access.check(
            source, mentioned=msg.mentioned, reply_to_bot=msg.reply_to_bot, is_command=command is not None
        )
        if not decision.allowed:
            log.info("ignored message on %s chat %s: %s", platform, source.chat_id, decision.reason)
            if decision.addressed and source.chat_type == "dm":
                await self._refuse(msg)
            return
        if command is not None and command.bot and not self._addressed_to_us(source.platform, command.bot):
            return  # "/cmd@other_bot" in a group: another bot's command
        if not msg.text.strip() and not msg.attachments:  # a sticker, a location, ...: nothing to answer
            if source.chat_type == "dm":
                await self.send(msg, EMPTY_TEXT)
            return
        try:
            key = self.store.key_for(source)
        except InvalidSessionSource as exc:
            log.warning("dropped message on %s: %s", platform, exc)
            return
        lane = self.lanes.get(key)
        if lane is None:
            adapter = self.adapters.get(platform)
            if adapter is not None and adapter.answers_in_order:
                # One person's typing (or a piped script): every line is answered, in order, with
                # nothing dropped and no acknowledgements in between.
                lane = ChatLane(
                    key,
                    self,
                    busy_mode="queue",
                    max_pending=sys.maxsize,
                    busy_ack=False,
                    in_order=True,
                    clock=self.clock,
                )
            else:
                lane = ChatLane(
                    key,
                    self,
                    busy_mode=self._busy_mode(platform),
                    max_pending=self.config.gateway.max_pending,
                    busy_ack=self.config.gateway.busy_ack,
                    clock=self.clock,
                )
            self.lanes[key] = lane
            self._lane_sources[key] = source
            self._idle.clear()
        lane.push(msg)

    def _busy_mode(self, platform: str) -> str:
        try:
            return self.config.platform(platform).busy_mode
        except KeyError:
            return self.config.gateway.busy_mode

    def _addressed_to_us(self, platform: Platform, bot: str) -> bool:
        adapter = self.adapters.get(platform.value)
        ours = getattr(adapter, "bot_username", None) if adapter else None
        return not ours or ours.lstrip("@").lower() == bot.lower()

    async def _refuse(self, msg: InboundMessage) -> None:
        who = f"{msg.source.platform.value}:{msg.source.person_id}"
        now = self.clock()
        last = self._refused.get(who)
        if last is not None and now - last < REFUSAL_INTERVAL:
            return
        self._refused[who] = now
        while len(self._refused) > 10_000:
            self._refused.popitem(last=False)
        await self.send(
            msg,
            (
                f"Sorry, this assistant is private. Your user id is {msg.source.person_id}; the owner can "
                f"allow it under platforms.{msg.source.platform.value}.allowed_users."
            ),
        )

    # -- LaneHost: called by the lanes -----------------------------------------------------------
    async def accept(self, lane: ChatLane, msg: InboundMessage) -> Job | None:
        platform = msg.source.platform.value
        command = parse_command(msg.text)
        # A message for the agent is marked seen when its user row is stored (gateway.sessions.dedup).
        if msg.message_id and not await self.dedup.first_time(platform, msg.message_id, mark=command is not None):
            log.info("duplicate delivery of %s message %s ignored", platform, msg.message_id)
            self.inc("duplicates_total", {"platform": platform})
            return None
        if command is None:
            return Job(msg, "turn")
        if command.name == "stop":
            await self.send(msg, self._stop_lane(lane))
            return None
        spec = COMMANDS.get(command.name)
        if spec is not None and spec.immediate and self._may_skip_queue(lane, msg):
            self._spawn(self._run_command(lane, msg, command))
            return None
        return Job(msg, "command")

    @staticmethod
    def _may_skip_queue(lane: ChatLane, msg: InboundMessage) -> bool:
        """A read-only command need not wait for a long agent turn. It does wait behind a command
        (`/new` then `/search` must search from the new session), and in a lane that answers
        strictly in order (the terminal)."""
        job = lane.current_job
        return lane.busy and job is not None and job.kind == "turn" and not lane.in_order

    async def execute(self, lane: ChatLane, job: Job) -> None:
        started = time.monotonic()
        try:
            async with self.store.lock(lane.key):
                command = parse_command(job.msg.text) if job.kind == "command" else None
                if command is not None:
                    await self._run_command(lane, job.msg, command)
                else:
                    entry = await self.lookup(job.msg)
                    await self.turns.run(lane, job.msg, entry, job.msg.text)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handling a message for %s failed", lane.key)
            await self.send(job.msg, ERROR_TEXT)
        finally:
            if job.kind == "turn":  # (commands are timed in _run_command, those answered at once too)
                self.observe("turn_seconds", time.monotonic() - started)

    async def notify(self, lane: ChatLane, msg: InboundMessage, text: str) -> None:
        await self.send(msg, text)

    def lane_idle(self, lane: ChatLane) -> None:
        if self.lanes.get(lane.key) is lane:
            del self.lanes[lane.key]
            source = self._lane_sources.pop(lane.key, None)
            adapter = self.adapters.get(source.platform.value) if source is not None else None
            if adapter is not None and source is not None:
                adapter.chat_idle(source)
        if not self.lanes:
            self._idle.set()

    # -- ChatServices: used by the commands ------------------------------------------------------
    async def lookup(self, msg: InboundMessage) -> SessionEntry:
        """The chat's current session (reset policy applied); tells the person when it rolled over."""
        found = await self.store.get_or_create(msg.source, model=self.model_settings.name)
        if found.created:  # nothing to read back: its conversation is empty
            self.conversations.put(found.entry.session_id, found.entry.session_key, [])
        if found.reset is not None:
            await self.forget(found.reset.previous_session_id)
            await self.send(msg, found.reset.text())
        return found.entry

    async def forget(self, session_id: str) -> None:
        await self.turns.forget(session_id)

    async def agent_turn(self, key: str, msg: InboundMessage, entry: SessionEntry, text: str) -> None:
        # A command runs as its lane's job, so the lane is there; a stand-in only keeps a turn
        # asked for from elsewhere from failing (nothing can steer it).
        lane = self.lanes.get(key) or ChatLane(key, self, clock=self.clock)
        await self.turns.run(lane, msg, entry, text)

    async def compress(self, msg: InboundMessage, session_id: str, auto: bool) -> str:
        return await self.turns.compress(msg, session_id, auto=auto)

    async def stop_chat(self, key: str) -> str:
        lane = self.lanes.get(key)
        return self._stop_lane(lane) if lane is not None else "Nothing to stop."

    def chat_state(self, key: str) -> tuple[str, int]:
        lane = self.lanes.get(key)
        if lane is None:
            return self.config.gateway.busy_mode, 0  # (the command outlived its lane)
        return lane.busy_mode, len(lane.pending)

    def remember_listing(self, key: str, ids: list[str]) -> None:
        self._listings[key] = ids
        self._listings.move_to_end(key)
        while len(self._listings) > 1000:
            self._listings.popitem(last=False)

    def recall_listing(self, key: str) -> list[str] | None:
        return self._listings.get(key)

    async def send(self, msg: InboundMessage, text: str) -> None:
        await self.outbound.send(msg, text)

    def inc(self, name: str, labels: dict[str, str] | None = None) -> None:
        if self.metrics is not None:
            self.metrics.inc(name, labels)

    def observe(self, name: str, value: float) -> None:
        if self.metrics is not None:
            self.metrics.observe(name, value)

    def _stop_lane(self, lane: ChatLane) -> str:
        running = lane.cancel_current()
        dropped = lane.clear_pending()
        if not running and not dropped:
            return "Nothing to stop."
        parts = ["Stopped."] if running else []
        if dropped:
            parts.append(f"Dropped {dropped} waiting message{'s' if dropped != 1 else ''}.")
        return " ".join(parts)

    # -- internals -------------------------------------------------------------------------------
    async def _run_command(self, lane: ChatLane, msg: InboundMessage, command: ParsedCommand) -> None:
        ctx = CommandContext(self, lane.key, msg, command, self.access.is_admin(msg.source))
        started = time.monotonic()
        try:
            reply = await run_command(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("command /%s failed", command.name)
            reply = ERROR_TEXT
        finally:
            # Apart from turns: commands take milliseconds and would hide how long turns take.
            self.observe("command_seconds", time.monotonic() - started)
        if reply:
            await self.send(msg, reply)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)
