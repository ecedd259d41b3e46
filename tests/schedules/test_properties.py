"""Properties of `next_run_after` over random instants (weighted to DST changes), zones and
expressions: the next run is always strictly after now, and a cron job's next run is the first
instant whose wall clock in the job's zone matches the expression, by an oracle written from the
expression's fields minute by minute, independent of croniter."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.schedules.times import Timing, next_run_after

UTC = timezone.utc
# Each zone with its DST changes of 2026 (Lord Howe moves by 30 minutes; Kathmandu and Shanghai have
# none, Kathmandu's offset is +05:45).
CHANGES: dict[str, list[datetime]] = {
    "Europe/Berlin": [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)],
    "America/New_York": [datetime(2026, 3, 8, 7, tzinfo=UTC), datetime(2026, 11, 1, 6, tzinfo=UTC)],
    "Australia/Lord_Howe": [datetime(2026, 4, 4, 15, tzinfo=UTC), datetime(2026, 10, 3, 15, 30, tzinfo=UTC)],
    "Asia/Kathmandu": [],
    "Asia/Shanghai": [],
    "UTC": [],
}
ZONES = list(CHANGES)

anywhere = st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC))


@st.composite
def zone_and_now(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and an instant: mostly within 90 minutes of one of the zone's DST changes, else anywhere."""
    zone = draw(st.sampled_from(ZONES))
    changes = CHANGES[zone]
    if changes and draw(st.integers(0, 3)) > 0:
        near = draw(st.sampled_from(changes)) + timedelta(minutes=draw(st.integers(-90, 90)))
        return zone, near + timedelta(seconds=draw(st.sampled_from([0, 1, 59])))
    return zone, draw(anywhere)


@st.composite
def cron_fields(draw: st.DrawFn) -> tuple[str, set[int], set[int] | None, set[int] | None]:
    """(expression, minutes, hours or None for `*`, weekdays or None for `*`)."""
    minutes = sorted(draw(st.sets(st.sampled_from(range(0, 60, 5)), min_size=1, max_size=4)))
    hours = draw(st.one_of(st.none(), st.sets(st.integers(0, 23), min_size=1, max_size=5)))
    weekdays = draw(st.one_of(st.none(), st.just({1, 2, 3, 4, 5}), st.just({0, 6})))
    gaps = [b - a for a, b in zip(minutes, minutes[1:])] + [60 - minutes[-1] + minutes[0]]
    if min(gaps) < 5:  # what validation would refuse
        minutes = minutes[:1]
    fields = [
        ",".join(map(str, minutes)),
        "*" if hours is None else ",".join(map(str, sorted(hours))),
        "*",
        "*",
        "*" if weekdays is None else ",".join(map(str, sorted(weekdays))),
    ]
    return " ".join(fields), set(minutes), hours, weekdays


def matches(wall: datetime, minutes: set[int], hours: set[int] | None, weekdays: set[int] | None) -> bool:
    return (
        wall.minute in minutes
        and (hours is None or wall.hour in hours)
        and (weekdays is None or wall.isoweekday() % 7 in weekdays)
    )


def fires_at(instant: datetime, zone: ZoneInfo, fields: tuple[str, set[int], set[int] | None, set[int] | None]) -> bool:
    """The oracle: does the job run at this whole-minute instant?"""
    _, minutes, hours, weekdays = fields
    wall = instant.astimezone(zone)
    naive = wall.replace(tzinfo=None, fold=0)
    if matches(naive, minutes, hours, weekdays):
        # the second pass of a repeated hour runs only jobs that run every hour
        return wall.fold == 0 or hours is None
    # a wall time skipped by a spring-forward runs at the instant it reads as with the old offset
    jump = (instant.astimezone(zone).utcoffset() or timedelta(0)) - (
        (instant - timedelta(hours=3)).astimezone(zone).utcoffset() or timedelta(0)
    )
    if jump <= timedelta(0):
        return False
    skipped = naive - jump
    in_gap = skipped.replace(tzinfo=zone, fold=0).utcoffset() != skipped.replace(tzinfo=zone, fold=1).utcoffset()
    return (
        in_gap
        and skipped.replace(tzinfo=zone).astimezone(UTC) == instant
        and matches(skipped, minutes, hours, weekdays)
    )


@settings(max_examples=300, deadline=None)
@given(where=zone_and_now(), kind=st.sampled_from(["once", "cron", "every"]), n=st.integers(5, 10_000))
def test_the_next_run_is_always_strictly_after_now(where: tuple[str, datetime], kind: str, n: int) -> None:
    zone, now = where
    since = now - timedelta(minutes=n * 7 + 3)
    timing = {
        "once": Timing("once", zone, since, at=now + timedelta(minutes=n)),
        "cron": Timing("cron", zone, since, cron=f"{n % 60} {n % 24} * * *"),
        "every": Timing("every", zone, since, every_minutes=n),
    }[kind]
    nxt = next_run_after(timing, now)
    assert nxt is not None and nxt > now and nxt.utcoffset() == timedelta(0)
    assert next_run_after(timing, nxt) != nxt


@settings(max_examples=150, deadline=None)
@given(where=zone_and_now(), fields=cron_fields())
def test_a_cron_run_is_the_first_instant_matching_the_expression_in_local_time(
    where: tuple[str, datetime], fields: tuple[str, set[int], set[int] | None, set[int] | None]
) -> None:
    zone, now = where
    tz = ZoneInfo(zone)
    nxt = next_run_after(Timing("cron", zone, now, cron=fields[0]), now)
    assert nxt is not None and nxt > now
    assert nxt.second == 0 and nxt.microsecond == 0
    assert fires_at(nxt, tz, fields), f"{fields[0]} in {zone}: {nxt.astimezone(tz)} does not match"
    minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while minute < nxt:  # no matching instant was passed over
        assert not fires_at(minute, tz, fields), f"{fields[0]} in {zone}: skipped {minute.astimezone(tz)}"
        minute += timedelta(minutes=1)
