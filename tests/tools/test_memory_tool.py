"""tools.memory: MEMORY.md / USER.md entries, budgets, cleaning, atomic writes, through the registry."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.tools import ToolContext, ToolRegistry
from gateway.source import SessionSource
from tools.memory import (
    MAX_ENTRY_CHARS,
    MemoryStore,
    atomic_write,
    limits_from_config,
    make_memory_tool,
    read_snapshot,
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([make_memory_tool({"memory": 200, "user": 120})])


@pytest.fixture
def ctx(tmp_path) -> ToolContext:
    source = SessionSource(platform="telegram", chat_id="42", chat_type="dm", user_id="42")
    return ToolContext(session_id="s1", source=source, home=tmp_path)


async def call(registry: ToolRegistry, ctx: ToolContext, **args) -> str:
    return await registry.call("memory", json.dumps(args), ctx)


async def test_add_to_both_files_and_snapshot(registry, ctx, tmp_path):
    assert (await call(registry, ctx, action="add", target="memory", content="Deploy with make ship")).startswith(
        "added to MEMORY.md"
    )
    await call(registry, ctx, action="add", target="memory", content="Staging host is stg-01")
    await call(registry, ctx, action="add", target="user", content="Name: Lin. Prefers Chinese.")
    assert (tmp_path / "MEMORY.md").read_text() == "Deploy with make ship\n§\nStaging host is stg-01\n"
    memory, user = read_snapshot(tmp_path)
    assert memory == "Deploy with make ship\n§\nStaging host is stg-01"
    assert user == "Name: Lin. Prefers Chinese."
    again = await call(registry, ctx, action="add", target="user", content="Name: Lin. Prefers Chinese.")
    assert again.startswith("already saved")
    assert read_snapshot(tmp_path)[1] == user


async def test_snapshot_of_empty_home(tmp_path):
    assert read_snapshot(tmp_path / "nowhere") == ("", "")


async def test_replace_and_remove_by_unique_substring(registry, ctx, tmp_path):
    for text in ("port is 8080", "db is postgres 15", "cache is redis"):
        await call(registry, ctx, action="add", target="memory", content=text)
    result = await call(registry, ctx, action="replace", target="memory", old="postgres", content="db is postgres 16")
    assert result.startswith("replaced")
    result = await call(registry, ctx, action="remove", target="memory", old="redis")
    assert result.startswith("removed")
    assert read_snapshot(tmp_path)[0] == "port is 8080\n§\ndb is postgres 16"


async def test_ambiguous_missing_and_bad_requests_change_nothing(registry, ctx, tmp_path):
    await call(registry, ctx, action="add", target="memory", content="uses docker")
    await call(registry, ctx, action="add", target="memory", content="docker compose v2")
    before = (tmp_path / "MEMORY.md").read_text()
    ambiguous = await call(registry, ctx, action="remove", target="memory", old="docker")
    assert ambiguous.startswith("error: 2 entries contain 'docker'")
    assert (await call(registry, ctx, action="remove", target="memory", old="kubernetes")).startswith(
        "error: no entry in MEMORY.md contains"
    )
    assert "non-empty" in await call(registry, ctx, action="replace", target="memory", old="", content="x")
    assert "target must be" in await call(registry, ctx, action="add", target="secrets", content="x")
    assert "action must be" in await call(registry, ctx, action="drop", target="memory")
    assert "content is empty" in await call(registry, ctx, action="add", target="memory", content=" \x00 ")
    assert "must be a string" in await call(registry, ctx, action="add", target="memory", content=5)
    assert (tmp_path / "MEMORY.md").read_text() == before


async def test_budget_full_message_and_nothing_lost(registry, ctx, tmp_path):
    results = [
        await call(registry, ctx, action="add", target="user", content=f"fact number {i} " + "x" * 20)
        for i in range(10)
    ]
    refused = [r for r in results if r.startswith("error")]
    assert refused, "a 120-char budget must refuse some of ten 35-char entries"
    text = (tmp_path / "USER.md").read_text()
    assert len(text) <= 120
    assert f"memory full: {len(text)}/120 chars used in USER.md" in refused[0]
    assert "remove or shorten entries first" in refused[0]
    # after removing one, there is room again
    await call(registry, ctx, action="remove", target="user", old="fact number 0 ")
    assert (await call(registry, ctx, action="add", target="user", content="short")).startswith("added")


async def test_over_budget_file_can_still_shrink(registry, ctx, tmp_path):
    (tmp_path / "USER.md").write_text("\n§\n".join(f"hand written entry {i} " + "y" * 30 for i in range(6)))
    assert (await call(registry, ctx, action="add", target="user", content="more")).startswith("error: memory full")
    assert (await call(registry, ctx, action="remove", target="user", old="entry 3")).startswith("removed")
    assert "entry 3" not in (tmp_path / "USER.md").read_text()


async def test_cleaning_control_chars_separator_and_length(registry, ctx, tmp_path):
    await call(
        registry, ctx, action="add", target="memory", content="a\x1b[31mred\u202eevil\u200b\r\nline two\n§\nnot a split"
    )
    entries = MemoryStore(tmp_path).entries("memory")
    assert entries == ["a[31mredevil\nline two\n(§)\nnot a split"]
    too_long = await call(registry, ctx, action="add", target="memory", content="z" * (MAX_ENTRY_CHARS + 1))
    assert too_long.startswith("error: entry too long")


async def test_read_action_and_invalid_utf8_file(registry, ctx, tmp_path):
    assert "is empty" in await call(registry, ctx, action="read", target="memory")
    (tmp_path / "MEMORY.md").write_bytes(b"good entry\n\xc3\x28 broken bytes\n")
    shown = await call(registry, ctx, action="read", target="memory")
    assert "good entry" in shown and "broken bytes" in shown
    assert read_snapshot(tmp_path)[0].startswith("good entry")


async def test_concurrent_adds_all_land(ctx, tmp_path):
    registry = ToolRegistry([make_memory_tool({"memory": 5000})])
    results = await asyncio.gather(
        *(call(registry, ctx, action="add", target="memory", content=f"note {i}") for i in range(25))
    )
    assert all(r.startswith("added") for r in results)
    assert sorted(MemoryStore(tmp_path).entries("memory")) == sorted(f"note {i}" for i in range(25))


async def test_limits_the_tool_is_built_with(tmp_path):
    registry = ToolRegistry([make_memory_tool({"memory": 10})])
    ctx = ToolContext(session_id="s", home=tmp_path)
    assert (await call(registry, ctx, action="add", target="memory", content="x" * 20)).startswith("error: memory full")


async def test_no_home_is_an_error_not_a_crash(registry):
    assert "not available" in await registry.call(
        "memory", '{"action": "read", "target": "user"}', ToolContext(session_id="s")
    )


def test_atomic_write_failure_keeps_old_file_and_no_temp(tmp_path):
    path = tmp_path / "MEMORY.md"
    atomic_write(path, "old content\n")
    with pytest.raises(UnicodeEncodeError):
        atomic_write(path, "half written \ud800 lone surrogate")  # fails while writing the temp file
    assert path.read_text() == "old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["MEMORY.md"]
    atomic_write(path, "new content\n")
    assert path.read_text() == "new content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["MEMORY.md"]


def test_limits_from_config():
    assert limits_from_config(None) == {"memory": 2200, "user": 1375}
    assert limits_from_config({"memory": {"user_chars": 500}}) == {"memory": 2200, "user": 500}
    with pytest.raises(ValueError, match="memory.memory_chars"):
        limits_from_config({"memory": {"memory_chars": "lots"}})
    with pytest.raises(ValueError, match=">= 100"):
        limits_from_config({"memory": {"user_chars": 5}})
