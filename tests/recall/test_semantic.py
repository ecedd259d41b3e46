"""The embedding seam and recall's semantic stage: the real `openai` client against the fake
/embeddings server on 127.0.0.1 (tests/fakes/openai_server.py), real SQLite."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gateway.embeddings import EmbeddingSettings, EndpointEmbedder, make_embedder
from gateway.recall import semantic
from gateway.recall.index import BackgroundIndexer, backfill, index_step, stats
from gateway.recall.rank import find_sessions
from gateway.recall.weights import DEFAULT_WEIGHTS, RankWeights
from gateway.storage import vectors
from tests.fakes.loopback import wait_until_blocking
from tests.fakes.openai_server import FakeOpenAI, hashed_embedding

pytestmark = pytest.mark.both_backends

# a tiny "model" that knows a few synonyms: each concept is one dimension
CONCEPTS = {
    "meet": 0, "met": 0, "meeting": 0,
    "wife": 1, "woman": 1, "spouse": 1,
    "car": 2, "prius": 2,
    "cafe": 3, "coffee": 3,
    "tom": 4,
}  # fmt: skip


def concept_embedding(text: str) -> list[float]:
    vector = [0.0] * 8
    for word in text.lower().replace(":", " ").replace(",", " ").replace("?", " ").split():
        if word in CONCEPTS:
            vector[CONCEPTS[word]] += 1.0
    vector[7] = 0.1  # never a zero vector
    return vector


class Endpoint:
    """FakeOpenAI on its own event loop thread: recall and the indexer call it synchronously."""

    def __init__(self) -> None:
        self.fake = FakeOpenAI()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.__aenter__(), self.loop).result()

    def embedder(self, model: str = "concepts") -> EndpointEmbedder:
        settings = EmbeddingSettings(base_url=self.fake.base_url, api_key="k", model=model, timeout=5)
        embedder = make_embedder(settings)
        assert isinstance(embedder, EndpointEmbedder)
        return embedder

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.__aexit__(None, None, None), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def endpoint():
    served = Endpoint()
    served.fake.embed = lambda texts, model: [concept_embedding(t) for t in texts]
    yield served
    served.close()


def add(db, sid, messages, started=1.7e9, user_id="tom"):
    db.create_session(sid, "telegram", user_id=user_id, started_at=started)
    ids = []
    for i, text in enumerate(messages):
        ids.append(db.append_message(sid, "user" if i % 2 == 0 else "assistant", text, timestamp=started + i))
    return ids


def windows(db, model):
    return db.read(
        lambda conn: conn.execute(
            "SELECT session_id, first_id, last_id, model FROM message_vectors WHERE model = ? ORDER BY first_id",
            (model,),
        ).fetchall()
    )


# --- settings --------------------------------------------------------------------------------


def test_embeddings_are_off_by_default_and_fall_back_to_the_model_endpoint():
    assert EmbeddingSettings().kind == "off"
    assert make_embedder(EmbeddingSettings.from_config({})) is None
    assert EmbeddingSettings.from_config({"model": {"base_url": "http://127.0.0.1:9/v1"}}).kind == "off"
    settings = EmbeddingSettings.from_config(
        {"model": {"base_url": "http://127.0.0.1:9/v1", "api_key": "m"}, "embeddings": {"model": "e5"}}
    )
    assert (settings.kind, settings.base_url, settings.api_key) == ("endpoint", "http://127.0.0.1:9/v1", "m")
    own = EmbeddingSettings.from_config(
        {"model": {"base_url": "http://a/v1"}, "embeddings": {"model": "e5", "base_url": "http://b/v1"}}
    )
    assert own.base_url == "http://b/v1"
    assert EmbeddingSettings.from_config({"embeddings": {"model": "e5", "provider": "off"}}).kind == "off"


def test_the_endpoint_embedder_speaks_the_openai_embeddings_api(endpoint):
    endpoint.fake.embed = lambda texts, model: [hashed_embedding(t) for t in texts]
    embedder = endpoint.embedder("e5-small")
    texts = [f"text number {i}" for i in range(40)]  # more than one request's batch
    out = embedder.embed(texts, "passage")
    assert out == [pytest.approx(hashed_embedding(t)) for t in texts]
    assert [len(r["input"]) for r in endpoint.fake.embedding_requests] == [32, 8]
    assert {r["model"] for r in endpoint.fake.embedding_requests} == {"e5-small"}
    assert embedder.model == "endpoint:e5-small"


def test_int8_vectors_keep_the_direction():
    vector = [0.3, -0.2, 0.05, 0.9, -0.7]
    packed = vectors.quantise(vector)
    assert len(packed) == len(vector)
    values = list(vectors.unpack(packed))
    assert max(abs(v) for v in values) == 127
    query = semantic.QueryVector("m", tuple(x / sum(y * y for y in vector) ** 0.5 for x in vector))
    assert semantic.best_similarity(query, [packed]) == pytest.approx(1.0, abs=0.01)


# --- indexing ----------------------------------------------------------------------------------


def test_backfill_empties_the_backlog_in_windows_of_a_few_messages(db, endpoint):
    add(db, "a", [f"message {i} about the car" for i in range(10)])
    add(db, "b", ["hello", "hi there", "bye"])
    embedder = endpoint.embedder()
    assert stats(db, embedder.model)["backlog"] == 13
    seen = []
    assert backfill(db, embedder, progress=lambda done, total: seen.append((done, total))) == 13
    info = stats(db, embedder.model)
    assert info["backlog"] == 0
    assert seen[-1] == (13, 13)
    assert [(w[0], w[2] - w[1] + 1) for w in windows(db, embedder.model)] == [("a", 4), ("a", 4), ("a", 2), ("b", 3)]
    assert info["vector_bytes"] / 13 <= 256


def test_an_open_window_is_embedded_again_when_the_session_grows(db, endpoint):
    first = add(db, "a", ["one", "two"])
    embedder = endpoint.embedder()
    backfill(db, embedder)
    assert [(w[1], w[2]) for w in windows(db, embedder.model)] == [(first[0], first[1])]
    more = [db.append_message("a", "user", "three"), db.append_message("a", "assistant", "four")]
    more.append(db.append_message("a", "user", "five"))
    backfill(db, embedder)
    assert [(w[1], w[2]) for w in windows(db, embedder.model)] == [(first[0], more[1]), (more[2], more[2])]


def test_undo_and_delete_drop_the_vectors_and_what_is_left_is_embedded_again(db, endpoint):
    ids = add(db, "a", ["car one", "car two", "car three", "car four", "car five", "car six"])
    add(db, "b", ["coffee", "cafe"])
    embedder = endpoint.embedder()
    backfill(db, embedder)
    assert len(windows(db, embedder.model)) == 3
    assert db.rewind("a", 1) > 0  # the last exchange (ids[4], ids[5]) taken back
    rows = windows(db, embedder.model)
    assert all(not (w[1] <= ids[5] and w[2] >= ids[4]) for w in rows if w[0] == "a")
    assert stats(db, embedder.model)["backlog"] > 0
    backfill(db, embedder)
    assert [(w[1], w[2]) for w in windows(db, embedder.model) if w[0] == "a"] == [(ids[0], ids[3])]
    db.delete_session("b")
    assert [w for w in windows(db, embedder.model) if w[0] == "b"] == []


def test_a_model_change_embeds_everything_again(db, endpoint):
    add(db, "a", ["car one", "car two", "car three"])
    old, new = endpoint.embedder("old-model"), endpoint.embedder("new-model")
    backfill(db, old)
    assert stats(db, new.model)["backlog"] == 3
    backfill(db, new)
    assert windows(db, old.model) == []
    assert len(windows(db, new.model)) == 1
    assert stats(db, new.model)["backlog"] == 0


def test_a_failing_endpoint_stores_nothing_and_keeps_the_backlog(db, endpoint):
    add(db, "a", ["car one", "car two"])
    embedder = endpoint.embedder()
    endpoint.fake.embedding_status = 500
    with pytest.raises(Exception):
        index_step(db, embedder)
    assert stats(db, embedder.model) == {"backlog": 2, "windows": 0, "vector_bytes": 0}


def test_the_background_indexer_embeds_what_is_committed(db, endpoint):
    embedder = endpoint.embedder()
    indexer = BackgroundIndexer(db, embedder)
    indexer.start()
    try:
        add(db, "a", ["car one", "car two", "car three"])
        wait_until_blocking(lambda: stats(db, embedder.model)["backlog"] == 0, 20)
        assert len(windows(db, embedder.model)) == 1
    finally:
        indexer.stop()


def embedded_messages(endpoint) -> list[int]:
    """Messages in each text the endpoint was asked to embed (a window's text is a line a message)."""
    return [len(text.split("\n")) for r in endpoint.fake.embedding_requests for text in r["input"]]


def test_a_steady_stream_embeds_each_window_once(db, endpoint):
    # three sessions talking at once, a message a second, the indexer keeping up after each one
    embedder = endpoint.embedder()
    start = 1.7e9
    for sid in "abc":
        db.create_session(sid, "telegram", user_id="tom", started_at=start)
    for i in range(24):
        now = start + i
        db.append_message("abc"[i % 3], "user" if i // 3 % 2 == 0 else "assistant", f"car talk {i}", timestamp=now)
        while index_step(db, embedder, quiet_seconds=120.0, now=now).advanced:
            pass
    assert embedded_messages(endpoint) == [4] * 6  # re-embedding each open window: 1 + 2 + 3 + 4 a window
    assert [w[2] - w[1] for w in windows(db, embedder.model)] == [9] * 6  # 4 messages, 3 apart in id
    assert stats(db, embedder.model)["backlog"] == 0


def test_a_quiet_open_window_gets_its_vector_after_the_debounce_and_is_found_by_words_meanwhile(db, endpoint):
    embedder = endpoint.embedder()
    add(db, "old", ["my wife needs the car", "take the bus"], started=1.6e9)
    start = 1.7e9
    ids = add(db, "new", ["the prius broke down", "sorry to hear"], started=start)  # timestamps start, start + 1
    step = index_step(db, embedder, quiet_seconds=120.0, now=start + 60)
    assert step.advanced and step.due == start + 1 + 120  # the quiet window of "old" only
    assert [w[0] for w in windows(db, embedder.model)] == ["old"]
    assert stats(db, embedder.model)["backlog"] == 2
    assert not index_step(db, embedder, quiet_seconds=120.0, now=start + 120).advanced
    hits = find_sessions(db, "what broke down, the prius?", embedder=embedder, see_all=True)
    assert [h.session_id for h in hits][:1] == ["new"]  # no vector yet: the words find it
    assert index_step(db, embedder, quiet_seconds=120.0, now=start + 121).advanced
    assert [(w[0], w[1], w[2]) for w in windows(db, embedder.model)][1:] == [("new", ids[0], ids[1])]
    assert stats(db, embedder.model)["backlog"] == 0


def test_a_batch_of_nothing_but_talking_sessions_is_embedded_rather_than_read_again(db, endpoint):
    embedder = endpoint.embedder()
    for sid in "abcd":
        add(db, sid, [f"car {sid}"])
    assert index_step(db, embedder, batch=4, quiet_seconds=120.0, now=1.7e9).advanced
    assert len(windows(db, embedder.model)) == 4


def test_the_background_indexer_embeds_a_quiet_open_window_with_no_commit_to_wake_it(db, endpoint):
    embedder = endpoint.embedder()
    indexer = BackgroundIndexer(db, embedder, quiet_seconds=0.3)
    indexer.start()
    try:
        db.create_session("a", "telegram", user_id="tom")
        db.append_message("a", "user", "car one", timestamp=time.time())
        wait_until_blocking(lambda: stats(db, embedder.model)["backlog"] == 0, 20)
        assert len(windows(db, embedder.model)) == 1
    finally:
        indexer.stop()


# --- ranking -----------------------------------------------------------------------------------


def test_the_semantic_stage_lifts_the_session_that_means_the_question(db, endpoint):
    met = "s_met"
    add(db, met, ["Tom: I met a wonderful woman at the cafe today", "That is lovely news, Tom!"])
    add(db, "s_car", ["Tom: my wife needs the car for work", "Then take the bus, Tom."], started=1.7e9 + 100)
    question = "How did Tom meet his future wife?"
    assert [h.session_id for h in find_sessions(db, question, embedder=None)][0] == "s_car"
    embedder = endpoint.embedder()
    backfill(db, embedder)
    weights = RankWeights(semantic_weight=1.0)
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder, weights=weights)][0] == met


def test_vectors_alone_answer_when_no_word_of_the_query_occurs(db, endpoint):
    add(db, "s_met", ["I met a wonderful woman at the cafe", "lovely"])
    add(db, "s_car", ["the prius broke down", "call a garage"])
    add(db, "s_hidden", ["spouse spouse"], user_id="tom")
    db.read(lambda conn: None)
    embedder = endpoint.embedder()
    backfill(db, embedder)
    assert find_sessions(db, "spouse encounter", embedder=None, exclude_session_ids=["s_hidden"]) == []
    hits = find_sessions(db, "spouse encounter", embedder=embedder, exclude_session_ids=["s_hidden"])
    assert [h.session_id for h in hits][0] == "s_met"
    assert "s_hidden" not in [h.session_id for h in hits]
    assert find_sessions(db, "spouse encounter", embedder=embedder, person_id="someone-else") == []


def test_a_session_near_in_meaning_joins_when_only_common_words_match(db, endpoint):
    # "totally" is said everywhere; nothing says "spouse": the session about meeting a woman leads
    for n in range(6):
        add(db, f"s_{n}", [f"totally fine day number {n}", "totally"], started=1.7e9 + 100 * n)
    add(db, "s_met", ["I met a wonderful woman at the cafe", "lovely"], started=1.6e9)
    question = "totally spouse"
    assert "s_met" not in [h.session_id for h in find_sessions(db, question, embedder=None)]
    embedder = endpoint.embedder()
    backfill(db, embedder)
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder)][0] == "s_met"
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder, person_id="ann")] == []
    alone = RankWeights(meaning_leaders=0)  # without the stage, meaning re-orders only what the words found
    assert "s_met" not in [h.session_id for h in find_sessions(db, question, embedder=embedder, weights=alone)]


def test_meaning_compares_only_the_askers_newest_sessions(db, endpoint):
    # the paraphrase is the asker's oldest session: behind `vector_scan` windows of newer ones it is not compared
    add(db, "s_met", ["I met a wonderful woman at the cafe", "lovely"], started=1.6e9)
    for n in range(6):
        add(db, f"s_{n}", [f"totally fine day number {n}", "totally"], started=1.7e9 + 100 * n)
    embedder = endpoint.embedder()
    backfill(db, embedder)
    for see_all in (False, True):
        found = find_sessions(db, "totally spouse", embedder=embedder, person_id="tom", see_all=see_all)
        assert [h.session_id for h in found][0] == "s_met"
        bounded = RankWeights(vector_scan=2)  # 8 messages: the four newest sessions
        found = find_sessions(
            db, "totally spouse", embedder=embedder, person_id="tom", see_all=see_all, weights=bounded
        )
        assert "s_met" not in [h.session_id for h in found]


def test_a_strong_word_match_keeps_the_first_place(db, endpoint):
    add(db, "s_car", ["my prius broke down on the motorway", "call a garage"])
    add(db, "s_met", ["I met a wonderful woman at the cafe", "lovely"], started=1.6e9)
    embedder = endpoint.embedder()
    backfill(db, embedder)
    hits = find_sessions(db, "prius motorway woman", embedder=embedder)
    assert [h.session_id for h in hits] == ["s_car", "s_met"]


def test_a_failing_endpoint_leaves_the_words_ranking(db, endpoint):
    add(db, "s_car", ["my wife needs the car", "take the bus"])
    embedder = endpoint.embedder()
    backfill(db, embedder)
    endpoint.fake.embedding_status = 503
    hits = find_sessions(db, "wife car", embedder=embedder)
    assert [h.session_id for h in hits] == ["s_car"]


def test_the_installed_embedder_is_the_default(db, endpoint):
    add(db, "s_met", ["I met a wonderful woman at the cafe", "lovely"])
    embedder = endpoint.embedder()
    backfill(db, embedder)
    previous = semantic.use(embedder)
    try:
        assert [h.session_id for h in find_sessions(db, "spouse")] == ["s_met"]
    finally:
        semantic.use(previous)
    assert find_sessions(db, "spouse") == []


def test_a_small_lead_in_meaning_does_not_take_the_first_place_from_the_words(db, endpoint):
    # nearly the same meaning everywhere (cosines within 0.01): what the words say first stays first
    endpoint.fake.embed = lambda texts, model: [[1.0, 0.1] if "beta" in t else [1.0, 0.0] for t in texts]
    add(db, "s_words", ["alpha gamma delta", "noted"])
    add(db, "s_meaning", ["beta gamma", "noted"], started=1.7e9 + 100)
    add(db, "s_other", ["gamma", "noted"], started=1.7e9 + 200)
    question = "alpha beta gamma delta"
    assert [h.session_id for h in find_sessions(db, question, embedder=None)][:2] == ["s_words", "s_meaning"]
    embedder = endpoint.embedder()
    backfill(db, embedder)
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder)][0] == "s_words"
    weights = RankWeights(semantic_weight=1.0)
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder, weights=weights)][0] == "s_words"
    weights = RankWeights(semantic_weight=1.0, overrule_margin=0.0)  # without the rule, the small lead would win
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder, weights=weights)][0] == "s_meaning"


@pytest.mark.sqlite_only("SQLite's EXPLAIN QUERY PLAN")
def test_a_leaders_vectors_are_read_by_session_not_by_scanning_the_model(db):
    # the model's index would walk every window of the model (O(store) per query, ~80 ms at 1M messages)
    sql = vectors.session_vectors_sql(3)
    plan = " ".join(
        str(tuple(r))
        for r in db.read(lambda conn: conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("m", "a", "b", "c")).fetchall())
    )
    assert "PRIMARY KEY" in plan and "idx_message_vectors_newest" not in plan


def test_meaning_where_the_words_are_decides_between_equal_word_matches(db, endpoint):
    # both hold the question's one word; the words favour the shorter message, meaning the other turn
    add(db, "s_coffee", ["my wife joined us at last", "over coffee, lovely"])
    add(db, "s_weather", ["my wife joined us", "the weather was grey indeed"], started=1.7e9 + 100)
    question = "Did Tom meet his wife at the cafe?"
    assert [h.session_id for h in find_sessions(db, question, embedder=None)][0] == "s_weather"
    embedder = endpoint.embedder()
    backfill(db, embedder)
    weights = RankWeights(overrule_margin=1.0, passage_weight=0.0)  # the session-level fusion keeps the leader first
    assert [h.session_id for h in find_sessions(db, question, embedder=embedder, weights=weights)][0] == "s_weather"
    weights = RankWeights(overrule_margin=1.0, passage_weight=0.15)
    hits = find_sessions(db, question, embedder=embedder, weights=weights)
    assert [h.session_id for h in hits][0] == "s_coffee"
    assert len(hits) == 2  # nothing without the words is brought in by meaning


def test_passage_bonus_is_scaled_over_the_leading_windows(db, endpoint):
    ids = add(db, "s_a", ["meet wife tom", "x"]) + add(db, "s_b", ["car", "prius"])
    embedder = endpoint.embedder()
    backfill(db, embedder)
    query = semantic.embed_query(embedder, "meet wife tom")
    assert query is not None
    bonus = db.read(lambda conn: semantic.passage_bonus(conn, query, {ids[0]: "s_a", ids[2]: "s_b"}, 10.0))
    assert bonus[ids[0]] == pytest.approx(DEFAULT_WEIGHTS.passage_weight * 10.0)  # the best window: the full share
    assert bonus[ids[2]] == pytest.approx(0.0)  # the worst: nothing
    assert db.read(lambda conn: semantic.passage_bonus(conn, query, {ids[0]: "s_a"}, 10.0)) == {}  # one window


def test_an_endpoint_that_keeps_failing_is_said_once_and_backed_off(db, endpoint, caplog):
    add(db, "a", ["car one", "car two"])
    endpoint.fake.embedding_status = 404  # e.g. a chat server without /embeddings
    indexer = BackgroundIndexer(db, endpoint.embedder(), retry_seconds=(0.01, 0.01, 0.05))
    caplog.set_level("DEBUG", logger="gateway.recall.index")
    indexer.start()
    try:
        wait_until_blocking(lambda: indexer.failures >= 8, 20)
    finally:
        indexer.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len([w for w in warnings if "retrying in" in w]) == 3  # the first few, one by one
    [said] = [w for w in warnings if "keeps failing" in w]  # then once
    assert "404" in said and "recall ranks by words" in said


def test_an_entrant_moves_up_only_past_the_sessions_it_beats_from_below():
    # it beats the second but not the third: passing the third to get there would overrule the words' order
    def beats(key: str, other: str) -> bool:
        return other == "second"

    order = semantic.interleave(["first", "second", "third"], ["near"], beats, lambda key: False)
    assert order == ["first", "second", "third", "near"]
    order = semantic.interleave(["first", "second", "third"], ["near"], lambda k, o: o != "first", lambda key: False)
    assert order == ["first", "near", "second", "third"]


def test_a_session_without_meaning_keeps_what_its_words_earned(db, endpoint):
    # the question's rarest word is only in s_words, whose window means nothing like the question (a negative
    # margin); s_near says none of its words and means it exactly. Meaning brings s_near in, below the words'
    # match: before, the negative margin was taken off the words' evidence and s_near passed it
    question = "zebra story day night time"
    query = [1.0, 0.0, 0.0]
    vectors_by_word = {"striped": query, "zebra": [0.0, 1.0, 0.0]}

    def embed(texts, model):
        return [
            query if t == question else next((v for w, v in vectors_by_word.items() if w in t), [0.5, 0.866, 0.0])
            for t in texts
        ]

    endpoint.fake.embed = embed
    for n in range(11):
        add(db, f"s_{n:02d}", [f"a story of the day and the night, time {n}", "ok"], started=1.7e9 + 100 * n)
    add(db, "s_words", ["the zebra", "ok"], started=1.6e9)
    add(db, "s_near", ["I adore striped horses", "ok"], started=1.6e9 + 50)
    embedder = endpoint.embedder()
    backfill(db, embedder)
    assert "s_near" not in [h.session_id for h in find_sessions(db, question, embedder=None)]
    hits = [h.session_id for h in find_sessions(db, question, embedder=embedder, person_id="tom")]
    assert hits[:2] == ["s_words", "s_near"]


def test_pooled_meaning_draws_on_the_askers_own_sessions(db, endpoint):
    # an operator over everyone's chats who has their own: the paraphrase in another person's chat is found by
    # its words only; against everyone's windows each of the asker's sessions stood out, and entrants overran words
    for n in range(6):
        add(db, f"s_{n}", [f"totally fine day number {n}", "totally"], started=1.7e9 + 100 * n)
    add(db, "s_met", ["I met a wonderful woman at the cafe", "lovely"], started=1.6e9, user_id="ann")
    embedder = endpoint.embedder()
    backfill(db, embedder)
    pooled = [
        h.session_id for h in find_sessions(db, "totally spouse", embedder=embedder, person_id="tom", see_all=True)
    ]
    assert "s_met" not in pooled and pooled
    by_words = [
        h.session_id for h in find_sessions(db, "spouse woman", embedder=embedder, person_id="tom", see_all=True)
    ]
    assert by_words[0] == "s_met"
    nobody = [
        h.session_id for h in find_sessions(db, "totally spouse", embedder=embedder, person_id="eve", see_all=True)
    ]
    assert nobody[0] == "s_met"  # an asker with no conversations of their own: the store's newest windows
