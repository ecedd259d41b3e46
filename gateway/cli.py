"""Placeholder entry point; replaced by the CLI module."""


def main() -> None:  # pragma: no cover
    raise SystemExit("chinwag: CLI not built yet")
