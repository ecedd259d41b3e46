"""`/schedules`: a person's scheduled jobs in the chat (DESIGN §16): the list (id, what, next run),
and `cancel`, `pause`, `resume` by id. A person acts on their own jobs; an admin on anyone's.

A resume starts from now (next_run_after the resume), so the runs a pause skipped are not "missed"
runs that would fire late at once. The jobs are made by the agent's `schedule` tool
(tools/schedule.py); their table is gateway/schedules/store.py's over the storage face.
"""

from __future__ import annotations

import asyncio

from gateway.commands.context import CommandContext
from gateway.language import N_, _
from gateway.schedules.clock import utc_now
from gateway.schedules.model import Schedule, normalize_id, owner_of, summary
from gateway.schedules.store import FaceScheduleStore
from gateway.schedules.times import next_run_after

USAGE = N_("Usage: /schedules, or /schedules cancel|pause|resume ID")


async def cmd_schedules(ctx: CommandContext) -> str:
    store = FaceScheduleStore(ctx.services.db)
    try:
        owner = owner_of(ctx.source)
    except ValueError:
        return _("Scheduled jobs belong to a person; this chat has none.")
    words = ctx.args.split()
    if not words:
        jobs = await asyncio.to_thread(store.list_for_owner, owner)
        if not jobs:
            return _("You have no scheduled jobs. Ask me, e.g. “remind me tomorrow at 9 to call Mia”.")
        return _("Your scheduled jobs:\n{jobs}", jobs="\n".join(summary(job) for job in jobs))
    if len(words) != 2 or words[0] not in ("cancel", "pause", "resume"):
        return _(USAGE)
    action, typed = words
    schedule_id = normalize_id(typed)
    job = await asyncio.to_thread(store.get, schedule_id) if schedule_id else None
    if job is None or (job.owner != owner and not ctx.is_admin):
        return _("You have no scheduled job “{id}” (/schedules lists yours).", id=typed)
    if action == "cancel":
        await asyncio.to_thread(store.cancel, job.id)
        return _("Cancelled {id}: {prompt}", id=job.id, prompt=job.prompt[:120])
    return await _set_enabled(ctx, store, job, action == "resume")


async def _set_enabled(ctx: CommandContext, store: FaceScheduleStore, job: Schedule, enabled: bool) -> str:
    if enabled:
        next_run = next_run_after(job.timing, utc_now(ctx.services.wall_clock))
        if next_run is None:
            return _("{id} was a one-off whose time has passed; nothing to resume.", id=job.id)
    else:
        next_run = job.next_run_at
    changed = await asyncio.to_thread(store.set_enabled, job.id, enabled, next_run)
    if changed is None:
        return _("{id} is gone (cancelled meanwhile).", id=job.id)
    return _("Resumed: {job}", job=summary(changed)) if enabled else _("Paused: {job}", job=summary(changed))
