"""`chinwag memory export|import`: MEMORY.md and USER.md between where the daemon keeps them and
plain files.

On SQLite the two notes are files in the home already; on Postgres (`storage.backend: postgres`)
they are rows of the database, because the replicas share no disk (tools/memory.py). `export`
writes them as files (into the home, or DIR) for reading, editing or backup; `import` puts edited
files back. Neither overwrites notes that differ without `--force` (it says which ones it kept), and
an entry the memory tool would refuse is named and nothing is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway.cli.store import EXIT_BAD_INPUT, no_data_at, print_json, refuse, storage_config, usage
from gateway.storage.home import home_from_args
from tools.memory import MemoryRefused, NoteFiles, NotePlace, NoteTable, copy_notes

SAID = {
    "copied": "written",
    "same": "already the same",
    "empty": "empty at the source, left alone",
    "differs": "differs at the target, kept (--force replaces it)",
}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("memory", help="export or import MEMORY.md/USER.md (kept in the database on Postgres)")
    cmds = parser.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda args: usage(parser))
    for name, text in (
        ("export", "write MEMORY.md and USER.md as files into DIR (default: the home)"),
        ("import", "read MEMORY.md and USER.md from DIR (default: the home) into where the daemon keeps them"),
    ):
        p = cmds.add_parser(name, help=text)
        p.add_argument("dir", nargs="?", metavar="DIR", help="the directory of MEMORY.md / USER.md (default: the home)")
        p.add_argument("--force", action="store_true", help="replace notes that differ")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(handler=cmd_transfer)


def cmd_transfer(args: argparse.Namespace) -> int:
    name = f"memory {args.memory_command}"
    try:
        home = home_from_args(args)
    except ValueError as exc:
        return refuse(args, name, str(exc), EXIT_BAD_INPUT)
    files_dir = Path(args.dir).expanduser() if args.dir else home.root
    if args.memory_command == "import" and not files_dir.is_dir():  # nothing to read is not "empty"
        what = f"{files_dir} is not a directory" if files_dir.exists() else f"no directory at {files_dir}"
        return refuse(args, name, f"{what} (give the DIR that holds MEMORY.md / USER.md)", EXIT_BAD_INPUT)
    storage = storage_config(args)
    db = None
    if storage is not None and storage.backend == "postgres":
        from gateway.db import StorageUnavailable, open_db

        try:
            db = open_db("postgres", dsn=storage.postgres_dsn)
        except StorageUnavailable as exc:
            return refuse(args, name, str(exc), 1)
        kept: NotePlace = NoteTable(db)
        where = "the database"
    else:
        if not home.root.is_dir():
            return refuse(args, name, no_data_at(home), 1)
        kept, where = NoteFiles(home.root), f"the home {home.root}"
        if files_dir.resolve() == home.root.resolve():
            said = f"storage is SQLite: the notes are already files in {home.root} (give DIR to copy them)"
            if args.json:
                print_json({"from": where, "to": where, "notes": {}, "said": said})
            else:
                print(f"{name}: {said}")
            return 0
    files = NoteFiles(files_dir)
    source, target = (kept, files) if args.memory_command == "export" else (files, kept)
    try:
        if target is files:
            files_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        outcome = copy_notes(source, target, replace=args.force)
    except MemoryRefused as exc:
        return refuse(args, name, f"{exc}; nothing was written", EXIT_BAD_INPUT)
    except OSError as exc:
        return refuse(args, name, f"{exc.filename or files_dir}: {exc.strerror or exc}", 1)
    finally:
        if db is not None:
            db.close()
    code = 1 if "differs" in outcome.values() else 0
    frm, to = (where, str(files_dir)) if args.memory_command == "export" else (str(files_dir), where)
    if args.json:
        print_json({"from": frm, "to": to, "notes": outcome})
        return code
    print(f"{name}: {frm} -> {to}")
    for note, result in outcome.items():
        print(f"  {note}: {SAID[result]}")
    return code
