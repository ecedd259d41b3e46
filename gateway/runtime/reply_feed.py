"""A turn's text on its way to the person's screen while the model writes it.

`ReplyFeed` is the agent loop's `TurnStream` over an adapter's `ReplyStream`: it adds the pieces up
into the text so far (each model call starts its own text: what the model wrote before calling a
tool is replaced by what it writes after), and shows a short status line while a tool runs
(`gateway.tool_status: on|off`). The settings are read here from the typed config: `gateway.streaming:
auto|off`, overridden per platform by `platforms.<name>.streaming`; `off` keeps replies exactly as
they were before streaming (one send at the end).
"""

from __future__ import annotations

from gateway.config import Config
from platforms.base import ReplyStream

TOOL_STATUS = {
    "session_search": "searching past conversations…",
    "memory": "updating memory…",
}


def tool_label(name: str) -> str:
    return TOOL_STATUS.get(name, f"using {name}…" if name else "working…")


class ReplyFeed:
    def __init__(self, reply: ReplyStream, *, tool_status: bool = True) -> None:
        self.reply = reply
        self.tool_status = tool_status
        self.so_far = ""  # the current model call's text
        self._status_shown = False

    async def step(self) -> None:
        self.so_far = ""  # what is shown stays until the new call writes something

    async def text(self, piece: str) -> None:
        self.so_far += piece
        if self._status_shown:
            self._status_shown = False
            await self.reply.status(None)
        await self.reply.update(self.so_far)

    async def tool(self, name: str) -> None:
        if self.tool_status:
            self._status_shown = True
            await self.reply.status(tool_label(name))


def streaming_enabled(config: Config, platform: str) -> bool:
    """Does `platform` stream replies? `platforms.<name>.streaming`, else `gateway.streaming` (the
    typed view resolves the two)."""
    return config.platform(platform).streaming == "auto"


def tool_status_enabled(config: Config) -> bool:
    return config.gateway.tool_status == "on"
