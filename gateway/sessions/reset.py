"""When a conversation rolls over to a new session: the reset policy.

Modes: `none`, `idle` (no activity for `idle_minutes`), `daily` (the local clock passed
`daily_hour[:daily_minute]` in `timezone` since the last activity), `both` (whichever comes first).

Daily boundaries are computed in the configured IANA zone, so DST is honoured:
- on a spring-forward day a reset time inside the gap (02:30 when clocks jump 02:00 -> 03:00)
  happens once, at the first instant whose wall time is at or after it (the jump itself);
- on a fall-back day a reset time that occurs twice (01:30) happens once, at its first occurrence.
Both fall out of one rule: the boundary of a local date is the earliest instant whose local wall
clock reads at or after that date's reset time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from datetime import time as dtime
from typing import Any, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.language import _, n_

MODES = ("none", "idle", "daily", "both")
_POLICY_KEYS = ("mode", "idle_minutes", "daily_hour", "daily_minute", "timezone")


def _zone(name: str, key: str) -> ZoneInfo:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{key}: time zone must be an IANA name such as 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{key}: unknown time zone {name!r} (use an IANA name such as 'Asia/Shanghai')") from None


@dataclass(frozen=True)
class ResetPolicy:
    mode: str = "both"
    idle_minutes: float = 1440
    daily_hour: int = 4
    timezone: str = "UTC"
    daily_minute: int = 0
    # The config path used in error messages ("session.reset.by_platform.telegram").
    where: str = field(default="session.reset", compare=False, repr=False)

    def __post_init__(self) -> None:
        w = self.where
        if self.mode not in MODES:
            raise ValueError(f"{w}.mode: unknown mode {self.mode!r} (expected one of {', '.join(MODES)})")
        idle = self.idle_minutes
        if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle > 0:
            raise ValueError(f"{w}.idle_minutes: must be a positive number of minutes, got {idle!r}")
        hour = self.daily_hour
        if isinstance(hour, bool) or not isinstance(hour, int) or not 0 <= hour <= 23:
            raise ValueError(f"{w}.daily_hour: must be a whole hour from 0 to 23, got {hour!r}")
        minute = self.daily_minute
        if isinstance(minute, bool) or not isinstance(minute, int) or not 0 <= minute <= 59:
            raise ValueError(f"{w}.daily_minute: must be a whole minute from 0 to 59, got {minute!r}")
        object.__setattr__(self, "_tz", _zone(self.timezone, f"{w}.timezone"))

    @property
    def tz(self) -> ZoneInfo:
        return self._tz  # type: ignore[attr-defined]

    # -- daily boundaries ------------------------------------------------------------------------
    def _wall(self, instant: float) -> datetime:
        """Local wall-clock time of an instant, without zone (for comparing readings)."""
        return datetime.fromtimestamp(instant, self.tz).replace(tzinfo=None, fold=0)

    def boundary(self, day: date) -> float:
        """The instant of `day`'s reset: the earliest instant whose wall clock reads >= the reset time."""
        target = datetime.combine(day, dtime(self.daily_hour, self.daily_minute))
        candidates = sorted(target.replace(tzinfo=self.tz, fold=f).timestamp() for f in (0, 1))
        for instant in candidates:  # the time exists: its first occurrence
            if self._wall(instant) == target:
                return instant
        # Inside a DST gap: the wall clock jumps over `target` somewhere between the two
        # readings. Bisect to the second for the jump.
        lo, hi = candidates[0], candidates[1]
        while hi - lo > 0.5:
            mid = (lo + hi) / 2
            if self._wall(mid) >= target:
                hi = mid
            else:
                lo = mid
        return float(round(hi))

    def next_daily(self, after: float) -> float:
        """The first daily boundary strictly after `after`."""
        day = self._wall(after).date()
        for offset in (-1, 0, 1, 2):
            instant = self.boundary(day + timedelta(days=offset))
            if instant > after:
                return instant
        raise AssertionError("no daily boundary within two days")  # pragma: no cover

    # -- the policy ------------------------------------------------------------------------------
    def _due(self, last_active: float) -> list[tuple[float, str]]:
        due = []
        if self.mode in ("idle", "both"):
            due.append((last_active + float(self.idle_minutes) * 60, "idle"))
        if self.mode in ("daily", "both"):
            due.append((self.next_daily(last_active), "daily"))
        return sorted(due)

    def should_reset(self, last_active: float, now: float) -> str | None:
        """ "idle" or "daily" when the session last active at `last_active` is over at `now`.

        When both have passed, the reason is the one that came first.
        """
        for when, reason in self._due(last_active):
            if when <= now:
                return reason
        return None

    def next_reset(self, last_active: float, now: float) -> float | None:
        """When the session will be over (may be <= now: then the next message starts a new one)."""
        due = self.next_reset_why(last_active)
        return due[0] if due else None

    def next_reset_why(self, last_active: float) -> tuple[float, str] | None:
        """(when, "idle" | "daily") of the first reset due for a session last active then."""
        due = self._due(last_active)
        return due[0] if due else None

    def describe(self) -> str:
        """One line for `/whoami`, in the current language."""
        daily = {"time": f"{self.daily_hour:02d}:{self.daily_minute:02d}", "timezone": self.timezone}
        if self.mode == "none":
            return _("never resets on its own")
        if self.mode == "daily":
            return _("resets daily at {time} {timezone}", **daily)
        idle = _minutes_text(self.idle_minutes)
        if self.mode == "idle":
            return _("resets after {idle} idle", idle=idle)
        return _("resets after {idle} idle or daily at {time} {timezone}", idle=idle, **daily)


def _minutes_text(minutes: float) -> str:
    if minutes % 1440 == 0:
        return n_("{n} day", "{n} days", int(minutes // 1440))
    if minutes % 60 == 0:
        return n_("{n} hour", "{n} hours", int(minutes // 60))
    return _("{minutes} minutes", minutes=f"{minutes:g}")


def _policy_from(data: Any, base: ResetPolicy, where: str, extra_keys: tuple[str, ...] = ()) -> ResetPolicy:
    """A policy from a config mapping; unspecified keys inherit from `base`."""
    if data is None:
        return replace(base, where=where)
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: must be a mapping of reset settings, got {type(data).__name__}")
    unknown = set(data) - set(_POLICY_KEYS) - set(extra_keys)
    if unknown:
        raise ValueError(
            f"{where}.{sorted(map(str, unknown))[0]}: unknown setting (expected {', '.join(_POLICY_KEYS)})"
        )
    values = {k: data[k] for k in _POLICY_KEYS if k in data}
    if isinstance(values.get("daily_hour"), str):  # "02:30" is accepted as hour and minute
        text = values["daily_hour"].strip()
        try:
            hh, mm = text.split(":") if ":" in text else (text, "0")
            values["daily_hour"], values["daily_minute"] = int(hh), int(mm)
        except ValueError:
            raise ValueError(f"{where}.daily_hour: expected an hour (4) or a time ('04:30'), got {text!r}") from None
    if isinstance(values.get("mode"), str):
        values["mode"] = values["mode"].strip().lower()
    return replace(base, where=where, **values)


@dataclass(frozen=True)
class ResetPolicies:
    default: ResetPolicy = field(default_factory=ResetPolicy)
    # keys: a platform ("telegram") or a platform and chat type ("telegram:group")
    by_platform: dict[str, ResetPolicy] = field(default_factory=dict)
    by_chat_type: dict[str, ResetPolicy] = field(default_factory=dict)

    def for_source(self, source: Any) -> ResetPolicy:
        """platform+chat_type override > platform > chat_type > default."""
        platform = str(getattr(source.platform, "value", source.platform))
        chat_type = source.chat_type
        for policy in (
            self.by_platform.get(f"{platform}:{chat_type}"),
            self.by_platform.get(platform),
            self.by_chat_type.get(chat_type),
        ):
            if policy is not None:
                return policy
        return self.default

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, where: str = "session.reset") -> "ResetPolicies":
        """Build from the `session.reset` section of config.yaml:

        ```yaml
        session:
          reset:
            mode: both            # none | idle | daily | both
            idle_minutes: 1440
            daily_hour: 4         # or "04:30"
            timezone: Asia/Shanghai
            by_chat_type:
              group: {mode: idle, idle_minutes: 240}
            by_platform:
              discord:
                mode: idle
                by_chat_type:
                  thread: {mode: none}
        ```
        Overrides inherit what they do not set: a platform's from the default, a platform's chat
        type from that platform. A bad value raises ValueError naming its key.
        """
        section = {} if section is None else section
        if not isinstance(section, Mapping):
            raise ValueError(f"{where}: must be a mapping, got {type(section).__name__}")
        default = _policy_from(section, ResetPolicy(where=where), where, ("by_platform", "by_chat_type"))
        from gateway.source import CHAT_TYPES, Platform

        platforms = {p.value for p in Platform}

        def overrides(key: str, allowed: set[str] | tuple[str, ...]) -> dict[str, Any]:
            value = section.get(key) or {}
            if not isinstance(value, Mapping):
                raise ValueError(f"{where}.{key}: must be a mapping")
            for name in value:
                if name not in allowed:
                    raise ValueError(
                        f"{where}.{key}.{name}: unknown {key[3:].replace('_', ' ')} "
                        f"(expected one of {', '.join(sorted(allowed))})"
                    )
            return dict(value)

        by_chat_type = {
            ct: _policy_from(data, default, f"{where}.by_chat_type.{ct}")
            for ct, data in overrides("by_chat_type", CHAT_TYPES).items()
        }
        by_platform: dict[str, ResetPolicy] = {}
        for name, data in overrides("by_platform", platforms).items():
            pw = f"{where}.by_platform.{name}"
            policy = _policy_from(data, default, pw, ("by_chat_type",))
            by_platform[name] = policy
            nested = (data or {}).get("by_chat_type") or {}
            if not isinstance(nested, Mapping):
                raise ValueError(f"{pw}.by_chat_type: must be a mapping")
            for ct, sub in nested.items():
                if ct not in CHAT_TYPES:
                    raise ValueError(
                        f"{pw}.by_chat_type.{ct}: unknown chat type (expected one of {', '.join(CHAT_TYPES)})"
                    )
                by_platform[f"{name}:{ct}"] = _policy_from(sub, policy, f"{pw}.by_chat_type.{ct}")
        return cls(default, by_platform, by_chat_type)
