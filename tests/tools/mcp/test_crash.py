"""Exactly once across a crash (DESIGN §15), from outside: a real `chinwag run` (tests/fakes/daemon.py)
with the fake MCP server as its stdio child, SIGKILLed while a tool call is running on the server
(the server has recorded the call). The restarted daemon reruns the turn (interrupted_turns:
rerun); the model asks for the same call again; the journal says it was in flight, so a
non-idempotent server is not called again and the model is told "interrupted"; an idempotent one
is called again."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.fakes.daemon import Daemon, settled
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram_server import FakeTelegram
from tests.runtime.test_delivery_crash import WEBHOOK, post_until_acknowledged, telegram_platform, update_for
from tests.tools.mcp.conftest import stdio_server

pytestmark = pytest.mark.slow  # a daemon started twice; CI runs it


def last_tool_result(body: dict) -> str:
    return [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_call_in_flight_at_a_sigkill_is_not_sent_again_unless_idempotent(tmp_path: Path, idempotent: bool):
    counter = tmp_path / "calls.txt"
    server = stdio_server(counter, timeout_seconds=3, idempotent=idempotent)
    tg = await FakeTelegram().start()
    try:
        async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            call = Reply(tool_calls=[ToolCall("mcp__fake__sleep_forever", {})])
            llm.push(call, call, lambda body: "after the crash: " + last_tool_result(body))
            daemon = Daemon(tmp_path, llm, telegram_platform(tg), mcp={"servers": {"fake": server}})
            await daemon.start()
            update, _ = update_for(tg, 3000, 0)
            await post_until_acknowledged(http, daemon.url(WEBHOOK), update, [])

            def calls() -> list[str]:
                return counter.read_text().split() if counter.exists() else []

            await wait_until(lambda: calls() == ["sleeping"], 60)  # the server runs the call
            await daemon.kill()
            await daemon.start()
            answers = await wait_until(lambda: [m["text"] for m in tg.sent() if "after the crash" in m["text"]], 60)
            await wait_until(lambda: settled(tmp_path), 30)
            assert len(answers) == 1
            if idempotent:
                assert calls() == ["sleeping", "sleeping"]  # sent again; it timed out this time
                assert "timed out" in answers[0]
            else:
                assert calls() == ["sleeping"]  # never sent twice
                assert "interrupted: fake.sleep_forever" in answers[0] and "may or may not have run" in answers[0]
            assert await daemon.terminate() == 0
    finally:
        await tg.stop()
