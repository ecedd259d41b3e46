"""Structured logging (text or JSON lines) that never writes a secret.

A `RedactingFilter` (gateway.redact, the one redaction rule) on each handler rewrites every record
before it is formatted: the configured secrets (`secrets_from_config`) and anything shaped like a
credential, in the message, its exception and its extra fields.

Where lines go: stderr (a daemon's journal collects it), and/or a file under the home. In an
interactive terminal the conversation owns the screen, so `chinwag chat`/`run` there write the log
to `<home>/logs/chinwag.log` (owner-only, rotated at 10 MB, 3 kept) and to stderr only with `-v`.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterable
from urllib.parse import urlsplit

from gateway import telemetry
from gateway.redact import STANDARD_FIELDS, RedactingFilter, Redactor


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, any `extra=` fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ids = telemetry.log_ids()  # the line's place in a trace, when telemetry is on (gateway.telemetry)
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        for name, value in vars(record).items():
            if name not in STANDARD_FIELDS and not name.startswith("_"):
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
        extras = {k: v for k, v in vars(record).items() if k not in STANDARD_FIELDS and not k.startswith("_")}
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
