"""Assertions on rendered text (error reports, exposition output) shared by the tests."""

from __future__ import annotations


def assert_all_in(text: str, *expected: str) -> None:
    """Every one of `expected` occurs in `text`; a failure names all that are missing, not just the first."""
    missing = [e for e in expected if e not in text]
    assert not missing, f"missing from the text: {missing}\n--- text ---\n{text}"
