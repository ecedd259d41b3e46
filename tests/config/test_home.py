"""Where home is: one resolution (gateway.storage.home) for config loading and every CLI command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.config import ConfigError, load_config
from gateway.db import SessionDB, new_session_id
from gateway.storage.home import resolve_home


def test_home_in_chinwag_homes_config_moves_the_data_for_run_and_sessions(tmp_path, monkeypatch, capsys):
    """Pinned bug: with `home:` in $CHINWAG_HOME/config.yaml, `chinwag run` used the key's directory
    while `chinwag sessions` opened $CHINWAG_HOME/state.db (it read `home:` only with --config)."""
    env_home, moved = tmp_path / "env", tmp_path / "moved"
    env_home.mkdir()
    (env_home / "config.yaml").write_text(f"home: {moved}\n")
    monkeypatch.setenv("CHINWAG_HOME", str(env_home))
    assert load_config().db_path == moved / "state.db"  # what `chinwag run` opens
    assert resolve_home().db_path == moved / "state.db"  # what `chinwag sessions` opens
    sid = new_session_id()
    with SessionDB(moved / "state.db") as db:
        db.create_session(sid, "telegram", user_id="u1", title="moved data")
        db.append_message(sid, "user", "hello from the moved home", user_id="u1")
    capsys.readouterr()
    assert main(["sessions", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in listed] == [sid]
    assert not (env_home / "state.db").exists()


def test_precedence(tmp_path: Path) -> None:
    env = {"CHINWAG_HOME": str(tmp_path / "env"), "DATA": str(tmp_path / "data")}
    (tmp_path / "env").mkdir()
    assert resolve_home(env=env).root == tmp_path / "env"  # no file: $CHINWAG_HOME
    assert resolve_home(env={"HOME": str(tmp_path)}).root == tmp_path / ".chinwag"
    # the file found in $CHINWAG_HOME says where the data lives, with ${ENV} as config.yaml spells it
    (tmp_path / "env" / "config.yaml").write_text("home: ${DATA:-/nowhere}\n")
    assert resolve_home(env=env).root == tmp_path / "data"
    assert load_config(env=env).home == tmp_path / "data"
    # a relative `home:` is relative to the file, not to wherever the command happens to run
    other = tmp_path / "etc" / "chinwag.yaml"
    other.parent.mkdir()
    other.write_text("home: ../var/chinwag\n")
    assert resolve_home(config=other, env=env).root == tmp_path / "var" / "chinwag"
    assert load_config(other, env=env).home == tmp_path / "var" / "chinwag"
    # --home is literal: that directory, whatever any file says (its own config.yaml still applies)
    flag = tmp_path / "flag"
    flag.mkdir()
    (flag / "config.yaml").write_text(f"home: {tmp_path / 'elsewhere'}\ngateway: {{max_pending: 2}}\n")
    config = load_config(home=flag, env=env)
    assert config.home == flag == resolve_home(flag, env=env).root
    assert config.gateway.max_pending == 2
    assert any("--home" in w and "elsewhere" in w for w in config.warnings)
    assert resolve_home(flag, other, env=env).root == flag


def test_an_explicit_config_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml", env={})
    with pytest.raises(ValueError, match="no such config file"):
        resolve_home(config=tmp_path / "missing.yaml", env={})
