"""Streaming benchmark: how soon a person sees the answer, streaming on vs off, in the same run.

    python -m bench.streaming [--seconds 6] [--turns 5] [--chats 20] [--rounds 5]

The whole gateway (build_runner: the real runner, turn runner, agent loop and `openai` client,
SQLite on a temp dir) with each real adapter against its fake platform on 127.0.0.1 (Telegram,
Discord, Feishu; the terminal adapter on a pipe), and the fake model over HTTP writing a reply that
takes `--seconds` to stream (SSE, a chunk every few ms). Per platform and mode, `--turns` turns:
- first visible: from the person's message to the first text on the platform fake;
- after first token: from the model's first token to that first text (streaming only; the rest is
  the platform's first-send rule: a sentence, or 1 s of text);
- done: from the message to the last model chunk.
Then throughput: `--chats` chats at once, each one short answer (no delay), on the Telegram fake,
turns per second per mode, the median of `--rounds` interleaved rounds (one round takes ~0.2 s, so
a single one is mostly noise), with the platform calls each mode made. Modes: "on" (4-character SSE
chunks, read by agent.llm's own event-stream reader), "on, SDK chunks" (the same stream read through
the SDK's typed iterator, a pydantic `ChatCompletionChunk` per chunk, as agent.llm did before: the
baseline of that change, measured in the same run, `sdk_chunks` below, never a setting), "on, one
chunk" (the whole answer in one SSE chunk: the gateway's streaming machinery alone) and "off".
Beside turns/s, this process's CPU ms per turn. The model answering these turns runs in a process
of its own: a model is another machine, and its serving cost per chunk (json and a socket write,
~15 us) is not the gateway's; `--model-here` serves it from this process, where that is counted too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import multiprocessing
import statistics
import tempfile
import time
import uuid
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from aiohttp import web

import agent.llm
from agent.llm import Completion, OnDelta
from bench.stats import percentile
from gateway.db import SessionDB
from gateway.service.app import build_runner
from platforms.discord.adapter import DiscordAdapter
from platforms.feishu.adapter import FeishuAdapter
from platforms.local import LocalAdapter
from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.gateway_harness import build_store, make_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram

TEXT = (
    "Here is the plan, step by step. First read the logs and find the failing request. Then check "
    "the configuration for the staging host. After that, run the deploy script in dry-run mode. "
)


class Timed(FakeOpenAI):
    """The fake model, noting when each streamed reply wrote its first token."""

    def __init__(self) -> None:
        super().__init__()
        self.first_token: list[float] = []

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Any) -> web.StreamResponse:
        self.first_token.append(time.monotonic())  # the role chunk and first text go out at once
        return await super()._stream(request, body, reply)


async def until(predicate: Callable[[], Any], timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.002)
    return time.monotonic()


class Platform:
    """One platform fake + adapter section, and how to see the bot's first text and to say something."""

    name: str

    async def start(self) -> dict[str, Any]: ...
    async def stop(self) -> None: ...
    def adapter(self, section: dict[str, Any]) -> Any: ...
    def visible(self, turn: int) -> bool: ...
    async def say(self, turn: int) -> None: ...


class TelegramP(Platform):
    name = "telegram"

    async def start(self) -> dict[str, Any]:
        self.fake = await FakeTelegram().start()
        self.fake.private_chat(FakeTelegram.user(42, "Ann"))
        return {"token": self.fake.token, "base_url": self.fake.base_url, "poll_timeout": 1, "allowed_users": ["*"]}

    async def stop(self) -> None:
        await self.fake.stop()

    def adapter(self, section: dict[str, Any]) -> Any:
        return TelegramAdapter(section)

    def visible(self, turn: int) -> bool:
        return len(self.fake.calls_to("sendMessage")) > turn

    async def say(self, turn: int) -> None:
        user = FakeTelegram.user(42, "Ann")
        self.fake.push_message(self.fake.chats[42], user, f"question {turn}")


class DiscordP(Platform):
    name = "discord"

    async def start(self) -> dict[str, Any]:
        self.fake = FakeDiscord(heartbeat_interval_ms=5000)
        self.fake.add_dm(700, self.fake.user(11, "ann"))
        await self.fake.start()
        f = self.fake
        return {
            "token": f.token,
            "api_base": f.api_base,
            "gateway_url": f.gateway_url,
            "guild_ready_timeout": 0.05,
            "allowed_users": ["*"],
        }

    async def stop(self) -> None:
        await self.fake.stop()

    def adapter(self, section: dict[str, Any]) -> Any:
        return DiscordAdapter(section)

    def visible(self, turn: int) -> bool:
        return len(self.fake.sent) > turn

    async def say(self, turn: int) -> None:
        await self.fake.user_says(700, self.fake.user(11, "ann"), f"question {turn}")


class FeishuP(Platform):
    name = "feishu"

    async def start(self) -> dict[str, Any]:
        self.fake = FakeFeishu(app_id=f"cli_{uuid.uuid4().hex[:10]}", app_secret="s")
        await self.fake.start()
        return {
            "app_id": self.fake.app_id,
            "app_secret": "s",
            "domain": self.fake.base_url,
            "allowed_users": ["*"],
            "reaction": "",
        }

    async def stop(self) -> None:
        await self.fake.stop()

    def adapter(self, section: dict[str, Any]) -> Any:
        return FeishuAdapter(section)

    def visible(self, turn: int) -> bool:
        return len(self.fake.sent) > turn

    async def say(self, turn: int) -> None:
        await self.fake.push_event(self.fake.message_event(f"question {turn}", chat_id="oc_dm1", chat_type="p2p"))


class LocalP(Platform):
    name = "local"

    async def start(self) -> dict[str, Any]:
        self.out = io.StringIO()
        self.marks: list[int] = []
        return {}

    async def stop(self) -> None:
        pass

    def adapter(self, section: dict[str, Any]) -> Any:
        self.local = LocalAdapter({"user": "ann"}, input=io.StringIO(""), output=self.out)
        return self.local

    def visible(self, turn: int) -> bool:
        return len(self.out.getvalue()) > self.marks[turn]

    async def say(self, turn: int) -> None:
        from platforms.base import InboundMessage

        self.marks.append(len(self.out.getvalue()))
        await self.on_message(InboundMessage(self.local.source, f"question {turn}", f"b-{uuid.uuid4().hex}"))


async def measure(platform: Platform, streaming: bool, args: argparse.Namespace) -> dict[str, list[float]]:
    section = await platform.start()
    out: dict[str, list[float]] = {"visible": [], "after_token": [], "done": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with Timed() as llm:
            text = TEXT * 2
            if streaming:
                llm.chunk_delay = args.seconds / max(1, len(text) // llm.chunk_size)
            else:
                llm.delay = args.seconds  # the same model, answering all at once after writing
            platforms = {platform.name: section} if section else {}
            config = make_config(Path(tmp) / "home", llm, platforms, model_options={"timeout_seconds": 60})
            db = SessionDB(config.db_path)
            adapter = platform.adapter(config.adapter_config(platform.name) if section else {})
            runner = build_runner(config, db, build_store(config, db), [adapter])
            runner.outbound.streaming[platform.name] = streaming
            if isinstance(platform, LocalP):
                platform.on_message = runner.handle_inbound  # type: ignore[attr-defined]
            await runner.start()
            try:
                await asyncio.sleep(0.5)  # connections settle
                for turn in range(args.turns):
                    await asyncio.sleep(1.0)  # the person reads the answer before asking again
                    llm.push(text)
                    began = time.monotonic()
                    await platform.say(turn)
                    seen = await until(lambda: platform.visible(turn))
                    await until(lambda: llm.streams_done > turn or (not streaming and len(llm.requests) > turn))
                    await asyncio.wait_for(runner.drain(), 30)
                    done = time.monotonic()
                    out["visible"].append(seen - began)
                    out["done"].append(done - began)
                    if streaming and llm.first_token[turn:]:
                        out["after_token"].append(seen - llm.first_token[turn])
            finally:
                await runner.stop(timeout=5)
                db.close()
    await platform.stop()
    return out


async def sdk_chunks(client: Any, kwargs: dict[str, Any], on_delta: OnDelta) -> Completion:
    """The baseline reader: the SDK's typed stream, one pydantic chunk object per SSE event (what
    agent.llm._complete_streaming did before it read the events itself); the same Completion."""
    stream = await client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, prompt_tokens, completion_tokens = None, 0, 0
    try:
        async for chunk in stream:
            if chunk.usage:
                prompt_tokens, completion_tokens = chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                if choice.delta.content:
                    text.append(choice.delta.content)
                    await on_delta(choice.delta.content)
                for call in choice.delta.tool_calls or []:
                    slot = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = call.id or slot["id"]
                    if call.function is not None:
                        slot["name"] += call.function.name or ""
                        slot["arguments"] += call.function.arguments or ""
    finally:
        await stream.close()
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"] or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in sorted(calls.items())
        ]
    return Completion(message, prompt_tokens, completion_tokens, finish)


ANSWER = "Done. " + "The answer is short and written in one go. " * 3  # 37 SSE chunks of 4 characters


class FixedModel(FakeOpenAI):
    """The fake model answering every request with ANSWER (nothing to queue from another process)."""

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        return Reply(text=ANSWER)


def _serve_model(conn: Connection, chunk_size: int) -> None:
    """Child process: serve FixedModel on 127.0.0.1, send its base URL, stop when told."""

    async def serve() -> None:
        async with FixedModel() as llm:
            llm.chunk_size = chunk_size
            conn.send(llm.base_url)
            await asyncio.to_thread(conn.recv)

    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    asyncio.run(serve())


@contextlib.asynccontextmanager
async def model_at(chunk_size: int, own_process: bool) -> AsyncIterator[str]:
    """The base URL of a FixedModel streaming `chunk_size`-character chunks: in a process of its own
    (a model is another machine; its serving cost, ~15 us a chunk, is not the gateway's), or here."""
    if not own_process:
        async with FixedModel() as llm:
            llm.chunk_size = chunk_size
            yield llm.base_url
        return
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    child = spawn.Process(target=_serve_model, args=(theirs, chunk_size), daemon=True)
    child.start()
    try:
        if not await asyncio.to_thread(ours.poll, 60):
            raise RuntimeError("the model process did not start")
        yield ours.recv()
    finally:
        ours.send("stop")
        await asyncio.to_thread(child.join, 10)
        if child.is_alive():
            child.terminate()


async def throughput(
    streaming: bool, chats: int, model_url: str, sdk_reader: bool = False
) -> tuple[float, float, Counter[str]]:
    """Turns per second for `chats` short answers at once, CPU ms per turn (this process: the
    gateway and the platform fake, the same fake in every mode) and the platform calls made."""
    own_reader = agent.llm._complete_streaming
    if sdk_reader:
        agent.llm._complete_streaming = sdk_chunks  # the baseline only, for this round
    try:
        return await _throughput(streaming, chats, model_url)
    finally:
        agent.llm._complete_streaming = own_reader


async def _throughput(streaming: bool, chats: int, model_url: str) -> tuple[float, float, Counter[str]]:
    fake = await FakeTelegram().start()
    section = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1, "allowed_users": ["*"]}
    model = {"base_url": model_url, "api_key": "k", "name": "fake-model", "timeout_seconds": 30}
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(Path(tmp) / "home", None, {"telegram": section}, model=model)
        db = SessionDB(config.db_path)
        runner = build_runner(config, db, build_store(config, db), [TelegramAdapter(section)])
        runner.outbound.streaming["telegram"] = streaming
        await runner.start()
        try:
            await asyncio.sleep(0.3)
            before = len(fake.calls)
            began, cpu = time.monotonic(), time.process_time()
            for i in range(chats):
                user = FakeTelegram.user(1000 + i, f"u{i}")
                fake.push_message(fake.private_chat(user), user, "go")
            await until(lambda: len({c.params.get("chat_id") for c in fake.calls_to("sendMessage")}) >= chats, 60)
            await asyncio.wait_for(runner.drain(), 60)
            elapsed, cpu = time.monotonic() - began, time.process_time() - cpu
            calls = Counter(c.method for c in fake.calls[before:] if c.method != "getUpdates")
        finally:
            await runner.stop(timeout=5)
            db.close()
    await fake.stop()
    return chats / elapsed, cpu * 1000 / chats, calls


async def main_async(args: argparse.Namespace) -> None:
    print(f"model writes for {args.seconds:.1f} s; {args.turns} turns per platform and mode (seconds)")
    print(f"{'platform':9} {'mode':6} {'first visible p50/p99':>22} {'after 1st token p50/p99':>24} {'done p50':>9}")
    for factory in (TelegramP, DiscordP, FeishuP, LocalP):
        for streaming in (True, False):
            r = await measure(factory(), streaming, args)
            after = (
                f"{percentile(r['after_token'], 0.5):.2f} / {percentile(r['after_token'], 0.99):.2f}"
                if streaming
                else "-"
            )
            print(
                f"{factory.name:9} {'on' if streaming else 'off':6} "
                f"{percentile(r['visible'], 0.5):10.2f} / {percentile(r['visible'], 0.99):.2f}   {after:>22} {percentile(r['done'], 0.5):9.2f}"
            )
    modes = {  # (streaming, chunk size, the SDK's typed reader)
        "on": (True, 4, False),
        "on, SDK chunks": (True, 4, True),
        "on, one chunk": (True, 1_000_000, False),
        "off": (False, 4, False),
    }
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    cpus: dict[str, list[float]] = {mode: [] for mode in modes}
    calls: dict[str, Counter[str]] = {mode: Counter() for mode in modes}
    async with contextlib.AsyncExitStack() as models:
        urls = {size: await models.enter_async_context(model_at(size, not args.model_here)) for size in (4, 1_000_000)}
        for _round in range(args.rounds):  # interleaved, so a busy moment of the machine hits every mode
            for mode, (streaming, chunk_size, sdk_reader) in modes.items():
                rate, cpu, made = await throughput(streaming, args.chats, urls[chunk_size], sdk_reader)
                rates[mode].append(rate)
                cpus[mode].append(cpu)
                calls[mode] += made
    off, off_cpu = statistics.median(rates["off"]), statistics.median(cpus["off"])
    where = "in this process" if args.model_here else "in its own process"
    print(f"throughput, {args.chats} chats at once (telegram fake; the model {where}), median of {args.rounds} rounds:")
    for mode in modes:
        rate, cpu = statistics.median(rates[mode]), statistics.median(cpus[mode])
        shown = ", ".join(f"{n / args.rounds:.1f} {method}" for method, n in sorted(calls[mode].items()))
        print(
            f"  {mode:15} {rate:6.1f} turns/s ({rate / off:.2f}x of off)  {cpu:5.2f} CPU ms/turn "
            f"({cpu / off_cpu:.2f}x)   calls per round: {shown}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model-here", action="store_true", help="throughput: the model in this process")
    logging.basicConfig(level=logging.ERROR)
    # a fake's request cut off as the gateway stops (a long poll) is no finding of this benchmark
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
