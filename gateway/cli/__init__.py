"""`chinwag` command line: argparse over the same library interfaces the daemon uses."""

from gateway.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
