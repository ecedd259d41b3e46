"""gateway.recall.rank: sessions (lineage roots) ranked for a query, with the exclusions recall needs."""

from __future__ import annotations

import string
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gateway.recall.read as recall_read
from gateway.db import new_session_id
from gateway.recall.dates import DateSpec, dates_in
from gateway.recall.query import MAX_PREFIX_TERMS, expand_prefixes
from gateway.recall.rank import MAX_SESSIONS, cjk_pieces, find_sessions, plan_query, recent_sessions
from gateway.recall.weights import RankWeights

pytestmark = pytest.mark.both_backends


def ts(day: str) -> float:
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() + 3600


@pytest.fixture
def add(db):
    counter = {"n": 0}

    def make(messages, source="telegram", user_id="alice", started=None, **fields):
        counter["n"] += 1
        sid = fields.pop("sid", None) or f"{new_session_id()}_{counter['n']}"
        start = started or ts("2024-03-01") + counter["n"] * 60
        db.create_session(sid, source, user_id=user_id, started_at=start, **fields)
        for i, item in enumerate(messages):
            role, text = item if isinstance(item, tuple) else ("user" if i % 2 == 0 else "assistant", item)
            db.append_message(sid, role, text, timestamp=start + i, user_id=user_id if role == "user" else None)
        return sid

    return make


def ids(hits):
    return [h.session_id for h in hits]


FILLER = [
    "Can you help me plan a birthday dinner for my sister?",
    "Sure. How many guests, and any dietary needs?",
    "Six people, one vegetarian.",
    "A mezze spread works well for mixed diets.",
]


def test_session_with_several_query_words_outranks_a_stray_hit(db, add):
    stray = add(["the docker image is fine", *FILLER])
    several = add(
        [
            "docker networking broke after the upgrade",
            "check the bridge network and the docker dns",
            "networking is back after restarting dockerd",
        ]
    )
    add(FILLER)
    hits = find_sessions(db, "docker networking bridge", see_all=True)
    assert ids(hits)[:2] == [several, stray]
    assert hits[0].score > hits[1].score
    assert set(hits[0].matched) >= {"docker", "networking", "bridge"}
    assert "«" in hits[0].snippet


def test_a_word_said_often_outranks_a_single_mention(db, add):
    once = add(["we talked about kubernetes once", *FILLER])
    often = add(["kubernetes pods keep restarting", "kubernetes says OOMKilled", "raised kubernetes limits", *FILLER])
    assert ids(find_sessions(db, "kubernetes", see_all=True))[:2] == [often, once]


def test_rare_word_weighs_more_than_a_common_one(db, add):
    for _ in range(6):
        add(["the weather today is nice", *FILLER])
    common = add(["the weather was nice, nice, nice"])
    rare = add(["the zeppelin flew over the weather station"])
    hits = ids(find_sessions(db, "weather zeppelin", see_all=True))
    assert hits[0] == rare
    assert hits[1] == common  # a short session beats longer ones with the same one mention


def test_natural_language_question_finds_the_answering_session(db, add):
    answer = add(
        [
            "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful.",
            "Wow Caroline, that's great! What happened there?",
        ],
        started=ts("2023-05-08"),
    )
    add(["Caroline, how was the painting class?", "It was fun, I painted a sunrise."], started=ts("2023-05-20"))
    add(FILLER)
    hits = find_sessions(db, "When did Caroline go to the support group?", see_all=True)
    assert ids(hits)[0] == answer
    plan = plan_query("When did Caroline go to the support group?")
    assert plan.understood.split() == ["Caroline", "support", "group"]


def test_chinese_question_is_cut_into_bigrams_without_stop_material(db, add):
    assert cjk_pieces("上次部署网关超时是怎么解决的") == ["部署", "署网", "网关", "关超", "超时", "解决"]
    answer = add(["部署网关的时候一直超时", "把 proxy_read_timeout 调到 120 秒就解决了"])
    add(["今天部署了新的博客", "好的"])
    add(["网关是什么？", "网关是网络的入口。"])
    hits = find_sessions(db, "上次部署网关超时是怎么解决的？", see_all=True)
    assert ids(hits)[0] == answer
    assert len(hits) == 3  # sessions with only some of the pieces still come back, lower


def test_chinese_words_with_stop_characters_are_kept():
    assert "有趣" in cjk_pieces("这个很有趣")
    assert cjk_pieces("什么", fallback=True) == ["什么"]
    assert cjk_pieces("是什么", fallback=False) == []


def test_identifiers_urls_and_emails_are_kept_whole(db, add):
    target = add(
        [
            "the worker died with ERR_004211 on node-17.corp.example.net",
            "see https://docs.example.com/guide/setup and mail bob.smith@example.com",
        ]
    )
    add(["an error happened on a node", "the docs are on a website"])
    for query in (
        "ERR_004211",
        "004211",
        "node-17.corp.example.net",
        "corp.example",
        "https://docs.example.com/guide/setup",
        "bob.smith@example.com",
    ):
        assert ids(find_sessions(db, query, see_all=True))[:1] == [target], query


def test_stop_word_only_query_still_finds_what_occurs(db, add):
    sid = add(["what did we do there"])
    assert ids(find_sessions(db, "what did we do?", see_all=True)) == [sid]
    assert find_sessions(db, "", see_all=True) == []
    assert find_sessions(db, "   ", see_all=True) == []


def test_child_session_counts_for_its_root_and_cycles_are_safe(db, add):
    root = add(["we began the migration plan"])
    child = add(["continuing: the flyway migration failed with checksum mismatch"], parent_session_id=root)
    grandchild = add(["flyway repair fixed the checksum"], parent_session_id=child)
    hits = find_sessions(db, "flyway checksum", see_all=True)
    assert ids(hits) == [root]
    assert hits[0].message_count == 3  # the whole lineage

    a = add(["alpha cycle talk about quasar"], sid="cyc_a")
    b = add(["beta cycle talk about quasar"], sid="cyc_b", parent_session_id="cyc_a")
    db.write(lambda conn, events: conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (b, a)))
    hits = find_sessions(db, "quasar", see_all=True)
    assert ids(hits) == ["cyc_a"]  # one lineage, one canonical root, and no endless walk
    assert grandchild  # (used above)


def test_current_lineage_is_excluded(db, add):
    root = add(["redis eviction policy discussion"])
    child = add(["redis maxmemory settled at 2gb"], parent_session_id=root)
    other = add(["redis on the staging box"])
    lineage = db.get_lineage(child)
    assert ids(find_sessions(db, "redis", see_all=True, exclude_session_ids=lineage)) == [other]
    # passing only the current child is enough: its root goes too
    assert ids(find_sessions(db, "redis", see_all=True, exclude_session_ids=[child])) == [other]


def test_hidden_sources_are_left_out(db, add):
    add(["paperclip agent internal: invoice pipeline"], source="tool")
    visible = add(["the invoice pipeline is slow"], source="discord")
    assert ids(find_sessions(db, "invoice pipeline", see_all=True)) == [visible]
    assert len(find_sessions(db, "invoice pipeline", see_all=True, exclude_sources=())) == 2
    # a hidden child under a visible root does not lend its words to the root
    root = add(["weekly planning"], source="discord")
    add(["tool run: zanzibar sync"], source="tool", parent_session_id=root)
    assert find_sessions(db, "zanzibar", see_all=True) == []


def test_privacy_only_sessions_the_person_took_part_in(db, add):
    mine = add(["my salary negotiation notes"], user_id="alice")
    theirs = add(["bob's salary negotiation"], user_id="bob")
    shared = add(["group chat: salary bands"], user_id="carol")
    db.append_message(shared, "user", "alice here: salary question", user_id="alice")
    assert set(ids(find_sessions(db, "salary", person_id="alice"))) == {mine, shared}
    assert set(ids(find_sessions(db, "salary", person_id="bob"))) == {theirs}
    assert set(ids(find_sessions(db, "salary", person_id="alice", see_all=True))) == {mine, theirs, shared}
    assert find_sessions(db, "salary", person_id="mallory") == []


def test_at_most_five_sessions(db, add):
    for i in range(9):
        add([f"terraform plan number {i}"])
    assert len(find_sessions(db, "terraform", see_all=True, limit=50)) == MAX_SESSIONS
    assert len(find_sessions(db, "terraform", see_all=True)) == MAX_SESSIONS
    assert len(find_sessions(db, "terraform", see_all=True, limit=2)) == 2


def test_role_filter(db, add):
    said_by_user = add([("user", "grafana dashboard please"), ("assistant", "ok")])
    said_by_bot = add([("user", "show me metrics"), ("assistant", "open grafana")])
    assert ids(find_sessions(db, "grafana", see_all=True, role_filter=["assistant"])) == [said_by_bot]
    assert ids(find_sessions(db, "grafana", see_all=True, role_filter="user")) == [said_by_user]


def test_candidate_cap_keeps_ranking_sensible(db, add):
    for i in range(30):
        add([f"backup job {i} ran"])
    target = add(["the backup job failed with rsync error 23"])
    hits = find_sessions(db, "backup rsync", see_all=True, cap=5)
    assert ids(hits)[0] == target


def test_hit_budget_goes_to_the_informative_unit(db, add, monkeypatch):
    # "backup" is everywhere and newer than the answer; "rsync" is rare: with a tiny budget the
    # common word is read only in part, the rare one in full, and the old answer still wins
    target = add(["the backup job failed with rsync error 23", "retry it with --partial"])
    for i in range(40):
        add([f"backup job {i} ran", "backup verified", "backup rotated"])
    read: dict[str, int] = {}
    real = recall_read.read_units

    def spy(conn, units, *args):
        readers = real(conn, units, *args)
        for u, sources in zip(units, readers):
            read[u.label] = sum(len(s.rows) for s in sources if not s.beside_anchor)
            read[u.label + " beside"] = sum(len(s.rows) for s in sources if s.beside_anchor)
        return readers

    monkeypatch.setattr(recall_read, "read_units", spy)
    hits = find_sessions(db, "backup rsync", see_all=True, weights=RankWeights(probe=5, hit_budget=10))
    assert ids(hits)[0] == target
    assert read["rsync"] == 1 and read["backup"] <= 5 + 10
    # the newest matches of "backup" never reach the answer; reading it beside "rsync" does
    assert read["backup beside"] == 1 and set(hits[0].matched) == {"backup", "rsync"}


def test_a_query_with_many_units_reads_a_bounded_number_of_matches(db, add, monkeypatch):
    # twelve common words, each in every message: every unit (and every pair) could read them all;
    # the probes share PROBE_BUDGET and the rest HIT_BUDGET, so the rows read stay bounded
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    answer = add([" ".join(words) + " zulu"])
    for i in range(20):
        add([" ".join(words) + f" round {i}", " ".join(reversed(words))])
    read: dict[str, int] = {}
    real = recall_read.read_units

    def spy(conn, units, *args):
        readers = real(conn, units, *args)
        read["units"] = len(units)
        read["joined"] = sum(len(s.rows) for sources in readers for s in sources if not s.beside_anchor)
        return readers

    monkeypatch.setattr(recall_read, "read_units", spy)
    budgets = RankWeights(probe_budget=60, min_probe=2, hit_budget=30)
    hits = find_sessions(db, " ".join(words) + " zulu", see_all=True, weights=budgets)
    assert read["units"] > 12  # the words and their pairs
    assert read["joined"] <= 60 + 30 + read["units"]  # the budgets, give or take a row per unit's share
    assert ids(hits)[0] == answer  # the rare word still finds it, and its common words beside it count
    assert set(hits[0].matched) >= {"zulu", "alpha", "lima"}


def test_common_words_of_an_old_answer_count_beside_its_rare_word(db, add):
    answer = add(["the nginx proxy timeout on gw7 was fixed by raising proxy_read_timeout"])
    other = add(["gw7 was rebooted"])
    for i in range(15):  # the common words: in half the sessions, many times each, all newer
        add([f"nginx proxy timeout again {i}", "nginx proxy timeout retry", "nginx proxy timeout", "nginx up"])
        add(FILLER)
    hits = find_sessions(db, "nginx proxy timeout gw7", see_all=True, weights=RankWeights(probe=3, hit_budget=6))
    assert ids(hits)[0] == answer and other in ids(hits)
    assert set(hits[0].matched) >= {"nginx", "proxy", "timeout", "gw7"}


def test_share_splits_by_weight_and_passes_on_what_a_unit_does_not_need():
    assert recall_read.share(100, [(1000, 1.0), (1000, 3.0)]) == [25, 75]
    assert recall_read.share(100, [(10, 1.0), (1000, 1.0)]) == [10, 90]
    assert recall_read.share(100, [(1000, 0.0), (1000, 0.0)]) == [50, 50]
    assert recall_read.share(100, []) == []


def test_prefixes_become_the_index_terms_they_match():
    terms = {"dock": ["dock", "docker", "dockerfile"], "net": ["net", "network"], "zz": []}.get
    assert expand_prefixes('"docking" OR "dock"*', terms) == '"docking" OR "dock" OR "docker" OR "dockerfile"'
    assert expand_prefixes('NEAR("dock"* "net"*, 4)', terms) == " OR ".join(
        f'NEAR("{a}" "{b}", 4)' for a in ("dock", "docker", "dockerfile") for b in ("net", "network")
    )
    assert expand_prefixes('NEAR("zz"* "net"*, 4)', terms) == '"zz"*'  # matches nothing, cheaply
    for unchanged in ('"a b"*', '"x" AND "y"*', '"部 署"', '"unknown"*', '"café"*'):
        assert expand_prefixes(unchanged, terms) == unchanged


@pytest.mark.sqlite_only("asks SQLite's PRAGMA query_only (Postgres: test_postgres_db.py)")
def test_prefix_search_finds_every_form_and_keeps_the_connection_read_only(db, add):
    forms = add(["she was painting", "two paintings", "he paints", "painted it"])
    many = add([" ".join(f"paint{chr(97 + i)}{chr(97 + j)}" for i in range(6) for j in range(6))])
    add(FILLER)
    assert MAX_PREFIX_TERMS < 36  # the second session holds more forms than are expanded: FTS5 prefix
    hits = ids(find_sessions(db, "painted", see_all=True))
    assert hits[:1] == [forms] and many in hits
    assert db.read(lambda conn: conn.execute("PRAGMA query_only").fetchone()[0]) == 1
    with pytest.raises(Exception):
        db.read(lambda conn: conn.execute("CREATE TEMP TABLE t (x)"))


def test_dates_in_the_query_are_evidence(db, add):
    may2 = add(["we went over the museum exhibits"], started=ts("2023-05-02"))
    may9 = add(["we went over the museum exhibits"], started=ts("2023-05-09"))
    assert ids(find_sessions(db, "museum on 2 May 2023", see_all=True))[0] == may2
    assert ids(find_sessions(db, "5月9日 museum", see_all=True))[0] == may9
    assert ids(find_sessions(db, "museum May 9, 2023", see_all=True))[0] == may9
    assert dates_in("you may go") == []
    assert dates_in("in June 2022 and 2023-05-02") == [DateSpec(2023, 5, 2), DateSpec(2022, 6, None)]


def test_a_named_day_outweighs_the_words_of_the_question(db, add):
    # the words of "what did we talk about" are everywhere; the day the person names is the signal
    that_day = add(["morning! shall we plan the garden today?", "yes: tomatoes and basil"], started=ts("2023-04-27"))
    chatty = add(
        ["we talked about so many topics", "we always talk about topics", "so many topics to talk about"],
        started=ts("2023-04-30"),
    )
    for question in ("4月27号我们聊了什么话题？", "What topics did we talk about on 27 April 2023?"):
        assert ids(find_sessions(db, question, embedder=None))[:2] == [that_day, chatty]
    # a month names when the event was as often as when we spoke: it stays one unit among the words
    assert ids(find_sessions(db, "What topics did we talk about in April 2023?", embedder=None))[0] == chatty
    day_as_a_unit = RankWeights(day_over_words=0.0)  # the day as one more unit: the words win
    question = "What topics did we talk about on 27 April 2023?"
    assert ids(find_sessions(db, question, embedder=None, weights=day_as_a_unit))[0] == chatty


def test_a_named_day_lifts_a_months_long_session_only_by_its_share_of_that_day(db, add):
    that_day = add(["shall we plan the garden today?", "yes: tomatoes and basil"], started=ts("2023-04-27"))
    # one conversation kept going for two months: active on 27 April too, but mostly not
    months = add(["so many topics to talk about", "we talk about topics"], started=ts("2023-03-01"))
    db.append_message(months, "user", "still more topics", timestamp=ts("2023-05-01"))
    assert ids(find_sessions(db, "What topics did we talk about on 27 April 2023?", embedder=None))[:2] == [
        that_day,
        months,
    ]


def test_the_first_or_last_conversation_is_found_by_its_place_in_time(db, add):
    bob_first = add(["hi, we talked about topics", "so many topics"], user_id="bob", started=ts("2023-01-02"))
    first = add(["hello! badminton with colleagues tonight"], started=ts("2023-03-01"))
    middle = add(["we talked about topics and more topics", "topics galore"], started=ts("2023-03-05"))
    latest = add(["my sister visits on Friday"], started=ts("2023-03-09"))
    current = add(["what did we talk about?"], started=ts("2023-03-10"))
    for see_all in (False, True):  # scoped, or pooled as an admin: the asker's own first one
        for question in ("What did we talk about the first time we talked?", "我们第一次聊天的时候聊了什么话题？"):
            hits = find_sessions(db, question, person_id="alice", see_all=see_all, embedder=None)
            assert ids(hits)[0] == first, question
    for question in ("What topics came up the last time we talked?", "上次我们聊了什么？"):
        hits = find_sessions(db, question, person_id="alice", exclude_session_ids=[current], embedder=None)
        assert ids(hits)[0] == latest, question  # not the conversation being had
    assert bob_first not in ids(find_sessions(db, "the first time we talked", person_id="alice", embedder=None))
    words_only = find_sessions(db, "What topics did we talk about?", person_id="alice", exclude_session_ids=[current])
    assert ids(words_only)[0] == middle  # without naming the conversation, the words decide


def test_a_date_inside_a_long_session_counts(db, add):
    spanning = add(["we kept tuning the kafka consumer"], started=ts("2023-04-28"))
    db.append_message(spanning, "user", "still tuning the kafka consumer", timestamp=ts("2023-05-06"))
    add(["we kept tuning the kafka consumer"], started=ts("2023-06-20"))
    assert ids(find_sessions(db, "kafka consumer on 2 May 2023", see_all=True))[0] == spanning
    assert ids(find_sessions(db, "kafka consumer in June 2023", see_all=True))[0] != spanning


def test_recent_sessions_folds_children_and_applies_exclusions(db, add):
    old = add(["old chat"], started=ts("2024-01-01"))
    root = add(["root chat"], started=ts("2024-01-02"))
    child = add(["child chat"], started=ts("2024-01-03"), parent_session_id=root)
    add(["internal"], source="tool", started=ts("2024-01-04"))
    bobs = add(["bob chat"], user_id="bob", started=ts("2024-01-05"))
    current = add(["current chat"], started=ts("2024-01-06"))
    rows = recent_sessions(db, see_all=True, exclude_session_ids=[current])
    assert [r["session_id"] for r in rows] == [bobs, root, old]
    assert rows[1]["preview"] == "root chat"
    rows = recent_sessions(db, person_id="alice", exclude_session_ids=[current])
    assert [r["session_id"] for r in rows] == [root, old]
    assert child not in [r["session_id"] for r in rows]


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '"""',
        "(",
        ")",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "NEAR(",
        "*",
        "-",
        ":",
        "@",
        "a:b",
        "col:value",
        "foo* bar*",
        '"unterminated',
        "NEAR(a b, 3)",
        "x" * 10_000,
        "\x00\x01",
        "🙂",
        "\ud800abc",
        b"\xff\xfe invalid utf8 \xc3",
        "AND OR NOT",
        "'; DROP TABLE messages; --",
        "^foo",
        "{a b}",
    ],
)
def test_hostile_queries_never_raise(db, add, query):
    add(["plain text about nothing special"])
    hits = find_sessions(db, query, see_all=True)
    assert len(hits) <= MAX_SESSIONS


WORDS = ["ansible", "borgbackup", "cuda", "dnsmasq", "envoy", "fail2ban", "gunicorn", "haproxy"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    word=st.sampled_from(WORDS),
    noise=st.text(alphabet=string.printable + "中文“”（）「」", max_size=60),
    where=st.sampled_from(["before", "after", "quoted", "punct"]),
)
def test_a_word_that_occurs_is_always_found(db, add, word, noise, where):
    if not getattr(db, "_seeded", False):
        db._seeded = {w: add([f"we configured {w} yesterday"]) for w in WORDS}
    query = {
        "before": f"{word} {noise}",
        "after": f"{noise} {word}",
        "quoted": f'{noise} "{word}"',
        "punct": f"({word}) {noise}?",
    }[where]
    hits = ids(find_sessions(db, query, see_all=True))
    assert db._seeded[word] in hits


def test_a_whole_question_in_quotes_still_finds_its_words(db, add):
    """A quoted sentence is rarely said verbatim: its words count too, or the answer is empty."""
    food = add(["I love Sichuan cuisine, the spicier the better", "Noted: spicy Sichuan dishes."])
    add(FILLER)
    hits = find_sessions(db, '"What kind of cuisine do I like?"')
    assert ids(hits)[:1] == [food]


def test_a_when_question_prefers_the_passage_that_tells_the_time(db, add):
    # both sessions say the question's words; the older one tells when it happened
    told = add(["Last Friday the kids were at a pottery workshop.", "That sounds fun!", *FILLER])
    retold = add(["The kids still talk of the pottery workshop.", "They loved it.", *FILLER])
    when = "When was the kids' pottery workshop?"
    assert ids(find_sessions(db, when, embedder=None))[0] == told
    # a question that asks for no time keeps the order the words give (the later session first)
    assert ids(find_sessions(db, "Was the kids' pottery workshop any good?", embedder=None))[0] == retold
    no_gain = RankWeights(gain=0.0)  # without the answer type the two tie on words
    assert ids(find_sessions(db, when, embedder=None, weights=no_gain))[0] == retold


def test_a_derived_noun_finds_its_root_word(db, add):
    mentored = add(["I got mentored by a business owner yesterday", *FILLER])
    add(["the deadline moved again", *FILLER])
    assert ids(find_sessions(db, "Who gave Jon mentorship?", embedder=None))[0] == mentored
    assert ids(find_sessions(db, "their friendship", embedder=None)) == []  # "friend" occurs nowhere


def test_the_time_told_just_before_the_words_counts_for_a_when_question(db, add):
    # an exchange tells the time first and the event after it: "Guess what happened last Saturday!"
    told = add(
        ["Guess what happened last Saturday!", "The kids played their piano recital at the old school hall.", "Wow!"]
        + FILLER
    )
    retold = add(["The kids still hum the piano recital tunes.", "They loved it.", "Nice."] + FILLER)
    when = "When was the kids' piano recital?"
    assert ids(find_sessions(db, when, embedder=None))[0] == told
    passage_alone = RankWeights(before=0)  # the passage alone: the shorter, later mention leads
    assert ids(find_sessions(db, when, embedder=None, weights=passage_alone))[0] == retold


def test_a_time_in_the_message_with_the_words_counts_more_than_one_in_the_reply(db, add):
    # both passages tell a time; in one the words' own message tells it, in the other only the reply
    same = add(["We took the kids to the pottery workshop in town last Friday.", "Fun!"] + FILLER)
    reply = add(["The kids and the pottery workshop!", "That was last Friday, right?"] + FILLER)
    when = "When was the kids' pottery workshop?"
    assert ids(find_sessions(db, when, embedder=None))[0] == same
    no_gain = RankWeights(gain=0.0)  # on words alone the shorter message leads
    assert ids(find_sessions(db, when, embedder=None, weights=no_gain))[0] == reply
