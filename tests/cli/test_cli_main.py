"""The `chinwag` dispatcher: global options wherever people put them, and --version."""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.db import SessionDB


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own exits (--version, usage errors)
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Two homes: the environment's (empty) and another holding one session, named by --home/--config."""
    monkeypatch.setenv("CHINWAG_HOME", str(tmp_path / "env-home"))
    other = tmp_path / "other"
    with SessionDB(other / "state.db") as db:
        db.create_session("20260101_000000_aaaaaaaa", "local", user_id="me")
        db.append_message("20260101_000000_aaaaaaaa", "user", "hello from the other home")
    (other / "config.yaml").write_text(f"home: {other}\nhttp: {{enabled: false}}\n", encoding="utf-8")
    return tmp_path / "env-home", other


@pytest.mark.parametrize(
    "argv",
    [
        ["--home", "{other}", "sessions", "list", "--json"],
        ["sessions", "--home", "{other}", "list", "--json"],
        ["sessions", "list", "--home", "{other}", "--json"],
        ["sessions", "list", "--json", "--home={other}"],
        ["sessions", "list", "--config", "{other}/config.yaml", "--json"],
        ["--config", "{other}/config.yaml", "sessions", "list", "--json"],
    ],
)
def test_global_options_before_or_after_the_subcommand(homes: tuple[Path, Path], argv: list[str]) -> None:
    _, other = homes
    code, out, err = run([a.replace("{other}", str(other)) for a in argv])
    assert code == 0, err
    listed = json.loads(out)
    assert [s["id"] for s in listed] == ["20260101_000000_aaaaaaaa"]


def test_doctor_takes_config_after_the_subcommand(homes: tuple[Path, Path]) -> None:
    _, other = homes
    code, out, err = run(["doctor", "--config", str(other / "config.yaml"), "--timeout", "1"])
    assert f"config: {other / 'config.yaml'}" in out, out + err


def test_a_later_option_wins_over_an_earlier_one(homes: tuple[Path, Path], tmp_path: Path) -> None:
    _, other = homes
    code, out, err = run(["--home", str(tmp_path / "nowhere"), "sessions", "list", "--json", "--home", str(other)])
    assert code == 0, err
    assert len(json.loads(out)) == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["--version"])
    assert code == 0
    assert out.startswith("chinwag ") and out.split()[1][0].isdigit()


def test_the_command_line_entry_point_takes_them_too(homes: tuple[Path, Path]) -> None:
    import subprocess

    _, other = homes
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "sessions", "show", "20260101", "--home", str(other)],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "hello from the other home" in done.stdout
