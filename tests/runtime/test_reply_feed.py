"""gateway.runtime.reply_feed: the streaming settings as written in YAML, and the feed's text."""

from __future__ import annotations

import yaml

from gateway.config.load import parse_config
from gateway.runtime.reply_feed import ReplyFeed, streaming_enabled, tool_status_enabled
from platforms.base import ReplyStream


def config(text: str):
    return parse_config(yaml.safe_load(text))


def test_streaming_is_on_by_default_off_globally_and_overridable_per_platform():
    assert streaming_enabled(config("{}"), "local") and tool_status_enabled(config("{}"))
    both = config(
        """
gateway: {streaming: off, tool_status: off}
platforms:
  telegram: {token: t, streaming: auto}
  discord: {token: d}
"""
    )
    assert streaming_enabled(both, "telegram") and not streaming_enabled(both, "discord")
    assert not tool_status_enabled(both)


class Shown(ReplyStream):
    def __init__(self) -> None:
        super().__init__()
        self.screens: list[tuple[str, str | None]] = []
        self.text, self.line = "", None

    async def update(self, text: str) -> None:
        self.text = text
        self.screens.append((self.text, self.line))

    async def status(self, line: str | None) -> None:
        self.line = line
        self.screens.append((self.text, self.line))

    async def finish(self, text: str) -> list[str]:
        return []

    async def fail(self, note: str | None = None) -> list[str]:
        return []


async def test_each_model_call_writes_its_own_text_and_a_tool_shows_a_status_line_until_writing_resumes():
    shown = Shown()
    feed = ReplyFeed(shown)
    await feed.step()
    for piece in ("Let me ", "look."):
        await feed.text(piece)
    await feed.tool("session_search")
    await feed.step()
    await feed.text("Found")
    assert shown.screens == [
        ("Let me ", None),
        ("Let me look.", None),
        ("Let me look.", "searching past conversations…"),
        ("Let me look.", None),
        ("Found", None),
    ]


async def test_tool_status_off_shows_no_line():
    shown = Shown()
    feed = ReplyFeed(shown, tool_status=False)
    await feed.tool("memory")
    assert shown.screens == []
