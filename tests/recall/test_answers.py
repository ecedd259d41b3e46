"""gateway.recall.answers: which questions ask for a time, and which messages tell one."""

from __future__ import annotations

import pytest

from gateway.recall.answers import TIME, asked


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
