"""MCP tools in real turns: the production gateway (build_app through tests/fakes/gateway_harness),
the fake model on 127.0.0.1 calling `mcp__<server>__<tool>`, the fake MCP server as a stdio child
or a Streamable-HTTP process. The result reaches the model and the person; the call is journaled;
failures (a server that never answers, a huge result, a server killed mid-call) become tool results
and the turn goes on."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.cli.doctor import run_doctor
from gateway.service.app import AppError, build_app
from gateway.service.http import OpsServer
from tests.fakes.chat_adapter import ChatAdapter
from tests.fakes.gateway_harness import Gateway, make_config
from tests.fakes.loopback import wait_until
from tests.fakes.mcp_server import PIXEL_PNG
from tests.fakes.openai_server import Reply, ToolCall
from tests.tools.mcp.conftest import stdio_server


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


async def test_a_stdio_tool_result_reaches_the_model_and_the_person(tmp_path: Path) -> None:
    mcp = {"servers": {"fake": stdio_server()}}
    async with Gateway(tmp_path, mcp=mcp) as gw:
        assert gw.fake is not None
        gw.fake.push(Reply(tool_calls=[ToolCall("mcp__fake__echo", {"text": "hello from mcp"})]))
        gw.fake.push(lambda body: "the tool said: " + tool_messages(body)[-1]["content"])
        replies = await gw.say("use the echo tool")
        assert replies == ["the tool said: hello from mcp"]
        first = gw.fake.requests[0]
        assert "mcp__fake__echo" in offered(first) and "session_search" in offered(first)
        session = gw.session_id()
        assert session is not None
        stored = [(m["role"], m.get("tool_name"), m["content"]) for m in gw.messages(session)]
        assert ("tool", "mcp__fake__echo", "hello from mcp") in stored
        assert gw.db.inbox_unfinished() == []  # answered
        calls = gw.db.tool_calls_of(1)
        assert [(c["server"], c["tool"], c["state"], c["result"]) for c in calls] == [
            ("fake", "echo", "done", "hello from mcp")
        ]
        assert json.loads(calls[0]["arguments"]) == {"text": "hello from mcp"}


async def test_an_http_tool_and_an_image_kept_as_an_attachment(tmp_path: Path, http_server: Any) -> None:
    url, _, _ = http_server
    mcp = {"servers": {"remote": {"url": url}}}
    async with Gateway(tmp_path, mcp=mcp, model_options={"vision": True}) as gw:
        assert gw.fake is not None
        gw.fake.push(
            Reply(tool_calls=[ToolCall("mcp__remote__add", {"a": 2, "b": 40}), ToolCall("mcp__remote__pixel", {})])
        )
        gw.fake.push("done")
        assert await gw.say("add and draw") == ["done"]
        second = gw.fake.requests[1]
        assert [m["content"] for m in tool_messages(second)][0] == "42"
        images = [
            p
            for m in second["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for p in m["content"]
        ]
        assert any(p.get("type") == "image_url" for p in images)  # the model can see: it got the pixel
        session = gw.session_id()
        assert session is not None
        tool_rows = [m for m in gw.messages(session) if m["role"] == "tool"]
        kept = gw.db.attachments_of([m["id"] for m in tool_rows])
        (files,) = [v for v in kept.values() if v]
        assert files[0]["mime_type"] == "image/png" and files[0]["bytes"] == len(PIXEL_PNG)


@pytest.mark.slow  # the killed server is restarted after the first retry delay (1 s) and a Python start
async def test_a_server_killed_mid_call_is_an_interrupted_result_and_the_next_call_finds_it_restarted(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "calls.txt"
    async with Gateway(tmp_path, mcp={"servers": {"fake": stdio_server(counter)}}) as gw:
        assert gw.fake is not None and gw.app.mcp is not None
        mcp = gw.app.mcp
        pid = int((await mcp.call("mcp__fake__pid", {})).text)
        gw.fake.push(Reply(tool_calls=[ToolCall("mcp__fake__sleep_forever", {})]))
        gw.fake.push(lambda body: "after the kill: " + tool_messages(body)[-1]["content"])
        await gw.adapter.inject("sleep, please")
        await wait_until(lambda: counter.exists() and "sleeping" in counter.read_text(), 30)  # the server runs it
        os.kill(pid, signal.SIGKILL)
        async with asyncio.timeout(15):  # no hang: the lost connection ends the call at once
            await gw.runner.drain()
        (reply,) = gw.adapter.texts()
        assert reply.startswith("after the kill: error: interrupted: fake.sleep_forever lost its connection")
        assert "may or may not have run" in reply
        (row,) = gw.db.tool_calls_of(1)
        assert (row["state"], row["outcome"]) == ("done", "interrupted")
        await wait_until(lambda: (mcp.states()["fake"].state, mcp.states()["fake"].restarts) == ("ready", 1), 30)
        gw.fake.push(Reply(tool_calls=[ToolCall("mcp__fake__pid", {})]))
        gw.fake.push(lambda body: "pid " + tool_messages(body)[-1]["content"])
        (again,) = await gw.say("which process?")
        assert again.startswith("pid ") and int(again[4:]) != pid  # a new process answers


async def test_a_silent_server_times_out_a_huge_result_is_cut_and_the_turn_goes_on(tmp_path: Path) -> None:
    mcp = {"servers": {"fake": stdio_server(timeout_seconds=1)}, "max_result_chars": 1000}
    async with Gateway(tmp_path, mcp=mcp) as gw:
        assert gw.fake is not None
        gw.fake.push(
            Reply(tool_calls=[ToolCall("mcp__fake__sleep_forever", {}), ToolCall("mcp__fake__huge", {"chars": 5000})])
        )
        gw.fake.push("carried on")
        assert await gw.say("try both") == ["carried on"]
        slow, huge = [m["content"] for m in tool_messages(gw.fake.requests[1])]
        assert slow.startswith("error:") and "timed out" in slow
        assert huge.startswith("x" * 1000) and "[... cut: 4000 more characters" in huge


async def test_a_schema_with_ref_and_anyof_is_offered_and_called(tmp_path: Path) -> None:
    async with Gateway(tmp_path, mcp={"servers": {"fake": stdio_server()}}) as gw:
        assert gw.fake is not None
        order = {"order": {"id": 7, "ship_to": {"street": "Elm"}}, "priority": 2}
        gw.fake.push(Reply(tool_calls=[ToolCall("mcp__fake__place_order", order)]), "ok")
        await gw.say("order it")
        spec = [t for t in gw.fake.requests[0]["tools"] if t["function"]["name"] == "mcp__fake__place_order"][0]
        assert "$ref" not in json.dumps(spec["function"]["parameters"])  # simplified for the model API
        assert tool_messages(gw.fake.requests[1])[0]["content"] == "order 7 to Elm priority 2"


async def test_mcp_tools_are_offered_only_to_people_allowed_to_talk(tmp_path: Path) -> None:
    platforms = {"telegram": {"token": "t", "allowed_users": ["100"]}}
    async with Gateway(tmp_path, platforms=platforms, mcp={"servers": {"fake": stdio_server()}}) as gw:
        turns = gw.runner.turns
        registry = turns.factory.tools

        def names(user: str) -> list[str]:
            msg = gw.adapter.message("hi", chat_id=user, user_id=user)
            return [t["function"]["name"] for t in registry.schemas(turns._tool_context(msg, "s", "k"))]

        assert "mcp__fake__echo" in names("100")
        assert names("200") == ["session_search", "memory", "schedule"]
        stranger = turns._tool_context(gw.adapter.message("hi", chat_id="200", user_id="200"), "s", "k")
        outcome = await registry.run("mcp__fake__echo", {"text": "x"}, stranger, "call_1")
        assert outcome.outcome == "unknown_tool"


async def test_readyz_lists_each_server_and_metrics_count_calls(tmp_path: Path) -> None:
    mcp = {
        "servers": {
            "fake": stdio_server(),
            "gone": {"url": "http://127.0.0.1:9/mcp"},
            "off": {"command": "x", "enabled": False},
        }
    }
    async with Gateway(tmp_path, mcp=mcp) as gw:
        assert gw.fake is not None and gw.app.mcp is not None
        gw.fake.push(Reply(tool_calls=[ToolCall("mcp__fake__echo", {"text": "hi"})]), "ok")
        await gw.say("echo")
        ops = OpsServer("127.0.0.1", 0, metrics=gw.app.metrics, tool_servers=gw.app.mcp.states)
        await ops.start()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{ops.url}/readyz") as resp:
                    body = await resp.json()
                async with http.get(f"{ops.url}/metrics") as resp:
                    metrics = await resp.text()
        finally:
            await ops.stop()
        servers = body["mcp"]
        assert servers["fake"]["state"] == "ready" and servers["fake"]["tools"] > 5
        assert servers["gone"]["state"] == "down" and servers["gone"]["error"]
        assert servers["off"]["state"] == "disabled"
        assert 'chinwag_tool_calls_total{outcome="ok",server="fake",tool="echo"} 1' in metrics
        assert 'chinwag_tool_seconds_count{server="fake",tool="echo"} 1' in metrics


async def test_doctor_starts_each_server_lists_its_tools_and_reports_failures(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    mcp = {"servers": {"fake": stdio_server(tools=["echo", "add"]), "gone": {"url": "http://127.0.0.1:9/mcp"}}}
    (home / "config.yaml").write_text(json.dumps({"mcp": mcp}), encoding="utf-8")
    out = io.StringIO()
    code = await asyncio.to_thread(run_doctor, None, None, timeout=3.0, out=out, env={"CHINWAG_HOME": str(home)})
    text = out.getvalue()
    assert "ok    mcp.servers.fake (stdio): 2 tool(s): echo, add" in text
    assert "FAIL  mcp.servers.gone (http): down: " in text
    assert code == 1


def test_a_wrong_mcp_key_stops_the_start_and_is_named(tmp_path: Path) -> None:
    config = make_config(tmp_path / "home", None, mcp={"servers": {"x": {"command": "a", "url": "http://127.0.0.1:9"}}})
    with pytest.raises(AppError, match=r"mcp\.servers\.x: set either `command`"):
        build_app(config, adapters=[ChatAdapter("telegram")], http=False)
