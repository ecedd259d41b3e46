"""The store a `chinwag sessions` command works on, and how its errors reach the person typing.

One home for what every subcommand (gateway/cli/sessions.py, gateway/cli/transfer.py) and
`chinwag memory` share: which backend the config names, opening it without ever creating data by
asking, a session named by id, id prefix or title, and the exit codes: a problem with what was
asked is one line and exit 2, a home with no data or a damaged database is exit 1.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sqlite3
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from gateway.db import SessionDB, StorageFace
from gateway.errors import SchemaTooNew
from gateway.sessions.mirrors import Mirrors
from gateway.source import Platform
from gateway.storage.home import Home, home_from_args
from gateway.storage.queries import Session

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """A problem with what the user asked for: printed as one line, exit code 2."""


class NoData(Exception):
    """The home holds no database: nothing to read or change, and nothing is created (exit 1)."""


def usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_BAD_INPUT


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def guarded(fn: Any) -> Any:
    """`fn` as an argparse handler: its CliError, NoData and database errors become the exit codes
    above, and a closed pipe (`chinwag sessions export | head`) is not an error."""

    def handler(args: argparse.Namespace) -> int:
        name = args.sessions_command
        try:
            return int(fn(args) or 0)
        except CliError as exc:
            return refuse(args, name, str(exc), EXIT_BAD_INPUT)
        except NoData as exc:
            return refuse(args, name, str(exc), 1)
        except (SchemaTooNew, sqlite3.DatabaseError) as exc:  # not the user's typo: exit 1
            return refuse(args, name, f"database {home_from_args(args).db_path}: {exc}", 1)
        except BrokenPipeError:  # `chinwag sessions export | head`
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            return 0

    return handler


def refuse(args: argparse.Namespace, name: str, problem: str, code: int) -> int:
    """Say why a command did nothing: one line on stderr, or under --json `{"error": ...}` on
    stdout (the one document a script reads); `code` is the exit status either way."""
    if getattr(args, "json", False):
        print_json({"error": problem})
    else:
        print(f"{name}: {problem}", file=sys.stderr)
    return code


def storage_config(args: argparse.Namespace) -> Any:
    """The config's storage section, or None when the config cannot be read: these commands then
    work on the home's SQLite file, as they did before a backend could be chosen."""
    from gateway.config.load import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None), getattr(args, "home", None)).storage
    except (ConfigError, OSError, ValueError):
        return None


def no_data_at(home: Home) -> str:
    return (
        f"no chinwag data at {home.root} (nothing is stored there yet: `chinwag chat` or "
        "`chinwag sessions import` makes it; --home DIR names another)"
    )


@contextmanager
def open_store(
    args: argparse.Namespace, mirrors: bool = False, create: bool = False
) -> Iterator[tuple[Home, StorageFace, Mirrors | None]]:
    """The DB of this home (or the Postgres database its config names); with `mirrors`, changes are
    mirrored to the files as the daemon does (on SQLite: Postgres has none, DESIGN §14). Only
    `create` (import) may make a home that is not there: asking must never leave data behind."""
    try:
        home = home_from_args(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    storage = storage_config(args)
    if storage is not None and storage.backend == "postgres":
        from gateway.db import StorageUnavailable, open_db

        try:
            db = open_db("postgres", dsn=storage.postgres_dsn)
        except StorageUnavailable as exc:
            raise CliError(str(exc)) from None
        mirrors = False
    else:
        if not create and not home.db_path.exists():
            raise NoData(no_data_at(home))
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


def find_session(db: StorageFace, ref: str) -> Session:
    """The session `ref` names (the storage face's one rule: an id, a unique id prefix (6+), a
    title, or the unique random part at an id's end (4+ hex)), else part of a title in any letter
    case (as /resume takes it). Several matches are named, never taken as none."""
    row, several = db.match_session(ref)
    if row is not None:
        return row
    ref = ref.strip()
    if several:
        shown = ", ".join(several[:AMBIGUOUS_SHOWN]) + (" …" if len(several) > AMBIGUOUS_SHOWN else "")
        raise CliError(f"{ref!r} is ambiguous: {len(several)} sessions match ({shown}); give more of the id")
    from gateway.commands.sessions import TITLE_MATCH_SCAN, titles_matching

    matches = titles_matching(db.list_sessions_rich(limit=TITLE_MATCH_SCAN, titled_only=True), ref)
    if len(matches) == 1:
        found = db.get_session(matches[0]["id"])
        if found is not None:
            return found
    if len(matches) > 1:
        shown = ", ".join(f"{r['id']} ({r['title']})" for r in matches[:AMBIGUOUS_SHOWN])
        more = " …" if len(matches) > AMBIGUOUS_SHOWN else ""
        raise CliError(f"{ref!r} is ambiguous: {len(matches)} titles hold it ({shown}{more}); give more of it or an id")
    raise CliError(
        f"no session matches {ref!r} (give an id, a unique id prefix of 6+ characters, or a title or part of one)"
    )


KNOWN_SOURCES = (*(p.value for p in Platform), "tool")


def check_source(db: StorageFace, source: str | None) -> None:
    """A --source nobody has is a typo far more often than a question: name the valid ones."""
    if source is None:
        return
    valid = sorted(set(KNOWN_SOURCES) | set(db.count_by_source()))
    if source not in valid:
        close = difflib.get_close_matches(source, valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise CliError(f"unknown source {source!r}: {hint}sources are {', '.join(valid)}")


def print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
