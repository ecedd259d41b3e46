"""The `schedule` tool: the agent makes, lists and cancels a person's scheduled turns ("remind me
tomorrow at 9", "every weekday at 18:00 summarise this group").

Arguments, exactly: `{"action": "create", "prompt", "at" | "cron" | "every_minutes", "timezone"}`,
`{"action": "list"}`, `{"action": "cancel", "id"}`. A job belongs to the person who asked and runs
in the chat it was asked in (its session key, which the turn hands over as `ctx.session_key`). Times are
checked by gateway.schedules.times and shown back in the job's zone (the person's, else the
configured default, else the host's), so the model can repeat the answer verbatim and the person
sees their own clock. Limits come from `schedules` in config (max_per_person, min_interval_minutes);
the per-person count is enforced by the store's insert, so two concurrent creates cannot pass it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent.tools import Tool, ToolContext
from gateway.schedules.clock import SystemWallClock, WallClock, utc_now
from gateway.schedules.model import (
    ChatRef,
    IdTaken,
    Schedule,
    ScheduleStore,
    new_id,
    normalize_id,
    owner_of,
    summary,
)
from gateway.schedules.settings import ScheduleSettings
from gateway.schedules.times import ScheduleError, describe, host_timezone, local_text, next_run_after, parse_timing

MAX_PROMPT_CHARS = 2000  # a scheduled prompt is an instruction, not a document
_ID_DRAWS = 5  # a draw hits one of N stored ids with chance N / 32^6 (~N / 10^9): five never all do

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["create", "list", "cancel"]},
        "prompt": {
            "type": "string",
            "description": "create: what to do when the job runs, written as the person's request "
            "(e.g. 'Remind me to call the dentist', 'Summarise today's messages in this group')",
        },
        "at": {
            "type": ["string", "null"],
            "description": "create, one-off: ISO-8601 instant WITH offset, e.g. 2026-12-03T09:00:00+08:00",
        },
        "cron": {
            "type": ["string", "null"],
            "description": "create, recurring: 'minute hour day-of-month month day-of-week' in the time zone, "
            "e.g. '0 18 * * 1-5' = weekdays 18:00",
        },
        "every_minutes": {"type": ["integer", "null"], "description": "create, recurring: every N minutes"},
        "timezone": {
            "type": ["string", "null"],
            "description": "create: IANA zone of the person, e.g. Asia/Shanghai (default: the configured one)",
        },
        "id": {"type": "string", "description": "cancel: the job's id, as list shows it"},
    },
    "required": ["action"],
}

DESCRIPTION = (
    "Schedule a turn to run later in this chat: at the time, the prompt arrives as the person's "
    "message and your answer is sent here. create: prompt and exactly one of at (one-off), cron or "
    "every_minutes (recurring); timezone when the person's is known. list: the person's jobs. "
    "cancel: id. Tell the person the id and the next run exactly as returned."
)


def make_schedule_tool(
    store: ScheduleStore,
    settings: ScheduleSettings | None = None,
    clock: WallClock | None = None,
    default_timezone: str | None = None,
) -> Tool:
    """The tool over `store`. `default_timezone` (config `session.reset.timezone`) is used when the
    model gives none; else the host's zone. The job answers in the conversation of
    `ctx.session_key`."""
    limits = settings or ScheduleSettings()
    time_source = clock or SystemWallClock()
    fallback_zone = default_timezone or host_timezone()

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        action = args.get("action")
        source, session_key = ctx.source, ctx.session_key
        if source is None or not source.person_id or session_key is None:
            return "error: scheduling needs a person in a chat; it is not available here"
        owner = owner_of(source)
        if action == "create":
            chat = ChatRef(source, session_key)
            return await asyncio.to_thread(_create, store, limits, time_source, fallback_zone, owner, chat, args)
        if action == "list":
            return await asyncio.to_thread(_list, store, owner)
        if action == "cancel":
            return await asyncio.to_thread(_cancel, store, owner, args.get("id"))
        return f"error: action must be create, list or cancel, got {action!r}"

    return Tool(name="schedule", description=DESCRIPTION, parameters=PARAMETERS, handler=handler)


def _create(
    store: ScheduleStore,
    limits: ScheduleSettings,
    clock: WallClock,
    fallback_zone: str,
    owner: str,
    chat: ChatRef,
    args: dict[str, Any],
) -> str:
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "error: prompt must be a non-empty string: what to do when the job runs"
    if len(prompt) > MAX_PROMPT_CHARS:
        return f"error: prompt too long ({len(prompt)} chars, max {MAX_PROMPT_CHARS}); make it shorter"
    now = utc_now(clock)
    try:
        timing = parse_timing(
            at=args.get("at"),
            cron=args.get("cron"),
            every_minutes=args.get("every_minutes"),
            timezone_name=args.get("timezone") or fallback_zone,
            now=now,
            min_interval_minutes=limits.min_interval_minutes,
        )
    except ScheduleError as exc:
        return f"error: {exc}"
    next_run = next_run_after(timing, now)
    assert next_run is not None, "a checked timing has a run after now"
    for _ in range(_ID_DRAWS):
        job = Schedule.new(new_id(), owner, chat, timing, prompt.strip(), next_run)
        try:
            created = store.create(job, limits.max_per_person)
        except IdTaken:
            continue
        if not created:
            return (
                f"error: you already have {limits.max_per_person} scheduled jobs (the limit); "
                "cancel one first (action list shows them)"
            )
        return f"scheduled {job.id}: {describe(timing)}; next run {local_text(next_run, timing.timezone)}"
    raise RuntimeError("no free schedule id after several draws")


def _list(store: ScheduleStore, owner: str) -> str:
    jobs = store.list_for_owner(owner)
    if not jobs:
        return "no scheduled jobs"
    return "\n".join(summary(job) for job in jobs)


def _cancel(store: ScheduleStore, owner: str, typed: Any) -> str:
    schedule_id = normalize_id(typed)
    job = store.get(schedule_id) if schedule_id is not None else None
    if job is None or job.owner != owner:
        return f"error: you have no scheduled job {typed!r} (action list shows your jobs)"
    store.cancel(job.id)
    return f"cancelled {job.id}: {describe(job.timing)} · {job.prompt[:120]}"
