"""Where chinwag keeps its files: the home directory and the paths inside it.

Precedence for the directory: an explicit `--home`, then the `home` key of an explicit config file,
then `$CHINWAG_HOME`, then `~/.chinwag`. Nothing is created here except by `ensure()`, so asking
where things are never has side effects.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

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


def _home_from_config(config_path: str | os.PathLike) -> str | None:
    """The `home` key of a config file, if the file exists and sets it."""
    path = Path(config_path).expanduser()
    if not path.is_file():
        return None
    import yaml  # only needed when a config file is named

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({exc})") from None
    value = data.get("home") if isinstance(data, dict) else None
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{path}: 'home' must be a path string")
    return value or None


def resolve_home(
    home: str | os.PathLike | None = None,
    config: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Home:
    env = os.environ if env is None else env
    chosen = home or (config and _home_from_config(config)) or env.get("CHINWAG_HOME") or DEFAULT_HOME
    return Home(Path(os.path.expandvars(str(chosen))).expanduser().absolute())


def home_from_args(args: object) -> Home:
    """The home for a parsed `chinwag` command line (`--home`, `--config`)."""
    return resolve_home(getattr(args, "home", None), getattr(args, "config", None))
