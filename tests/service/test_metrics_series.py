"""The last hour of charted metrics, minute by minute (for the console's status charts)."""

from __future__ import annotations

from gateway.service.metrics import Metrics


def test_minutes_fill_roll_and_forget() -> None:
    now = [60_000.0 * 60]  # on a minute boundary
    metrics = Metrics(clock=lambda: now[0])
    metrics.inc("messages_in_total", {"platform": "telegram"})
    metrics.inc("messages_in_total", {"platform": "discord"}, by=2)
    metrics.observe("turn_seconds", 0.5)
    metrics.observe("turn_seconds", 2.5)
    now[0] += 125  # two minutes later
    metrics.inc("messages_in_total")
    window = metrics.last_hour("messages_in_total")
    assert len(window) == 60 and window[-1]["minute"] == (now[0] // 60) * 60
    assert [p["count"] for p in window[-3:]] == [3, 0, 1]  # labels summed; a quiet minute is 0
    turns = metrics.last_hour("turn_seconds")
    assert turns[-3] == {"minute": window[-3]["minute"], "count": 2, "sum": 3.0, "max": 2.5}
    now[0] += 3600  # an hour on: all of it has left the window
    assert sum(p["count"] for p in metrics.last_hour("messages_in_total")) == 0
    assert metrics.last_hour("search_seconds") == []  # not charted
    assert metrics.value("messages_in_total", {"platform": "discord"}) == 2  # the counters are unchanged


def test_gauge_reads_set_and_function_gauges() -> None:
    metrics = Metrics()
    assert metrics.gauge("queue_depth") is None
    metrics.set_gauge("queue_depth", 4)
    assert metrics.gauge("queue_depth") == 4
    metrics.set_gauge_fn("adapter_ready", lambda: {"telegram": 1, "discord": 0})
    assert metrics.gauge("adapter_ready") == {"telegram": 1.0, "discord": 0.0}
    metrics.set_gauge_fn("agent_cache_size", lambda: 1 / 0)  # a broken gauge reads as unset
    assert metrics.gauge("agent_cache_size") is None
