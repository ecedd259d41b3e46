"""The `schedules` config section, declared once as a frozen dataclass in the shape of an adapter's
settings (platforms/settings.py): the config schema can derive the section from it with
`fields_of`, and the tool, the commands and the due-run loop read the same typed values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from gateway.schedules.times import MISSED_POLICIES, Missed
from platforms.settings import setting, settings_from


@dataclass(frozen=True)
class ScheduleSettings:
    missed: Missed = setting(
        "run_once",
        "runs missed while the daemon was down: run_once (one late run, marked late) or skip",
        choices=MISSED_POLICIES,
    )
    max_per_person: int = setting(20, "how many unfinished scheduled jobs one person may have", minimum=1)
    min_interval_minutes: int = setting(5, "the shortest interval of a recurring job, in minutes", minimum=1)

    def __post_init__(self) -> None:
        # the config schema checks a loaded file; this catches a test's or a caller's typo too
        if self.missed not in MISSED_POLICIES:
            raise ValueError(f"schedules.missed must be one of {', '.join(MISSED_POLICIES)}, got {self.missed!r}")


def schedule_settings(section: Mapping[str, Any] | ScheduleSettings | None) -> ScheduleSettings:
    """The settings from the `schedules` section (missing keys take their defaults)."""
    return settings_from(ScheduleSettings, section, "schedules")
