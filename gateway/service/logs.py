"""Structured logging (text or JSON lines) that never writes a secret.

A `RedactingFilter` on the handler rewrites each record before it is formatted: the configured
secrets (tokens, keys, app secrets) are replaced wherever they appear, and so is anything shaped
like a credential even when nobody configured it — Telegram bot tokens (also inside API URLs),
`sk-…` keys, `Authorization:` header values, bearer tokens, Discord-style dotted tokens, Feishu
tenant tokens, and `secret=…`/`"token": "…"` pairs. Exceptions and stack traces are redacted too,
because SDK errors love to echo the URL they failed on.

Where lines go: stderr (a daemon's journal collects it), and/or a file under the home. In an
interactive terminal the conversation owns the screen, so `chinwag chat`/`run` there write the log
to `<home>/logs/chinwag.log` (owner-only, rotated at 10 MB, 3 kept) and to stderr only with `-v`.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import re
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterable
from urllib.parse import urlsplit

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
    # Feishu/Lark tenant/app/user access tokens.
    (re.compile(r"\b[tu]-[A-Za-z0-9_-]{20,}"), REDACTED),
    # key=value / "key": "value" pairs whose name says secret.
    (
        re.compile(
            r"(?i)((?:api[_-]?key|app[_-]?secret|client[_-]?secret|secret[_-]?token|access[_-]?token|"
            r"verification[_-]?token|encrypt[_-]?key|password|secret|token)['\"]?\s*[:=]\s*['\"]?)"
            r"(?!\[redacted\])[^\s'\",&}]{4,}"
        ),
        r"\1" + REDACTED,
    ),
]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret containing another is replaced whole; tiny values would
        # shred ordinary words, so they are left to the patterns.
        self.secrets = sorted({s for s in secrets if isinstance(s, str) and len(s) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text


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
            if name not in _STANDARD and isinstance(value, str):
                setattr(record, name, self.redactor(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, any `extra=` fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                entry[name] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        if extras:
            text += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return text


_HANDLER_NAME = "chinwag"


LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILE_BACKUPS = 3


def secrets_from_config(config: Any) -> list[str]:
    """Every secret-valued setting of a gateway.config.Config."""
    found = [
        config.model.api_key,
        config.auxiliary.api_key,
        config.transcription.api_key,
        config.embeddings.api_key,
        config.http.console_token,
    ]
    dsn = config.storage.postgres_dsn
    if dsn:
        found.append(dsn)
        try:
            found.append(urlsplit(dsn).password or "")  # alone, as a driver's error may show it
        except ValueError:
            pass
    for name in ("telegram", "feishu", "discord"):
        raw = config.platforms.get(name) or {}
        for key in ("token", "app_secret", "secret_token", "verification_token", "encrypt_key"):
            found.append(raw.get(key) or "")
    return [s for s in found if s]


class PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """A rotating log file that is owner-only (logs quote messages), each new file too."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        super().__init__(path, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8", delay=True)
        self.stream = self._open()

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)  # a file made before, under another umask
        return os.fdopen(fd, "a", encoding="utf-8")


def setup_logging(
    level: str = "INFO",
    fmt: str = "text",
    secrets: Iterable[str] = (),
    stream: IO[str] | None = None,
    *,
    file: Path | None = None,
    to_stream: bool = True,
) -> logging.Handler:
    """Install (or replace) chinwag's handlers on the root logger: to `stream` (stderr) unless
    `to_stream` is false, and to `file` when given. Returns the first one installed."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if (handler.get_name() or "").startswith(_HANDLER_NAME):
            root.removeHandler(handler)
            if isinstance(handler, logging.FileHandler):
                handler.close()
    installed: list[logging.Handler] = []
    if to_stream:
        installed.append(logging.StreamHandler(stream or sys.stderr))
    if file is not None:
        installed.append(PrivateRotatingFile(file))
    redacting = RedactingFilter(Redactor(secrets))
    for index, handler in enumerate(installed):
        handler.set_name(_HANDLER_NAME if index == 0 else f"{_HANDLER_NAME}-{index}")
        handler.addFilter(redacting)
        handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
        root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # Per-request access lines and SDK chatter drown the gateway's own lines at INFO.
    for noisy in (
        "aiohttp.access",
        "httpx",
        "httpcore",
        "httpx2",
        "httpcore2",
        "telegram.ext",
        "discord.gateway",
        "openai",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return installed[0] if installed else logging.NullHandler()
