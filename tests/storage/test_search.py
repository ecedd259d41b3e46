"""Full-text search: what the sanitiser and the two indexes must find, and never break on."""

import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.db import SessionDB, new_session_id
from gateway.storage.fts import clean, ident_text, index_text, parse_query

pytestmark = pytest.mark.both_backends

CORPUS = [
    ("user", "How do I build with pyinstaller --onefile on Windows?"),
    ("assistant", "Edit /etc/nginx/nginx.conf and reload; the worker died with ERR_004211 on node-17.corp.example.net"),
    ("user", "上次部署网关超时是因为 nginx 的 proxy_read_timeout 太短"),
    ("user", "松兰 说机房今天停电"),
    ("assistant", "Mail bob.smith@example.com or open https://docs.example.com/guide/setup?x=1#top"),
    ("user", "When did Caroline go to the LGBTQ support group? She went on 7 May 2023."),
    ("tool", 'Traceback (most recent call last):\n  File "app.py", line 3\nValueError: bad thing'),
    ("user", "the cat sat (on the mat) AND OR NOT NEAR"),
]


@pytest.fixture
def corpus_db(db):
    sid = new_session_id()
    db.create_session(sid, "telegram", user_id="u1")
    ids = [db.append_message(sid, role, text) for role, text in CORPUS]
    return db, sid, ids


def found(db, query, **kw):
    return [hit["id"] for hit in db.search_messages(query, **kw)]


@pytest.mark.parametrize(
    "query, index",
    [
        ("pyinstaller", 0),
        ("--onefile", 0),
        ("onefile", 0),
        ("nginx.conf", 1),
        ("ERR_004211", 1),
        ("004211", 1),
        ("4211", 1),
        ("node-17.corp.example.net", 1),
        ("corp.example", 1),
        ("部署", 2),
        ("网关", 2),
        ("网关超时", 2),
        ("松兰", 3),
        ("松兰 机房", 3),
        ("停电", 3),
        ("bob.smith@example.com", 4),
        ("https://docs.example.com/guide/setup?x=1#top", 4),
        ("docs.example.com/guide", 4),
        ("When did Caroline go to the support group?", 5),
        ('"support group"', 5),
        ("ValueError", 6),
        ("(on the mat)", 7),
        ("AND OR NOT", 7),
        ("NEAR", 7),
        ("proxy_read_timeout", 2),
        ("timeout", 2),
        ("SUPPORT", 5),
        ("suppor*", 5),
        ("Caroline:", 5),
        ("@bob", 4),
        ("nginx 部署", 2),
    ],
)
def test_finds(corpus_db, query, index):
    db, _, ids = corpus_db
    assert ids[index] in found(db, query), query


def test_or_operator_and_and_semantics(corpus_db):
    db, _, ids = corpus_db
    hits = found(db, "pyinstaller OR ValueError")
    assert ids[0] in hits and ids[6] in hits
    strict = db.search_messages("nginx timeout")
    assert strict[0]["id"] == ids[2] and strict[0]["match"] == "all"


def test_relaxes_to_any_word_when_all_words_find_too_little(corpus_db):
    db, _, ids = corpus_db
    hits = db.search_messages("pyinstaller zebra")
    assert hits and hits[0]["id"] == ids[0] and hits[0]["match"] == "any"


def test_ranking_prefers_more_matching_words(db, make_session):
    make_session(messages=[("user", "docker compose file"), ("user", "unrelated")])
    two = make_session(messages=[("user", "docker networking bridge timeout fix")])
    hits = db.search_messages("docker bridge timeout")
    assert hits[0]["session_id"] == two


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "'",
        ":",
        "@",
        "*",
        "(",
        ")",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "NEAR(",
        "a:b",
        "-x",
        "^",
        "col:value",
        "{a b}",
        "\x00",
        "\ud800",
        "\udfff abc",
        "a" * 10_000,
        "x " * 5000,
        b"\xff\xfe bad",
        "😀",
        "   ",
        "",
        None,
        "\\",
        "%_",
        "' OR 1=1 --",
        "\u200b",
        "ＡＢＣ",
    ],
)
def test_hostile_queries_never_raise(corpus_db, query):
    db, _, _ = corpus_db
    assert isinstance(db.search_messages(query), list)


def test_undone_rows_hidden_compacted_rows_found(corpus_db):
    db, sid, ids = corpus_db
    db.rewind(sid, 1)  # hides the last user message (index 7)
    assert ids[7] not in found(db, "mat")
    db.mark_compacted(sid, up_to_id=ids[1])
    assert ids[0] in found(db, "pyinstaller")  # compacted: still searchable
    assert all(m["id"] > ids[1] for m in db.get_messages(sid))  # but not in the conversation


def test_filters(db, make_session):
    a = make_session(source="telegram", messages=[("user", "kubernetes pod crash"), ("assistant", "kubernetes fix")])
    b = make_session(source="tool", messages=[("user", "kubernetes cron job")])
    assert {h["session_id"] for h in db.search_messages("kubernetes", exclude_sources=["tool"])} == {a}
    assert {h["role"] for h in db.search_messages("kubernetes", role_filter=["assistant"])} == {"assistant"}
    page1 = found(db, "kubernetes", limit=2)
    page2 = found(db, "kubernetes", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 1 and not set(page1) & set(page2)
    assert b


def test_snippet_marks_match(corpus_db):
    db, _, _ = corpus_db
    hit = db.search_messages("proxy_read_timeout")[0]
    assert "«proxy_read_timeout»" in hit["snippet"]


def test_index_text_is_deterministic_and_spaces_cjk():
    assert index_text("部署nginx") == " 部 署 nginx"
    assert index_text("plain") == "plain"
    assert "err_004211" in ident_text("see ERR_004211.")
    assert "plain" not in ident_text("plain words only")


# --- property tests: the sanitiser never raises, and a word that occurs is found ---------------

latin_word = st.text(alphabet=string.ascii_letters + string.digits, min_size=2, max_size=12)
cjk_word = st.text(alphabet="部署网关超时机房松兰钢琴公园数据库服务器", min_size=1, max_size=2)
ident = st.builds(
    lambda a, sep, b: f"{a}{sep}{b}", latin_word, st.sampled_from(["-", ".", "_", "/", "@", ":"]), latin_word
)
noise = st.text(alphabet=string.punctuation + " \t\n", max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.one_of(latin_word, cjk_word, ident), min_size=1, max_size=8), pick=st.integers(0, 7), junk=noise
)
def test_a_word_that_occurs_is_found(tmp_path_factory, words, pick, junk):
    db = SessionDB(tmp_path_factory.mktemp("p") / "s.db")
    try:
        sid = new_session_id()
        db.create_session(sid, "local")
        text = " ".join(words)
        mid = db.append_message(sid, "user", text)
        db.append_message(sid, "user", "unrelated filler text")
        word = words[pick % len(words)]
        for query in (word, junk + word + junk, f'"{word}"', f"{word} {junk}"):
            assert mid in [h["id"] for h in db.search_messages(query)], (text, query)
    finally:
        db.close()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parse_query_never_raises(text):
    q = parse_query(text)
    for mode in ("all", "any"):
        expr = q.expression(mode)
        assert isinstance(expr, str)
    if re.search(r"[^\W_]", clean(text)):
        assert q.expression("all") and q.expression("any"), text  # words never vanish


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_arbitrary_queries_run(corpus_db, text):
    db, _, _ = corpus_db
    assert isinstance(db.search_messages(text), list)


def test_exact_strings_come_newest_first(db, make_session):
    old = make_session(messages=[("user", "see https://wiki.example.com/page and https://wiki.example.com/page again")])
    new = make_session(messages=[("user", "https://wiki.example.com/page")])
    assert [h["session_id"] for h in db.search_messages("https://wiki.example.com/page")] == [new, old]
    assert [h["session_id"] for h in db.search_messages('"wiki example"')] == [new, old]
    # free words are ranked by BM25: the message where the word weighs more wins
    a = make_session(messages=[("user", "zebra " * 5)])
    b = make_session(messages=[("user", "zebra and a lot of other words in a long sentence " * 5)])
    assert [h["session_id"] for h in db.search_messages("zebra")] == [a, b]
