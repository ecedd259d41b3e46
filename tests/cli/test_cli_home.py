"""The home directory as the CLI leaves it: read-only commands create nothing, and whatever is
created is owner-only (conversations must never end up world-readable)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_run import ROOT, clean_env

READ_ONLY = [
    ["sessions", "list"],
    ["sessions", "list", "--json"],
    ["sessions", "show", "20260101"],
    ["sessions", "search", "nginx"],
    ["sessions", "stats"],
    ["sessions", "export"],
    ["sessions", "delete", "20260101", "--yes"],
    ["sessions", "rename", "20260101", "x"],
    ["sessions", "prune", "--older-than", "30"],
    ["sessions", "repair"],
    ["doctor", "--timeout", "1"],
]


def chinwag(args: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        preexec_fn=lambda: os.umask(0o022),  # the usual umask: modes come from the code, not luck
    )


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a[:2]))
def test_commands_on_a_missing_home_create_nothing(tmp_path: Path, args: list[str]) -> None:
    env = clean_env(tmp_path)
    home = tmp_path / "home"
    done = chinwag(args, env)
    assert not home.exists(), f"{args} created {sorted(p.name for p in home.rglob('*'))}"
    if args[0] == "sessions":
        assert done.returncode == 1, done.stderr
        assert f"no chinwag data at {home}" in done.stderr
        assert "Traceback" not in done.stderr


def modes(home: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for path in home.rglob("*"):
        found[str(path.relative_to(home))] = stat.S_IMODE(path.stat().st_mode)
    return found


def assert_owner_only(home: Path) -> None:
    loose = {name: oct(mode) for name, mode in modes(home).items() if mode & 0o077}
    assert loose == {}, "group/other can read these"


def test_a_home_made_by_import_is_owner_only(tmp_path: Path) -> None:
    record = {
        "session": {"id": "20260101_000000_aaaaaaaa", "source": "local", "started_at": 1767225600},
        "messages": [{"role": "user", "content": "private words", "timestamp": 1767225600}],
    }
    dump = tmp_path / "dump.jsonl"
    dump.write_text(json.dumps(record) + "\n", encoding="utf-8")
    done = chinwag(["sessions", "import", str(dump)], clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    home = tmp_path / "home"
    assert (home / "state.db").is_file()
    assert_owner_only(home)


def test_a_home_made_by_run_is_owner_only(tmp_path: Path) -> None:
    done = chinwag(["run", "--no-http"], clean_env(tmp_path), "hello\n/title private\n")
    assert done.returncode == 0, done.stderr
    home = tmp_path / "home"
    assert (home / "state.db").is_file() and (home / "sessions.json").is_file()
    assert_owner_only(home)
