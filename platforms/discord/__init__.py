"""Discord through discord.py: the gateway connection, channels and threads.

The adapter (and its SDK) loads on first use of these names, so reading the config, which needs
only `settings.py`, does not import the SDK."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platforms.discord.adapter import DiscordAdapter

__all__ = ["DiscordAdapter"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from platforms.discord import adapter

        return getattr(adapter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
