"""metrics.Sampled: a slow gauge read off the scraping thread, the last reading served at once."""

from __future__ import annotations

import threading

from gateway.service.metrics import Metrics, Sampled


def test_a_sampled_gauge_serves_the_last_reading_and_refreshes_when_stale() -> None:
    now = [0.0]
    readings = iter([100.0, 250.0, 400.0])
    callers: list[str] = []

    def slow_reading() -> float:
        callers.append(threading.current_thread().name)
        return next(readings)

    sampled = Sampled(slow_reading, every=30.0, clock=lambda: now[0])
    sampled._pool.submit(lambda: None).result()  # the first reading has been taken
    metrics = Metrics()
    metrics.set_gauge_fn("media_bytes", sampled)
    assert "\nchinwag_media_bytes 100\n" in metrics.render()
    now[0] = 10.0
    assert sampled() == 100.0 and len(callers) == 1  # fresh: not read again
    now[0] = 31.0
    assert sampled() == 100.0  # stale: the old value now, a new reading started
    sampled._pool.submit(lambda: None).result()
    assert sampled() == 250.0
    assert all(name.startswith("gauge") for name in callers)  # never on the caller's thread
    sampled.close()
