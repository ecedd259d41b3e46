"""What the stages hold of telemetry (gateway.telemetry): a span to set attributes on, a message's
place in its trace, and what the OTLP export reads of the metrics registry. No OpenTelemetry
import: the seam and its no-op path need none of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

Value = str | int | float | bool | Sequence[str]
Attrs = Mapping[str, Value]


class Registry(Protocol):
    """What the OTLP export reads of the metrics registry (gateway.service.metrics.Metrics): it
    sets `mirror` to hear every recording, and reads the gauges at each export."""

    mirror: Any
    prefix: str

    @property
    def buckets(self) -> tuple[float, ...]: ...

    def names(self, kind: str) -> list[str]: ...

    def gauge(self, name: str) -> float | dict[str, float] | None: ...

    def describe(self, name: str) -> str: ...


@dataclass
class MessageTrace:
    """Where one inbound message's spans belong: the `chinwag.inbound` span's context (an
    OpenTelemetry Context), the same as a traceparent, and its queue span while it waits."""

    context: Any
    traceparent: str
    queue: Any = None


class Span:
    """A span as the stages see it; this base does nothing (telemetry off)."""

    def set(self, key: str, value: Value) -> None:
        pass

    def first_token(self) -> None:
        """The model's first piece arrived (`chinwag.time_to_first_token_ms`)."""

    def __enter__(self) -> "Span":
        return self

    def __exit__(self, *exc: object) -> None:
        return None
