"""McpTools against the fake server through the real SDK, over stdio and Streamable HTTP: listing,
names and schemas offered, text/number/image/error/huge results, and a call counted once."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from tests.fakes.mcp_server import PIXEL_PNG
from tests.tools.mcp.conftest import ROOT, settings, stdio_server
from tools.mcp import McpTools


async def test_stdio_tools_are_offered_under_their_function_names(make_tools):
    tools = await make_tools({"fake": stdio_server()})
    names = {spec["function"]["name"] for spec in tools.specs()}
    assert {"mcp__fake__echo", "mcp__fake__add", "mcp__fake__place_order", "mcp__fake__sleep_forever"} <= names
    echo = tools.get("mcp__fake__echo")
    assert echo.server == "fake" and echo.tool == "echo" and echo.description == "Say the text back."
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert tools.states()["fake"].state == "ready"


async def test_a_ref_and_anyof_schema_is_offered_simplified(make_tools):
    tools = await make_tools({"fake": stdio_server()})
    order = tools.get("mcp__fake__place_order")
    text = json.dumps(order.parameters)
    assert "$ref" not in text and "$defs" not in text and "anyOf" not in text
    assert order.parameters["properties"]["order"]["properties"]["ship_to"]["properties"]["street"]["type"] == "string"
    assert order.parameters["properties"]["priority"] == {
        "type": "integer",
        "nullable": True,
        "default": None,
        "title": "Priority",
    }
    assert any("inlined $ref" in change for change in order.schema_changes)
    outcome = await tools.call(
        "mcp__fake__place_order", {"order": {"id": 7, "ship_to": {"street": "Elm"}}, "priority": 2}
    )
    assert outcome.text == "order 7 to Elm priority 2"


async def test_stdio_text_and_number_results(make_tools):
    tools = await make_tools({"fake": stdio_server()})
    echo = await tools.call("mcp__fake__echo", '{"text": "hello there"}')
    assert (echo.text, echo.outcome, echo.server, echo.tool) == ("hello there", "ok", "fake", "echo")
    added = await tools.call("mcp__fake__add", {"a": 2, "b": 40})
    assert added.text == "42" and not added.is_error


async def test_an_image_is_an_attachment_and_an_image_part_only_when_the_model_can_see(make_tools):
    seeing = await make_tools({"fake": stdio_server()}, vision=True)
    blind = await make_tools({"fake": stdio_server()}, vision=False)
    shown = await seeing.call("mcp__fake__pixel", {})
    kept = await blind.call("mcp__fake__pixel", {})
    for outcome in (shown, kept):
        assert [(a.data, a.mime) for a in outcome.attachments] == [(PIXEL_PNG, "image/png")]
    data_url = "data:image/png;base64," + base64.b64encode(PIXEL_PNG).decode()
    assert shown.image_parts == [{"type": "image_url", "image_url": {"url": data_url}}]
    assert kept.image_parts == [] and "kept as an attachment" in kept.text


async def test_a_tool_error_is_a_result_that_says_so(make_tools):
    tools = await make_tools({"fake": stdio_server()})
    outcome = await tools.call("mcp__fake__fail", {"message": "the order is locked"})
    assert outcome.outcome == "error" and outcome.is_error
    assert outcome.text.startswith("error: fake.fail reported a failure") and "the order is locked" in outcome.text


async def test_a_huge_result_is_cut_with_a_note(make_tools):
    tools = await make_tools({"fake": stdio_server()}, max_result_chars=1000)
    outcome = await tools.call("mcp__fake__huge", {"chars": 5000})
    assert outcome.text.startswith("x" * 1000) and "[... cut: 4000 more characters" in outcome.text
    assert outcome.outcome == "ok"


async def test_unknown_tools_and_bad_arguments_are_results_not_exceptions(make_tools):
    tools = await make_tools({"fake": stdio_server()})
    assert (await tools.call("mcp__fake__nope", {})).outcome == "unknown_tool"
    bad = await tools.call("mcp__fake__echo", "{not json")
    assert bad.outcome == "bad_arguments" and "not valid JSON" in bad.text
    invalid = await tools.call("mcp__fake__add", {"a": "two"})  # the server refuses the arguments
    assert invalid.is_error and invalid.text.startswith("error:")


async def test_allow_list_exclusions_and_approval_shape_what_is_offered(make_tools):
    tools = await make_tools(
        {
            "only": stdio_server(tools=["echo", "count"], require_approval=["count"]),
            "most": stdio_server(exclude_tools=["sleep_forever"], require_approval=True, idempotent=True),
        }
    )
    only = {t.tool: t for t in tools.tools() if t.server == "only"}
    assert set(only) == {"echo", "count"}
    assert only["count"].requires_approval and not only["echo"].requires_approval
    most = [t for t in tools.tools() if t.server == "most"]
    assert "sleep_forever" not in {t.tool for t in most} and all(t.requires_approval and t.idempotent for t in most)
    assert tools.specs(allowed=lambda t: not t.requires_approval) == [tools.get("mcp__only__echo").spec()]


async def test_one_call_reaches_the_server_once(make_tools, tmp_path):
    counter = tmp_path / "calls.txt"
    tools = await make_tools({"fake": stdio_server(counter)})
    assert (await tools.call("mcp__fake__count", {"label": "a"})).text == "counted a"
    assert counter.read_text().splitlines() == ["a"]


async def test_streamable_http_round_trip(make_tools, http_server):
    url, _, counter = http_server
    tools = await make_tools({"remote": {"url": url, "headers": {"X-Test": "yes"}}})
    assert tools.states()["remote"].state == "ready" and tools.states()["remote"].transport == "http"
    assert (await tools.call("mcp__remote__echo", {"text": "over http"})).text == "over http"
    assert (await tools.call("mcp__remote__header", {"name": "X-Test"})).text == "yes"
    assert (await tools.call("mcp__remote__count", {"label": "h"})).text == "counted h"
    assert counter.read_text().splitlines() == ["h"]
    image = await tools.call("mcp__remote__pixel", {})
    assert image.attachments[0].data == PIXEL_PNG


def test_importing_tools_mcp_without_servers_does_not_load_the_sdk():
    code = (
        "import asyncio, sys\n"
        "from tools.mcp import McpTools, McpSettings\n"
        "tools = McpTools(McpSettings())\n"
        "asyncio.run(tools.start())\n"
        "print(tools.specs(), tools.states(), 'mcp' in sys.modules, 'mcp_types' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "{}", "False", "False"]


async def test_a_turn_waits_for_tools_being_listed_and_close_ends_the_server():
    tools = McpTools(settings({"fake": stdio_server()}))
    await tools.start()
    assert tools.specs() == [] and tools.states()["fake"].state == "starting"
    await tools.wait_ready(timeout=30)
    assert "mcp__fake__echo" in {s["function"]["name"] for s in tools.specs()}
    pid = int((await tools.call("mcp__fake__pid", {})).text)
    await tools.close()
    assert tools.states()["fake"].state == "closed" and tools.specs() == []
    assert (await tools.call("mcp__fake__echo", {"text": "late"})).outcome == "unknown_tool"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
