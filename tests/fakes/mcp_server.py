"""A fake MCP server built with the official SDK's server side (`MCPServer`), for tests and bench.

One set of tool definitions, served two ways: over stdio (`python -m tests.fakes.mcp_server`, the
way a daemon starts a local server) and over Streamable HTTP on 127.0.0.1 (`--http`: binds a free
port and prints it on the first stdout line, so a test can start it as a real separate process and
kill it). The tools cover what the client must handle: text, numbers, an image, a result larger
than any cut, a failing tool, one that never answers, a schema with `$ref`/`anyOf`, a counter that
appends each call to a file (so a test can count calls that really reached the server), the
server's pid (so a test can SIGKILL it mid-call), and a tool that adds a tool and tells the client
the list changed.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

# A 1x1 transparent PNG: a real image, small enough to compare byte for byte.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class Address(BaseModel):
    street: str
    city: str | None = None


class Order(BaseModel):
    id: int
    ship_to: Address
    note: str | None = None


def build_server(counter_file: str | None = None) -> MCPServer:
    server = MCPServer("fake-mcp")

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="A 1x1 PNG.")
    def pixel() -> Image:
        return Image(data=PIXEL_PNG, format="png")

    @server.tool(description="A text result of `chars` characters.")
    def huge(chars: int) -> str:
        return "x" * chars

    @server.tool(description="Always fails with the given message.")
    def fail(message: str) -> str:
        raise ToolError(message)

    def record(label: str) -> None:
        if counter_file:
            with open(counter_file, "a", encoding="utf-8") as f:
                f.write(label + "\n")

    @server.tool(description="Never answers (records that it started, so a test knows the call arrived).")
    async def sleep_forever() -> str:
        record("sleeping")
        await anyio.sleep_forever()
        return "unreachable"

    @server.tool(description="Place an order (a nested model: $ref/$defs and anyOf with null).")
    def place_order(order: Order, priority: int | None = None) -> str:
        return f"order {order.id} to {order.ship_to.street} priority {priority}"

    @server.tool(description="Count this call: appends the label to the counter file.")
    def count(label: str) -> str:
        record(label)
        return f"counted {label}"

    @server.tool(description="A header of the HTTP request that carried this call (empty over stdio).")
    def header(name: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(name.lower(), "")

    @server.tool(description="The server process id.")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Add a tool named `name` and tell the client the tool list changed.")
    async def grow(name: str, ctx: Context) -> str:
        server.add_tool(lambda: f"I am {name}", name=name, description=f"Grown tool {name}.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP on 127.0.0.1 (port printed)")
    parser.add_argument("--counter-file", default=os.environ.get("FAKE_MCP_COUNTER"))
    args = parser.parse_args(argv)
    server = build_server(args.counter_file)
    if not args.http:
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections made after the port is printed wait in the backlog until uvicorn serves
    sys.stdout.write(f"{sock.getsockname()[1]}\n")
    sys.stdout.flush()
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    main()
