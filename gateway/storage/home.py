"""Where chinwag keeps its files: the home directory, the config file in use, and the paths inside.

This is the one resolution: the config loader (`chinwag run`, `chat`, `doctor`) and the data
commands (`chinwag sessions ...`) all call it, so they open the same database. Precedence:

1. `--home DIR`: that directory, literally (its config.yaml, if any, is the file read). An explicit
   flag is what the person wants right now; a differing `home:` in that file gets a warning.
2. The `home:` key of the config file in use (`--config FILE`, else config.yaml in `$CHINWAG_HOME`,
   else in ~/.chinwag). A file found in X saying `home: Y` means "my data lives in Y" (moved), so
   Y wins over `$CHINWAG_HOME`. `${ENV}` is expanded as everywhere in the file; a relative path is
   relative to the file's directory, not to wherever the command happens to run.
3. `$CHINWAG_HOME`.
4. `~/.chinwag`.

Nothing is created here except by `ensure()`, so asking where things are never has side effects.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from gateway.envvars import expand_env

DEFAULT_HOME = "~/.chinwag"
_SAFE_ID = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,199}")


def is_safe_session_id(session_id: object) -> bool:
    return isinstance(session_id, str) and _SAFE_ID.fullmatch(session_id) is not None


@dataclass(frozen=True)
class Home:
    root: Path

    @property
    def db_path(self) -> Path:
        return self.root / "state.db"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def sessions_index(self) -> Path:
        return self.root / "sessions.json"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def memory_path(self) -> Path:
        return self.root / "MEMORY.md"

    @property
    def user_path(self) -> Path:
        return self.root / "USER.md"

    def transcript_path(self, session_id: str) -> Path:
        # Imported ids are arbitrary text: never let one name a path outside sessions/.
        if not is_safe_session_id(session_id):
            raise ValueError(f"session id {session_id[:60]!r} cannot be used as a file name")
        return self.sessions_dir / f"{session_id}.jsonl"

    def ensure(self) -> "Home":
        """Create the directory tree (owner-only: it holds conversations)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.sessions_dir.mkdir(exist_ok=True, mode=0o700)
        return self


class HomeError(ValueError):
    """Home or its config file cannot be determined (the message names the file and the problem)."""


def _expand_user(text: str, env: Mapping[str, str]) -> Path:
    # `~` from the same environment as everything else (tests and services pass their own)
    if (text == "~" or text.startswith("~/")) and env.get("HOME"):
        return Path(env["HOME"] + text[1:])
    return Path(text).expanduser()


def find_config_file(
    config: str | os.PathLike | None = None,
    home: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """The config file in use: --config (must exist), else config.yaml in --home, in $CHINWAG_HOME
    or in ~/.chinwag, when it exists; None means embedded defaults."""
    env = os.environ if env is None else env
    if config:
        path = _expand_user(str(config), env)
        if not path.is_file():
            raise HomeError(f"{path}: no such config file")
        return path
    base = _expand_user(str(home or env.get("CHINWAG_HOME") or DEFAULT_HOME), env)
    candidate = base / "config.yaml"
    return candidate if candidate.is_file() else None


def choose_home(
    flag: str | os.PathLike | None,
    file_home: str | None,
    config_path: Path | None,
    env: Mapping[str, str],
) -> Path:
    """THE precedence (see the module docstring). `file_home` is the config file's `home` key with
    `${ENV}` already expanded; a relative one is taken relative to that file's directory."""
    if flag:
        return _expand_user(str(flag), env).absolute()
    if file_home:
        path = _expand_user(file_home, env)
        if not path.is_absolute() and config_path is not None:
            path = config_path.parent / path
        return Path(os.path.normpath(path.absolute()))
    return _expand_user(env.get("CHINWAG_HOME") or DEFAULT_HOME, env).absolute()


def home_key(path: Path, env: Mapping[str, str]) -> str | None:
    """The `home` key of a config file (`${ENV}` expanded), read leniently: only this key matters
    here; the config loader reports every other problem of the file."""
    import yaml  # only needed when there is a file

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise HomeError(f"{path}: cannot read the home key ({exc})") from None
    value = data.get("home") if isinstance(data, dict) else None
    if value is None:
        return None
    if not isinstance(value, str):
        raise HomeError(f"{path}: home: must be a path string")
    problems: list[str] = []
    text = expand_env(value, env, lambda name, is_set: problems.append(name))
    if problems:
        raise HomeError(f"{path}: home: environment variable {problems[0]} is not set")
    return text or None


def resolve_home(
    home: str | os.PathLike | None = None,
    config: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Home:
    """Home for `--home`, `--config` and the environment, as `chinwag run` (the config loader) decides it."""
    env = os.environ if env is None else env
    path = find_config_file(config, home, env)
    file_home = home_key(path, env) if path is not None and not home else None
    return Home(choose_home(home, file_home, path, env))


def home_from_args(args: object) -> Home:
    """The home for a parsed `chinwag` command line (`--home`, `--config`)."""
    return resolve_home(getattr(args, "home", None), getattr(args, "config", None))
