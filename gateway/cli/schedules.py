"""`chinwag schedules list [--json] [--all] | cancel ID | run-now ID`: everyone's scheduled jobs, as
the operator (an admin) sees them (DESIGN §16).

`run-now` makes a job due now (and resumes it when paused): the running daemon's next poll (about a second) claims it like any
due run, so the run happens once, in its chat, whichever replica claims it. `list --json` prints
a JSON list of objects with id, owner, prompt, kind, the timing, next_run_at / last_run_at
(ISO-8601), runs, enabled and the chat (platform, chat id, session key); finished one-offs only
with --all.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from gateway.cli.store import CliError, guarded, open_store, print_json, usage
from gateway.schedules.model import Schedule, normalize_id, public_view, summary
from gateway.schedules.store import FaceScheduleStore


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("schedules", help="list, cancel or run now the scheduled jobs (everyone's)")
    cmds = parser.add_subparsers(dest="schedules_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda args: usage(parser))
    p = cmds.add_parser("list", help="every scheduled job, by next run")
    p.add_argument("--json", action="store_true", help="a JSON list of objects")
    p.add_argument("--all", action="store_true", help="finished one-off jobs too")
    p.set_defaults(handler=guarded(cmd_list), sessions_command="schedules list")  # guarded's error prefix
    for name, text, handler in (
        ("cancel", "delete a job", cmd_cancel),
        ("run-now", "make a job due now (the running daemon runs it within seconds)", cmd_run_now),
    ):
        p = cmds.add_parser(name, help=text)
        p.add_argument("id", metavar="ID")
        p.set_defaults(handler=guarded(handler), sessions_command=f"schedules {name}")


def cmd_list(args: argparse.Namespace) -> int:
    with open_store(args) as (_, db, _mirrors):
        jobs = FaceScheduleStore(db).list_all(include_finished=args.all)
    if args.json:
        print_json([public_view(job) for job in jobs])
    elif not jobs:
        print("no scheduled jobs")
    else:
        for job in jobs:
            print(f"{summary(job)} · {job.owner}")
    return 0


def _job(store: FaceScheduleStore, typed: str) -> Schedule:
    schedule_id = normalize_id(typed)
    job = store.get(schedule_id) if schedule_id else None
    if job is None:
        raise CliError(f"no scheduled job {typed!r} (chinwag schedules list shows them)")
    return job


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_store(args) as (_, db, _mirrors):
        store = FaceScheduleStore(db)
        job = _job(store, args.id)
        store.cancel(job.id)
    print(f"cancelled {job.id}")
    return 0


def cmd_run_now(args: argparse.Namespace) -> int:
    with open_store(args) as (_, db, _mirrors):
        store = FaceScheduleStore(db)
        job = _job(store, args.id)
        store.set_enabled(job.id, True, datetime.now(timezone.utc))  # a paused job is resumed by it
    print(f"{job.id} is due now: the running daemon runs it within seconds")
    return 0
