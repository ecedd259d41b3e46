"""Keep the bot token out of logs.

The Bot API puts the token in every URL (``.../bot<token>/getMe``). httpx logs each request URL
at INFO, python-telegram-bot logs the base URL at DEBUG, and its InvalidToken message quotes the
token. A logging filter on those loggers rewrites any record that contains a known token.
Filters on a logger only see records created by that very logger, so each one is named.
"""

from __future__ import annotations

import logging

_LOGGERS = (
    "httpx",
    "httpcore",
    "telegram",
    "telegram.Bot",
    "telegram.ext",
    "telegram.ext.ExtBot",
    "telegram.ext.Application",
    "telegram.ext.Updater",
    "telegram.request",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
    "platforms.telegram",
    "platforms.telegram.adapter",
    "platforms.telegram.inbound",
)


class _RedactTokens(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.tokens: set[str] = set()

    def _clean(self, text: str) -> str:
        for token in self.tokens:
            text = text.replace(token, "<redacted>")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.tokens:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is not ours to fix; leave the record alone
            return True
        cleaned = self._clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if any(token in text for token in self.tokens):
                record.exc_text = self._clean(text)
                record.exc_info = None
        return True


_FILTER = _RedactTokens()
for _name in _LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)


def redact_token(token: str) -> None:
    """Register a secret to be scrubbed from every record of the Telegram-related loggers."""
    if token:
        _FILTER.tokens.add(token)
