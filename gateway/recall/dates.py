"""Dates named in a recall query ("on 8 May, 2023", "in June 2022", "5月2日", "2023-05-02").

People anchor recall in time ("what did we decide on May 2?"), and a session knows when it
happened, so a date in the query is evidence like a word: recall treats the sessions active on
that day (or in that month, or that year) as holding it, with an idf of its own, so "2023" over a
store that is all 2023 counts for nothing and "8 May" counts a lot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

MONTHS = {
    name: n
    for n, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_PATTERNS = [
    re.compile(rf"\b{_YEAR}-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)\b"),
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s+{_YEAR})?", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),
    re.compile(r"(?:(?P<year>(?:19|20)\d\d)\s*年)?\s*(?P<m>1[0-2]|0?[1-9])\s*月(?:\s*(?P<d>[0-3]?\d)\s*[日号])?"),
    re.compile(rf"\b(?:in|of|during|since)\s+{_YEAR}\b", re.IGNORECASE),
]
NEAR_DAYS = 7  # a day also counts, more weakly, for the sessions of the week around it


@dataclass(frozen=True)
class DateSpec:
    year: int | None
    month: int | None
    day: int | None

    @property
    def label(self) -> str:
        parts = [
            str(self.year) if self.year else "",
            f"{self.month:02d}" if self.month else "",
            f"{self.day:02d}" if self.day else "",
        ]
        return "-".join(p for p in parts if p) or "?"

    def bounds(self, slack_days: int = 0) -> tuple[float, float] | None:
        """[start, end) in epoch seconds (UTC) when the year is known; None otherwise (or when
        the date does not exist, like 30 February)."""
        if self.year is None:
            return None
        try:
            if self.day and self.month:
                start = date(self.year, self.month, self.day) - timedelta(days=slack_days)
                end = date(self.year, self.month, self.day) + timedelta(days=slack_days + 1)
            elif self.month:
                start = date(self.year, self.month, 1)
                end = date(self.year + self.month // 12, self.month % 12 + 1, 1)
            else:
                start, end = date(self.year, 1, 1), date(self.year + 1, 1, 1)
        except ValueError:
            return None

        def epoch(d: date) -> float:
            return datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp()

        return epoch(start), epoch(end)

    def covers(self, moment: float, slack_days: int = 1) -> bool:
        """Does a session active at `moment` (epoch seconds, UTC) fall on this date? A day matches
        within `slack_days` (one by default: the store keeps UTC, the person meant local time)."""
        when = datetime.fromtimestamp(moment, tz=timezone.utc).date()
        if self.day and self.month:
            years = [self.year] if self.year else [when.year - 1, when.year, when.year + 1]
            for year in years:
                try:
                    target = date(year, self.month, self.day)
                except ValueError:
                    continue
                if abs((when - target).days) <= slack_days:
                    return True
            return False
        if self.month:
            return when.month == self.month and (self.year is None or when.year == self.year)
        return self.year is not None and when.year == self.year


def dates_in(text: str) -> list[DateSpec]:
    """Every date the text names. Never raises."""
    return extract_dates(text)[0]


def extract_dates(text: str) -> tuple[list[DateSpec], str]:
    """The dates the text names, and the text with them cut out (so "5月2日" does not also
    become the words "5", "月", "2日"). Never raises."""
    found: dict[DateSpec, None] = {}
    taken: list[tuple[int, int]] = []
    for pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            groups = m.groupdict()
            month_text = groups.get("month")
            if month_text and month_text.lower() == "may" and not month_text[0].isupper():
                continue  # "may" the verb
            month = MONTHS.get(month_text.lower().rstrip(".")) if month_text else _int(groups.get("m"))
            day = _int(groups.get("day") or groups.get("d"))
            year = _int(groups.get("year"))
            if month is not None and not 1 <= month <= 12:
                continue
            if day is not None and not 1 <= day <= 31:
                continue
            if month is None and year is None:
                continue
            taken.append((m.start(), m.end()))
            found[DateSpec(year, month, day)] = None
    rest = text
    for start, end in sorted(taken, reverse=True):
        rest = rest[:start] + " " + rest[end:]
    return list(found), rest


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None
