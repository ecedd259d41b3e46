"""Telegram through python-telegram-bot: polling or webhook, MarkdownV2 replies.

The adapter (and its SDK) loads on first use of these names, so reading the config, which needs
only `settings.py`, does not import the SDK."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platforms.telegram.adapter import TelegramAdapter, TelegramConfigError

__all__ = ["TelegramAdapter", "TelegramConfigError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from platforms.telegram import adapter

        return getattr(adapter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
