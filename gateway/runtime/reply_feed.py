"""A turn's text on its way to the person's screen while the model writes it.

`ReplyFeed` is the agent loop's `TurnStream` over an adapter's `ReplyStream`: it adds the pieces up
into the text so far (each model call starts its own text: what the model wrote before calling a
tool is replaced by what it writes after), and shows a short status line while a tool runs
(`gateway.tool_status: on|off`). The settings are read here, once: `gateway.streaming: auto|off`,
overridden per platform by `platforms.<name>.streaming`; `off` keeps replies exactly as they were
before streaming (one send at the end).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from platforms.base import ReplyStream

log = logging.getLogger(__name__)

TOOL_STATUS = {
    "session_search": "searching past conversations…",
    "memory": "updating memory…",
}
STREAMING_CHOICES = ("auto", "off")


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


def _section(config: Any, *path: str) -> Mapping[str, Any]:
    raw: Any = config.as_dict() if hasattr(config, "as_dict") else (config or {})
    for key in path:
        raw = raw.get(key) if isinstance(raw, Mapping) else None
    return raw if isinstance(raw, Mapping) else {}


def streaming_enabled(config: Any, platform: str) -> bool:
    """Does `platform` stream replies? Per-platform setting, else `gateway.streaming` (default auto).
    The typed view resolves the two where it declares them; the raw sections are the fallback."""
    value = None
    try:
        value = getattr(config.platform(platform), "streaming", None)
    except Exception:  # no typed view of this platform (a bare mapping, an unknown name)
        value = None
    if value in (None, ""):
        value = _section(config, "platforms", platform).get("streaming")
    if value in (None, ""):
        value = _section(config, "gateway").get("streaming")
    if value in (None, "", True):
        return True
    if value is False:
        return False
    value = str(value).strip().lower()
    if value not in STREAMING_CHOICES:
        log.warning("streaming: %r is not auto or off; using auto", value)
        return True
    return value == "auto"


def tool_status_enabled(config: Any) -> bool:
    value = _section(config, "gateway").get("tool_status")
    if value in (None, "", True):
        return True
    return value is not False and str(value).strip().lower() not in ("off", "false", "no")
