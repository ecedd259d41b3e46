"""Dates in a recall query: relative expressions (English and Chinese) anchored to the asking time,
beside the absolute ones; any input is safe (property tests); a relative date weighs sessions."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.recall.dates import DateSpec, conversation_order, dates_in, extract_dates
from gateway.recall.query import plan_query
from gateway.recall.rank import find_sessions

# Wednesday 2026-12-02, 10:00 UTC
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc).timestamp()


def day(y: int, m: int, d: int, days: int = 1) -> DateSpec:
    return DateSpec(y, m, d, days)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("what did we say yesterday?", day(2026, 12, 1)),
        ("the day before yesterday", day(2026, 11, 30)),
        ("two days ago we talked about cars", day(2026, 11, 30)),
        ("3 days ago", day(2026, 11, 29)),
        ("a week ago", day(2026, 11, 25)),
        ("last week", day(2026, 11, 23, 7)),  # Monday to Sunday of the week before
        ("this week", day(2026, 11, 30, 7)),
        ("in the past week", day(2026, 11, 26, 7)),
        ("last month", DateSpec(2026, 11, None)),
        ("two months ago", DateSpec(2026, 10, None)),
        ("last year", DateSpec(2025, None, None)),
        ("last Wednesday", day(2026, 11, 25)),  # not today, a Wednesday too
        ("on Monday", day(2026, 11, 30)),
        ("last weekend", day(2026, 11, 28, 2)),
        ("today", day(2026, 12, 2)),
        ("昨天我们聊了什么", day(2026, 12, 1)),
        ("前天", day(2026, 11, 30)),
        ("大前天", day(2026, 11, 29)),
        ("三天前", day(2026, 11, 29)),
        ("两个星期前", day(2026, 11, 18)),
        ("十天之前", day(2026, 11, 22)),
        ("上周", day(2026, 11, 23, 7)),
        ("上个星期", day(2026, 11, 23, 7)),
        ("上上周", day(2026, 11, 16, 7)),
        ("上周三", day(2026, 11, 25)),
        ("本周一", day(2026, 11, 30)),
        ("周五", day(2026, 11, 27)),
        ("上周末", day(2026, 11, 28, 2)),
        ("上个月", DateSpec(2026, 11, None)),
        ("三个月前", DateSpec(2026, 9, None)),
        ("去年", DateSpec(2025, None, None)),
    ],
)
def test_relative_dates_count_back_from_the_asking_time(text: str, expected: DateSpec) -> None:
    assert dates_in(text, NOW) == [expected]


def test_relative_dates_cross_month_and_year_ends() -> None:
    new_year = datetime(2027, 1, 1, 8, tzinfo=timezone.utc).timestamp()  # a Friday
    assert dates_in("yesterday", new_year) == [day(2026, 12, 31)]
    assert dates_in("last month", new_year) == [DateSpec(2026, 12, None)]
    assert dates_in("上周", new_year) == [day(2026, 12, 21, 7)]
    assert dates_in("13 months ago", new_year) == [DateSpec(2025, 12, None)]


def test_absolute_dates_win_where_they_overlap_and_relative_text_is_cut_out() -> None:
    assert dates_in("5月3日前的事", NOW) == [DateSpec(None, 5, 3)]
    found, rest = extract_dates("5月2日 和 昨天 聊 钢琴", NOW)
    assert found == [DateSpec(None, 5, 2), day(2026, 12, 1)]
    assert "5月" not in rest and "昨天" in rest  # a relative date's words still count as words
    assert plan_query("what did we decide yesterday", now=NOW).dates == [day(2026, 12, 1)]
    assert dates_in("in June 2022 and yesterday", NOW) == [DateSpec(2022, 6, None), day(2026, 12, 1)]


def test_words_that_only_look_like_dates_are_left_alone() -> None:
    assert dates_in("the weekend plans", NOW) == []
    assert dates_in("you may go", NOW) == []
    assert dates_in("天气预报", NOW) == []


def test_a_week_span_bounds_its_seven_days() -> None:
    spec = day(2026, 11, 23, 7)
    start, end = spec.bounds()
    assert (end - start) == 7 * 86400
    assert spec.covers(datetime(2026, 11, 29, 23, tzinfo=timezone.utc).timestamp(), 0)
    assert not spec.covers(datetime(2026, 11, 30, 1, tzinfo=timezone.utc).timestamp(), 0)
    assert spec.label == "2026-11-23+7d"


@pytest.mark.parametrize(
    "text",
    [
        "99999999999999 days ago",
        "999999999 years ago",
        "999999999 months ago",
        "999999999 weeks ago",
        "九十九年前",
        "\ud800 yesterday \udfff",
        "上" * 5000 + "周",
        "１２３天前",
    ],
)
def test_hostile_amounts_and_text_never_raise(text: str) -> None:
    found = dates_in(text, NOW)
    for spec in found:
        spec.bounds(7)  # every span found can be asked for its bounds


def test_a_now_no_calendar_holds_gives_no_relative_dates() -> None:
    for now in (1e20, -1e20, float("nan"), float("inf")):
        assert dates_in("yesterday", now) == []
    assert dates_in("yesterday on 2023-05-02", 1e20) == [DateSpec(2023, 5, 2)]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200), now=st.floats(allow_nan=True, allow_infinity=True))
def test_any_text_and_any_now_never_raise(text: str, now: float) -> None:
    found, rest = extract_dates(text, now)
    for spec in found:
        spec.bounds(7)


@settings(max_examples=200, deadline=None)
@given(
    amount=st.integers(min_value=0, max_value=10**30),
    unit=st.sampled_from(["days", "weeks", "months", "years", "天", "个星期", "个月", "年"]),
    now=st.floats(min_value=0, max_value=4e9),
)
def test_any_amount_back_is_a_date_or_nothing(amount: int, unit: str, now: float) -> None:
    text = f"{amount} {unit} ago" if unit.isascii() else f"{amount}{unit}前"
    found = dates_in(text, now)
    assert len(found) <= 1
    if found:
        start, _ = found[0].bounds() or (0.0, 0.0)
        assert start <= now  # counted back, never forward


def test_a_relative_date_lifts_the_session_of_that_day(db) -> None:
    def add(sid: str, text: str, y: int, m: int, d: int) -> None:
        started = datetime(y, m, d, 12, tzinfo=timezone.utc).timestamp()
        db.create_session(sid, "telegram", user_id="tom", started_at=started)
        db.append_message(sid, "user", text, timestamp=started)
        db.append_message(sid, "assistant", "noted", timestamp=started + 1)

    add("monday", "we talked about the piano lesson", 2026, 11, 30)
    add("older", "we talked about the piano recital", 2026, 11, 10)
    add("newer", "piano practice again", 2026, 12, 2)
    hits = find_sessions(db, "what did we say about the piano two days ago?", now=NOW, embedder=None)
    assert hits[0].session_id == "monday"
    hits = find_sessions(db, "上周三聊钢琴了吗 piano", now=NOW + 7 * 86400, embedder=None)  # Wednesday a week on
    assert hits[0].session_id == "newer"


def test_a_month_without_a_year_means_that_month_of_any_year(db) -> None:
    assert dates_in("when did we go camping in July?") == [DateSpec(None, 7, None)]
    assert dates_in("during early August") == [DateSpec(None, 8, None)]
    assert dates_in("since March, 2023") == [DateSpec(2023, 3, None)]  # a year given still counts
    assert dates_in("they may march in july") == [DateSpec(None, 7, None)]  # "march" alone is no date
    for sid, month in (("july", 7), ("june", 6)):
        started = datetime(2023, month, 14, 12, tzinfo=timezone.utc).timestamp()
        db.create_session(sid, "telegram", user_id="tom", started_at=started)
        db.append_message(sid, "user", "we went camping by the lake", timestamp=started)
    assert find_sessions(db, "camping in July", embedder=None)[0].session_id == "july"
    assert find_sessions(db, "camping in June", embedder=None)[0].session_id == "june"


@pytest.mark.parametrize(
    ("text", "order"),
    [
        ("what did we discuss the first time we talked?", "first"),
        ("Our very first conversation was about what?", "first"),
        ("你还记得我们第一次对话的时候聊了什么吗", "first"),
        ("what was it the last time we spoke", "last"),
        ("上次我们聊了什么？", "last"),
        ("最近一次聊天说到哪了", "last"),
        ("上次部署网关超时是怎么解决的", None),  # the last time it happened, not our last talk
        ("the first time I deployed it", None),
        ("", None),
    ],
)
def test_the_first_or_last_conversation_is_named(text, order):
    assert conversation_order(text) == order
