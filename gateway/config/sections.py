"""The sections of config.yaml, declared once: one frozen dataclass per section whose fields are its
keys (name, type, default; a line of doc, range and choices in the field's metadata), the shape
platforms/settings.py gives an adapter's settings. gateway.config.schema derives the validator's
schema from these classes and gateway.config.load builds them from the validated values, so a key
is written in one place; before, each key was written three times (a schema dict, a dataclass with
its own defaults, a hand copy in the loader) and `gateway.tool_status` had drifted out of one of them.

A section inside a section is a field whose type is a dataclass (`gateway.agent_cache`); `key=`
places a field elsewhere in its section's YAML (`storage.postgres.dsn` is `StorageConfig.postgres_dsn`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from gateway.language import CHOICES as LANGUAGES
from gateway.schedules.settings import ScheduleSettings
from platforms.discord.settings import DiscordSettings
from platforms.feishu.settings import FeishuSettings
from platforms.telegram.settings import TelegramSettings

CHAT_PLATFORMS = ("telegram", "feishu", "discord")
ALL_PLATFORMS = ("local",) + CHAT_PLATFORMS
BUSY_MODES = ("queue", "interrupt", "steer")
GROUP_POLICIES = ("open", "allowlist", "blacklist", "admin_only", "disabled")
STORAGE_BACKENDS = ("sqlite", "postgres")
SYNCHRONOUS_LEVELS = ("full", "normal")  # storage.synchronous: see gateway/storage/connect.py
STREAMING_MODES = ("auto", "off")
INTERRUPTED_TURNS = ("rerun", "notify")
EMBEDDING_PROVIDERS = ("off", "openai", "local")
MB = 1024 * 1024

# Credentials that make a chat platform "configured" (all must be non-empty).
CREDENTIALS = {"telegram": ("token",), "feishu": ("app_id", "app_secret"), "discord": ("token",)}

# Each chat platform's own keys: declared by its adapter's settings class (platforms/<name>/settings.py).
SETTINGS_CLASSES: dict[str, type] = {
    "telegram": TelegramSettings,
    "feishu": FeishuSettings,
    "discord": DiscordSettings,
}

UNSET: Any = dataclasses.MISSING


def option(
    default: Any,
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] = (),
    secret: bool = False,
    key: str | None = None,
    unset: Any = UNSET,
) -> Any:
    """A key of a section: its default and a line of doc (the metadata keys of platforms.settings.setting),
    its checks; a secret is kept out of repr. `key`: its dotted place in the section when that is not
    the field's name. `unset`: what the validator fills when the key is not written, when that differs
    from the view's default (resolved later, e.g. embeddings.provider from embeddings.model)."""
    meta = {"doc": doc, "minimum": minimum, "maximum": maximum, "choices": choices, "secret": secret}
    meta.update(key=key, unset=unset)
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), repr=not secret, metadata=meta)
    return dataclasses.field(default=default, repr=not secret, metadata=meta)


def subsection(cls: type) -> Any:
    """A section inside a section (or inside Config): the field's type is its dataclass."""
    return dataclasses.field(default_factory=cls)


@dataclass(frozen=True)
class ModelConfig:
    """The main model: any OpenAI-compatible endpoint; empty fields fall back to the environment."""

    base_url: str = option("", "e.g. http://127.0.0.1:8000/v1; empty: OPENAI_BASE_URL, else api.openai.com")
    api_key: str = option("", "empty: OPENAI_API_KEY", secret=True)
    name: str = option("", "the model name sent to the endpoint; empty: CHINWAG_MODEL, else gpt-4o-mini")
    timeout_seconds: float = option(60, "per model request", minimum=1)
    context_window: int = option(128000, "tokens; the conversation is compressed near it", minimum=1024)
    max_iterations: int = option(8, "tool-calling rounds per turn before the agent must answer", minimum=1)
    max_tokens: int = option(0, "cap on reply tokens; 0: the endpoint's default", minimum=0)
    vision: str | bool = option("auto", "images as content parts: auto (the endpoint decides) | true | false")

    @property
    def is_configured(self) -> bool:
        return bool(self.base_url or self.api_key)

    def from_env(self, env: Mapping[str, str]) -> ModelConfig:
        """Each empty endpoint field from the environment (DESIGN.md §1)."""
        return dataclasses.replace(
            self,
            base_url=(self.base_url or env.get("OPENAI_BASE_URL") or "").rstrip("/"),
            api_key=self.api_key or env.get("OPENAI_API_KEY") or "",
            name=self.name or env.get("CHINWAG_MODEL") or "",
        )


@dataclass(frozen=True)
class AuxiliaryConfig:
    """The model that writes recaps for session_search and /search; Config.auxiliary is this over model.*."""

    base_url: str = option("", "empty: model.base_url")
    api_key: str = option("", "empty: model.api_key", secret=True)
    name: str = option("", "empty: model.name (a small, cheap model is enough)")

    def over(self, model: ModelConfig) -> ModelConfig:
        """The model settings with each field this section writes in place of model's."""
        return dataclasses.replace(
            model,
            base_url=(self.base_url or model.base_url).rstrip("/"),
            api_key=self.api_key or model.api_key,
            name=self.name or model.name,
        )


@dataclass(frozen=True)
class SessionConfig:
    group_sessions_per_user: bool = option(True, "in a group, each member has their own conversation")
    thread_sessions_per_user: bool = option(False, "in a thread, everyone shares one conversation")
    # Validated by gateway.sessions.reset.ResetPolicies.from_config (the store's own reader).
    reset: dict[str, Any] = option({}, "when a chat starts a fresh session by itself (see reset_policies())")

    def reset_policies(self) -> Any:
        """gateway.sessions.reset.ResetPolicies for this section (validated at load time)."""
        from gateway.sessions.reset import ResetPolicies

        return ResetPolicies.from_config(self.reset, where="session.reset")


@dataclass(frozen=True)
class AgentCacheConfig:
    max_agents: int = option(64, "agents kept in memory (LRU); a running agent is never evicted", minimum=1)
    idle_ttl_minutes: float = option(30, "an idle agent is dropped after this long", minimum=0)


@dataclass(frozen=True)
class DeliveryConfig:
    """A reply the platform keeps refusing (DESIGN §11): retried with backoff, then parked and retried slowly."""

    send_attempts: int = option(
        5, "sends of one reply (each with the adapter's own retries) before it is parked", minimum=1
    )
    parked_retry_seconds: float = option(300, "how often a parked reply is tried again; it is never dropped", minimum=1)


@dataclass(frozen=True)
class GatewayConfig:
    busy_mode: str = option("queue", "a message arrives while a turn runs", choices=BUSY_MODES)
    max_pending: int = option(5, "per chat; beyond this the person is told to wait", minimum=1)
    busy_ack: bool = option(True, "a short 'got it' when a message is queued or steered")
    agent_cache: AgentCacheConfig = subsection(AgentCacheConfig)
    delivery: DeliveryConfig = subsection(DeliveryConfig)
    # as written; Config.single_owner resolves auto
    single_owner: str | bool = option("auto", "one owner may /search and /resume every session: auto | true | false")
    shutdown_timeout_seconds: float = option(10, "running turns get this long to finish at shutdown", minimum=0)
    # each platform may override it; PlatformSettings.streaming resolves
    streaming: str = option("auto", "auto: answers appear while written | off: sent once", choices=STREAMING_MODES)
    interrupted_turns: str = option("rerun", "a turn cut short by a crash (DESIGN §11)", choices=INTERRUPTED_TURNS)
    tool_status: str = option("on", "a short status line while a tool runs", choices=("on", "off"))
    language: str = option(
        "auto",
        "chinwag's own texts: en | zh | zh-TW | ja | auto (the person's platform hint, else en)",
        choices=LANGUAGES,
    )


@dataclass(frozen=True)
class RecallConfig:
    deadline_seconds: float = option(60, "overall time limit of a session_search or /search", minimum=1)
    recaps: bool = option(True, "the auxiliary model recaps found sessions (false: raw previews)")


@dataclass(frozen=True)
class MemoryConfig:
    """MEMORY.md / USER.md budgets; tools.memory.DEFAULT_LIMITS holds the same two numbers for the tool
    run on its own (tools/ is above this floor; tests/config checks the two agree)."""

    memory_chars: int = option(2200, "MEMORY.md budget (characters)", minimum=100)
    user_chars: int = option(1375, "USER.md budget (characters)", minimum=100)

    def limits(self) -> dict[str, int]:
        """The budgets as tools.memory takes them."""
        return {"memory": self.memory_chars, "user": self.user_chars}


# `schedules`: declared beside the code that reads it (the schedule tool, below this floor, takes it)
SchedulesConfig = ScheduleSettings


@dataclass(frozen=True)
class StorageConfig:
    retention_days: float = option(0, "delete conversations idle longer than this; 0: keep all", minimum=0)
    maintenance_hours: float = option(
        6, "how often the daemon does its upkeep (gateway.service.maintenance)", minimum=0.01
    )
    backend: str = option("sqlite", "sqlite | postgres (DESIGN §14)", choices=STORAGE_BACKENDS)
    synchronous: str = option(
        "full",
        "full: an append returned is on disk; normal: see gateway/storage/connect.py",
        choices=SYNCHRONOUS_LEVELS,
    )
    postgres_dsn: str = option("", "only with backend: postgres (may hold a password)", secret=True, key="postgres.dsn")


@dataclass(frozen=True)
class MediaConfig:
    max_bytes: int = option(20 * MB, "one attachment larger than this is refused with a reply", minimum=1)
    max_total_bytes: int = option(1024 * MB, "all of home/media/; 0: no cap", minimum=0)


@dataclass(frozen=True)
class TranscriptionConfig:
    """An OpenAI-compatible /audio/transcriptions endpoint; base_url and api_key fall back to model.*."""

    base_url: str = option("", "empty: model.base_url")
    api_key: str = option("", "empty: model.api_key", secret=True)
    model: str = option("", "e.g. whisper-1; empty: voice and audio are not transcribed")

    @property
    def enabled(self) -> bool:
        return bool(self.model)

    def over(self, model: ModelConfig) -> TranscriptionConfig:
        return dataclasses.replace(
            self, base_url=(self.base_url or model.base_url).rstrip("/"), api_key=self.api_key or model.api_key
        )


@dataclass(frozen=True)
class EmbeddingsConfig:
    """Vectors for recall. provider is resolved: written, else openai when a model is set, else off."""

    provider: str = option("off", "off | openai | local", choices=EMBEDDING_PROVIDERS, unset=None)
    base_url: str = option("", "empty: model.base_url")
    api_key: str = option("", "empty: model.api_key", secret=True)
    model: str = option("", "e.g. text-embedding-3-small")
    query_prefix: str = option("", 'what an e5-style model wants before a question ("query: ")')
    passage_prefix: str = option("", '... and before the text it is compared with ("passage: ")')

    @property
    def enabled(self) -> bool:
        return self.provider != "off"

    def over(self, model: ModelConfig) -> EmbeddingsConfig:
        return dataclasses.replace(
            self,
            provider=self.provider or ("openai" if self.model else "off"),
            base_url=(self.base_url or model.base_url).rstrip("/"),
            api_key=self.api_key or model.api_key,
        )


@dataclass(frozen=True)
class HttpConfig:
    enabled: bool = option(True, "health, readiness, metrics, webhooks and the console")
    host: str = option("127.0.0.1", "keep it on loopback; a reverse proxy with TLS in front for webhooks")
    port: int = option(8765, "0: any free port (logged at start)", minimum=0, maximum=65535)
    console_token: str = option("", "required for /console/ off loopback", secret=True)
    idle_timeout_seconds: float = option(
        60, "a connection with no request under way for this long is closed (idle or slow clients)", minimum=1
    )


@dataclass(frozen=True)
class LoggingConfig:
    level: str = option("INFO", "DEBUG | INFO | WARNING | ERROR", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    format: str = option("text", "text | json (one object per line)", choices=("text", "json"))


@dataclass(frozen=True)
class TelemetryConfig:
    """Traces and metrics over OTLP (gateway.telemetry; needs the `otel` extra)."""

    otlp_endpoint: str = option(
        "",
        "OTLP/HTTP base URL, e.g. http://127.0.0.1:4318 (/v1/traces, /v1/metrics appended); "
        "empty: OTEL_EXPORTER_OTLP_ENDPOINT, else off",
    )


@dataclass(frozen=True)
class PlatformAccess:
    """The keys every chat platform section understands besides its adapter's own: the gateway's
    access rules and overrides (Config.platform reads them as PlatformSettings)."""

    enabled: bool = option(True, "false turns the platform off without deleting its section")
    allowed_users: tuple[str, ...] = option((), 'user ids allowed to talk to the bot, or ["*"]')
    admins: tuple[str, ...] = option((), "user ids that may use admin commands and search any session")
    group_policy: str = option("open", "which groups are answered", choices=GROUP_POLICIES)
    group_allowlist: tuple[str, ...] = option((), "chat ids answered when group_policy is allowlist")
    group_blacklist: tuple[str, ...] = option((), "chat ids ignored when group_policy is blacklist")
    require_mention: bool = option(True, "in a group, answer only when mentioned")
    busy_mode: str | None = option(None, "overrides gateway.busy_mode", choices=BUSY_MODES)
    streaming: str | None = option(None, "overrides gateway.streaming", choices=STREAMING_MODES)
    language: str | None = option(
        None, "overrides gateway.language (a person's hint and /language still win)", choices=LANGUAGES
    )
