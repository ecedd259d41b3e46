"""Telegram through python-telegram-bot: polling or webhook, MarkdownV2 replies."""

from platforms.telegram.adapter import TelegramAdapter, TelegramConfigError

__all__ = ["TelegramAdapter", "TelegramConfigError"]
