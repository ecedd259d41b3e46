"""`${NAME}` in config.yaml strings: the one expander, for the config loader and for home resolution.

`${NAME}` is the variable's value (unset or empty: the caller's `missing` is told, and it expands to
""), `${NAME:-default}` the value or `default`, `$${` a literal `${`. It lives on the ground floor
because both the storage floor (which home?) and the config floor read config.yaml strings, and
the two must never disagree about what a string says.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping

_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def expand_env(text: str, env: Mapping[str, str], missing: Callable[[str, bool], None] | None = None) -> str:
    """`text` with its `${...}` expanded from `env`; `missing(name, is_set)` hears of each bare
    `${NAME}` whose variable is unset (is_set False) or empty (True)."""
    if "$" not in text:
        return text

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if env.get(name, "") != "":
            return env[name]
        if default is not None:
            return default
        if missing is not None:
            missing(name, name in env)
        return ""

    return _VAR.sub(repl, text)
