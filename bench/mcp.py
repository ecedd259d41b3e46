"""What the gateway adds to an MCP tool call: `McpTools.call` beside the SDK's bare `ClientSession`,
same run, same fake server code (tests/fakes/mcp_server.py), calls interleaved one for one so load
from other processes falls on both sides alike. Prints p50/p99 per call for each, the added time
(absolute and as a ratio), and what importing the SDK costs a daemon that enables a server.

    python -m bench.mcp                      # 2000 calls a side, stdio and Streamable HTTP
    python -m bench.mcp --calls 500 --transport stdio

Over stdio each side has its own server process (a stdio server has one client), and on a loaded
machine two processes differ by more than the gateway adds, so the run is split into `--rounds` of
fresh processes; over HTTP both talk to the same server process. The call is `echo` with a short text: the server's own work is
nil, so the difference is the gateway's part (argument parsing, the name lookup, the relay of the
read stream, the timeout scope, the result conversion). A third column is the whole path a turn
takes (gateway.runtime.mcp_calls.McpCalls.run): the same call with the journal's two commits (the
call `started` before it is sent, `done` with its result) on a real SQLite file in a temporary
directory, with the storage's default durability (storage.synchronous: full).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator

from agent.tools import ToolContext
from bench.stats import percentile
from gateway.db import SessionDB
from gateway.runtime.mcp_calls import McpCalls
from tools.mcp import McpTools, mcp_settings_from

ROOT = Path(__file__).resolve().parents[1]
FAKE = ["-m", "tests.fakes.mcp_server"]


@contextlib.asynccontextmanager
async def direct_session(transport: str, url: str | None) -> AsyncIterator[Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if transport == "stdio":
        params = StdioServerParameters(command=sys.executable, args=FAKE, env={"PYTHONPATH": str(ROOT)}, cwd=ROOT)
        streams = stdio_client(params)
    else:
        assert url is not None
        streams = streamable_http_client(url)
    async with streams as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        yield session


async def timed(call: Any) -> float:
    t0 = time.perf_counter()
    await call
    return time.perf_counter() - t0


async def call(tools: McpTools, text: str) -> None:
    outcome = await tools.call("mcp__bench__echo", {"text": text})
    assert outcome.text == text, outcome


def server_config(transport: str, url: str | None) -> dict[str, Any]:
    if transport == "stdio":
        return {"command": sys.executable, "args": FAKE, "env": {"PYTHONPATH": str(ROOT)}, "cwd": str(ROOT)}
    return {"url": url}


async def journaled(source: McpCalls, ctx: ToolContext, text: str) -> None:
    outcome = await source.run("mcp__bench__echo", {"text": text}, ctx, "call")
    assert outcome.text == text, outcome


async def one_round(
    transport: str,
    calls: int,
    url: str | None,
    direct_first: bool,
    gateway: list[float],
    direct: list[float],
    turn: list[float],
) -> None:
    tools = McpTools(mcp_settings_from({"servers": {"bench": server_config(transport, url)}}))
    async with contextlib.AsyncExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        db = SessionDB(home / "state.db")
        stack.callback(db.close)
        entry = await db.ainbox_add("bench", "e1", "k", "{}", time.time())
        source = McpCalls(tools, db)
        ctx = ToolContext(session_id="s", inbox_id=entry, may_use_sources=True)
        if direct_first:  # which side's server starts first alternates by round, too
            session = await stack.enter_async_context(direct_session(transport, url))
        stack.push_async_callback(tools.close)
        await tools.start()
        await tools.wait_ready(timeout=60)
        assert tools.states()["bench"].state == "ready", tools.states()
        if not direct_first:
            session = await stack.enter_async_context(direct_session(transport, url))
        for i in range(calls + calls // 10):  # the first tenth warms both sides up and is not counted
            text = f"call {i}"
            if i % 2:  # who goes first alternates: the second of a pair may find caches warm
                d, g = await timed(session.call_tool("echo", {"text": text})), await timed(call(tools, text))
            else:
                g, d = await timed(call(tools, text)), await timed(session.call_tool("echo", {"text": text}))
            t = await timed(journaled(source, ctx, text))
            if i >= calls // 10:
                gateway.append(g)
                direct.append(d)
                turn.append(t)


async def compare(transport: str, calls: int, rounds: int, url: str | None) -> None:
    gateway: list[float] = []
    direct: list[float] = []
    turn: list[float] = []
    for n in range(rounds):  # fresh processes each round: one server process's scheduling luck evens out
        await one_round(transport, calls // rounds, url, n % 2 == 1, gateway, direct, turn)
    ms = 1000.0
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        g, d, t = percentile(gateway, q) * ms, percentile(direct, q) * ms, percentile(turn, q) * ms
        print(
            f"  {transport:5} {label}: McpTools {g:7.3f} ms   ClientSession {d:7.3f} ms   added {g - d:+7.3f} ms   "
            f"ratio {g / d:5.2f}x   journaled (a turn's call) {t:7.3f} ms, added {t - d:+7.3f} ms"
        )
    added = [g - d for g, d in zip(gateway, direct)]
    print(
        f"  {transport:5} median of per-pair added time: {statistics.median(added) * ms:+.3f} ms over {len(added)} pairs"
    )


def import_cost(runs: int = 5) -> float:
    """Median CPU seconds to import what a server needs (tools.mcp.connection and the SDK) in a fresh
    process: CPU time, because the wall time on a shared machine measures the other processes too."""
    code = "import time; t = time.process_time(); import tools.mcp.connection; print(time.process_time() - t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4, help="fresh server processes and clients per transport")
    parser.add_argument("--transport", choices=("stdio", "http", "both"), default="both")
    args = parser.parse_args()
    print(
        f"importing the mcp SDK (tools.mcp.connection): {import_cost() * 1000:.0f} ms CPU (median of 5 fresh processes)"
    )
    print(f"tool call round trip, {args.calls} calls a side, interleaved:")
    if args.transport in ("stdio", "both"):
        asyncio.run(compare("stdio", args.calls, args.rounds, None))
    if args.transport in ("http", "both"):
        server = subprocess.Popen([sys.executable, *FAKE, "--http"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            url = f"http://127.0.0.1:{int(server.stdout.readline())}/mcp"
            asyncio.run(compare("http", args.calls, args.rounds, url))
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
