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

import dataclasses
import importlib.util
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from gateway.config.schema import (
    _ALIASES,
    ADAPTER_KEYS,
    COMMON_PLATFORM_KEYS,
    SCHEMA,
    ConfigError,
    Err,
    _kind,
    _section,
    _substitute,
    _suggest,
    build,
)
from gateway.config.sections import ALL_PLATFORMS, CHAT_PLATFORMS, CREDENTIALS
from gateway.config.views import Config
from gateway.storage.home import HomeError, choose_home
from gateway.storage.home import find_config_file as _find_config_file
from platforms.telegram.settings import TelegramSettings


def default_home(env: Mapping[str, str] | None = None) -> Path:
    """Where home is when nothing names it: `$CHINWAG_HOME`, else ~/.chinwag (no config file read)."""
    env = os.environ if env is None else env
    return choose_home(None, None, None, env)


def find_config_file(
    config_path: str | os.PathLike | None = None,
    home: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """--config if given (must exist), else config.yaml in --home / $CHINWAG_HOME / ~/.chinwag, else None."""
    try:
        return _find_config_file(config_path, home, env)
    except HomeError as exc:
        raise ConfigError([str(exc)]) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (PyYAML keeps the last one
    silently, which would drop half of a section without a word)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (first on line {seen[key] + 1})", key_node.start_mark
            )
        if isinstance(key, (str, int, float, bool)):
            seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


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
        data = yaml.load(text, Loader=_StrictLoader)
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
    raw_platforms, notices = data.get("platforms"), list[str]()
    if raw_platforms is None or isinstance(raw_platforms, dict):
        raw_platforms, notices = _platforms_from_environment(raw_platforms or {}, env)
    platforms, written = _platform_sections(raw_platforms, err)
    out["platforms"] = platforms
    if "host" not in (data.get("http") or {}) and env.get("CHINWAG_HTTP_HOST"):
        out["http"]["host"] = env["CHINWAG_HTTP_HOST"]  # the container's 0.0.0.0 (Dockerfile)

    _check_reset(out["session"]["reset"], err)
    _check_urls(out, ("model", "auxiliary"), err)
    _check_platform_rules(platforms, written, err)
    _check_new_sections(out, err)
    warnings, off = _platform_warnings(platforms, written)
    if off:  # a copied config.example.yaml: said once, not as a warning (nothing is wrong)
        notices.append(
            f"platforms {', '.join(off)}: no credentials set, so {'they stay' if len(off) > 1 else 'it stays'} off"
        )

    if problems:
        raise ConfigError(problems)

    home = choose_home(home_override, out["home"] or None, path, env)
    if home_override and out["home"]:
        in_file = choose_home(None, out["home"], path, env)
        if in_file != home:
            warnings.append(f"home: {label} says {in_file}, but --home {home} is used")
    return Config(
        home=home,
        **_sections(out, env),
        platforms=platforms,
        mcp=out["mcp"] or {},
        written=written,
        path=path,
        warnings=tuple(warnings),
        notices=tuple(notices),
        data=out,
    )


def _sections(out: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Each section of Config built from its checked values; the model falls back to the environment
    field by field (DESIGN.md §1), and the sections that fall back to the model over it."""
    views = {
        f.name: build(f.metadata["section"], out[f.name]) for f in dataclasses.fields(Config) if "section" in f.metadata
    }
    model = views["model"] = views["model"].from_env(env)
    for name in ("auxiliary", "transcription", "embeddings"):
        views[name] = views[name].over(model)
    return views


def _platform_sections(raw_platforms: Any, err: Err) -> tuple[dict[str, dict[str, Any]], dict[str, frozenset[str]]]:
    """Each known platform's section checked (common and adapter keys, defaults filled), and the keys
    the file wrote for each platform it names; an unknown name is an error."""
    if raw_platforms is None:
        raw_platforms = {}
    if not isinstance(raw_platforms, dict):
        err("platforms", f"must be a mapping of platform name to settings (got {_kind(raw_platforms)})")
        raw_platforms = {}
    for name in raw_platforms:
        if name not in ALL_PLATFORMS:
            hint = _ALIASES.get(str(name)) or _suggest(str(name), ALL_PLATFORMS)
            err(
                f"platforms.{name}",
                "unknown platform"
                + (f"; did you mean {hint}?" if hint else "")
                + f" (known: {', '.join(ALL_PLATFORMS)})",
            )
    platforms: dict[str, dict[str, Any]] = {}
    written: dict[str, frozenset[str]] = {}
    for name in ALL_PLATFORMS:
        section = raw_platforms.get(name)
        if section is None:
            section = {}
        if not isinstance(section, dict):
            err(f"platforms.{name}", f"must be a mapping (got {_kind(section)})")
            section = {}
        platforms[name] = _section(section, _platform_schema(name), f"platforms.{name}", err)
        if name in raw_platforms:
            written[name] = frozenset(k for k in section if section[k] is not None)
    return platforms, written


def _platform_schema(name: str) -> dict[str, Any]:
    schema = dict(ADAPTER_KEYS[name])
    if name == "local":  # the terminal: no access rules, but admins and the two overrides
        schema.update({k: COMMON_PLATFORM_KEYS[k] for k in ("admins", "busy_mode", "streaming")})
    else:
        schema.update(COMMON_PLATFORM_KEYS)
    return schema


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _check_reset(reset: dict[str, Any], err: Callable[[str, str], None]) -> None:
    from gateway.sessions.reset import ResetPolicies

    try:
        ResetPolicies.from_config(reset, where="session.reset")
    except ValueError as exc:  # its messages start with the dotted key
        key, _, problem = str(exc).partition(": ")
        err(key, problem or str(exc))


def _check_urls(out: dict[str, Any], sections: tuple[str, ...], err: Err) -> None:
    for section in sections:
        url = out[section]["base_url"]
        if url and not url.startswith(("http://", "https://")):
            err(f"{section}.base_url", f"must be an http:// or https:// URL (got {url!r})")


def _check_new_sections(out: dict[str, Any], err: Callable[[str, str], None]) -> None:
    """Rules across keys of the storage, media and model-side sections."""
    storage = out["storage"]
    if storage["backend"] == "postgres":
        if not storage["postgres"]["dsn"]:
            err("storage.postgres.dsn", "is required when storage.backend is postgres (e.g. ${CHINWAG_PG_DSN})")
        elif importlib.util.find_spec("psycopg") is None or importlib.util.find_spec("psycopg_pool") is None:
            err("storage.backend", "postgres needs psycopg 3 and psycopg_pool: pip install 'chinwag[postgres]'")
        embeddings = out["embeddings"]
        if embeddings["provider"] not in (None, "off") or (embeddings["provider"] is None and embeddings["model"]):
            # recall's window vectors (gateway/storage/vectors.py) have no tables in the Postgres schema yet
            err(
                "embeddings.provider",
                "recall's semantic stage is not available on storage.backend postgres yet (its vectors are "
                "stored in SQLite only): leave embeddings unset, or use the sqlite backend",
            )
    elif storage["postgres"]["dsn"]:
        err("storage.postgres.dsn", "is set but storage.backend is sqlite (set backend: postgres, or remove the dsn)")
    media = out["media"]
    if media["max_total_bytes"] and media["max_total_bytes"] < media["max_bytes"]:
        err(
            "media.max_total_bytes",
            f"must be 0 (no cap) or at least media.max_bytes ({media['max_bytes']}) (got {media['max_total_bytes']})",
        )
    _check_urls(out, ("transcription", "embeddings"), err)
    if out["embeddings"]["provider"] == "openai" and not out["embeddings"]["model"]:
        err("embeddings.model", "is required when embeddings.provider is openai (e.g. text-embedding-3-small)")


def _check_platform_rules(
    platforms: dict[str, dict[str, Any]], written: dict[str, frozenset[str]], err: Callable[[str, str], None]
) -> None:
    local_busy = platforms["local"]["busy_mode"]
    if local_busy not in (None, "queue"):
        # The terminal is one person typing ahead: each line is answered in order (/stop or Ctrl-C
        # cancels a reply), so interrupt and steer would be accepted and silently not done.
        err(
            "platforms.local.busy_mode",
            f"the terminal answers each line in order, so only queue is allowed here (got {local_busy!r}); "
            "use /stop or Ctrl-C to cancel a reply",
        )
    tg = platforms["telegram"]
    webhook = TelegramSettings(mode=tg["mode"], webhook_url=tg["webhook_url"]).effective_mode == "webhook"
    if "telegram" in written and tg["token"] and webhook:
        if not tg["webhook_url"]:
            err("platforms.telegram.webhook_url", "is required when mode is webhook")
        if not tg["secret_token"]:
            err("platforms.telegram.secret_token", "is required in webhook mode (Telegram sends it with every update)")
    fs = platforms["feishu"]
    if (
        "feishu" in written
        and fs["mode"] == "webhook"
        and fs["app_id"]
        and not (fs["verification_token"] or fs["encrypt_key"])
    ):
        err(
            "platforms.feishu.verification_token",
            "webhook mode needs verification_token and/or encrypt_key "
            "(an unauthenticated webhook would let anyone talk as any user)",
        )
    for name, key in (
        ("telegram", "base_url"),
        ("telegram", "base_file_url"),
        ("discord", "api_base"),
        ("feishu", "domain"),
    ):
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
        if raw["group_policy"] == "allowlist" and name in written and not raw["group_allowlist"]:
            err(
                f"platforms.{name}.group_allowlist",
                "is empty but group_policy is allowlist (no group would be answered)",
            )


# A chat platform the config file does not name starts from its credentials in the environment
# (`docker run -e TELEGRAM_BOT_TOKEN ...`: a container has no terminal and, at first, no config.yaml),
# in its default mode (Telegram: polling), with `<NAME>_ALLOWED_USERS` (comma-separated) let in.
ENV_CREDENTIALS = {
    "telegram": {"token": "TELEGRAM_BOT_TOKEN"},
    "feishu": {"app_id": "FEISHU_APP_ID", "app_secret": "FEISHU_APP_SECRET"},
    "discord": {"token": "DISCORD_BOT_TOKEN"},
}


def _platforms_from_environment(raw: dict[Any, Any], env: Mapping[str, str]) -> tuple[dict[Any, Any], list[str]]:
    """`raw` with a section for each unnamed platform whose credentials are all in `env`, and a
    sentence for each (logged at start: the platform is on although no file says so)."""
    out, notices = dict(raw), []
    for name, variables in ENV_CREDENTIALS.items():
        values = {key: env.get(var, "").strip() for key, var in variables.items()}
        if name in raw or not all(values.values()):
            continue
        allowed_var = f"{name.upper()}_ALLOWED_USERS"
        allowed = [u.strip() for u in env.get(allowed_var, "").split(",") if u.strip()]
        out[name] = {**values, "allowed_users": allowed}
        mode = " (polling)" if name == "telegram" else ""
        who = f"allowed: {', '.join(allowed)}" if allowed else f"nobody may talk yet: set {allowed_var}"
        notices.append(
            f"platforms.{name}: on from {' and '.join(variables.values())}{mode}, "
            f"no platforms.{name} in a config file; {who}"
        )
    return out, notices


def _platform_warnings(
    platforms: dict[str, dict[str, Any]], written: dict[str, frozenset[str]]
) -> tuple[list[str], list[str]]:
    """Warnings about the platform sections, and the platforms whose sections hold no credential at
    all (a template's `${TELEGRAM_BOT_TOKEN:-}` with nothing set: off, as meant)."""
    warnings, off = [], []
    for name in CHAT_PLATFORMS:
        raw = platforms[name]
        if name not in written or not raw["enabled"]:
            continue
        missing = [k for k in CREDENTIALS[name] if not str(raw.get(k) or "").strip()]
        if len(missing) == len(CREDENTIALS[name]):
            off.append(name)
        elif missing:
            warnings.append(f"platforms.{name}: {' and '.join(missing)} not set, so {name} stays off")
        elif not raw["allowed_users"] and not raw["admins"]:
            warnings.append(
                f"platforms.{name}: allowed_users and admins are empty, so nobody can talk to the bot "
                f'(add user ids, or "*" for everyone)'
            )
    return warnings, off
