"""`chinwag sessions export|import|migrate`: sessions out of a store and into one.

Export writes JSONL (one session per line, optionally the files' bytes before their session) to
stdout or to a file that appears only when the export completed. Import validates every line
before anything is written (gateway.storage.transfer.check_record, the format's one validator),
then writes in one transaction, whose refusal (a title already taken) is named by line. Migrate
copies a home between SQLite and Postgres (gateway/storage/postgres/copy.py), the attachments'
files with it, and verifies both sides' counts. On Postgres the files also go to and come from
the database's copy, which the replicas read (gateway/storage/postgres/files.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from gateway.cli.format import Progress, human_bytes, worth_telling
from gateway.cli.store import CliError, check_source, find_session, guarded, open_store, print_json
from gateway.db import SessionDB, StorageFace, TitleTaken
from gateway.errors import ImportRecordError
from gateway.storage.home import Home, home_from_args
from gateway.storage.media import MediaStore
from gateway.storage.postgres.copy import FilesReport, copy_files
from gateway.storage.transfer import MediaExport, MediaImport, check_record, files_present, has_hidden_messages


def add_commands(cmds: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The export, import and migrate subcommands of `chinwag sessions`."""
    p = cmds.add_parser("export", parents=[common], help="write sessions as JSONL (stdout when no FILE)")
    p.add_argument("file", nargs="?", metavar="FILE", help="where to write (default or '-': stdout)")
    p.add_argument("--session", action="append", default=[], metavar="ID", help="only this session (repeatable)")
    p.add_argument("--source", help="only this platform")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--with-media", action="store_true", help="also write the files' bytes (base64, one line each)")
    p.set_defaults(handler=guarded(cmd_export))

    p = cmds.add_parser("import", parents=[common], help="read sessions from JSONL ('-' for stdin); all or nothing")
    p.add_argument("file", metavar="FILE", help="a `chinwag sessions export` file ('-': stdin)")
    p.add_argument("--skip-existing", action="store_true", help="leave sessions that already exist alone")
    p.add_argument("--with-media", action="store_true", help="also restore the files of an export --with-media")
    p.set_defaults(handler=guarded(cmd_import))

    p = cmds.add_parser(
        "migrate",
        parents=[common],
        help="copy this home's sessions into Postgres (--to postgres) or back (--to sqlite)",
    )
    p.add_argument("--to", required=True, choices=("postgres", "sqlite"), help="the backend to copy into")
    p.add_argument("--dsn", help="the Postgres DSN (default: $CHINWAG_PG_DSN, else storage.postgres.dsn)")
    p.add_argument("--skip-existing", action="store_true", help="leave sessions the target already has alone")
    p.set_defaults(handler=guarded(cmd_migrate))


def cmd_export(args: argparse.Namespace) -> int:
    with open_store(args) as (home, db, _m):
        check_source(db, args.source)
        if args.session:
            ids = [find_session(db, ref)["id"] for ref in args.session]
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
        files = MediaExport(MediaStore(home.root / "media", shared=db.shared_files())) if args.with_media else None
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
        print_json(summary)
    elif not to_stdout:
        media = f", {len(files.written)} file(s) ({human_bytes(files.bytes)})" if files else ""
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
        # owner-only, as everything under home: an export holds every conversation
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
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


def parse_import(lines: list[str], db: StorageFace, skip_existing: bool) -> tuple[list[dict], list[int]]:
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
    with open_store(args, mirrors=True, create=True) as (_, db, mirrors):
        store.shared = db.shared_files()  # Postgres: the replicas read the files from the database
        try:
            if files and store.shared is not None:  # before the rows that name them, as on disk
                copy_files(files.received, store, to_database=True)
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
        print_json({"imported": imported, "messages": messages, "skipped": skipped})
        return 0
    print(
        f"imported {imported} session(s), {messages} message(s)"
        + (f", {len(files.received)} file(s) ({human_bytes(files.bytes)})" if files else "")
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


DIFFERING_SHOWN = 10  # skipped sessions that differ, named one a line (--json has them all)


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
        files = copy_files(source.referenced_media(), _shared_store(home, pg), to_database=args.to == "postgres")
    except TitleTaken as exc:
        raise CliError(f"title {exc.title!r} is already used on the target by session {exc.holder or '?'}") from None
    except (ImportRecordError, CopyMismatch) as exc:
        raise CliError(str(exc)) from None
    finally:
        lite.close()
        pg.close()
    differing = [{"session_id": sid, names[0]: here, names[1]: there} for sid, here, there in report.differing]
    if args.json:
        print_json(
            {
                "to": args.to,
                "sessions": report.sessions,
                "messages": report.messages,
                "keys": report.keys,
                "skipped": list(report.skipped),
                "verified": report.sessions,
                "differing": differing,
                names[0]: {"sessions": report.source_counts[0], "messages": report.source_counts[1]},
                names[1]: {"sessions": report.target_counts[0], "messages": report.target_counts[1]},
                "notes": notes,
                "files": {
                    "copied": files.copied,
                    "bytes": files.bytes,
                    "already": files.already,
                    "missing": files.missing,
                },
            }
        )
        return 1 if differing else 0
    print(
        f"copied {report.sessions} session(s), {report.messages} message(s), {report.keys} chat key(s) to {args.to}"
        + (f"; skipped {len(report.skipped)} already there" if report.skipped else "")
    )
    print(f"  {names[0]}: {report.source_counts[0]} sessions, {report.source_counts[1]} messages")
    print(f"  {names[1]}: {report.target_counts[0]} sessions, {report.target_counts[1]} messages")
    if report.sessions:
        print(f"  verified: the {report.sessions} copied session(s) hold the same messages on both sides")
    if report.skipped:
        print(_skipped_line(report.skipped, report.differing, names))
    print(_files_line(files, home))
    for note, result in notes.items():
        print(
            f"  {note}: "
            + {"copied": "copied", "same": "already the same", "empty": "none to copy"}.get(
                result, "differs on the target: kept (`chinwag memory export|import --force` chooses)"
            )
        )
    return 1 if differing else 0


def _files_line(files: FilesReport, home: Home) -> str:
    parts = [f"copied {files.copied} ({human_bytes(files.bytes)})"] if files.copied or not files.already else []
    if files.already:
        parts.append(f"{files.already} already there")
    if files.missing:
        parts.append(f"{len(files.missing)} kept by a row but not in {home.root / 'media'} or the database")
    return "  files: " + "; ".join(parts)


def _shared_store(home: Home, db: StorageFace) -> MediaStore:
    """The home's media/ with the database's copy of the files (Postgres)."""
    return MediaStore(home.root / "media", sys.maxsize, shared=db.shared_files())  # capped where they came from


def _skipped_line(skipped: list[str], differing: list[tuple[str, int, int]], names: tuple[str, str]) -> str:
    """What --skip-existing left alone, compared by message count: the sessions that differ are named
    (they grew on the source after an earlier copy), since the totals above count them too."""
    if not differing:
        return f"  the {len(skipped)} skipped session(s) hold as many messages on both sides"
    shown = differing[:DIFFERING_SHOWN]
    lines = [
        f"  {len(differing)} of the {len(skipped)} skipped session(s) differ from {names[0]} "
        f"(delete them on {names[1]} and run migrate again to copy them afresh):"
    ]
    lines += [f"    {sid}: {here} messages on {names[0]}, {there} on {names[1]}" for sid, here, there in shown]
    if len(differing) > len(shown):
        lines.append(f"    … and {len(differing) - len(shown)} more (--json lists all)")
    return "\n".join(lines)


def _carry_notes(home: Home, pg: Any, to_postgres: bool) -> dict[str, str]:
    """MEMORY.md/USER.md follow the sessions: the home's files into Postgres's table, or back."""
    from tools.memory import MemoryRefused, NoteFiles, NoteTable, copy_notes

    files, table = NoteFiles(home.root), NoteTable(pg)
    try:
        return copy_notes(files, table) if to_postgres else copy_notes(table, files)
    except MemoryRefused as exc:
        raise CliError(f"the sessions were copied, the notes not: {exc}") from None
