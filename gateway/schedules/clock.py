"""The clock a schedule reads: `now()` in Unix seconds and an awaitable `sleep`, injectable.

The shape of the adapters' Clock (platforms/base.py), but not that clock: theirs is monotonic, for
pacing edits, and a schedule is about the calendar, so this one reads the wall clock.

The due-run loop, the claim and the `schedule` tool take a WallClock instead of calling time.time(),
so the tests move time by hours and across DST changes without waiting. It is the shape of
tests/fakes/virtual_clock.py (whose `sleep` moves time instead of waiting), which therefore serves
as the test clock unchanged; the daemon uses SystemWallClock.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Protocol


class WallClock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemWallClock:
    """The host's wall clock (time.time)."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def utc_now(clock: WallClock) -> datetime:
    """The clock's instant as an aware UTC datetime."""
    return datetime.fromtimestamp(clock.now(), timezone.utc)
