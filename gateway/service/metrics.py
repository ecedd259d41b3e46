"""Counters, gauges and histograms rendered in the Prometheus text format (no extra dependency).

Names are given without the `chinwag_` prefix (`inc("messages_in_total", {"platform": "telegram"})`);
`render()` adds it. A name used for the first time is registered with the kind its method implies,
so callers never need a registration step; the well-known metrics are declared below with help text.
Thread-safe: the DB writer thread and the event loop may both record.

A gauge whose reading is a query too slow for the event loop that renders /metrics (media bytes:
about 150 ms over 100k attachment rows, bench/media_bytes.py) is wrapped in `Sampled`:
the scrape gets the last reading at once, and a stale one is refreshed in a worker thread.

With telemetry on (gateway.telemetry), `mirror` hears every count and observation too and exports
them over OTLP with the gauges (gateway.telemetry.otlp.MetricsMirror); None otherwise: one test of
an attribute per recording.

The names in `CHARTED` also keep the last hour in one-minute buckets (count, sum, max per minute,
all labels together) for the web console's charts: 60 small records per name, no history store.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Protocol

PREFIX = "chinwag_"
# Seconds: a gateway turn is milliseconds to minutes; searches milliseconds to seconds.
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

KNOWN: dict[str, tuple[str, str]] = {
    "messages_in_total": ("counter", "Inbound messages accepted by the gateway, by platform."),
    "messages_out_total": ("counter", "Reply messages sent, by platform."),
    "turn_seconds": ("histogram", "Wall time of one agent turn, seconds."),
    "command_seconds": ("histogram", "Wall time of one chat command, seconds."),
    "search_seconds": ("histogram", "Wall time of a session search, seconds."),
    "queue_depth": ("gauge", "Messages waiting in per-chat queues."),
    "agent_cache_size": ("gauge", "Agents held in the agent cache."),
    "mirror_backlog": ("gauge", "Commits not yet written to the transcript files."),
    "wal_bytes": (
        "gauge",
        "Size of the database's write-ahead log file, bytes (checkpointed past 8 MB, emptied when idle).",
    ),
    "media_bytes": ("gauge", "Bytes of the attachment files kept under home/media (each file counted once)."),
    "adapter_ready": ("gauge", "1 when the platform adapter is ready, else 0."),
    "model_errors_total": ("counter", "Model calls that failed after their retries (the person got an apology)."),
    "duplicates_total": ("counter", "Redelivered platform events refused by the inbox, by platform."),
    "uncertain_sends_total": (
        "counter",
        "Sends a crash left uncertain (the platform may have the message, the outbox has no record), sent again "
        "on start, by platform: a double where the platform takes no idempotency key (Telegram).",
    ),
    "inbox_backlog": ("gauge", "Inbound messages committed and not yet answered (inbox entries not done)."),
    "outbox_backlog": ("gauge", "Replies committed and not yet delivered to their platform."),
    "outbox_parked": (
        "gauge",
        "Replies the platform refused gateway.delivery.send_attempts times, retried every parked_retry_seconds.",
    ),
    "reruns_total": ("counter", "Turns cut short by a crash and run again after start, by platform."),
    "interrupted_turns_total": ("counter", "Turns cut short by a crash and reported (interrupted_turns: notify)."),
    "tool_calls_total": ("counter", "Agent tool calls to MCP servers, by server, tool and outcome."),
    "tool_seconds": ("histogram", "Wall time of one MCP tool call (the server's answer), seconds."),
    "embedding_backlog": ("gauge", "Messages recall's background indexer has not embedded yet (embeddings on)."),
    "embedding_failures": ("gauge", "Consecutive failed embedding steps (0 when the indexer is keeping up)."),
}

# what the console charts: messages per minute (in, out) and turn latency, over the last hour
CHARTED = ("messages_in_total", "messages_out_total", "turn_seconds")
SERIES_MINUTES = 60

LabelKey = tuple[tuple[str, str], ...]


def _key(labels: Mapping[str, str] | None) -> LabelKey:
    return tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(key: LabelKey, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = key + extra
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


class MinuteSeries:
    """The last `minutes` minutes of one metric, a (count, sum, max) record per wall-clock minute."""

    def __init__(self, minutes: int = SERIES_MINUTES) -> None:
        self.minutes = minutes
        self._buckets: dict[int, list[float]] = {}  # minute number -> [count, sum, max]

    def add(self, value: float, count: float, now: float) -> None:
        minute = int(now // 60)
        bucket = self._buckets.get(minute)
        if bucket is None:
            bucket = self._buckets[minute] = [0.0, 0.0, value]
            for old in [m for m in self._buckets if m <= minute - self.minutes]:
                del self._buckets[old]
        bucket[0] += count
        bucket[1] += value
        bucket[2] = max(bucket[2], value)

    def window(self, now: float) -> list[dict[str, float]]:
        """One record per minute, oldest first, ending with the current minute; quiet minutes are 0."""
        last = int(now // 60)
        out = []
        for minute in range(last - self.minutes + 1, last + 1):
            count, total, peak = self._buckets.get(minute, (0.0, 0.0, 0.0))
            out.append({"minute": minute * 60.0, "count": count, "sum": total, "max": peak if count else 0.0})
        return out


class Sampled:
    """A gauge function read at most every `every` seconds, off the caller's thread: calling it
    returns the last reading (0 before the first) and starts a refresh when that is stale. One
    worker thread, kept, so a per-thread DB read connection is opened once."""

    def __init__(self, fn: Callable[[], float], every: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.fn, self.every, self.clock = fn, every, clock
        self.value = 0.0
        self._taken_at: float | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gauge")
        self._pending = False
        self._closed = False
        self._lock = threading.Lock()
        self._refresh()

    def _refresh(self) -> None:
        with self._lock:
            if self._pending or self._closed:
                return
            self._pending = True
            self._pool.submit(self._take)

    def _take(self) -> None:
        try:
            self.value = float(self.fn())
        except Exception:  # a failing reading keeps the last one
            pass
        finally:
            with self._lock:
                self._pending = False
                self._taken_at = self.clock()

    def __call__(self) -> float:
        taken = self._taken_at
        if taken is not None and self.clock() - taken >= self.every:
            self._refresh()
        return self.value

    def close(self) -> None:
        """Wait for a reading in flight; later calls return the last reading."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)


class Mirror(Protocol):
    """Where recordings are repeated (telemetry's OTLP export)."""

    def inc(self, name: str, labels: Mapping[str, str] | None, by: float) -> None: ...

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None) -> None: ...

    def gauge(self, name: str) -> None:
        """A gauge `name` exists (its value is read at each export)."""


class Metrics:
    prefix = PREFIX

    def __init__(self, buckets: tuple[float, ...] = DEFAULT_BUCKETS, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._series: dict[str, MinuteSeries] = {name: MinuteSeries() for name in CHARTED}
        self._buckets = buckets
        self._kinds: dict[str, str] = {}
        self._counters: dict[str, dict[LabelKey, float]] = {}
        self._gauges: dict[str, dict[LabelKey, float]] = {}
        self._gauge_fns: dict[str, Callable[[], float | Mapping[str, float]]] = {}
        self._histograms: dict[str, dict[LabelKey, _Histogram]] = {}
        self.mirror: Mirror | None = None

    def _kind(self, name: str, kind: str) -> None:
        known = self._kinds.get(name) or KNOWN.get(name, (kind,))[0]
        if known != kind:
            raise ValueError(f"metric {name} is a {known}, not a {kind}")
        self._kinds[name] = kind

    # -- recording ---------------------------------------------------------------------------
    def inc(self, name: str, labels: Mapping[str, str] | None = None, by: float = 1) -> None:
        if by < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self._kind(name, "counter")
            series = self._counters.setdefault(name, {})
            key = _key(labels)
            series[key] = series.get(key, 0) + by
            if name in self._series:
                self._series[name].add(by, by, self._clock())
        if self.mirror is not None:
            self.mirror.inc(name, labels, by)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._kind(name, "histogram")
            series = self._histograms.setdefault(name, {})
            key = _key(labels)
            if key not in series:
                series[key] = _Histogram(self._buckets)
            series[key].observe(float(value))
            if name in self._series:
                self._series[name].add(float(value), 1, self._clock())
        if self.mirror is not None:
            self.mirror.observe(name, value, labels)

    def set_gauge(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self._kind(name, "gauge")
            self._gauges.setdefault(name, {})[_key(labels)] = float(value)
        if self.mirror is not None:
            self.mirror.gauge(name)

    def set_gauge_fn(self, name: str, fn: Callable[[], float | Mapping[str, float]]) -> None:
        """`fn` is called at render time; it returns a number, or {label value: number} for a
        gauge labelled by `platform` (e.g. adapter readiness)."""
        with self._lock:
            self._kind(name, "gauge")
            self._gauge_fns[name] = fn
        if self.mirror is not None:
            self.mirror.gauge(name)

    def close(self) -> None:
        """Wait for the sampled gauges' readings in flight and stop their threads: they read the
        database, which is closed next (a reading left running into the close crashed the process)."""
        with self._lock:
            fns = list(self._gauge_fns.values())
        for fn in fns:
            if isinstance(fn, Sampled):
                fn.close()

    # -- reading -----------------------------------------------------------------------------
    @property
    def buckets(self) -> tuple[float, ...]:
        return self._buckets

    def describe(self, name: str) -> str:
        return KNOWN.get(name, ("", name.replace("_", " ")))[1]

    def names(self, kind: str) -> list[str]:
        """The metrics of `kind` (counter, gauge, histogram): the well-known and those recorded."""
        with self._lock:
            kinds = {name: known[0] for name, known in KNOWN.items()} | self._kinds
        return sorted(name for name, k in kinds.items() if k == kind)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Current counter or gauge value (0 when never recorded); histograms: observation count."""
        with self._lock:
            key = _key(labels)
            if name in self._counters:
                return self._counters[name].get(key, 0)
            if name in self._gauges:
                return self._gauges[name].get(key, 0)
            if name in self._histograms and key in self._histograms[name]:
                return self._histograms[name][key].total
            return 0

    def last_hour(self, name: str) -> list[dict[str, float]]:
        """A charted metric's last hour, minute by minute (see `MinuteSeries.window`)."""
        with self._lock:
            series = self._series.get(name)
            return series.window(self._clock()) if series is not None else []

    def gauge(self, name: str) -> float | dict[str, float] | None:
        """A gauge's value now: a number, {platform: number} for a labelled one, None if never set."""
        with self._lock:
            fn = self._gauge_fns.get(name)
            stored = dict(self._gauges.get(name, {}))
        if fn is not None:
            stored.update(self._call_gauge(fn))
        if not stored:
            return None
        if set(stored) == {()}:
            return stored[()]
        return {",".join(v for _, v in key): value for key, value in stored.items()}

    def render(self) -> str:
        with self._lock:
            names = sorted(set(self._kinds) | set(KNOWN))
            counters = {n: dict(s) for n, s in self._counters.items()}
            gauges = {n: dict(s) for n, s in self._gauges.items()}
            fns = dict(self._gauge_fns)
            hists = {
                n: {k: (list(h.counts), h.total, h.sum) for k, h in s.items()} for n, s in self._histograms.items()
            }
        lines: list[str] = []
        for name in names:
            kind = self._kinds.get(name) or KNOWN[name][0]
            help_text = self.describe(name)
            full = PREFIX + name
            lines.append(f"# HELP {full} {help_text}")
            lines.append(f"# TYPE {full} {kind}")
            if kind == "counter":
                for key, value in sorted(counters.get(name, {}).items()):
                    lines.append(f"{full}{_labels(key)} {_num(value)}")
            elif kind == "gauge":
                series = dict(gauges.get(name, {}))
                if name in fns:
                    series.update(self._call_gauge(fns[name]))
                for key, value in sorted(series.items()):
                    lines.append(f"{full}{_labels(key)} {_num(value)}")
            else:
                for key, (counts, total, total_sum) in sorted(hists.get(name, {}).items()):
                    for bound, count in zip(self._buckets, counts):
                        lines.append(f"{full}_bucket{_labels(key, (('le', _num(bound)),))} {count}")
                    lines.append(f"{full}_bucket{_labels(key, (('le', '+Inf'),))} {total}")
                    lines.append(f"{full}_sum{_labels(key)} {_num(total_sum)}")
                    lines.append(f"{full}_count{_labels(key)} {total}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _call_gauge(fn: Callable[[], float | Mapping[str, float]]) -> dict[LabelKey, float]:
        try:
            result = fn()
        except Exception:  # a broken gauge must not break /metrics; it just shows nothing
            return {}
        if isinstance(result, Mapping):
            return {(("platform", str(k)),): float(v) for k, v in result.items()}
        return {(): float(result)}
