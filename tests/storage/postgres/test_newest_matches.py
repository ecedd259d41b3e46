"""The newest matches of a word, read over the id buckets (search.newest_matches), are exactly what
"WHERE words @@ q ORDER BY id DESC LIMIT n" returns: with matches spread over many buckets, dense
and sparse ones, at every limit and below every id; every message's words carry its bucket."""

from __future__ import annotations

import pytest

from gateway.storage.postgres.db import PostgresSessionDB
from gateway.storage.postgres.schema import BUCKET_IDS
from gateway.storage.postgres.search import HEAD_IDS, HEAD_LIMIT, id_windows, matches_among, newest_matches, windows
from gateway.storage.postgres.tokens import tsquery_pair_of_fts


@pytest.fixture
def spread(db: PostgresSessionDB) -> PostgresSessionDB:
    """Messages in buckets 0-6, 12, 30 and 31: 'dense' in most of them, 'sparse' in a few,
    'pair words' as a phrase now and then."""
    db.create_session("s1", "telegram")
    for bucket, count in ((0, 30), (1, 5), (2, 8), (3, 12), (4, 2), (5, 40), (6, 3), (12, 9), (30, 25), (31, 50)):
        db.write(
            lambda conn, events, b=bucket: conn.execute(
                f"ALTER TABLE messages ALTER COLUMN id RESTART WITH {b * BUCKET_IDS + 7}"
            )
        )
        for i in range(count):
            words = ["dense"] + (["sparse"] if (bucket * 7 + i) % 11 == 0 else []) + (["pair words"] if i % 4 else [])
            db.append_message("s1", "user", " ".join(words) + f" filler {i}")
    return db


def plain(db: PostgresSessionDB, tsquery: str, limit: int, before: int | None) -> list[int]:
    sql = "SELECT id FROM messages WHERE words @@ ?::tsquery AND id < ? ORDER BY id DESC LIMIT ?"
    return [r[0] for r in db.read(lambda c: c.execute(sql, (tsquery, before or 2**62, limit)).fetchall())]


@pytest.mark.parametrize(
    "expr", ['"dense"', '"sparse"', '"pair words"', '"dense" AND "sparse"', '"absent"', 'NEAR("dense" "words", 2)']
)
def test_the_same_rows_as_the_plain_query(spread: PostgresSessionDB, expr: str) -> None:
    query = tsquery_pair_of_fts(expr)
    assert query
    all_ids = [r[0] for r in spread.read(lambda c: c.execute("SELECT id FROM messages ORDER BY id").fetchall())]
    befores = [None, all_ids[-1], all_ids[-30], 6 * BUCKET_IDS + 8, 2 * BUCKET_IDS, all_ids[3]]
    for limit in (1, 3, 10, 40, HEAD_LIMIT, HEAD_LIMIT + 1, 500):  # with and without the head window
        for before in befores:
            got = spread.read(lambda c: [r[0] for r in newest_matches(c, query, limit, before)])
            assert got == plain(spread, query[0], limit, before), (limit, before)


def test_every_message_carries_its_bucket(spread: PostgresSessionDB) -> None:
    rows = spread.read(lambda c: c.execute("SELECT id, words::text FROM messages").fetchall())
    assert rows and all(f"'~{mid // BUCKET_IDS}'" in words for mid, words in rows)
    # rewritten words (rebuild_fts) get it again
    spread.rebuild_fts()
    rows = spread.read(lambda c: c.execute("SELECT id, words::text FROM messages").fetchall())
    assert all(f"'~{mid // BUCKET_IDS}'" in words for mid, words in rows)
    assert spread.search_messages("sparse")  # and search still finds the words


def test_the_presence_form_is_what_the_index_can_answer() -> None:
    assert tsquery_pair_of_fts('"feature flag"') == ("('feature' <1> 'flag')", "('feature' & 'flag')")
    near, presence = tsquery_pair_of_fts('NEAR("fix"* "docker"*, 10)') or ("", "")
    assert near.count("|") == 21 and presence == "('fix':* & 'docker':*)"
    assert tsquery_pair_of_fts('"a" AND ("b c" OR "d")') == (
        "('a' & (('b' <1> 'c') | 'd'))",
        "('a' & (('b' & 'c') | 'd'))",
    )
    assert tsquery_pair_of_fts('"port" OR "port"') == ("('port' | 'port')", "'port'")  # one form of a repeat
    assert tsquery_pair_of_fts("it's") is None


@pytest.mark.parametrize("top", [1, BUCKET_IDS - 1, BUCKET_IDS, 3 * BUCKET_IDS + 5, 122 * BUCKET_IDS + 576])
def test_the_windows_cover_every_bucket_once_newest_first_doubling(top: int) -> None:
    spans = windows(top)
    buckets = [b for newest, oldest in spans for b in range(newest, oldest - 1, -1)]
    assert buckets == list(range(top // BUCKET_IDS, -1, -1))
    widths = [newest - oldest + 1 for newest, oldest in spans]
    assert all(w <= sum(widths[:i]) for i, w in enumerate(widths) if i)  # each at most all before it


@pytest.mark.parametrize("top", [1, HEAD_IDS, BUCKET_IDS + 5, 3 * BUCKET_IDS + 5, 122 * BUCKET_IDS + 576])
def test_the_id_windows_are_the_windows_with_a_head_for_small_reads(top: int) -> None:
    """Contiguous id ranges from the newest id down to 0; a read of at most HEAD_LIMIT rows starts
    with the newest HEAD_IDS ids when the first window is wider than that."""
    big = id_windows(top, HEAD_LIMIT + 1)
    assert big == [
        (b, o * BUCKET_IDS)
        for b, o in zip([top + 1, *(o * BUCKET_IDS for _, o in windows(top))], [o for _, o in windows(top)])
    ]
    for spans in (big, id_windows(top, HEAD_LIMIT)):
        assert spans[0][0] == top + 1 and spans[-1][1] == 0
        assert all(a[1] == b[0] and a[0] > a[1] for a, b in zip(spans, spans[1:]))
    small = id_windows(top, HEAD_LIMIT)
    assert small[0] == ((top + 1, top + 1 - HEAD_IDS) if big[0][1] < top + 1 - HEAD_IDS else big[0])


def test_ranked_reads_stop_at_enough_within_reach(spread: PostgresSessionDB) -> None:
    """Ranked search's read: the matches of the windows reaching `ids` back when they hold `rows`,
    else the newest `rows` however far back."""
    query = tsquery_pair_of_fts('"sparse"')
    assert query
    newest = plain(spread, query[0], 1000, None)
    top = spread.read(lambda c: c.execute("SELECT max(id) FROM messages").fetchone()[0])
    got = spread.read(lambda c: [r[0] for r in newest_matches(c, query, 1000, enough=(3, 2 * BUCKET_IDS))])
    reach = [mid for mid in newest if mid >= (top // BUCKET_IDS - 1) * BUCKET_IDS]
    assert len(reach) >= 3 and got == reach
    got = spread.read(lambda c: [r[0] for r in newest_matches(c, query, 1000, enough=(len(newest) - 1, BUCKET_IDS))])
    assert got == newest[: len(newest) - 1]


@pytest.mark.parametrize("limit", [1, 5, 1000])
def test_matches_among_the_anchors_rows_are_the_whole_expressions(spread: PostgresSessionDB, limit: int) -> None:
    """Recall's read beside its anchor (read in full): the anchor's rows that match "anchor AND
    unit" are exactly the matches of that expression."""
    anchor_ids = plain(spread, "'sparse'", 10_000, None)
    expr = '("sparse") AND (NEAR("pair" "filler", 3))'
    query = tsquery_pair_of_fts(expr)
    assert query
    got = spread.read(lambda c: [r[0] for r in matches_among(c, expr, anchor_ids, limit)])
    assert got == plain(spread, query[0], limit, None) and got
