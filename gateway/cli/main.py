"""`chinwag` command line: a thin dispatcher; each command group lives in its own module."""

from __future__ import annotations

import argparse
import sys

from gateway.cli import run as cli_run
from gateway.cli import sessions as cli_sessions


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chinwag", description="An LLM agent on your chat platforms, with recall.")
    parser.add_argument("--config", help="path to config.yaml (default: $CHINWAG_HOME/config.yaml)")
    parser.add_argument("--home", help="data directory (default: $CHINWAG_HOME or ~/.chinwag)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cli_run.register(sub)
    cli_sessions.register(sub)
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
