"""`Config`, the typed view of a validated configuration: one field per section of config.yaml (each
section a frozen dataclass of gateway.config.sections; the schema is derived from these fields, in
their order), the platforms' sections as checked mappings, and the rules across sections (which
platforms start, who owns the deployment)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config.sections import (
    ALL_PLATFORMS,
    CHAT_PLATFORMS,
    CREDENTIALS,
    SETTINGS_CLASSES,
    AuxiliaryConfig,
    EmbeddingsConfig,
    GatewayConfig,
    HttpConfig,
    LoggingConfig,
    MediaConfig,
    MemoryConfig,
    ModelConfig,
    PlatformAccess,
    RecallConfig,
    SchedulesConfig,
    SessionConfig,
    StorageConfig,
    TelemetryConfig,
    TranscriptionConfig,
)


def section(written_as: type, view: type | None = None) -> Any:
    """A top-level section of Config: `written_as` declares its keys; `view` is the type Config holds
    when the section is resolved into another (auxiliary: an AuxiliaryConfig over model.* is a ModelConfig)."""
    return field(default_factory=view or written_as, metadata={"section": written_as})


_ACCESS_KEYS = frozenset(f.name for f in dataclasses.fields(PlatformAccess))


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
    home: Path  # `home` as written, resolved (gateway.storage.home.choose_home)
    model: ModelConfig = section(ModelConfig)
    auxiliary: ModelConfig = section(AuxiliaryConfig, ModelConfig)
    session: SessionConfig = section(SessionConfig)
    gateway: GatewayConfig = section(GatewayConfig)
    recall: RecallConfig = section(RecallConfig)
    memory: MemoryConfig = section(MemoryConfig)
    storage: StorageConfig = section(StorageConfig)
    media: MediaConfig = section(MediaConfig)
    transcription: TranscriptionConfig = section(TranscriptionConfig)
    embeddings: EmbeddingsConfig = section(EmbeddingsConfig)
    # the `mcp` section as written (${VAR} substituted): tools.mcp.settings declares its keys and
    # reads it (mcp_settings_from); the app does at start, `chinwag doctor` too
    mcp: dict[str, Any] = field(default_factory=dict)
    schedules: SchedulesConfig = section(SchedulesConfig)
    # name -> full section (defaults filled), every known platform
    platforms: dict[str, dict[str, Any]] = field(default_factory=dict)
    http: HttpConfig = section(HttpConfig)
    logging: LoggingConfig = section(LoggingConfig)
    telemetry: TelemetryConfig = section(TelemetryConfig)
    # name -> the keys the file wrote (not None) for each platform section present in the file
    written: dict[str, frozenset[str]] = field(default_factory=dict)
    path: Path | None = None  # the file it came from (None: embedded defaults)
    warnings: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()  # worth one info line at start (a platform on from the environment)
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
        return {k: v for k, v in self.platforms[name].items() if (k in given or k in _ACCESS_KEYS) and v is not None}

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
        """The validated config as plain dicts, the model resolved (the shape
        agent.llm.ModelSettings.from_config reads); the gateway itself reads the typed sections."""
        data = dict(self.data)
        model = dataclasses.asdict(self.model)
        model["timeout"] = model["timeout_seconds"]
        if not model.get("max_tokens"):
            model.pop("max_tokens", None)
        data["model"] = model
        data["home"] = str(self.home)
        return data

    @property
    def db_path(self) -> Path:
        return self.home / "state.db"
