"""Prefixes as the whole words they stand for, from the vocabulary of the word column.

A GIN index answers a prefix lexeme ('fix':*) by collecting every match of every word it starts
before the scan returns one row, so the window scans (search.py newest_matches), which skip from
bucket to bucket, cannot skip: recall's proximity pair 'fix':* & 'docker':* took 90-330 ms per
window at 1M messages (bench/postgres.py, EXPLAIN (ANALYZE, BUFFERS)). An OR of whole words is
read lazily and skips like any word. SQLite has the same problem and answer
(gateway/recall/query.py expand_prefixes over fts5vocab); Postgres keeps no list of the words a
GIN index holds that SQL can read, so schema v6 keeps one: `words_vocab`, written by triggers.

The vocabulary only ever grows: a word stays when the last message holding it is deleted. A
word no message holds adds a lexeme to the query that matches nothing, so the rows found are the
same; counting holders instead would make every insert update the row of each word it holds,
and "the" is in most messages, so concurrent appends (replicas, lanes) would queue on that row
until each commit. Only letter-first ASCII words are kept (the prefixes recall writes are
English stems; ids, numbers, CJK and the bucket lexemes are most of the distinct tokens and no
prefix of theirs is expanded).
"""

from __future__ import annotations

import re
import weakref

from gateway.storage.conn import Conn

MAX_PREFIX_WORDS = 24  # a prefix of more words than this stays a prefix (as recall's MAX_PREFIX_TERMS)
_ITEM = re.compile(r"'((?:[^']|'')*)'(:\*)?")  # a quoted lexeme of a tsquery literal, maybe a prefix
_EXPANDABLE = re.compile(r"[a-z][a-z0-9]*")  # what words_vocab holds (schema.py v6)

# the words of each prefix, per Connection: one wraps one read's snapshot (db.read), in which the
# vocabulary cannot change, and recall reads a unit's prefixes again for each page it reads
_known: weakref.WeakKeyDictionary[Conn, dict[str, list[str] | None]] = weakref.WeakKeyDictionary()


def prefix_words(conn: Conn, prefixes: list[str]) -> dict[str, list[str] | None]:
    """The words each prefix stands for, in one statement (None: more than MAX_PREFIX_WORDS)."""
    known = _known.setdefault(conn, {})
    missing = [p for p in dict.fromkeys(prefixes) if p not in known]
    if missing:
        # a range over the C-collated key: ends at the prefix with its last letter advanced
        uppers = [p[:-1] + chr(ord(p[-1]) + 1) for p in missing]
        rows = conn.execute(
            """SELECT p.prefix, ARRAY(SELECT v.word FROM words_vocab v WHERE v.word >= p.prefix AND v.word < p.upper
                                      ORDER BY v.word LIMIT ?)
               FROM unnest(?::text[], ?::text[]) AS p (prefix, upper)""",
            [MAX_PREFIX_WORDS + 1, missing, uppers],
        ).fetchall()
        for prefix, words in rows:
            known[prefix] = list(words) if len(words) <= MAX_PREFIX_WORDS else None
    return {p: known[p] for p in prefixes}


def expand_tsquery(conn: Conn, tsquery: str) -> str:
    """`tsquery` with each expandable prefix lexeme replaced by the OR of the words it stands for
    ('fix':* -> ('fix' | 'fixed' | 'fixes')); a prefix no word has becomes the prefix itself as a
    word, which matches nothing either. The rows it matches are the same."""
    prefixes = [m.group(1) for m in _ITEM.finditer(tsquery) if m.group(2) and _EXPANDABLE.fullmatch(m.group(1))]
    if not prefixes:
        return tsquery
    words = prefix_words(conn, prefixes)

    def replace(m: re.Match[str]) -> str:
        found = words.get(m.group(1)) if m.group(2) else None
        if found is None:
            return m.group(0)
        if len(found) <= 1:
            return f"'{found[0] if found else m.group(1)}'"
        return "(" + " | ".join(f"'{w}'" for w in found) + ")"

    return _ITEM.sub(replace, tsquery)


def expand_pair(conn: Conn, pair: tuple[str, str] | None) -> tuple[str, str] | None:
    """A (tsquery, presence) pair (tokens.tsquery_pair_of_fts) with its prefixes expanded."""
    if pair is None:
        return None
    query = expand_tsquery(conn, pair[0])
    return query, (query if pair[1] == pair[0] else expand_tsquery(conn, pair[1]))
