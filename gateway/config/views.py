"""Typed views of a validated configuration: one frozen dataclass per section, and `Config`, the whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config.schema import ALL_PLATFORMS, CHAT_PLATFORMS, COMMON_PLATFORM_KEYS, CREDENTIALS, SETTINGS_CLASSES


@dataclass(frozen=True)
class ModelConfig:
    base_url: str
    api_key: str = field(repr=False)
    name: str
    timeout_seconds: float
    context_window: int
    max_iterations: int
    max_tokens: int  # 0 = endpoint default
    vision: str | bool = "auto"  # images as content parts: auto (the endpoint decides) | True | False

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
    streaming: str = "auto"  # auto | off (each platform may override; PlatformSettings.streaming resolves)
    interrupted_turns: str = "rerun"  # a turn cut short by a crash: rerun | notify (DESIGN §11)


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
    backend: str = "sqlite"  # sqlite | postgres (DESIGN §14)
    postgres_dsn: str = field(default="", repr=False)  # storage.postgres.dsn (may hold a password)
    synchronous: str = "full"  # full: an append returned is on disk; normal: see gateway/storage/connect.py


@dataclass(frozen=True)
class MediaConfig:
    max_bytes: int = 20 * 1024 * 1024  # one attachment larger than this is refused with a reply
    max_total_bytes: int = 1024 * 1024 * 1024  # all of home/media/; 0: no cap


@dataclass(frozen=True)
class TranscriptionConfig:
    """An OpenAI-compatible /audio/transcriptions endpoint; base_url and api_key fall back to model.*."""

    base_url: str = ""
    api_key: str = field(default="", repr=False)
    model: str = ""  # empty: voice and audio are not transcribed

    @property
    def enabled(self) -> bool:
        return bool(self.model)


@dataclass(frozen=True)
class EmbeddingsConfig:
    """Vectors for recall. provider is resolved: written, else openai when a model is set, else off."""

    provider: str = "off"  # off | openai | local
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    model: str = ""
    query_prefix: str = ""  # what an e5-style model wants before a question ("query: ")
    passage_prefix: str = ""  # ... and before the text it is compared with ("passage: ")

    @property
    def enabled(self) -> bool:
        return self.provider != "off"


@dataclass(frozen=True)
class HttpConfig:
    enabled: bool
    host: str
    port: int
    console_token: str = field(default="", repr=False)  # required for /console/ off loopback


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
    streaming: str  # resolved: the platform's override or gateway.streaming
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
    media: MediaConfig = field(default_factory=MediaConfig)
    transcription: TranscriptionConfig = field(default_factory=TranscriptionConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    # name -> the keys the file wrote (not None) for each platform section present in the file
    written: dict[str, frozenset[str]] = field(default_factory=dict)
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
                "queue",  # the terminal answers each line in order (validation allows only queue)
                raw["streaming"] or self.gateway.streaming,
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
            streaming=raw["streaming"] or self.gateway.streaming,
            raw=raw,
        )

    def chat_platform_configured(self, name: str) -> bool:
        raw = self.platforms.get(name) or {}
        if not raw.get("enabled", False) or name not in self.written:
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
        given = self.written.get(name, frozenset())
        return {
            k: v for k, v in self.platforms[name].items() if (k in given or k in COMMON_PLATFORM_KEYS) and v is not None
        }

    def platform_settings(self, name: str) -> Any:
        """The adapter's own typed settings (platforms/<name>/settings.py) for a chat platform."""
        from platforms.settings import settings_from

        return settings_from(SETTINGS_CLASSES[name], self.adapter_config(name), f"platforms.{name}")

    @property
    def single_owner(self) -> bool:
        """True when one person owns the deployment: they may search/resume every session.

        auto: the access rules of the chat platforms that start decide (AccessControl.single_owner,
        the one arithmetic): only the terminal, or one person id across them all and no "*".
        """
        if self.gateway.single_owner != "auto":
            return bool(self.gateway.single_owner)
        from gateway.sessions.access import AccessControl

        started = {n: self.platforms[n] for n in self.configured_platforms() if n != "local"}
        return AccessControl.from_config(started).single_owner()

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
