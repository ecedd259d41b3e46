"""Structured logs never contain secrets: configured ones, and anything shaped like a credential."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gateway.config.load import parse_config
from gateway.redact import REDACTED, Redactor
from gateway.service.logs import secrets_from_config, setup_logging

TG_TOKEN = "1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
DISCORD_TOKEN = "MTA4NzY1NDMyMTA5ODc2NTQzMg.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456"


@pytest.fixture
def capture():
    stream = io.StringIO()
    handlers: list[logging.Handler] = []

    def install(fmt: str = "text", secrets=()) -> io.StringIO:
        handlers.append(setup_logging("DEBUG", fmt, secrets, stream=stream))
        return stream

    yield install
    for handler in handlers:
        logging.getLogger().removeHandler(handler)


def test_configured_secrets_are_redacted(capture) -> None:
    config = parse_config(
        {
            "model": {"api_key": "plain-key-without-shape"},
            "platforms": {"feishu": {"app_id": "cli_1", "app_secret": "s3cr3tvalue99"}},
        },
        env={},
    )
    stream = capture("text", secrets_from_config(config))
    log = logging.getLogger("test.logs")
    log.info("calling with %s and %s", "plain-key-without-shape", {"secret": "s3cr3tvalue99"})
    out = stream.getvalue()
    assert "plain-key-without-shape" not in out and "s3cr3tvalue99" not in out
    assert out.count(REDACTED) == 2
    assert "test.logs: calling with" in out


@pytest.mark.parametrize(
    "line, secret",
    [
        (f"POST https://api.telegram.org/bot{TG_TOKEN}/getUpdates failed", TG_TOKEN),
        ("openai error for key sk-proj-AbCdEf0123456789xyz", "sk-proj-AbCdEf0123456789xyz"),
        ("headers {'Authorization': 'Bearer eyJhbGciOi.abcdef'}", "eyJhbGciOi.abcdef"),
        ("Authorization: Bot somediscordtoken", "somediscordtoken"),
        (f"discord login with {DISCORD_TOKEN}", DISCORD_TOKEN),
        ("feishu token t-g1044ghJHBWYQEL5CZ6ZNOTSLDEJ2R3YTEUWHZXF ok", "t-g1044ghJHBWYQEL5CZ6ZNOTSLDEJ2R3YTEUWHZXF"),
        ('body {"app_secret": "abcd1234efgh", "app_id": "cli_x"}', "abcd1234efgh"),
        ("url ?access_token=zzzzzzzz&x=1", "zzzzzzzz"),
    ],
)
def test_credential_shapes_are_redacted(line: str, secret: str) -> None:
    out = Redactor()(line)
    assert secret not in out
    assert REDACTED in out


def test_ordinary_text_is_left_alone() -> None:
    line = "session 20261130_065600_ab12cd34 turn done in 0.41s, max_tokens=1000 token_count=52 at 12:30:45"
    assert Redactor()(line) == line


def test_json_lines_with_extras_and_exception(capture) -> None:
    stream = capture("json", [TG_TOKEN])
    log = logging.getLogger("test.json")
    try:
        raise RuntimeError(f"connect to https://api.telegram.org/bot{TG_TOKEN}/getMe refused")
    except RuntimeError:
        log.exception("adapter crashed", extra={"platform": "telegram", "url": f"/bot{TG_TOKEN}/x"})
    lines = stream.getvalue().strip().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "ERROR" and entry["logger"] == "test.json"
    assert entry["msg"] == "adapter crashed"
    assert entry["platform"] == "telegram"
    assert "RuntimeError" in entry["exc"]
    assert TG_TOKEN not in lines[0]
    assert entry["url"] == f"/bot{REDACTED}/x"


def test_setup_replaces_its_own_handler(capture) -> None:
    stream = capture("text")
    capture("text")
    logging.getLogger("test.once").warning("only once")
    assert stream.getvalue().count("only once") == 1


def test_the_newer_secrets_are_redacted_too(capture) -> None:
    import dataclasses

    config = parse_config(
        {
            "http": {"console_token": "console-token-value-1"},
            "transcription": {"api_key": "whisper-key-value-2"},
            "embeddings": {"provider": "openai", "model": "text-embedding-3-small", "api_key": "embed-key-value-3"},
        },
        env={},
    )
    # storage.postgres.dsn is refused by validation until that backend exists; the view still holds one
    dsn = "postgresql://chinwag:pg-password-value-4@db.internal/chinwag"
    config = dataclasses.replace(config, storage=dataclasses.replace(config.storage, postgres_dsn=dsn))
    stream = capture("text", secrets_from_config(config))
    log = logging.getLogger("test.logs")
    log.warning("console-token-value-1 whisper-key-value-2 embed-key-value-3")
    log.warning("connecting to %s failed", dsn)
    log.warning("password authentication failed: pg-password-value-4")
    out = stream.getvalue()
    for secret in ("console-token-value-1", "whisper-key-value-2", "embed-key-value-3", "pg-password-value-4"):
        assert secret not in out


def test_a_password_in_any_url_is_redacted(capture) -> None:
    stream = capture()
    logging.getLogger("test.logs").info("retrying postgresql://me:hunter2hunter2@localhost:5432/x")
    out = stream.getvalue()
    assert "hunter2hunter2" not in out and "postgresql://me:[redacted]@localhost:5432/x" in out
