"""Typed views of a validated configuration: one frozen dataclass per section, and `Config`, the whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config.schema import ALL_PLATFORMS, CHAT_PLATFORMS, COMMON_PLATFORM_KEYS, CREDENTIALS


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
        from gateway.sessions.reset import ResetPolicies

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
class StorageConfig:
    retention_days: float  # 0: keep every conversation
    maintenance_hours: float  # how often the daemon does its upkeep (gateway.service.maintenance)


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
    storage: StorageConfig
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
                name,
                self.local_enabled(),
                ("*",),
                tuple(raw.get("admins") or ()),
                "disabled",
                (),
                (),
                False,
                self.gateway.busy_mode,
                raw,
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
            k: v
            for k, v in raw.items()
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
