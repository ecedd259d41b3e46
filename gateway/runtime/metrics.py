"""What the runtime records into: the `Metrics` seam (gateway.service.metrics.Metrics is the one
the gateway passes; None where nothing is measured, as in a bare test).

A Protocol here rather than the class itself: gateway.service sits above the runtime (DESIGN §2),
so the runtime names only the three calls it makes.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol


class Metrics(Protocol):
    def inc(self, name: str, labels: Mapping[str, str] | None = None, by: float = 1) -> None: ...

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None: ...

    def set_gauge_fn(self, name: str, fn: Callable[[], float | Mapping[str, float]]) -> None: ...
