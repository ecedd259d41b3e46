"""Per-chat lanes: messages of one chat in order, different chats concurrently, and busy modes.

Every session key gets a `ChatLane` while it has work. The adapter callback only appends to the
lane's inbox and wakes it (so it returns at once); the lane's worker then takes messages in arrival
order, asks the runner to `accept` each one (de-duplication, command parsing), and runs at most one
job (an agent turn or a command) at a time. When a message arrives while a job runs, the busy mode
decides (DESIGN.md §6):

- `queue`: run it after the current job;
- `interrupt`: cancel the running turn (what it already produced is persisted), then run it;
- `steer`: hand its text to the running turn, which reads it before its next model call; texts the
  turn did not get to are run afterwards as ordinary messages.

At most `max_pending` messages wait per chat; beyond that the person is told to wait. A short
acknowledgement says what happened to a message that could not run at once, at most once per
`ack_interval` seconds per chat. A queued message is acknowledged only when the running job is
still running `ACK_GRACE` seconds later: a job is often only finishing (its reply already on the
person's screen, its records committing), and "still working on your previous message" about a
reply they can read is wrong. `/stop` is not queued: the runner handles it as it arrives.

A lane with nothing to do removes itself, so idle chats cost nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from gateway.language import N_, _, n_, speaking
from platforms.base import InboundMessage

log = logging.getLogger(__name__)

BUSY_MODES = ("queue", "interrupt", "steer")
ACK_INTERVAL = 30.0
# A job's work after its reply is shown (the outbox record, the inbox entry done) takes
# milliseconds on a quiet machine and was seen past a second at load 8; a longer wait is worth a word.
ACK_GRACE = 2.0

ACK_TEXT = {
    "queue": N_("Still working on your previous message; I'll answer this one right after."),
    "interrupt": N_("Stopping the current reply to answer your new message."),
    "steer": N_("Got it; I'll take that into account in the reply I'm working on."),
}


def pending_cap_text(cap: int) -> str:
    return n_(
        "You already have {n} message waiting. This one was not queued: wait for the reply, "
        "or send /stop to cancel the current work.",
        "You already have {n} messages waiting. This one was not queued: wait for the replies, "
        "or send /stop to cancel the current work.",
        cap,
    )


@dataclass
class Job:
    msg: InboundMessage
    kind: str  # "turn" (for the agent) | "command"
    taken_up: bool = False  # accepted by an earlier process, taken up at start: never refused for the cap


class LaneHost(Protocol):
    """What a lane needs from the runner."""

    async def accept(self, lane: "ChatLane", msg: InboundMessage) -> Job | None:
        """De-duplicate and classify; None drops the message (duplicate, or handled at once)."""

    async def execute(self, lane: "ChatLane", job: Job) -> None:
        """Run one job (holding the session key's lock)."""

    async def notify(self, lane: "ChatLane", msg: InboundMessage, text: str) -> None:
        """Send a short notice to the chat of `msg`."""

    async def refuse(self, lane: "ChatLane", msg: InboundMessage, text: str) -> None:
        """`msg` will not be run (the chat has too many waiting): tell the person; it is done."""

    def lane_idle(self, lane: "ChatLane") -> None:
        """The lane has no work left and is going away."""


@dataclass
class ChatLane:
    key: str
    host: LaneHost
    busy_mode: str = "queue"
    max_pending: int = 5
    busy_ack: bool = True
    in_order: bool = False  # every message waits its turn, read-only commands too (the terminal)
    clock: Callable[[], float] = field(default=lambda: 0.0)
    ack_interval: float = ACK_INTERVAL
    ack_grace: float = ACK_GRACE

    inbox: deque[InboundMessage] = field(default_factory=deque)
    pending: deque[Job] = field(default_factory=deque)
    current: asyncio.Task | None = None
    current_job: Job | None = None
    # While an agent turn runs: texts handed to it (steer) and the messages they came from.
    steer_queue: asyncio.Queue[str] | None = None
    steered: deque[InboundMessage] = field(default_factory=deque)
    last_ack: float | None = None
    closed: bool = False  # the process is stopping: the running job ends, nothing else starts
    drops: int = 0  # times what waits was dropped (`drop_waiting`): a message accepted across one goes too
    worker: asyncio.Task | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    # -- intake (called from the adapter callback; never blocks) -----------------------------
    def push(self, msg: InboundMessage) -> None:
        self.inbox.append(msg)
        self._wake.set()
        if self.worker is None:
            self.worker = asyncio.create_task(self._run(), name=f"lane {self.key}")

    @property
    def busy(self) -> bool:
        return self.current is not None and not self.current.done()

    def depth(self) -> int:
        return self.waiting() + (1 if self.busy else 0)

    def waiting(self) -> int:
        """Messages not yet running (the queue_depth gauge): arrived, or accepted and queued."""
        return len(self.inbox) + len(self.pending)

    # -- controls used by the runner ---------------------------------------------------------
    def cancel_current(self) -> bool:
        """Cancel the running job (a turn, or a long command). True if something was running."""
        if self.busy:
            assert self.current is not None
            self.current.cancel()
            return True
        return False

    def clear_pending(self) -> int:
        dropped = len(self.pending) + len(self.steered)
        self.pending.clear()
        self.steered.clear()
        if self.steer_queue is not None:
            while not self.steer_queue.empty():
                self.steer_queue.get_nowait()
        return dropped

    def drop_waiting(self) -> None:
        """Another replica runs the chat now: what waits is dropped, and so is the message being
        accepted (its entry is read again by whoever holds the chat, here too once claimed again;
        queued once accepted, it ran ahead of the older entries that take-up read)."""
        self.drops += 1
        self.inbox.clear()
        self.clear_pending()

    def close(self) -> None:
        """Stopping: what waits is left to the next start (its inbox entries are not done), the
        running job may finish."""
        self.closed = True
        self.inbox.clear()
        self.clear_pending()
        self._wake.set()

    def take_steered(self) -> InboundMessage | None:
        """The message behind the next steered text the agent consumed (for its platform id)."""
        return self.steered.popleft() if self.steered else None

    # -- the worker --------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while True:
                while self.inbox:
                    msg = self.inbox.popleft()
                    drops = self.drops
                    try:
                        job = await self.host.accept(self, msg)
                    except Exception:
                        log.exception("accepting a message for %s failed", self.key)
                        job = None
                    if drops != self.drops:
                        job = None  # dropped with the chat's queue while it was being accepted
                    if job is not None:
                        with speaking(job.msg.reply_language):  # its notices are in its person's language
                            await self._route(job)
                if self.current is not None and self.current.done():
                    self._finish_current()
                if self.closed:
                    self.inbox.clear()
                    self.pending.clear()
                if self.current is None and self.pending:
                    self._start(self.pending.popleft())
                    continue
                if self.current is None and not self.inbox:
                    break  # idle: no await between this check and the removal below
                self._wake.clear()
                if not self.inbox and not (self.current is not None and self.current.done()):
                    await self._wake.wait()
        finally:
            self.worker = None
            if self.current is None and not self.inbox and not self.pending:
                self.host.lane_idle(self)
            else:  # cancelled with work left: the next push starts a new worker
                log.warning("lane %s stopped with work left", self.key)

    def _start(self, job: Job) -> None:
        self.current_job = job
        self.current = asyncio.create_task(self.host.execute(self, job), name=f"job {self.key}")
        self.current.add_done_callback(lambda _t: self._wake.set())

    def _finish_current(self) -> None:
        task = self.current
        self.current, self.current_job = None, None
        assert task is not None
        if not task.cancelled() and task.exception() is not None:
            log.error("job for %s failed", self.key, exc_info=task.exception())
        # Steered texts the turn never read run next, as ordinary messages, in order.
        self.steer_queue = None
        leftovers = list(self.steered)
        self.steered.clear()
        for msg in reversed(leftovers):
            self.pending.appendleft(Job(msg, "turn"))

    async def _route(self, job: Job) -> None:
        if not self.busy and not self.pending:
            self.pending.append(job)
            return
        mode = self.busy_mode if job.kind == "turn" else "queue"  # commands wait their turn
        if mode == "steer" and (self.steer_queue is None or not self.busy):
            mode = "queue"  # the running job is not an agent turn: nothing to steer
        if mode == "steer":
            assert self.steer_queue is not None
            if len(self.steered) >= self.max_pending:
                await self.host.refuse(self, job.msg, pending_cap_text(self.max_pending))
                return
            self.steered.append(job.msg)
            self.steer_queue.put_nowait(job.msg.text)
            await self._ack(job.msg, "steer")
            return
        if len(self.pending) >= self.max_pending and not job.taken_up:
            await self.host.refuse(self, job.msg, pending_cap_text(self.max_pending))
            return
        self.pending.append(job)
        if mode == "interrupt" and self.busy and self.current_job is not None and self.current_job.kind == "turn":
            self.cancel_current()
            await self._ack(job.msg, "interrupt")
        elif self.busy:
            await self._ack(job.msg, "queue", grace=self.ack_grace)

    async def _ack(self, msg: InboundMessage, mode: str, grace: float = 0.0) -> None:
        """Acknowledge `msg` (see the module doc); with `grace`, only if the running job is still
        running that many seconds later."""
        if not self.busy_ack:
            return
        now = self.clock()
        if self.last_ack is not None and now - self.last_ack < self.ack_interval:
            return
        if grace and self.current is not None:
            await asyncio.wait({self.current}, timeout=grace)
            if not self.busy:
                return
        self.last_ack = self.clock()
        await self.host.notify(self, msg, _(ACK_TEXT[mode]))
