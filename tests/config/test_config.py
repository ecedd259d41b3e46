"""gateway.config.load: defaults, ${ENV} substitution, validation messages, typed access."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.config.load import (
    ADAPTER_KEYS,
    COMMON_PLATFORM_KEYS,
    SCHEMA,
    ConfigError,
    load_config,
    parse_config,
)
from tests.fakes.expect import assert_all_in
from tools.mcp import McpConfigError, mcp_settings_from

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return info.value.problems


def test_no_file_gives_embedded_defaults(tmp_path: Path) -> None:
    config = load_config(env={"CHINWAG_HOME": str(tmp_path / "home")})
    assert config.path is None
    assert config.home == tmp_path / "home"
    assert config.configured_platforms() == ["local"]
    assert config.single_owner is True
    assert config.gateway.busy_mode == "queue"
    assert config.gateway.max_pending == 5
    assert config.gateway.agent_cache.max_agents == 64
    assert config.http.host == "127.0.0.1" and config.http.port == 8765
    assert config.session.reset_policies().default.mode == "both"
    assert config.model.is_configured is False


def test_home_precedence(tmp_path: Path) -> None:
    env = {"CHINWAG_HOME": str(tmp_path / "env")}
    (tmp_path / "env").mkdir()
    # the file is found under CHINWAG_HOME
    write(tmp_path / "env", f"home: {tmp_path / 'from_file'}\n")
    assert load_config(env=env).home == tmp_path / "from_file"
    # --home wins over both, and the file is looked up there
    assert load_config(home=tmp_path / "cli", env=env).home == tmp_path / "cli"
    assert load_config(home=tmp_path / "cli", env=env).path is None


def test_model_falls_back_to_environment(tmp_path: Path) -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/", "OPENAI_API_KEY": "sk-test", "CHINWAG_MODEL": "m1"}
    config = load_config(home=tmp_path, env=env)
    assert config.model.base_url == "http://127.0.0.1:9/v1"
    assert config.model.api_key == "sk-test" and config.model.name == "m1"
    assert config.auxiliary.base_url == config.model.base_url  # auxiliary falls back to model
    write(tmp_path, "model: {base_url: 'http://127.0.0.1:1/v1'}\nauxiliary: {name: small}\n")
    config = load_config(home=tmp_path, env=env)
    assert config.model.base_url == "http://127.0.0.1:1/v1"
    assert config.auxiliary.name == "small" and config.auxiliary.base_url == "http://127.0.0.1:1/v1"
    assert "sk-test" not in repr(config.model)
    assert config.as_dict()["model"]["timeout"] == 60


def test_env_substitution(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "platforms:\n"
        "  telegram:\n"
        "    token: ${TG_TOKEN}\n"
        "    base_url: ${TG_BASE:-http://127.0.0.1:8081/bot}\n"
        "    allowed_users: ${TG_USERS}\n"
        "    secret_token: 'lit$${NOT_A_VAR}'\n"
        "    require_mention: ${TG_MENTION:-false}\n",
    )
    env = {"TG_TOKEN": "123:abc", "TG_USERS": "11, 22"}
    config = load_config(path, env=env)
    tg = config.platform("telegram")
    assert tg.raw["token"] == "123:abc"
    assert tg.raw["base_url"] == "http://127.0.0.1:8081/bot"
    assert tg.allowed_users == ("11", "22")
    assert tg.raw["secret_token"] == "lit${NOT_A_VAR}"
    assert tg.require_mention is False
    assert config.configured_platforms() == ["telegram"]


def test_unset_env_variable_names_the_key(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "platforms:\n  discord:\n    token: ${DISCORD_TOKEN}\n")
    assert problems == [
        f"{tmp_path / 'config.yaml'}: platforms.discord.token: environment variable DISCORD_TOKEN is not set"
        " (write ${DISCORD_TOKEN:-} to allow it empty)"
    ]
    problems = problems_of(tmp_path, "platforms:\n  discord:\n    token: ${DISCORD_TOKEN}\n", {"DISCORD_TOKEN": ""})
    assert "environment variable DISCORD_TOKEN is empty" in problems[0]


def test_bad_choice_message(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "gateway:\n  busy_mode: fast\n")
    assert len(problems) == 1
    assert problems[0].endswith("config.yaml: gateway.busy_mode: must be one of queue, interrupt, steer (got 'fast')")


def test_unknown_keys_with_did_you_mean(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        "gatway: {}\n"
        "gateway: {max_pendng: 3}\n"
        "platforms:\n"
        "  lark: {app_id: x}\n"
        "  telegram: {tokn: x, allowed_user: [1]}\n",
    )
    text = "\n".join(problems)
    assert_all_in(
        text,
        "gatway: unknown key; did you mean 'gateway'?",
        "gateway.max_pendng: unknown key; did you mean 'max_pending'?",
        "platforms.lark: unknown platform; did you mean feishu",
        "platforms.telegram.tokn: unknown key; did you mean 'token'?",
        "platforms.telegram.allowed_user: unknown key; did you mean 'allowed_users'?",
    )
    assert len(problems) == 5  # every problem reported at once


def test_type_and_range_errors(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        "http: {port: 70000, enabled: maybe}\n"
        "gateway: {max_pending: two, agent_cache: {max_agents: 0}, single_owner: perhaps}\n"
        "session: {reset: {by_platform: {telegram: {mode: hourly}}}}\n"
        "platforms: {telegram: {allowed_users: {a: 1}}}\n",
    )
    text = "\n".join(problems)
    assert_all_in(
        text,
        "http.port: must be at most 65535 (got 70000)",
        "http.enabled: must be true or false (got 'maybe')",
        "gateway.max_pending: must be a whole number (got 'two')",
        "gateway.agent_cache.max_agents: must be at least 1 (got 0)",
        "gateway.single_owner: must be auto, true or false (got 'perhaps')",
        "session.reset.by_platform.telegram.mode: unknown mode 'hourly'",
        "platforms.telegram.allowed_users: must be a list of ids (got a mapping)",
    )


def test_reset_section_uses_the_store_rules(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "session: {reset: {daily_hour: 25}}\n")
    assert problems == [
        f"{tmp_path / 'config.yaml'}: session.reset.daily_hour: must be a whole hour from 0 to 23, got 25"
    ]
    problems = problems_of(tmp_path, "session: {reset: {timezone: Mars/Base}}\n")
    assert "session.reset.timezone: unknown time zone 'Mars/Base'" in problems[0]
    config = load_config(
        write(
            tmp_path,
            (
                "session:\n  reset:\n    mode: daily\n    timezone: Europe/Berlin\n"
                "    by_platform: {telegram: {mode: idle, idle_minutes: 60}}\n"
            ),
        ),
        env={},
    )
    policies = config.session.reset_policies()
    assert policies.default.mode == "daily"
    assert policies.by_platform["telegram"].mode == "idle"
    assert policies.by_platform["telegram"].timezone == "Europe/Berlin"  # inherits what it does not set


def test_mcp_section_is_substituted_here_and_read_by_its_own_reader(tmp_path: Path) -> None:
    text = (
        "mcp:\n  max_result_chars: 1000\n  servers:\n"
        "    files: {command: python, args: [-m, srv], env: {TOKEN: '${FILES_TOKEN}'}}\n"
        "    orders: {url: 'http://127.0.0.1:9/mcp', require_approval: [cancel_order], idempotent: true}\n"
    )
    config = load_config(write(tmp_path, text), env={"FILES_TOKEN": "s3cret"})
    mcp = mcp_settings_from(config.mcp)
    files, orders = mcp.servers
    assert (files.command, files.args, dict(files.env)) == ("python", ("-m", "srv"), {"TOKEN": "s3cret"})
    assert orders.needs_approval("cancel_order") and not orders.needs_approval("list_orders") and orders.idempotent
    assert (mcp.max_result_chars, mcp.approval_timeout_seconds) == (1000, 300)
    assert "s3cret" not in repr(mcp)
    assert load_config(write(tmp_path, ""), env={}).mcp == {}
    problems = problems_of(tmp_path, "mcp:\n  servers:\n    files: {command: x, env: {A: '${NOPE}'}}\n")
    assert "mcp.servers.files.env.A: environment variable NOPE is not set" in problems[0]
    with pytest.raises(McpConfigError, match=r"mcp\.servers\.files\.timeout_seconds: must be above 0"):
        mcp_settings_from(
            load_config(write(tmp_path, "mcp: {servers: {files: {command: x, timeout_seconds: 0}}}\n"), env={}).mcp
        )


def test_invalid_yaml_and_wrong_top_level(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "gateway:\n  busy_mode: [queue\n")
    assert len(problems) == 1 and "not valid YAML (line" in problems[0]
    problems = problems_of(tmp_path, "- a\n- b\n")
    assert "the top level must be a mapping" in problems[0]
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml", env={})


def test_a_key_written_twice_is_an_error(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path, "platforms:\n  telegram: {token: a}\nhttp: {}\nplatforms:\n  discord: {token: b}\n"
    )
    assert len(problems) == 1
    assert "not valid YAML (line 4, column 1): key 'platforms' appears twice (first on line 1)" in problems[0]


def test_empty_file_is_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "# nothing yet\n"), env={})
    assert config.configured_platforms() == ["local"]


def test_platform_settings_and_busy_override(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "gateway: {busy_mode: interrupt}\n"
        "platforms:\n"
        "  telegram: {token: 't:1', allowed_users: [42], admins: [42], busy_mode: steer,"
        " group_policy: allowlist, group_allowlist: [-100], poll_timeout: 5}\n"
        "  discord: {token: d, allowed_users: ['*']}\n"
        "  feishu: {app_id: cli_x}\n",  # no secret: stays off, with a warning
    )
    config = load_config(path, env={})
    tg = config.platform("telegram")
    assert tg.busy_mode == "steer" and tg.admins == ("42",)
    assert tg.group_policy == "allowlist" and tg.group_allowlist == ("-100",)
    assert config.platform("discord").busy_mode == "interrupt"
    assert config.platform("discord").allows_everyone()
    assert config.configured_platforms() == ["telegram", "discord"]  # local auto-off
    assert any("feishu: app_secret not set" in w for w in config.warnings)
    # adapters get what was written (typed) plus the access keys; their own defaults otherwise
    adapter = config.adapter_config("telegram")
    assert adapter["poll_timeout"] == 5 and adapter["token"] == "t:1"
    assert "base_url" not in adapter and "webhook_check_seconds" not in adapter
    assert not any(k.startswith("_") for k in adapter)
    assert config.single_owner is False  # "*" on discord


def test_webhook_mode_implied_by_webhook_url(tmp_path: Path) -> None:
    text = "\n".join(
        problems_of(tmp_path, "platforms: {telegram: {token: t, webhook_url: 'https://x/webhooks/telegram'}}\n")
    )
    assert "platforms.telegram.secret_token: is required in webhook mode" in text
    ok = parse_config(
        {
            "platforms": {"telegram": {"token": "t", "webhook_url": "https://x/y", "secret_token": "s_1"}},
            "gateway": {"shutdown_timeout_seconds": 2.5},
        },
        env={},
    )
    assert ok.adapter_config("telegram")["webhook_url"] == "https://x/y"
    assert ok.gateway.shutdown_timeout_seconds == 2.5


def test_urls_are_checked(tmp_path: Path) -> None:
    text = "\n".join(
        problems_of(
            tmp_path,
            "model: {base_url: 'localhost:8000/v1'}\n"
            "platforms:\n"
            "  feishu: {app_id: a, app_secret: b, domain: 'ftp://x'}\n"
            "  discord: {token: d, gateway_url: 'http://127.0.0.1:1'}\n",
        )
    )
    assert_all_in(
        text,
        "model.base_url: must be an http:// or https:// URL (got 'localhost:8000/v1')",
        "platforms.feishu.domain: must be feishu, lark or an http:// or https:// URL (got 'ftp://x')",
        "platforms.discord.gateway_url: must be a ws:// or wss:// URL",
    )
    lark = parse_config({"platforms": {"feishu": {"app_id": "a", "app_secret": "b", "domain": "lark"}}}, env={})
    assert lark.adapter_config("feishu")["domain"] == "lark"


def test_single_owner_resolution(tmp_path: Path) -> None:
    one = parse_config({"platforms": {"telegram": {"token": "t", "allowed_users": [7], "admins": [7]}}}, env={})
    assert one.single_owner is True
    two = parse_config({"platforms": {"telegram": {"token": "t", "allowed_users": [7, 8]}}}, env={})
    assert two.single_owner is False
    forced = parse_config(
        {"gateway": {"single_owner": True}, "platforms": {"telegram": {"token": "t", "allowed_users": [7, 8]}}}, env={}
    )
    assert forced.single_owner is True
    local_forced = parse_config({"platforms": {"local": {"enabled": True}, "discord": {"token": "d"}}}, env={})
    assert local_forced.configured_platforms() == ["local", "discord"]


def test_cross_field_rules(tmp_path: Path) -> None:
    text = "\n".join(
        problems_of(
            tmp_path,
            "platforms:\n"
            "  telegram: {token: t, mode: webhook}\n"
            "  feishu: {app_id: a, app_secret: b, mode: webhook}\n"
            "  discord: {token: d, group_policy: allowlist}\n",
        )
    )
    assert_all_in(
        text,
        "platforms.telegram.webhook_url: is required when mode is webhook",
        "platforms.feishu.verification_token: webhook mode needs verification_token and/or encrypt_key",
        "platforms.telegram.secret_token: is required in webhook mode",
        "platforms.discord.group_allowlist: is empty but group_policy is allowlist",
    )


def _schema_paths(schema: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, spec in schema.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(spec, dict):
            paths |= _schema_paths(spec, path)
        else:
            paths.add(path)
    return paths


def test_example_config_is_valid_and_documents_every_key() -> None:
    example = ROOT / "config.example.yaml"
    text = example.read_text(encoding="utf-8")
    env = {
        "TELEGRAM_BOT_TOKEN": "1:x",
        "FEISHU_APP_ID": "cli_a",
        "FEISHU_APP_SECRET": "s",
        "DISCORD_BOT_TOKEN": "d",
        "OPENAI_API_KEY": "sk-x",
    }
    config = load_config(example, env=env)
    assert config.path == example
    assert config.configured_platforms() == ["telegram", "feishu", "discord"]
    # copied as-is on a fresh machine (no secrets in the environment): valid, terminal only
    bare = load_config(example, env={"CHINWAG_HOME": "/tmp/chinwag-example"})
    assert bare.configured_platforms() == ["local"]
    assert bare.home == Path("/tmp/chinwag-example")
    # every key the validator knows appears in the example (uncommented or as a commented line)
    documented = {line.strip().lstrip("#").strip().split(":")[0] for line in text.splitlines()}
    leaf_names = {p.rsplit(".", 1)[-1] for p in _schema_paths(SCHEMA) - {"platforms"}}
    for table in list(ADAPTER_KEYS.values()) + [COMMON_PLATFORM_KEYS]:
        leaf_names |= set(table)
    missing = sorted(name for name in leaf_names if name not in documented)
    assert missing == []
    data = yaml.safe_load(text)
    assert isinstance(data, dict)


def test_a_chat_platform_comes_from_its_token_in_the_environment_when_the_file_does_not_name_it(
    tmp_path: Path,
) -> None:
    # The Docker way in: `docker run -e TELEGRAM_BOT_TOKEN ...` with no config.yaml on the volume.
    env = {"TELEGRAM_BOT_TOKEN": "123:abc", "TELEGRAM_ALLOWED_USERS": "42, 43", "CHINWAG_HTTP_HOST": "0.0.0.0"}
    config = parse_config({}, env=env)
    assert config.configured_platforms() == ["telegram"]  # and so no terminal
    telegram = config.platform_settings("telegram")
    assert telegram.token == "123:abc" and telegram.effective_mode == "polling"
    assert config.platform("telegram").allowed_users == ("42", "43")
    assert config.http.host == "0.0.0.0"
    [notice] = config.notices
    assert "telegram: on from TELEGRAM_BOT_TOKEN" in notice and "polling" in notice
    # a file that names the platform or the host decides alone
    config = load_config(write(tmp_path, "http: {host: 127.0.0.1}\nplatforms: {telegram: {enabled: false}}\n"), env=env)
    assert config.configured_platforms() == ["local"] and config.http.host == "127.0.0.1"
    assert not config.notices
    # without allowed users the notice says how to let someone in
    [notice] = parse_config({}, env={"DISCORD_BOT_TOKEN": "d"}).notices
    assert "DISCORD_ALLOWED_USERS" in notice


def test_the_example_config_used_as_is_says_once_at_info_that_the_chat_platforms_stay_off() -> None:
    config = load_config(ROOT / "config.example.yaml", env={})
    assert config.warnings == ()
    [notice] = config.notices
    assert "telegram" in notice and "feishu" in notice and "discord" in notice and "stay off" in notice
