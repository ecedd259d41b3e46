"""When a scheduled job runs: the three kinds of timing, their validation, the next run after an
instant, and what a due run does when it comes late.

Kinds: `once` at an instant (ISO-8601 with an offset, so "9:00" is never read in the wrong zone),
`cron` "m h dom mon dow" read on the wall clock of an IANA zone (croniter expands the expression,
zoneinfo maps wall times to instants), and `every` N minutes, which counts real elapsed minutes
from the job's creation (a DST change does not stretch or shrink an interval).

Wall clocks jump twice a year, and a cron job must neither vanish nor double:
- spring forward (Europe/Berlin 02:00 -> 03:00): a wall time in the gap is read with the offset
  before the jump (PEP 495 `fold=0`), so a 02:30 daily job runs once, at 03:30 of the new time;
  an hourly job whose 02:30 and 03:30 land on the same instant runs once there.
- fall back (03:00 -> 02:00): a wall time that happens twice runs at its first occurrence only, as
  Vixie cron does; a job that fires every hour (hour field `*`) also runs in the repeated hour,
  since its person expects it hourly.
croniter's own zone handling runs a 02:30 job twice on a fall-back day (7.0.0, started in Berlin
on 2026-10-24: 02:30+02:00, then 02:30+01:00) and at 03:00 on a spring-forward day, so it is only
asked for naive wall times here, and the mapping to instants is ours.

A run is late when it is claimed more than LATE_AFTER past its time (the daemon was down or
stopped): `missed: run_once` runs it once, marked late, and however many runs were missed the next
one is the first future one; `missed: skip` drops it and goes straight to the next.

`local_text` and `describe` are what the person reads (in /schedules and, through the model, the
tool's answers), so they speak the current language (gateway.language); outside a message's scope
(the CLI, the due-run marker) that is English. ScheduleError texts are read by the model: English.
"""

from __future__ import annotations

import difflib
import functools
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from gateway.language import N_, _

Kind = Literal["once", "cron", "every"]
Missed = Literal["run_once", "skip"]
MISSED_POLICIES: tuple[Missed, ...] = ("run_once", "skip")

# A due-run loop polls about once a second; a run claimed a minute after its time was missed (the
# daemon was down), not merely queued behind another.
LATE_AFTER = timedelta(minutes=1)
MAX_EVERY_MINUTES = 366 * 24 * 60  # a yearly reminder is the longest interval anyone asks for
# A DST change moves the wall clock by at most 2 h (1 h almost everywhere); 3 h covers any of them.
_DST_SPAN = timedelta(hours=3)
# Gaps between the first runs of a cron expression tell its shortest interval: any gap inside an
# hour shows within its first 60 runs, and those across hour and day edges soon after.
_GAP_SAMPLES = 100


class ScheduleError(ValueError):
    """A timing that cannot be scheduled; the message is meant for the model and the person."""


@dataclass(frozen=True)
class Timing:
    """When a job runs. Exactly one of `at` (kind once), `cron` (kind cron), `every_minutes` (kind
    every) is set; `since` is when the job was made: an `every` job runs at since + k * N minutes."""

    kind: Kind
    timezone: str
    since: datetime
    at: datetime | None = None
    cron: str | None = None
    every_minutes: int | None = None


@dataclass(frozen=True)
class RunPlan:
    """What a claim does with a due run: start it (`run`), flagged `late` when it was missed, and
    move the job on to `next_run_at` (None: a one-off job is finished)."""

    due_at: datetime
    run: bool
    late: bool
    next_run_at: datetime | None


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; ScheduleError naming close names when there is none."""
    if not isinstance(name, str):  # the model's arguments are JSON: anything may come
        raise ScheduleError(f"timezone must be an IANA name such as Asia/Shanghai, got {name!r}")
    if name not in _zone_names():
        close = difflib.get_close_matches(name, _zone_names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else " (an IANA name such as Asia/Shanghai)"
        raise ScheduleError(f"unknown time zone {name!r}{hint}")
    return ZoneInfo(name)


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def host_timezone() -> str:
    """The host's IANA zone name: $TZ, else where /etc/localtime points, else UTC."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        candidates.append(os.readlink("/etc/localtime").partition("zoneinfo/")[2])
    except OSError:
        pass
    return next((name for name in candidates if name in _zone_names()), "UTC")


def parse_timing(
    *,
    at: str | None,
    cron: str | None,
    every_minutes: int | None,
    timezone_name: str,
    now: datetime,
    min_interval_minutes: int,
) -> Timing:
    """The timing a person asked for, checked: exactly one of at/cron/every_minutes, a known zone,
    `at` with an offset and in the future, a cron of five fields that fires and fires no more often
    than `min_interval_minutes`, an interval of at least that. Raises ScheduleError."""
    _aware(now)
    given = [
        name for name, value in (("at", at), ("cron", cron), ("every_minutes", every_minutes)) if value is not None
    ]
    if len(given) != 1:
        which = f"got {' and '.join(given)}" if given else "got none"
        raise ScheduleError(f"give exactly one of at, cron or every_minutes ({which})")
    tz = zone(timezone_name)
    if at is not None:
        return Timing("once", timezone_name, now, at=_parse_at(at, now))
    if cron is not None:
        expression = _check_cron(cron, tz, now, min_interval_minutes)
        return Timing("cron", timezone_name, now, cron=expression)
    return Timing("every", timezone_name, now, every_minutes=_check_every(every_minutes, min_interval_minutes))


def _parse_at(text: object, now: datetime) -> datetime:
    if not isinstance(text, str):
        raise ScheduleError(f"at must be an ISO-8601 string such as 2026-12-03T09:00:00+08:00, got {text!r}")
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(f"at {text!r} is not ISO-8601 (e.g. 2026-12-03T09:00:00+08:00)") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ScheduleError(f"at {text!r} has no UTC offset; add one, e.g. {when.isoformat()}+08:00")
    when = when.astimezone(timezone.utc)
    if when <= now:
        raise ScheduleError(f"at {text!r} is in the past (now is {now.isoformat(timespec='seconds')})")
    return when


def _check_every(minutes: object, minimum: int) -> int:
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        raise ScheduleError(f"every_minutes must be a whole number of minutes, got {minutes!r}")
    if minutes < minimum:
        raise ScheduleError(f"every_minutes must be at least {minimum}, got {minutes}")
    if minutes > MAX_EVERY_MINUTES:
        raise ScheduleError(f"every_minutes must be at most {MAX_EVERY_MINUTES} (a year), got {minutes}")
    return minutes


def _check_cron(expression: object, tz: ZoneInfo, now: datetime, minimum: int) -> str:
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise ScheduleError(
            f'cron must be five fields "minute hour day-of-month month day-of-week" (e.g. "0 18 * * 1-5"), got {expression!r}'
        )
    expression = " ".join(expression.split())
    wall = now.astimezone(tz).replace(tzinfo=None)
    try:
        runs = croniter(expression, wall)
        times = [runs.get_next(datetime) for _ in range(_GAP_SAMPLES)]
    except CroniterBadDateError:
        raise ScheduleError(f"cron {expression!r} never fires (no such date)") from None
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise ScheduleError(f"cron {expression!r} is not valid: {exc}") from None
    shortest = min(later - earlier for earlier, later in zip(times, times[1:]))
    if shortest < timedelta(minutes=minimum):
        raise ScheduleError(
            f"cron {expression!r} fires every {int(shortest.total_seconds() // 60)} min; the minimum is {minimum}"
        )
    return expression


def next_run_after(timing: Timing, now: datetime) -> datetime | None:
    """The first run strictly after `now` (aware, returned in UTC); None: a one-off whose time
    has passed."""
    _aware(now)
    if timing.kind == "once":
        assert timing.at is not None
        return timing.at.astimezone(timezone.utc) if timing.at > now else None
    if timing.kind == "every":
        assert timing.every_minutes is not None
        step = timedelta(minutes=timing.every_minutes)
        steps = max(1, (now - timing.since) // step + 1)
        return (timing.since + steps * step).astimezone(timezone.utc)
    assert timing.cron is not None
    return _cron_next(timing.cron, ZoneInfo(timing.timezone), now)


def _cron_next(expression: str, tz: ZoneInfo, now: datetime) -> datetime:
    """Walk the expression's naive wall times and map each to its instants; the earliest instant
    after `now` wins. Near a DST change, wall times before the clock at `now` can name later
    instants (a repeated hour's second pass just before a fall-back; a skipped time, read with the
    old offset, just after a spring-forward) and a later wall time an earlier instant, so there the
    walk starts a DST span earlier and goes on a span past the best; elsewhere the first is the one
    (walking the spans always cost a */5 job 72 croniter steps instead of 1)."""
    wall = now.astimezone(tz).replace(tzinfo=None, fold=0)
    if _dst_change_near(tz, now):
        wall -= _DST_SPAN
    runs = croniter(expression, wall)
    every_hour = runs.expanded[1] == ["*"] or set(runs.expanded[1]) == set(range(24))
    best: datetime | None = None
    best_wall = wall
    while True:
        candidate = runs.get_next(datetime)
        if best is not None and (candidate > best_wall + _DST_SPAN or not _dst_change_near(tz, best)):
            return best
        for instant in _instants(candidate, tz, every_hour):
            if instant > now and (best is None or instant < best):
                best, best_wall = instant, candidate


def _dst_change_near(tz: ZoneInfo, instant: datetime) -> bool:
    """Whether `tz` changes its offset within a DST span of `instant`."""
    offsets = {(instant + shift).astimezone(tz).utcoffset() for shift in (-_DST_SPAN, timedelta(0), _DST_SPAN)}
    return len(offsets) > 1


def _instants(wall: datetime, tz: ZoneInfo, every_hour: bool) -> list[datetime]:
    """The instants a naive wall time names in `tz`: one; in a spring-forward gap the one read with
    the offset before the jump; in a fall-back overlap the first, and the second too for a job that
    fires every hour."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    instants = [first.astimezone(timezone.utc)]
    if every_hour and (first.utcoffset() or timedelta(0)) > (second.utcoffset() or timedelta(0)):
        instants.append(second.astimezone(timezone.utc))
    return instants


def plan_run(timing: Timing, due_at: datetime, now: datetime, missed: Missed) -> RunPlan:
    """What claiming a run due at `due_at` does at `now`: on time, it runs; late, it runs once
    flagged (`run_once`) or not at all (`skip`); either way the job moves to its first run after
    `now`, so any number of missed runs collapse into at most one."""
    _aware(now)
    late = now - due_at > LATE_AFTER
    return RunPlan(due_at, run=not late or missed == "run_once", late=late, next_run_at=next_run_after(timing, now))


# the weekday by number, Monday first; not strftime's %a, which is the C locale's English
WEEKDAYS = (N_("Mon"), N_("Tue"), N_("Wed"), N_("Thu"), N_("Fri"), N_("Sat"), N_("Sun"))


def local_text(instant: datetime, timezone_name: str) -> str:
    """An instant as a person in `timezone_name` reads it: "Thu 2026-12-03 09:00 CST (Asia/Shanghai)"."""
    local = instant.astimezone(ZoneInfo(timezone_name))
    return _(
        "{weekday} {date} {time} {zone} ({timezone})",
        weekday=_(WEEKDAYS[local.weekday()]),
        date=local.strftime("%Y-%m-%d"),
        time=local.strftime("%H:%M"),
        zone=local.strftime("%Z"),
        timezone=timezone_name,
    )


def describe(timing: Timing) -> str:
    """The timing in a few words: "once at …", "cron 0 18 * * 1-5 (Asia/Shanghai)", "every 30 min"."""
    if timing.kind == "once":
        assert timing.at is not None
        return _("once at {when}", when=local_text(timing.at, timing.timezone))
    if timing.kind == "cron":
        return _("cron {cron} ({timezone})", cron=timing.cron, timezone=timing.timezone)
    return _("every {n} min", n=timing.every_minutes)


def _aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime (UTC)")
