"""The `mcp` section: defaults, both transports, policies, and a clear error naming the key."""

from __future__ import annotations

import pytest

from tools.mcp import McpConfigError, mcp_settings_from


def test_defaults_and_both_transports():
    s = mcp_settings_from(
        {
            "servers": {
                "files": {"command": "mcp-files", "args": ["--root", "/srv"], "env": {"TOKEN": "t"}, "cwd": "/srv"},
                "tickets": {"url": "https://tickets.example/mcp", "headers": {"Authorization": "Bearer x"}},
            }
        }
    )
    assert (s.max_result_chars, s.approval_timeout_seconds) == (50_000, 300.0)
    files, tickets = s.servers
    assert (files.transport, files.command, files.args, dict(files.env), files.cwd) == (
        "stdio",
        "mcp-files",
        ("--root", "/srv"),
        {"TOKEN": "t"},
        "/srv",
    )
    assert (tickets.transport, tickets.url, dict(tickets.headers)) == (
        "http",
        "https://tickets.example/mcp",
        {"Authorization": "Bearer x"},
    )
    assert (files.timeout_seconds, files.enabled, files.require_approval, files.idempotent, files.tools) == (
        60.0,
        True,
        False,
        False,
        None,
    )
    assert "Bearer" not in repr(tickets) and "TOKEN" not in repr(files)  # secrets stay out of logs


def test_policies_allow_list_exclusions_and_approval():
    s = mcp_settings_from(
        {
            "servers": {
                "orders": {
                    "command": "x",
                    "tools": ["get_order", "cancel_order"],
                    "require_approval": ["cancel_order"],
                },
                "all": {"command": "y", "exclude_tools": ["drop_db"], "require_approval": True, "idempotent": True},
                "off": {"command": "z", "enabled": False},
            },
            "max_result_chars": 1000,
            "approval_timeout_seconds": 30,
        }
    )
    orders, every, off = s.servers
    assert orders.offers("get_order") and not orders.offers("delete_order")
    assert orders.needs_approval("cancel_order") and not orders.needs_approval("get_order")
    assert every.offers("read") and not every.offers("drop_db") and every.needs_approval("read") and every.idempotent
    assert [x.name for x in s.enabled_servers()] == ["orders", "all"] and not off.enabled
    assert (s.max_result_chars, s.approval_timeout_seconds) == (1000, 30.0)


def test_env_expansion_uses_the_one_expander():
    raw = {
        "servers": {
            "s": {"command": "x", "env": {"TOKEN": "${SECRET}", "MODE": "${MODE:-fast}"}, "args": ["${SECRET}"]}
        }
    }
    (server,) = mcp_settings_from(raw, env={"SECRET": "s3"}).servers
    assert dict(server.env) == {"TOKEN": "s3", "MODE": "fast"} and server.args == ("s3",)
    with pytest.raises(McpConfigError, match=r"mcp\.servers\.s\.args: environment variable SECRET is not set"):
        mcp_settings_from(raw, env={})
    # without env= the section is taken as the config loader left it (already expanded)
    assert mcp_settings_from(raw).servers[0].env["TOKEN"] == "${SECRET}"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"servers": {"s": {}}}, r"mcp\.servers\.s: set either `command`"),
        ({"servers": {"s": {"command": "x", "url": "http://h/mcp"}}}, r"mcp\.servers\.s: set either"),
        ({"servers": {"s": {"url": "ftp://h"}}}, r"mcp\.servers\.s\.url: expected an http"),
        ({"servers": {"s": {"url": "http://h", "args": ["a"]}}}, r"`args`, `env` and `cwd` are for stdio"),
        ({"servers": {"s": {"command": "x", "headers": {"a": "b"}}}}, r"mcp\.servers\.s\.headers"),
        (
            {"servers": {"s": {"command": "x", "tools": ["a"], "exclude_tools": ["b"]}}},
            r"`tools` .* or `exclude_tools`",
        ),
        ({"servers": {"s": {"command": "x", "timeout_seconds": 0}}}, r"timeout_seconds: must be above 0"),
        ({"servers": {"s": {"command": "x", "timeout_seconds": "soon"}}}, r"timeout_seconds: expected a number"),
        (
            {"servers": {"s": {"command": "x", "require_approval": "yes"}}},
            r"require_approval: expected true, false or a list",
        ),
        ({"servers": {"s": {"command": "x", "enabled": "no"}}}, r"enabled: expected true or false"),
        ({"servers": {"s": {"command": "x", "comand": "y"}}}, r"mcp\.servers\.s: unknown key\(s\) comand"),
        ({"servers": ["s"]}, r"mcp\.servers: expected a mapping"),
        ({"server": {}}, r"mcp: unknown key\(s\) server"),
        ({"max_result_chars": "many"}, r"mcp\.max_result_chars: expected a number"),
    ],
)
def test_a_wrong_key_is_named(section, message):
    with pytest.raises(McpConfigError, match=message):
        mcp_settings_from(section)
