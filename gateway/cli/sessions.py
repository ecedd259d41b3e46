"""`chinwag sessions list|show|search|stats|embed|delete|rename|prune|repair` (and, from
gateway/cli/transfer.py, export|import|migrate).

Readable tables by default, `--json` for scripts. Bad input gets a one-line error naming what is
wrong and exit code 2, and changes nothing (gateway/cli/store.py). This module is argparse and
printing only: what it reads and writes goes through StorageFace.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from agent.transcript import tool_calls_for_person
from gateway.cli import transfer
from gateway.cli.format import Progress, ago, fmt_time, human_bytes, table
from gateway.cli.store import (
    CliError,
    NoData,
    check_source,
    find_session,
    guarded,
    open_store,
    positive_int,
    print_json,
    usage,
)
from gateway.commands.context import cut_notice, numeric_title_refusal
from gateway.db import StorageFace, TitleTaken, sanitize_title
from gateway.recall import find_sessions

SESSION_REF = "session id, unique id prefix, the hex end of an id, or title (or a unique part of it)"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sessions", help="list, search, export, import and maintain stored sessions")
    cmds = parser.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda args: usage(parser))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")

    p = cmds.add_parser("list", parents=[common], help="sessions by last activity")
    p.add_argument("--source", help="only this platform (telegram, feishu, discord, local, tool)")
    p.add_argument("--user", help="only sessions this person started or took part in")
    p.add_argument("--limit", type=positive_int, default=20)
    p.set_defaults(handler=guarded(cmd_list))

    p = cmds.add_parser("show", parents=[common], help="one session and its messages")
    p.add_argument("id", metavar="ID", help=SESSION_REF)
    p.add_argument("--all", action="store_true", help="include hidden (undone/retried/compacted) messages")
    p.set_defaults(handler=guarded(cmd_show))

    p = cmds.add_parser("search", parents=[common], help="find the sessions a query is about")
    p.add_argument("query", nargs="+", metavar="QUERY", help="the words to look for (as /search takes them)")
    p.add_argument("--limit", type=positive_int, default=5)
    p.add_argument("--user", help="only sessions this person took part in")
    p.set_defaults(handler=guarded(cmd_search))

    transfer.add_commands(cmds, common)

    p = cmds.add_parser("delete", parents=[common], help="delete a session and its messages")
    p.add_argument("id", metavar="ID", help=SESSION_REF)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed when not on a terminal)")
    p.add_argument("--include-current", action="store_true", help="also when a chat is still in it")
    p.set_defaults(handler=guarded(cmd_delete))

    p = cmds.add_parser("rename", parents=[common], help="set a session's title")
    p.add_argument("id", metavar="ID", help=SESSION_REF)
    p.add_argument("title", nargs="+", metavar="TITLE", help="the new title (at most 100 characters, not only digits)")
    p.set_defaults(handler=guarded(cmd_rename))

    p = cmds.add_parser("prune", parents=[common], help="delete sessions idle for more than DAYS days")
    p.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    p.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    p.add_argument("--include-current", action="store_true", help="also delete sessions a chat is still in")
    p.set_defaults(handler=guarded(cmd_prune))

    p = cmds.add_parser("repair", parents=[common], help="rebuild sessions/*.jsonl and sessions.json from the DB")
    p.set_defaults(handler=guarded(cmd_repair))

    p = cmds.add_parser("stats", parents=[common], help="counts and sizes")
    p.set_defaults(handler=guarded(cmd_stats))

    p = cmds.add_parser("embed", parents=[common], help="embed what recall's semantic stage has not seen yet")
    p.set_defaults(handler=guarded(cmd_embed))


# -- read commands -----------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    try:
        with open_store(args) as (_, db, _m):
            check_source(db, args.source)
            rows = db.list_sessions_rich(source=args.source, user_id=args.user, limit=args.limit)
            total = db.count_sessions()
    except NoData as exc:
        if not args.json:
            raise
        # no data is no sessions: a script reads an empty list; the status stays that of no data
        print_json([])
        print(f"list: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no sessions" + (" match" if args.source or args.user else " yet"))
        return 0
    now = time.time()
    print(
        table(
            ["ID", "TITLE", "SOURCE", "USER", "MSGS", "LAST ACTIVE", "PREVIEW"],
            [
                [
                    r["id"],
                    r["title"] or "",
                    r["source"],
                    r["user_id"] or "",
                    "summ." if r.get("end_reason") == "compressed" else r["message_count"],  # (0 left: in the summary)
                    ago(r["last_active_at"], now),
                    r["preview"] or "",
                ]
                for r in rows
            ],
            [24, 30, 8, 16, 5, 10, 60],
        )
    )
    if len(rows) == args.limit and total > len(rows) and not (args.source or args.user):
        print(f"({len(rows)} of {total} sessions; --limit N for more)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_store(args) as (_, db, _m):
        session = find_session(db, args.id)
        record = db.export_session(session["id"])
    if args.json:
        if not args.all:
            record["messages"] = [m for m in record["messages"] if m.get("active", 1)]
        print_json(record)
        return 0
    for label, value in _session_facts(record["session"]):
        print(f"{label:>12}: {value}")
    hidden = sum(1 for m in record["messages"] if not m.get("active", 1))
    if hidden and not args.all:
        print(f"{'':>12}  ({hidden} hidden message(s); --all to show them)")
    print()
    for m in record["messages"]:
        if m.get("active", 1) or args.all:
            print(_message_line(m))
    return 0


def _session_facts(s: dict[str, Any]) -> list[tuple[str, str]]:
    """What `sessions show` says of a session, label by label."""
    ended = f"{fmt_time(s['ended_at'])} ({s['end_reason']})" if s.get("ended_at") else "no (current or resumable)"
    return [
        ("id", s["id"]),
        ("title", s.get("title") or "-"),
        ("source", s["source"]),
        ("user", s.get("user_id") or "-"),
        ("chat", " ".join(filter(None, [s.get("chat_type"), s.get("chat_name")])) or "-"),
        ("key", s.get("session_key") or "-"),
        ("started", fmt_time(s["started_at"])),
        ("last active", f"{fmt_time(s['last_active_at'])} ({ago(s['last_active_at'])})"),
        ("ended", ended),
        ("parent", s.get("parent_session_id") or "-"),
        ("messages", str(s["message_count"])),
        ("tokens", f"{s.get('input_tokens') or 0} in / {s.get('output_tokens') or 0} out"),
    ]


def _message_line(m: dict[str, Any]) -> str:
    """One message of `sessions show`: when, who, whether hidden, its text and the tools it called."""
    flag = "" if m.get("active", 1) else (" [compacted]" if m.get("compacted") else " [undone]")
    body = m.get("content") or ""
    if m.get("tool_calls"):
        names = [call["name"] for call in tool_calls_for_person(m["tool_calls"])]
        body = (body + " " if body else "") + f"[calls {', '.join(names)}]"
    role = m["role"] + (f" ({m['tool_name']})" if m.get("tool_name") else "")
    return f"[{fmt_time(m.get('timestamp'))}] {role}{flag}: {body}"


def _embedder(args: argparse.Namespace) -> Any:
    """The embedder the config names (what the daemon ranks with), or None when embeddings are off
    or the config cannot be read (recall is then lexical, as it is in the daemon)."""
    from gateway.config.load import ConfigError, load_config
    from gateway.embeddings import EmbeddingSettings, EmbeddingUnavailable, make_embedder

    try:
        config = load_config(getattr(args, "config", None), getattr(args, "home", None))
    except (ConfigError, OSError, ValueError):
        return None
    if not config.embeddings.enabled:
        return None
    try:
        return make_embedder(EmbeddingSettings.from_config(config))
    except EmbeddingUnavailable as exc:
        raise CliError(str(exc)) from None


def _search_hits(db: StorageFace, query: str, limit: int, user: str | None, embedder: Any = None) -> list[dict]:
    hits = find_sessions(db, query, limit=limit, person_id=user, see_all=user is None, embedder=embedder)
    return [h.as_dict() for h in hits]


def cmd_search(args: argparse.Namespace) -> int:
    query = " ".join(" ".join(args.query).split())
    if not query:
        raise CliError("give words to search for, e.g. `chinwag sessions search nginx timeout`")
    embedder = _embedder(args)
    with open_store(args) as (_, db, _m):
        hits = _search_hits(db, query, args.limit, args.user, embedder)
    if args.json:
        print_json(hits)
        return 0
    if not hits:
        print(f"no session mentions {query!r}")
        return 0
    print(
        table(
            ["SESSION", "TITLE", "SOURCE", "LAST ACTIVE", "MATCH"],
            [
                [
                    h["session_id"],
                    h.get("title") or "",
                    h["source"],
                    ago(h.get("last_active_at")),
                    h.get("snippet") or "",
                ]
                for h in hits
            ],
            [24, 30, 8, 10, 80],
        )
    )
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args) as (home, db, _m):
        stats = db.stats()
        if db.mirrors_in_home:  # files a Postgres home may hold from before a migrate are no measure of it
            files = list(home.sessions_dir.glob("*.jsonl")) if home.sessions_dir.is_dir() else []
            stats["transcripts"] = len(files)
            stats["transcript_bytes"] = sum(f.stat().st_size for f in files)
        stats["sources"] = db.count_by_source()
        stats["media_bytes"] = db.media_bytes()
        embedder = _embedder(args)
        if embedder is not None:
            from gateway.recall.index import stats as index_stats

            embedded = index_stats(db, str(embedder.model))
            stats["embedding_model"] = str(embedder.model)
            stats["embedding_backlog"] = embedded["backlog"]
            stats["embedded_windows"] = embedded["windows"]
            stats["vector_bytes"] = embedded["vector_bytes"]
    if args.json:
        print_json(stats)
        return 0
    parts = stats.pop("bytes_by_part", None) or {}
    sources = stats.pop("sources")
    rows = [[k.replace("_", " "), human_bytes(v) if k.endswith("bytes") else v] for k, v in stats.items()]
    rows += [[f"  {part.replace('_', ' ')}", human_bytes(size)] for part, size in parts.items()]
    rows += [[f"sessions from {src}", n] for src, n in sources.items()]
    print(table(["WHAT", "VALUE"], rows, [30, 80]))
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    """Backfill recall's window vectors for the configured model (what the daemon's background
    indexer does after each commit), with a progress bar; a model change embeds everything again."""
    from gateway.recall.index import backfill
    from gateway.recall.index import stats as index_stats

    embedder = _embedder(args)
    if embedder is None:
        raise CliError(
            "embeddings are off: set embeddings.provider (local, or openai with embeddings.model) in the config"
        )
    model = str(embedder.model)
    with open_store(args) as (_, db, _m):
        backlog = index_stats(db, model)["backlog"]
        started = time.monotonic()
        try:
            with Progress(backlog, "embedding", min_items=1) as bar:
                done = backfill(db, embedder, progress=lambda done, _total: bar.update(done))
        except Exception as exc:  # the endpoint failed: what was stored stays, the rest is the backlog
            left = index_stats(db, model)["backlog"]
            print(f"embed: stopped, {left} message(s) left to embed: {exc}", file=sys.stderr)
            return 1
        after = index_stats(db, model)
    elapsed = time.monotonic() - started
    print(
        f"embedded {done} message(s) with {model} in {elapsed:.1f} s; "
        f"{after['windows']} window(s), {human_bytes(after['vector_bytes'])} of vectors, backlog {after['backlog']}"
    )
    return 0


# -- changes ------------------------------------------------------------------------------------------
def cmd_delete(args: argparse.Namespace) -> int:
    with open_store(args, mirrors=True) as (_, db, _m):
        session = find_session(db, args.id)
        label = session["id"] + (f" ({session['title']})" if session.get("title") else "")
        chats = [e["session_key"] for e in db.list_key_entries() if e["session_id"] == session["id"]]
        if chats and not args.include_current:  # as prune protects it: a chat would lose its place
            raise CliError(f"{label} is the current session of {', '.join(chats)}; --include-current deletes it anyway")
        if not args.yes:
            if not sys.stdin.isatty():  # a script's stdin is no answer: `echo n |` must not delete
                raise CliError(f"not on a terminal, so not asking: add --yes to delete {label}")
            answer = input(f"delete {label} and its {session['message_count']} message(s)? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing deleted")
                return 1
        db.delete_session(session["id"])
    if args.json:
        print_json({"deleted": session["id"], "messages": session["message_count"]})
    else:
        print(f"deleted {label}")
    return 0


def cmd_rename(args: argparse.Namespace) -> int:
    title = " ".join(args.title)
    if not sanitize_title(title):  # refused before anything is written
        raise CliError("the title is empty (after removing control characters); nothing was changed")
    refusal = numeric_title_refusal(sanitize_title(title))  # the chat's rule: /resume 12345 is a number
    if refusal:
        raise CliError(f"{refusal.split(':')[0]} (`/resume N` means number N of a list); nothing was changed")
    with open_store(args) as (_, db, _m):
        session = find_session(db, args.id)
        try:
            clean = db.set_title(session["id"], title)
        except TitleTaken as exc:  # the operator sees every session: name the one that has it
            raise CliError(f"title {title!r} is already used by session {exc.holder or '?'}") from None
    if args.json:
        print_json({"id": session["id"], "title": clean})
    else:
        print(f"renamed {session['id']}: {clean}{cut_notice(title, clean)}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    days = args.older_than
    if not days > 0:
        raise CliError(f"--older-than must be a positive number of days, got {days:g}")
    with open_store(args, mirrors=True) as (_, db, _m):
        keep = set() if args.include_current else {e["session_id"] for e in db.list_key_entries()}
        idle = db.idle_sessions(days)
        victims = [sid for sid in idle if sid not in keep]
        kept = len(idle) - len(victims)
        deleted = len(victims) if args.dry_run else db.prune(days, keep=keep)
    result: dict[str, Any] = {"dry_run": args.dry_run, "kept_current": kept, "older_than_days": days}
    if args.dry_run:  # nothing was deleted: the fields say "would"
        result |= {"would_delete_count": deleted, "would_delete": victims}
    else:
        result |= {"deleted": deleted, "deleted_ids": victims}
    if args.json:
        print_json(result)
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{verb} {deleted} session(s) idle for more than {days:g} day(s)"
        + (f"; kept {kept} that a chat is still in (--include-current to delete them too)" if kept else "")
    )
    for sid in victims[:deleted]:
        print(f"  {sid}")
    return 0


def cmd_repair(args: argparse.Namespace) -> int:
    with open_store(args, mirrors=True) as (_, db, mirrors):
        if mirrors is None:
            raise CliError("storage.backend is postgres: there are no transcript files to repair")
        total = db.count_sessions()
        with Progress(total, "repair") as bar:
            report = mirrors.repair(progress=lambda done, _total: bar.update(done))
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.summary())
    return 0
