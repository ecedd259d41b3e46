"""Traces over OTLP, measured from outside: a real `chinwag run` in Telegram webhook mode against the
Telegram and model fakes, exporting to a fake collector on 127.0.0.1 that decodes what it gets with
opentelemetry-proto. One message is one trace, parented as gateway.telemetry draws it, with the
GenAI attributes; a streamed reply with tool calls (recall, an MCP server's tool); a reply sent by
the next process after a crash between its commit and its send. Not one exported byte holds the
message's text, a secret-shaped string in it, or a configured secret. Telemetry off imports
neither the SDK nor an exporter."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.cli.test_cli_run import ROOT, clean_env
from tests.fakes.daemon import Daemon
from tests.fakes.loopback import wait_until
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.otlp_collector import FakeCollector, Span
from tests.fakes.telegram_server import FakeTelegram
from tests.runtime.test_delivery_crash import SECRET, WEBHOOK, post_until_acknowledged, telegram_platform
from tests.tools.mcp.conftest import stdio_server

pytestmark = pytest.mark.slow  # daemons started as subprocesses; CI runs it

KNOWN = "quokka-7731-zebra"  # a word only the person's message holds
SECRET_SHAPED = "sk-proj-4fQ9xT2mZ8vL1kR7pW3nB6yH0cJ5dG"  # what a person might paste by mistake


def traced(tmp: Path, llm: FakeOpenAI, tg: FakeTelegram, collector: FakeCollector, **kw: object) -> Daemon:
    """A daemon exporting to `collector` (spans within 50 ms; metrics only when it stops)."""
    sections = {"telemetry": {"otlp_endpoint": collector.url}, "logging": {"format": "json"}}
    daemon = Daemon(tmp, llm, telegram_platform(tg), sections=sections, **kw)  # type: ignore[arg-type]
    daemon.env.update(OTEL_BSP_SCHEDULE_DELAY="50", OTEL_METRIC_EXPORT_INTERVAL="600000", OTEL_SERVICE_NAME="cw-test")
    return daemon


def update(tg: FakeTelegram, update_id: int, text: str, chat: int = 501) -> dict:
    user = FakeTelegram.user(chat, "Ann")
    return {"update_id": update_id, "message": tg.make_message(tg.private_chat(user), user, text, auto_entities=False)}


def only(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def test_one_webhook_message_is_one_trace_and_no_text_or_secret_is_exported(tmp_path: Path) -> None:
    tg = await FakeTelegram().start()
    try:
        async with FakeCollector() as collector, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemon = traced(tmp_path, llm, tg, collector)
            await daemon.start()
            text = f"please keep {KNOWN} and my key {SECRET_SHAPED}"
            first = update(tg, 7001, text)
            await post_until_acknowledged(http, daemon.url(WEBHOOK), first, [])
            await wait_until(lambda: [m for m in tg.sent() if KNOWN in m["text"]], 30)  # "echo: ..." answered
            await post_until_acknowledged(http, daemon.url(WEBHOOK), first, [])  # Telegram sends it again
            await wait_until(
                lambda: len(collector.named("chinwag.inbound")) == 2 and collector.named("chinwag.turn"), 30
            )
            assert await daemon.terminate() == 0

        inbound, duplicate = sorted(collector.named("chinwag.inbound"), key=lambda s: s.start_ns)
        spans = collector.trace(inbound.trace_id)
        assert {s.service for s in collector.spans} == {"cw-test"}
        assert inbound.parent_id == ""
        assert inbound.attributes == {
            "messaging.system": "telegram",
            "chinwag.chat_type": "dm",
            "chinwag.duplicate": False,
        }
        queue, turn = only(spans, "chinwag.queue"), only(spans, "chinwag.turn")
        assert queue.parent_id == turn.parent_id == inbound.span_id
        assert queue.end_ns <= turn.start_ns
        assert turn.attributes["chinwag.job"] == "turn" and turn.attributes["chinwag.outcome"] == "answered"
        assert turn.attributes["chinwag.session_id"]
        chat = only(spans, "chat fake-model")
        assert chat.parent_id == turn.span_id
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "fake-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0 and chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"] == ["stop"]
        assert 0 <= chat.attributes["chinwag.time_to_first_token_ms"] <= chat.duration_ms
        sends = [s for s in spans if s.name == "chinwag.send"]
        assert sends and all(s.parent_id == turn.span_id for s in sends)
        assert sum(s.attributes["chinwag.parts"] for s in sends) >= 1
        assert all(
            s.attributes["chinwag.retries"] == 0 and s.attributes["messaging.system"] == "telegram" for s in sends
        )
        # the redelivery is a trace of its own, refused at the inbox: no queue, no turn
        assert duplicate.attributes["chinwag.duplicate"] is True
        assert [s.name for s in collector.trace(duplicate.trace_id)] == ["chinwag.inbound"]
        assert len(collector.named("chinwag.turn")) == 1

        # the metrics, flushed by the graceful stop (the periodic export is 10 minutes away)
        assert {"chinwag_messages_in", "chinwag_duplicates", "chinwag_turn_seconds"} <= set(collector.metric_names)
        assert not [name for name in collector.metric_names if name.endswith("_total")]

        exported = b"".join(collector.bodies)
        for never in (KNOWN, SECRET_SHAPED, tg.token, SECRET, "please keep", "echo:"):
            assert never.encode() not in exported, never

        # the JSON log line written inside the duplicate's span carries its trace
        lines = [json.loads(line) for line in daemon.logs[-1].read_text().splitlines() if line.startswith("{")]
        [refused] = [line for line in lines if line["msg"].startswith("duplicate delivery")]
        assert refused["trace_id"] == duplicate.trace_id and refused["span_id"] == duplicate.span_id
    finally:
        await tg.stop()


async def test_a_streamed_reply_with_tool_calls(tmp_path: Path) -> None:
    tg = await FakeTelegram().start()
    try:
        async with FakeCollector() as collector, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            calls = [ToolCall("session_search", {"query": "quokka"}), ToolCall("mcp__fake__add", {"a": 2, "b": 3})]
            llm.push(Reply(tool_calls=calls), Reply("the sum is 5", chunk_delay=0.02))
            daemon = traced(tmp_path, llm, tg, collector, mcp={"servers": {"fake": stdio_server()}})
            await daemon.start()
            await post_until_acknowledged(http, daemon.url(WEBHOOK), update(tg, 7101, "add two and three"), [])
            await wait_until(lambda: [m for m in tg.sent() if m["text"] == "the sum is 5"], 60)
            assert await daemon.terminate() == 0

        turn = only(collector.spans, "chinwag.turn")
        spans = collector.trace(turn.trace_id)
        chats = sorted((s for s in spans if s.name == "chat fake-model"), key=lambda s: s.start_ns)
        assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [["tool_calls"], ["stop"]]
        assert all(c.parent_id == turn.span_id and "chinwag.time_to_first_token_ms" in c.attributes for c in chats)
        assert chats[1].attributes["chinwag.time_to_first_token_ms"] < chats[1].duration_ms  # streamed in pieces
        search, add = only(spans, "execute_tool session_search"), only(spans, "execute_tool mcp__fake__add")
        assert search.parent_id == add.parent_id == turn.span_id
        assert (
            search.attributes["gen_ai.tool.name"] == "session_search" and search.attributes["chinwag.outcome"] == "ok"
        )
        assert (
            add.attributes["chinwag.mcp_server"] == "fake" and add.attributes["gen_ai.operation.name"] == "execute_tool"
        )
        recall = only(spans, "chinwag.recall")
        assert recall.parent_id == search.span_id
        assert recall.attributes["chinwag.recall.sessions"] == 0 and "chinwag.recall.candidates" in recall.attributes
        sends = [s for s in spans if s.name == "chinwag.send"]
        assert sends and all(s.parent_id == turn.span_id for s in sends)
        assert chats[0].end_ns <= search.start_ns and add.end_ns <= chats[1].start_ns  # the timeline, in order
    finally:
        await tg.stop()


def outbox_rows(tmp: Path) -> int:
    path = tmp / "home" / "state.db"
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
    except sqlite3.OperationalError:  # not made yet
        return 0
    finally:
        conn.close()


async def test_a_reply_sent_after_a_crash_is_a_new_root_linked_to_its_trace_and_counts_rate_limit_waits(
    tmp_path: Path,
) -> None:
    tg = await FakeTelegram().start()
    try:
        async with FakeCollector() as collector, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
            daemon = traced(tmp_path, llm, tg, collector, streaming="off")
            await daemon.start()
            tg.fail("sendmessage", "hang", times=100)  # the reply is committed, its send never answered
            await post_until_acknowledged(http, daemon.url(WEBHOOK), update(tg, 7201, "hello there"), [])
            await wait_until(lambda: outbox_rows(tmp_path) == 1 and tg.calls_to("sendMessage"), 30)
            await wait_until(lambda: collector.named("chinwag.inbound"), 30)
            await daemon.kill()
            tg.failures.clear()
            tg.fail("sendmessage", "retry_after", retry_after=1)  # the next start's send is held back once
            await daemon.start()
            await wait_until(lambda: [m for m in tg.sent() if m["text"] == "echo: hello there"], 30)
            assert await daemon.terminate() == 0

        inbound = only(collector.spans, "chinwag.inbound")
        redelivery = only(collector.spans, "chinwag.redelivery")
        assert redelivery.parent_id == "" and redelivery.trace_id != inbound.trace_id
        assert redelivery.links == [inbound.trace_id]
        sends = [s for s in collector.trace(redelivery.trace_id) if s.name == "chinwag.send"]
        assert len(sends) == 1 and sends[0].parent_id == redelivery.span_id
        assert sends[0].attributes["chinwag.parts"] == 1
        assert sends[0].attributes["chinwag.rate_limit_waits"] == 1
        assert sends[0].attributes["chinwag.rate_limit_wait_ms"] == 1000
    finally:
        await tg.stop()


OFF_OR_ON = """
import asyncio, json, sys
from pathlib import Path
from tests.fakes.gateway_harness import Gateway

async def main() -> None:
    async with Gateway(Path(sys.argv[1])) as gw:
        replies = await gw.say("hello")
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    print(json.dumps({"replies": replies, "loaded": loaded}))

asyncio.run(main())
"""


async def run_gateway(tmp: Path, **env: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OFF_OR_ON,
        str(tmp),
        cwd=ROOT,
        env={k: v for k, v in clean_env(tmp, **env).items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT" or env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().splitlines()[-1])


async def test_off_imports_neither_the_sdk_nor_an_exporter(tmp_path: Path) -> None:
    off = await run_gateway(tmp_path / "off")
    assert off["replies"] == ["echo: hello"]
    assert not [m for m in off["loaded"] if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))]
    async with FakeCollector() as collector:  # the same, on: the test can fail
        on = await run_gateway(tmp_path / "on", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url)
        assert on["replies"] == ["echo: hello"]
        assert {"opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"} <= set(on["loaded"])
        assert collector.named("chinwag.turn")
