"""Full-text text processing: what goes into the two FTS5 indexes, and what a query turns into.

Two contentless FTS5 tables index `messages.content` without storing it again:

- `messages_fts` (unicode61): words. Chinese/Japanese/Korean characters are written into the index
  one per token, so a word of any length is found as a phrase of its characters ("部署" is the
  phrase "部 署"). The default tokenizer would keep a whole run of Han characters as one token and
  miss every word inside it.
- `messages_ident` (trigram): only identifier-like tokens (`--onefile`, `nginx.conf`,
  `ERR_004211`, `node-17.corp.example.net`), for substring search inside them. Plain prose is not in
  it, which keeps it a fraction of the size of a trigram index over everything.

Because the indexes are contentless, the text we give them is the text we must give again to
delete a row: `index_text` and `ident_text` are pure functions of the content.

A query is never passed to MATCH as written. `parse_query` cuts it into terms of letters and digits
only, and `Query.expression` quotes every term, so no input can raise a syntax error, and a query
whose words occur always has a non-empty expression.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Sequence

_CJK_CLASS = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"  # Hangul
    "\U00020000-\U0002ebef"  # Han extensions
)
CJK_CHAR = re.compile(f"[{_CJK_CLASS}]")
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
# a token as unicode61 sees it: letters and digits (underscore and punctuation separate)
_WORD = re.compile(r"[^\W_]+")
# identifier-like: a maximal run of word characters and . _ - / : @ # ~ + = %, cut after its last
# word character, holding a digit or one of those joiners. White-space words made of letters only
# are dropped by `str.isalpha` (C, no regex), the rest are cut into runs by a plain character class:
# 16-18 µs for a 456-character message where one regex with a look-behind and a look-ahead per
# token took 40-58 µs (bench corpus, 3,000 messages, same run; this runs on every appended message). The output is exactly that
# regex's (tests/storage/test_ident_text.py holds it as the reference): the index is contentless,
# so the text a message was indexed with must be reproducible to delete it.
_IDENT_CHAR = r"[\w.\-/:@#~+=%]"
_IDENT_RUN = re.compile(rf"{_IDENT_CHAR}+")
_IDENT_TAIL = ".-/:@#~+=%"  # the joiners that are not word characters: a token never ends in one
_IDENT_PUNCT = re.compile(r"[._\-/:@#~+=%]")
_DIGIT = re.compile(r"\d")
MAX_IDENTS_PER_MESSAGE = 400
MAX_QUERY_TERMS = 32
MAX_QUERY_CHARS = 4000


def clean(text: str | bytes | None) -> str:
    """Text safe to process: bytes decoded leniently, lone surrogates and NULs removed, NFKC."""
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    text = _SURROGATE.sub(" ", str(text)).replace("\x00", " ")
    return unicodedata.normalize("NFKC", text)


def space_cjk(text: str) -> str:
    """Put each CJK character in a token of its own."""
    if not CJK_CHAR.search(text):
        return text
    return _CJK_RUN.sub(lambda m: " " + " ".join(m.group()) + " ", text)


def index_text(content: str | None) -> str:
    """What the word index stores for a message."""
    return space_cjk(clean(content)) if content else ""


def is_identifier(token: str) -> bool:
    return len(token) >= 3 and bool(_IDENT_PUNCT.search(token) or _DIGIT.search(token))


def _idents(cleaned: str) -> str:
    seen: dict[str, None] = {}
    for word in cleaned.split():  # no run crosses white space
        if word.isalpha():  # letters only: no digit, no joiner, so never an identifier
            continue
        for run in _IDENT_RUN.findall(word):
            if run.isalpha():
                continue
            token = run.rstrip(_IDENT_TAIL).lower()
            if is_identifier(token) and token not in seen:
                seen[token] = None
                if len(seen) >= MAX_IDENTS_PER_MESSAGE:
                    return "\n".join(seen)
    return "\n".join(seen)


def ident_text(content: str | None) -> str:
    """What the substring index stores for a message: its distinct identifier-like tokens."""
    return _idents(clean(content)) if content else ""


def index_texts(content: str | None) -> tuple[str, str]:
    """(index_text, ident_text) of one message, cleaning it once: what an append prepares."""
    if not content:
        return "", ""
    cleaned = clean(content)
    return space_cjk(cleaned), _idents(cleaned)


# ---------------------------------------------------------------------------------------------
# queries

ENGLISH_STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself yourselves ever did does tell remember
    last time please thanks thank hi hello hey yes ok okay also still get got go went like know let
    us s t can't don't didn't won't shall may might must say said likely kind kinds type types sort
    many much long often recently something anything things thing way ways someone anyone one""".split()
)
# Chinese function words and question words; a query made only of these keeps them.
CHINESE_STOP_CHARS = frozenset(
    "的了吗呢吧啊是在和与及或也都就还又很把被给对从向我你他她它们这那哪么什怎样个些有没不一过曾"
)
CHINESE_STOP_WORDS = frozenset(
    """什么 怎么 怎样 为什么 哪里 哪个 哪些 如何 是否 是不是 有没有 上次 之前 以前 那次 那个 这个
    一下 一个 我们 你们 他们 她们 我的 你的 时候 知道 记得 还记得 请问 告诉 问题 可以 能不能 是什么
    吗 呢 吧 啊 的 了 是 在 和 曾经 当时 名字 哪些 一些 关于 多久 多少 最近 事情""".split()
)


@dataclass
class Term:
    text: str  # the term as written (cleaned)
    tokens: list[str]  # tokens as the word index sees them (CJK spaced)
    prefix: bool = False
    identifier: bool = False  # also searched as a substring in the identifier index
    cjk: bool = False
    or_with_previous: bool = False
    stop: bool = False
    quoted: bool = False  # written as "an exact phrase"

    def phrase(self) -> str:
        quoted = '"' + " ".join(self.tokens) + '"'
        return quoted + "*" if self.prefix else quoted


@dataclass
class Query:
    text: str
    terms: list[Term] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Every term is an exact string (a quoted phrase or an identifier such as a URL)."""
        return bool(self.terms) and all(t.quoted or t.identifier for t in self.content_terms)

    @property
    def content_terms(self) -> list[Term]:
        useful = [t for t in self.terms if not t.stop]
        return useful or self.terms

    def expression(self, mode: str = "all") -> str:
        """FTS5 MATCH expression. mode 'all': every term (explicit ORs honoured); 'any': any term,
        with CJK runs of three or more characters relaxed into their overlapping bigrams."""
        terms = self.content_terms
        if not terms:
            return ""
        if mode == "any":
            phrases: dict[str, None] = {}
            for term in terms:
                for p in _relaxed_phrases(term):
                    phrases[p] = None
            return " OR ".join(phrases)
        groups: list[list[str]] = []
        for term in terms:
            if term.or_with_previous and groups:
                groups[-1].append(term.phrase())
            else:
                groups.append([term.phrase()])
        parts = [g[0] if len(g) == 1 else "(" + " OR ".join(g) + ")" for g in groups]
        return " AND ".join(parts)

    def highlight_words(self) -> list[str]:
        """Plain strings to mark in a snippet (longest first)."""
        words = {t.text.lower() for t in self.content_terms if t.text}
        for t in self.content_terms:
            if not t.cjk:
                words.update(tok.lower() for tok in t.tokens if len(tok) > 1)
            elif len(t.tokens) > 2:
                words.update("".join(t.tokens[i : i + 2]) for i in range(len(t.tokens) - 1))
        return sorted(words, key=len, reverse=True)


def _relaxed_phrases(term: Term) -> list[str]:
    if term.cjk and len(term.tokens) > 2:
        grams = ["".join(term.tokens[i : i + 2]) for i in range(len(term.tokens) - 1)]
        keep = [g for g in grams if g not in CHINESE_STOP_WORDS and not set(g) <= CHINESE_STOP_CHARS]
        return ['"' + " ".join(g) + '"' for g in (keep or grams)]
    return [term.phrase()]


_OPERATORS = {"AND", "OR", "NOT", "NEAR"}
_QUOTED = re.compile(r'"([^"]*)"')


def parse_query(query: str | bytes | None) -> Query:
    """Cut any input into safe terms. Never raises."""
    text = clean(query)[:MAX_QUERY_CHARS]
    result = Query(text=text.strip())
    pieces: list[tuple[str, bool]] = []  # (raw piece, was quoted)
    last = 0
    for m in _QUOTED.finditer(text):
        pieces.extend((p, False) for p in text[last : m.start()].split())
        if m.group(1).strip():
            pieces.append((m.group(1), True))
        last = m.end()
    pieces.extend((p, False) for p in text[last:].replace('"', " ").split())

    pending_or = False
    seen: set[tuple[str, bool]] = set()
    only_operators = all(not q and p in _OPERATORS for p, q in pieces)
    for raw, quoted in pieces:
        if not quoted and raw in _OPERATORS and not only_operators:
            pending_or = raw == "OR" and bool(result.terms)
            continue
        for term in _terms_of(raw, quoted):
            key = (" ".join(term.tokens), term.prefix)
            if key in seen:
                continue
            seen.add(key)
            term.or_with_previous = pending_or
            pending_or = False
            result.terms.append(term)
            if len(result.terms) >= MAX_QUERY_TERMS:
                return result
    return result


def _terms_of(raw: str, quoted: bool) -> list[Term]:
    prefix = raw.endswith("*") and not quoted
    core = raw.strip("()[]{}<>,;!?\"'`“”‘’「」『』（），。；！？、*")
    core = core.rstrip(".:")
    if not core:
        return []
    if quoted:
        tokens = _WORD.findall(space_cjk(core))
        if not tokens:
            return []
        return [Term(core, tokens, cjk=bool(CJK_CHAR.search(core)), quoted=True)]
    terms: list[Term] = []
    # split mixed runs: "部署nginx" -> "部署", "nginx"
    for part in re.split(f"([{_CJK_CLASS}]+)", core):
        if not part:
            continue
        if CJK_CHAR.match(part):
            tokens = list(part)
            stop = part in CHINESE_STOP_WORDS or set(part) <= CHINESE_STOP_CHARS
            terms.append(Term(part, tokens, cjk=True, stop=stop))
            continue
        tokens = _WORD.findall(part)
        if not tokens:
            continue
        ident = is_identifier(part.strip("-./:@#~+=%_")) and len(tokens) >= 1
        stop = len(tokens) == 1 and tokens[0].lower() in ENGLISH_STOP_WORDS
        terms.append(Term(part, tokens, identifier=ident, stop=stop))
    if prefix and terms and not terms[-1].cjk:
        terms[-1].prefix = True
    return terms


def _folded(text: str) -> tuple[str, Sequence[int]]:
    """`text` normalised as the index sees it (NFKC, lower case), and for each of its characters
    the index of the original character it came from: matches are found in the folded text and
    quoted from the original, so `，` stays `，` in a snippet. ASCII text (NFKC leaves it alone, and
    lower case maps each character to one) is folded by one `lower()`: the per-character pass cost
    ~1.5 ms for a 5 KB tool output, and a search's 20 hits are often such (1M-message store:
    '"docker compose"' took 30 ms, 29 of them here)."""
    if text.isascii():
        return text.lower(), range(len(text))  # each character from itself
    pieces = [unicodedata.normalize("NFKC", ch).lower() for ch in text]
    owner = [i for i, piece in enumerate(pieces) for _ in piece]
    return "".join(pieces), owner


def make_snippet(content: str, words: list[str], width: int = 160) -> str:
    """A window of `content` around the first matching word, matches wrapped in « », quoting the
    original text (matching ignores letter case and NFKC differences such as full-width forms)."""
    if isinstance(content, (bytes, bytearray)):
        content = bytes(content).decode("utf-8", errors="replace")
    content = _SURROGATE.sub(" ", str(content or "")).replace("\x00", " ")
    if not content.strip():
        return ""
    folded, owner = _folded(content)
    marks = [w for w in (unicodedata.normalize("NFKC", w).lower() for w in words) if w]
    best = min((pos for pos in (folded.find(w) for w in marks) if pos != -1), default=-1)
    start = 0 if best == -1 else max(0, owner[best] - width // 3)
    window = content[start : start + width]
    spans: list[tuple[int, int]] = []
    if marks:
        wfold, wown = _folded(window)
        pattern = re.compile("|".join(re.escape(w) for w in sorted(marks, key=len, reverse=True)))
        for m in pattern.finditer(wfold):
            a, b = wown[m.start()], wown[m.end() - 1] + 1
            if not spans or a >= spans[-1][1]:
                spans.append((a, b))
    out, at = [], 0
    for a, b in spans:
        out += [window[at:a], "«", window[a:b], "»"]
        at = b
    out.append(window[at:])
    text = " ".join("".join(out).split())
    return ("…" if start > 0 else "") + text + ("…" if start + width < len(content) else "")
