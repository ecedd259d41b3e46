"""Where a query's words occur in a text, as character ranges, and a snippet cut around them.

The words come from `gateway.recall.plan_query(q).highlight_words()`, so the console marks what
recall actually searched for. A match is a range, not a marked-up string: the template escapes
the text between ranges, so a message cannot smuggle markup in through its own « » or tags.

How each kind of word may match (plain substring matching would mark "art" inside "start" and
every "x" of a message for a query holding the identifier "foo(x)"):
- a Latin-script word matches at the start of a word, as a prefix ("paint" marks "painting",
  not "repaint"); a word of one or two letters only as a whole word;
- an identifier (anything with punctuation or digits: "nginx.conf", "E1234") and a Chinese,
  Japanese or Korean piece match anywhere, since neither has word boundaries to respect.
Overlapping and adjacent ranges are merged, so overlapping bigrams of one run ("部署", "署网",
"网关") mark the run once.
"""

from __future__ import annotations

import re
from functools import lru_cache

from gateway.storage.fts import CJK_CHAR

MAX_WORDS = 64


@lru_cache(maxsize=256)
def _pattern(word: str) -> re.Pattern[str]:
    escaped = re.escape(word)
    if CJK_CHAR.search(word) or not re.fullmatch(r"\w+", word) or any(c.isdigit() for c in word):
        return re.compile(escaped, re.IGNORECASE)
    if len(word) <= 2:
        return re.compile(rf"(?<!\w){escaped}(?!\w)", re.IGNORECASE)
    return re.compile(rf"(?<!\w){escaped}", re.IGNORECASE)


def match_ranges(text: str, words: list[str]) -> list[tuple[int, int]]:
    """Sorted, merged (start, end) ranges of `text` where any of `words` matches."""
    found: list[tuple[int, int]] = []
    for word in words[:MAX_WORDS]:
        if not word or not word.strip():
            continue
        found.extend(m.span() for m in _pattern(word.strip()).finditer(text))
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def snippet(text: str, words: list[str], width: int = 220) -> tuple[str, list[tuple[int, int]]]:
    """A window of `text` (whitespace collapsed) around its first match, with the match ranges
    inside that window."""
    flat = " ".join((text or "").split())
    ranges = match_ranges(flat, words)
    start = max(0, ranges[0][0] - width // 3) if ranges else 0
    if start:  # do not cut a word in half
        space = flat.find(" ", start, ranges[0][0])
        start = space + 1 if space != -1 else start
    end = min(len(flat), start + width)
    window = flat[start:end]
    prefix = "…" if start else ""
    suffix = "…" if end < len(flat) else ""
    shift = len(prefix) - start
    inside = [(max(a, start) + shift, min(b, end) + shift) for a, b in ranges if b > start and a < end]
    return prefix + window + suffix, inside


def segments(text: str, ranges: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """`text` cut at `ranges`: (piece, is_match) in order, for a template to escape and mark."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for start, end in ranges:
        if start > pos:
            out.append((text[pos:start], False))
        if end > start:
            out.append((text[start:end], True))
        pos = max(pos, end)
    if pos < len(text):
        out.append((text[pos:], False))
    return out
