"""`InboundMessage.is_command` follows the command grammar of gateway.commands: a first word that
looks like a path is ordinary text, not a command (it would skip require_mention in groups)."""

from __future__ import annotations

from gateway.commands import parse_command
from gateway.source import SessionSource
from platforms.base import InboundMessage


def message(text: str) -> InboundMessage:
    return InboundMessage(SessionSource(platform="telegram", chat_id="1", chat_type="dm", user_id="1"), text, "m1")


def test_a_path_is_not_a_command():
    for text in ("/usr/bin/env is broken", "/etc/hosts has a typo", "/ nothing", "/1abc"):
        assert not message(text).is_command, text
        assert parse_command(text) is None


def test_commands_are_commands():
    for text in ("/new", "  /status now", "/help@chinwag_bot", "/resume 2"):
        assert message(text).is_command, text
        assert parse_command(text) is not None
