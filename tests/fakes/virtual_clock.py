"""Virtual time for streamed-reply tests: `sleep` moves the clock instead of waiting.

An adapter's `clock` and a fake server's `clock` set to one VirtualClock agree on what "a second
later" means, so pacing and 429 holds are checked without a test ever sleeping.
"""

from __future__ import annotations

import asyncio


class VirtualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]
