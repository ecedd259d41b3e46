"""The kind of answer a question asks for, and the messages that hold one (answer typing).

A "when" question is answered where the event is told with its time ("last Friday I went to a
council meeting for adoption"); a later session that only re-mentions the event ("since the
adoption meeting...") says the same words without one. So, as question answering has long typed
its answers (a date for "when", a number for "how many"), recall looks at the leaders' weightiest
passages (gateway/recall/rank.py `_passage_rerank`) and lets a passage that holds the question's
words AND an answer of the asked-for kind count `gain` more in best(s). A passage with the kind of
answer but none of the question's words gains nothing (the gain multiplies the words' mass), so
no session rises on "yesterday" alone. (`gain` and `before`, below, are fields of
gateway/recall/weights.py's `RankWeights`.)

Measured (bench/recall.py, LoCoMo raw questions pooled, + the local model; 132 of 762 questions
are "when" questions): `gain` 0.3 raises tune any@1 0.745 -> 0.749 and MRR 0.817 -> 0.820, held
0.771 -> 0.773 / 0.836 -> 0.837; 0.6 and 1.0 are the same on held and no better on tune, so the
smallest gain that moves is kept. MemoryBank-CN unchanged (its questions ask "what", not "when").
The patterns are language knowledge, English and Chinese, not words of the data.

The same `gain` for the other kinds, on top of TIME (raw questions pooled, + the local model; in
brackets the lexical ranking alone):
- COUNT ("how many / much / often / old / far", 多少, 几个 ...; 3 tune and 19 held questions): a
  cardinal in digits or words. Tune any@1 0.749 -> 0.753 (lexical 0.749, the same), MRR 0.820 ->
  0.822 ("how many times ... to the beach": rank 2 -> 1); held unchanged at @1, one question up
  ("how many turtles": not in the five -> rank 5). With "one" among the number words tune lost a
  question ("Here's one-" is a pronoun) and with ordinals held gained one by chance ("shown for
  the first time"), so neither is a count here. "How long" (and 多久) is left to no kind: its 5
  tune and 7 held questions move the same with or without it.
- PLACE ("where", "which city / country / state", 哪里, 在哪 ...; 6 tune and 22 held questions): a
  capitalised name after in / at / to / from / near / visit (not a month or a weekday), or a word
  for a place (city, park, beach ...). Held any@1 0.773 -> 0.775, MRR 0.837 -> 0.838 (lexical
  0.766 -> 0.767, 0.829 -> 0.830); tune unchanged. The names after in / at / near alone do as well.
With both, `gain` 0.25-0.35 and 0.5 give the same or one question either way; 0.3 is kept for all.
MemoryBank-CN (1 count and 1 place question, held) and MemoryBank-EN unchanged.

Where the kind is looked for, and how much it adds. An exchange often tells the time before the
event it dates ("Guess what happened last Saturday!" / "What?" / "The kids played their recital"),
so the kind is looked for in the passage and in the `before` = 2 messages ahead of it. And a kind
said in the same message as the question's words is the surer sign, so the passage counts
(1 + `gain`) x its words, plus `gain` x the words of its weightiest message that holds the kind.
Both together, LoCoMo raw questions (pooled; in brackets scoped): lexical tune any@1 0.749 ->
0.753 (0.753 -> 0.758), MRR 0.810 -> 0.812 (0.813 -> 0.816); + the local model tune MRR 0.822 ->
0.823 (0.825 -> 0.826), any@1 unchanged; held any@1 unchanged everywhere, MRR + local 0.838 ->
0.839, lexical 0.830 the same at three decimals (a few ranks up); any@5 and all@5 never lower
(held pooled 0.928 -> 0.930 lexical, 0.932 -> 0.934 + local). MemoryBank-CN and -EN unchanged.
`before` 1 is the same at @1 but lets two questions (one each half) out of the lexical five; 2, 3
and 4 are the same within a rank; 0 (the passage alone) lowers held MRR. `gain` 0.2 - 0.4 move a
rank or two either way; the added term with a gain of its own (0.5 - 0.9, the multiplier 0.3 or
none) lowers lexical MRR on one half or both. Apart, and not kept:
- the message ahead alone (`before` 1) without the added term: one held question up (lexical), no other.
- the kind looked for in the passage's first message only: tune any@1 -1 on every ranking.
- `gain` x the words of the passage's weightiest message, in place of the multiplier (0.3 - 1.0):
  held any@1 -1 on every ranking.
- `gain` x the words of the message holding the kind, in place of the multiplier: 0.7 - 0.9 raise
  tune + local any@1 0.753 -> 0.758 (MRR 0.826) but lower held scoped lexical MRR (a place
  question's answer, told in the message ahead of the words, leaves the five); with the message
  ahead looked at too, the same.
- the multiplier only when the kind sits in a message with the question's words: at 0.3 one tune
  lexical rank up; at 0.6 and 1.0 held any@1 -1.
- "how long" / 多久 -> a duration (a number and a time unit, "since 2019", 三年 ...): 12 questions,
  the pattern finds the answer in 9 of their evidence passages, yet no rank moved; with the form
  kept it cost a tune question a rank.
- the question's tense: "when did / was" looking only for past times (no "next", "tomorrow"),
  "when is ... going to / planning" only for coming ones: the past alone one tune lexical rank up
  and nothing with the form kept; the future one held rank down.

Measured and not kept (no question gained on either half, or one lost):
- "who" -> a capitalised word inside a sentence, not the one addressed ("Thanks, Mel!"), and/or a
  word for a relation (mom, friend, boss ...): capitalised words are in half of all messages;
  4 tune / 12 held questions, none moved at @1, one held fell from rank 2 to 3 (lexical).
- "what book / movie / song / game ...", "what is the name" -> a quoted title or a capitalised
  name: 6 tune / 35 held questions, no rank of a gold session changed; with Chinese title marks
  and quotes (《...》, “...”) for 哪一部 / 什么电影 / 叫什么, MemoryBank-CN the same (the one miss
  of that kind is outside the leaders the kinds are looked for in).
- "why" -> a cause (because, since, due to, 因为 ...): 7 tune / 16 held questions, one tune
  question's gold left the lexical five (rank 5), nothing gained.
- Leaving out of the answer what the question already says ("two" of "his first two turtles"):
  no question moved for any kind, so the answer patterns look at the text alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    answer: re.Pattern[str]  # text holding one: lower case unless `cased`
    cased: bool = False  # the answer pattern reads capitals (a name); else it sees the text lowered

    def asked_by(self, question: str) -> bool:
        return bool(self.question.search(question))

    def answered_by(self, text: str) -> bool:
        # lowering once is half the cost of an IGNORECASE search (13 vs 27 us a message)
        return bool(self.answer.search(text if self.cased else text.lower()))


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
        rf"{_CN_NUMBER}+\s*(?:月|号|日|天前|周前|年前|个月前)|(?:星期|周|礼拜)[一二三四五六日天末]"
    ),
)

# a count, an amount, an age or a frequency: a cardinal in digits or words. Not "one" (more often
# the pronoun: "here's one", "that one") nor an ordinal ("for the first time"), and not 一个 ("a")
_CARDINAL = (
    r"two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
    r"eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|dozens?|"
    r"couple|several|once|twice"
)
COUNT = Kind(
    "count",
    re.compile(r"^\W*how\s+(?:many|much|often|old|far)\b|多少|几个|几次|几岁", re.IGNORECASE),
    re.compile(
        rf"\d|\b(?:{_CARDINAL})\b|(?:[二两三四五六七八九十百千万几]|[十百千万]一)\s*[个次年天月周岁本只件人台张条位辆家部篇首场份块元杯]"
    ),
)

# a capitalised name after a preposition of place (not a month or a day: "in May"), or a word for a place
PLACE = Kind(
    "place",
    re.compile(
        r"^\W*(?:where\b|(?:in\s+)?(?:which|what)\s+(?:city|country|state|town|place|part)\b)|哪里|哪儿|在哪|什么地方",
        re.IGNORECASE,
    ),
    re.compile(
        rf"\b(?:in|at|to|from|near|visit(?:ed|ing)?)\s+(?:the\s+)?(?!(?i:{_MONTH}|{_WEEKDAY})\b)[A-Z]\w+"
        r"|\b(?i:city|country|town|village|park|beach|lake|mountains?|forest|museum|island|abroad|downtown|hometown)\b"
        r"|(?:在|去|到|从|住)[\u4e00-\u9fff]{0,6}?(?:市|省|县|镇|村|公园|山|湖|海|岛|馆|国)",
    ),
    cased=True,
)

KINDS = (TIME, COUNT, PLACE)  # the first that a question asks for is the one looked for


def asked(question: str) -> Kind | None:
    """The kind of answer `question` asks for, or None when it asks for none of KINDS."""
    return next((kind for kind in KINDS if kind.asked_by(question)), None)
