"""The keys other rooms build on (DESIGN §10), the terminal's busy_mode, and settings declared once."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.config import Config, ConfigError, parse_config
from gateway.config.schema import ADAPTER_KEYS, SCHEMA, SETTINGS_CLASSES
from gateway.config.sections import MemoryConfig
from tools.memory import DEFAULT_LIMITS


def problems(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, env={})
    return "\n".join(info.value.problems)


def test_new_keys_have_defaults_and_typed_views() -> None:
    config = parse_config({"model": {"base_url": "http://127.0.0.1:9/v1", "api_key": "k"}}, env={})
    assert config.storage.backend == "sqlite" and config.storage.postgres_dsn == ""
    assert config.gateway.streaming == "auto" and config.gateway.interrupted_turns == "rerun"
    assert config.media.max_bytes == 20 * 1024 * 1024 and config.media.max_total_bytes == 1024**3
    assert config.model.vision == "auto"
    assert config.transcription.enabled is False
    assert config.transcription.base_url == "http://127.0.0.1:9/v1"  # falls back to model.*
    assert config.embeddings.provider == "off" and not config.embeddings.enabled
    assert config.http.console_token == ""
    assert config.platform("telegram").streaming == "auto"
    written = parse_config(
        {
            "gateway": {"streaming": "off", "interrupted_turns": "notify"},
            "model": {"vision": False},
            "transcription": {"model": "whisper-1", "api_key": "tk"},
            "embeddings": {"model": "text-embedding-3-small"},
            "http": {"console_token": "c0ns0le"},
            "platforms": {"discord": {"token": "d", "streaming": "auto"}},
        },
        env={},
    )
    assert written.gateway.streaming == "off" and written.gateway.interrupted_turns == "notify"
    assert written.platform("discord").streaming == "auto" and written.platform("telegram").streaming == "off"
    assert written.model.vision is False and written.transcription.enabled
    assert written.embeddings.provider == "openai"
    assert "c0ns0le" not in repr(written.http) and "tk" not in repr(written.transcription)


def test_new_keys_are_checked() -> None:
    text = problems(
        {
            "storage": {"backend": "postgres"},
            "gateway": {"streaming": "on", "interrupted_turns": "retry"},
            "media": {"max_bytes": 100, "max_total_bytes": 10},
            "embeddings": {"provider": "openai"},
            "transcription": {"base_url": "localhost:1"},
        }
    )
    for line in (
        "storage.postgres.dsn: is required when storage.backend is postgres (e.g. ${CHINWAG_PG_DSN})",
        "gateway.streaming: must be one of auto, off (got 'on')",
        "gateway.interrupted_turns: must be one of rerun, notify (got 'retry')",
        "media.max_total_bytes: must be 0 (no cap) or at least media.max_bytes (100) (got 10)",
        "embeddings.model: is required when embeddings.provider is openai",
        "transcription.base_url: must be an http:// or https:// URL (got 'localhost:1')",
    ):
        assert line in text
    assert "storage.postgres.dsn: is set but storage.backend is sqlite" in problems(
        {"storage": {"postgres": {"dsn": "x"}}}
    )
    on_postgres = {"backend": "postgres", "postgres": {"dsn": "host=127.0.0.1"}}
    for embeddings in ({"provider": "openai", "model": "m"}, {"model": "m"}):
        assert "embeddings.provider: recall's semantic stage is not available on storage.backend postgres" in problems(
            {"storage": on_postgres, "embeddings": embeddings}
        )
    assert parse_config({"storage": on_postgres, "embeddings": {"provider": "off"}}, env={}).embeddings.enabled is False
    accepted = parse_config({"storage": {"backend": "postgres", "postgres": {"dsn": "host=127.0.0.1"}}}, env={})
    assert accepted.storage.backend == "postgres" and accepted.storage.postgres_dsn == "host=127.0.0.1"


def test_terminal_busy_mode_other_than_queue_is_refused() -> None:
    """Issue 15 item 5: `platforms.local.busy_mode: interrupt` was accepted and silently not done."""
    text = problems({"platforms": {"local": {"busy_mode": "interrupt"}}})
    assert "platforms.local.busy_mode: the terminal answers each line in order, so only queue is allowed" in text
    assert "steer" in problems({"platforms": {"local": {"busy_mode": "steer"}}})
    ok = parse_config({"platforms": {"local": {"busy_mode": "queue"}}, "gateway": {"busy_mode": "steer"}}, env={})
    assert ok.platform("local").busy_mode == "queue"  # the view says what the terminal does


def test_platform_keys_are_the_settings_classes() -> None:
    for name, cls in SETTINGS_CLASSES.items():
        assert list(ADAPTER_KEYS[name]) == [f.name for f in dataclasses.fields(cls)]
        assert {k: v.default for k, v in ADAPTER_KEYS[name].items()} == {
            f.name: f.default for f in dataclasses.fields(cls)
        }
    config = parse_config({"platforms": {"telegram": {"token": "t", "poll_timeout": 5}}}, env={})
    settings = config.platform_settings("telegram")
    assert settings.poll_timeout == 5 and settings.effective_mode == "polling"
    assert settings.token == "t" and "token=" not in repr(settings)  # secrets stay out of repr
    assert "poll_timeout: must be at least 1 (got 0)" in problems({"platforms": {"telegram": {"poll_timeout": 0}}})


def test_reading_the_config_imports_no_platform_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from gateway.config import load_config; load_config(env={});"
        "print([m for m in ('telegram', 'lark_oapi', 'discord') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_storage_synchronous_is_full_unless_opted_out() -> None:
    assert parse_config({}, env={}).storage.synchronous == "full"
    assert parse_config({"storage": {"synchronous": "normal"}}, env={}).storage.synchronous == "normal"
    assert "storage.synchronous: must be one of full, normal (got 'off')" in problems(
        {"storage": {"synchronous": "off"}}
    )


def _sections() -> dict[str, type]:
    return {f.name: f.metadata["section"] for f in dataclasses.fields(Config) if "section" in f.metadata}


def _options(cls: type, prefix: str) -> list[tuple[str, dataclasses.Field]]:
    found = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory):  # a section inside the section
            found += _options(f.default_factory, f"{prefix}.{f.name}")
        else:
            found.append((f"{prefix}.{f.metadata.get('key') or f.name}", f))
    return found


def test_sections_are_declared_once() -> None:
    """Issue 29 item 5: the schema, the defaults and the doc of a key come from its section's
    dataclass; the validator fills exactly the view's defaults, and every key says what it is."""
    assert list(SCHEMA) == [f.name for f in dataclasses.fields(Config) if f.name in SCHEMA]
    defaults = parse_config({}, env={})
    for name, cls in _sections().items():
        view = getattr(defaults, name)
        assert view == getattr(Config, "__dataclass_fields__")[name].default_factory(), name
        for key, option in _options(cls, name):
            assert option.metadata["doc"], f"{key} has no doc"
    assert "tool_status" in SCHEMA["gateway"] and defaults.gateway.tool_status == "on"
    assert parse_config({"gateway": {"tool_status": "off"}}, env={}).gateway.tool_status == "off"


def test_memory_budgets_agree_with_the_tool() -> None:
    """tools/ is above the config's floor, so the tool keeps its own default budgets: the same numbers."""
    assert MemoryConfig().limits() == DEFAULT_LIMITS


def test_truthy_strings_are_one_rule() -> None:
    from platforms.settings import truthy

    for word, meaning in (("Yes", True), (" on ", True), ("1", True), ("OFF", False), ("no", False), ("maybe", None)):
        assert truthy(word) is meaning
        if meaning is not None:
            assert parse_config({"recall": {"recaps": word}}, env={}).recall.recaps is meaning
    assert "recall.recaps: must be true or false (got 'maybe')" in problems({"recall": {"recaps": "maybe"}})
