"""Gateway benchmark: N chats x M messages through the real GatewayRunner.

    python bench/gateway.py [--chats 1000] [--messages 20] [--known 10000] [--cache 64] [--mode both]

Everything is the production path — SessionDB (WAL, group commit) on a temp dir, mirrors (JSONL +
sessions.json), SessionStore with the default reset policy, GatewayRunner with its lanes, agent
cache (at its bound: far fewer slots than chats) and the real agent loop — except the platform (an
in-memory adapter) and the model:

- `instant`: the agent's model call returns at once (an `Agent` subclass overriding `_call`), so
  the whole latency is what the gateway adds.
- `http`: the real `openai` client against FakeOpenAI on 127.0.0.1 (in this process, so its
  serving cost shares the CPU). The model round trip of each message is measured around the
  agent's `_call` and subtracted to get the time the gateway adds.

Each chat is a closed loop (send, wait for the reply, send the next), all chats at once, so a
message's latency is processing, not queueing behind its own chat. Before the runs, `--known`
sessions with key entries are created, and the store's raw append rate is measured on the same
DB: concurrent `aappend_message` (group commit) and one-at-a-time `append_message`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.llm import Completion, ModelSettings  # noqa: E402
from agent.loop import Agent  # noqa: E402
from gateway.agent_factory import AgentFactory, default_tools  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from gateway.db import SessionDB, new_session_id  # noqa: E402
from gateway.mirrors import Mirrors  # noqa: E402
from gateway.runner import GatewayRunner  # noqa: E402
from gateway.source import Platform, SessionSource  # noqa: E402
from gateway.store import SessionStore  # noqa: E402
from platforms.base import InboundMessage, PlatformAdapter  # noqa: E402

MODEL_TIME: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("model_time", default=None)


class InstantAgent(Agent):
    """The real agent loop with a model that answers instantly."""

    async def _call(self, conversation: list[dict[str, Any]], schemas: Any) -> Completion:
        text = conversation[-1].get("content") or ""
        return Completion({"role": "assistant", "content": "ok: " + text[:40]}, 0, 0, "stop")


SPENT: dict[str, float] = {}  # chat id -> model time of its last turn


class TimedAgent(Agent):
    """The real agent over HTTP; the model round trips of a turn are summed into SPENT[chat]."""

    async def run_turn(self, history, user_text, ctx, on_message, steer=None):  # type: ignore[override]
        token = MODEL_TIME.set([])
        try:
            return await super().run_turn(history, user_text, ctx, on_message, steer)
        finally:
            SPENT[ctx.source.chat_id] = sum(MODEL_TIME.get() or [])
            MODEL_TIME.reset(token)

    async def _call(self, conversation: list[dict[str, Any]], schemas: Any) -> Completion:
        started = time.perf_counter()
        try:
            return await super()._call(conversation, schemas)
        finally:
            spent = MODEL_TIME.get()
            if spent is not None:
                spent.append(time.perf_counter() - started)


class BenchAdapter(PlatformAdapter):
    """Delivers messages to the runner and wakes the chat's waiter when the reply is sent."""

    platform = Platform.TELEGRAM
    max_message_length = 4096

    def __init__(self) -> None:
        super().__init__()
        self.on_message: Any = None
        self.waiters: dict[str, asyncio.Future] = {}
        self.model_times: dict[str, list[float]] = {}

    async def start(self, on_message: Any) -> None:
        self.on_message = on_message

    async def stop(self) -> None:
        pass

    async def send(self, source: SessionSource, text: str, reply_to: str | None = None) -> list[str]:
        waiter = self.waiters.pop(source.chat_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(text)
        return ["x"]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def precreate(db: SessionDB, known: int) -> None:
    """`known` sessions of other chats, each with a key entry and a message (one transaction)."""
    now = time.time()
    records = []
    for i in range(known):
        sid = new_session_id(now - known + i)
        records.append({
            "session": {"id": sid, "source": "telegram", "user_id": f"k{i}", "session_key":
                        f"agent:main:telegram:dm:k{i}", "started_at": now - 3600, "title": None},
            "messages": [{"role": "user", "content": f"old message {i} about topic {i % 97}",
                          "timestamp": now - 3600}],
        })
    db.import_records(records)

    def keys(conn, events) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO session_keys (session_key, session_id, origin, created_at, updated_at, reason) "
            "VALUES (?, ?, NULL, ?, ?, 'created')",
            [(r["session"]["session_key"], r["session"]["id"], now, now) for r in records],
        )

    db.write(keys)


async def raw_append_rate(db: SessionDB, chats: int, per_chat: int) -> tuple[float, float]:
    sids = [new_session_id() for _ in range(chats)]
    await asyncio.gather(*(db.acreate_session(s, "tool") for s in sids))

    async def chat(sid: str) -> None:
        for i in range(per_chat):
            await db.aappend_message(sid, "user", f"raw append {i} for the store's own rate")

    started = time.perf_counter()
    await asyncio.gather(*(chat(s) for s in sids))
    concurrent = chats * per_chat / (time.perf_counter() - started)
    n = 300
    started = time.perf_counter()
    for i in range(n):
        db.append_message(sids[0], "assistant", f"sequential append {i}")
    sequential = n / (time.perf_counter() - started)
    return concurrent, sequential


async def run_mode(mode: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    home = workdir / mode
    fake = None
    if mode == "http":
        from tests.fakes.openai_server import FakeOpenAI

        fake = await FakeOpenAI().__aenter__()
        base_url = fake.base_url
    else:
        base_url = "http://127.0.0.1:9/v1"  # never contacted: InstantAgent answers itself
    config = parse_config({
        "model": {"base_url": base_url, "api_key": "k", "name": "fake-model"},
        "gateway": {"busy_ack": False, "agent_cache": {"max_agents": args.cache, "idle_ttl_minutes": 30}},
        "platforms": {"telegram": {"token": "x", "allowed_users": ["*"]}},
    }, env={}, home_override=home)
    db = SessionDB(home / "state.db")
    mirrors = Mirrors(home, db)
    precreate(db, args.known)
    raw = await raw_append_rate(db, min(args.chats, 1000), 10)
    store = SessionStore(db, config.session.reset_policies())
    settings = ModelSettings.from_config(config.as_dict(), env={})
    factory = AgentFactory(settings, home, default_tools(), max_iterations=4)
    factory.agent_class = InstantAgent if mode == "instant" else TimedAgent
    adapter = BenchAdapter()
    runner = GatewayRunner(config, db, store, [adapter], agent_factory=factory)
    await runner.start()

    latencies: list[float] = []
    gateway_added: list[float] = []
    errors = 0

    async def chat(i: int) -> None:
        nonlocal errors
        source = SessionSource(platform="telegram", chat_id=str(i), chat_type="dm", user_id=str(i))
        for n in range(args.messages):
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            adapter.waiters[source.chat_id] = waiter
            started = time.perf_counter()
            await adapter.on_message(InboundMessage(source, f"message {n} from chat {i}", f"{i}-{n}"))
            reply = await asyncio.wait_for(waiter, 60)
            elapsed = time.perf_counter() - started
            if not reply.startswith(("ok: ", "echo: ")):
                errors += 1
            latencies.append(elapsed)
            gateway_added.append(elapsed - SPENT.pop(source.chat_id, 0.0))

    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(chat(i) for i in range(args.chats)))
    wall = time.perf_counter() - started
    await runner.drain()
    total = args.chats * args.messages
    result = {
        "mode": mode,
        "messages": total,
        "wall": wall,
        "rate": total / wall,
        "p50": pct(latencies, 0.50) * 1000,
        "p99": pct(latencies, 0.99) * 1000,
        "added_p50": pct(gateway_added, 0.50) * 1000,
        "added_p99": pct(gateway_added, 0.99) * 1000,
        "added_mean": statistics.fmean(gateway_added) * 1000,
        "errors": errors,
        "cache": runner.cache_size(),
        "evictions": runner.cache.evictions,
        "agents_built": factory.built,
        "sessions": db.count_sessions(),
        "db_messages": db.count_messages(),
        "commits": db.commit_stats,
        "raw_concurrent": raw[0],
        "raw_sequential": raw[1],
        "rss": rss_mb(),
    }
    await runner.stop()
    mirrors.close()
    db.close()
    if fake is not None:
        await fake.__aexit__(None, None, None)
    return result


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    commits, writes = r["commits"]
    print(f"\n== mode: {r['mode']} ({'model answers instantly' if r['mode'] == 'instant' else 'FakeOpenAI over HTTP on 127.0.0.1'})")
    print(f"   {args.chats} chats x {args.messages} messages = {r['messages']} messages in {r['wall']:.2f} s "
          f"-> {r['rate']:,.0f} messages/s  (errors: {r['errors']})")
    print(f"   latency per message (closed loop): p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms")
    print(f"   time added by the gateway: p50 {r['added_p50']:.2f} ms, p99 {r['added_p99']:.2f} ms, "
          f"mean {r['added_mean']:.2f} ms")
    print(f"   store raw append rate (same DB, same run): {r['raw_concurrent']:,.0f} msg/s concurrent "
          f"(group commit), {r['raw_sequential']:,.0f} msg/s one at a time")
    print(f"   DB: {r['sessions']:,} sessions ({args.known:,} pre-created), {r['db_messages']:,} messages, "
          f"{writes:,} writes in {commits:,} commits ({writes / max(1, commits):.1f} per commit)")
    print(f"   agent cache: {r['cache']} cached (bound {args.cache}), {r['evictions']:,} evictions, "
          f"{r['agents_built']:,} agents built")
    print(f"   peak RSS so far: {r['rss']:.0f} MB")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--known", type=int, default=10_000)
    parser.add_argument("--cache", type=int, default=64)
    parser.add_argument("--mode", choices=("instant", "http", "both"), default="both")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"gateway bench: python {sys.version.split()[0]}, {os.cpu_count()} CPUs; targets: >= 1,000 msg/s, "
          "p99 added <= 20 ms, RSS <= 300 MB")
    modes = ["instant", "http"] if args.mode == "both" else [args.mode]
    with tempfile.TemporaryDirectory(prefix="chinwag-bench-") as tmp:
        for mode in modes:
            report(await run_mode(mode, args, Path(tmp)), args)


if __name__ == "__main__":
    asyncio.run(main())
