"""Secrets out of every line we write: the one redaction rule, and its one marker `[redacted]`.

A `Redactor` replaces the configured secrets (tokens, keys, app secrets) wherever they appear, and
anything shaped like a credential even when nobody configured it — Telegram bot tokens (also inside
API URLs), `sk-…` keys, `Authorization:` header values, bearer tokens, Discord-style dotted tokens,
Feishu tenant tokens, a URL's password, a libpq `password=` and `secret=…`/`"token": "…"` pairs
(also a websocket URL's `ticket=`). A `RedactingFilter` applies it to a log record: message,
arguments, exception text and extra fields, because SDK errors love to echo the URL they failed on.

It sits on the ground floor so that every floor redacts the same way: the service installs the
filter on its handlers (gateway.service.logs), an adapter on the SDK loggers that print its secrets
(`redact_loggers`: those records reach a test's or an embedding program's handlers too), and the
storage floor shows a database address with `redact_dsn`.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

REDACTED = "[redacted]"

# (pattern, replacement) — replacement keeps the non-secret prefix so the line stays readable.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Telegram bot token, bare or in /bot<token>/ URLs: 123456789:AA...
    (re.compile(r"(?<![0-9])\d{5,12}:[A-Za-z0-9_-]{30,}"), REDACTED),
    # OpenAI-style keys: sk-..., sk-proj-...
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    # Authorization header values in any rendering: "Authorization: Bearer x", {'authorization': 'Bot x'}
    (
        re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|bot|basic|token)\s+)?[^\s'\",}]+"),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + REDACTED),
    # Discord bot tokens and JWTs: three dot-separated base64url parts.
    (re.compile(r"\b[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{20,}\b"), REDACTED),
    # A password in a URL's user part: postgresql://user:password@host/db
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(@)"), r"\1" + REDACTED + r"\2"),
    # A libpq keyword/value password of any length, quoted ones (which may hold spaces) whole.
    (re.compile(r"(?i)(\bpassword\s*=\s*)(?!\[redacted\])('(?:[^'\\]|\\.)*'|\S+)"), r"\1" + REDACTED),
    # Feishu/Lark tenant/app/user access tokens.
    (re.compile(r"\b[tu]-[A-Za-z0-9_-]{20,}"), REDACTED),
    # key=value / "key": "value" pairs whose name says secret.
    (
        re.compile(
            r"(?i)((?:api[_-]?key|app[_-]?secret|client[_-]?secret|secret[_-]?token|access[_-]?token|"
            r"verification[_-]?token|encrypt[_-]?key|access[_-]?key|ticket|password|secret|token)['\"]?\s*[:=]\s*['\"]?)"
            r"(?!\[redacted\])[^\s'\",&}]{4,}"
        ),
        r"\1" + REDACTED,
    ),
]

# a record's own attributes; the rest are `extra=` fields
STANDARD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret containing another is replaced whole; tiny values would
        # shred ordinary words, so they are left to the patterns.
        known = set(self.secrets) | {s for s in secrets if isinstance(s, str) and len(s) >= 6}
        self.secrets = sorted(known, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text


_SHAPES = Redactor()  # the credential shapes alone


def redact_dsn(dsn: str) -> str:
    """A database address fit for messages and `stats()["path"]`: its password replaced."""
    return _SHAPES(dsn)


class RedactingFilter(logging.Filter):
    """Redacts message, arguments, exception text and extra string fields of every record."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must still log something
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = self.redactor(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        for name, value in list(vars(record).items()):
            if name not in STANDARD_FIELDS and isinstance(value, str):
                setattr(record, name, self.redactor(value))
        return True


def redact_loggers(names: Iterable[str], secrets: Iterable[str] = ()) -> None:
    """Redact `secrets` and the credential shapes in every record the named loggers create (a
    filter on a logger sees only its own records, so each one is named). Called again, the
    loggers' one filter learns the new secrets."""
    secrets = list(secrets)
    for name in names:
        logger = logging.getLogger(name)
        installed = next((f for f in logger.filters if isinstance(f, RedactingFilter)), None)
        if installed is None:
            logger.addFilter(RedactingFilter(Redactor(secrets)))
        else:
            installed.redactor.add(secrets)
