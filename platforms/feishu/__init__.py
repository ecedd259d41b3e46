"""Feishu/Lark through lark-oapi: long connection or webhook."""

from platforms.feishu.adapter import FeishuAdapter

__all__ = ["FeishuAdapter"]
