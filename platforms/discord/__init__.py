"""Discord through discord.py: the gateway connection, channels and threads."""

from platforms.discord.adapter import DiscordAdapter

__all__ = ["DiscordAdapter"]
