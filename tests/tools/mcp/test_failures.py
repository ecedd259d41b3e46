"""When MCP servers misbehave the turn goes on: a call that never answers times out, a server killed
mid-call gives "interrupted", a dead server is restarted (retry delays doubling to the cap), a down
server answers "unavailable" at once, and a changed tool list is listed again."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal

from tests.tools.mcp.conftest import stdio_server
from tools.mcp.connection import READY_WAIT_SECONDS

# A bound for the "never hangs" contract, not a speed measure (bench/mcp.py measures speed).
NO_HANG = READY_WAIT_SECONDS + 5


async def eventually(predicate, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def server_pid(tools, server: str = "fake") -> int:
    return int((await tools.call(f"mcp__{server}__pid", {})).text)


async def test_a_call_that_never_answers_times_out_and_the_server_stays_usable(make_tools):
    tools = await make_tools({"fake": stdio_server(timeout_seconds=1)})
    outcome = await tools.call("mcp__fake__sleep_forever", {})
    assert outcome.outcome == "timeout" and "may or may not have run" in outcome.text
    assert (await tools.call("mcp__fake__echo", {"text": "still here"})).text == "still here"


async def test_a_server_killed_mid_call_gives_interrupted_then_comes_back(make_tools, tmp_path):
    counter = tmp_path / "calls.txt"
    tools = await make_tools({"fake": stdio_server(counter)}, first_retry=0.1)
    pid = await server_pid(tools)
    call = asyncio.create_task(tools.call("mcp__fake__sleep_forever", {}))
    await eventually(lambda: counter.exists() and "sleeping" in counter.read_text())  # the server is running it
    os.kill(pid, signal.SIGKILL)
    async with asyncio.timeout(NO_HANG):
        outcome = await call
    assert outcome.outcome == "interrupted" and "may or may not have run" in outcome.text
    await eventually(lambda: tools.states()["fake"].state == "ready" and tools.states()["fake"].restarts == 1)
    assert await server_pid(tools) != pid


async def test_restart_delays_double_up_to_the_cap(make_tools, caplog):
    caplog.set_level(logging.WARNING, logger="tools.mcp.connection")
    tools = await make_tools(
        {"broken": {"command": "python3", "args": ["-c", "import sys; sys.exit(3)"]}}, first_retry=0.05, max_retry=0.2
    )
    await eventually(lambda: tools.states()["broken"].restarts >= 4)
    delays = [float(m) for m in re.findall(r"broken is down .*; retrying in ([\d.]+) s", caplog.text)]
    assert delays[:5] == [0.05, 0.1, 0.2, 0.2, 0.2][: len(delays[:5])] and len(delays) >= 4
    assert tools.states()["broken"].state in ("down", "starting")


async def test_a_server_that_never_started_offers_nothing_and_says_why(make_tools):
    tools = await make_tools({"gone": {"command": "/nonexistent/mcp-server"}}, first_retry=60)
    state = tools.states()["gone"]
    assert (state.state, state.tools) == ("down", 0) and "mcp-server" in state.error
    assert tools.specs() == []
    async with asyncio.timeout(NO_HANG):
        # never listed: a name the model read in an earlier run's history is unknown, not a hang
        assert (await tools.call("mcp__gone__echo", {})).outcome == "unknown_tool"


async def test_a_server_that_dies_while_idle_is_unavailable_until_it_is_back(make_tools):
    tools = await make_tools({"fake": stdio_server()}, first_retry=3)
    os.kill(await server_pid(tools), signal.SIGKILL)
    await eventually(lambda: tools.states()["fake"].state == "down")
    async with asyncio.timeout(NO_HANG):
        outcome = await tools.call("mcp__fake__echo", {"text": "anyone?"})
    assert outcome.outcome == "unavailable" and "unavailable" in outcome.text and "not run" in outcome.text
    await eventually(lambda: tools.states()["fake"].state == "ready")
    assert (await tools.call("mcp__fake__echo", {"text": "back"})).text == "back"


async def test_tools_are_listed_again_on_list_changed(make_tools):
    tools = await make_tools({"fake": stdio_server()})
    assert tools.get("mcp__fake__newt") is None
    assert (await tools.call("mcp__fake__grow", {"name": "newt"})).text == "added newt"
    await eventually(lambda: tools.get("mcp__fake__newt") is not None)
    assert (await tools.call("mcp__fake__newt", {})).text == "I am newt"
    assert tools.states()["fake"].tools == len(tools.tools())


async def test_a_killed_http_server_gives_a_result_and_the_state_says_down(make_tools, http_server):
    url, process, _ = http_server
    tools = await make_tools({"remote": {"url": url}}, first_retry=30)
    assert (await tools.call("mcp__remote__echo", {"text": "hi"})).text == "hi"
    process.kill()
    process.wait()
    async with asyncio.timeout(NO_HANG):
        outcome = await tools.call("mcp__remote__echo", {"text": "hi again"})
    # the transport cannot tell "refused" from "lost after sending": the safe answer is "may have run"
    assert outcome.outcome == "interrupted" and "may or may not have run" in outcome.text
    await eventually(lambda: tools.states()["remote"].state == "down")
