"""Fixtures for MCP tests: the fake server (tests/fakes/mcp_server.py) as a real stdio child of
`McpTools` and as a real Streamable-HTTP process on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import pytest

from tools.mcp import McpSettings, McpTools, mcp_settings_from

ROOT = Path(__file__).resolve().parents[3]


def stdio_server(counter_file: Path | None = None, **options: Any) -> dict[str, Any]:
    """The `mcp.servers.<name>` mapping that starts the fake server over stdio."""
    args = ["-m", "tests.fakes.mcp_server"] + (["--counter-file", str(counter_file)] if counter_file else [])
    # the SDK gives a stdio server a minimal environment (PATH, HOME, ...): PYTHONPATH comes from `env`
    return {"command": sys.executable, "args": args, "env": {"PYTHONPATH": str(ROOT)}, "cwd": str(ROOT), **options}


def settings(servers: dict[str, dict[str, Any]], **section: Any) -> McpSettings:
    return mcp_settings_from({"servers": servers, **section})


@pytest.fixture
async def make_tools() -> AsyncIterator[Callable[..., Any]]:
    """`await make_tools(servers, **options)`: a started McpTools whose servers have settled."""
    made: list[McpTools] = []

    async def make(servers: dict[str, dict[str, Any]], *, vision: bool = False, **options: Any) -> McpTools:
        section = {k: options.pop(k) for k in ("max_result_chars",) if k in options}
        tools = McpTools(settings(servers, **section), vision=vision, **options)
        made.append(tools)
        await tools.start()
        await tools.wait_ready(timeout=30)  # a loaded CI machine starts Python slowly
        return tools

    yield make
    for tools in made:
        await tools.close()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    """The fake server over Streamable HTTP in its own process: (url, process, counter file)."""
    counter = tmp_path / "http-calls.txt"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_server", "--http", "--counter-file", str(counter)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    yield f"http://127.0.0.1:{port}/mcp", process, counter
    process.kill()
    process.wait()
