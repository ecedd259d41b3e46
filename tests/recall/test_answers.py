"""gateway.recall.answers: which questions ask for a time, and which messages tell one."""

from __future__ import annotations

import pytest

from gateway.recall.answers import COUNT, PLACE, TIME, asked


@pytest.mark.parametrize(
    "question",
    [
        "When did Caroline go to the adoption meeting?",
        "when was the deploy rolled back",
        "What date did we pick for the launch?",
        "Which year did she move to Berlin?",
        "How long ago did we renew the certificate?",
        "我们什么时候去的长城？",
        "你哪天开始学钢琴的",
        "上次停电是几号",
    ],
)
def test_questions_asking_for_a_time(question):
    assert asked(question) is TIME


@pytest.mark.parametrize(
    "question",
    [
        "What did we decide about the webhook?",
        "Who said the build was broken since Tuesday?",  # asks who, not when
        "How long is the drive to the coast?",
        "你推荐过哪些画家？",
        "",
        "what \ud800 happened then",  # a lone surrogate is text like any other
    ],
)
def test_questions_asking_for_something_else(question):
    assert asked(question) is None


@pytest.mark.parametrize(
    "text",
    [
        "Last Friday I went to a council meeting for adoption.",
        "We went camping two weekends ago.",
        "I passed the interview yesterday!",
        "It was on 8 May, we had cake.",
        "Back in 2019 I got my first turtles.",
        "The recital is on Sunday.",
        "我昨天去了公园",
        "上周三机房停电了",
        "3月5号我们开了会",
        "三天前刚装好",
    ],
)
def test_messages_telling_a_time(text):
    assert TIME.answered_by(text)


@pytest.mark.parametrize(
    "text",
    [
        "The adoption meeting was so inspiring.",
        "I love pottery, the kids made bowls.",
        "May I ask what the march was about?",  # "may" and "march" alone are words, not dates
        "我们讨论了数据库的配置",
    ],
)
def test_messages_telling_no_time(text):
    assert not TIME.answered_by(text)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How many times has Melanie gone to the beach?", COUNT),
        ("how much did the new GPU cost", COUNT),
        ("我们一共部署了多少台服务器？", COUNT),
        ("Where did we host the offsite?", PLACE),
        ("Which city did John visit in June?", PLACE),
        ("上次团建是在哪里？", PLACE),
    ],
)
def test_count_and_place_questions(question, kind):
    assert asked(question) is kind


def test_count_and_place_answers():
    assert COUNT.answered_by("we went twice this summer")
    assert COUNT.answered_by("it cost 1,200 dollars")
    assert COUNT.answered_by("部署了三台服务器")
    assert not COUNT.answered_by("here's one I made earlier")  # "one" is mostly a pronoun
    assert PLACE.answered_by("we stayed in Lisbon for a week")
    assert PLACE.answered_by("I took the kids to the park")
    assert PLACE.answered_by("我们去了杭州西湖")
    assert not PLACE.answered_by("see you in May")  # a month after "in" is no place
