"""`GatewayRunner`: from an adapter's inbound message to the reply (DESIGN.md §6).

    inbound -> authorise -> de-duplicate (persisted) -> session key -> per-key lock
            -> reset check -> command or agent turn -> persist every message -> reply

`handle_inbound` (the adapters' callback) authorises, computes the key, commits the message to the
inbox (gateway.runtime.delivery: the dedup, and what the adapter's acknowledgement waits for) and
hands it to that chat's lane (gateway.runtime.lanes); it returns once the message is durable, not
answered. An entry is done when its reply is committed to the outbox; on start the replies not
delivered are sent, then the entries not done are taken up again, in order, before new messages
of their chat: a turn a crash cut short is run again or reported (`gateway.interrupted_turns`). The lane keeps one chat's messages in
order and applies the busy mode; different chats run concurrently. The agent turn itself is in
gateway.runtime.turn, the commands in gateway.commands.

How an admitted message reaches its lane, and how unfinished entries are taken up again, depends
on the mode (one process per home, or replicas on Postgres): the runner hands both to its
`Intake` (gateway.runtime.intake), one object per mode, and only routes. On replicas every write of
a chat's job, and of a reply or a drop outside one, commits only while this replica holds the
chat: the runner sets the chat's fence around it (gateway.storage.fence); a turn whose lease went
elsewhere is dropped at its next commit (LeaseLost); its chat's queue here goes when the lease does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sys
import time
from collections import OrderedDict
from typing import Any, Callable, Coroutine, Iterable, Iterator

from agent.llm import ModelSettings
from gateway import telemetry
from gateway.commands import COMMANDS, CommandContext, ParsedCommand, command_menu, parse_command, run_command
from gateway.commands.sessions import resume_choices
from gateway.config.load import Config
from gateway.db import StorageFace
from gateway.errors import LeaseLost
from gateway.language import N_, Language, _, gettext, n_, resolve, speaking
from gateway.runtime.approvals import Approvals
from gateway.runtime.delivery import Inbox, Outbox
from gateway.runtime.due_runs import DueRuns
from gateway.runtime.intake import intake_for
from gateway.runtime.lanes import ChatLane, Job
from gateway.runtime.metrics import Metrics
from gateway.runtime.outbound import Outbound
from gateway.runtime.turn import TurnRunner
from gateway.schedules.clock import SystemWallClock, WallClock
from gateway.sessions.access import AccessControl
from gateway.sessions.store import SessionEntry, SessionStore
from gateway.source import InvalidSessionSource, Platform, SessionSource
from gateway.storage import fence
from gateway.storage.health import storage_fault
from gateway.text import valid_text
from platforms.base import AdapterHealth, InboundMessage, PlatformAdapter
from tools.mcp import McpTools

log = logging.getLogger(__name__)

REFUSAL_INTERVAL = 600.0  # seconds between two "not allowed" replies to the same person
EMPTY_TEXT = N_("I can only read text, photos, voice notes and files: please send your message as one of those.")
ERROR_TEXT = N_("Sorry, something went wrong while handling that message. Please try again.")
INTERRUPTED_TEXT = N_(
    "Your message “{text}” was cut short by a restart before I could answer it. Send /retry to have it answered."
)


class GatewayRunner:
    """Implements `LaneHost` (for the lanes) and `ChatServices` (for the commands), and is the
    host of its `Intake`. Built by gateway.service.app (`build_runner`), which makes its
    collaborators."""

    def __init__(
        self,
        config: Config,
        db: StorageFace,
        store: SessionStore,
        outbound: Outbound,
        turns: TurnRunner,
        access: AccessControl,
        inbox: Inbox,
        outbox: Outbox,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        ops_url: Callable[[], str | None] = lambda: None,
        approvals: Approvals | None = None,
        mcp: McpTools | None = None,
        wall_clock: WallClock | None = None,  # when scheduled runs are due (tests move it)
    ) -> None:
        self.config = config
        self.approvals = approvals  # tool calls waiting for /approve (gateway.runtime.approvals)
        self.mcp = mcp
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
        self.inbox = inbox
        self.outbox = outbox
        self.health = outbox.health  # whether storage commits: jobs wait for it, /readyz shows it
        self.leases = outbox.leases  # who runs which chat: SoloLeases on SQLite, SharedLeases on Postgres
        self.intake = intake_for(self, self.leases)
        self.wall_clock = wall_clock or SystemWallClock()
        self.due_runs = DueRuns(db, self.intake, config.schedules, self.wall_clock, self._may_schedule)
        self._due_loop: asyncio.Task | None = None
        self.interrupted_mode = config.gateway.interrupted_turns  # rerun | notify (checked by gateway.config)
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
        self._ops_url = ops_url  # the ops HTTP server's address once it listens (/status shows it)
        self.ops_down: str | None = None  # why it could not listen (/status says so)
        if metrics is not None:
            metrics.set_gauge_fn("queue_depth", self.queue_depth)
            metrics.set_gauge_fn("agent_cache_size", self.cache_size)
            metrics.set_gauge_fn("inbox_backlog", db.inbox_backlog)
            metrics.set_gauge_fn("outbox_backlog", db.outbox_backlog)
            metrics.set_gauge_fn("outbox_parked", lambda: len(outbox.parked))
            # A 0 sample from the start: a dashboard's rate() sees the first event as an increase.
            for platform in self.adapters:
                counters = ("messages_in_total", "messages_out_total", "duplicates_total", "reruns_total")
                for counter in (*counters, "uncertain_sends_total"):
                    metrics.inc(counter, {"platform": platform}, by=0)
            metrics.inc("model_errors_total", by=0)
            metrics.inc("interrupted_turns_total", {"action": "notify"}, by=0)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        # Make the model client now (building its TLS context takes tens of milliseconds), not in
        # the middle of the first conversation while other chats wait.
        self.factory.client
        menu = command_menu()
        for adapter in self.adapters.values():
            adapter.bot_commands(menu)
            adapter.command_suggestions(self.suggest)
            adapter.catch_up_from(functools.partial(self.inbox.latest, adapter.platform.value))
        await self.intake.start()
        # after the take-up: a run claimed by a previous process is an entry that was just taken up
        self._due_loop = asyncio.create_task(self.due_runs.run(), name="scheduled runs")

    @property
    def ops_url(self) -> str | None:
        return self._ops_url()

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def suggest(self, source: SessionSource, command: str, typed: str) -> list[tuple[str, str]]:
        """Choices for a platform's command picker (Discord's /resume autocomplete): only for someone
        allowed to use commands here, and only sessions they may resume, as typed /resume lists."""
        if command != "resume":
            return []
        if not self.access.check(source, mentioned=True, reply_to_bot=False, is_command=True).allowed:
            return []
        see_all = self.access.is_admin(source) or self.single_owner
        return await resume_choices(self.db, source, see_all, typed)

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
        """Stop in the order that loses nothing and answers nothing twice: intake first (what
        arrives now is stored and acknowledged, not run; what waits in a lane is left: the next
        start answers both), then let running work finish (up to `timeout`; the rest is cancelled,
        a streamed answer it cut is edited on the next start) and its replies leave, with the
        adapters still up to send them; the adapters last, then the agents."""
        self._stopping = True
        if self._due_loop is not None:
            self._due_loop.cancel()
        for lane in list(self.lanes.values()):
            lane.close()
        try:
            await asyncio.wait_for(self.drain(), timeout)
        except TimeoutError:
            log.warning("shutdown: %d chats still busy after %.0fs; cancelling", len(self.lanes), timeout)
            # The agent writes each step with its tool results before honouring a cancel, so what
            # was said so far is persisted (a checkpoint); the lanes then end.
            for lane in list(self.lanes.values()):
                lane.cancel_current()
            for task in list(self._side):
                task.cancel()
            try:
                await asyncio.wait_for(self.drain(), 5.0)
            except TimeoutError:
                log.error("shutdown: some chats did not stop")
        await self.outbox.settle(timeout)
        await self.outbox.stop()  # retries end here: what is still queued stays for the next start
        for adapter in self.adapters.values():
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping adapter %s failed", adapter.platform.value)
        await self.leases.stop()
        await self.cache.close_all()
        await self.factory.close()

    def readiness(self) -> dict[str, AdapterHealth]:
        return adapter_health(self.adapters.values())

    def queue_depth(self) -> int:
        """Messages waiting: the running one in each chat is not counted."""
        return sum(lane.waiting() for lane in self.lanes.values())

    def cache_size(self) -> int:
        return len(self.cache)

    # -- intake ----------------------------------------------------------------------------------
    async def handle_inbound(self, msg: InboundMessage) -> None:
        """The adapters' callback: authorise, commit to the inbox, queue in the chat's lane.
        Returns once the message is durable (platforms.base.MessageHandler); raises if it is not.
        The root of the message's trace (gateway.telemetry) spans exactly that."""
        with telemetry.inbound(msg.source.platform.value, msg.source.chat_type) as span:
            span.set("chinwag.duplicate", False)
            msg.trace = telemetry.message_trace()
            await self._inbound(msg)

    async def _inbound(self, msg: InboundMessage) -> None:
        source = msg.source
        platform = source.platform.value
        msg.text = valid_text(msg.text or "")  # everything after this stores, indexes and echoes it
        self.inc("messages_in_total", {"platform": platform})
        command = parse_command(msg.text)
        decision = self.access.check(
            source, mentioned=msg.mentioned, reply_to_bot=msg.reply_to_bot, is_command=command is not None
        )
        if not decision.allowed:
            telemetry.annotate("chinwag.outcome", "ignored")
            log.info("ignored message on %s chat %s: %s", platform, source.chat_id, decision.reason)
            if decision.addressed and source.chat_type == "dm":
                with speaking(await self.language_of(msg.source)):
                    await self._refuse(msg)
            return
        if command is not None and command.bot and not self._addressed_to_us(source.platform, command.bot):
            # In a group it is another bot's command. A DM holds only this bot (privacy mode is a
            # group matter), so silence there would look like a hang: say whose command it was.
            if source.chat_type == "dm":
                with speaking(await self.language_of(msg.source)):
                    await self.send(msg, other_bot_text(command.name, command.bot))
            return
        if not msg.text.strip() and not msg.attachments:  # a sticker, a location, ...: nothing to answer
            if source.chat_type == "dm":
                await self.send(msg, gettext(await self.language_of(msg.source), EMPTY_TEXT))
            return
        try:
            key = self.store.key_for(source)
        except InvalidSessionSource as exc:
            log.warning("dropped message on %s: %s", platform, exc)
            return
        if not await self.intake.admit(key, msg):
            telemetry.annotate("chinwag.duplicate", True)
            log.info("duplicate delivery of %s message %s refused", platform, msg.message_id)
            self.inc("duplicates_total", {"platform": platform})

    def _may_schedule(self, source: SessionSource) -> bool:
        """May this person's scheduled run start: are they allowed to talk to the bot here (a
        scheduled message is addressed to the bot, as a mention is)?"""
        return self.access.check(source, mentioned=True).allowed

    def enqueue(self, key: str, msg: InboundMessage) -> None:
        source = msg.source
        platform = source.platform.value
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
        telemetry.queued(msg.trace)
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
            _(
                "Sorry, this assistant is private. Your user id is {user_id}; the owner can "
                "allow it under platforms.{platform}.allowed_users.",
                user_id=msg.source.person_id,
                platform=msg.source.platform.value,
            ),
        )

    async def language_of(self, source: SessionSource) -> Language:
        """The language to answer the person of `source` in (gateway.language.resolve: their
        /language choice, the platform's hint, platforms.<name>.language, gateway.language). One
        point read per message, so a choice made on another replica counts at once."""
        platform = source.platform.value
        chosen = None
        if source.person_id:
            chosen = await self.db.aread(self.db.person_language, platform, source.person_id)
        configured = self.config.platforms.get(platform) or {}
        return resolve(chosen, source.language, configured.get("language"), self.config.gateway.language)

    # -- LaneHost: called by the lanes -----------------------------------------------------------
    async def accept(self, lane: ChatLane, msg: InboundMessage) -> Job | None:
        if not await self.intake.accepted(msg):
            return None
        # A storage fault here waits for storage, as a job's does: the lane holds the chat's later
        # messages meanwhile. Dropping the message let them overtake it (and on replicas nothing
        # read its entry again while the lease stayed here).
        msg.reply_language = await self.health.committed(lambda: self.language_of(msg.source))
        command = parse_command(msg.text)
        taken_up = self.intake.taken_up(msg)
        if command is None:
            return Job(msg, "turn", taken_up)
        if command.name == "stop":
            with self._fenced(lane.key), speaking(msg.reply_language):
                await self._command_now(lane, msg, command)
            return None
        spec = COMMANDS.get(command.name)
        if spec is not None and spec.at_once:
            with self._fenced(lane.key):
                await self._command_now(lane, msg, command)
            return None
        if spec is not None and spec.immediate and self._may_skip_queue(lane, msg):
            with self._fenced(lane.key), speaking(msg.reply_language):  # the task takes the fence with it
                self.spawn(self._command_now(lane, msg, command))
            return None
        return Job(msg, "command", taken_up)

    async def _command_now(self, lane: ChatLane, msg: InboundMessage, command: ParsedCommand) -> None:
        """A command answered as it arrives, not in its turn in the lane (its trace has the turn all the same)."""
        with telemetry.turn(msg.trace, {"chinwag.job": "command", "chinwag.outcome": "answered"}):
            if command.name == "stop":
                await self.reply(msg, await self._stop_lane(lane, msg.source))
            else:
                await self._run_command(lane, msg, command)

    @staticmethod
    def _may_skip_queue(lane: ChatLane, msg: InboundMessage) -> bool:
        """A read-only command need not wait for a long agent turn. It does wait behind a command
        (`/new` then `/search` must search from the new session), and in a lane that answers
        strictly in order (the terminal)."""
        job = lane.current_job
        return lane.busy and job is not None and job.kind == "turn" and not lane.in_order

    async def execute(self, lane: ChatLane, job: Job) -> None:
        with telemetry.turn(job.msg.trace, {"chinwag.job": job.kind, "chinwag.outcome": "answered"}):
            await self._job(lane, job)

    async def _job(self, lane: ChatLane, job: Job) -> None:
        started = time.monotonic()
        try:
            # Every write of the job (a command's session move, a turn's messages, a reset on
            # lookup) commits only while this replica still holds the chat (gateway.storage.fence).
            with self._fenced(lane.key), speaking(job.msg.reply_language):
                await self._execute(lane, job)
        except asyncio.CancelledError:
            telemetry.annotate("chinwag.outcome", "stopped")
            if not self._stopping:  # /stop or an interrupting message: this one is finished with
                try:
                    with self._fenced(lane.key):
                        await asyncio.shield(self.inbox.finish([job.msg], "stopped"))
                except LeaseLost:
                    pass
            raise  # at shutdown it stays unfinished: the next start takes it up again
        except LeaseLost:
            # The chat's queue is left to the leases (they drop it when they give the lease up): the
            # chat may be held here again by now (the registry lost and regained across a Postgres
            # restart), and that queue is then the new lease's, read by its take-up. Dropping it
            # here lost those entries while the chat stayed here.
            telemetry.annotate("chinwag.outcome", "elsewhere")
            log.info("chat %s: its lease was given up: this turn is dropped here (its holder runs it)", lane.key)
            self.inc("turns_fenced_total")
        except Exception as exc:
            if storage_fault(exc):
                await self._after_storage_fault(lane, job, exc)
                return
            log.exception("handling a message for %s failed", lane.key)
            telemetry.annotate("chinwag.outcome", "failed")
            await self.reply(job.msg, gettext(job.msg.reply_language, ERROR_TEXT), outcome="failed")
        finally:
            if job.kind == "turn":  # (commands are timed in _run_command, those answered at once too)
                self.observe("turn_seconds", time.monotonic() - started)

    async def _after_storage_fault(self, lane: ChatLane, job: Job, exc: BaseException) -> None:
        """The job failed because storage could not commit (a full disk, Postgres gone): an apology
        could not be stored either, and nothing is wrong with the message. Wait until storage
        commits again (gateway.storage.health), then run the job again from what its entry says
        was stored: done (its reply committed) is finished with; started (the person's message
        stored) is a turn cut short. The lane waits meanwhile, so the chat's order is kept."""
        log.warning("message for %s waits for storage (%s)", lane.key, " ".join(str(exc).split())[:200])
        self.health.failed(exc)
        await self.health.recovered()
        entry_id = job.msg.inbox_id
        if entry_id is not None:
            row = await self.db.aread(self.db.inbox_entry, entry_id)
            if row is None:
                return
            if row["done_at"] is not None:  # its reply is committed; the fault may have come before its send
                await self.outbox.deliver_unsent_for(entry_id)
                return
            if row["started_at"] is not None and job.kind == "turn":
                self.intake.interrupted[entry_id] = row
        await self.execute(lane, job)

    async def _execute(self, lane: ChatLane, job: Job) -> None:
        async with self.store.lock(lane.key):
            command = parse_command(job.msg.text) if job.kind == "command" else None
            if command is not None:
                await self._run_command(lane, job.msg, command)
            elif job.msg.inbox_id in self.intake.interrupted:
                await self._take_up_interrupted(lane, job.msg)
            else:
                entry = await self.lookup(job.msg)
                await self.turns.run(lane, job.msg, entry, job.msg.text)

    async def _take_up_interrupted(self, lane: ChatLane, msg: InboundMessage) -> None:
        """A turn a crash or stop cut short after it stored the person's message. `rerun`: hide what
        it stored after that message (flags only: it stays searchable) and run it again on the
        same message row, its streamed answer's messages edited in place, so the person sees one
        answer (the model may be called twice). `notify`: say so and offer /retry."""
        row = self.intake.interrupted.pop(msg.inbox_id or 0)
        if self.interrupted_mode == "notify":
            telemetry.annotate("chinwag.outcome", "interrupted")
            self.inc("interrupted_turns_total", {"action": "notify"})
            await self.reply(msg, _(INTERRUPTED_TEXT, text=_excerpt(msg.text)), outcome="interrupted")
            return
        self.inc("reruns_total", {"platform": msg.source.platform.value})
        stored = row.get("user_message_id")
        session_id = await asyncio.to_thread(self.db.message_session, stored) if stored else None
        if stored and session_id is not None:
            await asyncio.to_thread(self.db.supersede_after, session_id, stored)
            await self.forget(session_id)
        entry = await self.lookup(msg)
        if entry.session_id != session_id:  # the chat moved on (a reset): the message is stored anew there
            stored = None
        shown = json.loads(row.get("reply_ids") or "[]")
        await self.turns.run(lane, msg, entry, msg.text, stored=stored, shown=shown, rerun=True)

    def answer_approval(self, msg: InboundMessage, approve: bool, args: str) -> str:
        if self.approvals is None:
            return _("Nothing is waiting for your approval here.")
        return self.approvals.answer(msg.source, self.access.is_admin(msg.source), approve, args)

    def tool_lines(self, msg: InboundMessage) -> list[str]:
        registry = getattr(self.factory, "tools", None)  # a test's factory may bring no registry
        lines = [_("{name} (built in)", name=name) for name in (registry.names() if registry is not None else [])]
        if self.mcp is not None and self.access.check(msg.source, mentioned=True).allowed:
            for tool in self.mcp.tools():
                named = {"name": f"{tool.server}.{tool.tool}", "description": _excerpt(tool.description)}
                lines.append(
                    _("{name}: {description} — asks you first", **named)
                    if tool.requires_approval
                    else _("{name}: {description}", **named)
                )
        return lines

    async def notify(self, lane: ChatLane, msg: InboundMessage, text: str) -> None:
        await self.send(msg, text)

    async def refuse(self, lane: ChatLane, msg: InboundMessage, text: str) -> None:
        """The lane will not run `msg` (its chat has too many waiting): say so; it is done."""
        with self._fenced(lane.key):
            await self.reply(msg, text, outcome="refused")

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
        return await self._stop_lane(lane) if lane is not None else _("Nothing to stop.")

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
        """A notice (busy, reset, refusal): sent at once, not kept. A message's answer is `reply`."""
        await self.outbound.send(msg, text)

    async def reply(self, msg: InboundMessage, text: str, *, outcome: str = "answered") -> None:
        """The answer to `msg` (a command's, an error's): committed to the outbox with its inbox
        entry's done mark, then delivered. Nothing to say: the entry is just done."""
        if not text:
            await self.inbox.finish([msg], outcome)
            return
        text = valid_text(text)
        row = await self.outbox.commit(msg, text, [msg], outcome)
        if msg.reply_target is not None:  # an interaction (a Discord slash command) is answered in place
            await self.outbound.send(msg, text)
            await self.outbox.record(row["id"], 1, [], True)
            return
        reply_to = msg.message_id if msg.source.chat_type != "dm" and msg.message_id else None
        key = self.store.key_for(msg.source)  # (its lease is confirmed before the send, on replicas)
        await self.outbox.deliver(row["id"], msg.source, text, reply_to, send_key=row["send_key"], key=key)

    def inc(self, name: str, labels: dict[str, str] | None = None) -> None:
        if self.metrics is not None:
            self.metrics.inc(name, labels)

    def observe(self, name: str, value: float) -> None:
        if self.metrics is not None:
            self.metrics.observe(name, value)

    async def _stop_lane(self, lane: ChatLane, by: SessionSource | None = None) -> str:
        """Cancel the chat's running job and drop what waits; the text for whoever stopped it (`by`).
        In a conversation several people share (a thread), each other person whose message was
        stopped or dropped is told once, in reply to it: nobody waits for an answer in silence."""
        current = lane.current_job.msg if lane.busy and lane.current_job is not None else None
        running = lane.cancel_current()
        waiting = [job.msg for job in lane.pending] + list(lane.steered)
        dropped = lane.clear_pending()
        await self.inbox.finish(waiting, "dropped")
        if by is not None:
            told = {by.person_id}
            for msg in ([current] if current is not None else []) + waiting:
                if msg.source.person_id not in told:
                    told.add(msg.source.person_id)
                    await self.send(msg, stopped_by_text(by.user_name or by.person_id or "someone"))
        if not running and not dropped:
            return _("Nothing to stop.")
        if not dropped:
            return _("Stopped.")
        if running:
            return n_("Stopped. Dropped {n} waiting message.", "Stopped. Dropped {n} waiting messages.", dropped)
        return n_("Dropped {n} waiting message.", "Dropped {n} waiting messages.", dropped)

    # -- internals -------------------------------------------------------------------------------
    async def _run_command(self, lane: ChatLane, msg: InboundMessage, command: ParsedCommand) -> None:
        ctx = CommandContext(self, lane.key, msg, command, self.access.is_admin(msg.source))
        started = time.monotonic()
        try:
            reply = await run_command(ctx)
        except (asyncio.CancelledError, LeaseLost):  # another replica holds the chat: it answers
            raise
        except Exception:
            log.exception("command /%s failed", command.name)
            reply = _(ERROR_TEXT)
        finally:
            # Apart from turns: commands take milliseconds and would hide how long turns take.
            self.observe("command_seconds", time.monotonic() - started)
        await self.reply(msg, reply or "")

    def drop_queue(self, key: str) -> None:
        lane = self.lanes.get(key)
        if lane is not None:
            lane.drop_waiting()

    @contextlib.contextmanager
    def _fenced(self, key: str) -> Iterator[None]:
        """The writes inside commit only while this replica holds the chat (gateway.storage.fence)."""
        with fence.fenced(self.leases.guard(key)):
            yield

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._side.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task) -> None:
        self._side.discard(task)
        if not task.cancelled() and task.exception() is not None:  # else "never retrieved", at collection
            log.error("%r failed", task.get_coro(), exc_info=task.exception())


def stopped_by_text(name: str) -> str:
    return _(
        "Not answered: {name} sent /stop in this conversation. Send your message again if you still want an answer.",
        name=name,
    )


def other_bot_text(name: str, bot: str) -> str:
    return _(
        "/{name}@{bot} is addressed to @{bot}, not to me. Send /{name} without the @ for mine.", name=name, bot=bot
    )


def adapter_health(adapters: Iterable[PlatformAdapter]) -> dict[str, AdapterHealth]:
    """Each platform's health, by name (/readyz, the console, the adapter_ready gauge)."""
    return {adapter.platform.value: adapter.health() for adapter in adapters}


def _excerpt(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
