"""`chinwag run | chat | doctor` (placeholder until the gateway lands)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    pass
