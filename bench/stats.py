"""The one percentile every benchmark prints: nearest rank (the value below which a fraction `q`
of the samples lie), so a p99 of 100 samples is the 100th-smallest, never an interpolation."""

from __future__ import annotations

from typing import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The `q` (0..1) nearest-rank percentile of `values`; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
