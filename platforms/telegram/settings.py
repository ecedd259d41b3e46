"""`platforms.telegram` in config.yaml: every key the Telegram adapter reads, declared once
(the config schema is derived from this class; see platforms/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from platforms.settings import setting


@dataclass(frozen=True)
class TelegramSettings:
    token: str = setting("", "bot token from @BotFather", secret=True)
    base_url: str = setting("https://api.telegram.org/bot", "Bot API endpoint; the token is appended")
    base_file_url: str = setting("https://api.telegram.org/file/bot", "the same, for file downloads")
    mode: str | None = setting(
        None, "polling or webhook; unset: webhook when webhook_url is set", choices=("polling", "webhook")
    )
    webhook_url: str = setting("", "public HTTPS URL Telegram POSTs updates to (webhook mode)")
    secret_token: str = setting("", "sent by Telegram with every webhook update", secret=True)
    poll_timeout: int = setting(30, "seconds one long poll waits", minimum=1)
    send_attempts: int = setting(4, "tries per outgoing message", minimum=1)
    max_retry_after: float = setting(60, "longest flood wait honoured, seconds", minimum=0)
    request_timeout: float = setting(10, "seconds per Bot API request", minimum=0.1)
    webhook_check_seconds: float | None = setting(
        None, "how often getWebhookInfo is read; unset: watchdog/4", minimum=0.1
    )
    watchdog_seconds: float = setting(120, "reconnect after this long without a sign of life", minimum=1)
    reconnect_base: float = setting(1.0, "first reconnect delay, seconds", minimum=0.01)
    reconnect_cap: float = setting(60.0, "longest reconnect delay, seconds", minimum=0.01)

    @property
    def effective_mode(self) -> str:
        """The one rule: the written mode, else webhook when a webhook URL is set, else polling."""
        return self.mode or ("webhook" if self.webhook_url else "polling")
