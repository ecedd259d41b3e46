"""gateway.recall.forms: irregular English forms link a question and an answer written in another
tense or number ("met" / "meet", "children" / "child"), which a stem used as a prefix never does."""

from __future__ import annotations

from gateway.recall.forms import forms
from gateway.recall.query import plan_query
from gateway.recall.rank import find_sessions


def test_an_irregular_form_leads_to_every_form_and_a_regular_one_to_the_irregular_ones() -> None:
    assert forms("met") == {"meet", "meets", "meeting", "met"}
    assert forms("Bought") == {"buy", "buys", "buying", "bought"}
    assert forms("meet") == {"met"}  # "meets"/"meeting" are the stem's business
    assert forms("swim") == {"swam", "swum"}
    assert forms("swimming") == {"swam", "swum"}  # the doubled consonant of a one-syllable verb
    assert forms("making") == {"made"}  # and the dropped e
    assert forms("children") == forms("child") == {"child", "children"}
    assert forms("people") == {"person", "people"}


def test_regular_words_and_forms_that_are_mostly_other_words_are_left_alone() -> None:
    assert forms("paint") == frozenset()
    assert forms("read") == frozenset()  # read/read/read: nothing a prefix cannot reach
    assert forms("bit") == frozenset() and "bit" not in forms("bite")  # "a bit"
    assert forms("rose") == frozenset() and "rose" not in forms("rise")  # the flower


def test_the_forms_join_the_word_unit_but_stop_words_do_not() -> None:
    (unit,) = [u for u in plan_query("gone").units if not u.pair]
    assert '"going"' in unit.word_expr and '"gone"' in unit.word_expr
    assert '"went"' not in unit.word_expr  # a stop word: it would match nearly every session


def test_a_question_finds_the_answer_said_in_another_tense(db) -> None:
    for sid, text in (
        ("met", "I met my future wife at a cafe in Lisbon"),
        ("plans", "we could meet at the station"),
        ("cooks", "my wife cooks on Sundays"),
        ("hikes", "my wife and I went hiking"),
    ):
        db.create_session(sid, "telegram", user_id="tom")
        db.append_message(sid, "user", text)
        db.append_message(sid, "assistant", "nice")
    assert find_sessions(db, "Where did he meet his wife?", embedder=None)[0].session_id == "met"
    for sid, text in (("kids", "my youngest child started school"), ("term", "the school term starts in June")):
        db.create_session(sid, "telegram", user_id="tom")
        db.append_message(sid, "user", text)
    assert find_sessions(db, "how are the children doing at school", embedder=None)[0].session_id == "kids"


def test_a_final_y_after_a_consonant_matches_its_i_forms(db) -> None:
    (unit,) = [u for u in plan_query("apply").units if not u.pair]
    assert '"appl"*' in unit.word_expr
    (unit,) = [u for u in plan_query("holiday").units if not u.pair]
    assert unit.word_expr == '"holiday"*'  # a vowel before the y: it stays
    db.create_session("applied", "telegram", user_id="tom")
    db.append_message("applied", "user", "I applied to three agencies this week")
    db.create_session("agencies", "telegram", user_id="tom")
    db.append_message("agencies", "user", "the agencies were closed")
    assert find_sessions(db, "when did I apply to the agencies", embedder=None)[0].session_id == "applied"
