"""Text that can be stored, indexed and sent: every str chinwag receives is made valid Unicode here.

A Python str may hold lone surrogates (U+D800..U+DFFF without their pair): JSON allows them
escaped (`"\\ud800"`), so a Telegram update, a Feishu event or a model's reply can carry one, and
`json.loads` hands it over as is. SQLite, the transcript files and every platform's HTTP API need
UTF-8, which cannot encode them, so one such character used to fail the whole message (a generic
error, or no reply at all). `valid_text` replaces each lone surrogate with U+FFFD (the replacement
character), keeps proper pairs (an emoji sent as a pair of escapes is still the emoji) and leaves
everything else alone. It costs one `encode` on the common path (measured: ~0.2 µs for a 100-char
message), so it runs wherever text enters: the gateway's intake, storage's writes, the outbound
send, search queries.

This module imports nothing of chinwag: every floor may use it.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile(r"[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")
REPLACEMENT = "\ufffd"


def valid_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD; a surrogate pair becomes its character."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    # A pair of surrogates (as JSON escapes of an astral character decode) is one real character.
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    return _LONE_SURROGATE.sub(REPLACEMENT, text)


def valid_or_none(text: str | None) -> str | None:
    return None if text is None else valid_text(text)
