"""Terminal output for the CLI: tables that respect wide (CJK) characters, times, a progress bar."""

from __future__ import annotations

import shutil
import sys
import time
import unicodedata
from datetime import datetime
from typing import IO, Iterable, Sequence


def width(text: str) -> int:
    """Columns `text` takes in a terminal: CJK and other wide characters take two."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` columns with an ellipsis."""
    text = " ".join(str(text).split())
    if width(text) <= limit:
        return text
    out, used = [], 0
    for ch in text:
        w = width(ch)
        if used + w > limit - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def pad(text: str, cols: int) -> str:
    return text + " " * max(0, cols - width(text))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], max_widths: Sequence[int] | None = None) -> str:
    """A plain aligned table. The last column takes what is left of the terminal width."""
    text: list[list[str]] = [["" if v is None else str(v) for v in row] for row in rows]
    n = len(headers)
    limits = list(max_widths or [60] * n)
    term = shutil.get_terminal_size((120, 24)).columns
    fixed = sum(min(limits[i], max([width(headers[i])] + [width(r[i]) for r in text])) + 2 for i in range(n - 1))
    limits[-1] = max(20, min(limits[-1], term - fixed))
    cells = [[clip(v, limits[i]) for i, v in enumerate(row)] for row in text]
    cols = [max([width(headers[i])] + [width(r[i]) for r in cells]) for i in range(n)]
    lines = ["  ".join(pad(h, cols[i]) for i, h in enumerate(headers)).rstrip()]
    lines += ["  ".join(pad(c, cols[i]) for i, c in enumerate(row)).rstrip() for row in cells]
    return "\n".join(lines)


def fmt_time(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def ago(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return "-"
    secs = max(0.0, (now or time.time()) - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit} ago"
    return "just now"


def worth_telling(total: int, stream: IO[str] | None = None, min_items: int = 500) -> bool:
    """Whether a job of `total` items earns progress output on `stream` (default stderr): always on
    a terminal; elsewhere (logs, CI, tests) only for jobs of `min_items` or more."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return total > 0 and (bool(isatty and isatty()) or total >= min_items)


class Progress:
    """A small progress bar on stderr.

    On a terminal it redraws in place (at most 10 times a second). Elsewhere (logs, CI) it stays
    quiet for small jobs and prints a plain line every 10 % for jobs of `min_items` or more.
    """

    def __init__(self, total: int, label: str, stream: IO[str] | None = None, min_items: int = 500) -> None:
        self.total, self.label = max(0, int(total)), label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.enabled = worth_telling(self.total, self.stream, min_items)
        self.done = 0
        self._last_draw = 0.0
        self._last_decile = -1

    def update(self, done: int) -> None:
        self.done = min(int(done), self.total)
        if not self.enabled:
            return
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw >= 0.1 or self.done == self.total:
                self._last_draw = now
                self._draw()
        else:
            decile = self.done * 10 // self.total
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(f"{self.label}: {self.done}/{self.total} ({decile * 10}%)\n")
                self.stream.flush()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def _draw(self) -> None:
        cells = 30
        filled = cells * self.done // self.total
        pct = 100 * self.done // self.total
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (cells - filled)}] {pct:3d}% {self.done}/{self.total}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def human_bytes(n: int | None) -> str:
    """A byte count as people read it: 812 B, 3.4 MB."""
    size = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)  # pragma: no cover
