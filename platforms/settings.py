"""An adapter's settings, declared once: a frozen dataclass whose fields are the keys of
`platforms.<name>` in config.yaml (name, type, default; range, choices and a line of doc in the
field's metadata). The config schema is derived from these classes (gateway.config.schema), and an
adapter builds its settings from a plain mapping with `settings_from`, so the validator, the example
file's test and the adapter cannot disagree about a key. No SDK is imported here or in any
`platforms/<name>/settings.py`: reading the config must not load three chat SDKs.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, TypeVar

T = TypeVar("T")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def truthy(value: Any) -> bool | None:
    """A yes/no written as text (an env var, a quoted YAML value): true/yes/on/1 -> True,
    false/no/off/0 -> False, in any case; anything else (not a string, or another word) -> None.
    The one rule for both the config validator and `settings_from`."""
    if not isinstance(value, str):
        return None
    word = value.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def setting(
    default: Any,
    doc: str = "",
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] = (),
    secret: bool = False,
) -> Any:
    """A settings field: its default, a line of doc, its checks; a secret is kept out of repr."""
    meta = {"doc": doc, "minimum": minimum, "maximum": maximum, "choices": choices, "secret": secret}
    return dataclasses.field(default=default, repr=not secret, metadata=meta)


def value_type(cls: type, name: str) -> type:
    """The plain type of a field (`float | None` -> float)."""
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) is tuple:  # a list of values (`tuple[str, ...]`)
        return tuple
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def settings_from(
    cls: type[T], config: Mapping[str, Any] | T | None, where: str, error: type[Exception] = ValueError
) -> T:
    """`cls` from a mapping (a config section or a test's dict): missing or None keys take the
    default, keys that are not settings (the gateway's access keys) are ignored, values are
    converted to the field's type; a value that does not convert raises `error` naming `where`."""
    if isinstance(config, cls):
        return config
    config = config or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw = config.get(f.name)  # type: ignore[union-attr]
        if raw is None:
            continue
        kind = value_type(cls, f.name)
        try:
            if kind is bool and truthy(raw) is not None:
                values[f.name] = truthy(raw)
            elif kind in (int, float, bool, str):
                values[f.name] = kind(raw)
            elif kind is tuple:
                values[f.name] = tuple(str(v) for v in (raw if isinstance(raw, (list, tuple)) else [raw]))
            else:
                values[f.name] = raw
        except (TypeError, ValueError) as exc:
            raise error(f"{where}: a numeric option is not a number ({exc})") from None
    return cls(**values)
