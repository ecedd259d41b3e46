"""Dates named in a recall query: absolute ("on 8 May, 2023", "in June 2022", "in July", "5月2日", "2023-05-02")
and relative to the asking time ("yesterday", "two days ago", "last week", "last Wednesday", "last
month", 昨天, 前天, 三天前, 上周, 上周三, 上个月, 去年).

People anchor recall in time ("what did we decide on May 2?", "上周我们聊了什么"), and a session
knows when it happened, so a date in the query is evidence like a word: recall treats the sessions
active on that day (or in that week, month or year) as holding it, with an idf of its own, so
"2023" over a store that is all 2023 counts for nothing and "8 May" counts a lot. A relative
expression is resolved against `now` (the moment the question is asked, in UTC like the store) into
the same kind of span, so both weigh sessions the same way: a day (with the week around it counting
more weakly, as for an absolute day: "two weeks ago" is rarely exact), a calendar week (Monday to
Sunday, as both calendars count it), a month or a year. Numbers are read as digits or words
(English up to twelve, Chinese numerals up to 99); an amount too large to be a date is ignored.
A month named without a year after "in"/"during"/"since" ("camping in July") means that month of
any year: LoCoMo tune any@1 170 -> 171 of 231 (lexical), held unchanged; a bare month word is
left a word ("march", "may" are verbs too).

A conversation can also be named by its place in time: "the first time we talked", 第一次聊天
(the person's first conversation) and "last time we spoke", 上次我们聊 (their latest one before
this): `conversation_order`. Only with a word for talking: "上次部署超时" is the last time
something happened, which the words and dates answer. Recall weighs that conversation as it
weighs a named day (gateway/recall/rank.py). MemoryBank-CN dev (bench/recall.py, + the local
model): scoped any@1 0.982 -> 1.000, pooled 0.946 -> 0.964, pooled any@5 0.964 -> 0.982; LoCoMo
unchanged (none of its questions names one).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Callable

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
    re.compile(rf"\b(?:in|during|since)\s+(?:early\s+|late\s+|mid-?\s*)?{_MONTH}\b", re.IGNORECASE),
]
NEAR_DAYS = 7  # a day also counts, more weakly, for the sessions of the week around it


@dataclass(frozen=True)
class DateSpec:
    year: int | None
    month: int | None
    day: int | None
    days: int = 1  # with a day: how many days the span runs from it (7: a calendar week)

    @property
    def label(self) -> str:
        parts = [
            str(self.year) if self.year else "",
            f"{self.month:02d}" if self.month else "",
            f"{self.day:02d}" if self.day else "",
        ]
        return ("-".join(p for p in parts if p) or "?") + (f"+{self.days}d" if self.day and self.days > 1 else "")

    def bounds(self, slack_days: int = 0) -> tuple[float, float] | None:
        """[start, end) in epoch seconds (UTC) when the year is known; None otherwise (or when
        the date does not exist, like 30 February)."""
        if self.year is None:
            return None
        try:
            if self.day and self.month:
                start = date(self.year, self.month, self.day) - timedelta(days=slack_days)
                end = date(self.year, self.month, self.day) + timedelta(days=slack_days + max(1, self.days))
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
                if -slack_days <= (when - target).days < max(1, self.days) + slack_days:
                    return True
            return False
        if self.month:
            return when.month == self.month and (self.year is None or when.year == self.year)
        return self.year is not None and when.year == self.year


# "the first time we talked", 第一次聊天, "last time we spoke", 上次我们聊: the person's first or
# latest conversation, named by its place in time rather than by a date
_FIRST = re.compile(
    r"\b(?:the\s+)?first\s+time\s+(?:we|i|you)\s+(?:talked|spoke|chatted|met)\b|\bour\s+(?:very\s+)?first\s+"
    r"(?:conversation|chat|talk)\b|\bwhen\s+we\s+first\s+(?:talked|spoke|chatted|met)\b"
    r"|第一次(?:对话|聊天|聊|谈话|交流|说话)|最早(?:的那?次)?(?:对话|聊天)|刚认识的时候",
    re.IGNORECASE,
)
_LAST = re.compile(
    r"\b(?:the\s+)?last\s+time\s+(?:we|i|you)\s+(?:talked|spoke|chatted)\b|\bour\s+(?:last|previous)\s+"
    r"(?:conversation|chat|talk)\b"
    r"|上一?次(?:我们|咱们)?(?:对话|聊天|聊|谈话|交流)|最近一次(?:对话|聊天)",
    re.IGNORECASE,
)


def conversation_order(text: str) -> str | None:
    """ "first" when the text asks about the person's first conversation, "last" about their latest
    one before this, else None."""
    if _FIRST.search(text):
        return "first"
    if _LAST.search(text):
        return "last"
    return None


def dates_in(text: str, now: float | None = None) -> list[DateSpec]:
    """Every date the text names (relative ones counted back from `now`, default: the clock). Never raises."""
    return extract_dates(text, now)[0]


def extract_dates(text: str, now: float | None = None) -> tuple[list[DateSpec], str]:
    """The dates the text names, and the text with the absolute ones cut out (so "5月2日" does not
    also become the words "5", "月", "2日"). Relative expressions count back from `now` (epoch
    seconds; default: the clock) and keep their words in the text: a session where someone said
    "last week I ..." matches "what did they do last week" by those words too. Never raises."""
    found: dict[DateSpec, None] = {}
    taken: list[tuple[int, int]] = []
    try:
        today = datetime.fromtimestamp(time.time() if now is None else float(now), tz=timezone.utc).date()
    except (OverflowError, OSError, ValueError):  # a "now" no calendar holds: no relative dates
        today = None
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
    # relative expressions after the absolute ones ("5月3日前" is a date, not "3 days ago");
    # their words stay in the text: "last week I went ..." is how the answer was said
    if today is not None:
        _find_relative(text, today, list(taken), found)
    return list(found), rest


def _find_relative(text: str, today: date, taken: list[tuple[int, int]], found: dict[DateSpec, None]) -> None:
    for pattern, resolve in _RELATIVE:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            try:
                spec = resolve(m, today)
            except (OverflowError, ValueError):  # "10000000 days ago": before any calendar
                spec = None
            if spec is not None:
                taken.append((m.start(), m.end()))
                found[spec] = None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# relative expressions, resolved against the asking day

_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3, "few": 3,
}  # fmt: skip
_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CN_NUMBER = r"[0-9０-９]{1,9}|[零〇一二两三四五六七八九十]{1,3}|几"
_EN_NUMBER = r"\d{1,9}|" + "|".join(sorted(_EN_NUMBERS, key=len, reverse=True))
_WEEKDAYS = {
    name: i for i, name in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))
}
_CN_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "末": 5}
_CN_WEEK = r"(?:周|星期|礼拜)"
FEW = 3  # "a few days ago", 几天前: a day this far back, with the week around it counting too
MAX_BACK_DAYS = 200 * 366  # farther back than this is not a date someone means


def _number(text: str) -> int | None:
    """Digits (also full-width), an English number word, or a Chinese numeral below 100."""
    text = text.strip().lower()
    if not text:
        return None
    if text.isdigit():
        try:
            return int(text)
        except ValueError:  # digits of other scripts that int() refuses
            return None
    if text in _EN_NUMBERS:
        return _EN_NUMBERS[text]
    if text == "几":
        return FEW
    if "十" in text:
        tens, _, ones = text.partition("十")
        if (tens and tens not in _CN_DIGITS) or (ones and ones not in _CN_DIGITS):
            return None
        return (_CN_DIGITS[tens] if tens else 1) * 10 + (_CN_DIGITS[ones] if ones else 0)
    return _CN_DIGITS.get(text) if len(text) == 1 else None


def _day(d: date, days: int = 1) -> DateSpec:
    return DateSpec(d.year, d.month, d.day, days)


def _week(today: date, weeks_back: int) -> DateSpec:
    monday = today - timedelta(days=today.weekday() + 7 * weeks_back)
    return _day(monday, 7)


def _month(today: date, months_back: int) -> DateSpec:
    index = today.year * 12 + today.month - 1 - months_back
    if index < 12:
        raise ValueError("before year 1")
    return DateSpec(index // 12, index % 12 + 1, None)


def _ago(amount: int | None, unit: str, today: date) -> DateSpec | None:
    if amount is None or amount < 0:
        return None
    unit = unit.lower()
    if unit in ("day", "天", "日"):
        if amount > MAX_BACK_DAYS:
            return None
        return _day(today - timedelta(days=amount))
    if unit in ("week", "周", "星期", "礼拜"):
        if amount * 7 > MAX_BACK_DAYS:
            return None
        return _day(today - timedelta(days=7 * amount))
    if unit in ("month", "月"):
        return _month(today, amount) if amount * 31 <= MAX_BACK_DAYS else None
    if unit in ("year", "年"):
        return DateSpec(today.year - amount, None, None) if 0 < today.year - amount and amount <= 200 else None
    return None


def _weekday_before(today: date, weekday: int, include_today: bool) -> date:
    back = (today.weekday() - weekday) % 7
    if back == 0 and not include_today:
        back = 7
    return today - timedelta(days=back)


def _cn_week_day(m: re.Match, today: date) -> DateSpec | None:
    prefix, name = m.group("which") or "", m.group("wd")
    weekday = _CN_WEEKDAYS[name]
    days = 2 if name == "末" else 1  # 周末: Saturday and Sunday
    if prefix:
        weeks_back = prefix.count("上") if prefix.startswith("上") else 0
        monday = today - timedelta(days=today.weekday() + 7 * weeks_back)
        return _day(monday + timedelta(days=weekday), days)
    return _day(_weekday_before(today, weekday, include_today=True), days)


def _en_weekday(m: re.Match, today: date) -> DateSpec | None:
    name, prefix = m.group("wd").lower(), (m.group("last") or "").lower()
    if name == "weekend":
        return _day(_weekday_before(today, 5, include_today=False), 2)
    return _day(_weekday_before(today, _WEEKDAYS[name], include_today=prefix in ("", "on")))


def _en_last(m: re.Match, today: date) -> DateSpec | None:
    unit, which = m.group("unit").lower(), m.group("which").lower()
    back = 0 if which == "this" else 1
    if unit == "week":
        return _day(today - timedelta(days=6), 7) if which == "past" else _week(today, back)
    if unit == "month":
        return _month(today, back)
    return DateSpec(today.year - back, None, None)


_RELATIVE: list[tuple[re.Pattern[str], Callable[[re.Match, date], DateSpec | None]]] = [
    (re.compile(r"\b(?:the\s+)?day\s+before\s+yesterday\b", re.I), lambda m, t: _day(t - timedelta(days=2))),
    (re.compile(r"\byesterday\b", re.I), lambda m, t: _day(t - timedelta(days=1))),
    (re.compile(r"\b(?:today|tonight|this\s+morning|this\s+afternoon|this\s+evening)\b", re.I), lambda m, t: _day(t)),
    (
        re.compile(rf"\b(?P<n>{_EN_NUMBER})\s+(?P<unit>day|week|month|year)s?\s+(?:ago|back|earlier)\b", re.I),
        lambda m, t: _ago(_number(m.group("n")), m.group("unit"), t),
    ),
    (
        re.compile(
            r"\b(?P<last>last|past|previous|on)?\s*(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend)\b",
            re.I,
        ),
        lambda m, t: _en_weekday(m, t) if m.group("last") or m.group("wd").lower() != "weekend" else None,
    ),
    (re.compile(r"\b(?P<which>last|past|previous|this)\s+(?P<unit>week|month|year)\b", re.I), _en_last),
    (re.compile(r"大前天"), lambda m, t: _day(t - timedelta(days=3))),
    (re.compile(r"前天"), lambda m, t: _day(t - timedelta(days=2))),
    (re.compile(r"昨天|昨日|昨晚"), lambda m, t: _day(t - timedelta(days=1))),
    (re.compile(r"今天|今日|今晚|今早"), lambda m, t: _day(t)),
    (
        re.compile(rf"(?P<n>{_CN_NUMBER})\s*(?:个)?\s*(?P<unit>天|日|周|星期|礼拜|月|年)\s*(?:之?前|以前)"),
        lambda m, t: _ago(_number(m.group("n")), m.group("unit"), t),
    ),
    (re.compile(r"前几天|这几天|最近几天"), lambda m, t: _day(t - timedelta(days=FEW))),
    (re.compile(rf"(?P<which>上上|上|这|本)?\s*(?:个)?{_CN_WEEK}(?P<wd>[一二三四五六日天末])"), _cn_week_day),
    (re.compile(rf"上上(?:个)?{_CN_WEEK}"), lambda m, t: _week(t, 2)),
    (re.compile(rf"上(?:个)?{_CN_WEEK}"), lambda m, t: _week(t, 1)),
    (re.compile(rf"(?:这|本)(?:个)?{_CN_WEEK}"), lambda m, t: _week(t, 0)),
    (re.compile(r"上上个?月"), lambda m, t: _month(t, 2)),
    (re.compile(r"上个?月"), lambda m, t: _month(t, 1)),
    (re.compile(r"(?:这个|本)月"), lambda m, t: _month(t, 0)),
    (re.compile(r"前年"), lambda m, t: DateSpec(t.year - 2, None, None)),
    (re.compile(r"去年"), lambda m, t: DateSpec(t.year - 1, None, None)),
    (re.compile(r"今年"), lambda m, t: DateSpec(t.year, None, None)),
]
