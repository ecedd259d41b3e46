"""The shape of config.yaml: every key with its type, default and allowed values, and the
generic machinery that checks a parsed document against it (types, ranges, choices, unknown keys
with a did-you-mean, `${ENV}` substitution). gateway.config.load builds the typed view on top.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gateway.envvars import expand_env
from gateway.storage.home import DEFAULT_HOME  # noqa: F401  (re-exported; one home rule)
from platforms.discord.settings import DiscordSettings
from platforms.feishu.settings import FeishuSettings
from platforms.settings import value_type
from platforms.telegram.settings import TelegramSettings

CHAT_PLATFORMS = ("telegram", "feishu", "discord")
ALL_PLATFORMS = ("local",) + CHAT_PLATFORMS
BUSY_MODES = ("queue", "interrupt", "steer")
GROUP_POLICIES = ("open", "allowlist", "blacklist", "admin_only", "disabled")
RESET_MODES = ("none", "idle", "daily", "both")
STORAGE_BACKENDS = ("sqlite", "postgres")
SYNCHRONOUS_LEVELS = ("full", "normal")  # storage.synchronous: see gateway/storage/connect.py
STREAMING_MODES = ("auto", "off")
INTERRUPTED_TURNS = ("rerun", "notify")
EMBEDDING_PROVIDERS = ("off", "openai", "local")
MB = 1024 * 1024

# Credentials that make a chat platform "configured" (all must be non-empty).
CREDENTIALS = {"telegram": ("token",), "feishu": ("app_id", "app_secret"), "discord": ("token",)}


class ConfigError(ValueError):
    """One or more problems in a configuration file; `problems` lists them one per entry."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


# --------------------------------------------------------------------------------------------
# Schema: each section maps key -> Field. Kept declarative so the example file and the
# validator cannot drift apart silently (tests compare them).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    kind: str  # str | int | float | bool | list | choice | dict | tristate
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def _s(default: str = "") -> Field:
    return Field("str", default)


def _i(default: int, minimum: float | None = 0, maximum: float | None = None) -> Field:
    return Field("int", default, minimum=minimum, maximum=maximum)


def _f(default: float, minimum: float | None = 0) -> Field:
    return Field("float", default, minimum=minimum)


def _b(default: bool) -> Field:
    return Field("bool", default)


def _c(default: str, *choices: str) -> Field:
    return Field("choice", default, choices=choices)


def _l() -> Field:
    return Field("list", ())


SCHEMA: dict[str, Any] = {
    "home": _s(""),
    "model": {
        "base_url": _s(),
        "api_key": _s(),
        "name": _s(),
        "timeout_seconds": _f(60, minimum=1),
        "context_window": _i(128000, minimum=1024),
        "max_iterations": _i(8, minimum=1),
        "max_tokens": _i(0),
        "vision": Field("tristate", "auto"),
    },
    "auxiliary": {"base_url": _s(), "api_key": _s(), "name": _s()},
    "session": {
        "group_sessions_per_user": _b(True),
        "thread_sessions_per_user": _b(False),
        # Validated by gateway.reset.ResetPolicies.from_config (the store's own reader).
        "reset": Field("dict"),
    },
    "gateway": {
        "busy_mode": _c("queue", *BUSY_MODES),
        "max_pending": _i(5, minimum=1),
        "busy_ack": _b(True),
        "agent_cache": {"max_agents": _i(64, minimum=1), "idle_ttl_minutes": _f(30, minimum=0)},
        "single_owner": Field("tristate", "auto"),
        "shutdown_timeout_seconds": _f(10, minimum=0),
        "streaming": _c("auto", *STREAMING_MODES),
        "interrupted_turns": _c("rerun", *INTERRUPTED_TURNS),
        "tool_status": _c("on", "on", "off"),
    },
    "recall": {"deadline_seconds": _f(60, minimum=1), "recaps": _b(True)},
    "memory": {"memory_chars": _i(2200, minimum=100), "user_chars": _i(1375, minimum=100)},
    "storage": {
        "retention_days": _f(0, minimum=0),
        "maintenance_hours": _f(6, minimum=0.01),
        "backend": _c("sqlite", *STORAGE_BACKENDS),
        "synchronous": _c("full", *SYNCHRONOUS_LEVELS),
        "postgres": {"dsn": _s()},
    },
    "media": {"max_bytes": _i(20 * MB, minimum=1), "max_total_bytes": _i(1024 * MB, minimum=0)},
    "transcription": {"base_url": _s(), "api_key": _s(), "model": _s()},
    "embeddings": {
        "provider": Field("choice", None, choices=EMBEDDING_PROVIDERS),
        "base_url": _s(),
        "api_key": _s(),
        "model": _s(),
        "query_prefix": _s(),
        "passage_prefix": _s(),
    },
    "platforms": Field("dict"),
    "http": {"enabled": _b(True), "host": _s("127.0.0.1"), "port": _i(8765, 0, 65535), "console_token": _s()},
    "logging": {"level": _c("INFO", "DEBUG", "INFO", "WARNING", "ERROR"), "format": _c("text", "text", "json")},
}

# Keys every chat platform section understands (the gateway's access rules and overrides).
COMMON_PLATFORM_KEYS: dict[str, Field] = {
    "enabled": _b(True),
    "allowed_users": _l(),
    "admins": _l(),
    "group_policy": _c("open", *GROUP_POLICIES),
    "group_allowlist": _l(),
    "group_blacklist": _l(),
    "require_mention": _b(True),
    "busy_mode": Field("choice", None, choices=BUSY_MODES),
    "streaming": Field("choice", None, choices=STREAMING_MODES),
}


def fields_of(settings_class: type) -> dict[str, Field]:
    """The schema of a settings dataclass (platforms/<name>/settings.py): each field is a key, its
    type and default from the class, its range and choices from the field's metadata."""
    out: dict[str, Field] = {}
    for f in dataclasses.fields(settings_class):
        meta = f.metadata
        choices = tuple(meta.get("choices") or ())
        kind = "choice" if choices else _KINDS[value_type(settings_class, f.name)]
        out[f.name] = Field(kind, f.default, choices=choices, minimum=meta.get("minimum"), maximum=meta.get("maximum"))
    return out


_KINDS = {str: "str", int: "int", float: "float", bool: "bool", tuple: "list"}

# Adapter-specific keys: declared by each adapter's settings class; handed to the adapter after
# substitution and type checks.
SETTINGS_CLASSES: dict[str, type] = {
    "telegram": TelegramSettings,
    "feishu": FeishuSettings,
    "discord": DiscordSettings,
}
ADAPTER_KEYS: dict[str, dict[str, Field]] = {
    "local": {"enabled": Field("tristate", "auto"), "user": _s(), "prompt": _s("")},
    **{name: fields_of(cls) for name, cls in SETTINGS_CLASSES.items()},
}

# Names people reach for that mean something else here.
_ALIASES = {"lark": "feishu (set domain: https://open.larksuite.com)", "tg": "telegram", "terminal": "local"}


# --------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------


def _substitute(value: Any, env: Mapping[str, str], key: str, err: Callable[[str, str], None]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, env, f"{key}.{k}" if key else str(k), err) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env, f"{key}[{i}]", err) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def missing(name: str, is_set: bool) -> None:
        state = "is empty" if is_set else "is not set"
        err(key, f"environment variable {name} {state} (write ${{{name}:-}} to allow it empty)")

    return expand_env(value, env, missing)


def _section(data: Any, schema: dict[str, Any], prefix: str, err: Callable[[str, str], None]) -> dict[str, Any]:
    """Check `data` against `schema`: unknown keys, types; return the values with defaults filled."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        err(prefix, f"must be a mapping (got {_kind(data)})")
        data = {}
    for key in data:
        if key not in schema:
            hint = _suggest(str(key), schema)
            where = f"{prefix}.{key}" if prefix else str(key)
            err(
                where,
                "unknown key"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f" (allowed here: {', '.join(k for k in schema)})",
            )
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        where = f"{prefix}.{key}" if prefix else key
        if isinstance(spec, dict):
            out[key] = _section(data.get(key), spec, where, err)
            continue
        if key not in data or data[key] is None:
            out[key] = {} if spec.kind == "dict" else (list(spec.default) if spec.kind == "list" else spec.default)
            continue
        out[key] = _coerce(data[key], spec, where, err)
    return out


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(value: Any, spec: Field, where: str, err: Callable[[str, str], None]) -> Any:
    kind = spec.kind
    if kind == "str":
        if isinstance(value, (dict, list)):
            err(where, f"must be a string (got {_kind(value)})")
            return spec.default
        return str(value)
    if kind == "bool":
        return _bool(value, where, err, spec.default)
    if kind == "tristate":
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE):
            return _bool(value, where, err, spec.default)
        err(where, f"must be auto, true or false (got {value!r})")
        return spec.default
    if kind in ("int", "float"):
        if isinstance(value, bool):
            err(where, f"must be a number (got {value!r})")
            return spec.default
        try:
            number = int(value) if kind == "int" else float(value)
            if kind == "int" and isinstance(value, float) and value != int(value):
                raise ValueError
        except (TypeError, ValueError):
            err(where, f"must be {'a whole number' if kind == 'int' else 'a number'} (got {value!r})")
            return spec.default
        if spec.minimum is not None and number < spec.minimum:
            err(where, f"must be at least {spec.minimum:g} (got {value!r})")
        if spec.maximum is not None and number > spec.maximum:
            err(where, f"must be at most {spec.maximum:g} (got {value!r})")
        return number
    if kind == "choice":
        if isinstance(value, bool) and "off" in spec.choices:
            # YAML reads a bare off/on as a boolean: `streaming: off` means the choice "off"
            value = "off" if not value else ("on" if "on" in spec.choices else spec.default)
        text = str(value).strip()
        if text not in spec.choices:
            lowered = text.lower() if spec.choices[0].islower() else text.upper()
            if lowered in spec.choices:
                return lowered
            hint = _suggest(text, spec.choices)
            err(
                where,
                f"must be one of {', '.join(spec.choices)} (got {value!r})"
                + (f"; did you mean {hint!r}?" if hint else ""),
            )
            return spec.default
        return text
    if kind == "list":
        if isinstance(value, str):  # "a,b" from an env var
            items: list[Any] = [p.strip() for p in value.split(",") if p.strip()]
        elif isinstance(value, list):
            items = value
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [value]
        else:
            err(where, f"must be a list of ids (got {_kind(value)})")
            return []
        result = []
        for i, item in enumerate(items):
            if isinstance(item, (dict, list, bool)) or item is None or str(item).strip() == "":
                err(f"{where}[{i}]", f"must be an id (a string or number) (got {item!r})")
                continue
            result.append(str(item).strip())
        return result
    if kind == "dict":
        if not isinstance(value, dict):
            err(where, f"must be a mapping (got {_kind(value)})")
            return {}
        return value
    raise AssertionError(kind)


def _bool(value: Any, where: str, err: Callable[[str, str], None], default: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    err(where, f"must be true or false (got {value!r})")
    return default


def _suggest(word: str, options: Any) -> str | None:
    matches = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
