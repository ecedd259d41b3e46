"""Feishu/Lark through lark-oapi: long connection or webhook.

The adapter (and its SDK) loads on first use of these names, so reading the config, which needs
only `settings.py`, does not import the SDK."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platforms.feishu.adapter import FeishuAdapter

__all__ = ["FeishuAdapter"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from platforms.feishu import adapter

        return getattr(adapter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
