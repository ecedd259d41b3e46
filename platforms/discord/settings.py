"""`platforms.discord` in config.yaml: every key the Discord adapter reads, declared once
(the config schema is derived from this class; see platforms/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from platforms.settings import setting


@dataclass(frozen=True)
class DiscordSettings:
    token: str = setting("", "bot token; empty: DISCORD_BOT_TOKEN", secret=True)
    api_base: str = setting("", "REST API base URL; empty: Discord's")
    gateway_url: str = setting("", "gateway websocket URL; empty: Discord's")
    guild_ready_timeout: float = setting(2.0, "seconds to wait for the guilds after READY", minimum=0)
    ignore_bots: bool = setting(True, "ignore messages from other bots")
    command_guilds: tuple[str, ...] = setting((), "guild ids to register slash commands in at once; empty: globally")
    watchdog_seconds: float = setting(120, "reconnect after this long without a sign of life", minimum=1)
    reconnect_base: float = setting(1.0, "first reconnect delay, seconds", minimum=0.01)
    reconnect_cap: float = setting(60.0, "longest reconnect delay, seconds", minimum=0.01)
    catch_up_hours: float = setting(
        24.0, "on connecting, read back messages missed while down, up to this old", minimum=0
    )
    catch_up_limit: int = setting(
        100, "on connecting, read back at most this many missed messages per channel", minimum=0
    )
