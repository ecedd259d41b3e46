"""`chinwag sessions …` (placeholder until the store lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    pass
