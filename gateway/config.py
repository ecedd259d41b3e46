"""`config.yaml`: load, substitute `${ENV}`, fill defaults, validate, and give typed access.

Every key has a default, so no file at all is a valid configuration (DESIGN.md §1). Errors name the
file, the dotted key and the problem, e.g.
``config.yaml: gateway.busy_mode: must be one of queue, interrupt, steer (got 'fast')``; all errors
of a file are reported together so one run shows everything to fix. Unknown keys are errors (a typo
must not silently fall back to a default), with a did-you-mean.

Secrets belong in the environment: any string may hold ``${NAME}`` (unset -> error naming the key)
or ``${NAME:-default}``; ``$${`` is a literal ``${``.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

CHAT_PLATFORMS = ("telegram", "feishu", "discord")
ALL_PLATFORMS = ("local",) + CHAT_PLATFORMS
BUSY_MODES = ("queue", "interrupt", "steer")
GROUP_POLICIES = ("open", "allowlist", "blacklist", "admin_only", "disabled")
RESET_MODES = ("none", "idle", "daily", "both")
DEFAULT_HOME = "~/.chinwag"

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
    },
    "recall": {"deadline_seconds": _f(60, minimum=1), "recaps": _b(True)},
    "memory": {"memory_chars": _i(2200, minimum=100), "user_chars": _i(1375, minimum=100)},
    "platforms": Field("dict"),
    "http": {"enabled": _b(True), "host": _s("127.0.0.1"), "port": _i(8765, 0, 65535)},
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
}

_ADAPTER_COMMON = {
    "watchdog_seconds": _f(120, minimum=1),
    "reconnect_base": _f(1.0, minimum=0.01),
    "reconnect_cap": _f(60.0, minimum=0.01),
}

# Adapter-specific keys: handed to the adapter untouched (after substitution and type checks).
# Defaults of None mean "the adapter decides".
ADAPTER_KEYS: dict[str, dict[str, Field]] = {
    "local": {"enabled": Field("tristate", "auto"), "user": _s(), "prompt": _s("")},
    "telegram": dict(
        _ADAPTER_COMMON,
        token=_s(),
        base_url=_s("https://api.telegram.org/bot"),
        base_file_url=_s("https://api.telegram.org/file/bot"),
        mode=_c("polling", "polling", "webhook"),
        webhook_url=_s(),
        secret_token=_s(),
        poll_timeout=_i(30, minimum=1),
        send_attempts=_i(4, minimum=1),
        max_retry_after=_f(60, minimum=0),
        request_timeout=_f(10, minimum=0.1),
        webhook_check_seconds=Field("float", None, minimum=0.1),
    ),
    "feishu": {
        "app_id": _s(),
        "app_secret": _s(),
        "domain": _s("https://open.feishu.cn"),
        "mode": _c("websocket", "websocket", "webhook"),
        "verification_token": _s(),
        "encrypt_key": _s(),
        "watchdog_seconds": _f(300, minimum=1),
        "reaction": _s("OnIt"),
        "rich_text": _b(True),
        "backoff_base": _f(1.0, minimum=0.01),
        "backoff_cap": _f(60.0, minimum=0.01),
        "api_backoff_base": _f(0.5, minimum=0.01),
        "api_backoff_cap": _f(30.0, minimum=0.01),
    },
    "discord": dict(
        _ADAPTER_COMMON,
        token=_s(),
        api_base=_s(),
        gateway_url=_s(),
        guild_ready_timeout=_f(2.0, minimum=0),
        ignore_bots=_b(True),
    ),
}

# Names people reach for that mean something else here.
_ALIASES = {"lark": "feishu (set domain: https://open.larksuite.com)", "tg": "telegram", "terminal": "local"}

# --------------------------------------------------------------------------------------------
# Typed views
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    base_url: str
    api_key: str = field(repr=False)
    name: str
    timeout_seconds: float
    context_window: int
    max_iterations: int
    max_tokens: int  # 0 = endpoint default

    @property
    def is_configured(self) -> bool:
        return bool(self.base_url or self.api_key)


@dataclass(frozen=True)
class AgentCacheConfig:
    max_agents: int
    idle_ttl_minutes: float


@dataclass(frozen=True)
class GatewayConfig:
    busy_mode: str
    max_pending: int
    busy_ack: bool
    agent_cache: AgentCacheConfig
    single_owner: str | bool  # "auto" | True | False (as written; Config.single_owner resolves it)
    shutdown_timeout_seconds: float = 10.0  # running turns get this long to finish at shutdown


@dataclass(frozen=True)
class SessionConfig:
    group_sessions_per_user: bool
    thread_sessions_per_user: bool
    reset: dict[str, Any]  # the `session.reset` section as written (see reset_policies())

    def reset_policies(self) -> Any:
        """gateway.reset.ResetPolicies for this section (validated at load time)."""
        from gateway.reset import ResetPolicies

        return ResetPolicies.from_config(self.reset, where="session.reset")


@dataclass(frozen=True)
class RecallConfig:
    deadline_seconds: float
    recaps: bool


@dataclass(frozen=True)
class MemoryConfig:
    memory_chars: int
    user_chars: int


@dataclass(frozen=True)
class HttpConfig:
    enabled: bool
    host: str
    port: int


@dataclass(frozen=True)
class LoggingConfig:
    level: str
    format: str


@dataclass(frozen=True)
class PlatformSettings:
    """What the gateway needs to know about one platform, plus the raw section for the adapter."""

    name: str
    enabled: bool
    allowed_users: tuple[str, ...]
    admins: tuple[str, ...]
    group_policy: str
    group_allowlist: tuple[str, ...]
    group_blacklist: tuple[str, ...]
    require_mention: bool
    busy_mode: str  # resolved: the platform's override or gateway.busy_mode
    raw: dict[str, Any] = field(repr=False)  # the whole section (substituted, defaults filled)

    def allows_everyone(self) -> bool:
        return "*" in self.allowed_users


@dataclass(frozen=True)
class Config:
    home: Path
    model: ModelConfig
    auxiliary: ModelConfig
    session: SessionConfig
    gateway: GatewayConfig
    recall: RecallConfig
    memory: MemoryConfig
    http: HttpConfig
    logging: LoggingConfig
    platforms: dict[str, dict[str, Any]]  # name -> full section (defaults filled), every known platform
    path: Path | None = None  # the file it came from (None: embedded defaults)
    warnings: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, repr=False)

    # -- platforms ---------------------------------------------------------------------------
    def platform(self, name: str) -> PlatformSettings:
        if name not in self.platforms:
            raise KeyError(f"unknown platform {name!r}; known: {', '.join(ALL_PLATFORMS)}")
        raw = self.platforms[name]
        if name == "local":
            # The terminal is the operator's own: everyone at it is allowed; no groups.
            return PlatformSettings(
                name, self.local_enabled(), ("*",), tuple(raw.get("admins") or ()), "disabled", (), (),
                False, self.gateway.busy_mode, raw,
            )
        return PlatformSettings(
            name=name,
            enabled=bool(raw["enabled"]),
            allowed_users=tuple(raw["allowed_users"]),
            admins=tuple(raw["admins"]),
            group_policy=raw["group_policy"],
            group_allowlist=tuple(raw["group_allowlist"]),
            group_blacklist=tuple(raw["group_blacklist"]),
            require_mention=bool(raw["require_mention"]),
            busy_mode=raw["busy_mode"] or self.gateway.busy_mode,
            raw=raw,
        )

    def chat_platform_configured(self, name: str) -> bool:
        raw = self.platforms.get(name) or {}
        if not raw.get("enabled", False) or not raw.get("_present"):
            return False
        return all(str(raw.get(key) or "").strip() for key in CREDENTIALS[name])

    def local_enabled(self) -> bool:
        setting = self.platforms["local"]["enabled"]
        if setting == "auto":
            return not any(self.chat_platform_configured(n) for n in CHAT_PLATFORMS)
        return bool(setting)

    def configured_platforms(self) -> list[str]:
        """Platforms to start: chat platforms with credentials (and enabled), and `local` when on."""
        names = [n for n in CHAT_PLATFORMS if self.chat_platform_configured(n)]
        if self.local_enabled():
            names.insert(0, "local")
        return names

    def adapter_config(self, name: str) -> dict[str, Any]:
        """The section handed to the adapter's constructor: the common access keys (defaults
        filled) plus the adapter keys the person wrote, type-checked. Unwritten adapter keys are
        left out so the adapter's own defaults apply."""
        raw = self.platforms[name]
        given = raw["_given"]
        return {
            k: v for k, v in raw.items()
            if not k.startswith("_") and (k in given or k in COMMON_PLATFORM_KEYS) and v is not None
        }

    @property
    def single_owner(self) -> bool:
        """True when one person owns the deployment: they may search/resume every session.

        auto: only the local terminal is configured, or exactly one distinct user id is allowed
        across every configured chat platform (and nobody is allowed by "*").
        """
        if self.gateway.single_owner != "auto":
            return bool(self.gateway.single_owner)
        chats = [n for n in self.configured_platforms() if n != "local"]
        if not chats:
            return True
        people: set[str] = set()
        for name in chats:
            raw = self.platforms[name]
            ids = list(raw["allowed_users"]) + list(raw["admins"])
            if "*" in ids:
                return False
            people.update(ids)
        return len(people) == 1

    # -- whole-config views ------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        """The validated config as plain dicts (for code that takes a mapping, e.g. agent.llm)."""
        data = dict(self.data)
        model = dict(data["model"])
        model["timeout"] = model["timeout_seconds"]
        if not model.get("max_tokens"):
            model.pop("max_tokens", None)
        data["model"] = model
        data["home"] = str(self.home)
        return data

    @property
    def db_path(self) -> Path:
        return self.home / "state.db"


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CHINWAG_HOME") or DEFAULT_HOME).expanduser().absolute()


def find_config_file(
    config_path: str | os.PathLike | None = None,
    home: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """--config if given (must exist), else <home>/config.yaml if it exists, else None."""
    if config_path:
        path = Path(config_path).expanduser()
        if not path.is_file():
            raise ConfigError([f"{path}: no such config file"])
        return path
    base = Path(home).expanduser() if home else default_home(env)
    candidate = base / "config.yaml"
    return candidate if candidate.is_file() else None


def load_config(
    config_path: str | os.PathLike | None = None,
    home: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Load the config file (or none: embedded defaults). `home` is --home; it wins over the file."""
    env = os.environ if env is None else env
    path = find_config_file(config_path, home, env)
    if path is None:
        return parse_config({}, env=env, home_override=home)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read: {exc}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}: not valid YAML{where}: {problem}"]) from None
    if data is None:
        data = {}
    return parse_config(data, env=env, home_override=home, path=path)


def parse_config(
    data: Any,
    *,
    env: Mapping[str, str] | None = None,
    home_override: str | os.PathLike | None = None,
    path: Path | None = None,
) -> Config:
    """Validate a parsed YAML document; raise ConfigError listing every problem."""
    env = os.environ if env is None else env
    label = str(path) if path else "config"
    problems: list[str] = []

    def err(key: str, problem: str) -> None:
        problems.append(f"{label}: {key}: {problem}" if key else f"{label}: {problem}")

    if not isinstance(data, dict):
        raise ConfigError([f"{label}: the top level must be a mapping of keys (got {_kind(data)})"])
    data = _substitute(data, env, "", err)
    out = _section(data, SCHEMA, "", err)

    # platforms: each known name gets common + adapter keys; unknown names are errors.
    raw_platforms = data.get("platforms")
    if raw_platforms is None:
        raw_platforms = {}
    if not isinstance(raw_platforms, dict):
        err("platforms", f"must be a mapping of platform name to settings (got {_kind(raw_platforms)})")
        raw_platforms = {}
    for name in raw_platforms:
        if name not in ALL_PLATFORMS:
            hint = _ALIASES.get(str(name)) or _suggest(str(name), ALL_PLATFORMS)
            err(f"platforms.{name}", "unknown platform" + (f"; did you mean {hint}?" if hint else "")
                + f" (known: {', '.join(ALL_PLATFORMS)})")
    platforms: dict[str, dict[str, Any]] = {}
    for name in ALL_PLATFORMS:
        section = raw_platforms.get(name)
        present = name in raw_platforms
        if section is None:
            section = {}
        if not isinstance(section, dict):
            err(f"platforms.{name}", f"must be a mapping (got {_kind(section)})")
            section = {}
        schema = dict(ADAPTER_KEYS[name])
        if name == "local":
            schema["admins"] = _l()
            schema["busy_mode"] = COMMON_PLATFORM_KEYS["busy_mode"]
        else:
            schema.update(COMMON_PLATFORM_KEYS)
        values = _section(section, schema, f"platforms.{name}", err)
        values["_present"] = present
        values["_given"] = frozenset(k for k in section if section[k] is not None)
        platforms[name] = values
    out["platforms"] = platforms

    _check_reset(out["session"]["reset"], err)
    for section in ("model", "auxiliary"):
        url = out[section]["base_url"]
        if url and not url.startswith(("http://", "https://")):
            err(f"{section}.base_url", f"must be an http:// or https:// URL (got {url!r})")
    _check_platform_rules(platforms, err)
    warnings = _platform_warnings(platforms)

    if problems:
        raise ConfigError(problems)

    chosen = home_override or out["home"] or env.get("CHINWAG_HOME") or DEFAULT_HOME
    home = Path(os.path.expandvars(str(chosen))).expanduser().absolute()
    # The model falls back to the environment, field by field (DESIGN.md §1).
    m = out["model"]
    m["base_url"] = (m["base_url"] or env.get("OPENAI_BASE_URL") or "").rstrip("/")
    m["api_key"] = m["api_key"] or env.get("OPENAI_API_KEY") or ""
    m["name"] = m["name"] or env.get("CHINWAG_MODEL") or ""
    a = out["auxiliary"]
    model = ModelConfig(**m)
    auxiliary = ModelConfig(
        base_url=(a["base_url"] or model.base_url).rstrip("/"), api_key=a["api_key"] or model.api_key,
        name=a["name"] or model.name, timeout_seconds=model.timeout_seconds,
        context_window=model.context_window, max_iterations=model.max_iterations, max_tokens=model.max_tokens,
    )
    g = out["gateway"]
    return Config(
        home=home,
        model=model,
        auxiliary=auxiliary,
        session=SessionConfig(**out["session"]),
        gateway=GatewayConfig(
            busy_mode=g["busy_mode"], max_pending=g["max_pending"], busy_ack=g["busy_ack"],
            agent_cache=AgentCacheConfig(**g["agent_cache"]), single_owner=g["single_owner"],
            shutdown_timeout_seconds=g["shutdown_timeout_seconds"],
        ),
        recall=RecallConfig(**out["recall"]),
        memory=MemoryConfig(**out["memory"]),
        http=HttpConfig(**out["http"]),
        logging=LoggingConfig(**out["logging"]),
        platforms=platforms,
        path=path,
        warnings=tuple(warnings),
        data=out,
    )


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------

_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def _substitute(value: Any, env: Mapping[str, str], key: str, err: Callable[[str, str], None]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, env, f"{key}.{k}" if key else str(k), err) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env, f"{key}[{i}]", err) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            return env[name]
        if default is not None:
            return default
        err(key, f"environment variable {name} is not set (write ${{{name}:-}} to allow it empty)")
        return ""

    return _VAR.sub(repl, value)


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
            err(where, "unknown key" + (f"; did you mean {hint!r}?" if hint else "")
                + f" (allowed here: {', '.join(k for k in schema)})")
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
        text = str(value).strip()
        if text not in spec.choices:
            lowered = text.lower() if spec.choices[0].islower() else text.upper()
            if lowered in spec.choices:
                return lowered
            hint = _suggest(text, spec.choices)
            err(where, f"must be one of {', '.join(spec.choices)} (got {value!r})"
                + (f"; did you mean {hint!r}?" if hint else ""))
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


def _check_reset(reset: dict[str, Any], err: Callable[[str, str], None]) -> None:
    from gateway.reset import ResetPolicies

    try:
        ResetPolicies.from_config(reset, where="session.reset")
    except ValueError as exc:  # its messages start with the dotted key
        key, _, problem = str(exc).partition(": ")
        err(key, problem or str(exc))


def _check_platform_rules(platforms: dict[str, dict[str, Any]], err: Callable[[str, str], None]) -> None:
    tg = platforms["telegram"]
    webhook = tg["mode"] == "webhook" if "mode" in tg["_given"] else bool(tg["webhook_url"])
    if tg["_present"] and tg["token"] and webhook:
        if not tg["webhook_url"]:
            err("platforms.telegram.webhook_url", "is required when mode is webhook")
        if not tg["secret_token"]:
            err("platforms.telegram.secret_token", "is required in webhook mode (Telegram sends it with every update)")
    fs = platforms["feishu"]
    if fs["_present"] and fs["mode"] == "webhook" and fs["app_id"] and not fs["verification_token"]:
        err("platforms.feishu.verification_token", "is required when mode is webhook")
    for name, key in (("telegram", "base_url"), ("telegram", "base_file_url"), ("discord", "api_base"),
                      ("feishu", "domain")):
        value = str(platforms[name].get(key) or "")
        if name == "feishu" and value.lower() in ("feishu", "lark"):
            continue
        if value and not value.startswith(("http://", "https://")):
            also = "feishu, lark or " if name == "feishu" else ""
            err(f"platforms.{name}.{key}", f"must be {also}an http:// or https:// URL (got {value!r})")
    gateway_url = str(platforms["discord"].get("gateway_url") or "")
    if gateway_url and not gateway_url.startswith(("ws://", "wss://")):
        err("platforms.discord.gateway_url", f"must be a ws:// or wss:// URL (got {gateway_url!r})")
    for name in CHAT_PLATFORMS:
        raw = platforms[name]
        if raw["group_policy"] == "allowlist" and raw["_present"] and not raw["group_allowlist"]:
            err(f"platforms.{name}.group_allowlist", "is empty but group_policy is allowlist (no group would be answered)")


def _platform_warnings(platforms: dict[str, dict[str, Any]]) -> list[str]:
    warnings = []
    for name in CHAT_PLATFORMS:
        raw = platforms[name]
        if not raw["_present"] or not raw["enabled"]:
            continue
        missing = [k for k in CREDENTIALS[name] if not str(raw.get(k) or "").strip()]
        if missing:
            warnings.append(f"platforms.{name}: {' and '.join(missing)} not set, so {name} stays off")
        elif not raw["allowed_users"] and not raw["admins"]:
            warnings.append(
                f"platforms.{name}: allowed_users and admins are empty, so nobody can talk to the bot "
                f"(add user ids, or \"*\" for everyone)"
            )
    return warnings


def _suggest(word: str, options: Any) -> str | None:
    matches = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)
