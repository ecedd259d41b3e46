"""gateway.sessions.reset: idle/daily/both/none, DST in both directions, overrides, config errors."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gateway.sessions.reset import ResetPolicies, ResetPolicy
from gateway.source import SessionSource


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def simulate(policy: ResetPolicy, start: float, end: float, step: float = 60.0) -> list[float]:
    """A chat active every `step` seconds: the instants at which it rolled over."""
    resets, last, now = [], start, start
    while now <= end:
        if policy.should_reset(last, now):
            resets.append(now)
        last = now  # the message at `now` is the session's last activity
        now += step
    return resets


def test_idle_resets_exactly_after_idle_minutes():
    p = ResetPolicy(mode="idle", idle_minutes=60)
    assert p.should_reset(1000.0, 1000.0 + 3599) is None
    assert p.should_reset(1000.0, 1000.0 + 3600) == "idle"
    assert p.next_reset(1000.0, 1001.0) == 1000.0 + 3600


def test_none_never_resets():
    p = ResetPolicy(mode="none")
    assert p.should_reset(0.0, 10 * 365 * 86400.0) is None
    assert p.next_reset(0.0, 1.0) is None


def test_daily_in_utc():
    p = ResetPolicy(mode="daily", daily_hour=4)
    last = utc(2026, 5, 1, 3, 59)
    assert p.should_reset(last, utc(2026, 5, 1, 3, 59, 59)) is None
    assert p.should_reset(last, utc(2026, 5, 1, 4, 0)) == "daily"
    # active just after the boundary: nothing until the next day's 04:00
    after = utc(2026, 5, 1, 4, 0, 1)
    assert p.should_reset(after, utc(2026, 5, 2, 3, 59, 59)) is None
    assert p.should_reset(after, utc(2026, 5, 2, 4, 0)) == "daily"
    assert p.next_reset(after, after) == utc(2026, 5, 2, 4, 0)


def test_daily_hour_is_local_to_the_time_zone():
    p = ResetPolicy(mode="daily", daily_hour=4, timezone="Asia/Shanghai")  # UTC+8, no DST
    last = utc(2026, 5, 1, 19, 0)  # 03:00 in Shanghai on May 2
    assert p.should_reset(last, utc(2026, 5, 1, 19, 59)) is None
    assert p.should_reset(last, utc(2026, 5, 1, 20, 0)) == "daily"  # 04:00 Shanghai


def test_spring_forward_reset_in_the_gap_happens_once_at_the_jump():
    # New York, 2026-03-08: clocks jump from 02:00 EST to 03:00 EDT (07:00 UTC); 02:30 does not exist.
    p = ResetPolicy(mode="daily", daily_hour=2, daily_minute=30, timezone="America/New_York")
    resets = simulate(p, utc(2026, 3, 7, 12, 0), utc(2026, 3, 9, 12, 0))
    assert resets == [
        utc(2026, 3, 8, 7, 0),  # the first valid instant after 02:30 local: 03:00 EDT
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT on the next day
    ]


def test_spring_forward_berlin_gap_from_config_string():
    # Berlin, 2026-03-29: 02:00 CET -> 03:00 CEST at 01:00 UTC.
    pol = ResetPolicies.from_config({"mode": "daily", "daily_hour": "02:30", "timezone": "Europe/Berlin"})
    resets = simulate(pol.default, utc(2026, 3, 28, 12, 0), utc(2026, 3, 30, 12, 0))
    assert resets == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_fall_back_repeated_hour_resets_once_not_twice():
    # New York, 2026-11-01: 01:00-02:00 happens twice (EDT then EST); 01:30 occurs at 05:30 and 06:30 UTC.
    p = ResetPolicy(mode="daily", daily_hour=1, daily_minute=30, timezone="America/New_York")
    resets = simulate(p, utc(2026, 10, 31, 12, 0), utc(2026, 11, 2, 12, 0))
    assert resets == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    # a session active between the two 01:30s is not reset at the second one
    assert p.should_reset(utc(2026, 11, 1, 5, 45), utc(2026, 11, 1, 6, 45)) is None


def test_every_day_of_a_year_resets_exactly_once_in_a_dst_zone():
    p = ResetPolicy(mode="daily", daily_hour=2, daily_minute=30, timezone="America/New_York")
    resets = simulate(p, utc(2026, 1, 1, 12, 0), utc(2027, 1, 1, 12, 0), step=20 * 60)
    days = [datetime.fromtimestamp(r, p.tz).date() for r in resets]
    assert len(days) == len(set(days)) == 365


def test_both_reports_the_reason_that_came_first():
    p = ResetPolicy(mode="both", idle_minutes=60, daily_hour=4)
    # daily boundary 04:00 comes before the idle deadline 04:30
    assert p.should_reset(utc(2026, 5, 1, 3, 30), utc(2026, 5, 1, 5, 0)) == "daily"
    # idle deadline 03:00 comes before 04:00
    assert p.should_reset(utc(2026, 5, 1, 2, 0), utc(2026, 5, 1, 5, 0)) == "idle"
    assert p.should_reset(utc(2026, 5, 1, 4, 10), utc(2026, 5, 1, 5, 0)) is None
    assert p.next_reset(utc(2026, 5, 1, 3, 30), utc(2026, 5, 1, 3, 31)) == utc(2026, 5, 1, 4, 0)


CONFIG = {
    "mode": "both",
    "idle_minutes": 600,
    "daily_hour": 5,
    "timezone": "Asia/Shanghai",
    "by_chat_type": {"group": {"mode": "idle", "idle_minutes": 120}},
    "by_platform": {
        "telegram": {"mode": "idle"},
        "discord": {"mode": "daily", "by_chat_type": {"thread": {"mode": "none"}}},
    },
}


def src(platform: str, chat_type: str) -> SessionSource:
    return SessionSource(platform=platform, chat_id="c1", chat_type=chat_type, user_id="u1")


def test_overrides_precedence_and_inheritance():
    pol = ResetPolicies.from_config(CONFIG)
    assert pol.for_source(src("feishu", "dm")) == pol.default
    assert pol.default == ResetPolicy("both", 600, 5, "Asia/Shanghai")
    # chat type override, inheriting the default's zone
    group = pol.for_source(src("feishu", "group"))
    assert (group.mode, group.idle_minutes, group.timezone) == ("idle", 120, "Asia/Shanghai")
    # platform beats chat type
    tg_group = pol.for_source(src("telegram", "group"))
    assert (tg_group.mode, tg_group.idle_minutes) == ("idle", 600)
    # platform + chat type beats platform
    assert pol.for_source(src("discord", "thread")).mode == "none"
    dc_channel = pol.for_source(src("discord", "channel"))
    assert (dc_channel.mode, dc_channel.daily_hour, dc_channel.timezone) == ("daily", 5, "Asia/Shanghai")


def test_empty_config_gives_defaults():
    pol = ResetPolicies.from_config(None)
    assert pol.default == ResetPolicy()
    assert pol.for_source(src("telegram", "group")) == ResetPolicy()


@pytest.mark.parametrize(
    "config, key, words",
    [
        ({"mode": "weekly"}, "session.reset.mode", "unknown mode"),
        ({"daily_hour": 24}, "session.reset.daily_hour", "0 to 23"),
        ({"daily_hour": "25:00"}, "session.reset.daily_hour", "0 to 23"),
        ({"daily_hour": "noon"}, "session.reset.daily_hour", "expected an hour"),
        ({"daily_minute": 60}, "session.reset.daily_minute", "0 to 59"),
        ({"idle_minutes": 0}, "session.reset.idle_minutes", "positive"),
        ({"idle_minutes": True}, "session.reset.idle_minutes", "positive"),
        ({"timezone": "Mars/Olympus"}, "session.reset.timezone", "unknown time zone"),
        ({"idle_minute": 5}, "session.reset.idle_minute", "unknown setting"),
        (
            {"by_platform": {"telegram": {"mode": "sometimes"}}},
            "session.reset.by_platform.telegram.mode",
            "unknown mode",
        ),
        ({"by_platform": {"icq": {}}}, "session.reset.by_platform.icq", "unknown platform"),
        ({"by_chat_type": {"room": {}}}, "session.reset.by_chat_type.room", "unknown chat type"),
        (
            {"by_platform": {"discord": {"by_chat_type": {"thread": {"timezone": "Nowhere/Land"}}}}},
            "session.reset.by_platform.discord.by_chat_type.thread.timezone",
            "unknown time zone",
        ),
    ],
)
def test_bad_config_names_the_key(config, key, words):
    with pytest.raises(ValueError) as err:
        ResetPolicies.from_config(config)
    message = str(err.value)
    assert message.startswith(key + ":"), message
    assert words in message


def test_describe_is_readable():
    assert ResetPolicy(mode="both", idle_minutes=1440, daily_hour=4).describe() == (
        "resets after 1 day idle or daily at 04:00 UTC"
    )
    assert ResetPolicy(mode="idle", idle_minutes=90).describe() == "resets after 90 minutes idle"
