"""What adapters share beyond the contract (platforms.base): cutting a reply to the platform's
length, pacing edits, backing off before a reconnect, a watchdog for a connection gone quiet, and
cancelling a background task.

Kept apart from the contract so that base.py reads as what an adapter is, and these as tools an
adapter may pick; the contract uses `split_message`, `EditPacer` and the `Clock` for its defaults.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from typing import Awaitable, Callable, Protocol

from gateway import telemetry
from gateway.source import Platform

log = logging.getLogger(__name__)


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class EditPacer:
    """At most `limit` platform calls per `window` seconds per key (sliding), and holds after a 429.

    It reads an injectable `Clock`, so tests of streamed replies run on virtual time."""

    def __init__(self, limit: int, window: float, clock: Clock = SYSTEM_CLOCK) -> None:
        if limit < 1 or window <= 0:
            raise ValueError("pacer needs limit >= 1 and window > 0")
        self.limit, self.window, self.clock = limit, window, clock
        self._calls: dict[str, collections.deque[float]] = {}
        self._held: dict[str, float] = {}

    def delay(self, key: str) -> float:
        """Seconds until a call for `key` is allowed."""
        now = self.clock.now()
        calls = self._calls.get(key)
        wait = max(0.0, self._held.get(key, 0.0) - now)
        if calls:
            while calls and calls[0] <= now - self.window:
                calls.popleft()
            if len(calls) >= self.limit:
                wait = max(wait, calls[0] + self.window - now)
        return wait

    async def wait(self, key: str) -> None:
        while (wait := self.delay(key)) > 1e-6:  # (float rounding must not loop forever)
            await self.clock.sleep(wait)

    def record(self, key: str) -> None:
        calls = self._calls.setdefault(key, collections.deque())
        calls.append(self.clock.now())
        if len(self._calls) > 10_000:  # keys of chats long quiet: forget the oldest
            self._calls.pop(next(iter(self._calls)))

    def hold(self, key: str, seconds: float) -> None:
        telemetry.rate_limited(seconds)
        self._held[key] = max(self._held.get(key, 0.0), self.clock.now() + seconds)


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def split_message(text: str, limit: int, length: Callable[[str], int] = len) -> list[str]:
    """Split `text` into chunks of at most `limit` units (as `length` counts them).

    Prefers paragraph, then line, then word boundaries. A code fence cut in two is closed at the
    end of one chunk and reopened (with its language tag) at the start of the next, so every chunk
    renders on its own.
    """
    if limit < 20:
        raise ValueError("limit too small to split safely")
    if length(text) <= limit:
        return [text] if text else []
    chunks: list[str] = []
    fence: str | None = None  # the opening fence line ("```py") when inside a code block
    rest = text
    while rest:
        prefix = fence + "\n" if fence else ""
        budget = limit - length(prefix)
        # reserve room for a closing fence in case this chunk ends inside a block
        reserve = length("\n```")
        if length(rest) + length(prefix) <= limit:
            chunks.append(prefix + rest)
            break
        cut = _find_cut(rest, budget - reserve, length)
        piece, rest = rest[:cut], rest[cut:]
        fence_after = _fence_state(piece, fence)
        body = prefix + piece.rstrip("\n") if fence_after else prefix + piece
        if fence_after:
            body += "\n```"
        chunks.append(body.rstrip() if not fence_after else body)
        fence = fence_after
        rest = rest.lstrip("\n") if not fence else rest.lstrip("\n")
    return [c for c in chunks if c.strip()]


def _fence_state(piece: str, fence: str | None) -> str | None:
    """Given the state before `piece`, return the open fence line after it (None if closed)."""
    for line in piece.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence else stripped
    return fence


def _find_cut(text: str, budget: int, length: Callable[[str], int]) -> int:
    """Largest index <= fits-in-budget, preferring paragraph/line/space boundaries."""
    lo, hi = 1, len(text)
    # binary search the longest prefix within budget (length is monotonic in prefix size)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if length(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    best = lo
    window = text[:best]
    for sep in ("\n\n", "\n", " "):
        pos = window.rfind(sep)
        if pos > best // 2:
            return pos + len(sep)
    # never split a surrogate pair / combining sequence start
    return best


async def cancel_and_wait(task: "asyncio.Task | None") -> None:
    """Cancel a background task and wait until it has finished unwinding. What it raised while
    unwinding is logged, not raised: stopping must go on."""
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        log.debug("task %s failed while being cancelled", task.get_name(), exc_info=True)


class Backoff:
    """Jittered exponential back-off for reconnect loops: base * 2^n, capped, with full jitter."""

    def __init__(self, base: float = 1.0, cap: float = 60.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * (2**self.attempt))
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())


class Watched(Protocol):
    """What the watchdog reads and flips (a PlatformAdapter)."""

    platform: Platform
    last_alive: float | None

    def mark_alive(self) -> None: ...

    def set_ready(self, ready: bool, detail: str = "") -> None: ...


class Watchdog:
    """Flips an adapter to not-ready and calls `on_stale` when nothing was heard for `timeout` s."""

    def __init__(
        self,
        adapter: Watched,
        timeout: float,
        on_stale: Callable[[], Awaitable[None]],
        interval: float | None = None,
    ) -> None:
        self.adapter, self.timeout, self.on_stale = adapter, timeout, on_stale
        self.interval = interval if interval is not None else max(0.05, timeout / 4)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.adapter.mark_alive()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            last = self.adapter.last_alive or 0.0
            if time.monotonic() - last > self.timeout:
                self.adapter.set_ready(False, f"no event or poll for {self.timeout:.0f}s; reconnecting")
                try:
                    await self.on_stale()
                except Exception:  # a failing reconnect must not kill the watchdog
                    log.exception("watchdog reconnect of %s failed", self.adapter.platform.value)
                self.adapter.mark_alive()
