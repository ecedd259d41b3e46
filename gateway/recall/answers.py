"""What kind of answer a question asks for, and which messages hold one (prototype)."""

from __future__ import annotations

import os
import re

_WHEN_Q = re.compile(
    r"^\s*(?:when\b|what\s+(?:time|date|day|year|month)\b|how\s+long\s+ago\b|which\s+(?:day|year|month)\b)"
    r"|什么时候|何时|哪天|哪一天|几号|几月|哪年|几点",
    re.IGNORECASE,
)
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTHS = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_TIME_EN = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|recently|lately|ago|"
    rf"(?:last|this|next|past)\s+(?:night|morning|afternoon|evening|week(?:end)?|month|year|summer|winter|spring|fall|autumn|{_WEEKDAY})|"
    rf"the\s+other\s+day|on\s+{_WEEKDAY}|{_MONTHS}|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_TIME_ZH = re.compile(r"昨天|前天|今天|今早|今晚|刚才|刚刚|最近|上周|上个?星期|上个?月|去年|前年|\d+\s*[月号日]|[一二三四五六七八九十]+[月号日]|星期[一二三四五六日天]|周[一二三四五六日末]|[天周月年]前")
GAIN = float(os.environ.get("CW_TIME_GAIN", "0.3"))


def asks_when(question: str) -> bool:
    return bool(_WHEN_Q.search(question))


def says_when(text: str) -> bool:
    return bool(_TIME_EN.search(text) or _TIME_ZH.search(text))
