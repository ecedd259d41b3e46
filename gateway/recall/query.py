"""Recall queries: what a question turns into before any session is scored.

`plan_query` cuts any input into *units*, each one piece of evidence counted on its own:
- an English word, also matched through a light stem as a prefix ("painted" -> "paint*", which
  finds "painting"), and through its irregular forms ("met" -> "meet", gateway/recall/forms.py);
  a possessive counts for the name ("Caroline's" -> "Caroline");
- an identifier (path, host, error code, email, URL) kept whole, and also searched as a substring
  in the identifier index; words joined by "/" are alternatives ("artists/bands");
- a Chinese/Japanese/Korean piece: a run of Han characters has no spaces, so it is cut at stop
  words and stop characters and the rest split into overlapping bigrams
  ("上次部署网关超时是怎么解决的" -> 部署 署网 网关 关超 超时 解决);
- a proximity pair: two adjacent query words found close together in one message;
- a date ("on 8 May, 2023", "5月2日"), cut out of the text (see gateway/recall/dates.py).
Stop words go (fts.ENGLISH_STOP_WORDS, CHINESE_STOP_*) unless nothing else is left.
Every FTS5 expression is built from letters and digits inside quotes, so no input can raise.

The proximity pair is the term dependence of IR's sequential dependence model, and it carries a
lot: without it LoCoMo raw questions (pooled, lexical, bench/recall.py) fall from any@1 / MRR
0.745 / 0.809 to 0.701 / 0.782 on the tune half, 0.764 / 0.828 to 0.737 / 0.814 held. Its shape
was measured, and the plain one is kept: PAIR_WINDOW 4 (1: tune 0.714, held 0.752; 2: 0.727,
0.756; 6 and 8: tune 0.749, held 0.760 / 0.758; 12: 0.732, 0.745); PAIR_WEIGHT 0.5 (0.25, 0.75
and 1 each lower both halves). Added beside it and dropped: an ordered-phrase unit for the same
two words ("pride"* + "parade"*, weight 0.15 of a word: tune equal, held any@1 +0.002 lexical,
but with the semantic stage tune MRR 0.817 -> 0.816 and held 0.771 / 0.836 -> 0.767 / 0.834;
at 0.3 or 0.5 lower on both; as NEAR(..., 0) tune 0.736); a second, wider window (10 or 20 tokens, the
"same message" check, 0.15: tune 0.740, held 0.762 / 0.760); pairs of words one apart ("skip"
pairs, 0.1-0.5: tune 0.719-0.732); pairs counted only in the passage evidence and not in the
session's BM25 (tune 0.714); a pair's sides through the words' irregular forms too ("met" for
"meet": tune 0.740, held 0.762).
"""

from __future__ import annotations

import math
import re
import sqlite3
from dataclasses import dataclass, field
from itertools import product
from typing import Callable

from gateway.recall.dates import DateSpec, conversation_order, extract_dates
from gateway.recall.forms import forms
from gateway.storage.conn import Conn
from gateway.storage.fts import (
    CHINESE_STOP_CHARS,
    CHINESE_STOP_WORDS,
    ENGLISH_STOP_WORDS,
    MAX_QUERY_CHARS,
    Query,
    Term,
    clean,
    parse_query,
)

MAX_UNITS = 48
MAX_PREFIX_TERMS = 24  # a prefix matching more index terms than this is left to FTS5 as a prefix
MAX_NEAR_COMBINATIONS = 24
PAIR_WINDOW = 4  # tokens between the two words of a proximity pair
QUOTED_WORDS = 3  # a quoted phrase this long is also searched as its words ("Taxi Driver" stays a phrase)
_STOP_WORD_LENGTHS = sorted({len(w) for w in CHINESE_STOP_WORDS}, reverse=True)
# -ship, -hood, -ness ("mentorship" -> "mentor*" finds "mentored"): LoCoMo tune MRR 0.822 -> 0.823
# (+ the local model), held and MemoryBank unchanged; -tion/-sion the same way ("promotion" ->
# "promot*") cost a tune question by words alone ("question" -> "quest*"), and is not done
_SUFFIXES = (
    "ships",
    "ship",
    "hood",
    "ness",
    "ingly",
    "ings",
    "ing",
    "edly",
    "ed",
    "ies",
    "es",
    "s",
    "ly",
    "ment",
    "ments",
)


# ---------------------------------------------------------------------------------------------
# query -> units


@dataclass
class Unit:
    label: str  # what a person would call this piece of the query ("部署", "nginx.conf", "paint")
    word_expr: str  # FTS5 expression on the word index ("" = none)
    ident_expr: str = ""  # FTS5 expression on the identifier (trigram) index ("" = none)
    highlight: list[str] = field(default_factory=list)
    pair: bool = False  # a proximity unit: two adjacent query words close together
    date: bool = False  # a date the query names: the sessions active then hold it


@dataclass
class Plan:
    query: Query
    units: list[Unit]
    dates: list[DateSpec] = field(default_factory=list)
    order: str | None = None  # "first" / "last": the question names the person's first or latest conversation

    @property
    def understood(self) -> str:
        """The query as recall used it: its content pieces, space separated."""
        return " ".join([*(u.label for u in self.units if not u.pair), *(d.label for d in self.dates)])

    @property
    def meaning_text(self) -> str:
        """What the semantic stage embeds: the question as written, without search operators
        ("car OR prius" means what "car prius" means; the operator word would be embedded too)."""
        return " ".join(_OPERATOR_WORDS.sub(" ", self.query.text).split())

    def highlight_words(self) -> list[str]:
        words = {w for u in self.units for w in u.highlight if w}
        return sorted(words, key=len, reverse=True)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _stem(word: str) -> str | None:
    """A light English stem, used as a prefix ("painting" -> "paint"); None when not worth it."""
    if not word.isascii() or not word.isalpha() or len(word) < 4:
        return None
    lower = word.lower()
    for suffix in _SUFFIXES:
        if suffix == "s" and lower.endswith("ss"):
            continue
        if lower.endswith(suffix) and len(lower) - len(suffix) >= (3 if suffix == "s" else 4):
            return lower[: -len(suffix)]  # "stories" -> "stor*", which also matches "story"
    if len(lower) >= 5 and lower.endswith("y") and lower[-2] not in "aeiou":
        # the y turns into i before a suffix: "apply" -> "appl*" finds "applied", "applies"
        # (LoCoMo tune any@1 +2, held unchanged; dropping a final e the same way, "dance" ->
        # "danc*", measured tune +0, held -1, and is not done)
        return lower[:-1]
    return lower if len(lower) >= 5 else None


def cjk_pieces(run: str, fallback: bool = True) -> list[str]:
    """Bigrams of a Han/kana/hangul run, after cutting it at stop words and stop characters.

    "上次部署网关超时是怎么解决的" -> 部署 署网 网关 关超 超时 解决. A content character left alone
    between stop material is kept as a one-character piece, plus its bigram with a neighbouring
    stop character ("有趣" -> "趣", "有趣"), so a word that contains a stop character is not lost.
    A run of nothing but stop material gives all its bigrams when `fallback`, else nothing.
    """
    n = len(run)
    if n <= 2:
        stop_only = run in CHINESE_STOP_WORDS or set(run) <= CHINESE_STOP_CHARS
        return [run] if fallback or not stop_only else []
    in_word = [False] * n  # part of a stop word
    i = 0
    while i < n:
        for length in _STOP_WORD_LENGTHS:
            if length > 1 and i + length <= n and run[i : i + length] in CHINESE_STOP_WORDS:
                for j in range(i, i + length):
                    in_word[j] = True
                i += length - 1
                break
        i += 1
    stop = [in_word[i] or ch in CHINESE_STOP_CHARS for i, ch in enumerate(run)]
    pieces: dict[str, None] = {}
    i = 0
    while i < n:
        if stop[i]:
            i += 1
            continue
        j = i
        while j < n and not stop[j]:
            j += 1
        if j - i >= 2:
            for k in range(i, j - 1):
                pieces[run[k : k + 2]] = None
        else:
            pieces[run[i]] = None
            if i > 0 and not in_word[i - 1]:
                pieces[run[i - 1 : i + 1]] = None
            if i + 1 < n and not in_word[i + 1]:
                pieces[run[i : i + 2]] = None
        i = j
    if not pieces and fallback:
        for k in range(n - 1):
            pieces[run[k : k + 2]] = None
    return list(pieces)


_OPERATOR_WORDS = re.compile(r"\b(?:OR|AND|NOT|NEAR)\b")
_POSSESSIVE = re.compile(r"['’][sS]$")


def _word_unit(word: str) -> Unit:
    """A plain word, also matched through its light stem as a prefix, and through its irregular
    forms ("met" -> "meet", "meets", "meeting"; gateway/recall/forms.py)."""
    stem = _stem(word)
    expr = _quote(word) + (f" OR {_quote(stem)}*" if stem and stem != word.lower() else "")
    if stem == word.lower():
        expr = _quote(word) + "*"
    lower = word.lower()
    # a form that is a stop word ("went", "got") carries nothing on its own: it would only flood the unit
    others = sorted(
        f for f in forms(word) if f != lower and f not in ENGLISH_STOP_WORDS and not (stem and f.startswith(stem))
    )
    expr += "".join(f" OR {_quote(f)}" for f in others)
    return Unit(label=word, word_expr=expr, highlight=[stem or word, *others])


def _units_of(term: Term, fallback: bool = False) -> list[Unit]:
    if term.cjk:
        return [
            Unit(label=p, word_expr=_quote(" ".join(p)), highlight=[p])
            for p in cjk_pieces("".join(term.tokens), fallback)
        ]
    tokens = term.tokens
    if len(tokens) == 2 and tokens[1].lower() == "s" and _POSSESSIVE.search(term.text):
        tokens = tokens[:1]  # "Caroline's" is about Caroline
    if term.identifier and "/" in term.text and all(t.isalpha() for t in tokens):
        return [_word_unit(t) for t in tokens]  # "artists/bands": alternatives, not a path
    if term.identifier and len(tokens) > 1 or any(c.isdigit() for c in term.text):
        ident = term.text.lower().strip("-./:@#~+=%_")
        ident_expr = _quote(ident) if term.identifier and len(ident) >= 3 else ""
        # an identifier is marked whole: its pieces ("example", "com" of an address) occur in
        # unrelated words, and marking them there points at what did not match
        marks = [term.text] if ident_expr else [term.text, *tokens]
        return [Unit(label=term.text, word_expr=term.phrase(), ident_expr=ident_expr, highlight=marks)]
    if len(tokens) == 1 and not term.prefix:
        return [_word_unit(tokens[0])]
    return [Unit(label=term.text, word_expr=term.phrase(), highlight=[term.text, *tokens])]


def _pair_unit(a: Unit, b: Unit) -> Unit:
    """Two query words that stand next to each other, found close together in one message."""

    def side(u: Unit) -> str:
        stem = u.highlight[0] if u.highlight else u.label
        return _quote(stem.lower()) + "*"

    return Unit(
        label=f"{a.label} {b.label}", word_expr=f"NEAR({side(a)} {side(b)}, {PAIR_WINDOW})", highlight=[], pair=True
    )


def plan_query(query: str | bytes | None, now: float | None = None) -> Plan:
    """Parse any input into the units recall counts; relative dates ("yesterday", 上周) count back
    from `now` (the asking time, epoch seconds; default: the clock). Never raises."""
    dates, rest = extract_dates(_OPERATOR_WORDS.sub(" ", clean(query)[:MAX_QUERY_CHARS]), now)
    parsed = parse_query(rest)
    parsed.text = clean(query)[:MAX_QUERY_CHARS].strip()
    units: dict[str, Unit] = {}
    previous: Unit | None = None
    pairs: list[Unit] = []
    terms = parsed.content_terms
    # a query made only of stop material still searches for it (never an empty answer)
    fallback = not any(_units_of(t) for t in terms)
    expanded: list[Term] = []
    for term in terms:
        expanded.append(term)
        if term.quoted and not term.cjk and len(term.tokens) >= QUOTED_WORDS:
            # a quoted sentence is rarely said word for word: its words count as well as the phrase
            expanded.extend(t for t in parse_query(" ".join(term.tokens)).content_terms if not t.quoted)
    for term in expanded:
        for unit in _units_of(term, fallback):
            key = unit.word_expr + "|" + unit.ident_expr
            units.setdefault(key, unit)
            simple = not term.cjk and not unit.ident_expr and " " not in unit.label
            if simple and previous is not None and previous.label.lower() != unit.label.lower():
                pairs.append(_pair_unit(previous, unit))
            previous = unit if simple else None
    singles = list(units.values())[:MAX_UNITS]
    return Plan(parsed, singles + pairs[: max(0, MAX_UNITS - len(singles))], dates, conversation_order(parsed.text))


# ---------------------------------------------------------------------------------------------
# prefixes -> the index terms they stand for

_PHRASE = re.compile(r'"((?:[^"]|"")*)"(\*?)')
_OR_CHAIN = re.compile(r'"(?:[^"]|"")*"\*?(?: OR "(?:[^"]|"")*"\*?)*')
_NEAR = re.compile(r'NEAR\(((?:"(?:[^"]|"")*"\*? ?)+), (\d+)\)')


def expand_prefixes(expr: str, terms_of: Callable[[str], list[str] | None]) -> str:
    """The same expression with each one-word prefix ("docker"*) replaced by the index terms it
    matches ("docker" OR "dockerfile"), as `terms_of(prefix)` lists them (None: unknown/too many).

    Why: FTS5 (without a prefix index) answers a prefix query by merging the whole doclist of every
    matching term before it can return the first row, so even "the newest 200 matches" of a common
    prefix walks every one of its matches; an OR of plain terms is read lazily, newest first. The
    rows matched are the same. Anything not of the shapes recall builds is returned unchanged.
    """
    near = _NEAR.fullmatch(expr)
    if near:
        phrases = _PHRASE.findall(near.group(1))
        sides = [_alternatives(text, star, terms_of) for text, star in phrases]
        for (text, star), side in zip(phrases, sides):
            if side == []:  # a prefix no term has: the pair matches nothing, and this says so cheaply
                return '"' + text + '"' + star
        known = [s for s in sides if s is not None]
        if len(known) < len(sides) or math.prod([len(s) for s in known]) > MAX_NEAR_COMBINATIONS:
            return expr
        return " OR ".join(f"NEAR({' '.join(combo)}, {near.group(2)})" for combo in product(*known))
    if not _OR_CHAIN.fullmatch(expr) or '"*' not in expr:
        return expr
    out: dict[str, None] = {}
    for text, star in _PHRASE.findall(expr):
        alternatives = _alternatives(text, star, terms_of)
        if alternatives is None:
            return expr
        out.update(dict.fromkeys(alternatives))
    return " OR ".join(out) or expr


def _alternatives(text: str, star: str, terms_of: Callable[[str], list[str] | None]) -> list[str] | None:
    phrase = '"' + text + '"'
    if not star:
        return [phrase]
    word = text.lower()
    # only a single ASCII word: the index folds it exactly like this (unicode61 lower-cases ASCII)
    if not (word.isascii() and word.isalnum()):
        return None
    terms = terms_of(word)
    if terms is None:
        return None
    return [_quote(t) for t in terms]


class PrefixTerms:
    """The index terms a prefix stands for, listed from the word index's vocabulary
    (`messages_vocab`, an fts5vocab table; see expand_prefixes for why)."""

    TABLE = "messages_vocab"

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.ready: bool | None = None

    def _prepare(self) -> bool:
        try:
            self.conn.execute(f"SELECT term FROM {self.TABLE} LIMIT 0")
            return True
        except sqlite3.OperationalError:  # a database opened read-only before its upgrade
            return False

    def __call__(self, prefix: str) -> list[str] | None:
        if self.ready is None:
            self.ready = self._prepare()
        if not self.ready or not prefix:
            return None
        terms: list[str] = []
        low = prefix
        while True:
            # one seek per term: an 'instance' table is ordered by term, and the next term after t
            # is the first one >= t + "\0" (a range scan would walk every instance of t)
            row = self.conn.execute(f"SELECT term FROM {self.TABLE} WHERE term >= ? LIMIT 1", (low,)).fetchone()
            if row is None or not str(row[0]).startswith(prefix):
                return terms
            if len(terms) >= MAX_PREFIX_TERMS:
                return None
            terms.append(row[0])
            low = row[0] + "\0"
