"""The kind of answer a question asks for, and the messages that hold one (answer typing).

A "when" question is answered where the event is told with its time ("last Friday I went to a
council meeting for adoption"); a later session that only re-mentions the event ("since the
adoption meeting...") says the same words without one. So, as question answering has long typed
its answers (a date for "when", a number for "how many"), recall looks at the leaders' weightiest
passages (gateway/recall/rank.py `_passage_rerank`) and lets a passage that holds the question's
words AND an answer of the asked-for kind count GAIN more in best(s). A passage with the kind of
answer but none of the question's words gains nothing (the gain multiplies the words' mass), so
no session rises on "yesterday" alone.

Measured (bench/recall.py, LoCoMo raw questions pooled, + the local model; 132 of 762 questions
are "when" questions): GAIN 0.3 raises tune any@1 0.745 -> 0.749 and MRR 0.817 -> 0.820, held
0.771 -> 0.773 / 0.836 -> 0.837; 0.6 and 1.0 are the same on held and no better on tune, so the
smallest gain that moves is kept. MemoryBank-CN unchanged (its questions ask "what", not "when").
The patterns are language knowledge, English and Chinese, not words of the data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GAIN = 0.3  # how much more a passage with the asked-for kind of answer counts (docstring)

_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)"
_MONTH = r"(?:january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)"
_SPAN = (
    r"(?:night|morning|afternoon|evening|week(?:end)?|month|year|summer|winter|spring|fall|autumn|semester|"
    + _WEEKDAY
    + ")"
)
_CN_NUMBER = r"[0-9０-９一二两三四五六七八九十几]"


@dataclass(frozen=True)
class Kind:
    name: str
    question: re.Pattern[str]  # a question asking for this kind of answer
    answer: re.Pattern[str]  # text holding one

    def asked_by(self, question: str) -> bool:
        return bool(self.question.search(question))

    def answered_by(self, text: str) -> bool:
        return bool(self.answer.search(text))


TIME = Kind(
    "time",
    re.compile(
        r"^\W*(?:when\b|what\s+(?:time|date|day|year|month)\b|which\s+(?:day|date|year|month)\b|how\s+long\s+ago\b)"
        r"|什么时候|啥时候|何时|哪天|哪一天|几号|几月|哪年|哪一年|几点",
        re.IGNORECASE,
    ),
    re.compile(
        rf"\b(?:yesterday|today|tonight|tomorrow|recently|lately|ago|the\s+other\s+day|"
        rf"(?:last|this|next|past|that)\s+{_SPAN}|(?:on|since|until)\s+{_WEEKDAY}|{_MONTH}\.?\s+\d|\d+(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}|"
        rf"in\s+{_MONTH}|(?:19|20)\d\d)\b"
        rf"|昨天|昨晚|前天|今天|今早|今晚|刚才|刚刚|最近|上周|上个?星期|上个?礼拜|上个?月|去年|前年|"
        rf"{_CN_NUMBER}+\s*(?:月|号|日|天前|周前|年前|个月前)|(?:星期|周|礼拜)[一二三四五六日天末]",
        re.IGNORECASE,
    ),
)

KINDS = (TIME,)


def asked(question: str) -> Kind | None:
    """The kind of answer `question` asks for, or None when it asks for none of KINDS."""
    return next((kind for kind in KINDS if kind.asked_by(question)), None)
