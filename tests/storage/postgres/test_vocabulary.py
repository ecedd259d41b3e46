"""The vocabulary of the word column (schema v6, vocabulary.py): every letter-first ASCII word of
every message is in it after each way rows arrive (an append, a many-row insert, a rewrite of the
words, the upgrade from v5), and a prefix expanded from it matches exactly the rows the prefix
matches, after deletes and undos too."""

from __future__ import annotations

import psycopg
import pytest

from gateway.recall import find_sessions
from gateway.storage.postgres.db import PostgresSessionDB
from gateway.storage.postgres.schema import SCHEMA_VERSION, migrate
from gateway.storage.postgres.tokens import words_vector
from gateway.storage.postgres.vocabulary import MAX_PREFIX_WORDS, expand_tsquery, prefix_words

TEXTS = [
    "we fixed the docker timeout by raising it",
    "fixing dockerfile layers, 部署 网关 done",
    "the fix was in nginx.conf at port 8080",
    "prefix fixture affix ERR_004211 quokka",
    "Fixes Café naïve résumé 42abc",
]


def vocabulary(db: PostgresSessionDB) -> set[str]:
    return {r[0] for r in db.read(lambda c: c.execute("SELECT word FROM words_vocab").fetchall())}


def expected_words(texts: list[str]) -> set[str]:
    """The letter-first ASCII lexemes of the texts, as words_vector writes them."""
    out = set()
    for text in texts:
        for part in (words_vector(text) or "").split(" "):
            lexeme = part.rsplit(":", 1)[0].strip("'")
            if lexeme.isascii() and lexeme.isalnum() and lexeme[0].isalpha():
                out.add(lexeme)
    return out


def same_rows(db: PostgresSessionDB, prefix_query: str) -> tuple[list[int], list[int]]:
    """(ids matching the prefix tsquery, ids matching it expanded), with the expansion asserted done."""
    sql = "SELECT id FROM messages WHERE words @@ ?::tsquery ORDER BY id"

    def both(conn):
        expanded = expand_tsquery(conn, prefix_query)
        assert ":*" not in expanded, expanded
        return [r[0] for r in conn.execute(sql, (prefix_query,))], [r[0] for r in conn.execute(sql, (expanded,))]

    return db.read(both)


@pytest.fixture
def filled(db: PostgresSessionDB) -> PostgresSessionDB:
    for n, text in enumerate(TEXTS):
        db.create_session(f"s{n}", "telegram")
        db.append_message(f"s{n}", "user", text)
        db.append_message(f"s{n}", "assistant", f"answer {n} about fixtures")
    return db


def test_appends_add_their_words_and_only_letter_first_ascii_ones(filled: PostgresSessionDB) -> None:
    words = vocabulary(filled)
    assert words == expected_words([*TEXTS, *(f"answer {n} about fixtures" for n in range(len(TEXTS)))])
    assert {"fixed", "dockerfile", "cafe", "naive", "resume", "nginx", "err"} <= words and "42abc" not in words
    assert not any(w.startswith("~") or w[0].isdigit() or not w.isascii() for w in words)


def test_a_many_row_insert_and_a_rewrite_of_the_words_add_theirs(filled: PostgresSessionDB) -> None:
    rows = [("s0", "user", "zebra zeppelin", 1.0, words_vector("zebra zeppelin"))] * 3
    rows.append(("s0", "user", "yak", 1.0, words_vector("yak")))

    def insert(conn, events):
        with (
            conn.raw.cursor() as cur,
            cur.copy("COPY messages (session_id, role, content, timestamp, words) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)

    filled.write(insert)
    assert {"zebra", "zeppelin", "yak"} <= vocabulary(filled)
    filled.write(lambda c, e: c.execute("UPDATE messages SET content = 'walrus tusks' WHERE content = 'yak'"))
    filled.rebuild_fts()
    assert {"walrus", "tusks"} <= vocabulary(filled)


@pytest.mark.parametrize("query", ["'fix':*", "'docker':* & 'fix':*", "('fix':* <2> 'docker':*)", "'caf':* | 'zz':*"])
def test_an_expanded_prefix_matches_what_the_prefix_matches(filled: PostgresSessionDB, query: str) -> None:
    prefix, expanded = same_rows(filled, query)
    assert prefix == expanded
    filled.rewind("s1")  # undo: hidden rows keep their words
    assert same_rows(filled, query)[0] == same_rows(filled, query)[1] == prefix
    filled.delete_session("s0")  # their words may stay in the vocabulary; the rows found are the same
    after = same_rows(filled, query)
    assert after[0] == after[1] and set(after[0]) <= set(prefix)


def test_deleted_words_stay_and_match_nothing(filled: PostgresSessionDB) -> None:
    filled.delete_session("s3")  # the only "affix" and "quokka"
    assert {"affix", "quokka"} <= vocabulary(filled)
    assert filled.read(lambda c: expand_tsquery(c, "'aff':* | 'quo':*")) == "'affix' | 'quokka'"
    assert same_rows(filled, "'aff':* | 'quo':*") == ([], [])
    assert filled.search_messages("affi*") == [] and filled.search_messages("quok*") == []
    assert {h["session_id"] for h in filled.search_messages("fixe*")} == {"s0", "s4"}


def test_unknown_and_too_common_prefixes(filled: PostgresSessionDB) -> None:
    assert filled.read(lambda c: expand_tsquery(c, "'xylo':* & 'fix'")) == "'xylo' & 'fix'"
    assert filled.read(lambda c: expand_tsquery(c, "'部署' & '42':*")) == "'部署' & '42':*"  # not expandable
    filled.append_message("s0", "user", " ".join(f"many{i:03d}" for i in range(MAX_PREFIX_WORDS + 1)))
    assert filled.read(lambda c: prefix_words(c, ["many", "many00"])) == {
        "many": None,
        "many00": [f"many{i:03d}" for i in range(10)],
    }
    assert filled.read(lambda c: expand_tsquery(c, "'many':*")) == "'many':*"


def test_search_and_recall_find_through_prefixes(filled: PostgresSessionDB) -> None:
    assert {h["session_id"] for h in filled.search_messages("dock*")} == {"s0", "s1"}
    found = find_sessions(filled, "how did we fix the docker timeout", see_all=True)
    assert found and found[0].session_id == "s0"


def test_the_upgrade_from_v5_fills_it_from_the_stored_words(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as raw:
        assert migrate(raw, target=5) == 0
        raw.execute("INSERT INTO sessions (id, source, started_at, last_active_at) VALUES ('old', 'cli', 1, 1)")
        for text in TEXTS:
            raw.execute(
                "INSERT INTO messages (session_id, role, content, timestamp, words) VALUES ('old', 'user', %s, 1, %s)",
                (text, words_vector(text)),
            )
        raw.commit()
    with PostgresSessionDB(pg_dsn) as db:
        assert db.read(lambda c: c.execute("SELECT version FROM schema_version").fetchone()[0]) == SCHEMA_VERSION
        assert vocabulary(db) == expected_words(TEXTS)
        assert same_rows(db, "'fix':*")[0] == same_rows(db, "'fix':*")[1] != []
        db.append_message("old", "user", "brand new wording")
        assert {"brand", "wording"} <= vocabulary(db)
