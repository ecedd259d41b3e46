"""`chinwag run | chat | doctor`.

- `run`: the gateway on every configured platform (the terminal when none is), with the ops HTTP
  server. Works with no config file at all (DESIGN.md §1).
- `chat`: a conversation in this terminal — same sessions, commands and recall.
- `doctor`: checks the config, the database and each configured endpoint (gateway.cli.doctor).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any

from gateway.config.load import Config, ConfigError, load_config
from gateway.language import N_, gettext
from gateway.redact import Redactor
from gateway.service.logs import secrets_from_config, setup_logging
from gateway.storage.home import Home

log = logging.getLogger("chinwag")

# the person's, not the operator's: in the terminal person's language (the rest of the CLI is English)
TERMINAL_HELP = N_(
    "chinwag: Enter sends, Alt-Enter adds a line, Up/Ctrl-R recall; /help lists commands; "
    "Ctrl-C stops a reply; Ctrl-D (or Ctrl-C at an empty prompt) quits. /status shows the web console's address."
)
TERMINAL_LOG = N_("(log: {path})")


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run the gateway (the terminal when no chat platform is configured)")
    run.add_argument("--no-http", action="store_true", help="do not start the health/metrics/webhook server")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.set_defaults(handler=cmd_run)
    chat = sub.add_parser("chat", help="talk to the agent in this terminal")
    chat.add_argument("-v", "--verbose", action="store_true", help="show the gateway's log lines")
    chat.set_defaults(handler=cmd_chat)
    doctor = sub.add_parser("doctor", help="check the config, the database and every configured endpoint")
    doctor.add_argument("--timeout", type=float, default=5.0, help="seconds per endpoint check (default 5)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(handler=cmd_doctor)


def _load(args: argparse.Namespace) -> Config | None:
    try:
        return load_config(getattr(args, "config", None), getattr(args, "home", None))
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        print("chinwag: fix the configuration above (`chinwag doctor` explains more)", file=sys.stderr)
        return None


def log_file(config: Config) -> Path:
    return config.home / "logs" / "chinwag.log"


def _logging(config: Config, *, terminal: bool, quiet: bool, verbose: bool) -> None:
    """`terminal`: the conversation is on this screen, so the log goes to a file under home (and to
    stderr too with -v). Otherwise stderr, as a daemon's is; `quiet` keeps a piped chat to warnings."""
    level = "DEBUG" if verbose else config.logging.level
    secrets = secrets_from_config(config)
    if terminal:
        try:
            Home(config.home).ensure()  # owner-only, before the log file is made inside it
            setup_logging(level, config.logging.format, secrets, file=log_file(config), to_stream=verbose)
            return
        except OSError as exc:  # no log file: stderr then (the start says why it cannot go on)
            print(f"chinwag: cannot write the log file {log_file(config)}: {exc.strerror or exc}", file=sys.stderr)
    if quiet and not verbose and level in ("DEBUG", "INFO"):
        level = "WARNING"
    setup_logging(level, config.logging.format, secrets)


def _on_a_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _nothing_to_talk_to(config: Config) -> str | None:
    """Why `run` would serve nobody, or None. No chat platform, and the terminal off or with
    nothing on stdin (/dev/null or closed: `docker run -d`), would start and end at once (exit 0),
    which looks like success; a pipe or a file on stdin is a script and is answered."""
    names = config.configured_platforms()
    if names and names != ["local"]:
        return None
    if names:
        try:
            mode = os.fstat(sys.stdin.fileno()).st_mode
        except (OSError, ValueError, AttributeError):  # stdin closed
            mode = stat.S_IFCHR
        if not stat.S_ISCHR(mode) or sys.stdin.isatty():
            return None
    return (
        "nothing to talk to: no chat platform is configured and there is no terminal "
        + ("(platforms.local.enabled is false)" if not names else "(stdin is not a terminal, a pipe or a file)")
        + ". Set a platform's credentials in the environment (e.g. TELEGRAM_BOT_TOKEN) or in config.yaml, "
        "or run with a terminal (docker run -it)."
    )


def cmd_run(args: argparse.Namespace) -> int:
    config = _load(args)
    if config is None:
        return 2
    refusal = _nothing_to_talk_to(config)
    if refusal is not None:
        print(f"chinwag: {refusal}", file=sys.stderr)
        return 2
    terminal = "local" in config.configured_platforms() and _on_a_terminal()
    _logging(config, terminal=terminal, quiet=False, verbose=args.verbose)
    return _serve(config, local_only=False, http=False if args.no_http else None, terminal=terminal)


def cmd_chat(args: argparse.Namespace) -> int:
    config = _load(args)
    if config is None:
        return 2
    terminal = _on_a_terminal()
    _logging(config, terminal=terminal, quiet=True, verbose=args.verbose)
    return _serve(config, local_only=True, http=False, terminal=terminal)


def _serve(config: Config, *, local_only: bool, http: bool | None, terminal: bool = False) -> int:
    from gateway.service.app import AppError, build_app, open_storage
    from platforms.local import LocalAdapter

    # On Postgres the replicas share no disk: the replica registry in the database stands in for
    # the home lock (gateway.storage.postgres.replicas), so any number may run. Taken first: a
    # second chinwag says only that it is already running.
    lock = _lock_home(config) if config.storage.backend != "postgres" else _NoLock()
    if lock is None:
        return 1
    for notice in config.notices:
        log.info("config: %s", notice)
    for warning in config.warnings:
        log.warning("config: %s", warning)
        if terminal:  # the log is in a file there; a config warning is for the person
            print(f"chinwag: config: {warning}", file=sys.stderr, flush=True)
    if not config.model.is_configured:
        log.warning(
            "no model configured (set OPENAI_BASE_URL / OPENAI_API_KEY or model.base_url): "
            "commands and recall work, chat turns say so"
        )

    async def main() -> int:
        # (a replica started while Postgres is unreachable waits here, /readyz saying so)
        db = await open_storage(config) if config.storage.backend == "postgres" else None
        app = build_app(config, local_only=local_only, http=http, db=db)
        app.announce = lambda line: print(line, file=sys.stderr, flush=True)
        local = next((a for a in app.adapters if isinstance(a, LocalAdapter)), None)
        if local is not None and local.interactive:
            language = await app.runner.language_of(local.source)
            banner = gettext(language, TERMINAL_HELP) + "\n" + gettext(language, TERMINAL_LOG, path=log_file(config))
            print(banner, flush=True)
        return await app.run_forever()

    try:
        return asyncio.run(main())
    except AppError as exc:
        print(f"chinwag: {Redactor(secrets_from_config(config))(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
    except Exception as exc:  # a bug or an SDK refusing to start: the log has the (redacted) trace
        log.critical("chinwag stopped by an unexpected error", exc_info=True)
        redact = Redactor(secrets_from_config(config))
        print(f"chinwag: stopped by an unexpected error: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
        return 1
    finally:
        lock.release()


class _NoLock:
    def release(self) -> None:
        pass


def _lock_home(config: Config) -> Any:
    """Take the home's one-process lock (gateway.service.lock); None after saying who holds it."""
    from gateway.service.lock import HomeLock, HomeLocked
    from gateway.storage.home import Home

    try:
        Home(config.home).ensure()
        return HomeLock(config.home).acquire()
    except HomeLocked as exc:
        print(f"chinwag: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"chinwag: cannot use the data directory {config.home}: {exc.strerror or exc}", file=sys.stderr)
    return None


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.cli.doctor import run_doctor

    return run_doctor(
        getattr(args, "config", None), getattr(args, "home", None), timeout=args.timeout, as_json=args.json
    )
