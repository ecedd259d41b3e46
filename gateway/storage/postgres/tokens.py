"""What the Postgres word and identifier columns hold, and what a query turns into there.

The text is cut in Python by the same code that feeds FTS5 (gateway.storage.fts), so both backends
find the same words: `index_text` spaces CJK characters, `_WORD` takes letters and digits. Here
the tokens become a `tsvector` literal (no Postgres parser or dictionary touches them, so the
database's locale and text-search config change nothing):

- a Latin/Cyrillic/... token is folded as unicode61 folds it (lower case, diacritics removed);
- a CJK character is a lexeme of its own, and each two adjacent CJK characters are also a lexeme
  at the first one's position ("部署网关" -> 部 署 网 关 + 部署 署网 网关). A two-character Chinese
  word, the common case, is then one GIN lookup instead of a phrase check over every message
  holding either character; longer runs are phrases of their pairs (`部署 <-> 署网 <-> 网关`).
  pg_trgm cannot do this: a trigram index has nothing to look up for a two-character word.

Identifiers (`ident_text`) go to a plain text column searched by LIKE through a pg_trgm GIN index.

A query never reaches Postgres as text it parses: `tsquery_of_fts` reads the FTS5 expressions
that search and recall build (quoted phrases, `*` prefixes, AND/OR, NEAR) and writes a tsquery
literal with every lexeme quoted. Anything outside that grammar gives None (no evidence), as an
expression FTS5 rejects does on SQLite. `tsquery_pair_of_fts` also gives its presence form (every
phrase distance made AND, a NEAR pair one AND of its two sides): what the GIN index, which keeps
no positions, can answer; search checks the distances on the rows it returns.
"""

from __future__ import annotations

import re
import unicodedata

from gateway.storage.fts import _WORD, CJK_CHAR, index_text

MAX_POSITION = 16383  # tsvector positions beyond this are all stored as 16383
MAX_POSITIONS_PER_LEXEME = 255
MAX_LEXEME_BYTES = 2046  # Postgres refuses a lexeme of 2 KB or more
MAX_VECTOR_BYTES = 1_000_000  # a tsvector holds at most 1 MB


def fold(token: str) -> str:
    """A token as the word index stores it: CJK unchanged, others lower-cased without diacritics
    (what unicode61 with remove_diacritics 2 does)."""
    if CJK_CHAR.match(token):
        return token
    lower = token.lower()
    if lower.isascii():
        return lower
    stripped = "".join(c for c in unicodedata.normalize("NFKD", lower) if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", stripped)


def _is_cjk_char(token: str) -> bool:
    return len(token) == 1 and bool(CJK_CHAR.match(token))


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def words_vector(content: str | None) -> str | None:
    """The tsvector literal of a message's words (None: nothing to index)."""
    if not content:
        return None
    tokens = _WORD.findall(index_text(content))
    positions: dict[str, list[int]] = {}

    def add(lexeme: str, position: int) -> None:
        found = positions.get(lexeme)
        if found is None:
            if len(lexeme.encode()) <= MAX_LEXEME_BYTES:
                positions[lexeme] = [position]
        elif len(found) < MAX_POSITIONS_PER_LEXEME and found[-1] != position:
            found.append(position)

    for index, token in enumerate(tokens):
        position = min(index + 1, MAX_POSITION)
        if _is_cjk_char(token):
            add(token, position)
            if index + 1 < len(tokens) and _is_cjk_char(tokens[index + 1]):
                add(token + tokens[index + 1], position)
        else:
            add(fold(token), position)
    if not positions:
        return None
    parts, size = [], 0
    for lexeme, where in positions.items():
        part = f"{_quote(lexeme)}:{','.join(map(str, where))}"
        size += len(part.encode()) + 8
        if size > MAX_VECTOR_BYTES:  # a huge message: its first distinct words stay findable
            break
        parts.append(part)
    return " ".join(parts)


def phrase_query(tokens: list[str], prefix: bool = False) -> str:
    """The tsquery of a phrase of index tokens: adjacent CJK characters read as their pairs (one
    lexeme each), the rest folded, joined by the distance between them; `prefix`: the last
    token may be the start of a longer word."""
    items: list[tuple[str, int]] = []  # (lexeme, position in the phrase)
    i, n = 0, len(tokens)
    while i < n:
        if _is_cjk_char(tokens[i]):
            j = i
            while j < n and _is_cjk_char(tokens[j]):
                j += 1
            if j - i == 1:
                items.append((tokens[i], i))
            else:
                items.extend((tokens[k] + tokens[k + 1], k) for k in range(i, j - 1))
            i = j
        else:
            items.append((fold(tokens[i]), i))
            i += 1
    # a word too long for Postgres is not in the index (words_vector drops it): it cannot match
    items = [(lexeme, at) for lexeme, at in items if len(lexeme.encode()) <= MAX_LEXEME_BYTES]
    if not items:
        return ""
    out = _quote(items[0][0])
    for (_, before), (lexeme, at) in zip(items, items[1:]):
        out += f" <{at - before}> " + _quote(lexeme)
    if prefix and not _is_cjk_char(tokens[-1]):
        out += ":*"
    return out if len(items) == 1 else f"({out})"


# -- FTS5 expressions (the subset search and recall write) -> tsquery ----------------------------
_LEX = re.compile(
    r'\s*(?:(?P<phrase>"(?:[^"]|"")*")(?P<star>\*?)|(?P<op>AND|OR|NOT)\b|(?P<near>NEAR\()|(?P<p>[(),])|(?P<num>\d+))'
)


class _Unsupported(ValueError):
    pass


def _lex(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _LEX.match(expr, pos)
        if not m or m.end() == pos:
            raise _Unsupported(expr[pos:])
        pos = m.end()
        if m.group("phrase"):
            out.append(("phrase" + m.group("star"), m.group("phrase")[1:-1].replace('""', '"')))
        elif m.group("op"):
            out.append(("op", m.group("op")))
        elif m.group("near"):
            out.append(("near", ""))
        elif m.group("p"):
            out.append((m.group("p"), m.group("p")))
        else:
            out.append(("num", m.group("num")))
    return out


_PHRASE_OP = re.compile(r"'(?:[^']|'')*'|<(?:-|\d+)>")


def presence_of(phrase: str) -> str:
    """A phrase tsquery with every distance operator made AND: the lexemes a match must hold,
    which the GIN index can answer without the positions it does not store."""
    return _PHRASE_OP.sub(lambda m: m.group(0) if m.group(0).startswith("'") else "&", phrase)


class _Parser:
    """or := and ('OR' and)*; and := atom (['AND'] atom)*; atom := phrase | '(' or ')' | NEAR.
    Each rule gives (tsquery, presence): the query and the lexemes-only form of it (presence_of)."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.i = tokens, 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise _Unsupported("unexpected end")
        self.i += 1
        return token

    def parse(self) -> tuple[str, str]:
        out = self.or_()
        if self.peek() is not None:
            raise _Unsupported(str(self.peek()))
        return out

    @staticmethod
    def _join(parts: list[tuple[str, str]], op: str) -> tuple[str, str]:
        if len(parts) == 1:
            return parts[0]
        presences = list(dict.fromkeys(p for _, p in parts))
        presence = presences[0] if len(presences) == 1 else "(" + f" {op} ".join(presences) + ")"
        return "(" + f" {op} ".join(q for q, _ in parts) + ")", presence

    def or_(self) -> tuple[str, str]:
        parts = [self.and_()]
        while self.peek() == ("op", "OR"):
            self.take()
            parts.append(self.and_())
        return self._join(parts, "|")

    def and_(self) -> tuple[str, str]:
        parts = [self.atom()]
        while (token := self.peek()) is not None and token not in (("op", "OR"), (")", ")"), (",", ",")):
            if token == ("op", "AND"):
                self.take()
            elif token[0] == "op":
                raise _Unsupported(token[1])
            parts.append(self.atom())
        return self._join(parts, "&")

    def phrase(self, kind: str, text: str) -> str:
        query = phrase_query(_WORD.findall(index_text(text)), prefix=kind == "phrase*")
        if not query:
            raise _Unsupported(text)
        return query

    def atom(self) -> tuple[str, str]:
        kind, text = self.take()
        if kind.startswith("phrase"):
            query = self.phrase(kind, text)
            return query, presence_of(query)
        if kind == "(":
            inner = self.or_()
            if self.take() != (")", ")"):
                raise _Unsupported("(")
            return inner
        if kind == "near":
            sides = []
            while (token := self.peek()) is not None and token[0].startswith("phrase"):
                sides.append(self.phrase(*self.take()))
            distance = 10
            if self.peek() == (",", ","):
                self.take()
                kind, number = self.take()
                if kind != "num":
                    raise _Unsupported(number)
                distance = int(number)
            if self.take() != (")", ")") or len(sides) != 2:
                raise _Unsupported("NEAR")  # recall's pairs have two sides; more is not needed
            a, b = sides
            # NEAR(a b, N): at most N tokens between them, in either order; present: both are
            near = [f"{x} <{d}> {y}" for d in range(1, distance + 2) for x, y in ((a, b), (b, a))]
            return "(" + " | ".join(near) + ")", f"({presence_of(a)} & {presence_of(b)})"
        raise _Unsupported(text)


def tsquery_of_fts(expr: str) -> str | None:
    """The tsquery literal of an FTS5 expression of the shapes search and recall build; None
    when it is empty or of another shape."""
    pair = tsquery_pair_of_fts(expr)
    return pair[0] if pair else None


def tsquery_pair_of_fts(expr: str) -> tuple[str, str] | None:
    """(tsquery, presence) of an FTS5 expression: the query, and the lexemes a match must hold
    (equal to it when it has no phrase). None when empty or of another shape."""
    if not expr or not expr.strip():
        return None
    try:
        return _Parser(_lex(expr)).parse()
    except _Unsupported:
        return None


def like_patterns_of_fts(expr: str) -> list[str] | None:
    """The LIKE patterns (all must hold) of an identifier-index expression: `"a" AND "b"`, each a
    substring of the message's identifiers. None when it is of another shape."""
    try:
        tokens = _lex(expr)
    except _Unsupported:
        return None
    patterns: list[str] = []
    for kind, text in tokens:
        if kind == "phrase":
            escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            patterns.append(f"%{escaped}%")
        elif (kind, text) != ("op", "AND"):
            return None
    return patterns or None
