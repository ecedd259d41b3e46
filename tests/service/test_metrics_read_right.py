"""The ops metrics read right on a dashboard (issue 15.26-27): model errors counted, the queue
gauge counts only what waits, commands timed apart from turns, counters at 0 before any event."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fakes.gateway_harness import Gateway
from tests.fakes.openai_server import Reply


def sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


async def test_counters_have_a_zero_sample_before_the_first_event(tmp_path: Path) -> None:
    async with Gateway(tmp_path) as gw:
        text = gw.app.metrics.render()
        for name in ("messages_in_total", "messages_out_total", "duplicates_total"):
            assert sample(text, f'chinwag_{name}{{platform="telegram"}}') == 0, name
        assert sample(text, "chinwag_model_errors_total") == 0


async def test_a_failed_model_call_is_counted(tmp_path: Path) -> None:
    async with Gateway(tmp_path) as gw:
        gw.fake.push(Reply(status=400, error="bad request"))  # not retried: one failed call
        replies = await gw.say("hello")
        assert replies and "Sorry" in replies[0]
        assert sample(gw.app.metrics.render(), "chinwag_model_errors_total") == 1
        assert await gw.say("again") == ["echo: again"]
        assert sample(gw.app.metrics.render(), "chinwag_model_errors_total") == 1


async def test_queue_depth_counts_only_waiting_messages(tmp_path: Path) -> None:
    async with Gateway(tmp_path) as gw:
        gw.fake.gate = asyncio.Event()
        await gw.adapter.inject("first")
        await gw.fake.wait_requests(1)
        assert sample(gw.app.metrics.render(), "chinwag_queue_depth") == 0  # running, not waiting
        await gw.adapter.inject("second")
        await asyncio.sleep(0.05)
        assert sample(gw.app.metrics.render(), "chinwag_queue_depth") == 1
        gw.fake.gate.set()
        await gw.runner.drain()
        assert sample(gw.app.metrics.render(), "chinwag_queue_depth") == 0


async def test_commands_are_timed_apart_from_turns(tmp_path: Path) -> None:
    async with Gateway(tmp_path) as gw:
        await gw.say("/help")
        await gw.say("/status")
        await gw.say("a question")
        text = gw.app.metrics.render()
        assert sample(text, "chinwag_command_seconds_count") == 2
        assert sample(text, "chinwag_turn_seconds_count") == 1
        assert "# HELP chinwag_turn_seconds Wall time of one agent turn" in text
        assert "or command" not in text
