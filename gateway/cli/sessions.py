"""`chinwag sessions list|show|search|export|import|delete|rename|prune|repair|stats|embed|migrate`.

Readable tables by default, `--json` for scripts. Bad input gets a one-line error naming what is
wrong and exit code 2, and changes nothing: an import is validated line by line before anything
is written (gateway.storage.transfer.check_record, the format's one validator), and then written
in one transaction, whose refusal (a title already taken) is named by line too. This module is
argparse and printing only: what it reads and writes goes through SessionDB.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sqlite3
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from gateway.cli.format import Progress, ago, fmt_time, table, worth_telling
from gateway.db import SessionDB, TitleTaken, sanitize_title
from gateway.errors import ImportRecordError, SchemaTooNew
from gateway.recall import find_sessions
from gateway.sessions.mirrors import Mirrors
from gateway.source import Platform
from gateway.storage.home import Home, home_from_args
from gateway.storage.media import MediaStore
from gateway.storage.queries import Session
from gateway.storage.transfer import MediaExport, MediaImport, check_record, files_present, has_hidden_messages

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """A problem with what the user asked for: printed as one line, exit code 2."""


class NoData(Exception):
    """The home holds no database: nothing to read or change, and nothing is created (exit 1)."""


# -- plumbing --------------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sessions", help="list, search, export, import and maintain stored sessions")
    cmds = parser.add_subparsers(dest="sessions_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda args: _usage(parser))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")

    p = cmds.add_parser("list", parents=[common], help="sessions by last activity")
    p.add_argument("--source", help="only this platform (telegram, feishu, discord, local, tool)")
    p.add_argument("--user", help="only sessions this person started or took part in")
    p.add_argument("--limit", type=_positive_int, default=20)
    p.set_defaults(handler=_wrap(cmd_list))

    p = cmds.add_parser("show", parents=[common], help="one session and its messages")
    p.add_argument("id", metavar="ID", help="session id, unique id prefix, or title")
    p.add_argument("--all", action="store_true", help="include hidden (undone/retried/compacted) messages")
    p.set_defaults(handler=_wrap(cmd_show))

    p = cmds.add_parser("search", parents=[common], help="find the sessions a query is about")
    p.add_argument("query", nargs="+", metavar="QUERY")
    p.add_argument("--limit", type=_positive_int, default=5)
    p.add_argument("--user", help="only sessions this person took part in")
    p.set_defaults(handler=_wrap(cmd_search))

    p = cmds.add_parser("export", parents=[common], help="write sessions as JSONL (stdout when no FILE)")
    p.add_argument("file", nargs="?", metavar="FILE")
    p.add_argument("--session", action="append", default=[], metavar="ID", help="only this session (repeatable)")
    p.add_argument("--source", help="only this platform")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--with-media", action="store_true", help="also write the files' bytes (base64, one line each)")
    p.set_defaults(handler=_wrap(cmd_export))

    p = cmds.add_parser("import", parents=[common], help="read sessions from JSONL ('-' for stdin); all or nothing")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--skip-existing", action="store_true", help="leave sessions that already exist alone")
    p.add_argument("--with-media", action="store_true", help="also restore the files of an export --with-media")
    p.set_defaults(handler=_wrap(cmd_import))

    p = cmds.add_parser("delete", parents=[common], help="delete a session and its messages")
    p.add_argument("id", metavar="ID")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (needed when not on a terminal)")
    p.add_argument("--include-current", action="store_true", help="also when a chat is still in it")
    p.set_defaults(handler=_wrap(cmd_delete))

    p = cmds.add_parser("rename", parents=[common], help="set a session's title")
    p.add_argument("id", metavar="ID")
    p.add_argument("title", nargs="+", metavar="TITLE")
    p.set_defaults(handler=_wrap(cmd_rename))

    p = cmds.add_parser("prune", parents=[common], help="delete sessions idle for more than DAYS days")
    p.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    p.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    p.add_argument("--include-current", action="store_true", help="also delete sessions a chat is still in")
    p.set_defaults(handler=_wrap(cmd_prune))

    p = cmds.add_parser("repair", parents=[common], help="rebuild sessions/*.jsonl and sessions.json from the DB")
    p.set_defaults(handler=_wrap(cmd_repair))

    p = cmds.add_parser("stats", parents=[common], help="counts and sizes")
    p.set_defaults(handler=_wrap(cmd_stats))

    p = cmds.add_parser("embed", parents=[common], help="embed what recall's semantic stage has not seen yet")
    p.set_defaults(handler=_wrap(cmd_embed))

    p = cmds.add_parser("migrate", help="copy this home's sessions into Postgres (--to postgres) or back (--to sqlite)")
    p.add_argument("--to", required=True, choices=("postgres", "sqlite"), help="the backend to copy into")
    p.add_argument("--dsn", help="the Postgres DSN (default: $CHINWAG_PG_DSN, else storage.postgres.dsn)")
    p.add_argument("--skip-existing", action="store_true", help="leave sessions the target already has alone")
    p.set_defaults(handler=_wrap(cmd_migrate))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_BAD_INPUT


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _wrap(fn: Any) -> Any:
    def handler(args: argparse.Namespace) -> int:
        name = args.sessions_command
        try:
            return int(fn(args) or 0)
        except CliError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except NoData as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
        except (SchemaTooNew, sqlite3.DatabaseError) as exc:  # not the user's typo: exit 1
            print(f"{name}: database {home_from_args(args).db_path}: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:  # `chinwag sessions export | head`
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            return 0

    return handler


def _storage_config(args: argparse.Namespace) -> Any:
    """The config's storage section, or None when the config cannot be read: these commands then
    work on the home's SQLite file, as they did before a backend could be chosen."""
    from gateway.config.load import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None), getattr(args, "home", None)).storage
    except (ConfigError, OSError, ValueError):
        return None


@contextmanager
def _open_db(
    args: argparse.Namespace, mirrors: bool = False, create: bool = False
) -> Iterator[tuple[Home, SessionDB, Mirrors | None]]:
    """The DB of this home (or the Postgres database its config names); with `mirrors`, changes are
    mirrored to the files as the daemon does (on SQLite: Postgres has none, DESIGN §14). Only
    `create` (import) may make a home that is not there: asking must never leave data behind."""
    try:
        home = home_from_args(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    storage = _storage_config(args)
    if storage is not None and storage.backend == "postgres":
        from gateway.db import StorageUnavailable, open_db

        try:
            db = open_db("postgres", dsn=storage.postgres_dsn)
        except StorageUnavailable as exc:
            raise CliError(str(exc)) from None
        mirrors = False
    else:
        if not create and not home.db_path.exists():
            raise NoData(
                f"no chinwag data at {home.root} (nothing is stored there yet: `chinwag chat` or "
                "`chinwag sessions import` makes it; --home DIR names another)"
            )
        if create:
            home.ensure()  # owner-only, before the database is made inside it
        db = SessionDB(home.db_path)
    m = Mirrors(home, db) if mirrors else None
    try:
        yield home, db, m
    finally:
        if m:
            m.close()
        db.close()


AMBIGUOUS_SHOWN = 10


def _find(db: SessionDB, ref: str) -> Session:
    """An id, a unique id prefix (6+), the unique random part at an id's end (4+ hex), or a title.
    Several matches are named, never taken as none."""
    row = db.find_session(ref)
    if row is not None:
        return row
    ref = ref.strip()
    if re.fullmatch(r"[0-9a-f_]{4,}", ref):
        prefixed, suffixed = db.read(
            lambda conn: (
                [
                    r[0]
                    for r in conn.execute(
                        "SELECT id FROM sessions WHERE id >= ? AND id < ? ORDER BY id", (ref, ref + "\uffff")
                    )
                ],
                [r[0] for r in conn.execute("SELECT id FROM sessions WHERE id LIKE '%' || ? ORDER BY id", (ref,))]
                if re.fullmatch(r"[0-9a-f]{4,}", ref)
                else [],
            )
        )
        if not prefixed and len(suffixed) == 1:
            found = db.get_session(suffixed[0])
            if found is not None:
                return found
        several = prefixed if len(prefixed) > 1 else suffixed
        if len(several) > 1:
            shown = ", ".join(several[:AMBIGUOUS_SHOWN]) + (" …" if len(several) > AMBIGUOUS_SHOWN else "")
            raise CliError(f"{ref!r} is ambiguous: {len(several)} sessions match ({shown}); give more of the id")
    raise CliError(f"no session matches {ref!r} (give an id, a unique id prefix of 6+ characters, or a title)")


KNOWN_SOURCES = (*(p.value for p in Platform), "tool")


def _check_source(db: SessionDB, source: str | None) -> None:
    """A --source nobody has is a typo far more often than a question: name the valid ones."""
    if source is None:
        return
    valid = sorted(set(KNOWN_SOURCES) | set(db.count_by_source()))
    if source not in valid:
        close = difflib.get_close_matches(source, valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise CliError(f"unknown source {source!r}: {hint}sources are {', '.join(valid)}")


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


# -- read commands -----------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    with _open_db(args) as (_, db, _m):
        _check_source(db, args.source)
        rows = db.list_sessions_rich(source=args.source, user_id=args.user, limit=args.limit)
        total = db.count_sessions()
    if args.json:
        _print_json(rows)
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
                    r["message_count"],
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
    with _open_db(args) as (_, db, _m):
        session = _find(db, args.id)
        record = db.export_session(session["id"])
    if args.json:
        if not args.all:
            record["messages"] = [m for m in record["messages"] if m.get("active", 1)]
        _print_json(record)
        return 0
    s = record["session"]
    ended = f"{fmt_time(s['ended_at'])} ({s['end_reason']})" if s.get("ended_at") else "no (current or resumable)"
    facts = [
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
    for label, value in facts:
        print(f"{label:>12}: {value}")
    hidden = sum(1 for m in record["messages"] if not m.get("active", 1))
    if hidden and not args.all:
        print(f"{'':>12}  ({hidden} hidden message(s); --all to show them)")
    print()
    for m in record["messages"]:
        if not m.get("active", 1) and not args.all:
            continue
        flag = "" if m.get("active", 1) else (" [compacted]" if m.get("compacted") else " [undone]")
        body = m.get("content") or ""
        if m.get("tool_calls"):
            names = (
                [((c or {}).get("function") or {}).get("name") or "?" for c in m["tool_calls"] if isinstance(c, dict)]
                if isinstance(m["tool_calls"], list)
                else ["?"]
            )
            body = (body + " " if body else "") + f"[calls {', '.join(names)}]"
        role = m["role"] + (f" ({m['tool_name']})" if m.get("tool_name") else "")
        print(f"[{fmt_time(m.get('timestamp'))}] {role}{flag}: {body}")
    return 0


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


def _search_hits(db: SessionDB, query: str, limit: int, user: str | None, embedder: Any = None) -> list[dict]:
    hits = find_sessions(db, query, limit=limit, person_id=user, see_all=user is None, embedder=embedder)
    return [h.as_dict() for h in hits]


def cmd_search(args: argparse.Namespace) -> int:
    query = " ".join(" ".join(args.query).split())
    if not query:
        raise CliError("give words to search for, e.g. `chinwag sessions search nginx timeout`")
    embedder = _embedder(args)
    with _open_db(args) as (_, db, _m):
        hits = _search_hits(db, query, args.limit, args.user, embedder)
    if args.json:
        _print_json(hits)
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
    with _open_db(args) as (home, db, _m):
        stats = db.stats()
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
        _print_json(stats)
        return 0
    parts = stats.pop("bytes_by_part", None) or {}
    sources = stats.pop("sources")
    rows = [[k.replace("_", " "), _human(v) if k.endswith("bytes") else v] for k, v in stats.items()]
    rows += [[f"  {part.replace('_', ' ')}", _human(size)] for part, size in parts.items()]
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
    with _open_db(args) as (_, db, _m):
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
        f"{after['windows']} window(s), {_human(after['vector_bytes'])} of vectors, backlog {after['backlog']}"
    )
    return 0


def _human(n: int | None) -> str:
    size = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)  # pragma: no cover


# -- export / import ---------------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    with _open_db(args) as (home, db, _m):
        _check_source(db, args.source)
        if args.session:
            ids = [_find(db, ref)["id"] for ref in args.session]
        else:
            ids = db.session_ids(source=args.source)
        to_stdout = not args.file or args.file == "-"
        target = None if to_stdout else Path(args.file)
        if to_stdout and args.json:
            raise CliError("--json needs a FILE: without one the export itself is what goes to stdout")
        if target is not None and target.is_dir():
            raise CliError(f"{target} is a directory; give a file name")
        if target is not None and target.exists() and not args.force:
            raise CliError(f"{target} exists; --force replaces it")
        messages = 0
        files = MediaExport(MediaStore(home.root / "media")) if args.with_media else None
        with Progress(len(ids), "export") as bar, _export_stream(target) as out:
            for n, sid in enumerate(ids, 1):
                record = db.export_session(sid)
                messages += len(record["messages"])
                for line in files.lines_for(record) if files else ():
                    out.write(line)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                bar.update(n)
    if files and files.missing:
        print(f"export: {len(files.missing)} file(s) were missing from {home.root / 'media'}", file=sys.stderr)
    if args.json:
        summary: dict[str, Any] = {"sessions": len(ids), "messages": messages, "file": str(target)}
        if files:
            summary["files"] = len(files.written)
        _print_json(summary)
    elif not to_stdout:
        media = f", {len(files.written)} file(s) ({_human(files.bytes)})" if files else ""
        print(f"exported {len(ids)} session(s), {messages} message(s){media} to {target}", file=sys.stderr)
    return 0


@contextmanager
def _export_stream(target: Path | None) -> Iterator[IO[str]]:
    """stdout, or a temp file renamed onto `target` only when the export completed."""
    if target is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _read_lines(path: str) -> list[str]:
    try:
        if path == "-":
            return sys.stdin.read().splitlines()
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def _read_media_lines(path: str, files: MediaImport) -> list[str]:
    """The lines of `path`, read one at a time, with each file line taken into the store."""
    try:
        with sys.stdin if path == "-" else open(path, encoding="utf-8") as fh:
            return files.split(line.rstrip("\r\n") for line in fh)
    except ValueError as exc:  # a file line that is not right; UnicodeDecodeError is one too
        files.finish(())
        if isinstance(exc, UnicodeDecodeError):
            raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        raise CliError(f"{exc}; nothing was imported") from None
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except OSError as exc:
        files.finish(())
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def parse_import(lines: list[str], db: SessionDB, skip_existing: bool) -> tuple[list[dict], list[int]]:
    """Validate every line; return the records and the line number of each. Raises CliError.
    (Whether a title is free is the database's to say, when the records are written.)"""
    records: list[dict] = []
    line_of: list[int] = []
    seen: dict[str, int] = {}
    with Progress(len(lines), "check") as bar:
        for lineno, raw in enumerate(lines, 1):
            bar.update(lineno)
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise CliError(f"line {lineno}: invalid JSON ({exc.msg})") from None
            problem = check_record(record)
            if problem:
                raise CliError(f"line {lineno}: {problem}")
            session = record["session"]
            sid = session["id"]
            if sid in seen:
                raise CliError(f"line {lineno}: session {sid} appears twice (also on line {seen[sid]})")
            seen[sid] = lineno
            exists = db.get_session(sid) is not None
            if exists and not skip_existing:
                raise CliError(f"line {lineno}: session {sid} already exists (--skip-existing leaves it alone)")
            records.append(record)
            line_of.append(lineno)
    if not records:
        raise CliError("no sessions in the input")
    return records, line_of


def cmd_import(args: argparse.Namespace) -> int:
    try:
        home = home_from_args(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    store = MediaStore(home.root / "media", sys.maxsize)  # files were capped where they came from
    files = MediaImport(store) if args.with_media else None
    lines = _read_media_lines(args.file, files) if files else _read_lines(args.file)
    with _open_db(args, mirrors=True, create=True) as (_, db, mirrors):
        try:
            records, line_of = parse_import(lines, db, args.skip_existing)
            fresh = [r for r in records if db.get_session(r["session"]["id"]) is None]
            if worth_telling(len(records)):  # one transaction: no progress to show while it runs
                print(f"importing {len(records)} session(s)…", file=sys.stderr)
            try:
                present = files_present(store, records)
                imported = db.import_records(records, skip_existing=args.skip_existing, media_present=present)
            except TitleTaken as exc:  # nothing was written
                raise CliError(_title_clash(exc, records, line_of)) from None
            except ImportRecordError as exc:  # a rule the checks above missed: nothing was written
                raise CliError(f"line {line_of[exc.record - 1]}: {exc.problem}") from None
        finally:
            if files:  # the files no committed row needs go again (all of them when the import failed)
                files.finish(db.referenced_media())
        if mirrors is not None:  # on SQLite; Postgres has no files
            flagged = [r["session"]["id"] for r in records if has_hidden_messages(r)]
            for sid in flagged:  # appended as visible by the import; the file must carry the real flags
                mirrors.rewrite_session(sid)
            mirrors.write_index()  # sessions.json too, so the next start has nothing to reconcile
    messages = sum(len(r.get("messages") or []) for r in fresh)
    skipped = len(records) - imported
    if args.json:
        _print_json({"imported": imported, "messages": messages, "skipped": skipped})
        return 0
    print(
        f"imported {imported} session(s), {messages} message(s)"
        + (f", {len(files.received)} file(s) ({_human(files.bytes)})" if files else "")
        + (f"; skipped {skipped} that already existed" if skipped else "")
    )
    return 0


def _title_clash(exc: TitleTaken, records: list[dict], line_of: list[int]) -> str:
    """An import's title refusal, by line: the title's holder is another line of the input, or a
    session already stored."""
    where = f"line {line_of[exc.record - 1]}: " if exc.record else ""
    lines = {r["session"]["id"]: n for r, n in zip(records, line_of)}
    if exc.holder in lines and exc.record and lines[exc.holder] != line_of[exc.record - 1]:
        return f"{where}title {exc.title!r} is also used on line {lines[exc.holder]}"
    return f"{where}title {exc.title!r} is already used by session {exc.holder or '?'}"


# -- changes ------------------------------------------------------------------------------------------
def _postgres_dsn(args: argparse.Namespace) -> str:
    if args.dsn:
        return str(args.dsn)
    if os.environ.get("CHINWAG_PG_DSN"):
        return os.environ["CHINWAG_PG_DSN"]
    from gateway.config.load import ConfigError, load_config

    try:
        dsn = load_config(getattr(args, "config", None), getattr(args, "home", None)).storage.postgres_dsn
    except ConfigError as exc:
        raise CliError(f"no --dsn, and the config cannot be read: {'; '.join(exc.problems)}") from None
    if not dsn:
        raise CliError("no Postgres DSN: give --dsn, set CHINWAG_PG_DSN, or set storage.postgres.dsn")
    return dsn


def cmd_migrate(args: argparse.Namespace) -> int:
    """Copy every session of one backend into the other (gateway/storage/postgres/copy.py), with
    a progress bar, then print both sides' counts."""
    from gateway.db import StorageUnavailable, open_db
    from gateway.storage.postgres.copy import CopyMismatch, copy_sessions

    dsn = _postgres_dsn(args)
    try:
        home = home_from_args(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        pg = open_db("postgres", dsn=dsn)
    except StorageUnavailable as exc:
        raise CliError(str(exc)) from None
    lite = SessionDB(home.db_path)
    source, target = (lite, pg) if args.to == "postgres" else (pg, lite)
    names = ("sqlite", "postgres") if args.to == "postgres" else ("postgres", "sqlite")
    try:
        with Progress(source.count_sessions(), f"copying to {args.to}", min_items=1) as bar:
            report = copy_sessions(
                source, target, skip_existing=args.skip_existing, progress=lambda done, total: bar.update(done)
            )
        notes = _carry_notes(home, pg, to_postgres=args.to == "postgres")
    except TitleTaken as exc:
        raise CliError(f"title {exc.title!r} is already used on the target by session {exc.holder or '?'}") from None
    except (ImportRecordError, CopyMismatch) as exc:
        raise CliError(str(exc)) from None
    finally:
        lite.close()
        pg.close()
    print(
        f"copied {report.sessions} session(s), {report.messages} message(s), {report.keys} chat key(s) to {args.to}"
        + (f"; skipped {len(report.skipped)} already there" if report.skipped else "")
    )
    print(f"  {names[0]}: {report.source_counts[0]} sessions, {report.source_counts[1]} messages")
    print(f"  {names[1]}: {report.target_counts[0]} sessions, {report.target_counts[1]} messages")
    print("  every copied session verified: same messages and conversation on both sides")
    for note, result in notes.items():
        print(
            f"  {note}: "
            + {"copied": "copied", "same": "already the same", "empty": "none to copy"}.get(
                result, "differs on the target: kept (`chinwag memory export|import --force` chooses)"
            )
        )
    return 0


def _carry_notes(home: Home, pg: Any, to_postgres: bool) -> dict[str, str]:
    """MEMORY.md/USER.md follow the sessions: the home's files into Postgres's table, or back."""
    from tools.memory import MemoryRefused, NoteFiles, NoteTable, copy_notes

    files, table = NoteFiles(home.root), NoteTable(pg)
    try:
        return copy_notes(files, table) if to_postgres else copy_notes(table, files)
    except MemoryRefused as exc:
        raise CliError(f"the sessions were copied, the notes not: {exc}") from None


def cmd_delete(args: argparse.Namespace) -> int:
    with _open_db(args, mirrors=True) as (_, db, _m):
        session = _find(db, args.id)
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
        _print_json({"deleted": session["id"], "messages": session["message_count"]})
    else:
        print(f"deleted {label}")
    return 0


def cmd_rename(args: argparse.Namespace) -> int:
    title = " ".join(args.title)
    if not sanitize_title(title):  # refused before anything is written
        raise CliError("the title is empty (after removing control characters); nothing was changed")
    with _open_db(args) as (_, db, _m):
        session = _find(db, args.id)
        try:
            clean = db.set_title(session["id"], title)
        except TitleTaken as exc:  # the operator sees every session: name the one that has it
            raise CliError(f"title {title!r} is already used by session {exc.holder or '?'}") from None
    if args.json:
        _print_json({"id": session["id"], "title": clean})
    else:
        print(f"renamed {session['id']}: {clean}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    days = args.older_than
    if not days > 0:
        raise CliError(f"--older-than must be a positive number of days, got {days:g}")
    with _open_db(args, mirrors=True) as (_, db, _m):
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
        _print_json(result)
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
    with _open_db(args, mirrors=True) as (_, db, mirrors):
        if mirrors is None:
            raise CliError("storage.backend is postgres: there are no transcript files to repair")
        total = db.count_sessions()
        with Progress(total, "repair") as bar:
            report = mirrors.repair(progress=lambda done, _total: bar.update(done))
    if args.json:
        _print_json(report.to_dict())
    else:
        print(report.summary())
    return 0
