"""`chinwag` command line: a thin dispatcher; each command group lives in its own module.

The global options (`--config`, `--home`) are taken wherever people put them: before the command
(`chinwag --home D sessions list`) or after it (`chinwag sessions list --home D`). argparse only
knows an option on the parser it was added to, so after the tree is built each subcommand's parser
gets them too, with SUPPRESS defaults: a subcommand that does not see the option leaves the value
parsed earlier alone, and the last one written wins.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from gateway.cli import memory as cli_memory
from gateway.cli import run as cli_run
from gateway.cli import schedules as cli_schedules
from gateway.cli import sessions as cli_sessions

GLOBAL_OPTIONS: list[tuple[str, str, str]] = [
    ("--config", "FILE", "path to config.yaml (default: $CHINWAG_HOME/config.yaml)"),
    ("--home", "DIR", "data directory (default: $CHINWAG_HOME or ~/.chinwag)"),
]


def version() -> str:
    """The installed distribution's version; from pyproject.toml when run from a source tree."""
    try:
        return metadata.version("chinwag")
    except metadata.PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])
        except (OSError, KeyError, ValueError):
            return "unknown"


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found.append(child)
                found.extend(_subparsers(child))
    return found


def _describe(parser: argparse.ArgumentParser) -> None:
    """Each subcommand's --help page opens with what it does: the one-line help its parent lists."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for listed in action._choices_actions:
                child = action.choices[listed.dest]
                if child.description is None and listed.help:
                    child.description = listed.help[0].upper() + listed.help[1:] + "."
                _describe(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chinwag", description="An LLM agent on your chat platforms, with recall.")
    parser.add_argument("--version", action="version", version=f"chinwag {version()}")
    for flag, metavar, help_text in GLOBAL_OPTIONS:
        parser.add_argument(flag, metavar=metavar, help=help_text)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cli_run.register(sub)
    cli_sessions.register(sub)
    cli_memory.register(sub)
    _describe(parser)
    cli_schedules.register(sub)
    for child in _subparsers(parser):
        group = child.add_argument_group("global options")
        for flag, metavar, help_text in GLOBAL_OPTIONS:
            group.add_argument(flag, metavar=metavar, help=help_text, default=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
