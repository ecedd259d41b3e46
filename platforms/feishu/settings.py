"""`platforms.feishu` in config.yaml: every key the Feishu/Lark adapter reads, declared once
(the config schema is derived from this class; see platforms/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from platforms.settings import setting


@dataclass(frozen=True)
class FeishuSettings:
    app_id: str = setting("", "the app's id (cli_...)")
    app_secret: str = setting("", "the app's secret", secret=True)
    domain: str = setting("feishu", "feishu, lark, or the API origin as a URL")
    mode: str = setting("websocket", "websocket (long connection) or webhook", choices=("websocket", "webhook"))
    verification_token: str = setting("", "webhook: the event subscription's verification token", secret=True)
    encrypt_key: str = setting("", "webhook: the event subscription's encrypt key", secret=True)
    watchdog_seconds: float = setting(300, "reconnect after this long without a sign of life", minimum=1)
    reaction: str = setting("OnIt", "emoji put on a message while it is answered; empty: none")
    rich_text: bool = setting(True, "send markdown as post messages")
    backoff_base: float = setting(1.0, "first reconnect delay, seconds", minimum=0.01)
    backoff_cap: float = setting(60.0, "longest reconnect delay, seconds", minimum=0.01)
    api_backoff_base: float = setting(0.5, "first retry delay of an API call, seconds", minimum=0.01)
    api_backoff_cap: float = setting(30.0, "longest retry delay of an API call, seconds", minimum=0.01)
