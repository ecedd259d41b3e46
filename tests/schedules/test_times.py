"""When a job runs: once / cron / every, time zones, both DST transitions in Europe/Berlin and
America/New_York, missed runs under both policies, and the validation a person's request meets."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from gateway.schedules.times import (
    LATE_AFTER,
    ScheduleError,
    Timing,
    describe,
    host_timezone,
    local_text,
    next_run_after,
    parse_timing,
    plan_run,
)

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


def cron(expression: str, zone: str, since: datetime = NOW) -> Timing:
    return Timing("cron", zone, since, cron=expression)


def runs(timing: Timing, start: datetime, end: datetime) -> list[datetime]:
    """Every run in (start, end], found as the due-run loop finds them: each after the last."""
    found: list[datetime] = []
    at = next_run_after(timing, start)
    while at is not None and at <= end:
        found.append(at)
        at = next_run_after(timing, at)
    return found


def local(instants: list[datetime], zone: ZoneInfo) -> list[str]:
    return [i.astimezone(zone).strftime("%m-%d %H:%M %Z") for i in instants]


# ---- the three kinds ------------------------------------------------------------------------


def test_once_runs_at_its_instant_then_never() -> None:
    at = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    timing = Timing("once", "Asia/Shanghai", NOW, at=at)
    assert next_run_after(timing, NOW) == at
    assert next_run_after(timing, at - timedelta(seconds=1)) == at
    assert next_run_after(timing, at) is None


def test_every_counts_from_creation_in_real_minutes() -> None:
    timing = Timing("every", "UTC", NOW, every_minutes=30)
    assert next_run_after(timing, NOW) == NOW + timedelta(minutes=30)
    assert next_run_after(timing, NOW + timedelta(minutes=30)) == NOW + timedelta(minutes=60)
    # a late look-up keeps the grid: 07:00 after a 100-minute gap is the 4th slot, not now + 30
    assert next_run_after(timing, NOW + timedelta(minutes=100)) == NOW + timedelta(minutes=120)


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK])
def test_every_is_real_minutes_across_both_dst_changes(zone: ZoneInfo) -> None:
    for day in (
        datetime(2026, 3, 28, tzinfo=UTC),
        datetime(2026, 10, 24, tzinfo=UTC),
        datetime(2026, 10, 31, tzinfo=UTC),
    ):
        found = runs(Timing("every", zone.key, day, every_minutes=60), day, day + timedelta(days=3))
        assert len(found) == 72
        assert {b - a for a, b in zip(found, found[1:])} == {timedelta(hours=1)}


def test_cron_reads_the_wall_clock_of_its_zone() -> None:
    # Wednesday 2026-12-02 08:00 UTC is 16:00 in Shanghai, 09:00 in Berlin, 03:00 in New York
    weekdays_18 = "0 18 * * 1-5"
    assert next_run_after(cron(weekdays_18, "Asia/Shanghai"), NOW) == datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    assert next_run_after(cron(weekdays_18, "Europe/Berlin"), NOW) == datetime(2026, 12, 2, 17, 0, tzinfo=UTC)
    assert next_run_after(cron(weekdays_18, "America/New_York"), NOW) == datetime(2026, 12, 2, 23, 0, tzinfo=UTC)
    # Friday 18:00 Shanghai passed -> Monday
    friday_evening = datetime(2026, 12, 4, 11, 0, tzinfo=UTC)
    assert next_run_after(cron(weekdays_18, "Asia/Shanghai"), friday_evening) == datetime(
        2026, 12, 7, 10, 0, tzinfo=UTC
    )


def test_a_cron_run_is_strictly_after_now_even_on_the_minute() -> None:
    timing = cron("0 9 * * *", "UTC")
    at_nine = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    assert next_run_after(timing, at_nine) == at_nine + timedelta(days=1)


# ---- DST --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "zone", "expression", "days", "expected"),
    [
        (
            "2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist; it runs once, an hour on",
            BERLIN,
            "30 2 * * *",
            (datetime(2026, 3, 27, 12, tzinfo=UTC), datetime(2026, 3, 31, 12, tzinfo=UTC)),
            ["03-28 02:30 CET", "03-29 03:30 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST"],
        ),
        (
            "2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice; it runs at the first",
            BERLIN,
            "30 2 * * *",
            (datetime(2026, 10, 23, 12, tzinfo=UTC), datetime(2026, 10, 27, 12, tzinfo=UTC)),
            ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET", "10-27 02:30 CET"],
        ),
        (
            "2026-03-08 02:00 EST -> 03:00 EDT",
            NEW_YORK,
            "30 2 * * *",
            (datetime(2026, 3, 7, 12, tzinfo=UTC), datetime(2026, 3, 10, 12, tzinfo=UTC)),
            ["03-08 03:30 EDT", "03-09 02:30 EDT", "03-10 02:30 EDT"],
        ),
        (
            "2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice",
            NEW_YORK,
            "30 1 * * *",
            (datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 11, 3, 12, tzinfo=UTC)),
            ["11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"],
        ),
    ],
)
def test_a_daily_job_runs_once_on_a_dst_day(
    what: str, zone: ZoneInfo, expression: str, days: tuple[datetime, datetime], expected: list[str]
) -> None:
    assert local(runs(cron(expression, zone.key), *days), zone) == expected, what


def test_the_shifted_run_is_found_from_just_after_the_jump() -> None:
    # 03:10 CEST: the wall clock is past 02:30, but 02:30 read with the old offset is 03:30 CEST
    just_after = datetime(2026, 3, 29, 1, 10, tzinfo=UTC)
    found = next_run_after(cron("30 2 * * *", "Europe/Berlin"), just_after)
    assert found == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def local_day(zone: ZoneInfo, day: datetime) -> tuple[datetime, datetime]:
    """The instants just before local midnight of `day` and at the next local midnight."""
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    end = datetime(day.year, day.month, day.day + 1, tzinfo=zone)
    return start - timedelta(seconds=1), end


@pytest.mark.parametrize(("zone", "day"), [(BERLIN, datetime(2026, 3, 29)), (NEW_YORK, datetime(2026, 3, 8))])
def test_an_hourly_job_on_a_spring_forward_day_runs_once_an_hour(zone: ZoneInfo, day: datetime) -> None:
    found = runs(cron("30 * * * *", zone.key), *local_day(zone, day))
    assert len(found) == 23  # the day has 23 hours
    assert {b - a for a, b in zip(found, found[1:])} == {timedelta(hours=1)}


@pytest.mark.parametrize(("zone", "day"), [(BERLIN, datetime(2026, 10, 25)), (NEW_YORK, datetime(2026, 11, 1))])
def test_an_hourly_job_on_a_fall_back_day_runs_in_the_repeated_hour_too(zone: ZoneInfo, day: datetime) -> None:
    found = runs(cron("30 * * * *", zone.key), *local_day(zone, day))
    assert len(found) == 25  # the day has 25 hours
    assert {b - a for a, b in zip(found, found[1:])} == {timedelta(hours=1)}


def test_a_job_fixed_in_the_repeated_hour_runs_only_in_its_first_pass() -> None:
    # every 15 minutes during the 2 o'clock hour: four runs on the fall-back day, not eight
    day = datetime(2026, 10, 24, 22, tzinfo=UTC)
    found = runs(cron("*/15 2 * * *", "Europe/Berlin"), day, day + timedelta(hours=8))
    assert local(found, BERLIN) == [f"10-25 02:{m:02d} CEST" for m in (0, 15, 30, 45)]


# ---- missed runs ------------------------------------------------------------------------------


def test_an_on_time_run_runs_and_moves_to_the_next() -> None:
    timing = cron("0 9 * * *", "UTC")
    due = datetime(2026, 12, 3, 9, tzinfo=UTC)
    plan = plan_run(timing, due, due + timedelta(seconds=2), "skip")
    assert (plan.run, plan.late, plan.next_run_at) == (True, False, due + timedelta(days=1))


@pytest.mark.parametrize(("missed", "runs_now"), [("run_once", True), ("skip", False)])
def test_many_missed_runs_collapse_to_at_most_one_late_run(missed, runs_now: bool) -> None:
    timing = Timing("every", "UTC", NOW, every_minutes=10)
    due = NOW + timedelta(minutes=10)
    back = NOW + timedelta(hours=5, minutes=3)  # the daemon was down for 30 runs
    plan = plan_run(timing, due, back, missed)
    assert (plan.run, plan.late, plan.due_at) == (runs_now, True, due)
    assert plan.next_run_at == NOW + timedelta(hours=5, minutes=10)  # the first future run, on the grid


@pytest.mark.parametrize(("missed", "runs_now"), [("run_once", True), ("skip", False)])
def test_a_missed_one_off_runs_late_or_is_dropped_and_finishes(missed, runs_now: bool) -> None:
    at = NOW + timedelta(hours=1)
    plan = plan_run(Timing("once", "UTC", NOW, at=at), at, at + timedelta(hours=3), missed)
    assert (plan.run, plan.late, plan.next_run_at) == (runs_now, True, None)


def test_a_run_becomes_late_only_past_the_grace() -> None:
    timing = cron("0 9 * * *", "UTC")
    due = datetime(2026, 12, 3, 9, tzinfo=UTC)
    assert not plan_run(timing, due, due + LATE_AFTER, "skip").late
    assert plan_run(timing, due, due + LATE_AFTER + timedelta(seconds=1), "skip").late


# ---- validation -------------------------------------------------------------------------------


def parse(**given: object) -> Timing:
    args: dict = {"at": None, "cron": None, "every_minutes": None, "timezone_name": "Asia/Shanghai"}
    args.update(given)
    return parse_timing(now=NOW, min_interval_minutes=5, **args)


def test_a_valid_request_of_each_kind() -> None:
    assert parse(at="2026-12-03T09:00:00+08:00").at == datetime(2026, 12, 3, 1, tzinfo=UTC)
    assert parse(at="2026-12-03T01:00:00Z").at == datetime(2026, 12, 3, 1, tzinfo=UTC)
    assert parse(cron=" 0  18 * * 1-5 ").cron == "0 18 * * 1-5"
    assert parse(cron="0 9 * * mon-fri").kind == "cron"
    assert parse(every_minutes=5).every_minutes == 5
    assert parse(every_minutes=30).since == NOW


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"cron": "61 * * * *"}, "not valid"),
        ({"cron": "0 9 * *"}, "five fields"),
        ({"cron": "0 0 9 * * *"}, "five fields"),
        ({"cron": "@daily"}, "five fields"),
        ({"cron": "H 9 * * *"}, "not valid"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "*/2 * * * *"}, "fires every 2 min; the minimum is 5"),
        ({"cron": "0,1 9 * * *"}, "fires every 1 min"),
        ({"cron": "58 8 * * *", "timezone_name": "Europe/Berln"}, "did you mean Europe/Berlin"),
        ({"every_minutes": 5, "timezone_name": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every_minutes": 5, "timezone_name": "../etc/passwd"}, "unknown time zone"),
        ({"every_minutes": 5, "timezone_name": 8}, "timezone must be an IANA name"),
        ({"at": "2026-12-03T09:00:00"}, "no UTC offset"),
        ({"at": "2026-12-03"}, "no UTC offset"),
        ({"at": "tomorrow 9am"}, "not ISO-8601"),
        ({"at": "2026-12-01T09:00:00+08:00"}, "in the past"),
        ({"every_minutes": 4}, "at least 5"),
        ({"every_minutes": True}, "whole number"),
        ({"every_minutes": "30"}, "whole number"),
        ({"every_minutes": 10**7}, "at most"),
        (
            {"at": "2026-12-03T09:00:00+08:00", "cron": "0 9 * * *"},
            "exactly one of at, cron or every_minutes (got at and cron)",
        ),
        ({"cron": "0 9 * * *", "every_minutes": 60}, "got cron and every_minutes"),
        ({}, "got none"),
    ],
)
def test_a_bad_request_is_refused_with_a_clear_reason(given: dict, message: str) -> None:
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(**given)


def test_the_minimum_interval_is_a_setting() -> None:
    with pytest.raises(ScheduleError, match="at least 60"):
        parse_timing(at=None, cron=None, every_minutes=30, timezone_name="UTC", now=NOW, min_interval_minutes=60)
    with pytest.raises(ScheduleError, match="fires every 30 min; the minimum is 60"):
        parse_timing(
            at=None, cron="0,30 * * * *", timezone_name="UTC", every_minutes=None, now=NOW, min_interval_minutes=60
        )


def test_now_must_be_aware() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_run_after(cron("0 9 * * *", "UTC"), datetime(2026, 12, 2, 8, 0))


# ---- showing times ----------------------------------------------------------------------------


def test_times_are_shown_on_the_persons_clock() -> None:
    at = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    assert local_text(at, "Asia/Shanghai") == "Thu 2026-12-03 09:00 CST (Asia/Shanghai)"
    assert describe(Timing("once", "Asia/Shanghai", NOW, at=at)) == "once at Thu 2026-12-03 09:00 CST (Asia/Shanghai)"
    assert describe(cron("0 18 * * 1-5", "Europe/Berlin")) == "cron 0 18 * * 1-5 (Europe/Berlin)"
    assert describe(Timing("every", "UTC", NOW, every_minutes=30)) == "every 30 min"


def test_the_hosts_zone_comes_from_tz_and_falls_back_to_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert host_timezone() == "Asia/Tokyo"
    monkeypatch.setenv("TZ", ":Europe/Berlin")
    assert host_timezone() == "Europe/Berlin"
    monkeypatch.setenv("TZ", "Not/AZone")
    assert host_timezone() != "Not/AZone"  # /etc/localtime's zone, else UTC
